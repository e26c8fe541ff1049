"""The SiLU lookup unit over all 256 inputs, against sw.golden.quant.apply_lut."""

import numpy as np
from amaranth.sim import Simulator

from hw.accel.payload import pack, pack_int8, unpack_int8
from hw.accel.silu_lut import SiluLut
from sw.golden import quant
from tests.streams import load_words, stream_get, stream_put


def test_all_256_codes_with_backpressure():
    lanes = 4
    lut = quant.silu_lut(0.07, 0.03)
    codes = np.arange(-128, 128, dtype=np.int64).astype(np.int8)
    rng = np.random.default_rng(0)
    codes = np.concatenate([codes, rng.integers(-128, 128, 64).astype(np.int8)])
    beats = codes.reshape(-1, lanes)
    dut = SiluLut(lanes)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    layout = dut.load.signature.members["payload"].shape

    async def producer(ctx):
        await load_words(ctx, dut.load, [pack(layout, {"addr": a, "value": int(lut[a])}) for a in range(256)])
        for b in beats:
            while rng.random() < 0.3:
                await ctx.tick()
            await stream_put(ctx, dut.i, pack_int8(b))

    async def consumer(ctx):
        crng = np.random.default_rng(1)
        for _ in range(len(beats)):
            while crng.random() < 0.3:
                await ctx.tick()
            got.append(unpack_int8(await stream_get(ctx, dut.o), lanes))

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * (256 + 10 * len(beats) + 100))
    got = np.concatenate(got)
    assert got.shape == codes.shape, f"{got.size} codes out for {codes.size} in"
    np.testing.assert_array_equal(got, quant.apply_lut(codes, lut))
