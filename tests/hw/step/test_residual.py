"""The residual block against sw.spec.quant.requant_wide and saturate: random elements, the ties of
the rounding, saturation both ways, idle cycles and output backpressure, one element a cycle when
nothing stalls; the comparison shown to fail on another rounding."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.residual import R_BITS, Residual
from sw.spec import quant

HI, LO = (1 << (R_BITS - 1)) - 1, -(1 << (R_BITS - 1))


def elements(seed, n, acc_bits):
    rng = np.random.default_rng(seed)
    amax = 1 << (acc_bits - 1)
    acc = rng.integers(-amax, amax, size=n)
    r = rng.integers(-(1 << 20), 1 << 20, size=n)
    mult = rng.integers(0, 1 << quant.MULT_BITS, size=n)
    shift = rng.integers(0, quant.SHIFT_MAX + 1, size=n)
    # ties of the rounding: acc * mult = odd * 2**(shift - 1)
    acc[:8], mult[:8], shift[:8] = np.arange(-7, 9, 2), 1, 1
    # saturation both ways: the sum leaves the 32-bit range
    r[8:10], acc[8:10] = [HI - 5, LO + 5], [amax - 1, -amax]
    mult[8:10], shift[8:10] = (1 << quant.MULT_BITS) - 1, 0
    r[10:12] = [HI, LO]
    return r, acc, mult, shift


def spec(r, acc, mult, shift):
    return quant.saturate(np.asarray(r, np.int64) + quant.requant_wide(acc, mult, shift), R_BITS)


def run(r, acc, mult, shift, *, acc_bits=quant.ACC_BITS, row=16, stall=0.0, seed=0):
    n = len(r)
    dut = Residual(acc_bits)
    rng = np.random.default_rng(seed)
    outs, lasts = [], []
    cycles = [0]

    async def bench(ctx):
        k = 0
        while k < n or len(outs) < n:
            send = k < n and rng.random() >= stall
            ctx.set(dut.i.valid, int(send))
            if send:
                ctx.set(dut.i.p.data.r, int(r[k]))
                ctx.set(dut.i.p.data.acc, int(acc[k]))
                ctx.set(dut.i.p.data.mult, int(mult[k]))
                ctx.set(dut.i.p.data.shift, int(shift[k]))
                ctx.set(dut.i.p.last, int(k % row == row - 1))
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            if send and ctx.get(dut.i.ready):
                k += 1
            if ready and ctx.get(dut.o.valid):
                outs.append(ctx.get(dut.o.p.data.r))
                lasts.append(ctx.get(dut.o.p.last))
            await ctx.tick()
            cycles[0] += 1
            assert cycles[0] < 20 * n + 100, "the block stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return np.array(outs), np.array(lasts), cycles[0]


@pytest.mark.parametrize("acc_bits, stall", [(quant.ACC_BITS, 0.0), (quant.ACC_BITS, 0.4), (8, 0.3)])
def test_residual_is_the_spec(acc_bits, stall):
    r, acc, mult, shift = elements(acc_bits, 200, acc_bits)
    got, lasts, cycles = run(r, acc, mult, shift, acc_bits=acc_bits, stall=stall, seed=acc_bits)
    want = spec(r, acc, mult, shift)
    assert len(got) == len(want), f"scoreboard: {len(want)} elements in, {len(got)} out"
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"element {bad[0]}: RTL {got[bad[0]]}, spec {want[bad[0]]}"
    assert list(lasts) == [int(k % 16 == 15) for k in range(len(r))]
    assert (want == HI).any() and (want == LO).any()
    if stall == 0.0:
        assert cycles <= len(r) + Residual.latency + 1, f"{cycles} cycles for {len(r)} elements"
    # The comparison can fail: ties rounded up instead of to even differ on the first elements.
    up = np.asarray(r[:8]) + np.floor(np.asarray(acc[:8]) / 2 + 0.5).astype(np.int64)
    assert (up != got[:8]).any()


def test_bad_parameters():
    with pytest.raises(ValueError, match="acc_bits"):
        Residual(quant.ACC_BITS + 1)
    with pytest.raises(ValueError, match="queue_depth"):
        Residual(queue_depth=0)
