"""RMSNorm of an int32 residual row into int8, with the exact integer reciprocal square root."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.credit_queue import CreditQueue
from hw.lib.divide import restoring_step
from hw.lib.widths import index_bits
from sw.spec import quant

__all__ = ["RmsNorm", "rmsnorm_in_layout", "rmsnorm_out_layout"]

#: Width of the sum of squares ``D`` (the golden model's int64).
D_BITS = 64


def rmsnorm_in_layout():
    """One element of a row: the residual and its channel's ``(mult, shift)``; ``last`` on the row's last."""
    return data.StructLayout({
        "data": data.StructLayout({"r": signed(quant.RESIDUAL_BITS), "mult": unsigned(quant.MULT_BITS),
                                   "shift": unsigned(quant.SHIFT_BITS)}),
        "last": 1})


def rmsnorm_out_layout():
    return data.StructLayout({"data": data.StructLayout({"y": signed(8)}), "last": 1})


class RmsNorm(wiring.Component):
    """:func:`sw.spec.quant.rmsnorm_int` of one row at a time, bit for bit::

        D   = sum(r * r) + d * eps                  (64-bit, as the golden model's int64)
        inv = isqrt(2**60 // max(D, 1))             = floor(2**30 / sqrt(D))
        y   = saturate8(round_half_even(r * inv * mult / 2**(30 + shift)))

    Three phases per row:

    - **in**: the row's elements are taken one per cycle into a buffer (a memory of ``max_d``
      words with the channel constants) while ``D`` accumulates their squares and ``eps``;
    - **reciprocal**: ``2**60 // D`` by restoring division (61 cycles), then its integer square
      root digit by digit (31 cycles);
    - **out**: the buffer is read one element per cycle through a fixed pipeline (the two
      products, the rounding and the saturation) into an output queue, as long as the queue has
      room for every element in flight, so ``o.ready`` stalls nothing inside.

    The next row is taken once the last element of this one has entered the pipeline.

    Parameters
    ----------
    max_d : int
        The longest row (the buffer's depth).

    Members
    -------
    i : In(stream.Signature(rmsnorm_in_layout()))
    o : Out(stream.Signature(rmsnorm_out_layout()))
    eps : In(32)
        The float eps in residual units squared, an integer (static while rows flow).
    """

    #: Cycles of the reciprocal phase: the division's 61 steps and the square root's 31.
    reciprocal_cycles = (2 * quant.RSQRT_BITS + 1) + (quant.RSQRT_BITS + 1)
    #: The out pipeline: the buffer read, the two products, the rounding.
    pipe = 4
    queue_depth = 8

    def __init__(self, max_d=96):
        if not isinstance(max_d, int) or isinstance(max_d, bool) or max_d < 2:
            raise ValueError(f"RmsNorm max_d must be an integer of at least 2, not {max_d!r}")
        self._max_d = max_d
        super().__init__({
            "i": In(stream.Signature(rmsnorm_in_layout())),
            "o": Out(stream.Signature(rmsnorm_out_layout())),
            "eps": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        R, NB = quant.RSQRT_BITS, 2 * quant.RSQRT_BITS      # inv = isqrt(2**NB // D)
        ab = index_bits(self._max_d)
        elem = data.StructLayout({"r": signed(quant.RESIDUAL_BITS), "mult": unsigned(quant.MULT_BITS),
                                  "shift": unsigned(quant.SHIFT_BITS)})
        m.submodules.buf = buf = memory.Memory(shape=elem, depth=self._max_d, init=[])
        wr, rd = buf.write_port(), buf.read_port()

        count = Signal(range(self._max_d + 1))
        D = Signal(D_BITS)
        inv = Signal(R + 1)
        # Division and square root registers.
        rem = Signal(D_BITS + 1)
        quo = Signal(NB + 1)
        step = Signal(range(NB + 2))
        sq_rem = Signal(NB + 3)
        sq_root = Signal(R + 2)
        sq_num = Signal(NB + 2)

        # The out phase: read address, credits.
        raddr = Signal(ab)
        issue = Signal()
        m.submodules.queue = queue = CreditQueue(self.o.p.shape(), self.queue_depth)

        with m.FSM():
            with m.State("in"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(self.i.valid):
                    r = self.i.p.data.r
                    m.d.comb += [wr.addr.eq(count), wr.data.eq(self.i.p.data), wr.en.eq(1)]
                    m.d.sync += [D.eq((D + r * r + self.eps)[:D_BITS]), count.eq(count + 1)]
                    with m.If(self.i.p.last):
                        m.d.sync += [rem.eq(0), quo.eq(0), step.eq(0)]
                        m.next = "divide"
            with m.State("divide"):
                # 2**NB // max(D, 1), one quotient bit a step, from bit NB down.
                dd = Mux(D == 0, 1, D)
                bit = (NB - step)[:8]
                restoring_step(m, rem, quo, Const(1 << NB, NB + 1).bit_select(bit, 1), dd)
                m.d.sync += step.eq(step + 1)
                with m.If(step == NB):
                    m.d.sync += [sq_rem.eq(0), sq_root.eq(0), step.eq(0)]
                    m.next = "sqrt_load"
            with m.State("sqrt_load"):
                m.d.sync += sq_num.eq(quo)
                m.next = "sqrt"
            with m.State("sqrt"):
                # Digit by digit: two bits of the operand a step, from the top.
                top2 = sq_num[NB:NB + 2]
                trial_rem = Signal(len(sq_rem) + 2)
                trial = Signal(len(sq_root) + 2)
                m.d.comb += [trial_rem.eq(Cat(top2, sq_rem)),       # 4 * rem + the next two bits
                             trial.eq(Cat(Const(1, 2), sq_root))]   # 4 * root + 1
                with m.If(trial_rem >= trial):
                    m.d.sync += [sq_rem.eq(trial_rem - trial), sq_root.eq(Cat(1, sq_root[:-1]))]
                with m.Else():
                    m.d.sync += [sq_rem.eq(trial_rem), sq_root.eq(Cat(0, sq_root[:-1]))]
                m.d.sync += [sq_num.eq(sq_num << 2), step.eq(step + 1)]
                with m.If(step == R):
                    m.d.sync += raddr.eq(0)
                    m.next = "out"
            with m.State("out"):
                m.d.comb += inv.eq(sq_root)
                m.d.comb += issue.eq(queue.room)
                with m.If(issue):
                    m.d.sync += raddr.eq(raddr + 1)
                    with m.If(raddr == count - 1):
                        m.d.sync += [count.eq(0), D.eq(0)]
                        m.next = "in"
        m.d.comb += queue.take.eq(issue)

        # ---- the out pipeline -------------------------------------------------------------------
        m.d.comb += rd.addr.eq(raddr)
        v = Signal(self.pipe)
        lastp = Signal(self.pipe)
        m.d.sync += [v.eq(Cat(issue, v[:-1])), lastp.eq(Cat(issue & (raddr == count - 1), lastp[:-1]))]
        e1 = Signal(elem)
        m.d.comb += e1.eq(rd.data)                               # stage 1: the buffer's word
        t2 = Signal(signed(quant.RESIDUAL_BITS + R + 2), reset_less=True)
        mult2 = Signal(quant.MULT_BITS, reset_less=True)
        sh2 = Signal(range(R + quant.SHIFT_MAX + 1), reset_less=True)
        inv_r = Signal(R + 1, reset_less=True)
        m.d.sync += inv_r.eq(sq_root)
        m.d.sync += [t2.eq(e1.r * inv_r), mult2.eq(e1.mult), sh2.eq(R + e1.shift)]      # stage 2
        pw = len(t2) + quant.MULT_BITS + 1
        p3 = Signal(signed(pw), reset_less=True)
        sh3 = Signal.like(sh2, reset_less=True)
        m.d.sync += [p3.eq(t2 * mult2), sh3.eq(sh2)]                                     # stage 3
        q = Signal(signed(pw))
        rem_ = Signal(pw)
        half = Signal(pw)
        m.d.comb += [q.eq(p3 >> sh3), rem_.eq((p3 - (q << sh3))[:pw]),
                     half.eq((Const(1, pw + 1) << sh3)[1:pw + 1])]
        up = (sh3 != 0) & ((rem_ > half) | ((rem_ == half) & q[0]))
        qq = Signal(signed(pw + 1))
        m.d.comb += qq.eq(q + up)
        y4 = Signal(signed(8), reset_less=True)
        with m.If(qq > 127):                                                             # stage 4
            m.d.sync += y4.eq(127)
        with m.Elif(qq < -128):
            m.d.sync += y4.eq(-128)
        with m.Else():
            m.d.sync += y4.eq(qq)
        m.d.comb += [queue.i.valid.eq(v[-1]), queue.i.p.data.y.eq(y4), queue.i.p.last.eq(lastp[-1])]
        wiring.connect(m, queue.o, wiring.flipped(self.o))
        return m
