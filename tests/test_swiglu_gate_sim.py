"""The SwiGLU gating stage against sw.quant (SiLU table, int16 product, requantisation)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.payload import pack, unpack_int8
from hw.swiglu_gate import SwigluGate, gate_in_layout
from sw import quant
from tests.streams import load_words, stream_get, stream_put


@pytest.mark.parametrize("width,lanes", [(16, 4), (24, 8)])
def test_gate_stage_matches_spec(width, lanes):
    rng = np.random.default_rng(width)
    rows = 6
    gate = rng.integers(-128, 128, (rows, width)).astype(np.int8)
    up = rng.integers(-128, 128, (rows, width)).astype(np.int8)
    gate[0] = np.arange(width) - 128          # table extremes
    up[0] = -128
    lut = quant.silu_lut(0.06, 0.05)
    mult, shift = 40000, 22
    want = quant.requantize(quant.apply_lut(gate, lut).astype(np.int64) * up, mult, shift)
    dut = SwigluGate(width, lanes)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    lut_layout = dut.lut.signature.members["payload"].shape
    layout = gate_in_layout(width)
    got = []

    async def producer(ctx):
        ctx.set(dut.params.mult, mult)
        ctx.set(dut.params.shift, shift)
        await load_words(ctx, dut.lut,
                         [pack(lut_layout, {"addr": a, "value": int(lut[a])}) for a in range(256)])
        for r in range(rows):
            await stream_put(ctx, dut.i, pack(layout, {"gate": [int(v) for v in gate[r]],
                                                       "up": [int(v) for v in up[r]]}))

    async def consumer(ctx):
        for _ in range(rows):
            if rng.random() < 0.5:
                await ctx.tick().repeat(3)
            got.append(unpack_int8(await stream_get(ctx, dut.o), width))

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * (256 + rows * (width // lanes + 20) + 200))
    assert len(got) == rows, f"{len(got)} rows out for {rows} in"
    np.testing.assert_array_equal(np.array(got), want)
