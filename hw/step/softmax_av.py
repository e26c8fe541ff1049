"""One head's attention after the scores: the base-2 integer softmax, ``p . v`` and the normalisation."""

from amaranth import *
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.divide import restoring_step
from hw.lib.widths import index_bits
from sw.spec import quant

__all__ = ["SoftmaxAv", "softmax_in_layout", "softmax_out_layout"]


def softmax_in_layout(head_dim):
    """One attended position: its score ``q . k`` and its ``v``; ``last`` on the last position."""
    return data.StructLayout({
        "data": data.StructLayout({"score": signed(quant.ACC_BITS),
                                   "v": data.ArrayLayout(signed(8), head_dim)}),
        "last": 1})


def softmax_out_layout():
    return data.StructLayout({"data": data.StructLayout({"y": signed(8)}), "last": 1})


class SoftmaxAv(wiring.Component):
    """:func:`sw.spec.quant.softmax_av_int` and :func:`sw.spec.quant.attention_out_int` of one head,
    bit for bit::

        t = (max(scores) - score) * a_exp              the exponent, base 2, Q16, negated
        e = T[(t >> 8) & 255] >> min(t >> 16, 63)      T = quant.exp2_table(), a read-only memory
        E = sum(e),  o[i] = sum(e * v[i])
        y[i] = saturate8(div_rne(o[i] * a_mult, E << a_shift))

    Phases per head: **in**, the positions one per cycle into a buffer while the maximum score is
    kept; **exp**, the buffer read one position per cycle through a 4-stage pipeline (the word
    registered, the exponent, the table, the ``head_dim`` products added into the accumulators);
    **load**, each element's numerator ``o[i] * a_mult`` into its divider lane, one a cycle;
    **divide**, every lane at once by restoring division, one quotient bit per cycle (``NUM_BITS``
    cycles); **round**, each lane rounded to nearest, ties to even, saturated and sent, one a
    cycle. A head of ``n`` positions: about ``2 n + 2 head_dim + NUM_BITS`` cycles. The scores come from the MAC array in the whole step; here they are an input.

    Parameters
    ----------
    head_dim : int
    max_positions : int
        The most positions a head attends (the buffer's depth).

    Members
    -------
    i : In(stream.Signature(softmax_in_layout(head_dim)))
    o : Out(stream.Signature(softmax_out_layout()))
        The head's ``head_dim`` elements, ``last`` on the last.
    a_exp : In(32)
        The exponent constant (:func:`sw.golden.step.exp_constant`).
    a_mult, a_shift : In
        ``o / E`` to the o-projection's input scale.
    """

    #: Bits of a quotient: the numerator ``o * a_mult`` is below ``2**(8 + 15 + 10 + 16)`` in
    #: magnitude for up to 1,024 positions.
    NUM_BITS = 50

    def __init__(self, head_dim=24, max_positions=1024):
        for name, v in (("head_dim", head_dim), ("max_positions", max_positions)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"SoftmaxAv {name} must be a positive integer, not {v!r}")
        if max_positions > 1024:
            raise ValueError(f"SoftmaxAv max_positions must be at most 1024 (the quotient's width), "
                             f"not {max_positions}")
        self._dh, self._P = head_dim, max_positions
        super().__init__({
            "i": In(stream.Signature(softmax_in_layout(head_dim))),
            "o": Out(stream.Signature(softmax_out_layout())),
            "a_exp": In(32), "a_mult": In(quant.MULT_BITS), "a_shift": In(quant.SHIFT_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        DH, NB = self._dh, self.NUM_BITS
        ab = index_bits(self._P)
        table = quant.exp2_table()
        m.submodules.exp_table = tmem = memory.Memory(shape=unsigned(16), depth=len(table),
                                                      init=[int(x) for x in table])
        trd = tmem.read_port()
        pos = data.StructLayout({"score": signed(quant.ACC_BITS), "v": data.ArrayLayout(signed(8), DH)})
        m.submodules.buf = buf = memory.Memory(shape=pos, depth=self._P, init=[])
        wr, rd = buf.write_port(), buf.read_port()

        count = Signal(range(self._P + 1))
        top = Signal(signed(quant.ACC_BITS))
        raddr = Signal(ab)
        issue = Signal()
        acc_w = 16 + 8 + ab + 1
        E = Signal(16 + ab + 1)
        o = [Signal(signed(acc_w), name=f"o_{i}") for i in range(DH)]
        clear = Signal()

        # The exp pipeline: stage 1 the buffer's word, registered (a block RAM's output is slow);
        # stage 2 t, the table address and the halvings; stage 3 the table's word shifted; stage 4
        # the accumulators.
        v0 = Signal()
        v1 = Signal()
        e1 = Signal(pos, reset_less=True)
        m.d.comb += rd.addr.eq(raddr)
        m.d.sync += [v0.eq(issue), v1.eq(v0), e1.eq(rd.data)]
        t2 = Signal(quant.ACC_BITS + 33)
        n2 = Signal(6, reset_less=True)
        v2 = Signal()
        vv2 = Signal(data.ArrayLayout(signed(8), DH), reset_less=True)
        m.d.comb += t2.eq((top - e1.score) * self.a_exp)
        m.d.comb += trd.addr.eq(t2[quant.EXP_FRAC_BITS - quant.EXP_TABLE_BITS:quant.EXP_FRAC_BITS])
        hi = t2[quant.EXP_FRAC_BITS:]
        m.d.sync += [n2.eq(Mux(hi > 63, 63, hi)), v2.eq(v1), vv2.eq(e1.v)]
        e3 = Signal(16, reset_less=True)
        v3 = Signal()
        vv3 = Signal.like(vv2, reset_less=True)
        m.d.sync += [e3.eq(trd.data >> n2), v3.eq(v2), vv3.eq(vv2)]
        with m.If(clear):
            m.d.sync += [E.eq(0), *[x.eq(0) for x in o]]
        with m.Elif(v3):
            m.d.sync += [E.eq(E + e3), *[o[i].eq(o[i] + e3 * vv3[i]) for i in range(DH)]]

        # Division: |o[i] * a_mult| by D = E << a_shift, one quotient bit a cycle, every element's
        # lane at once: the numerators loaded one a cycle (one multiplier), NB steps, then each
        # lane rounded and pushed one a cycle.
        elem = Signal(range(DH + 1))
        neg = Signal(DH)
        mag = [Signal(NB, name=f"mag_{i}") for i in range(DH)]
        rem = [Signal(NB + quant.SHIFT_MAX + 2, name=f"rem_{i}") for i in range(DH)]
        quo = [Signal(NB, name=f"quo_{i}") for i in range(DH)]
        den = Signal(NB + quant.SHIFT_MAX + 1)
        step = Signal(range(NB + 1))
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=9, depth=4)
        push_y = Signal(signed(8))
        push_last = Signal()
        push = Signal()
        wait = Signal(range(5))

        with m.FSM():
            with m.State("in"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    sc = self.i.p.data.score
                    m.d.comb += [wr.addr.eq(count), wr.data.eq(self.i.p.data), wr.en.eq(1)]
                    m.d.sync += [count.eq(count + 1), top.eq(Mux((count == 0) | (sc > top), sc, top))]
                    with m.If(self.i.p.last):
                        m.d.sync += raddr.eq(0)
                        m.d.comb += clear.eq(1)
                        m.next = "exp"
            with m.State("exp"):
                m.d.comb += issue.eq(1)
                m.d.sync += raddr.eq(raddr + 1)
                with m.If(raddr == count - 1):
                    m.d.sync += wait.eq(4)
                    m.next = "drain"
            with m.State("drain"):
                m.d.sync += wait.eq(wait - 1)
                with m.If(wait == 0):
                    m.d.sync += [elem.eq(0), den.eq(E << self.a_shift)]
                    m.next = "load"
            with m.State("load"):
                x = Signal(signed(NB + 1))
                m.d.comb += x.eq(Array(o)[elem] * self.a_mult)
                for i in range(DH):
                    with m.If(elem == i):
                        m.d.sync += [neg[i].eq(x < 0), mag[i].eq(Mux(x < 0, -x, x)), rem[i].eq(0)]
                m.d.sync += elem.eq(elem + 1)
                with m.If(elem == DH - 1):
                    m.d.sync += step.eq(0)
                    m.next = "divide"
            with m.State("divide"):
                for i in range(DH):
                    restoring_step(m, rem[i], quo[i], mag[i].bit_select((NB - 1 - step)[:8], 1), den)
                m.d.sync += step.eq(step + 1)
                with m.If(step == NB - 1):
                    m.d.sync += elem.eq(0)
                    m.next = "round"
            with m.State("round"):
                # floor division of the signed numerator, then ties to even (quant.div_rne).
                with m.If(elem == DH):
                    m.d.sync += count.eq(0)
                    m.next = "in"
                with m.Elif(queue.w_rdy):
                    quo_e, rem_e = Array(quo)[elem], Array(rem)[elem]
                    q = Signal(signed(NB + 2))
                    r = Signal(len(rem[0]))
                    with m.If(~neg.bit_select(elem, 1)):
                        m.d.comb += [q.eq(quo_e), r.eq(rem_e)]
                    with m.Elif(rem_e == 0):
                        m.d.comb += [q.eq(-quo_e), r.eq(0)]
                    with m.Else():
                        m.d.comb += [q.eq(-quo_e - 1), r.eq(den - rem_e)]
                    r2 = Cat(0, r)
                    up = (r2 > den) | ((r2 == den) & q[0])
                    qq = Signal(signed(NB + 3))
                    m.d.comb += qq.eq(q + up)
                    m.d.comb += [push.eq(1), push_last.eq(elem == DH - 1),
                                 push_y.eq(Mux(qq > 127, 127, Mux(qq < -128, -128, qq)))]
                    m.d.sync += elem.eq(elem + 1)
        m.d.comb += [queue.w_en.eq(push), queue.w_data.eq(Cat(push_y, push_last))]
        m.d.comb += [self.o.valid.eq(queue.r_rdy), self.o.p.data.y.eq(queue.r_data[:8]),
                     self.o.p.last.eq(queue.r_data[8]), queue.r_en.eq(self.o.ready)]
        return m
