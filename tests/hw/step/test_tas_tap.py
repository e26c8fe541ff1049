"""The TAS tap against sw.spec.quant.replay_decision: rows of scores with the marked position in
each head, rows with none, the threshold's edge (tas == threshold replays, one below does not), the
never-threshold, idle cycles and decision backpressure; the comparison shown to fail on a strict rule."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.tas_tap import TasTap
from sw.spec import quant


def rows_for(seed, n, heads=4, positions=6):
    rng = np.random.default_rng(seed)
    rows = []
    for r in range(n):
        scores = rng.integers(-24 * 2**14, 24 * 2**14, size=(heads, positions))
        marked = r % 5 != 0                                          # every fifth row: frame 0, no mark
        col = int(rng.integers(0, positions))
        rows.append((scores, col if marked else None))
    return rows


def spec(rows, threshold):
    tas = np.array([s[:, c].sum() if c is not None else 0 for s, c in rows], np.int64)
    marked = np.array([c is not None for _, c in rows])
    return tas, marked & quant.replay_decision(tas, threshold)


def run(rows, threshold, *, stall=0.0, seed=0):
    dut = TasTap()
    rng = np.random.default_rng(seed)
    beats = []
    for scores, col in rows:
        H, P = scores.shape
        for h in range(H):
            for p in range(P):
                beats.append((int(scores[h, p]), int(p == col), int(h == H - 1 and p == P - 1)))
    outs = []

    async def bench(ctx):
        ctx.set(dut.threshold, int(threshold))
        k = cycles = 0
        while k < len(beats) or len(outs) < len(rows):
            send = k < len(beats) and rng.random() >= stall
            ctx.set(dut.i.valid, int(send))
            if send:
                ctx.set(dut.i.p.score, beats[k][0])
                ctx.set(dut.i.p.tas, beats[k][1])
                ctx.set(dut.i.p.end, beats[k][2])
            ready = rng.random() >= 2 * stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            if send and ctx.get(dut.i.ready):
                k += 1
            if ready and ctx.get(dut.o.valid):
                outs.append((ctx.get(dut.o.p.data.tas), ctx.get(dut.o.p.data.replay)))
            await ctx.tick()
            cycles += 1
            assert cycles < 20 * len(beats) + 100, "the block stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array([o[0] for o in outs]), np.array([o[1] for o in outs], bool)


@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_decisions_are_the_spec(stall):
    rows = rows_for(1, 40)
    tas_want, _ = spec(rows, 0)
    nz = np.sort(tas_want[tas_want != 0])
    threshold = int(nz[len(nz) // 2])                           # rows on each side, one on the edge
    tas, replay = run(rows, threshold, stall=stall, seed=2)
    tas_want, replay_want = spec(rows, threshold)
    assert len(tas) == len(rows), f"scoreboard: {len(rows)} rows in, {len(tas)} decisions out"
    bad = np.flatnonzero((tas != tas_want) | (replay != replay_want))
    assert bad.size == 0, (f"row {bad[0]}: RTL tas {tas[bad[0]]} replay {replay[bad[0]]}, "
                           f"spec {tas_want[bad[0]]} {replay_want[bad[0]]}")
    assert replay.any() and (~replay).any() and (tas == threshold).any()
    # The comparison can fail: a strict rule (tas > threshold) differs on the row at the edge.
    assert ((tas > threshold) & (tas != 0) != replay).any()


def test_never_threshold_never_replays():
    rows = rows_for(3, 10)
    tas, replay = run(rows, quant.THRESHOLD_NEVER)
    assert (tas == spec(rows, 0)[0]).all() and not replay.any()


def test_bad_queue_depth():
    with pytest.raises(ValueError, match="queue_depth"):
        TasTap(queue_depth=1)
