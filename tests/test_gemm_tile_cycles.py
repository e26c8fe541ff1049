"""The GEMM tile's cycle count is what docs/architecture.md says: B * k_tiles * n_tiles + latency."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.gemm_tile import GemmTile
from hw.accel.payload import pack_int8, rq_words, weight_words
from sw.config import TileConfig
from tests.streams import load_words


def measure(cfg, batch):
    """Cycles from the first row being taken to the last result being offered on ``o``."""
    dut = GemmTile(cfg)
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (batch, cfg.k_dim)).astype(np.int8)
    w = rng.integers(-128, 128, (cfg.k_dim, cfg.n_dim)).astype(np.int8)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    t = {}

    async def producer(ctx):
        await load_words(ctx, dut.w, weight_words(w, cfg))
        await load_words(ctx, dut.rq, rq_words(np.ones(cfg.n_dim), np.zeros(cfg.n_dim), cfg))
        t["start"] = None
        cycle = 0
        for row in x:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.as_value(), pack_int8(row))
            while True:
                *_, ready = await ctx.tick().sample(dut.i.ready)
                if t["start"] is None and ready:
                    t["start"] = cycle
                cycle += 1
                if ready:
                    break
            ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        seen, cycle = 0, 0
        while seen < batch:
            *_, valid = await ctx.tick().sample(dut.o.valid)
            cycle += 1
            seen += int(valid)
        t["last"] = cycle

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run()
    return dut, t


@pytest.mark.parametrize("cfg,batch", [(TileConfig(rows=2, cols=2, k_dim=4, n_dim=6), 1),
                                       (TileConfig(rows=2, cols=2, k_dim=4, n_dim=6), 7),
                                       (TileConfig(rows=4, cols=2, k_dim=8, n_dim=4), 5),
                                       (TileConfig(rows=2, cols=3, k_dim=2, n_dim=3), 9)])
def test_cycles_follow_the_model(cfg, batch):
    dut, t = measure(cfg, batch)
    # Both testbenches start at the same time; the consumer counts from the start of the row phase
    # only after the producer's loads, so compare durations from the first accepted row.
    loads = cfg.weight_depth + cfg.n_tiles
    measured = t["last"] - loads - t["start"]
    predicted = dut.cycles(batch)
    assert measured == predicted, f"measured {measured} cycles, model {predicted}"
