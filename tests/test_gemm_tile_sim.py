"""Fast amaranth.sim checks of the GEMM tile against the golden model."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.gemm_tile import GemmTile
from hw.accel.payload import pack_int8, rq_words, unpack_int8, weight_words
from sw.config import TileConfig
from sw.golden import quant
from tests.streams import load_words, stream_get, stream_put


def random_case(cfg, batch, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(batch, cfg.k_dim), dtype=np.int64).astype(np.int8)
    w = rng.integers(-128, 128, size=(cfg.k_dim, cfg.n_dim), dtype=np.int64).astype(np.int8)
    mult = rng.integers(1, quant.MULT_MAX + 1, size=cfg.n_dim).astype(np.uint16)
    shift = rng.integers(18, 30, size=cfg.n_dim).astype(np.uint8)
    return x, w, mult, shift


def run_tile(cfg, x, w, mult, shift, *, seed=0, stall_in=0.3, stall_out=0.3):
    dut = GemmTile(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    rng = np.random.default_rng(seed)
    got = []

    async def producer(ctx):
        await load_words(ctx, dut.w, weight_words(w, cfg))
        await load_words(ctx, dut.rq, rq_words(mult, shift, cfg))
        for row in x:
            while rng.random() < stall_in:
                await ctx.tick()
            await stream_put(ctx, dut.i, pack_int8(row))

    async def consumer(ctx):
        orng = np.random.default_rng(seed + 1)
        for _ in range(len(x)):
            while orng.random() < stall_out:
                await ctx.tick()
            got.append(unpack_int8(await stream_get(ctx, dut.o), cfg.n_dim))

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * (len(x) * cfg.k_tiles * cfg.n_tiles * 3 + 2000))
    return np.array(got)


@pytest.mark.parametrize("cfg", [TileConfig(rows=2, cols=2, k_dim=4, n_dim=4),
                                 TileConfig(rows=4, cols=2, k_dim=8, n_dim=2),
                                 TileConfig(rows=2, cols=3, k_dim=2, n_dim=6)])
def test_gemm_tile_matches_golden(cfg):
    x, w, mult, shift = random_case(cfg, batch=6, seed=1)
    got = run_tile(cfg, x, w, mult, shift)
    want = quant.gemm_int8(x, w, mult, shift)
    assert got.shape == want.shape, f"{len(got)} rows out for {len(want)} in"
    np.testing.assert_array_equal(got, want)
