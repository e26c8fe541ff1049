"""Two AXI4 read managers (``AxiReader``) on one port through ``AxiReadMux``, in amaranth.sim, against
a memory model that answers the bursts out of order (the newest burst's ID first, in order within an
ID): each manager gets its own regions' words, in order; every burst address stays stable from
valid to ready; both are served while both wait. The check is shown to fail when the data is routed
by order, not by ID."""

import numpy as np
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from hw.lib.axi_read_mux import AxiReadMux
from hw.lib.axi_reader import AxiReader

NB = 8


class Pair(wiring.Component):
    def __init__(self):
        self.a, self.b = AxiReader(32, 64, max_burst=4, depth=8), AxiReader(32, 64, max_burst=4, depth=8)
        self.mux = AxiReadMux(2, 32, 64)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.a, m.submodules.b, m.submodules.mux = self.a, self.b, self.mux
        wiring.connect(m, self.a.m_axi, self.mux.s0)
        wiring.connect(m, self.b.m_axi, self.mux.s1)
        return m


def run(regions, *, stall=0.3, seed=0, by_id=True):
    dut = Pair()
    rng = np.random.default_rng(seed)
    got = {0: [], 1: []}
    grants = []

    async def tb(ctx):
        bus = dut.mux.m_axi
        readers = (dut.a, dut.b)
        k = [0, 0]
        pending = []                 # bursts: [id, addr, n, sent]
        last_ar = None
        want = sum(w for rs in regions for _, w in rs)
        for _ in range(20000):
            for r, rd in enumerate(readers):
                ctx.set(rd.i.valid, int(k[r] < len(regions[r])))
                if k[r] < len(regions[r]):
                    ctx.set(rd.i.p.addr, regions[r][k[r]][0])
                    ctx.set(rd.i.p.words, regions[r][k[r]][1])
                ctx.set(rd.o.ready, int(rng.random() >= stall))
            ctx.set(bus.arready, int(rng.random() >= stall))
            # Out of order across IDs (the newest burst's ID answers first), in order within one.
            cur = None
            if pending and rng.random() >= stall:
                cur = next(p for p in pending if p[0] == pending[-1][0])
            ctx.set(bus.rvalid, int(cur is not None))
            if cur is not None:
                i, a, n, sent = cur
                ctx.set(bus.rid, i if by_id else 0)
                ctx.set(bus.rdata, a // NB + sent + (i << 40))
                ctx.set(bus.rlast, int(sent == n - 1))
            await ctx.delay(1e-9)
            for r, rd in enumerate(readers):
                if k[r] < len(regions[r]) and ctx.get(rd.i.ready):
                    k[r] += 1
                if ctx.get(rd.o.valid) and ctx.get(rd.o.ready):
                    got[r].append(ctx.get(rd.o.p.data))
            if ctx.get(bus.arvalid):
                ar = (ctx.get(bus.arid), ctx.get(bus.araddr), ctx.get(bus.arlen))
                assert last_ar is None or last_ar == ar, f"address changed while waiting: {last_ar} -> {ar}"
                last_ar = None if ctx.get(bus.arready) else ar
                if ctx.get(bus.arready):
                    pending.append([ar[0], ar[1], ar[2] + 1, 0])
                    grants.append(ar[0])
            if cur is not None and ctx.get(bus.rready):
                cur[3] += 1
                if cur[3] == cur[2]:
                    pending.remove(cur)
            await ctx.tick()
            if len(got[0]) + len(got[1]) == want:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return got, grants


REGIONS = ([(0, 10), (800, 3), (4096 - 16, 6)], [(1 << 16, 12), ((1 << 16) + 4096, 1)])


def want(r):
    return [a // NB + j + (r << 40) for a, w in REGIONS[r] for j in range(w)]


@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_each_manager_gets_its_words(stall):
    got, grants = run(REGIONS, stall=stall, seed=2)
    assert got[0] == want(0) and got[1] == want(1)
    assert 0 in grants[:3] and 1 in grants[:3]          # both served while both wait


def test_routing_by_order_is_caught():
    got, _ = run(REGIONS, stall=0.0, seed=2, by_id=False)
    assert got[0] != want(0)


def test_bad_parameters():
    with pytest.raises(ValueError, match="n must"):
        AxiReadMux(1)
