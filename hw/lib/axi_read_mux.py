"""Several AXI4 read managers on one AXI4 read port: the bursts' addresses taken in turn, the data
routed back by ID."""

from amaranth import *
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.lib.axi import AxiReadSignature

__all__ = ["AxiReadMux"]


class AxiReadMux(wiring.Component):
    """``n`` AXI4 read managers (``s0`` ... ``s{n-1}``) on one read port (``m_axi``).

    The address channel is given to the managers in turn (round robin over those waiting); a
    manager keeps it from its ``arvalid`` to its ``arready``, so every address stays stable as
    AXI4 requires. Each burst leaves with ``arid`` = the manager's index and its data beats go back
    to the manager its ``rid`` names, so a memory may answer the managers' bursts in any order. A
    manager must take its data beats without waiting on another manager (as
    :class:`hw.lib.axi_reader.AxiReader` does: it asks only for bursts its buffer has room for),
    or the port blocks.

    Parameters
    ----------
    n : int
        Managers (at least 2).
    addr_width, data_width : int
        The bus's.

    Members
    -------
    s0 ... s{n-1} : In(AxiReadSignature(addr_width, data_width))
        The managers (their ``arid`` ignored; ``rid`` 0).
    m_axi : Out(AxiReadSignature(addr_width, data_width, id_width=ceil_log2(n)))
    """

    def __init__(self, n, addr_width=32, data_width=64):
        if not isinstance(n, int) or isinstance(n, bool) or n < 2:
            raise ValueError(f"AxiReadMux n must be an integer of at least 2, not {n!r}")
        self._n = n
        members = {f"s{k}": In(AxiReadSignature(addr_width, data_width)) for k in range(n)}
        members["m_axi"] = Out(AxiReadSignature(addr_width, data_width, id_width=ceil_log2(n)))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        n, bus = self._n, self.m_axi
        subs = [getattr(self, f"s{k}") for k in range(n)]

        # ---- addresses: round robin, held from valid to ready -------------------------------------
        last = Signal(range(n), init=n - 1)          # the manager granted last
        held = Signal()                              # m_axi.arvalid was high without arready
        held_g = Signal(range(n))
        grant = Signal(range(n))
        m.d.comb += grant.eq(last)
        # The first waiting manager after the last granted, in turn.
        with m.Switch(last):
            for a in range(n):
                with m.Case(a):
                    for off in reversed(range(1, n + 1)):
                        with m.If(subs[(a + off) % n].arvalid):
                            m.d.comb += grant.eq((a + off) % n)
        g = Signal(range(n))
        m.d.comb += g.eq(Mux(held, held_g, grant))
        for k, s in enumerate(subs):
            with m.If(g == k):
                m.d.comb += [bus.araddr.eq(s.araddr), bus.arlen.eq(s.arlen), bus.arsize.eq(s.arsize),
                             bus.arburst.eq(s.arburst), bus.arvalid.eq(s.arvalid),
                             s.arready.eq(bus.arready)]
        m.d.comb += bus.arid.eq(g)
        m.d.sync += [held.eq(bus.arvalid & ~bus.arready), held_g.eq(g)]
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += last.eq(g)

        # ---- data: to the manager the ID names ---------------------------------------------------
        for k, s in enumerate(subs):
            m.d.comb += [s.rdata.eq(bus.rdata), s.rresp.eq(bus.rresp), s.rlast.eq(bus.rlast), s.rid.eq(0),
                         s.rvalid.eq(bus.rvalid & (bus.rid == k))]
            with m.If(bus.rid == k):
                m.d.comb += bus.rready.eq(s.rready)
        return m
