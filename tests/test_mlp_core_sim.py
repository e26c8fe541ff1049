"""The MLP core against the golden SwiGLU: random data on a small core, and computed rows of the
shipped decode trace on the real one."""

from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.mlp_core import MlpCore
from hw.payload import pack, pack_int8, rq_words, unpack_int8, weight_words
from sw import quant
from sw.config import TileConfig
from sw.decode_trace import load_decode_trace
from tests.streams import load_words, stream_get, stream_put

REPO = Path(__file__).resolve().parent.parent


def run_core(d, f, x, wg, wu, wd, c, *, rows=2, cols=2, lanes=4):
    dut = MlpCore(d, f, rows=rows, cols=cols, lanes=lanes)
    t_in = TileConfig(rows=rows, cols=cols, k_dim=d, n_dim=f)
    t_dn = TileConfig(rows=rows, cols=cols, k_dim=f, n_dim=d)
    lut_layout = dut.lut.signature.members["payload"].shape
    loads = [
        (dut.wg, weight_words(wg, t_in)), (dut.wu, weight_words(wu, t_in)),
        (dut.wd, weight_words(wd, t_dn)),
        (dut.rqg, rq_words(c["mult_g"], c["shift_g"], t_in)),
        (dut.rqu, rq_words(c["mult_u"], c["shift_u"], t_in)),
        (dut.rqd, rq_words(c["mult_d"], c["shift_d"], t_dn)),
        (dut.lut, [pack(lut_layout, {"addr": a, "value": int(c["lut"][a])}) for a in range(256)]),
    ]
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []

    async def producer(ctx):
        ctx.set(dut.h.mult, int(c["mult_h"]))
        ctx.set(dut.h.shift, int(c["shift_h"]))
        for port, words in loads:
            await load_words(ctx, port, words)
        for row in x:
            await stream_put(ctx, dut.i, pack_int8(row))

    async def consumer(ctx):
        for _ in range(len(x)):
            got.append(unpack_int8(await stream_get(ctx, dut.o), d))

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    per_row = d * f // (rows * cols)
    sim.run_until(1e-8 * (3 * per_row + 256 + (len(x) + 4) * 2 * (per_row + f // lanes + 40)))
    return np.array(got)


def random_consts(rng, d, f):
    return {"mult_g": rng.integers(20000, 60000, f), "shift_g": rng.integers(23, 25, f),
            "mult_u": rng.integers(20000, 60000, f), "shift_u": rng.integers(23, 25, f),
            "lut": quant.silu_lut(0.05, 0.04), "mult_h": 50000, "shift_h": 21,
            "mult_d": rng.integers(20000, 60000, d), "shift_d": rng.integers(22, 24, d)}


def test_small_core_random():
    rng = np.random.default_rng(5)
    d, f = 8, 12
    x = rng.integers(-128, 128, (5, d)).astype(np.int8)
    wg, wu = (rng.integers(-128, 128, (d, f)).astype(np.int8) for _ in range(2))
    wd = rng.integers(-128, 128, (f, d)).astype(np.int8)
    c = random_consts(rng, d, f)
    want = quant.swiglu_int8(x, wg, wu, wd, c)
    assert len(np.unique(want)) > 10
    got = run_core(d, f, x, wg, wu, wd, c)
    assert got.shape == want.shape, f"{len(got)} rows out for {len(x)} in"
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("layer", [0, 3])
def test_shipped_trace_rows(layer):
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    sel = np.flatnonzero(tr.group_layer == layer)
    computed = [(g, b) for g in sel for b in range(tr.dims["batch"]) if not tr.replay[g, b]]
    # Rows computed after frame 0 first (where replay left holes), then frame 0.
    rows = sorted(computed, key=lambda gb: tr.group_frame[gb[0]] == 0)[:2]
    x = np.stack([tr.x[g, b] for g, b in rows])
    want = np.stack([tr.y[g, b] for g, b in rows])
    got = run_core(tr.dims["d_model"], tr.dims["d_ff"], x, tr.wg[layer], tr.wu[layer], tr.wd[layer],
                   tr.layer_consts(layer), rows=4, cols=4, lanes=8)
    assert got.shape == want.shape
    for (g, b), gy, wy in zip(rows, got, want, strict=True):
        bad = np.flatnonzero(gy != wy)
        assert bad.size == 0, (f"layer {layer}, frame {tr.group_frame[g]}, index {tr.group_index[g]}, "
                               f"row {b}, element {bad[0]}: RTL {gy[bad[0]]}, trace {wy[bad[0]]}")
