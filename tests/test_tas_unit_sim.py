"""The TAS comparator against the software's replay decisions, bit for bit."""

from pathlib import Path

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.payload import pack
from hw.accel.tas_unit import TasUnit, row_layout
from sw.golden import quant
from sw.trace.decode import load_decode_trace
from sw.trace.export import export_decode_trace
from tests.streams import stream_put

REPO = Path(__file__).resolve().parent.parent


def run_unit(rows, *, dim, layers, n, batch, refresh=None, max_chain=None, lanes=8):
    """rows: dicts with q, k, threshold, layer, frame, index, row -> list of (tas, replay)."""
    dut = TasUnit(dim, layers, n, batch, lanes=lanes)
    layout = row_layout(dim, layers, n, batch)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    out = []

    async def bench(ctx):
        ctx.set(dut.refresh_en, refresh is not None)
        ctx.set(dut.refresh_every, refresh or 0)
        ctx.set(dut.max_chain_en, max_chain is not None)
        ctx.set(dut.max_chain, max_chain or 0)
        ctx.set(dut.o.ready, 1)
        for r in rows:
            word = pack(layout, {"q": [int(v) for v in r["q"]], "k": [int(v) for v in r["k"]],
                                 "threshold": int(np.clip(r["threshold"], -2**33, 2**33 - 1)),
                                 "layer": r["layer"], "frame": r["frame"], "index": r["index"],
                                 "row": r["row"]})
            await stream_put(ctx, dut.i, word)
            tas, rep = (await ctx.tick().sample(dut.o.p.tas, dut.o.p.replay).until(dut.o.valid))[:2]
            out.append((int(tas), int(rep)))

    sim.add_testbench(bench)
    sim.run()
    return out


def trace_rows(tr, groups):
    rows = []
    for g in groups:
        li = int(tr.group_layer[g])
        for b in range(tr.dims["batch"]):
            rows.append({"q": tr.q[g, b].reshape(-1), "k": tr.k_prev[g, b].reshape(-1),
                         "threshold": int(tr.threshold[li]), "layer": li, "frame": int(tr.group_frame[g]),
                         "index": int(tr.group_index[g]), "row": b})
    return rows


def check_against(tr, groups, **guard):
    d = tr.dims
    got = run_unit(trace_rows(tr, groups), dim=d["n_heads"] * d["head_dim"], layers=d["layers"],
                   n=tr.manifest["tokens_per_frame"], batch=d["batch"], **guard)
    got_rep = np.array([r for _, r in got]).reshape(len(groups), d["batch"])
    got_tas = np.array([t for t, _ in got]).reshape(len(groups), d["batch"])
    want_rep = tr.replay[groups].astype(int)
    frames = tr.group_frame[groups]
    np.testing.assert_array_equal(got_tas[frames > 0], tr.tas[groups][frames > 0])
    bad = np.argwhere(got_rep != want_rep)
    if bad.size:
        g, b = groups[bad[0][0]], bad[0][1]
        raise AssertionError(f"{len(bad)} replay bits differ; first: group {g} (layer {tr.group_layer[g]}, "
                             f"frame {tr.group_frame[g]}, index {tr.group_index[g]}) row {b}: "
                             f"RTL {got_rep[tuple(bad[0])]}, software {want_rep[tuple(bad[0])]}")


def test_shipped_trace_frames_0_and_1():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    groups = np.flatnonzero((tr.group_frame <= 1) & (tr.group_index < 24))
    check_against(tr, groups)


@pytest.mark.parametrize("guard", [{"refresh": 2}, {"max_chain": 1}, {"refresh": 3, "max_chain": 2}])
def test_drift_guard_matches_software(tiny_ckpt, tmp_path, guard):
    out = tmp_path / "tr"
    export_decode_trace(out, checkpoint=tiny_ckpt, frames=4, tau=-1e9, progress=False,
                        refresh_every=guard.get("refresh"), max_chain=guard.get("max_chain"))
    tr = load_decode_trace(out)
    groups = np.flatnonzero(tr.group_index < 6)       # all frames and layers, six positions
    assert tr.replay[groups].any() and not tr.replay[groups][tr.group_frame[groups] > 0].all()
    check_against(tr, groups, **guard)


@pytest.mark.parametrize("lanes", [1, 3, 4, 16])
def test_threshold_edges(lanes):
    """Decisions at the threshold and its extremes, for adder trees of every shape (odd lane
    counts leave an operand without a partner at some level)."""
    rng = np.random.default_rng(3)
    q = rng.integers(-128, 128, 48)
    k = rng.integers(-128, 128, 48)
    q[:2], k[:2] = -128, -128                       # the largest product
    tas = int(quant.tas_int(q.reshape(1, 48), k.reshape(1, 48)))
    rows = []
    for th in (tas - 1, tas, tas + 1, quant.ACC_MAX + 1, quant.ACC_MIN):
        rows.append({"q": q, "k": k, "threshold": th, "layer": 0, "frame": 1, "index": 0, "row": 0})
    rows.append({"q": q, "k": k, "threshold": quant.ACC_MIN, "layer": 0, "frame": 0, "index": 0, "row": 0})
    got = run_unit(rows, dim=48, layers=1, n=1, batch=1, lanes=lanes)
    assert [t for t, _ in got] == [tas] * 6
    assert [r for _, r in got] == [1, 1, 0, 0, 1, 0]      # >=; never; always; frame 0 never replays


@pytest.mark.parametrize("lanes", [1, 2, 3, 4, 8, 16, 64])
def test_cycle_model_knows_the_pipeline(lanes):
    """sw.perf.cycles's TAS pipeline depth is the one the RTL builds."""
    from hw.accel.tas_unit import pipeline_cycles
    from sw.perf.cycles import tas_pipeline_cycles

    assert tas_pipeline_cycles(lanes) == pipeline_cycles(lanes)
