"""The residual add: a block's int32 accumulators requantised into the residual stream, saturated."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.credit_queue import CreditQueue
from hw.lib.requant_lane import RequantLane
from sw.spec import quant

__all__ = ["Residual", "residual_in_layout", "residual_out_layout"]

#: Width of the residual stream (:data:`sw.spec.quant.RESIDUAL_BITS`).
R_BITS = quant.RESIDUAL_BITS


def residual_in_layout(acc_bits=quant.ACC_BITS):
    """One element: the residual ``r``, the block's accumulator ``acc`` and its channel's
    ``(mult, shift)``; ``last`` on a row's last element."""
    return data.StructLayout({
        "data": data.StructLayout({"r": signed(R_BITS), "acc": signed(acc_bits),
                                   "mult": unsigned(quant.MULT_BITS), "shift": unsigned(quant.SHIFT_BITS)}),
        "last": 1})


def residual_out_layout():
    return data.StructLayout({"data": data.StructLayout({"r": signed(R_BITS)}), "last": 1})


class Residual(wiring.Component):
    """``saturate32(r + requant_wide(acc, mult, shift))`` element by element, bit for bit
    (:func:`sw.spec.quant.requant_wide`, :func:`sw.spec.quant.saturate`): the attention's
    output projection (``acc = a . wo``, per-channel constants) and the MLP's output (``acc = y``,
    the layer's constants) into the residual stream.

    One element a cycle: the requantiser lane of the MLP's output stage
    (:class:`hw.lib.requant_lane.RequantLane`, into 32 bits) carries ``r`` and ``last`` in its
    tag; one more stage adds and saturates; a queue holds the results for ``o``. ``i`` is taken
    while fewer than ``queue_depth`` elements are in flight or queued, so nothing inside stalls.

    Parameters
    ----------
    acc_bits : int
        Signed width of the accumulators (default :data:`sw.spec.quant.ACC_BITS`).
    queue_depth : int
        Elements in flight or waiting on ``o``; the default, ``latency + 1``, takes one a cycle
        while ``o`` is ready (a credit comes back the cycle after its element leaves).

    Members
    -------
    i : In(stream.Signature(residual_in_layout(acc_bits)))
    o : Out(stream.Signature(residual_out_layout()))
    """

    #: Cycles from an element taken on ``i`` to it on ``o`` (``o`` ready, nothing queued): the lane,
    #: the add and saturation, the queue's write and read (``SyncFIFOBuffered``).
    latency = RequantLane.latency + 1 + 2

    def __init__(self, acc_bits=quant.ACC_BITS, *, queue_depth=None):
        if queue_depth is None:
            queue_depth = self.latency + 1
        if not isinstance(acc_bits, int) or isinstance(acc_bits, bool) or not 2 <= acc_bits <= quant.ACC_BITS:
            raise ValueError(f"Residual acc_bits must be an integer in 2..{quant.ACC_BITS}, not {acc_bits!r}")
        if not isinstance(queue_depth, int) or isinstance(queue_depth, bool) or queue_depth < 1:
            raise ValueError(f"Residual queue_depth must be a positive integer, not {queue_depth!r}")
        self._acc_bits, self._depth = acc_bits, queue_depth
        super().__init__({
            "i": In(stream.Signature(residual_in_layout(acc_bits))),
            "o": Out(stream.Signature(residual_out_layout())),
        })

    def elaborate(self, platform):
        m = Module()
        depth = self._depth

        # ---- credits: every element in flight has its place in the queue -------------------------
        m.submodules.queue = queue = CreditQueue(self.o.p.shape(), depth)
        take = Signal()
        m.d.comb += [self.i.ready.eq(queue.room), take.eq(self.i.valid & self.i.ready), queue.take.eq(take)]

        # ---- stages 1-5: the lane, r and last in its tag --------------------------------------------
        tag_layout = data.StructLayout({"r": signed(R_BITS), "last": 1})
        tag = Signal(tag_layout)
        m.d.comb += [tag.r.eq(self.i.p.data.r), tag.last.eq(self.i.p.last)]
        # A product narrower than the residual never saturates it: the lane's result as wide as the product.
        lane_bits = min(R_BITS, self._acc_bits + quant.MULT_BITS + 1)
        m.submodules.lane = lane = RequantLane(self._acc_bits, tag_bits=len(tag.as_value()),
                                               out_bits=lane_bits)
        m.d.comb += [lane.i.valid.eq(take), lane.i.p.acc.eq(self.i.p.data.acc),
                     lane.i.p.mult.eq(self.i.p.data.mult), lane.i.p.shift.eq(self.i.p.data.shift),
                     lane.i.p.tag.eq(tag)]

        # ---- stage 6: the add, saturated to the residual's width ------------------------------------
        t5 = Signal(tag_layout)
        m.d.comb += t5.eq(lane.o.p.tag)
        total = Signal(signed(R_BITS + 1))
        m.d.comb += total.eq(t5.r + lane.o.p.y)
        hi, lo = (1 << (R_BITS - 1)) - 1, -(1 << (R_BITS - 1))
        out = Signal(residual_out_layout(), reset_less=True)
        valid6 = Signal()
        m.d.sync += [out.last.eq(t5.last), valid6.eq(lane.o.valid)]
        with m.If(total > hi):
            m.d.sync += out.data.r.eq(hi)
        with m.Elif(total < lo):
            m.d.sync += out.data.r.eq(lo)
        with m.Else():
            m.d.sync += out.data.r.eq(total)

        # ---- the queue --------------------------------------------------------------------------------
        m.d.comb += [queue.i.valid.eq(valid6), queue.i.payload.eq(out)]
        wiring.connect(m, queue.o, wiring.flipped(self.o))
        return m
