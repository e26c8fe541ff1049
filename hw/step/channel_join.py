"""A norm's channel constants joined to the residual rows that go into it."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.step.residual import R_BITS
from hw.step.rmsnorm import rmsnorm_in_layout
from sw.spec import quant

__all__ = ["ChannelJoin", "channel_layout", "row_layout"]


def channel_layout():
    """One channel's norm constants."""
    return data.StructLayout({"mult": unsigned(quant.MULT_BITS), "shift": unsigned(quant.SHIFT_BITS)})


def row_layout():
    """An element of a residual row; ``last`` on the row's last."""
    return data.StructLayout({"data": data.StructLayout({"r": signed(R_BITS)}), "last": 1})


class ChannelJoin(wiring.Component):
    """Each element of a group of ``rows`` residual rows, with its channel's norm constants, into
    :class:`hw.step.rmsnorm.RmsNorm`: the group's ``width`` constants are taken on ``c`` (kept in
    a small memory), then its rows on ``i``, element by element; the next group's constants are
    taken once the group's last element has left.

    Parameters
    ----------
    width : int
        Elements of a row (``d_model``).
    rows : int
        Rows of a group (the step's batch).

    Members
    -------
    c : In(stream.Signature(channel_layout()))
        ``width`` beats per group.
    i : In(stream.Signature(row_layout()))
    o : Out(stream.Signature(rmsnorm_in_layout()))
        ``last`` on each row's last element (the row's own count, not ``i``'s ``last``).
    """

    def __init__(self, width, rows):
        for name, v in (("width", width), ("rows", rows)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"ChannelJoin {name} must be a positive integer, not {v!r}")
        self._w, self._r = width, rows
        super().__init__({
            "c": In(stream.Signature(channel_layout())),
            "i": In(stream.Signature(row_layout())),
            "o": Out(stream.Signature(rmsnorm_in_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        W, R = self._w, self._r
        m.submodules.mem = mem = memory.Memory(shape=channel_layout(), depth=W, init=[])
        wp, rp = mem.write_port(), mem.read_port(domain="comb")
        got = Signal(range(W + 1))
        full = Signal()
        m.d.comb += [full.eq(got == W), self.c.ready.eq(~full),
                     wp.en.eq(self.c.valid & self.c.ready), wp.addr.eq(got), wp.data.eq(self.c.payload)]
        with m.If(wp.en):
            m.d.sync += got.eq(got + 1)

        col, row = Signal(range(W)), Signal(range(R))
        m.d.comb += [rp.addr.eq(col),
                     self.o.valid.eq(self.i.valid & full), self.i.ready.eq(self.o.ready & full),
                     self.o.p.data.r.eq(self.i.p.data.r), self.o.p.data.mult.eq(rp.data.mult),
                     self.o.p.data.shift.eq(rp.data.shift), self.o.p.last.eq(col == W - 1)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += col.eq(Mux(col == W - 1, 0, col + 1))
            with m.If(col == W - 1):
                m.d.sync += row.eq(Mux(row == R - 1, 0, row + 1))
                with m.If(row == R - 1):
                    m.d.sync += got.eq(0)
        return m
