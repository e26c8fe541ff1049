"""The real synthesis flow (YoWASP yosys + nextpnr-ecp5 + ecppack) on a small accelerator."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hw.formal.properties import TINY_ACCEL

REPO = Path(__file__).resolve().parents[3]


def test_synth_small_accelerator(tmp_path):
    accel = tmp_path / "accel.json"
    accel.write_text(json.dumps(TINY_ACCEL.to_dict()))
    out = tmp_path / "synth"
    r = subprocess.run([sys.executable, "-m", "hw.flow.synth", "--accel", str(accel), "--harness",
                        "--build-dir", str(out), "--mhz", "50"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    for key in ("fmax_mhz", "target_mhz", "dsp_used", "dsp_total", "lut4", "ff", "ebr_used",
                "ebr_total", "bitstream"):
        assert key in report, key
    assert Path(report["bitstream"]).stat().st_size > 100_000
    assert report["dsp_total"] == 156 and report["ebr_total"] == 208
    # One MULT18X18D per MAC unit at least, and block RAM for the weights and tables.
    assert report["dsp_used"] >= TINY_ACCEL.mac_units and report["ebr_used"] >= 1
    assert report["fmax_mhz"] > 50 and report["timing_met"] and report["lut4"] > 100
    assert report["accel"] == TINY_ACCEL.to_dict()
    assert "fmax" in r.stdout and "DSP" in r.stdout   # the readable table


def test_synth_bad_config_is_one_line(tmp_path):
    accel = tmp_path / "accel.json"
    accel.write_text(json.dumps({**TINY_ACCEL.to_dict(), "d_ff": 17}))
    r = subprocess.run([sys.executable, "-m", "hw.flow.synth", "--accel", str(accel)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "d_ff=17 is not a multiple of chunks=2" in r.stderr, r.stderr


def test_synth_config_the_gateware_refuses_is_one_line(tmp_path):
    """A configuration that the cores cannot schedule (their one requantiser lane cannot serialise
    8 outputs in a 4-cycle GU run) is refused by the configuration itself: one line naming the
    file, not a traceback from the gateware."""
    accel = tmp_path / "accel.json"
    accel.write_text(json.dumps({"d_model": 32, "d_ff": 128, "layers": 1, "tokens_per_frame": 4, "batch": 4,
                                 "cores": 2, "chunks": 8, "tas_lanes": 16, "mv_in": 8, "mv_out": 8}))
    r = subprocess.run([sys.executable, "-m", "hw.flow.synth", "--accel", str(accel), "--build-dir",
                        str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1
    want = f"{accel}: accelerator config: d_model / mv_in = 4 is below mv_out=8"
    assert r.stderr.count("\n") == 1 and want in r.stderr, r.stderr


def test_synth_small_board_top_names_its_routed_paths(tmp_path):
    """The board top (UART bridge, floorplan) of a small accelerator: the report carries the routed
    paths of hw.flow.placed_timing, whose Fmax is nextpnr's own (the routed SDF's delays)."""
    accel = tmp_path / "accel.json"
    accel.write_text(json.dumps(TINY_ACCEL.to_dict()))
    out = tmp_path / "synth"
    r = subprocess.run([sys.executable, "-m", "hw.flow.synth", "--accel", str(accel),
                        "--build-dir", str(out), "--mhz", "50"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["timing_met"] and report["floorplan_cells"] > 0
    # The worst slack against the PLL period: positive, since the clock is met.
    assert report["slack_ns"] == pytest.approx(1e3 / report["pll_mhz"] - 1e3 / report["fmax_mhz"], abs=1e-3)
    assert report["slack_ns"] > 0 and "slack +" in r.stdout
    routed = report["paths_mhz"][report["clock"]]
    assert abs(routed - report["fmax_mhz"]) <= 0.01 * report["fmax_mhz"], (routed, report["fmax_mhz"])
    assert report["failing_endpoints"] == {"10": 0, "20": 0}
    assert report["worst_paths"] and Path(report["paths_report"]).is_file()
    assert "endpoints over" in r.stdout
    # The budget per block (hw.flow.budget) adds up to nextpnr's own counts of the same build.
    from hw.flow.budget import budget
    total = budget(json.loads((out / "top.json").read_text()), expand={"core.accel"})["total"]
    assert (total["DP16KD"], total["MULT18X18D"], total["LUT4"], total["FF"]) == (
        report["ebr_used"], report["dsp_used"], report["lut4"], report["ff"])
