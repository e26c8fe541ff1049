"""Mult18: the model's latency and products, and the primitive chosen on an ECP5."""

import random

import pytest
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.lib.mult18 import Mult18, is_ecp5
from tests.fragments import Ecp5Stub, instances


def test_model_products_two_cycles_late():
    dut = Mult18(8, 8)
    rng = random.Random(3)
    ops = [(a, b) for a in (-128, -127, -1, 0, 1, 127) for b in (-128, -1, 0, 127)]
    ops += [(rng.randint(-128, 127), rng.randint(-128, 127)) for _ in range(200)]
    seen = []

    async def bench(ctx):
        for a, b in ops + [(0, 0)] * 2:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            await ctx.tick()
            seen.append(ctx.get(dut.p))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # After tick k the output holds the product of the operands set before tick k - 1.
    assert seen[1:len(ops) + 1] == [a * b for a, b in ops]


@pytest.mark.parametrize("platform, want", [(None, 0), (Ecp5Stub(), 1)])
def test_primitive_only_on_ecp5(platform, want):
    assert is_ecp5(platform) == bool(want)
    insts = [i for i in instances(Fragment.get(Mult18(8, 8), platform)) if i.type == "MULT18X18D"]
    assert len(insts) == want
    if want:
        p = insts[0].parameters
        assert (p["REG_INPUTA_CLK"], p["REG_INPUTB_CLK"], p["REG_OUTPUT_CLK"]) == ("CLK0",) * 3
        assert p["REG_PIPELINE_CLK"] == "NONE"


def test_bad_widths():
    with pytest.raises(ValueError, match="a_width"):
        Mult18(19, 8)
