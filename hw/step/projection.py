"""A row times a weight matrix on the MLP's MAC unit: the step's q/k/v/o projections and its LM head."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.credit_queue import CreditQueue
from hw.lib.mv_unit import MvUnit, mv_latency
from hw.lib.requant_lane import RequantLane
from sw.spec import quant

__all__ = ["Projection", "projection_in_layout", "projection_out_layout"]


def projection_in_layout(n_in, n_out):
    """One beat of a run: ``n_in`` elements of the row, the ``n_in x n_out`` weights that meet them
    (``w[n * n_in + k]`` for input ``k`` and output ``n``), and, read on the run's last beat, the
    block's requantisation constants and ``end``, set on the row's last block; ``last`` ends a run."""
    return data.StructLayout({
        "data": data.StructLayout({
            "x": data.ArrayLayout(signed(8), n_in),
            "w": data.ArrayLayout(signed(8), n_in * n_out),
            "mult": data.ArrayLayout(unsigned(quant.MULT_BITS), n_out),
            "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), n_out),
            "end": 1}),
        "last": 1})


def projection_out_layout(n_out, requant):
    """One block of ``n_out`` outputs: int8 when requantised, else the int32 accumulators; ``last``
    on the row's last block."""
    width = 8 if requant else quant.ACC_BITS
    return data.StructLayout({"data": data.StructLayout({"y": data.ArrayLayout(signed(width), n_out)}),
                              "last": 1})


class Projection(wiring.Component):
    """``x @ W`` of a row, ``n_out`` outputs at a time, exactly :func:`sw.spec.quant.matmul_int`,
    then with ``requant`` :func:`sw.spec.quant.requantize` per output channel (q, k and v); without,
    the int32 accumulators leave as they are (the o projection, whose requantisation is the residual
    block's, and the LM head, whose is the sampler's).

    A run of ``d_in / n_in`` beats makes one block of outputs: the MLP's matrix-vector unit
    (:class:`hw.lib.mv_unit.MvUnit`, ``n_in x n_out`` MACs a cycle) accumulates it, and its
    constants and ``end`` travel beside the unit in a register chain to ``n_out`` requantiser lanes
    (:class:`hw.lib.requant_lane.RequantLane`, the MLP's). The weights arrive with the row's
    elements, as a weight stream from memory would bring them. ``i`` is taken while fewer than
    ``queue_depth`` blocks are in flight or queued, so nothing inside stalls.

    Parameters
    ----------
    n_in, n_out : int
        The MAC unit's geometry (``AccelConfig.mv_in``, ``AccelConfig.mv_out``).
    requant : bool
        Requantise to int8 per output channel.
    queue_depth : int
        Blocks in flight or waiting on ``o``; the default, ``latency + 1``, takes a run of one beat
        a cycle while ``o`` is ready.

    Members
    -------
    i : In(stream.Signature(projection_in_layout(n_in, n_out)))
    o : Out(stream.Signature(projection_out_layout(n_out, requant)))
    """

    def __init__(self, n_in=8, n_out=8, *, requant=True, queue_depth=None):
        for name, v in (("n_in", n_in), ("n_out", n_out)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Projection {name} must be a positive integer, not {v!r}")
        self._n_in, self._n_out, self._requant = n_in, n_out, bool(requant)
        if queue_depth is None:
            queue_depth = self.latency + 1
        if not isinstance(queue_depth, int) or isinstance(queue_depth, bool) or queue_depth < 1:
            raise ValueError(f"Projection queue_depth must be a positive integer, not {queue_depth!r}")
        self._depth = queue_depth
        super().__init__({
            "i": In(stream.Signature(projection_in_layout(n_in, n_out))),
            "o": Out(stream.Signature(projection_out_layout(n_out, requant))),
        })

    @property
    def latency(self) -> int:
        """Cycles from a run's last beat taken to its block on ``o`` (``o`` ready, nothing queued): the
        MAC unit's, the lanes' with ``requant``, the queue's write and read."""
        return mv_latency(self._n_in) + (RequantLane.latency if self._requant else 0) + 2

    def elaborate(self, platform):
        m = Module()
        NI, NO, depth = self._n_in, self._n_out, self._depth

        # ---- credits: a block in flight or queued holds one ---------------------------------------
        m.submodules.queue = queue = CreditQueue(self.o.p.shape(), depth)
        take = Signal()
        m.d.comb += [self.i.ready.eq(queue.room), take.eq(self.i.valid & self.i.ready),
                     queue.take.eq(take & self.i.p.last)]

        # ---- the MAC unit: a run from the beat after a last (or reset) to its last -----------------
        first = Signal(init=1)
        with m.If(take):
            m.d.sync += first.eq(self.i.p.last)
        m.submodules.mac = mac = MvUnit(NI, NO, quant.ACC_BITS)
        m.d.comb += [mac.i.valid.eq(take), mac.i.p.x.eq(self.i.p.data.x), mac.i.p.w.eq(self.i.p.data.w),
                     mac.i.p.first.eq(first), mac.i.p.last.eq(self.i.p.last)]

        # ---- the block's constants and end beside it ----------------------------------------------
        fields = {"end": 1}
        if self._requant:
            fields.update({"mult": data.ArrayLayout(unsigned(quant.MULT_BITS), NO),
                           "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), NO)})
        side_layout = data.StructLayout(fields)
        side = Signal(side_layout)
        m.d.comb += side.end.eq(self.i.p.data.end)
        if self._requant:
            m.d.comb += [side.mult.eq(self.i.p.data.mult), side.shift.eq(self.i.p.data.shift)]
        for stage in range(mac.latency):
            nxt = Signal(side_layout, name=f"side_{stage}", reset_less=True)
            m.d.sync += nxt.eq(side)
            side = nxt

        # ---- the lanes, or the accumulators as they are ----------------------------------------
        out = Signal(projection_out_layout(NO, self._requant))
        if self._requant:
            valid = Signal()
            for n in range(NO):
                lane = RequantLane(quant.ACC_BITS, tag_bits=1 if n == 0 else 0)
                m.submodules[f"lane_{n}"] = lane
                m.d.comb += [lane.i.valid.eq(mac.o.valid), lane.i.p.acc.eq(mac.o.p[n]),
                             lane.i.p.mult.eq(side.mult[n]), lane.i.p.shift.eq(side.shift[n]),
                             out.data.y[n].eq(lane.o.p.y)]
                if n == 0:
                    m.d.comb += [lane.i.p.tag.eq(side.end), out.last.eq(lane.o.p.tag), valid.eq(lane.o.valid)]
        else:
            valid = mac.o.valid
            m.d.comb += [out.data.y.eq(mac.o.p), out.last.eq(side.end)]

        # ---- the queue ----------------------------------------------------------------------------
        m.d.comb += [queue.i.valid.eq(valid), queue.i.payload.eq(out)]
        wiring.connect(m, queue.o, wiring.flipped(self.o))
        return m
