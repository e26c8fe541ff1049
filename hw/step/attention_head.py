"""One head's attention from ``q`` and its attended positions' ``k`` and ``v``: scores, then softmax."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.step.qk_score import QkScore, qk_in_layout
from hw.step.softmax_av import SoftmaxAv, softmax_out_layout
from sw.golden import quant

__all__ = ["AttentionHead"]


class AttentionHead(wiring.Component):
    """:class:`hw.step.qk_score.QkScore` into :class:`hw.step.softmax_av.SoftmaxAv`: a head's
    ``q . k_j`` over its attended positions, the base-2 softmax, ``p . v`` and ``o / E``, bit for
    bit the golden model's attention of one head. Only wiring.

    Parameters
    ----------
    head_dim : int
    max_positions : int
        The most positions a head attends.

    Members
    -------
    i : In(stream.Signature(qk_in_layout(head_dim)))
        The head's positions, one a beat, ``last`` on the last.
    o : Out(stream.Signature(softmax_out_layout()))
        The head's ``head_dim`` elements.
    a_exp, a_mult, a_shift : In
        The layer's constants (:class:`hw.step.softmax_av.SoftmaxAv`).
    """

    def __init__(self, head_dim=24, max_positions=1024):
        self._dh, self._P = head_dim, max_positions
        super().__init__({
            "i": In(stream.Signature(qk_in_layout(head_dim))),
            "o": Out(stream.Signature(softmax_out_layout())),
            "a_exp": In(32), "a_mult": In(quant.MULT_BITS), "a_shift": In(quant.SHIFT_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.qk = qk = QkScore(self._dh)
        m.submodules.softmax = sm = SoftmaxAv(self._dh, self._P)
        wiring.connect(m, wiring.flipped(self.i), qk.i)
        wiring.connect(m, qk.o, sm.i)
        wiring.connect(m, sm.o, wiring.flipped(self.o))
        m.d.comb += [sm.a_exp.eq(self.a_exp), sm.a_mult.eq(self.a_mult), sm.a_shift.eq(self.a_shift)]
        return m
