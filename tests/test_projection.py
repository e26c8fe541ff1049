"""The projection's arithmetic, inputs and command line (``sw/perf/projection.py``)."""

import json
from pathlib import Path

import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL
from sw.perf import projection as pj

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_projection")

REPO = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------------------------
# Real units and the clock
# ---------------------------------------------------------------------------------------------

def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj))
    return path


def test_real_units_arithmetic():
    cfg = DEFAULT_ACCEL
    clock = pj.assumed_clock(100.0)
    u = pj.real_units(cfg, 100e6, clock, frames=8, computed_rows=10, dense_rows=40, videos=2)
    assert u["ms_per_video"] == pytest.approx(1000.0) and u["ms_per_frame"] == pytest.approx(125.0)
    assert u["ms_per_video_amortised"] == pytest.approx(500.0)
    assert u["peak_gops"] == pytest.approx(2 * cfg.mac_units * 100e6 / 1e9)
    macs = 10 * 3 * cfg.d_model * cfg.d_ff
    assert u["achieved_gops"] == pytest.approx(2 * macs / 1.0 / 1e9)
    assert u["dense_equivalent_gops"] == pytest.approx(4 * u["achieved_gops"])


def test_projection_counts_the_mac_units_of_the_datapath():
    """The accelerator has ``cores x mv_in x mv_out`` MAC units, the figure every GOPS and
    utilisation of the report divides by."""
    cfg, cfg7 = DEFAULT_ACCEL, pj.projected_accel(2)
    for c in (cfg, cfg7):
        assert c.mac_units == c.cores * c.mv_in * c.mv_out
    clock = pj.assumed_clock(100.0)
    units = cfg.cores * cfg.mv_in * cfg.mv_out
    u = pj.real_units(cfg, 1e6, clock, frames=8, computed_rows=4, dense_rows=4, videos=2)
    assert u["peak_gops"] == pytest.approx(2 * units * 100e6 / 1e9)
    assert u["mac_utilization"] == pytest.approx(pj.mlp_macs(cfg, 4) / (units * 1e6))
    tr = pj._trace(REPO / "golden" / "fastcar")
    s = pj.shipped_section(cfg, clock, [], tr)
    assert s["mac_units"] == units
    assert s["peak_gops"] == pytest.approx(2 * s["mac_units"] * 100 / 1e3)
    fc = s["whole_trace_model"]["fastcar"]
    computed = int((tr.replay == 0).sum())
    assert fc["mac_utilization"] == pytest.approx(pj.mlp_macs(cfg, computed) / (units * fc["cycles"]))
    f = pj.ALVEO_U280
    a = pj.accel_summary(cfg7, f, f.clock_mhz)
    assert a["mac_units"] == cfg7.cores * cfg7.mv_in * cfg7.mv_out
    assert a["peak_gops"] == pytest.approx(2 * a["mac_units"] * f.clock_mhz / 1e3)
    assert a["dsp_fraction"] == a["mac_units"] / f.dsp
    assert a["geometry"] == f"2 cores x one {cfg7.mv_in} x {cfg7.mv_out} matrix-vector unit"


def test_clock_is_labelled_by_where_it_comes_from(tmp_path):
    missed = {"accel": DEFAULT_ACCEL.to_dict(), "fmax_mhz": 81.17, "timing_met": False,
              "constraint_mhz": 150.01}
    c = pj.clock_from_synth(write_json(tmp_path / "t.json", missed))
    assert c.measured and c.mhz == 81.17 and "the whole accelerator" in c.source and "not met" in c.source
    # A met design runs at its PLL clock, not at its (higher) Fmax.
    met = {"accel": DEFAULT_ACCEL.to_dict(), "fmax_mhz": 56.9, "timing_met": True, "pll_mhz": 50.0}
    c = pj.clock_from_synth(write_json(tmp_path / "m.json", met))
    assert c.mhz == 50.0 and "PLL clock" in c.source and "Fmax 56.90 MHz" in c.source
    a = pj.assumed_clock(100)
    assert not a.measured and a.source.startswith("assumed")
    # An assumed clock wins over the report, which is still read for reference.
    clock, measured = pj.pick_clock(tmp_path / "t.json", 100.0, DEFAULT_ACCEL)
    assert not clock.measured and measured.mhz == 81.17


