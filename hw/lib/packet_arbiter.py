"""Round-robin arbiter that merges streams packet by packet."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PacketArbiter"]


class PacketArbiter(wiring.Component):
    """Merges ``n`` streams into one without interleaving packets.

    A packet ends with a beat whose ``last`` field is set. While no packet is in progress the
    arbiter grants the first valid input after the one granted last (round robin), and keeps the
    grant until that input's ``last`` beat has been transferred. An offered beat that waits for
    ``o.ready`` keeps its input granted, so ``o`` obeys the stream rule (valid and payload hold
    until ready). ``o.valid`` depends only on the inputs' ``valid``, never on ``o.ready``.

    Parameters
    ----------
    shape : StructLayout
        Payload, with a one-bit field ``last``.
    n : int
        Inputs.

    Members
    -------
    i : In(stream.Signature(shape)).array(n)
    o : Out(stream.Signature(shape))
    grant : Out(range(n))
        The input currently connected to ``o``.
    """

    def __init__(self, shape, n):
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"PacketArbiter needs a positive number of inputs, not {n!r}")
        self._n = n
        super().__init__({
            "i": In(stream.Signature(shape)).array(n),
            "o": Out(stream.Signature(shape)),
            "grant": Out(range(max(2, n))),
        })

    def elaborate(self, platform):
        m = Module()
        n = self._n
        locked = Signal()
        cur = Signal.like(self.grant)        # the input granted last (or now, when locked)
        sel = self.grant
        valids = Cat(p.valid for p in self.i)
        # First valid input after `cur`, cyclically; `cur` itself last.
        m.d.comb += sel.eq(cur)
        with m.If(~locked):
            for k in reversed(range(1, n + 1)):
                cand = Signal(range(max(2, n)), name=f"cand_{k}")
                m.d.comb += cand.eq(Mux(cur + k >= n, cur + k - n, cur + k))
                with m.If(valids.bit_select(cand, 1)):
                    m.d.comb += sel.eq(cand)
        with m.Switch(sel):
            for k in range(n):
                with m.Case(k):
                    m.d.comb += [self.o.valid.eq(self.i[k].valid), self.o.p.eq(self.i[k].p),
                                 self.i[k].ready.eq(self.o.ready)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += [cur.eq(sel), locked.eq(~self.o.p.last)]
        with m.Elif(self.o.valid):
            # An offered beat waits: keep its input granted, so that valid and payload hold.
            m.d.sync += [cur.eq(sel), locked.eq(1)]
        return m
