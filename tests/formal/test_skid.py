"""The register slice (hw/lib/skid.py) loses, duplicates and reorders no beat, in every mode: proven
by k-induction through SymbiYosys, with a failing twin (a planted bug that must be found)."""

import pytest
from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.formal.harness import Internals, PropertyWrapper, in_ports, stream_hold
from hw.lib.skid import SkidBuffer
from tb.formal import check
from tb.mutation import Mutation

pytestmark = pytest.mark.usefixtures("formal_tools")


class SkidOrder(PropertyWrapper):
    """Scoreboard of a :class:`hw.lib.skid.SkidBuffer` whose beats carry their own sequence number.

    The producer holds each beat until it is taken, and beat ``n`` carries ``n ^ key`` (``key`` a
    free constant, so every payload bit takes both values). The wrapper counts beats taken
    (``n_in``) and given (``n_out``) and checks in every cycle:

    - **no loss, duplicate or reorder**: a valid beat on ``o`` is ``n_out ^ key``;
    - **bounded**: ``0 <= n_in - n_out <=`` the capacity of the mode (2 in ``full``, 1 otherwise);
    - **no bubble, no stall beyond the mode's**: ``o.valid`` exactly when a beat is inside (or,
      in ``backward`` mode, offered), and ``i.ready`` exactly when there is room (in ``forward``
      mode: room or ``o.ready``);
    - the stream rule on ``o``.

    For the induction it also asserts how the payload registers mirror the scoreboard. With
    ``scoreboard_only=True`` it checks the first two points and the stream rule only: the
    scoreboard alone must catch a lost beat.

    Parameters
    ----------
    mode : str
        Mode of the slice.
    width : int
        Payload bits (the sequence numbers wrap at ``2 ** width``).
    dut_class : type
        The slice's class (a planted-bug copy in the failing twin test).
    scoreboard_only : bool
        Leave out the handshake timing and the register invariants (for the failing twin).
    """

    CAPACITY = {"full": 2, "forward": 1, "backward": 1}

    def __init__(self, mode, *, width=3, dut_class=SkidBuffer, scoreboard_only=False):
        super().__init__()
        self.mode, self.width, self.scoreboard_only = mode, width, scoreboard_only
        self.dut = dut_class(unsigned(width), mode=mode)
        self.key = Signal(width, name="key")
        self.free(*in_ports(self.dut))

    def elaborate(self, platform):
        m = self.module()
        dut, W, mode = self.dut, self.width, self.mode
        body = Internals(dut, platform)
        m.submodules.dut = body.fragment
        self.constant(m, self.key, name="key")
        stream_hold(m, dut.i, name="i", assume=True)
        stream_hold(m, dut.o, name="o")

        n_in = Signal(W)
        n_out = Signal(W)
        inside = Signal(range(3))
        took = dut.i.valid & dut.i.ready
        gave = dut.o.valid & dut.o.ready
        with m.If(dut.i.valid):
            m.d.comb += Assume(dut.i.payload == n_in ^ self.key, "beat n carries n ^ key")
        with m.If(dut.o.valid):
            m.d.comb += Assert(dut.o.payload == n_out ^ self.key, "no beat lost, duplicated or reordered")
        m.d.comb += Assert(inside <= self.CAPACITY[mode], "no more beats inside than the slice holds")
        with m.If(gave):
            m.d.comb += Assert(took | (inside > 0), "no beat given that was not taken")
        if not self.scoreboard_only:
            self.handshake(m, inside)
            self.invariants(m, body, inside, n_out)

        m.d.sync += inside.eq(inside + took - gave)
        with m.If(took):
            m.d.sync += n_in.eq(n_in + 1)
        with m.If(gave):
            m.d.sync += n_out.eq(n_out + 1)
        m.d.comb += Assert((n_in - n_out)[:W] == inside, "the counters agree with the occupancy")
        self.cover(m, gave & (inside == self.CAPACITY[mode]), "given while full")
        # Full throughput: with a beat in the main register (in backward mode, straight through).
        self.cover(m, took & gave & (inside == int(mode != "backward")), "taken and given in one cycle")
        self.cover(m, gave & (n_out == (1 << W) - 1), "the sequence numbers wrap")
        return m

    def handshake(self, m, inside):
        """``o.valid`` and ``i.ready`` exactly as the mode promises: no bubble, no needless stall."""
        dut, mode = self.dut, self.mode
        if mode == "backward":
            m.d.comb += [
                Assert(dut.o.valid == ((inside > 0) | dut.i.valid),
                       "o.valid exactly when a beat is inside or offered"),
                Assert(dut.i.ready == (inside == 0), "i.ready exactly when the skid register is empty"),
            ]
            return
        room = inside < self.CAPACITY[mode]
        if mode == "forward":
            room |= dut.o.ready
        m.d.comb += [
            Assert(dut.o.valid == (inside > 0), "o.valid exactly when a beat is inside"),
            Assert(dut.i.ready == room, "i.ready exactly when there is room"),
        ]

    def invariants(self, m, body, inside, n_out):
        """How the payload registers hold the beats inside (asserted, so a wrong one fails)."""
        W, key = self.width, self.key
        if self.mode == "backward":
            with m.If(inside > 0):
                m.d.comb += Assert(body["skid"] == n_out ^ key, "skid holds the next beat")
            return
        with m.If(inside > 0):
            m.d.comb += Assert(body["main"] == n_out ^ key, "main holds the next beat")
        if self.mode == "full":
            with m.If(inside == 2):
                m.d.comb += Assert(body["skid"] == (n_out + 1)[:W] ^ key, "skid holds the one after")


@pytest.mark.parametrize("mode", SkidBuffer.MODES)
def test_order_proven(mode):
    result = check(SkidOrder(mode), f"skid_order_{mode}", mode="prove", depth=4, timeout=300)
    assert result.passed, result.summary()


@pytest.mark.parametrize("mode", SkidBuffer.MODES)
def test_order_cover(mode):
    """The assumptions leave a full slice, and the wrap of the sequence numbers, reachable."""
    result = check(SkidOrder(mode), f"skid_order_{mode}__cover", mode="cover", depth=12)
    assert result.passed, result.summary()


def test_order_twin_fails():
    """The skid register never fills: the beat that arrives as ``o.ready`` falls is lost."""
    bug = Mutation("hw/lib/skid.py", "        with m.Elif(empty & i.valid):\n"
                                 "            m.d.sync += empty.eq(0)\n", "")
    planted = bug.load().SkidBuffer
    # Which scoreboard assertion fails first is the solver's choice; either means a beat was lost.
    for only, words in [(False, ("i.ready exactly when there is room",)),
                        (True, ("no beat lost, duplicated or reordered",
                                "no more beats inside than the slice holds"))]:
        result = check(SkidOrder("full", dut_class=planted, scoreboard_only=only),
                       f"skid_order_full__skid-never-fills{'__scoreboard' if only else ''}",
                       mode="bmc", depth=8)
        assert result.failed_assertion, f"the planted bug went unnoticed: {result.summary()}"
        assert any(w in f for w in words for f in result.failed), (
            f"expected one of {words}: {result.summary()}")
