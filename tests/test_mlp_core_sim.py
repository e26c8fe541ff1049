"""The chunked MLP cores against the golden SwiGLU: the int32 partial sums of every hidden chunk,
added up and requantised, give ``sw.golden.quant.swiglu_int8`` exactly. Random weights on small cores
(two layers, several chunks, two cores sharing the weights) and computed rows of the shipped
decode trace on the real geometry."""

from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.mlp_core import MlpCore, job_layout
from hw.accel.payload import mlp_loads, pack
from sw.golden import quant
from sw.trace.decode import load_decode_trace
from tests.streams import load_words, stream_put

REPO = Path(__file__).resolve().parent.parent


def run_cores(d, f, layers, jobs, *, chunks, cores, rows=2, cols=2, gate_lanes=2, seed=0):
    """``jobs``: (x, layer) rows; every chunk of job n goes to core (n * chunks + j) % cores.
    Returns y per job, reduced and requantised in Python from the RTL's partial sums."""
    dut = MlpCore(d, f, layers=len(layers), chunks=chunks, rows=rows, cols=cols, cores=cores,
                  gate_lanes=gate_lanes, tag_bits=4)
    t_in, t_dn = dut.tiles
    loads = mlp_loads(layers, chunks, t_in, t_dn)
    port = (lambda p, c: p) if cores == 1 else (lambda p, c: p[c])
    layout = job_layout(d, len(layers), chunks, 4)
    sums = {n: np.zeros(d, dtype=np.int64) for n in range(len(jobs))}
    seen = {n: 0 for n in range(len(jobs))}
    rng = np.random.default_rng(seed)
    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def loader(ctx):
        for n, (mult, shift) in enumerate(loads["h"]):
            ctx.set(dut.h[n].mult, mult)
            ctx.set(dut.h[n].shift, shift)
        for name in ("wg", "wu", "wd", "rqg", "rqu", "lut"):
            await load_words(ctx, getattr(dut, name), loads[name])

    def producer(c):
        async def run(ctx):
            await ctx.tick().repeat(len(loads["wg"]) * 3 + len(loads["lut"]) + len(loads["rqg"]) * 2 + 4)
            for n, (x, layer) in enumerate(jobs):
                for j in range(chunks):
                    if (n * chunks + j) % cores != c:
                        continue
                    await stream_put(ctx, port(dut.i, c), pack(layout, {
                        "x": [int(v) for v in x], "layer": layer, "chunk": j, "tag": n}))
        return run

    def consumer(c):
        async def run(ctx):
            o = port(dut.o, c)
            want = sum(1 for n in range(len(jobs)) for j in range(chunks)
                       if (n * chunks + j) % cores == c) * t_dn.n_tiles
            for _ in range(want):
                while rng.random() < 0.3:
                    await ctx.tick()
                ctx.set(o.ready, 1)
                _, acc, nt, last, tag = await ctx.tick().sample(
                    o.valid, o.p.acc, o.p.nt, o.p.last, o.p.tag).until(o.valid)
                ctx.set(o.ready, 0)
                sums[tag][nt * cols:(nt + 1) * cols] += np.array([int(v) for v in acc])
                seen[tag] += int(last)
        return run

    sim.add_testbench(loader)
    for c in range(cores):
        sim.add_testbench(producer(c))
        sim.add_testbench(consumer(c))
    per_chunk = t_in.cycles(1)
    sim.run_until(1e-8 * (len(loads["wg"]) * 3 + 1500 + len(jobs) * chunks * per_chunk * 4))
    assert all(seen[n] == chunks for n in seen), f"chunks seen per job: {seen}"
    return np.stack([quant.requantize(sums[n], layers[layer]["mult_d"], layers[layer]["shift_d"])
                     for n, (_, layer) in enumerate(jobs)])


def random_layer(rng, d, f):
    return {"wg": rng.integers(-128, 128, (d, f)).astype(np.int8),
            "wu": rng.integers(-128, 128, (d, f)).astype(np.int8),
            "wd": rng.integers(-128, 128, (f, d)).astype(np.int8),
            "mult_g": rng.integers(20000, 60000, f), "shift_g": rng.integers(23, 25, f),
            "mult_u": rng.integers(20000, 60000, f), "shift_u": rng.integers(23, 25, f),
            "lut": quant.silu_lut(rng.uniform(0.03, 0.06), 0.04),
            "mult_h": int(rng.integers(40000, 60000)), "shift_h": 21,
            "mult_d": rng.integers(20000, 60000, d), "shift_d": rng.integers(22, 24, d)}


@pytest.mark.parametrize("chunks,cores", [(1, 1), (3, 2), (2, 2)])
def test_chunked_cores_random(chunks, cores):
    rng = np.random.default_rng(5 + chunks)
    d, f = 8, 12
    layers = [random_layer(rng, d, f) for _ in range(2)]
    jobs = [(rng.integers(-128, 128, d).astype(np.int8), int(rng.integers(0, 2))) for _ in range(5)]
    want = np.stack([quant.swiglu_int8(x[None], **{"wg": layers[n]["wg"], "wu": layers[n]["wu"],
                                                   "wd": layers[n]["wd"]}, p=layers[n])[0]
                     for x, n in jobs])
    assert len(np.unique(want)) > 10
    got = run_cores(d, f, layers, jobs, chunks=chunks, cores=cores)
    np.testing.assert_array_equal(got, want)


def test_shipped_trace_rows():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    B = tr.dims["batch"]
    layer_ids = (0, 3)
    layers = [dict(wg=tr.wg[n], wu=tr.wu[n], wd=tr.wd[n], **tr.layer_consts(n)) for n in layer_ids]
    picked = []
    for k, n in enumerate(layer_ids):
        sel = np.flatnonzero((tr.group_layer == n) & (tr.group_frame > 0))
        picked += [(g, b, k) for g in sel for b in range(B) if not tr.replay[g, b]][:1]
    jobs = [(tr.x[g, b], k) for g, b, k in picked]
    got = run_cores(tr.dims["d_model"], tr.dims["d_ff"], layers, jobs, chunks=8, cores=2,
                    rows=4, cols=4)
    for (g, b, _), gy in zip(picked, got, strict=True):
        wy = tr.y[g, b]
        bad = np.flatnonzero(gy != wy)
        assert bad.size == 0, (f"layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, index "
                               f"{tr.group_index[g]}, row {b}, element {bad[0]}: RTL {gy[bad[0]]}, "
                               f"trace {wy[bad[0]]}")
