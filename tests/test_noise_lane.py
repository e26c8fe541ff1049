"""The noise lane against sw.golden.quant.noise_int: every leading-one position, the table corners,
random words, one per cycle and with idle cycles, fixed latency."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.noise_lane import NOISE_BITS, NoiseLane
from sw.golden import quant


def words(seed=3):
    w = [0, 1, 2, 3, 127, 128, 255, 256, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    w += [(1 << k) - 1 for k in range(1, 33)] + [1 << k for k in range(32)]
    w += [((1 << k) | (0x5A5A5A5A & ((1 << k) - 1))) for k in range(32)]
    rng = np.random.default_rng(seed)
    return w + [int(x) for x in rng.integers(0, 2**32, size=300)]


def run(ws, gaps=None):
    dut = NoiseLane(tag_bits=10)
    sent, got = [], []

    async def bench(ctx):
        cycle, pending = 0, list(enumerate(ws))
        while pending or len(got) < len(ws):
            if pending and not (gaps and gaps[cycle % len(gaps)]):
                k, r = pending.pop(0)
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.p.r, r)
                ctx.set(dut.i.p.tag, k % 1024)
                sent.append(cycle)
            else:
                ctx.set(dut.i.valid, 0)
            if ctx.get(dut.o.valid):
                got.append((cycle, ctx.get(dut.o.p.noise), ctx.get(dut.o.p.tag)))
            await ctx.tick()
            cycle += 1
            assert cycle < 10 * len(ws) + 50, "the lane stopped producing"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return sent, got


@pytest.mark.parametrize("gaps", [None, [0, 1, 1, 0, 1]])
def test_noise_lane_is_the_spec(gaps):
    ws = words()
    want = quant.noise_int(ws)
    sent, got = run(ws, gaps)
    assert len(got) == len(ws)
    for k, (cycle, y, tag) in enumerate(got):
        assert tag == k % 1024 and cycle - sent[k] == NoiseLane.latency
        assert y == want[k], f"word {ws[k]:#010x}: RTL {y}, spec {want[k]}"
    assert -(1 << (NOISE_BITS - 1)) <= want.min() and want.max() < (1 << (NOISE_BITS - 1))
    # The comparison can fail: the same words through a table with one entry changed differ.
    log2_t, g_t = quant.noise_tables()
    g_bad = g_t.copy()
    g_bad[255] += 1
    assert (quant.noise_int(ws, (log2_t, g_bad)) != want).any()


def test_noise_range_over_every_case():
    from sw.golden.sampling import noise_atoms

    v, _ = noise_atoms()
    assert -(1 << (NOISE_BITS - 1)) <= v.min() and v.max() < (1 << (NOISE_BITS - 1))
    assert v.max() > 1 << (NOISE_BITS - 2)                  # the width is needed


def test_bad_tag_bits():
    with pytest.raises(ValueError, match="tag_bits"):
        NoiseLane(tag_bits=-1)
