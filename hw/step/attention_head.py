"""One head's attention from ``q`` and its attended positions' ``k`` and ``v``: scores, then softmax."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.step.qk_score import QkScore, qk_in_layout
from hw.step.softmax_av import SoftmaxAv, softmax_out_layout
from hw.step.tas_tap import TasTap, decision_layout
from sw.spec import quant

__all__ = ["AttentionHead"]


class AttentionHead(wiring.Component):
    """:class:`hw.step.qk_score.QkScore` into :class:`hw.step.softmax_av.SoftmaxAv` and
    :class:`hw.step.tas_tap.TasTap`: a head's ``q . k_j`` over its attended positions, the base-2
    softmax, ``p . v`` and ``o / E``, bit for bit the golden model's attention of one head; and, from
    the same scores, each row's TAS and replay decision. Only wiring: a score passes when both the
    softmax and the tap take it.

    Parameters
    ----------
    head_dim : int
    max_positions : int
        The most positions a head attends.

    Members
    -------
    i : In(stream.Signature(qk_in_layout(head_dim)))
        The heads' positions, one a beat, ``last`` on a head's last, the marks
        (:data:`hw.step.qk_score.MARKS`) on the position one frame earlier and the row's end.
    o : Out(stream.Signature(softmax_out_layout()))
        Each head's ``head_dim`` elements.
    d : Out(stream.Signature(decision_layout()))
        Each row's decision.
    a_exp, a_mult, a_shift : In
        The layer's constants (:class:`hw.step.softmax_av.SoftmaxAv`).
    threshold : In
        The layer's TAS threshold (:class:`hw.step.tas_tap.TasTap`).
    """

    def __init__(self, head_dim=24, max_positions=1024):
        self._dh, self._P = head_dim, max_positions
        super().__init__({
            "i": In(stream.Signature(qk_in_layout(head_dim))),
            "o": Out(stream.Signature(softmax_out_layout())),
            "d": Out(stream.Signature(decision_layout())),
            "a_exp": In(32), "a_mult": In(quant.MULT_BITS), "a_shift": In(quant.SHIFT_BITS),
            "threshold": In(signed(quant.ACC_BITS + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.qk = qk = QkScore(self._dh)
        m.submodules.softmax = sm = SoftmaxAv(self._dh, self._P)
        m.submodules.tap = tap = TasTap()
        wiring.connect(m, wiring.flipped(self.i), qk.i)
        m.d.comb += [sm.i.valid.eq(qk.o.valid & tap.i.ready), tap.i.valid.eq(qk.o.valid & sm.i.ready),
                     qk.o.ready.eq(sm.i.ready & tap.i.ready),
                     sm.i.p.data.score.eq(qk.o.p.data.score), sm.i.p.data.v.eq(qk.o.p.data.v),
                     sm.i.p.last.eq(qk.o.p.last),
                     tap.i.p.score.eq(qk.o.p.data.score), tap.i.p.tas.eq(qk.o.p.data.tas),
                     tap.i.p.end.eq(qk.o.p.data.end)]
        wiring.connect(m, sm.o, wiring.flipped(self.o))
        wiring.connect(m, tap.o, wiring.flipped(self.d))
        m.d.comb += [sm.a_exp.eq(self.a_exp), sm.a_mult.eq(self.a_mult), sm.a_shift.eq(self.a_shift),
                     tap.threshold.eq(self.threshold)]
        return m
