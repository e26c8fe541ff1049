"""The output queue of a pipeline that never stalls inside, with the credits that keep it so."""

from amaranth import *
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out


class CreditQueue(wiring.Component):
    """A queue for a pipeline's results, and a credit for every item in flight or queued.

    A block whose pipeline cannot stall takes an item only while it has a credit (``room``): then
    every item it takes has a place in the queue when it comes out of the pipeline, however long
    ``o`` is refused. A credit is taken with ``take`` and comes back the cycle after its item
    leaves on ``o``.

    Parameters
    ----------
    shape : shape-castable
        The payload of ``i`` and ``o``.
    depth : int
        Items in flight or queued at most (the queue's depth).

    Members
    -------
    take : In(1)
        An item enters the pipeline this cycle (one credit; the caller counts an item once, for
        example at a run's last beat).
    room : Out(1)
        A credit is free: fewer than ``depth`` items are in flight or queued.
    i : In(stream.Signature(shape, always_ready=True))
        The pipeline's results. Never refused: an item always has its place.
    o : Out(stream.Signature(shape))
        The results in order.
    """

    def __init__(self, shape, depth: int):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 1:
            raise ValueError(f"CreditQueue depth must be a positive integer, not {depth!r}")
        self._shape, self._depth = shape, depth
        super().__init__({"take": In(1), "room": Out(1),
                          "i": In(stream.Signature(shape, always_ready=True)),
                          "o": Out(stream.Signature(shape))})

    @property
    def depth(self) -> int:
        return self._depth

    def elaborate(self, platform):
        m = Module()
        inflight = Signal(range(self._depth + 1))
        gone = Signal()
        # SyncFIFOBuffered of depth 2 refuses a write in the cycle after a write into it empty (its
        # inner one-word queue counts as full while the word moves to the output register), which
        # a pipeline that cannot stall would lose: at depth 2 the queue gets a third word.
        q_depth = self._depth if self._depth != 2 else 3
        m.submodules.fifo = q = fifo.SyncFIFOBuffered(width=Shape.cast(self._shape).width, depth=q_depth)
        m.d.comb += [self.room.eq(inflight < self._depth),
                     q.w_en.eq(self.i.valid), q.w_data.eq(self.i.payload),
                     self.o.valid.eq(q.r_rdy), self.o.payload.eq(q.r_data), q.r_en.eq(self.o.ready),
                     gone.eq(self.o.valid & self.o.ready)]
        m.d.sync += inflight.eq(inflight + self.take - gone)
        return m
