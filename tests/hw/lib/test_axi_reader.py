"""The AXI4 read manager in amaranth.sim with a small memory model: the bursts it asks for (at most
max_burst words, cut at 4 KB boundaries, no more outstanding than the buffer holds), the words in
order with last on each region's last, an error response flagged; the checks shown to fail on a
burst that ignores the boundary."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.lib.axi import BOUNDARY_BYTES
from hw.lib.axi_reader import AxiReader

NB = 8


def bursts_of(addr, words, max_burst, boundary=True):
    """The bursts the AXI4 rules allow for a region, as ``(addr, words)``."""
    out = []
    while words:
        n = min(max_burst, words)
        if boundary:
            n = min(n, (BOUNDARY_BYTES - addr % BOUNDARY_BYTES) // NB)
        out.append((addr, n))
        addr, words = addr + n * NB, words - n
    return out


def run(regions, *, max_burst=16, depth=32, latency=5, stall=0.0, bad_resp_at=None, seed=0):
    dut = AxiReader(32, 64, max_burst=max_burst, depth=depth)
    rng = np.random.default_rng(seed)
    requests, words, pending, peak = [], [], [], [0]

    async def bench(ctx):
        k = cycle = sent_words = 0
        total = sum(w for _, w in regions)
        queue = []                    # (ready_cycle, addr, n)
        beat = 0
        while len(words) < total:
            # command
            ctx.set(dut.i.valid, int(k < len(regions)))
            if k < len(regions):
                ctx.set(dut.i.p.addr, regions[k][0])
                ctx.set(dut.i.p.words, regions[k][1])
            # memory: AR always ready, R after `latency` cycles, one word a cycle
            ctx.set(dut.m_axi.arready, int(rng.random() >= stall))
            rvalid = bool(queue) and queue[0][0] <= cycle and rng.random() >= stall
            ctx.set(dut.m_axi.rvalid, int(rvalid))
            if rvalid:
                _, a, n = queue[0]
                ctx.set(dut.m_axi.rdata, (a // NB + beat) & (2**64 - 1))
                ctx.set(dut.m_axi.rlast, int(beat == n - 1))
                ctx.set(dut.m_axi.rresp, 2 if sent_words == bad_resp_at else 0)
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            if k < len(regions) and ctx.get(dut.i.ready):
                k += 1
            if ctx.get(dut.m_axi.arvalid) and ctx.get(dut.m_axi.arready):
                a, n = ctx.get(dut.m_axi.araddr), ctx.get(dut.m_axi.arlen) + 1
                requests.append((a, n))
                queue.append((cycle + latency, a, n))
                pending.append(n)
            if rvalid:
                beat += 1
                sent_words += 1
                if beat == queue[0][2]:
                    queue.pop(0)
                    beat = 0
            if ready and ctx.get(dut.o.valid):
                words.append((ctx.get(dut.o.p.data), ctx.get(dut.o.p.last)))
            outstanding = sum(n for _, _, n in queue) - beat     # requested, not yet returned
            peak[0] = max(peak[0], outstanding)
            await ctx.tick()
            cycle += 1
            assert cycle < 100 * total + 1000, "the reader stopped"
        return ctx.get(dut.error)

    err = []

    async def tb(ctx):
        err.append(await bench(ctx))
        await ctx.tick()
        err.append(ctx.get(dut.error))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return requests, words, peak[0], err[-1]


REGIONS = [(BOUNDARY_BYTES - 3 * NB, 20), (0, 1), (4 * NB, 16), (8 * NB, 40), (3 * BOUNDARY_BYTES - NB, 2)]


@pytest.mark.parametrize("stall", [0.0, 0.4])
def test_regions_in_order_in_legal_bursts(stall):
    requests, words, peak, err = run(REGIONS, stall=stall, seed=1)
    want_bursts = [b for a, w in REGIONS for b in bursts_of(a, w, 16)]
    assert requests == want_bursts
    want = [(a // NB + j, int(j == w - 1)) for a, w in REGIONS for j in range(w)]
    assert words == want
    assert peak <= 32 and not err
    # The check can fail: bursts that ignore the boundary differ on the first region.
    assert requests != [b for a, w in REGIONS for b in bursts_of(a, w, 16, boundary=False)]


def test_error_response_is_flagged():
    *_, err = run([(0, 8)], bad_resp_at=3)
    assert err == 1


def test_bad_parameters():
    for kw, name in (({"data_width": 12}, "data_width"), ({"max_burst": 257, "depth": 300}, "max_burst"),
                     ({"max_burst": 16, "depth": 8}, "depth"), ({"addr_width": 0}, "addr_width")):
        with pytest.raises(ValueError, match=name):
            AxiReader(**kw)
