"""The accelerator's host contract, and its output stream's stream rule under that contract."""

from amaranth import *
from amaranth.hdl import Assume

from hw.formal.handshake import StreamHandshake

__all__ = ["HandshakeAccelerator", "assume_groups"]


def assume_groups(m, dut):
    """The host sends each group as ``batch`` rows numbered ``0 .. batch-1`` in order, ``tlast``
    on the last (``hw.board.host.row_beats``), with the row fields the TAS group and the replay
    cache index by in range (``layer`` below ``layers``, ``index`` below ``tokens_per_frame``):
    assumed of the ``x`` stream of a :class:`hw.accel.accelerator.Accelerator`."""
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
    cfg, r = dut.config, dut.x.p.data
    with m.If(dut.x.valid):
        m.d.comb += Assume((r.layer < cfg.layers) & (r.index < cfg.tokens_per_frame), "row fields in range")


class HandshakeAccelerator(StreamHandshake):
    """:class:`hw.formal.handshake.StreamHandshake` on the ``y`` stream of an
    :class:`hw.accel.accelerator.Accelerator`: ``y.valid`` and its payload (data, replay bit,
    row, ``tlast``) stay until ``y.ready``.

    Assumptions: the host's group contract (:func:`assume_groups`) and the stream rule on
    ``x``; everything else is free in every cycle, the configuration stream included (weights,
    tables and the control word may change at any time; the rule on ``y`` must not depend on
    them).

    Besides the handshake's own cover (a beat of ``y`` waits, then leaves) a cover shows a whole
    group leaving (its last row taken on ``y`` with ``tlast``), so the depth spans at least one
    group in and out (the rows the TAS replays come back from the replay cache within the
    TAS latency plus a few cycles; a computed row's trip through the MLP cores is longer, see
    :attr:`hw.formal.properties.Property.deep`).

    Parameters
    ----------
    dut : Accelerator
    """

    def __init__(self, dut):
        super().__init__(dut, inputs=["x"], outputs=["y"], assume=assume_groups)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        y = self.dut.y
        self.cover(m, y.valid & y.ready & y.p.last, "a whole group leaves on y (tlast taken)")
        return m
