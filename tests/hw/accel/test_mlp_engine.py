"""The MLP datapath (dispatcher, two matrix-vector cores on one weight store, output stage)
against sw.spec.quant.swiglu_int8, in every schedule, with random readiness of the output."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.mlp_engine import MlpEngine
from hw.accel.mv_layout import gu_table_index, weight_blocks
from sw.config import AccelConfig
from sw.spec import quant
from tests.hw.accel.test_mv_core import random_layers

SMALL = AccelConfig(d_model=16, d_ff=64, layers=2, tokens_per_frame=2, batch=4, cores=2,
                    chunks=4, tas_lanes=4, mv_in=4, mv_out=4)


def golden_rows(lay, xs):
    p = {k: lay[k] for k in ("mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h")}
    p["mult_d"], p["shift_d"] = lay["mult_d"], lay["shift_d"]
    return quant.swiglu_int8(np.asarray(xs), lay["wg"], lay["wu"], lay["wd"], p)


async def load_engine(ctx, dut, cfg, layers):
    for a, blk in enumerate(weight_blocks(cfg, layers)):
        ctx.set(dut.w.valid, 1)
        ctx.set(dut.w.p.addr, a)
        ctx.set(dut.w.p.data, [int(v) for v in blk.reshape(-1)])
        await ctx.tick()
    ctx.set(dut.w.valid, 0)
    for n, lay in enumerate(layers):
        for up, (mk, sk) in enumerate((("mult_g", "shift_g"), ("mult_u", "shift_u"))):
            for ch in range(cfg.d_ff):
                ctx.set(dut.rq.valid, 1)
                ctx.set(dut.rq.p.addr, gu_table_index(cfg, up, n, ch))
                ctx.set(dut.rq.p.p, {"mult": int(lay[mk][ch]), "shift": int(lay[sk][ch])})
                await ctx.tick()
        ctx.set(dut.rq.valid, 0)
        for ch in range(cfg.d_model):
            ctx.set(dut.rqd.valid, 1)
            ctx.set(dut.rqd.p, {"layer": n, "ob": ch // cfg.mv_out, "n": ch % cfg.mv_out,
                                "p": {"mult": int(lay["mult_d"][ch]), "shift": int(lay["shift_d"][ch])}})
            await ctx.tick()
        ctx.set(dut.rqd.valid, 0)
        for a in range(256):
            ctx.set(dut.lut.valid, 1)
            ctx.set(dut.lut.p, {"addr": a, "layer": n, "value": int(lay["lut"][a])})
            await ctx.tick()
        ctx.set(dut.lut.valid, 0)
        ctx.set(dut.h[n], {"mult": lay["mult_h"], "shift": lay["shift_h"]})


def engine_layers(cfg, rng):
    layers = random_layers(cfg, rng)
    for lay in layers:
        lay["mult_d"] = rng.integers(1 << 14, 1 << 16, cfg.d_model)
        lay["shift_d"] = rng.integers(22, 25, cfg.d_model)
    return layers


def run_engine(cfg, layers, groups, *, static=False, chunk_rr=False, ready_p=1.0, seed=0):
    """``groups``: lists of ``(x, layer, tag)``. Returns per group ``{tag: y}`` and its cycles
    (first row offered to last row out)."""
    dut = MlpEngine(cfg, tag_bits=2)
    rng = np.random.default_rng(seed)
    results = []

    async def bench(ctx):
        await load_engine(ctx, dut, cfg, layers)
        ctx.set(dut.static, int(static))
        ctx.set(dut.chunk_rr, int(chunk_rr))
        for rows in groups:
            ctx.set(dut.group_start, 1)
            await ctx.tick()
            ctx.set(dut.group_start, 0)
            got, cycle, pending = {}, 0, list(rows)
            xbuf, zero = {tag: x for x, _, tag in rows}, [0] * cfg.d_model
            while len(got) < len(rows):
                if pending:
                    x, layer, tag = pending[0]
                    ctx.set(dut.i.valid, 1)
                    ctx.set(dut.i.p, {"layer": layer, "tag": tag})
                else:
                    ctx.set(dut.i.valid, 0)
                ctx.set(dut.o.ready, int(rng.random() < ready_p))
                await ctx.delay(1e-9)
                # The row buffer: each core reads its offered job's x at the job's tag.
                for p in range(cfg.cores):
                    ctx.set(dut.x_data[p], [int(v) for v in xbuf.get(ctx.get(dut.x_addr[p]), zero)])
                await ctx.delay(1e-9)
                took_in = ctx.get(dut.i.valid) and ctx.get(dut.i.ready)
                if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                    tag = ctx.get(dut.o.p.tag)
                    assert tag not in got, f"row {tag} came out twice"
                    got[tag] = np.array(ctx.get(dut.o.p.y), dtype=np.int64)
                await ctx.tick()
                cycle += 1
                if took_in:
                    pending.pop(0)
                assert cycle < 20000, f"stuck: {len(got)} of {len(rows)} rows out"
            ctx.set(dut.i.valid, 0)
            results.append((got, cycle))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results


@pytest.mark.parametrize("mode", ["drs", "chunk_rr", "static"])
def test_engine_rows_are_the_integer_mlp(mode):
    rng = np.random.default_rng(11)
    layers = engine_layers(SMALL, rng)
    xs = rng.integers(-128, 128, (6, SMALL.d_model))
    xs[0, :] = -128
    groups = [[(xs[0], 1, 0), (xs[1], 1, 2), (xs[2], 1, 3)], [(xs[3], 0, 1)], [(xs[4], 1, 0), (xs[5], 1, 1)]]
    res = run_engine(SMALL, layers, groups, static=mode == "static", chunk_rr=mode == "chunk_rr",
                     ready_p=0.6, seed=4)
    for rows, (got, _) in zip(groups, res, strict=True):
        assert sorted(got) == sorted(t for *_, t in rows)
        for x, layer, tag in rows:
            want = golden_rows(layers[layer], x[None])[0]
            np.testing.assert_array_equal(got[tag], want, err_msg=f"{mode}: row {tag}, layer {layer}")
