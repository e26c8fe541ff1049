"""One head's attention scores ``q . k_j``, one attended position a cycle, on the MLP's MAC unit."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.credit_queue import CreditQueue
from hw.lib.mv_unit import MvUnit, mv_latency, tree_width
from sw.spec import quant

__all__ = ["QkScore", "qk_in_layout", "qk_out_layout"]

#: The marks that travel with a position: ``tas`` on the position one frame earlier (FastCar's
#: score, :class:`hw.step.tas_tap.TasTap`), ``end`` on the row's last position of its last head.
MARKS = {"tas": 1, "end": 1}


def qk_in_layout(head_dim):
    """One attended position of a head: the head's ``q`` (the same on every beat of the head), the
    position's ``k`` and ``v``, the marks; ``last`` on the head's last position."""
    return data.StructLayout({
        "data": data.StructLayout({**{n: data.ArrayLayout(signed(8), head_dim) for n in ("q", "k", "v")},
                                   **MARKS}),
        "last": 1})


def qk_out_layout(head_dim):
    """The position's score, its ``v`` and marks; ``last`` on the head's last position."""
    return data.StructLayout({
        "data": data.StructLayout({"score": signed(quant.ACC_BITS),
                                   "v": data.ArrayLayout(signed(8), head_dim),
                                   **MARKS}),
        "last": 1})


class QkScore(wiring.Component):
    """The score ``q . k_j`` of each attended position, exact (the golden model's int64 ``einsum``;
    ``|q . k| <= head_dim * 2**14``), passed on with ``v_j`` (what :class:`hw.step.softmax_av.SoftmaxAv`
    takes) and the position's marks (what :class:`hw.step.tas_tap.TasTap` takes).

    The dot product is the MLP's matrix-vector unit (:class:`hw.lib.mv_unit.MvUnit`) with
    ``n_in = head_dim`` and one output: ``k_j`` as its activations, ``q`` as its weights, every
    beat a run of one. ``v``, the marks and ``last`` travel beside it in a register chain. ``i`` is
    taken while fewer than ``queue_depth`` positions are in flight or queued, so nothing inside stalls.

    Parameters
    ----------
    head_dim : int
    queue_depth : int
        Positions in flight or waiting on ``o``; the default, ``latency + 1``, takes one a cycle
        while ``o`` is ready.

    Members
    -------
    i : In(stream.Signature(qk_in_layout(head_dim)))
    o : Out(stream.Signature(qk_out_layout(head_dim)))
    """

    def __init__(self, head_dim=24, *, queue_depth=None):
        if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim < 1:
            raise ValueError(f"QkScore head_dim must be a positive integer, not {head_dim!r}")
        self._dh = head_dim
        if queue_depth is None:
            queue_depth = self.latency + 1
        if not isinstance(queue_depth, int) or isinstance(queue_depth, bool) or queue_depth < 1:
            raise ValueError(f"QkScore queue_depth must be a positive integer, not {queue_depth!r}")
        self._depth = queue_depth
        super().__init__({
            "i": In(stream.Signature(qk_in_layout(head_dim))),
            "o": Out(stream.Signature(qk_out_layout(head_dim))),
        })

    @property
    def latency(self) -> int:
        """Cycles from a position taken on ``i`` to its score on ``o`` (``o`` ready, nothing queued):
        the MAC unit's, then the queue's write and read (``SyncFIFOBuffered``)."""
        return mv_latency(self._dh) + 2

    def elaborate(self, platform):
        m = Module()
        DH, depth = self._dh, self._depth

        # ---- credits ---------------------------------------------------------------------------
        m.submodules.queue = queue = CreditQueue(self.o.p.shape(), depth)
        take = Signal()
        m.d.comb += [self.i.ready.eq(queue.room), take.eq(self.i.valid & self.i.ready), queue.take.eq(take)]

        # ---- the dot product: k as the activations, q as the weights, a run of one ----------------
        m.submodules.mac = mac = MvUnit(DH, 1, tree_width(DH))
        m.d.comb += [mac.i.valid.eq(take), mac.i.p.first.eq(1), mac.i.p.last.eq(1)]
        for j in range(DH):
            m.d.comb += [mac.i.p.x[j].eq(self.i.p.data.k[j]), mac.i.p.w[j].eq(self.i.p.data.q[j])]

        # ---- v and last beside it ------------------------------------------------------------------
        side_layout = data.StructLayout({"v": data.ArrayLayout(signed(8), DH), **MARKS, "last": 1})
        side = Signal(side_layout)
        m.d.comb += [side.v.eq(self.i.p.data.v), side.tas.eq(self.i.p.data.tas),
                     side.end.eq(self.i.p.data.end),
                     side.last.eq(self.i.p.last)]
        for stage in range(mac.latency):
            nxt = Signal(side_layout, name=f"side_{stage}", reset_less=True)
            m.d.sync += nxt.eq(side)
            side = nxt

        # ---- the queue ------------------------------------------------------------------------------
        out = Signal(qk_out_layout(DH))
        m.d.comb += [out.data.score.eq(mac.o.p[0]), out.data.v.eq(side.v), out.data.tas.eq(side.tas),
                     out.data.end.eq(side.end), out.last.eq(side.last)]
        m.d.comb += [queue.i.valid.eq(mac.o.valid), queue.i.payload.eq(out)]
        wiring.connect(m, queue.o, wiring.flipped(self.o))
        return m
