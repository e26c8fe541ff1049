"""The SwiGLU gating stage against sw.golden.quant (SiLU table, int16 product, requantisation), with a
table and parameters per layer and a tag carried through."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.payload import pack, unpack_int8
from hw.accel.swiglu_gate import SwigluGate, gate_in_layout, lut_load_layout
from sw.golden import quant
from tests.streams import load_words, stream_get, stream_put


@pytest.mark.parametrize("width,lanes,layers", [(16, 4, 1), (24, 8, 2), (8, 2, 3)])
def test_gate_stage_matches_spec(width, lanes, layers):
    rng = np.random.default_rng(width)
    rows = 6
    gate = rng.integers(-128, 128, (rows, width)).astype(np.int8)
    up = rng.integers(-128, 128, (rows, width)).astype(np.int8)
    gate[0, :min(width, 256)] = (np.arange(width) * 7 % 256 - 128)[:width]   # table extremes
    up[0] = -128
    layer = rng.integers(0, layers, rows)
    luts = [quant.silu_lut(0.06 + 0.01 * n, 0.05) for n in range(layers)]
    mults, shifts = [40000 - 1000 * n for n in range(layers)], [22 + n for n in range(layers)]
    want = np.array([quant.requantize(quant.apply_lut(gate[r], luts[layer[r]]).astype(np.int64) * up[r],
                                      mults[layer[r]], shifts[layer[r]]) for r in range(rows)])
    tag_bits = 4
    dut = SwigluGate(width, lanes, layers=layers, tag_bits=tag_bits)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    layout = gate_in_layout(width, layers, tag_bits)
    lut_words = [pack(lut_load_layout(layers), {"addr": a, "layer": n, "value": int(luts[n][a])})
                 for n in range(layers) for a in range(256)]
    got, tags = [], []

    async def producer(ctx):
        for n in range(layers):
            ctx.set(dut.params[n].mult, mults[n])
            ctx.set(dut.params[n].shift, shifts[n])
        await load_words(ctx, dut.lut, lut_words)
        for r in range(rows):
            await stream_put(ctx, dut.i, pack(layout, {"gate": [int(v) for v in gate[r]],
                                                       "up": [int(v) for v in up[r]],
                                                       "layer": int(layer[r]), "tag": r + 3}))

    async def consumer(ctx):
        for _ in range(rows):
            if rng.random() < 0.5:
                await ctx.tick().repeat(3)
            bits = await stream_get(ctx, dut.o)
            got.append(unpack_int8(bits & ((1 << 8 * width) - 1), width))
            tags.append(bits >> 8 * width)

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * (256 * layers + rows * (width // lanes + 20) + 200))
    assert len(got) == rows, f"{len(got)} rows out for {rows} in"
    np.testing.assert_array_equal(np.array(got), want)
    assert tags == [r + 3 for r in range(rows)]
