"""The reorder buffer emits in sequence order, with no gaps and no duplicates, under random
completion order and backpressure."""

import numpy as np
import pytest
from amaranth.hdl import unsigned
from amaranth.sim import Simulator

from hw.lib.reorder_buffer import ReorderBuffer


@pytest.mark.parametrize("depth,seed", [(4, 0), (8, 1), (8, 2)])
def test_in_order_under_shuffle(depth, seed):
    n = 200
    dut = ReorderBuffer(unsigned(16), depth)
    rng = np.random.default_rng(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    state = {"out": 0}

    async def producer(ctx):
        pending = list(range(n))
        while pending:
            # any sequence number within depth of the next one to leave may finish now
            window = [s for s in pending if s < state["out"] + depth][: depth]
            if not window or rng.random() < 0.2:
                await ctx.tick()
                continue
            s = int(rng.choice(window))
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.p.tag, s % depth)
            ctx.set(dut.i.p.data, (s * 7919) & 0xFFFF)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            pending.remove(s)

    async def consumer(ctx):
        crng = np.random.default_rng(seed + 100)
        while len(got) < n:
            ctx.set(dut.o.ready, int(crng.random() < 0.6))
            *_, valid, ready, payload = await ctx.tick().sample(dut.o.valid, dut.o.ready, dut.o.payload)
            if valid and ready:
                got.append(int(payload))
                state["out"] += 1

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    assert got == [(s * 7919) & 0xFFFF for s in range(n)]
