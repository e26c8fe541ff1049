"""RoPE of one int8 head per cycle from the int16 tables of its position."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.credit_queue import CreditQueue
from sw.spec import quant

__all__ = ["Rope", "rope_in_layout", "rope_out_layout"]


def rope_in_layout(head_dim):
    """A head ``x`` (halves ``x1``, ``x2``) and its position's ``C = rint(cos * 2**14)`` and
    ``S = rint(sin * 2**14)`` (``head_dim / 2`` entries each)."""
    h = head_dim // 2
    return data.StructLayout({"x": data.ArrayLayout(signed(8), head_dim),
                              "c": data.ArrayLayout(signed(16), h), "s": data.ArrayLayout(signed(16), h)})


def rope_out_layout(head_dim):
    return data.StructLayout({"y": data.ArrayLayout(signed(8), head_dim)})


class Rope(wiring.Component):
    """:func:`sw.spec.quant.rope_int`, one head per cycle, bit for bit::

        y1 = saturate8(round_half_even((x1 C - x2 S) / 2**14))
        y2 = saturate8(round_half_even((x2 C + x1 S) / 2**14))

    Stages: the ``2 head_dim`` products; their differences and sums; the rounding and the
    saturation. The heads then wait in an output queue; ``i`` is taken while the queue has room
    for every head in flight, so ``o.ready`` stalls nothing inside.

    Parameters
    ----------
    head_dim : int
        Even.

    Members
    -------
    i : In(stream.Signature(rope_in_layout(head_dim)))
    o : Out(stream.Signature(rope_out_layout(head_dim)))
    """

    latency = 3
    queue_depth = 4

    def __init__(self, head_dim=24):
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 2 or head_dim % 2:
            raise ValueError(f"Rope head_dim must be an even integer of at least 2, not {head_dim!r}")
        self._dh = head_dim
        super().__init__({"i": In(stream.Signature(rope_in_layout(head_dim))),
                          "o": Out(stream.Signature(rope_out_layout(head_dim)))})

    def elaborate(self, platform):
        m = Module()
        dh, h, F = self._dh, self._dh // 2, quant.ROPE_BITS
        m.submodules.queue = queue = CreditQueue(self.o.p.shape(), self.queue_depth)
        take = Signal()
        m.d.comb += [self.i.ready.eq(queue.room), take.eq(self.i.valid & self.i.ready), queue.take.eq(take)]

        x, c, s = self.i.p.x, self.i.p.c, self.i.p.s
        # Stage 1: the products.
        pc = [Signal(signed(24), name=f"pc_{j}", reset_less=True) for j in range(dh)]   # x[j] * C[j mod h]
        ps = [Signal(signed(24), name=f"ps_{j}", reset_less=True) for j in range(dh)]   # x[j] * S[j mod h]
        for j in range(dh):
            m.d.sync += [pc[j].eq(x[j] * c[j % h]), ps[j].eq(x[j] * s[j % h])]
        # Stage 2: x1 C - x2 S and x2 C + x1 S.
        acc = [Signal(signed(25), name=f"acc_{j}", reset_less=True) for j in range(dh)]
        for j in range(h):
            m.d.sync += [acc[j].eq(pc[j] - ps[j + h]), acc[j + h].eq(pc[j + h] + ps[j])]
        # Stage 3: round half to even at 2**-14, saturate.
        y = Signal(rope_out_layout(dh), reset_less=True)
        for j in range(dh):
            a = acc[j]
            q = a >> F
            r = a[:F]
            up = (r > (1 << (F - 1))) | ((r == (1 << (F - 1))) & q[0])
            qq = Signal(signed(len(a) - F + 2), name=f"q_{j}")
            m.d.comb += qq.eq(q + up)
            m.d.sync += y.y[j].eq(Mux(qq > 127, 127, Mux(qq < -128, -128, qq)))
        v = Signal(self.latency)
        m.d.sync += v.eq(Cat(take, v[:-1]))

        m.d.comb += [queue.i.valid.eq(v[-1]), queue.i.payload.eq(y)]
        wiring.connect(m, queue.o, wiring.flipped(self.o))
        return m