@pytest.mark.parametrize("content,message", [
    ({"accel": {}}, "field 'fmax_mhz' is missing"),
    ({"accel": {}, "fmax_mhz": "fast"}, "field 'fmax_mhz': expected a positive number"),
    ({"fmax_mhz": 80.0}, "field 'accel' is missing"),
    ({"accel": {**DEFAULT_ACCEL.to_dict(), "cores": 1}, "fmax_mhz": 80.0}, "field 'accel' is another"),
    ("{not json", "not valid JSON"),
])
def test_bad_synth_reports(tmp_path, content, message):
    path = tmp_path / "report.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(pj.ProjectionError, match=message) as err:
        pj.clock_from_synth(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_no_clock_at_all(tmp_path):
    with pytest.raises(pj.ProjectionError, match="no such synthesis report"):
        pj.pick_clock(tmp_path / "missing.json", None, DEFAULT_ACCEL)


def test_bad_bench_report_names_the_field(tmp_path):
    good = {"tau": -1.5, "groups": 256, "rows": 1024, "replay_ratio": 0.8, "cycles_dense": 10,
            "cycles_fastcar": 5, "cycles_static": 6}
    points, note = pj.load_bench(write_json(tmp_path / "ok.json", {"points": [good]}))
    assert points == [good] and "does not record its configuration" in note
    points, note = pj.load_bench(write_json(tmp_path / "ok.json", {"accel": DEFAULT_ACCEL.to_dict(),
                                                                   "points": [good]}))
    assert "measured on the current configuration" in note
    other = {"accel": {**DEFAULT_ACCEL.to_dict(), "chunks": 4}, "points": [good]}
    with pytest.raises(pj.ProjectionError, match="field 'accel': the cycles were measured on another"):
        pj.load_bench(write_json(tmp_path / "other.json", other))
    for field, value in (("cycles_fastcar", "many"), ("replay_ratio", 1.5), ("groups", 0)):
        path = write_json(tmp_path / "b.json", {"points": [good, {**good, field: value}]})
        with pytest.raises(pj.ProjectionError, match=rf"field 'points\[1\]\.{field}'"):
            pj.load_bench(path)
    with pytest.raises(pj.ProjectionError, match="field 'points'"):
        pj.load_bench(write_json(tmp_path / "c.json", {"points": []}))


def test_bench_point_extrapolates_to_the_whole_video():
    p = {"tau": -1.5, "groups": 256, "rows": 1024, "replay_ratio": 0.75, "cycles_dense": 800_000,
         "cycles_fastcar": 200_000, "cycles_static": 250_000}
    u = pj.bench_point_units(DEFAULT_ACCEL, p, pj.assumed_clock(80.0), frames=8)
    assert u["extrapolation"] == 8            # 8 frames x 64 positions x 4 layers / 256 groups
    assert u["fastcar"]["cycles"] == 1_600_000
    assert u["fastcar"]["ms_per_frame"] == pytest.approx(1.6e6 / 80e6 / 8 * 1e3)
    assert u["speedup"] == 4


# ---------------------------------------------------------------------------------------------
# Groups in which every row replays
# ---------------------------------------------------------------------------------------------

def test_all_replay_fraction_and_the_independence_model():
    replay = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    assert pj.all_replay_fraction(replay, (0,)) == 0.75
    assert pj.all_replay_fraction(replay, (0, 2)) == 0.5
    assert pj.all_replay_fraction(replay, (0, 1, 2, 3)) == 0.25
    assert pj.cfg_pairs(4) == [(0, 2), (1, 3)] and len(pj.row_subsets(4, 2)) == 6
    layer, frame = np.zeros(4, int), np.array([1, 1, 1, 0])
    # Frame 1: p = 9/12; frame 0: p = 0. Groups of B independent rows: (3/4 * 0.75 ** B).
    for B in (1, 2, 8):
        assert pj.independent_all_replay(replay, layer, frame, B) == pytest.approx(0.75 * 0.75 ** B)
    masks, probs = pj.binomial_masks(4, 0.3)
    assert sum(probs) == pytest.approx(1)
    assert masks[-1] == (1, 1, 1, 1) and probs[-1] == pytest.approx(0.3 ** 4)


def test_replay_vs_batch_on_the_shipped_trace():
    tr = pj._trace(REPO / "golden" / "fastcar")
    rb = pj.replay_vs_batch(tr.replay, tr.group_layer, tr.group_frame)
    measured = {(m["batch"], m["subsets"]): m["fraction"] for m in rb["measured"]}
    assert measured[(1, "all")] == pytest.approx(tr.replay.mean())
    # Requiring more rows to replay can only lower the fraction.
    assert measured[(1, "all")] >= measured[(2, "all")] >= measured[(4, "all")]
    fr = [m["fraction"] for m in rb["independent"]]
    assert all(a >= b for a, b in zip(fr, fr[1:], strict=False))


# ---------------------------------------------------------------------------------------------
# Projection to VILA-U-7B
# ---------------------------------------------------------------------------------------------

def test_projected_design_fits_and_streams_the_weights():
    cfg = pj.projected_accel(2)
    assert pj.mlp_weight_bytes(cfg) == 3 * 4096 * 11008 == 135_266_304
    # Two cores of PROJECTED_MV: the divisibility rules of AccelConfig and MvCore hold.
    mv_in, mv_out = pj.PROJECTED_MV
    assert (cfg.cores, cfg.mv_in, cfg.mv_out) == (2, mv_in, mv_out)
    assert cfg.mac_units == 2 * mv_in * mv_out <= pj.ALVEO_U280.dsp
    assert all(n % m == 0 for n in (cfg.d_model, cfg.chunk_width) for m in (mv_in, mv_out))
    assert cfg.d_model // mv_in >= mv_out and (cfg.chunk_width // mv_in) * (cfg.d_model // mv_out) >= 3
    f = pj.ALVEO_U280
    dense = pj.group_time(cfg, f, f.clock_mhz, (0, 0))
    one = pj.group_time(cfg, f, f.clock_mhz, (0, 1))
    none = pj.group_time(cfg, f, f.clock_mhz, (1, 1))
    assert dense["bound"] == "bandwidth" and one["bound"] == "bandwidth"
    assert dense["weights"] == pytest.approx((135_266_304 + 2 * 4096) / (460e9 / 300e6))
    # Replaying one of two rows saves compute but not weight traffic, so hardly any time.
    assert one["bytes"] == dense["bytes"] and one["cycles"] > 0.95 * dense["cycles"]
    # Replaying both skips the weights: only the front end and the replay cache remain.
    assert none["bytes"] == 2 * 4096 and none["cycles"] < 0.01 * dense["cycles"]
    big = pj.group_time(pj.projected_accel(16), f, f.clock_mhz, (0,) * 16)
    assert big["bound"] == "compute"
    # The compute time is the v2 cycle model's: no fewer cycles than the MACs over the MAC units.
    assert dense["compute"] == pj.compute_cycles(cfg, (0, 0)) >= pj.mlp_macs(cfg, 2) / cfg.mac_units


def test_bandwidth_bound_speedup_follows_the_all_replay_fraction():
    """B = 2, bandwidth-bound: the speed-up is about 1 / (1 - all-replay), not 1 / (1 - r)."""
    rng = np.random.default_rng(1)
    masks = rng.integers(0, 2, (400, 2))
    masks[:200] = 1                                   # half the groups replay entirely
    p = pj.project_video(pj.VILA_U_7B, pj.ALVEO_U280, 300.0, {0: masks}, 2)
    all_rep = (masks == 1).all(axis=1).mean()
    assert p["mlp_speedup"] == pytest.approx(1 / (1 - all_rep), rel=0.03)
    assert p["mlp_speedup"] < p["ideal_compute_bound"]


def test_energy_model_counts_what_replay_skips():
    cfg = pj.projected_accel(2)
    dense = pj.group_energy_pj(cfg, 2, 2, weights_in_dram=True)
    fast = pj.group_energy_pj(cfg, 0, 2, weights_in_dram=True)
    assert fast["mac"] == 0 and fast["tas"] == dense["tas"]
    assert dense["mac"] == pytest.approx(2 * 135_266_304 * (0.2 + 0.1))
    s_dense = pj.energy_summary(cfg, 10, 2, 2.0, 0.0, weights_in_dram=True, dram_pj_64bit=1300)
    s_half = pj.energy_summary(cfg, 10, 2, 1.0, 0.5, weights_in_dram=True, dram_pj_64bit=1300)
    stream = s_dense["components_j"]["weight_stream"]
    assert stream == pytest.approx(10 * 135_266_304 * (1300 + 10) / 8 * 1e-12)
    assert s_half["components_j"]["weight_stream"] == pytest.approx(stream / 2)
    assert s_half["dense_equivalent_gops_per_watt"] > s_dense["gops_per_watt"]
    # One on-chip weight byte per MAC (a weight block serves one row); the output stage adds the
    # cores' accumulators as well as each chunk's partial sums.
    assert dense["pe_weight_reads"] == pytest.approx(2 * 135_266_304 * 10 / 8)
    assert dense["reducer"] == pytest.approx(2 * (cfg.chunks + cfg.cores - 1) * 4096 * 0.1)


def test_model_sizes_agree_with_the_report():
    from sw.evidence.report import VILA_U_7B

    for k in ("d_model", "d_ff", "tokens_per_frame", "frames", "prompt_len"):
        assert pj.VILA_U_7B[k] == VILA_U_7B[k], k
    assert pj.VILA_U_7B["layers"] == VILA_U_7B["n_layers"]


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------

def test_cli_writes_refuses_and_names_bad_input(tmp_path, capsys):
    synth = write_json(tmp_path / "synth.json", {"accel": DEFAULT_ACCEL.to_dict(), "fmax_mhz": 80.0,
                                                  "timing_met": False})
    good = {"tau": -1.5, "groups": 256, "rows": 1024, "replay_ratio": 0.797, "cycles_dense": 863_488,
            "cycles_fastcar": 204_981, "cycles_static": 253_276}
    bench = write_json(tmp_path / "bench.json", {"points": [good]})
    out = tmp_path / "proj"
    args = ["--bench", str(bench), "--synth", str(synth), "--out", str(out)]
    assert pj.main(args) == 0
    assert {p.name for p in out.iterdir()} == {"report.json", "report.md", "all_replay.png"}
    rep = json.loads((out / "report.json").read_text())
    assert rep["clock"]["measured"] and rep["clock"]["mhz"] == 80.0
    md = (out / "report.md").read_text()
    assert "python -m sw.perf.projection --bench" in md
    # The report follows the configurations: the shipped one and the projected one.
    cfg7 = pj.projected_accel(2)
    assert rep["shipped"]["mac_units"] == DEFAULT_ACCEL.mac_units
    assert rep["projection"]["mac_units"] == cfg7.mac_units and rep["projection"]["accel"] == cfg7.to_dict()
    assert f"{pj.geometry(DEFAULT_ACCEL)});" in md and f"{pj.geometry(cfg7)} = {cfg7.mac_units:,}" in md
    (out / "report.md").write_text("mine")
    assert pj.main(args) == 1
    assert "already exists; pass --force" in capsys.readouterr().err
    assert (out / "report.md").read_text() == "mine"
    write_json(bench, {"points": [{"tau": -1.5}]})
    assert pj.main([*args, "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"sw.perf.projection: {bench}: field 'points[0].groups' is missing"
    assert (out / "report.md").read_text() == "mine"     # a failed run leaves the old report
    write_json(bench, {"points": [good]})
    assert pj.main(["--bench", str(bench), "--synth", str(tmp_path / "none.json"), "--assume-mhz", "50",
                    "--out", str(out), "--force"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert not rep["clock"]["measured"] and rep["clock"]["mhz"] == 50.0
