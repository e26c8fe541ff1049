"""hw/lib/credit_queue.py: a pipeline that takes an item only with a credit never loses one, in
order, under random input and output stalls; the scoreboard counts items in against items out and
catches a pipeline that takes without a credit."""

import random

import pytest
from amaranth.sim import Simulator

from hw.lib.credit_queue import CreditQueue

LATENCY = 3


def run(depth, *, honour_credits=True, items=60, seed=0, p_send=0.7, p_ready=0.4):
    """A pipeline of :data:`LATENCY` cycles that cannot stall, feeding the queue; returns (sent,
    received, peak of items in flight or queued)."""
    dut = CreditQueue(8, depth)
    rnd = random.Random(seed)
    sent, got = [], []
    peak = [0]

    async def bench(ctx):
        pipe = [None] * LATENCY
        n = 0
        for _ in range(items * 12):
            want = n < items and rnd.random() < p_send
            take = want and (ctx.get(dut.room) or not honour_credits)
            ctx.set(dut.take, int(take))
            out = pipe.pop()
            ctx.set(dut.i.valid, int(out is not None))
            ctx.set(dut.i.payload, out or 0)
            ready = rnd.random() < p_ready
            ctx.set(dut.o.ready, int(ready))
            if ready and ctx.get(dut.o.valid):
                got.append(ctx.get(dut.o.payload))
            pipe.insert(0, n & 0xFF if take else None)
            if take:
                sent.append(n & 0xFF)
                n += 1
            peak[0] = max(peak[0], len(sent) - len(got))
            await ctx.tick()
            if n == items and len(got) == items:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return sent, got, peak[0]


@pytest.mark.parametrize("depth", [1, 2, LATENCY + 1])
@pytest.mark.parametrize("seed", [0, 1])
def test_every_item_comes_out_in_order(depth, seed):
    sent, got, peak = run(depth, seed=seed)
    assert len(sent) == 60 and got == sent
    assert peak <= depth


def test_the_scoreboard_catches_a_pipeline_that_takes_without_a_credit():
    sent, got, peak = run(2, honour_credits=False, p_ready=0.1)
    assert peak > 2 and got != sent


def test_depth_is_checked():
    with pytest.raises(ValueError, match="depth"):
        CreditQueue(8, 0)
