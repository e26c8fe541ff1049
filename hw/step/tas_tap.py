"""FastCar's decision in the step, from the scores the attention already computes."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from sw.spec import quant

__all__ = ["TasTap", "tap_in_layout", "decision_layout"]


def tap_in_layout():
    """One score as it passes to the softmax: ``tas`` marks the position one frame earlier (the same
    spatial position), ``end`` the row's last score (its last head's last position)."""
    return data.StructLayout({"score": signed(quant.ACC_BITS), "tas": 1, "end": 1})


def decision_layout():
    """A row's decision: its TAS and the replay bit."""
    return data.StructLayout({"data": data.StructLayout({"tas": signed(quant.ACC_BITS), "replay": 1})})


class TasTap(wiring.Component):
    """The row's TAS as the sum of its heads' scores of the marked position, and the replay rule,
    bit for bit :func:`sw.spec.quant.tas_int` and :func:`sw.spec.quant.replay_decision`::

        tas    = sum over heads h of q_h . k_h[p - tokens_per_frame]    (the marked scores)
        replay = marked and tas >= threshold

    ``q . k`` summed over heads and head dimensions is the TAS exactly, so the step needs no TAS
    engine of its own: the scores are :class:`hw.step.qk_score.QkScore`'s. A row with no marked
    score (frame 0, or FastCar off) gives ``tas = 0`` and no replay. The drift guard
    (``refresh_every``, ``max_chain``) is not here yet.

    Each score taken on ``i`` is added to the row's sum when marked; on the row's ``end`` the sum is
    registered and the decision, with its comparison, written to a queue for ``o``. ``i`` is ready
    while the queue has room for the decision in flight.

    Parameters
    ----------
    queue_depth : int
        Decisions that may wait on ``o``.

    Members
    -------
    i : In(stream.Signature(tap_in_layout()))
    o : Out(stream.Signature(decision_layout()))
    threshold : In(signed(quant.ACC_BITS + 1))
        The layer's integer threshold (static while its rows flow; ``ACC_MAX + 1``: never).
    """

    def __init__(self, *, queue_depth=4):
        if not isinstance(queue_depth, int) or isinstance(queue_depth, bool) or queue_depth < 2:
            raise ValueError(f"TasTap queue_depth must be an integer of at least 2, not {queue_depth!r}")
        self._depth = queue_depth
        super().__init__({
            "i": In(stream.Signature(tap_in_layout())),
            "o": Out(stream.Signature(decision_layout())),
            "threshold": In(signed(quant.ACC_BITS + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        A = quant.ACC_BITS
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=A + 1, depth=self._depth)

        # ---- the running sum of the marked scores ---------------------------------------------------
        acc = Signal(signed(A))
        marked = Signal()
        take = Signal()
        pending = Signal()
        m.d.comb += [self.i.ready.eq(queue.level + pending < self._depth),
                     take.eq(self.i.valid & self.i.ready)]
        add = Signal(signed(A))
        m.d.comb += add.eq(Mux(self.i.p.tas, self.i.p.score, 0))
        total = Signal(signed(A), reset_less=True)
        total_marked = Signal()
        m.d.sync += pending.eq(take & self.i.p.end)
        with m.If(take):
            with m.If(self.i.p.end):
                m.d.sync += [acc.eq(0), marked.eq(0), total.eq(acc + add),
                             total_marked.eq(marked | self.i.p.tas)]
            with m.Else():
                m.d.sync += [acc.eq(acc + add), marked.eq(marked | self.i.p.tas)]

        # ---- the rule, into the queue -----------------------------------------------------------------
        dec = Signal(decision_layout())
        m.d.comb += [dec.data.tas.eq(total), dec.data.replay.eq(total_marked & (total >= self.threshold)),
                     queue.w_en.eq(pending), queue.w_data.eq(dec),
                     self.o.valid.eq(queue.r_rdy), self.o.payload.eq(queue.r_data),
                     queue.r_en.eq(self.o.ready)]
        return m
