"""RowRuns in amaranth.sim: every run's beats (the right row's words against the right block's weights,
the block's constants on every run of it, end and last), the block reports, one and two rows per
group, two steps back to back, idle inputs and backpressure; the check shown to fail on a runner that
replays the first row of each group."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.row_runs import RowRuns

D, NI, NO, G, NB = 8, 4, 2, 2, 3
K = D // NI


def case(steps, repeat, seed=0):
    rng = np.random.default_rng(seed)
    rows = rng.integers(-128, 128, size=(steps, G * repeat, D))
    w = rng.integers(-128, 128, size=(steps, G, NB, K, NI * NO))
    mult = rng.integers(1, 1 << 16, size=(steps, G, NB, NO))
    shift = rng.integers(0, 40, size=(steps, G, NB, NO))
    return rows, w, mult, shift


def expected(rows, w, mult, shift, repeat):
    beats, reports = [], []
    for s in range(len(rows)):
        for g in range(G):
            for j in range(NB):
                reports.append((list(mult[s, g, j]), list(shift[s, g, j]), g, j))
                for t in range(repeat):
                    for k in range(K):
                        beats.append((list(rows[s, g + G * t, k * NI:(k + 1) * NI]), list(w[s, g, j, k]),
                                      list(mult[s, g, j]), list(shift[s, g, j]), int(t == repeat - 1),
                                      int(k == K - 1)))
    return beats, reports


def run(rows, w, mult, shift, repeat, *, stall=0.0, seed=1):
    dut = RowRuns(D, NI, NO, groups=G, blocks=NB, max_repeat=2, report=True)
    rng = np.random.default_rng(seed)
    elems = [(s, r, e) for s in range(len(rows)) for r in range(G * repeat) for e in range(D)]
    wbeats = [(s, g, j, k) for s in range(len(rows)) for g in range(G) for j in range(NB) for k in range(K)]
    want_beats = len(rows) * G * NB * repeat * K
    beats, reports = [], []

    async def bench(ctx):
        ctx.set(dut.repeat, repeat)
        ie = iw = cycles = 0
        while len(beats) < want_beats:
            send_i = ie < len(elems) and rng.random() >= stall
            if send_i:
                s, r, e = elems[ie]
                ctx.set(dut.i.p.data.y, int(rows[s, r, e]))
                ctx.set(dut.i.p.last, int(e == D - 1))
            ctx.set(dut.i.valid, int(send_i))
            send_w = iw < len(wbeats) and rng.random() >= stall
            if send_w:
                s, g, j, k = wbeats[iw]
                ctx.set(dut.w.p.w, [int(v) for v in w[s, g, j, k]])
                ctx.set(dut.w.p.mult, [int(v) for v in mult[s, g, j]])
                ctx.set(dut.w.p.shift, [int(v) for v in shift[s, g, j]])
            ctx.set(dut.w.valid, int(send_w))
            ready, k_ready = rng.random() >= stall, rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            ctx.set(dut.k.ready, int(k_ready))
            await ctx.delay(1e-9)
            ie += send_i and ctx.get(dut.i.ready)
            iw += send_w and ctx.get(dut.w.ready)
            def ints(arr, n):
                return [ctx.get(arr[i]) for i in range(n)]

            if ready and ctx.get(dut.o.valid):
                p = dut.o.p.data
                beats.append((ints(p.x, NI), ints(p.w, NI * NO), ints(p.mult, NO), ints(p.shift, NO),
                              ctx.get(p.end), ctx.get(dut.o.p.last)))
            if k_ready and ctx.get(dut.k.valid):
                p = dut.k.p
                reports.append((ints(p.mult, NO), ints(p.shift, NO), ctx.get(p.group), ctx.get(p.block)))
            await ctx.tick()
            cycles += 1
            assert cycles < 50 * (len(elems) + want_beats) + 200, "the runs stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return beats, reports


@pytest.mark.parametrize("repeat, stall", [(2, 0.0), (2, 0.4), (1, 0.3)])
def test_runs_and_reports(repeat, stall):
    rows, w, mult, shift = case(2, repeat)
    beats, reports = run(rows, w, mult, shift, repeat, stall=stall)
    want_beats, want_reports = expected(rows, w, mult, shift, repeat)
    assert len(beats) == len(want_beats)
    for n, (got, want) in enumerate(zip(beats, want_beats, strict=True)):
        assert got == want, f"beat {n}: {got}, expected {want}"
    assert reports == want_reports


def test_the_check_fails_on_the_wrong_row():
    rows, w, mult, shift = case(1, 2)
    beats, _ = run(rows, w, mult, shift, 2)
    # Expected runs that always use the group's first row: the second run of block 0 differs.
    wrong = rows.copy()
    wrong[:, G:] = wrong[:, :G]
    want_beats, _ = expected(wrong, w, mult, shift, 2)
    assert beats[:K] == want_beats[:K] and beats[K:2 * K] != want_beats[K:2 * K]


def test_bad_parameters():
    for kw, name in (({"d": 9}, "n_in"), ({"groups": 0}, "groups"), ({"max_repeat": 1.5}, "max_repeat")):
        with pytest.raises(ValueError, match=name):
            RowRuns(**{"d": D, "n_in": NI, "n_out": NO, "groups": G, "blocks": NB, "max_repeat": 2, **kw})
