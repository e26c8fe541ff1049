"""GEMM tile: ``y = requant(x @ w)`` on the systolic array, with stream interfaces."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.requant import Requant, load_layout
from hw.row_assembler import RowAssembler
from hw.row_sequencer import RowSequencer
from hw.systolic_array import SystolicArray, weight_layout
from sw.config import TileConfig

__all__ = ["GemmTile"]


class GemmTile(wiring.Component):
    """int8 x int8 -> int32 -> requant -> int8 GEMM tile, the start of the MLP core.

    ``x`` rows stream in, ``y`` rows stream out, ``y[b] = requant(x[b] @ w, mult, shift)``
    bit for bit as :func:`sw.quant.gemm_int8`. Weights and requantisation parameters are loaded
    beforehand over their own streams and stay on chip.

    Pipeline: :class:`RowSequencer` -> :class:`SystolicArray` -> :class:`Requant` ->
    :class:`RowAssembler` -> output FIFO. The array does not stall; instead a row is only accepted
    when the output FIFO is sure to have room for it (credit = rows accepted and not yet read out
    < FIFO depth), so backpressure on ``o`` never loses data. Throughput is one row every
    ``k_tiles * n_tiles`` cycles.

    Parameters
    ----------
    cfg : TileConfig
        Geometry.

    Members
    -------
    i : In(stream.Signature(ArrayLayout(signed(8), k_dim)))
        Activation rows.
    o : Out(stream.Signature(ArrayLayout(signed(8), n_dim)))
        Result rows.
    w : In(stream.Signature(weight_layout(cfg), always_ready=True))
        Weight words; see :func:`hw.systolic_array.weight_layout` for the address map.
    rq : In(stream.Signature({addr, p: {mult[cols], shift[cols]}}, always_ready=True))
        Requantisation parameters of output slice ``addr``.
    """

    def __init__(self, cfg: TileConfig):
        self._cfg = cfg
        self._array = SystolicArray(cfg)
        self._requant = Requant(cfg.cols, cfg.n_tiles)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(8), cfg.k_dim))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), cfg.n_dim))),
            "w": In(stream.Signature(weight_layout(cfg), always_ready=True)),
            "rq": In(stream.Signature(load_layout(cfg.cols, cfg.n_tiles), always_ready=True)),
        })

    @property
    def cfg(self):
        return self._cfg

    #: Cycles outside the array and requantiser: one from taking a row to its first beat (the
    #: sequencer registers the row) and two from the row assembler through the output FIFO.
    OUTPUT_CYCLES = 3

    def cycles(self, batch):
        """Cycles from taking the first of ``batch`` back-to-back rows to offering the last result
        (no stalls): ``batch * k_tiles * n_tiles + latency + OUTPUT_CYCLES``; checked against the
        RTL in ``tests/test_gemm_tile_cycles.py``."""
        return self._cfg.cycles(batch) + self.latency + self.OUTPUT_CYCLES

    @property
    def latency(self):
        """Cycles from the last beat of a row entering the array to the row entering the FIFO."""
        return self._array.latency + Requant.latency

    @property
    def fifo_depth(self):
        """Rows of output buffer: enough to cover the pipeline, so the array never idles for credit."""
        per_row = self._cfg.k_tiles * self._cfg.n_tiles
        return -(-(self.latency + 2) // per_row) + 2

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        m.submodules.seq = seq = RowSequencer(cfg)
        m.submodules.array = array = self._array
        m.submodules.requant = requant = self._requant
        m.submodules.asm = asm = RowAssembler(cfg)
        m.submodules.fifo = buf = fifo.SyncFIFOBuffered(width=cfg.n_dim * 8, depth=self.fifo_depth)

        wiring.connect(m, wiring.flipped(self.i), seq.i)
        wiring.connect(m, seq.o, array.i)
        wiring.connect(m, wiring.flipped(self.w), array.w)
        wiring.connect(m, wiring.flipped(self.rq), requant.params)
        m.d.comb += [
            requant.i.valid.eq(array.o.valid),
            requant.i.p.acc.eq(array.o.p.acc),
            requant.i.p.sel.eq(array.o.p.nt),
        ]
        wiring.connect(m, requant.o, asm.i)
        m.d.comb += [
            buf.w_en.eq(asm.o.valid),
            buf.w_data.eq(asm.o.p),
            asm.o.ready.eq(buf.w_rdy),
            self.o.valid.eq(buf.r_rdy),
            self.o.p.eq(buf.r_data),
            buf.r_en.eq(self.o.ready),
        ]

        # Credits: rows accepted and not yet read out must fit in the FIFO.
        outstanding = Signal(range(self.fifo_depth + 1))
        took = self.i.valid & self.i.ready
        gave = self.o.valid & self.o.ready
        with m.If(took & ~gave):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(gave & ~took):
            m.d.sync += outstanding.eq(outstanding - 1)
        m.d.comb += seq.credit.eq(outstanding < self.fifo_depth)
        return m
