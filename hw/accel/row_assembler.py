"""Row assembler: collects output slices into whole int8 rows."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.widths import index_bits
from sw.config import TileConfig

__all__ = ["RowAssembler"]


class RowAssembler(wiring.Component):
    """Gathers ``n_tiles`` slices of ``cols`` int8 values, in order, into one row of ``n_dim``.

    Slices arrive in order ``0 .. n_tiles - 1`` (a counter tracks the position, so ``sel`` may be
    any table index, for example one that also names a weight bank); the first ``n_tiles - 1`` are
    kept in a register and the row leaves together with the last slice, with no added latency.

    Parameters
    ----------
    cfg : TileConfig
        Geometry.

    Members
    -------
    i : In(stream.Signature({y: ArrayLayout(signed(8), cols), sel}))
        Slices.
    o : Out(stream.Signature(ArrayLayout(signed(8), n_dim)))
        Rows.
    """

    def __init__(self, cfg: TileConfig, sel_bits: int | None = None):
        self._cfg = cfg
        sw = index_bits(cfg.n_tiles) if sel_bits is None else sel_bits
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "y": data.ArrayLayout(signed(8), cfg.cols), "sel": sw}))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(8), cfg.n_dim))),
        })

    def elaborate(self, platform):
        m = Module()
        C, NT = self._cfg.cols, self._cfg.n_tiles
        held = Signal(data.ArrayLayout(signed(8), max(1, (NT - 1) * C)))
        is_last = Signal()
        pos = Signal(range(NT))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += pos.eq(Mux(is_last, 0, pos + 1))
        m.d.comb += [
            is_last.eq(pos == NT - 1),
            self.o.valid.eq(self.i.valid & is_last),
            self.i.ready.eq(self.o.ready | ~is_last),
        ]
        for n in range((NT - 1) * C):
            m.d.comb += self.o.p[n].eq(held[n])
        for c in range(C):
            m.d.comb += self.o.p[(NT - 1) * C + c].eq(self.i.p.y[c])
        with m.If(self.i.valid & ~is_last):
            with m.Switch(pos):
                for t in range(NT - 1):
                    with m.Case(t):
                        for c in range(C):
                            m.d.sync += held[t * C + c].eq(self.i.p.y[c])
        return m
