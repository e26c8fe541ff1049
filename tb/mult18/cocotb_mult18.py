"""cocotb: the hand-instantiated MULT18X18D against the behavioural model, cycle by cycle."""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from tb.runner import bench_config

WIDTH = 18
LO, HI = -(1 << (WIDTH - 1)), (1 << (WIDTH - 1)) - 1


def operands(seed, n):
    """Extremes and their neighbours first (every pair of them), then random operands."""
    edges = [LO, LO + 1, -1, 0, 1, HI - 1, HI, -128, 127]
    pairs = [(a, b) for a in edges for b in edges]
    rng = random.Random(seed)
    return pairs + [(rng.randint(LO, HI), rng.randint(LO, HI)) for _ in range(n)]


@cocotb.test()
async def model_equals_primitive(dut):
    """Both outputs equal, and equal to a * b two cycles after the operands were presented."""
    seed = bench_config().seed
    dut.rst.value = 0
    dut.a.value = 0
    dut.b.value = 0
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    stimulus = operands(seed, 2000)
    sent = []
    checked = 0
    # Operands change at falling edges; at falling edge j the product of the operands set at
    # falling edge j - 2 must be out (input register, then output register).
    for a, b in stimulus + [(0, 0)] * 2:
        await FallingEdge(dut.clk)
        model, dsp = dut.p_model.value.to_signed(), dut.p_dsp.value.to_signed()
        assert model == dsp, f"edge {len(sent)}: model {model} != MULT18X18D {dsp}"
        if len(sent) >= 2:
            x, y = sent[-2]
            assert dsp == x * y, f"edge {len(sent)}: {x} * {y} gave {dsp}"
            checked += 1
        dut.a.value = a
        dut.b.value = b
        sent.append((a, b))
    assert checked == len(stimulus), (checked, len(stimulus))
    dut._log.info("%d products equal in the model and the MULT18X18D instance", checked)
