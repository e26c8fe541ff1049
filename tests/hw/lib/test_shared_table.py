"""hw.lib.shared_table.SharedTable: two readers against a dictionary of the written words, the read
latency, the blocks it takes, and that a planted bug (a reader on the wrong port) is caught."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.lib.shared_table import SharedTable


def run_table(dut, writes, reads, *, swap=False):
    """Write ``writes`` [(addr, data)], then issue ``reads`` [(a0, a1)] one per cycle; returns the
    words each reader saw two cycles later."""
    seen = []

    async def bench(ctx):
        for addr, value in writes:
            ctx.set(dut.w.valid, 1)
            ctx.set(dut.w.p.addr, addr)
            ctx.set(dut.w.p.data, value)
            await ctx.tick()
        ctx.set(dut.w.valid, 0)
        pending = []
        for a0, a1 in list(reads) + [(0, 0)] * SharedTable.latency:
            ctx.set(dut.r_addr[0], a1 if swap else a0)
            ctx.set(dut.r_addr[1], a0 if swap else a1)
            await ctx.tick()
            pending.append((ctx.get(dut.r_data[0]), ctx.get(dut.r_data[1])))
        # r_data of cycle t + 2 answers r_addr of cycle t: after the tick of cycle t + 1.
        seen.extend(pending[SharedTable.latency - 1:SharedTable.latency - 1 + len(reads)])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


def check(width, depth, seed, swap=False):
    rng = np.random.default_rng(seed)
    dut = SharedTable(width, depth)
    addrs = rng.permutation(depth)[:min(depth, 96)]
    words = {int(a): int(rng.integers(0, 1 << width)) for a in addrs}
    reads = [(int(rng.choice(addrs)), int(rng.choice(addrs))) for _ in range(64)]
    seen = run_table(dut, list(words.items()), reads, swap=swap)
    assert seen == [(words[a0], words[a1]) for a0, a1 in reads]


@pytest.mark.parametrize("width, depth", [(22, 2048), (8, 1024), (5, 256)])
def test_two_readers(width, depth):
    check(width, depth, width)


def test_planted_port_swap_is_caught():
    with pytest.raises(AssertionError):
        check(22, 2048, 1, swap=True)


def test_blocks():
    assert SharedTable(22, 2048).blocks == 3       # 2048 x 9 per DP16KD
    assert SharedTable(8, 1024).blocks == 1        # 1024 x 18
    with pytest.raises(ValueError, match="DP16KD deep"):
        SharedTable(8, 1 << 15)
    with pytest.raises(ValueError, match="width"):
        SharedTable(0, 16)
