"""The packet arbiter merges its inputs beat for beat without splitting a packet."""

from amaranth import *
from amaranth.hdl import Assert

from hw.formal.harness import PropertyWrapper, in_ports, past, stream_hold
from hw.lib.packet_arbiter import PacketArbiter

__all__ = ["PacketArbiterMerge"]


class PacketArbiterMerge(PropertyWrapper):
    """A :class:`hw.lib.packet_arbiter.PacketArbiter` of ``n`` inputs, with inputs that hold their
    beats until taken. Checked in every cycle:

    - **one beat in, one beat out**: an input beat is taken exactly when the output beat is,
      from the granted input, with its payload (nothing lost, duplicated or altered);
    - **no interleaving**: after a beat without ``last`` from input ``k``, the next beat out
      comes from ``k`` again;
    - ``o.valid`` is held until ``o.ready`` (the payload may change while no packet is in
      progress: see :class:`hw.formal.handshake.StreamHandshake` on this block).

    Parameters
    ----------
    shape : StructLayout
        Payload with a one-bit ``last``.
    n : int
        Inputs.
    dut_class : type
        The arbiter's class (a planted-bug copy in the failing twin tests).
    """

    def __init__(self, *, shape=None, n=3, dut_class=PacketArbiter):
        super().__init__()
        if shape is None:
            from amaranth.lib import data
            shape = data.StructLayout({"data": 2, "last": 1})
        self.n = n
        self.dut = dut_class(shape, n)
        self.free(*in_ports(self.dut))

    def elaborate(self, platform):
        m = self.module()
        m.submodules.dut = dut = self.dut
        n = self.n
        for k in range(n):
            stream_hold(m, dut.i[k], name=f"i_{k}", assume=True)
        gave = dut.o.valid & dut.o.ready
        g = dut.grant
        for k in range(n):
            took = dut.i[k].valid & dut.i[k].ready
            with m.If(took):
                m.d.comb += Assert(gave & (g == k), "an input beat is taken only as the output beat")
            with m.If(gave & (g == k)):
                m.d.comb += [
                    Assert(took, "the output beat takes the granted input's beat"),
                    Assert(Value.cast(dut.o.p) == Value.cast(dut.i[k].p), "the payload passes unchanged"),
                ]
        m.d.comb += Assert(g < n, "grant names an input")
        in_packet = past(m, gave & ~dut.o.p.last, name="in_packet")
        owner = Signal.like(g)
        with m.If(gave):
            m.d.sync += owner.eq(g)
        with m.If(in_packet & dut.o.valid):
            m.d.comb += Assert(g == owner, "a packet is not interleaved with another")
        self.cover(m, in_packet & gave & dut.o.p.last & (g == n - 1), f"input {n - 1} finishes a packet")
        # valid (alone) is held until ready.
        waiting = past(m, dut.o.valid & ~dut.o.ready, name="o_waiting")
        with m.If(waiting):
            m.d.comb += Assert(dut.o.valid, "o.valid held until ready")
        return m
