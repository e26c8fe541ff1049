"""Row sequencer: turns activation rows into systolic-array beats."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.systolic_array import issue_layout
from hw.lib.widths import index_bits
from sw.config import TileConfig

__all__ = ["RowSequencer", "row_layout"]


def row_layout(cfg: TileConfig, banks: int = 1):
    """An activation row, with the weight bank it uses when there is more than one."""
    x = data.ArrayLayout(signed(8), cfg.k_dim)
    if banks == 1:
        return x
    return data.StructLayout({"x": x, "bank": index_bits(banks)})


class RowSequencer(wiring.Component):
    """Holds one activation row and issues it as ``n_tiles * k_tiles`` array beats.

    Beat order is ``for nt: for kt:`` so that each column finishes one output channel every
    ``k_tiles`` beats. The next row is taken in the cycle of the last beat of the current one, so
    back-to-back rows leave no bubble. A row is only taken when ``credit`` is high: the tile uses it
    to make sure every row in flight has a place in the output buffer.

    Parameters
    ----------
    cfg : TileConfig
        Geometry.
    banks : int
        Weight banks of the array; rows name theirs.

    Members
    -------
    i : In(stream.Signature(row_layout(cfg, banks)))
        Activation rows.
    o : Out(stream.Signature(issue_layout(cfg, banks), always_ready=True))
        Array beats, one per cycle while a row is held.
    credit : In(1)
        High when the output buffer can take one more row.
    """

    def __init__(self, cfg: TileConfig, banks: int = 1):
        self._cfg, self._banks = cfg, banks
        super().__init__({
            "i": In(stream.Signature(row_layout(cfg, banks))),
            "o": Out(stream.Signature(issue_layout(cfg, banks), always_ready=True)),
            "credit": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self._cfg
        R, KT, NT = cfg.rows, cfg.k_tiles, cfg.n_tiles

        row = Signal(data.ArrayLayout(signed(8), cfg.k_dim))
        bank = Signal.like(self.o.p.bank)
        busy = Signal()
        kt = Signal.like(self.o.p.kt)
        nt = Signal.like(self.o.p.nt)
        # `last` (this beat is the row's last) is a register, computed a cycle ahead from the
        # counters' next values: `i.ready` depends on it, and through the dispatcher's choice of
        # core it starts a long path (python -m hw.flow.synth: critical path signals).
        last = Signal(init=(KT == 1 and NT == 1))

        m.d.comb += [
            self.o.valid.eq(busy),
            self.o.p.kt.eq(kt),
            self.o.p.nt.eq(nt),
            self.o.p.bank.eq(bank),
        ]
        with m.Switch(kt):
            for k in range(KT):
                with m.Case(k):
                    for r in range(R):
                        m.d.comb += self.o.p.x[r].eq(row[k * R + r])

        m.d.comb += self.i.ready.eq((~busy | last) & self.credit)

        kt_next = Mux(kt == KT - 1, 0, kt + 1)
        nt_next = Mux(kt == KT - 1, Mux(nt == NT - 1, 0, nt + 1), nt)
        with m.If(busy):
            m.d.sync += [kt.eq(kt_next), nt.eq(nt_next),
                         last.eq((kt_next == KT - 1) & (nt_next == NT - 1))]
            with m.If(last):
                m.d.sync += busy.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [busy.eq(1), kt.eq(0), nt.eq(0), last.eq(KT == 1 and NT == 1)]
            if self._banks == 1:
                m.d.sync += row.eq(self.i.p)
            else:
                m.d.sync += [row.eq(self.i.p.x), bank.eq(self.i.p.bank)]
        return m
