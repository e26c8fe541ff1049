"""The reorder buffer emits in sequence order, with no gaps and no duplicates."""

from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.formal.harness import Internals, PropertyWrapper, in_ports, stream_hold
from hw.lib.reorder_buffer import ReorderBuffer
from hw.lib.widths import index_bits

__all__ = ["ReorderBufferOrder"]


class ReorderBufferOrder(PropertyWrapper):
    """Scoreboard of a :class:`hw.lib.reorder_buffer.ReorderBuffer` whose results are their own
    sequence numbers (``seq_bits`` wide, wrapping).

    The producer follows the buffer's contract: it finishes each sequence number once, in any
    order, within ``depth`` of the next one to leave (``nxt``), tagged ``seq mod depth``, and
    holds a beat until it is taken. The wrapper keeps ``nxt`` and the set of slots finished but
    not yet emitted, and checks in every cycle:

    - ``o.valid`` is high exactly when result ``nxt`` has arrived (no stall, nothing invented);
    - the beat on ``o`` is ``nxt`` (in order: no gap, no duplicate), and ``head == nxt mod depth``;
    - a finished result is accepted at once (its slot is free).

    For the unbounded proof (``invariants=True``) it also asserts how the buffer's registers
    mirror the scoreboard: ``full`` is the set of finished slots, and a full slot holds the
    sequence number of the window that has its residue.

    Parameters
    ----------
    depth : int
        Slots (a power of two).
    seq_bits : int
        Width of the sequence numbers carried as payload (more than ``log2(depth)``).
    dut_class : type
        The buffer's class (a planted-bug copy in the failing twin tests).
    invariants : bool
        Also assert the invariants over the internal registers (``full``, ``slot_<n>``).
    """

    def __init__(self, *, depth=4, seq_bits=5, dut_class=ReorderBuffer, invariants=True):
        super().__init__()
        if seq_bits <= index_bits(depth):
            raise ValueError(f"seq_bits must exceed log2(depth) = {index_bits(depth)}, not {seq_bits!r}")
        self.depth, self.seq_bits, self.invariants = depth, seq_bits, invariants
        self.dut = dut_class(unsigned(seq_bits), depth)
        self.free(*in_ports(self.dut))

    def elaborate(self, platform):
        m = self.module()
        dut = self.dut
        body = Internals(dut, platform)
        m.submodules.dut = body.fragment
        D, W, k = self.depth, self.seq_bits, index_bits(self.depth)
        stream_hold(m, dut.i, name="i", assume=True)

        nxt = Signal(W)
        pending = Signal(D)           # slots finished and not yet emitted
        seq = dut.i.p.data
        with m.If(dut.i.valid):
            m.d.comb += [
                Assume((seq - nxt)[:W] < D, "results finish within depth of the next to leave"),
                Assume(dut.i.p.tag == seq[:k], "a result is tagged with its sequence number mod depth"),
                Assume(~pending.bit_select(dut.i.p.tag, 1), "each sequence number finishes once"),
                Assert(dut.i.ready, "a finished result is accepted at once"),
            ]
        m.d.comb += [
            Assert(dut.o.valid == pending.bit_select(nxt[:k], 1),
                   "o.valid exactly when the next result has arrived"),
            Assert(dut.head == nxt[:k], "head is the next sequence number mod depth"),
        ]
        with m.If(dut.o.valid):
            m.d.comb += Assert(dut.o.p == nxt, "results leave in sequence order")
        took = dut.i.valid & dut.i.ready
        gave = dut.o.valid & dut.o.ready
        set_mask = Mux(took, C(1, D) << dut.i.p.tag, 0)
        clr_mask = Mux(gave, C(1, D) << nxt[:k], 0)
        m.d.sync += pending.eq((pending | set_mask) & ~clr_mask)
        self.cover(m, took & (dut.i.p.tag != nxt[:k]) & ~dut.o.valid, "a result arrives out of order")
        self.cover(m, gave & (nxt == D + 1), "results leave in order past a wrap of the slots")
        if self.invariants:
            m.d.comb += [Assert(body["full"] == pending, "full is the set of finished slots"),
                         Assert(body["head_valid"] == body["full"].bit_select(dut.head, 1),
                                "head_valid is the head slot's full flag")]
            for j in range(D):
                seq_j = (nxt + ((j - nxt[:k]) & (D - 1)))[:W]
                with m.If(pending[j]):
                    m.d.comb += Assert(body[f"slot_{j}"] == seq_j, f"slot {j} holds its window's number")
        with m.If(gave):
            m.d.sync += nxt.eq(nxt + 1)
        return m
