"""The score block against the golden model's q . k: random heads, the extreme products, idle cycles
and output backpressure, one position a cycle when nothing stalls; v and last passed on unchanged;
the comparison shown to fail on a wrong sum."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.qk_score import QkScore


def positions(seed, n, dh):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.integers(-128, 128, size=(n, dh)) for _ in range(3))
    q[:4] = 8                                      # a head's q is the same on its beats
    q[0:2], k[0], k[1] = -128, -128, 127           # the largest score and the most negative
    return q, k, v


def run(q, k, v, *, head=5, stall=0.0, seed=0):
    n, dh = q.shape
    dut = QkScore(dh)
    rng = np.random.default_rng(seed)
    outs = []
    cycles = [0]

    async def bench(ctx):
        i = 0
        while i < n or len(outs) < n:
            send = i < n and rng.random() >= stall
            ctx.set(dut.i.valid, int(send))
            if send:
                for j in range(dh):
                    ctx.set(dut.i.p.data.q[j], int(q[i, j]))
                    ctx.set(dut.i.p.data.k[j], int(k[i, j]))
                    ctx.set(dut.i.p.data.v[j], int(v[i, j]))
                ctx.set(dut.i.p.last, int(i % head == head - 1))
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            if send and ctx.get(dut.i.ready):
                i += 1
            if ready and ctx.get(dut.o.valid):
                outs.append((ctx.get(dut.o.p.data.score), [ctx.get(dut.o.p.data.v[j]) for j in range(dh)],
                             ctx.get(dut.o.p.last)))
            await ctx.tick()
            cycles[0] += 1
            assert cycles[0] < 20 * n + 100, "the block stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return outs, cycles[0], dut.latency


@pytest.mark.parametrize("dh, stall", [(24, 0.0), (24, 0.4), (5, 0.3)])
def test_scores_are_the_spec(dh, stall):
    q, k, v = positions(dh, 120, dh)
    outs, cycles, latency = run(q, k, v, stall=stall, seed=dh)
    want = np.einsum("pe,pe->p", q, k)
    assert len(outs) == len(want), f"scoreboard: {len(want)} positions in, {len(outs)} out"
    for p, (score, vv, last) in enumerate(outs):
        assert score == want[p], f"position {p}: RTL {score}, spec {want[p]}"
        assert vv == list(v[p]) and last == int(p % 5 == 4), f"position {p}: v or last changed"
    assert want[0] == dh * 2**14 and want[1] == -dh * 127 * 128
    if stall == 0.0:
        assert cycles <= len(want) + latency + 1, f"{cycles} cycles for {len(want)} positions"
    # The comparison can fail: the sum without its last product differs.
    assert (np.einsum("pe,pe->p", q[:, :-1], k[:, :-1]) != [o[0] for o in outs]).any()


def test_bad_parameters():
    with pytest.raises(ValueError, match="head_dim"):
        QkScore(0)
    with pytest.raises(ValueError, match="queue_depth"):
        QkScore(8, queue_depth=0)
