"""GEMM tile: ``y = requant(x @ w)`` on the systolic array, with stream interfaces."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.requant import Requant, load_layout
from hw.accel.row_assembler import RowAssembler
from hw.accel.row_sequencer import RowSequencer, row_layout
from hw.accel.systolic_array import SystolicArray, weight_layout
from hw.lib.widths import index_bits, mul_const
from sw.config import TileConfig
from sw.golden import quant

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
    bit for bit as :func:`sw.golden.quant.gemm_int8`. Weights and requantisation parameters are loaded
    beforehand over their own streams and stay on chip.

    Pipeline: :class:`RowSequencer` -> :class:`SystolicArray` -> :class:`Requant` ->
    :class:`RowAssembler` -> output FIFO. The array does not stall; instead a row is only accepted
    when the output FIFO is sure to have room for it (credit = rows accepted and not yet read out
    < FIFO depth), so backpressure on ``o`` never loses data. Throughput is one row every
    ``k_tiles * n_tiles`` cycles.

    ``banks`` weight matrices of the tile's shape are held (rows carry the bank they use), and
    ``lanes`` independent pipelines (cores) share the weight memories. They also share one
    requantiser and its parameter table: a lane delivers one slice per ``k_tiles`` cycles, so a
    round-robin over the lanes (one holding register each) keeps up when ``k_tiles >= lanes``, and
    the table (the biggest user of distributed RAM) exists once. With ``raw`` the int32 sums
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
        Weight words; see :func:`hw.accel.systolic_array.weight_layout` for the address map.
    rq : In(stream.Signature({addr, p: {mult[cols], shift[cols]}}, always_ready=True))
        Requantisation parameters of output slice ``addr = bank * n_tiles + nt``.
    """

    def __init__(self, cfg: TileConfig, *, lanes: int = 1, banks: int = 1, raw: bool = False):
        for name, v in (("lanes", lanes), ("banks", banks)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GemmTile {name} must be a positive integer, not {v!r}")
        if lanes > cfg.k_tiles and not raw:
            raise ValueError(f"GemmTile: {lanes} lanes share one requantiser, which needs "
                             f"k_tiles >= lanes (k_tiles = {cfg.k_tiles})")
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
        if not self._raw:
            entries = self._banks * self._cfg.n_tiles
            tag_bits = index_bits(self._lanes) if self._lanes > 1 else 0
            m.submodules.requant = requant = Requant(self._cfg.cols, entries, tag_bits)
            wiring.connect(m, wiring.flipped(self.rq), requant.params)
            self._share_requant(m, array, requant, index_bits(entries))
        for lane in range(self._lanes):
            self._lane(m, array, lane)
        return m

    def _share_requant(self, m, array, requant, entry_bits):
        """Round-robin the lanes' result slices into the one requantiser.

        A lane's slice that is not taken in the cycle it appears waits in a holding register
        (the array cannot stall); the lane after the last granted one has priority.
        """
        cfg, L = self._cfg, self._lanes
        item = data.StructLayout({"acc": data.ArrayLayout(signed(quant.ACC_BITS), cfg.cols),
                                  "sel": len(requant.i.p.sel)})
        cands, held_v, held = [], [], []
        for lane in range(L):
            a = array.o[lane]
            fresh = Signal(item, name=f"fresh_{lane}")
            m.d.comb += [fresh.acc.eq(a.p.acc),
                         fresh.sel.eq(mul_const(a.p.bank, cfg.n_tiles) + a.p.nt)]
            if L > 1:
                m.d.comb += fresh.sel[entry_bits:].eq(lane)
            hv = Signal(name=f"held_valid_{lane}")
            h = Signal(item, name=f"held_{lane}")
            cands.append((hv | a.valid, Mux(hv, h, fresh), a.valid, fresh))
            held_v.append(hv)
            held.append(h)
        last = Signal(range(L), name="granted_last")
        grant = Signal(range(L), name="grant")
        any_v = Signal()
        # Priority: last + 1, last + 2, ... (mod L), as a chain of Ifs from the lowest priority up.
        for k in range(L, 0, -1):
            for base in range(L):
                lane = (base + k) % L
                with m.If((last == base) & cands[lane][0]):
                    m.d.comb += [grant.eq(lane), any_v.eq(1)]
        take = Signal()
        m.d.comb += [
            requant.i.valid.eq(any_v),
            take.eq(any_v & requant.i.ready),
        ]
        with m.Switch(grant):
            for lane in range(L):
                with m.Case(lane):
                    m.d.comb += requant.i.p.eq(cands[lane][1])
        with m.If(take):
            m.d.sync += last.eq(grant)
        for lane in range(L):
            _, _, fresh_v, fresh = cands[lane]
            granted = take & (grant == lane)
            with m.If(granted):
                # The held slice (if any) left; a fresh one takes its place.
                m.d.sync += [held_v[lane].eq(held_v[lane] & fresh_v), held[lane].eq(fresh)]
            with m.Elif(fresh_v):
                m.d.sync += [held_v[lane].eq(1), held[lane].eq(fresh)]

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
            requant = m.submodules.requant
            asm = RowAssembler(cfg, sel_bits=len(requant.o.p.sel))
            m.submodules[f"asm_{lane}"] = asm
            mine = Const(1) if self._lanes == 1 else requant.o.p.sel[-index_bits(self._lanes):] == lane
            m.d.comb += [
                asm.i.valid.eq(requant.o.valid & mine), asm.i.p.y.eq(requant.o.p.y),
                asm.i.p.sel.eq(requant.o.p.sel),
            ]
            with m.If(mine):
                m.d.comb += requant.o.ready.eq(asm.i.ready)
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
