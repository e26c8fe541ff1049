"""The TAS group: one decision per row taken, in the order the rows arrived, with that row's TAS;
``o`` keeps the stream rule."""

from amaranth import *
from amaranth.hdl import Assert, Assume

from hw.accel.tas_group import TasGroup
from hw.formal.harness import PropertyWrapper, in_ports, stream_hold
from sw.spec import quant

__all__ = ["TasGroupOrder"]

#: Width of the beat counters (more than the beats a check of the formal depth can take).
COUNT_BITS = 6


class TasGroupOrder(PropertyWrapper):
    """Scoreboard of a :class:`hw.accel.tas_group.TasGroup`.

    The rows on ``i`` keep the accelerator's contract: ``layer``, ``index`` and ``row`` in range,
    a beat held with its payload until taken; the drift-guard configuration (``refresh_en``,
    ``refresh_every``, ``max_chain_en``, ``max_chain``) is constant, at a value the solver picks.
    ``q``, the threshold, the frame and ``o.ready`` are free in every cycle; each ``k[e]`` is 0 or
    1, so the TAS is a sum of ``q`` elements: here it only tells the rows apart (the products of
    the fabric multipliers against ``sw.spec.quant.tas_int`` are ``tests/hw/accel/test_tas_group.py``'s
    matter, and a solver proving a multiplier equal to ``*`` takes many minutes).

    The wrapper numbers the rows taken and the decisions given (``o.valid & o.ready``), and
    watches one row, the ``n0``-th taken (``n0`` chosen by the solver and then fixed), keeping its
    ``row`` field and its exact TAS ``sum_e q[e] * k[e]``. It checks in every cycle:

    - **nothing invented or duplicated**: a decision is given only while more rows have been
      taken than decisions given;
    - **in order, none lost**: the ``n0``-th decision given carries the ``n0``-th row's ``row``
      and TAS (a lost, repeated or overtaken decision shifts the numbering, and the solver picks
      rows that differ);
    - **none stuck**: the watched row's decision is given within ``latency + a`` cycles in which
      ``o`` does not wait on ``ready``, ``a`` the decisions still owed when the row was taken
      (the pipeline never stalls, and once the row's decision is due every such cycle gives one
      of those ahead of it);
    - **stream rule** on ``o``: ``valid`` and the payload held until ``ready``.

    The replay bit is not checked here (``tests/hw/accel/test_tas_group.py`` compares it with the golden
    model). Covers: a decision waits on ``ready`` and leaves; the watched decision leaves after
    an earlier one.

    Parameters
    ----------
    dim, layers, tokens_per_frame, batch, lanes : int
        Group geometry (as :class:`hw.accel.tas_group.TasGroup`).
    dut_class : type
        The group's class (a planted-bug copy in the failing twin tests).
    """

    def __init__(self, *, dim=2, layers=1, tokens_per_frame=2, batch=2, lanes=2, dut_class=TasGroup):
        super().__init__()
        self.geometry = (dim, layers, tokens_per_frame, batch)
        self.dut = dut_class(dim, layers, tokens_per_frame, batch, lanes=lanes)
        self.free(*in_ports(self.dut))
        self.n0 = Signal(COUNT_BITS, name="n0")
        self.free(self.n0)

    def elaborate(self, platform):
        m = self.module()
        dut = self.dut
        m.submodules.dut = dut
        dim, layers, n, batch = self.geometry
        for name in ("refresh_en", "refresh_every", "max_chain_en", "max_chain"):
            self.constant(m, getattr(dut, name), name=name)
        self.constant(m, self.n0, name="n0")
        stream_hold(m, dut.i, name="i", assume=True)
        row = dut.i.p
        with m.If(dut.i.valid):
            m.d.comb += Assume((row.layer < layers) & (row.index < n) & (row.row < batch),
                               "row fields in range")
            for e in range(dim):
                m.d.comb += Assume((row.k[e] == 0) | (row.k[e] == 1), "k is 0 or 1 (the TAS a sum of q)")

        took = dut.i.valid & dut.i.ready
        gave = dut.o.valid & dut.o.ready
        stalled = dut.o.valid & ~dut.o.ready
        taken = Signal(COUNT_BITS)
        given = Signal(COUNT_BITS)
        with m.If(took):
            m.d.sync += taken.eq(taken + 1)
        with m.If(gave):
            m.d.sync += given.eq(given + 1)
            m.d.comb += Assert(given != taken, "a decision is given only for a row taken (none invented)")

        tas = Signal(signed(quant.sum_bits(dim)))
        m.d.comb += tas.eq(sum(row.q[e] * row.k[e] for e in range(dim)))
        w_row = Signal.like(row.row, name="watched_row")
        w_tas = Signal.like(tas, name="watched_tas")
        w_in = Signal()                                     # the watched row is in flight
        w_age = Signal(COUNT_BITS)                          # cycles since, o not waiting on ready
        w_ahead = Signal(COUNT_BITS)                        # decisions owed before it
        with m.If(took & (taken == self.n0)):
            m.d.sync += [w_row.eq(row.row), w_tas.eq(tas), w_in.eq(1), w_age.eq(0),
                         w_ahead.eq(taken - given - gave)]
        with m.If(gave & (given == self.n0)):
            m.d.comb += [
                Assert(w_in, "the n-th decision follows the n-th row"),
                Assert(dut.o.p.row == w_row, "the n-th decision is the n-th row's (in order, none lost)"),
                Assert(dut.o.p.tas == w_tas, "the n-th decision carries the n-th row's TAS"),
            ]
            m.d.sync += w_in.eq(0)
        with m.Elif(w_in & ~stalled):
            m.d.sync += w_age.eq(w_age + 1)
        m.d.comb += Assert(~w_in | (w_age <= dut.latency + w_ahead),
                           "a row's decision is given in time (none stuck)")

        waiting = stream_hold(m, dut.o, name="o")
        self.cover(m, waiting & gave, "o: a decision waits, then leaves")
        self.cover(m, gave & (given == self.n0) & (self.n0 == 2), "the third decision leaves, in order")
        return m
