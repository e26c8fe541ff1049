"""The fixed-latency requantiser lane against sw.golden.quant.requantize: ties, saturation, shift 0 and the
widest shifts, operand extremes, one value per cycle, both DSP arrangements (one and two blocks)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.requant_lane import RequantLane
from sw.golden import quant


def cases_for(acc_bits, seed=7):
    """(acc, mult, shift) triples inside ``acc_bits``, every tie and saturation corner included."""
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    cases = []
    for shift in (0, 1, 2, 3, 7, 15, 31, 47, 48, 63):
        for acc in range(-5, 6):
            half = 1 << shift >> 1
            for a in (acc, acc * (1 << shift) + half, acc * (1 << shift) - half):
                if lo <= a <= hi:
                    cases.append((a, 1, shift))
    for shift in (1, 3, 12):
        for v2 in [*range(-261, -250), *range(250, 261)]:
            if lo <= v2 << (shift - 1) <= hi:
                cases.append((v2 << (shift - 1), 1, shift))
    for acc in (lo, hi, -129, -128, 127, 128, 0, -1):
        for mult in (0, 1, quant.MULT_MAX):
            for shift in (0, 8, 40, 63):
                cases.append((max(lo, min(hi, acc)), mult, shift))
    rng = np.random.default_rng(seed)
    for _ in range(300):
        cases.append((int(rng.integers(lo, hi + 1)), int(rng.integers(0, quant.MULT_MAX + 1)),
                      int(rng.integers(0, 64))))
    return cases


def run_lane(acc_bits, cases, gaps=None):
    """Feed ``cases`` one per cycle (with idle cycles where ``gaps`` says) and return
    ``[(cycle_in, cycle_out, y, tag)]``."""
    dut = RequantLane(acc_bits, tag_bits=10)
    got, sent = [], []

    async def bench(ctx):
        cycle = 0
        pending = list(enumerate(cases))
        while pending or len(got) < len(cases):
            if pending and not (gaps and gaps[cycle % len(gaps)]):
                k, (a, mu, sh) = pending.pop(0)
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.p.acc, a)
                ctx.set(dut.i.p.mult, mu)
                ctx.set(dut.i.p.shift, sh)
                ctx.set(dut.i.p.tag, k)
                sent.append(cycle)
            else:
                ctx.set(dut.i.valid, 0)
            if ctx.get(dut.o.valid):
                got.append((cycle, ctx.get(dut.o.p.y), ctx.get(dut.o.p.tag)))
            await ctx.tick()
            cycle += 1
            assert cycle < 10 * len(cases) + 50, "the lane stopped producing"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return sent, got


@pytest.mark.parametrize("acc_bits", [16, 18, 22, 24, 32])
def test_lane_is_the_spec_one_per_cycle(acc_bits):
    cases = cases_for(acc_bits)
    sent, got = run_lane(acc_bits, cases)
    assert len(got) == len(cases), f"{len(cases)} values in, {len(got)} out"
    want = quant.requantize(*(np.array(c, dtype=np.int64) for c in zip(*cases, strict=True)))
    for k, (cycle, y, tag) in enumerate(got):
        assert tag == k, f"output {k} carries tag {tag}"
        assert cycle - sent[k] == RequantLane.latency, f"value {k}: latency {cycle - sent[k]}"
        assert y == want[k], f"acc {cases[k][0]} * {cases[k][1]} >> {cases[k][2]}: RTL {y}, spec {want[k]}"


def test_lane_with_idle_cycles_keeps_order_and_latency():
    cases = cases_for(24, seed=3)[:120]
    sent, got = run_lane(24, cases, gaps=[0, 1, 0, 0, 1, 1, 0])
    want = quant.requantize(*(np.array(c, dtype=np.int64) for c in zip(*cases, strict=True)))
    assert [t for _, _, t in got] == list(range(len(cases)))
    assert [c - s for (c, _, _), s in zip(got, sent, strict=True)] == [RequantLane.latency] * len(cases)
    assert [y for _, y, _ in got] == list(want)


def test_dsp_count_and_bad_parameters():
    assert RequantLane(18).dsps == 1 and RequantLane(19).dsps == 2
    for bad in (1, 33, 8.0):
        with pytest.raises(ValueError, match="acc_bits"):
            RequantLane(bad)
    with pytest.raises(ValueError, match="tag_bits"):
        RequantLane(20, tag_bits=-1)
