"""The v2 accelerator's output stream keeps the stream rule under the host's group contract."""

from amaranth import *
from amaranth.hdl import Assume

from hw.formal.accelerator import assume_groups
from hw.formal.handshake import StreamHandshake

__all__ = ["HandshakeAcceleratorV2", "assume_groups_v2"]


def assume_groups_v2(m, dut):
    """The host contract of :func:`hw.formal.accelerator.assume_groups` (each group ``batch``
    rows numbered in order, ``tlast`` on the last), for a :class:`hw.accel.accelerator_v2.AcceleratorV2`,
    plus the row fields the TAS group and the replay cache index by: ``layer`` below ``layers``
    and ``index`` below ``tokens_per_frame``."""
    assume_groups(m, dut)
    cfg, r = dut.config, dut.x.p.data
    with m.If(dut.x.valid):
        m.d.comb += Assume((r.layer < cfg.layers) & (r.index < cfg.tokens_per_frame), "row fields in range")


class HandshakeAcceleratorV2(StreamHandshake):
    """:class:`hw.formal.handshake.StreamHandshake` on the ``y`` stream of an
    :class:`hw.accel.accelerator_v2.AcceleratorV2`: ``y.valid`` and its payload (data, replay bit,
    row, ``tlast``) stay until ``y.ready``.

    Assumptions: the host's group contract (:func:`assume_groups_v2`) and the stream rule on
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
    dut : AcceleratorV2
    """

    def __init__(self, dut):
        super().__init__(dut, inputs=["x"], outputs=["y"], assume=assume_groups_v2)

    def elaborate(self, platform):
        m = super().elaborate(platform)
        y = self.dut.y
        self.cover(m, y.valid & y.ready & y.p.last, "a whole group leaves on y (tlast taken)")
        return m
