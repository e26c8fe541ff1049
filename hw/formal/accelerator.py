"""The accelerator's host contract, for properties checked on the whole top level."""

from amaranth import *
from amaranth.hdl import Assume

__all__ = ["assume_groups"]


def assume_groups(m, dut):
    """The host sends each group as ``batch`` rows numbered ``0 .. batch-1`` in order, ``tlast``
    on the last (``hw.board.host.row_beats``): assumed of the ``x`` stream of a
    :class:`hw.accel.accelerator.Accelerator`."""
    B = dut.config.batch
    k = Signal(range(B), name="host_row")
    x = dut.x
    with m.If(x.valid):
        m.d.comb += [
            Assume(x.p.data.row == k, "rows of a group are numbered in order"),
            Assume(x.p.last == (k == B - 1), "tlast on the group's last row only"),
        ]
    with m.If(x.valid & x.ready):
        m.d.sync += k.eq(Mux(x.p.last, 0, k + 1))
