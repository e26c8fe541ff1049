"""GEMM tile: ``y = requant(x @ w)`` on the systolic array, with stream interfaces."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.requant import Requant, load_layout
from hw.row_assembler import RowAssembler
from hw.row_sequencer import RowSequencer, row_layout
from hw.systolic_array import SystolicArray, weight_layout
from hw.widths import index_bits, mul_const
from sw import quant
from sw.config import TileConfig

__all__ = ["GemmTile", "slice_layout"]


def slice_layout(cfg: TileConfig):
    """A raw output slice: ``cols`` int32 sums of channels ``nt*cols ...``; ``last`` ends the row."""
    return data.StructLayout({
        "acc": data.ArrayLayout(signed(quant.ACC_BITS), cfg.cols),
        "nt": index_bits(cfg.n_tiles),
        "last": 1,
    })


class GemmTile(wiring.Component):
    """int8 x int8 -> int32 -> requant -> int8 GEMM tile, the building block of the MLP core.

    ``x`` rows stream in, ``y`` rows stream out, ``y[b] = requant(x[b] @ w, mult, shift)``
    bit for bit as :func:`sw.quant.gemm_int8`. Weights and requantisation parameters are loaded
    beforehand over their own streams and stay on chip.

    Pipeline: :class:`RowSequencer` -> :class:`SystolicArray` -> :class:`Requant` ->
    :class:`RowAssembler` -> output FIFO. The array does not stall; instead a row is only accepted
    when the output FIFO is sure to have room for it (credit = rows accepted and not yet read out
    < FIFO depth), so backpressure on ``o`` never loses data. Throughput is one row every
    ``k_tiles * n_tiles`` cycles.

    ``banks`` weight matrices of the tile's shape are held (rows carry the bank they use), and
    ``lanes`` independent pipelines (cores) share the weight memories. With ``raw`` the int32 sums
    leave unrequantised as slices of ``cols`` channels, for a reduction over several tiles.

    Parameters
    ----------
    cfg : TileConfig
        Geometry of one bank.
    lanes : int
        Cores sharing the weights; ``i`` and ``o`` are arrays of streams when ``lanes > 1``.
    banks : int
        Weight matrices held.
    raw : bool
        Output int32 slices instead of requantised rows (no requantiser, no ``rq`` port).

    Members
    -------
    i : In(stream.Signature(row_layout(cfg, banks)))
        Activation rows (with their bank when ``banks > 1``).
    o : Out(stream.Signature(ArrayLayout(signed(8), n_dim)))
        Result rows, or ``slice_layout(cfg)`` slices when ``raw``.
    w : In(stream.Signature(weight_layout(cfg, banks), always_ready=True))
        Weight words; see :func:`hw.systolic_array.weight_layout` for the address map.
    rq : In(stream.Signature({addr, p: {mult[cols], shift[cols]}}, always_ready=True))
        Requantisation parameters of output slice ``addr = bank * n_tiles + nt``.
    """

    def __init__(self, cfg: TileConfig, *, lanes: int = 1, banks: int = 1, raw: bool = False):
        for name, v in (("lanes", lanes), ("banks", banks)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GemmTile {name} must be a positive integer, not {v!r}")
        self._cfg, self._lanes, self._banks, self._raw = cfg, lanes, banks, raw
        self._array = SystolicArray(cfg, lanes=lanes, banks=banks)
        out = slice_layout(cfg) if raw else data.ArrayLayout(signed(8), cfg.n_dim)
        i = In(stream.Signature(row_layout(cfg, banks)))
        o = Out(stream.Signature(out))
        members = {
            "i": i if lanes == 1 else i.array(lanes),
            "o": o if lanes == 1 else o.array(lanes),
            "w": In(stream.Signature(weight_layout(cfg, banks), always_ready=True)),
        }
        if not raw:
            members["rq"] = In(stream.Signature(load_layout(cfg.cols, banks * cfg.n_tiles),
                                                always_ready=True))
        super().__init__(members)

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
        """Cycles from the last beat of a row entering the array to the row entering the FIFO
        (for ``raw`` tiles: the last slice entering it)."""
        return self._array.latency + (0 if self._raw else Requant.latency)

    @property
    def fifo_depth(self):
        """Rows of output buffer: enough to cover the pipeline, so the array never idles for credit."""
        per_row = self._cfg.k_tiles * self._cfg.n_tiles
        return -(-(self.latency + 2) // per_row) + 2

    def _port(self, name, lane):
        port = getattr(self, name)
        return port if self._lanes == 1 else port[lane]

    def elaborate(self, platform):
        m = Module()
        m.submodules.array = array = self._array
        wiring.connect(m, wiring.flipped(self.w), array.w)
        for lane in range(self._lanes):
            self._lane(m, array, lane)
        return m

    def _lane(self, m, array, lane):
        cfg, raw = self._cfg, self._raw
        i, o = self._port("i", lane), self._port("o", lane)
        m.submodules[f"seq_{lane}"] = seq = RowSequencer(cfg, self._banks)
        wiring.connect(m, wiring.flipped(i), seq.i)
        wiring.connect(m, seq.o, array.i[lane])
        a = array.o[lane]
        if raw:
            depth = self.fifo_depth * cfg.n_tiles
            m.submodules[f"fifo_{lane}"] = buf = fifo.SyncFIFOBuffered(
                width=len(Value.cast(o.p)), depth=depth)
            item = Signal(slice_layout(cfg), name=f"slice_{lane}")
            m.d.comb += [
                item.acc.eq(a.p.acc), item.nt.eq(a.p.nt), item.last.eq(a.p.nt == cfg.n_tiles - 1),
                buf.w_en.eq(a.valid), buf.w_data.eq(item),
            ]
            gave = Signal(name=f"gave_{lane}")
            m.d.comb += gave.eq(o.valid & o.ready & o.p.last)
        else:
            m.submodules[f"requant_{lane}"] = requant = Requant(cfg.cols, self._banks * cfg.n_tiles)
            if lane == 0:
                wiring.connect(m, wiring.flipped(self.rq), requant.params)
            else:
                m.d.comb += [requant.params.valid.eq(self.rq.valid),
                             requant.params.p.eq(self.rq.p)]
            m.d.comb += [
                requant.i.valid.eq(a.valid),
                requant.i.p.acc.eq(a.p.acc),
                requant.i.p.sel.eq(mul_const(a.p.bank, cfg.n_tiles) + a.p.nt),
            ]
            asm = RowAssembler(cfg, sel_bits=index_bits(self._banks * cfg.n_tiles))
            m.submodules[f"asm_{lane}"] = asm
            m.d.comb += [
                asm.i.valid.eq(requant.o.valid), asm.i.p.y.eq(requant.o.p.y),
                asm.i.p.sel.eq(requant.o.p.sel), requant.o.ready.eq(asm.i.ready),
            ]
            m.submodules[f"fifo_{lane}"] = buf = fifo.SyncFIFOBuffered(width=cfg.n_dim * 8,
                                                                       depth=self.fifo_depth)
            m.d.comb += [buf.w_en.eq(asm.o.valid), buf.w_data.eq(asm.o.p), asm.o.ready.eq(buf.w_rdy)]
            gave = Signal(name=f"gave_{lane}")
            m.d.comb += gave.eq(o.valid & o.ready)
        m.d.comb += [o.valid.eq(buf.r_rdy), o.p.eq(buf.r_data), buf.r_en.eq(o.ready)]

        # Credits: rows accepted and not yet read out must fit in the FIFO.
        outstanding = Signal(range(self.fifo_depth + 1), name=f"outstanding_{lane}")
        took = i.valid & i.ready
        with m.If(took & ~gave):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(gave & ~took):
            m.d.sync += outstanding.eq(outstanding - 1)
        m.d.comb += seq.credit.eq(outstanding < self.fifo_depth)
