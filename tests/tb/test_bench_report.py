"""tb.bench without the RTL: a bench point from measured counts (here the cycle model's own, which
the RTL matches within 2 %), the report's fields for the three schedules, and where its Fmax
comes from."""

import json
from pathlib import Path

import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.perf.cycles import trace_cycles
from sw.trace.decode import load_decode_trace, select_groups
from tb import bench

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "fastcar"


def fake_rep(cfg=DEFAULT_ACCEL, *, scale=None):
    """An RTL report of the first 8 positions of the shipped trace in every mode, with the cycle
    model's counts per group (``scale[mode]`` multiplies one mode's counts)."""
    tr = load_decode_trace(GOLDEN)
    groups = select_groups(tr, "first:8")
    mask = tr.replay[groups]
    modes = {}
    for mode in ("drs", "static", "chunk_rr", "dense"):
        m = np.zeros_like(mask) if mode == "dense" else mask
        cycles = trace_cycles(cfg, m, "drs" if mode == "dense" else mode)
        cycles = np.round(cycles * (scale or {}).get(mode, 1)).astype(int)
        modes[mode] = {"cycles": [int(c) for c in cycles], "total_cycles": int(cycles.sum()),
                       "core_busy": [1000, 1010]}
    return {"groups": groups, "modes": modes}


def test_point_has_the_three_schedules():
    rep = fake_rep()
    p = bench.point(-1.5, GOLDEN, rep)
    m = rep["modes"]
    for key in ("tau", "replay_ratio", "cycles_dense", "cycles_fastcar", "cycles_static", "speedup", "ideal",
                "mac_utilization", "drs_gain", "model_cycles_fastcar", "model_cycles_static",
                "model_cycles_dense", "cycle_model_worst_error", "cycle_model"):
        assert key in p, f"point lost its field {key!r}"
    assert p["cycles_static_chunk"] == m["chunk_rr"]["total_cycles"]
    assert p["drs_gain_chunk"] == m["chunk_rr"]["total_cycles"] / m["drs"]["total_cycles"]
    assert p["model_cycles_static_chunk"] == m["chunk_rr"]["total_cycles"]
    assert p["drs_gain"] == m["static"]["total_cycles"] / m["drs"]["total_cycles"]
    assert set(p["cycle_model"]) == {"drs", "static", "chunk_rr", "dense"}


def test_point_stops_on_a_chunk_rr_run_off_the_model():
    with pytest.raises(SystemExit, match=r"tau -1.5: chunk_rr: the cycle model is off by"):
        bench.point(-1.5, GOLDEN, fake_rep(scale={"chunk_rr": 1.03}))


def write_synth(path: Path, **fields) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"fmax_mhz": 57.5, "clock": "$glbnet$clk", "pll_mhz": 50.0, "timing_met": True,
                                "harness_ff_max": None, "accel": DEFAULT_ACCEL.to_dict(), **fields}))
    return path


def test_synth_fmax_only_from_the_same_configuration(tmp_path):
    path = tmp_path / "synth" / "report.json"
    fmax, why = bench.synth_fmax(DEFAULT_ACCEL, path)
    assert fmax is None and "does not exist" in why
    write_synth(path)
    fmax, src = bench.synth_fmax(DEFAULT_ACCEL, path)
    assert fmax == 57.5 and "board top" in src and "timing met" in src
    write_synth(path, harness_ff_max=900, timing_met=False)
    fmax, src = bench.synth_fmax(DEFAULT_ACCEL, path)
    assert fmax == 57.5 and "synthesis harness" in src and "NOT met" in src
    other = AccelConfig(**{**DEFAULT_ACCEL.to_dict(), "chunks": 4})
    fmax, why = bench.synth_fmax(other, path)
    assert fmax is None and "another accelerator configuration" in why and "chunks" in why
    path.write_text(json.dumps({"fmax_mhz": 90.0, "tile": {"rows": 2}}))
    fmax, why = bench.synth_fmax(DEFAULT_ACCEL, path)
    assert fmax is None and "no accelerator configuration (field 'accel')" in why


def test_report_files(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "SYNTH_REPORT", write_synth(tmp_path / "synth" / "report.json"))
    p = bench.point(-1.5, GOLDEN, fake_rep())
    bench.write([p], tmp_path / "out")
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["accel"] == DEFAULT_ACCEL.to_dict() and rep["macs"] == DEFAULT_ACCEL.mac_units
    assert rep["fmax_mhz"] == 57.5 and "board top" in rep["fmax_source"]
    assert rep["points"][0]["cycles_static_chunk"] == p["cycles_static_chunk"]
    # Achieved GOPS: 2 operations per MAC done, over the FastCar cycles at the met PLL clock
    # (50 MHz), not at the Fmax.
    computed = int((1 - load_decode_trace(GOLDEN).replay[fake_rep()["groups"]]).sum())
    mac_ops = computed * 3 * DEFAULT_ACCEL.d_model * DEFAULT_ACCEL.d_ff
    want = 2 * mac_ops * 50.0e6 / p["cycles_fastcar"] / 1e9
    assert rep["points"][0]["gops"] == pytest.approx(want, rel=1e-12)
    assert rep["clock_mhz"] == 50.0 and "met" in rep["clock_source"]
    assert bench.achieved_gops(p, None) is None
    md = (tmp_path / "out" / "report.md").read_text()
    assert "chunk-RR" in md and "row-static" in md and f"{p['cycles_static_chunk']:,}" in md
    assert (tmp_path / "out" / "speedup.png").stat().st_size > 0


def test_no_gops_from_a_build_that_missed_its_clock(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "SYNTH_REPORT", write_synth(tmp_path / "synth" / "report.json",
                                                           fmax_mhz=88.66, pll_mhz=100.0, timing_met=False))
    p = bench.point(-1.5, GOLDEN, fake_rep())
    bench.write([p], tmp_path / "out")
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    assert rep["fmax_mhz"] == 88.66 and rep["clock_mhz"] is None and rep["points"][0]["gops"] is None
    assert "timing not met" in rep["clock_source"]
    assert "no GOPS: timing not met" in (tmp_path / "out" / "report.md").read_text()
