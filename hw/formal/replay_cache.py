"""Replay-cache addresses stay in range, and every entry reads back what was last written to it."""

from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.accel.replay_cache import ReplayCache
from hw.formal.harness import Internals, PropertyWrapper, in_ports, stream_hold

__all__ = ["ReplayCacheMemory"]


class ReplayCacheMemory(PropertyWrapper):
    """A :class:`hw.accel.replay_cache.ReplayCache` on a geometry whose depth is not a power of two,
    so an out-of-range address is representable and would not wrap silently.

    Requests carry in-range fields (``layer < layers``, ``index < tokens_per_frame``,
    ``row < batch``) and hold until taken. The wrapper watches one arbitrary entry
    ``(layer0, index0, row0)``, chosen by the solver and then fixed, with a copy of the value last
    written to it, and checks:

    - **addresses in range**: every write and every read of a request lands below
      ``layers * tokens_per_frame * batch``;
    - **one entry per (layer, index, row)**: a read of the watched entry returns on ``o``, in
      request order, with its row, the value last written to it before the read, whatever was
      written to the other entries in between (two tuples sharing an address would break this);
    - no read data without a read, at most ``latency`` reads in flight, and the read data held
      until taken.

    Parameters
    ----------
    dim, layers, tokens_per_frame, batch : int
        Cache geometry.
    dut_class : type
        The cache's class (a planted-bug copy in the failing twin tests).
    """

    def __init__(self, *, dim=1, layers=3, tokens_per_frame=3, batch=2, dut_class=ReplayCache):
        super().__init__()
        self.geometry = (layers, tokens_per_frame, batch)
        self.dut = dut_class(dim, layers, tokens_per_frame, batch)
        self.free(*in_ports(self.dut))
        req = self.dut.i.p
        self.layer0 = Signal.like(req.layer, name="layer0")
        self.index0 = Signal.like(req.index, name="index0")
        self.row0 = Signal.like(req.row, name="row0")
        self.free(self.layer0, self.index0, self.row0)

    def elaborate(self, platform):
        m = self.module()
        L, N, B = self.geometry
        depth = L * N * B
        dut = self.dut
        body = Internals(dut, platform)
        m.submodules.dut = body.fragment
        addr = body["addr"]
        req = dut.i.p
        stream_hold(m, dut.i, name="i", assume=True)
        for name, sig, n in (("layer0", self.layer0, L), ("index0", self.index0, N), ("row0", self.row0, B)):
            self.constant(m, sig, name=name)
            m.d.comb += Assume(sig < n, f"{name} in range")
        with m.If(dut.i.valid):
            m.d.comb += Assume((req.layer < L) & (req.index < N) & (req.row < B),
                               "request fields in range")

        took = dut.i.valid & dut.i.ready
        with m.If(took & req.write):
            m.d.comb += Assert(addr < depth, "write address in range")
        with m.If(took & ~req.write):
            m.d.comb += Assert(addr < depth, "read address in range")

        # Reads come back in order: count those in flight, and for a read of the watched entry
        # how many earlier reads leave before it.
        gave = dut.o.valid & dut.o.ready
        flight = Signal(range(4))
        m.d.sync += flight.eq(flight + (took & ~req.write) - gave)
        with m.If(gave):
            m.d.comb += Assert(flight != 0, "no read data without a read")
        m.d.comb += Assert(flight <= dut.latency, "at most one read per pipeline stage in flight")

        watched = (req.layer == self.layer0) & (req.index == self.index0) & (req.row == self.row0)
        known = Signal()                       # the watched entry has been written
        value = Signal.like(req.y)             # what was last written to it
        due = Signal()                         # a read of it is in flight
        ahead = Signal(range(4))               # reads in flight before it
        expect = Signal.like(req.y)
        with m.If(took & req.write & watched):
            m.d.sync += [known.eq(1), value.eq(req.y)]
        with m.If(due & gave):
            with m.If(ahead == 0):
                m.d.comb += Assert(dut.o.p.row == self.row0, "a read returns its row")
                m.d.comb += Assert(Value.cast(dut.o.p.y) == Value.cast(expect),
                                   "a read returns the value last written to its entry")
                m.d.sync += due.eq(0)
            with m.Else():
                m.d.sync += ahead.eq(ahead - 1)
        with m.Elif(~due & took & ~req.write & watched & known):
            m.d.sync += [due.eq(1), ahead.eq(flight - gave), expect.eq(value)]
        stream_hold(m, dut.o, name="o")
        self.cover(m, due & gave & (ahead == 0), "a read of the watched entry returns its value")
        return m
