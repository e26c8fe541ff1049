"""The system model of the whole decode step (sw/perf/system_model.py): budget arithmetic, which
placements fit, where FastCar saves SDRAM traffic, and the command's output."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sw.perf import system_model as sm

REPO = Path(__file__).resolve().parents[2]


def test_budget_of_the_shipped_model():
    m, s = sm.Dims(), sm.System()
    b = {r["item"].split(" (")[0]: r for r in sm.memory_budget(m, s, sparse=False)}
    # 4 layers x (4 x 96 x 96 + 3 x 96 x 256)
    assert b["attention weights"]["bytes"] + b["MLP weights"]["bytes"] == 442_368
    assert b["KV cache"]["bytes"] == 2 * 4 * 4 * 96 * 517 and b["KV cache"]["dp16kd"] == 776
    bs = {r["item"].split(" (")[0]: r for r in sm.memory_budget(m, s, sparse=True)}
    assert bs["KV cache"]["bytes"] == 2 * 4 * 4 * 96 * (s.sinks + s.window)
    assert bs["replay cache"]["dp16kd"] == 48 and bs["MLP weights"]["dp16kd"] == 144


def test_placements_that_fit():
    fits = {tuple(sorted(c["placement"].streamed)): (c["dp16kd"], c["fits"])
            for c in sm.placements(sm.Dims(), sm.System())}
    assert fits[()][1] is False                                          # everything on chip: no
    assert fits[("KV cache", "LM head", "attention weights")] == (201, True)   # the accelerator as built
    assert fits[("MLP weights", "attention weights")] == (187, True)


def test_fastcar_saves_traffic_only_where_mlp_weights_stream():
    m, s = sm.Dims(frames=2), sm.System()
    steps = m.frames * m.tokens_per_frame
    dense = sm.ReplayStats.dense(m)
    all_rep = sm.ReplayStats(np.zeros((steps, m.layers), int), np.ones((steps, m.layers), bool))
    streamed = sm.Placement(("MLP weights",))
    resident = sm.AS_BUILT
    mlp_bytes = steps * m.layers * 3 * m.d * m.d_ff
    d = sm.step_costs(m, s, streamed, dense, sparse=True)["sdram_bytes"]
    r = sm.step_costs(m, s, streamed, all_rep, sparse=True)["sdram_bytes"]
    assert d - r == mlp_bytes
    assert (sm.step_costs(m, s, resident, dense, sparse=True)["sdram_bytes"]
            == sm.step_costs(m, s, resident, all_rep, sparse=True)["sdram_bytes"])
    # compute does shrink with replay in both placements
    assert (sm.step_costs(m, s, resident, all_rep, sparse=True)["compute_cycles"]
            < sm.step_costs(m, s, resident, dense, sparse=True)["compute_cycles"])


def test_speedups_are_against_the_best_dense_design():
    m, s = sm.Dims(), sm.System()
    fc = sm.ReplayStats.from_trace(REPO / "golden" / "fastcar")
    rep = sm.report(m, s, fc, None, m)
    best_dense = min(o["dense"] for o in rep["placements"])
    assert rep["baseline_s"] == best_dense
    assert rep["best_per_mode"]["dense"]["speedup"] == pytest.approx(1.0)
    assert all(r["speedup"] == pytest.approx(best_dense / r["time_s"]) for r in rep["end_to_end"])


def test_command_writes_report_and_plot(tmp_path):
    r = subprocess.run([sys.executable, "-m", "sw.perf.system_model", "--out", str(tmp_path / "s")], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "FastCar + sparse attention" in r.stdout and "sdram_mhz 100.0" in r.stdout
    rep = json.loads((tmp_path / "s" / "report.json").read_text())
    assert len(rep["end_to_end"]) == 8 and (tmp_path / "s" / "endtoend.png").stat().st_size > 1000
    bad = subprocess.run([sys.executable, "-m", "sw.perf.system_model", "--trace", str(tmp_path / "none"),
                          "--out", str(tmp_path / "t")], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_board_times_give_each_setting_its_own_board_design():
    """The frontier's "best board design" column: every placement that fits, and the one a setting
    needs is not the dense design's (replay pays only where the MLP's weights stream)."""
    m = sm.Dims(frames=2)
    steps = m.frames * m.tokens_per_frame
    dense = sm.ReplayStats.dense(m)
    all_rep = sm.ReplayStats(np.zeros((steps, m.layers), int), np.ones((steps, m.layers), bool))
    fits = {c["placement"].name for c in sm.placements(m, sm.System()) if c["fits"]}
    d = sm.board_times(m, [dense], sparse=None)
    assert set(d) == fits
    best_dense = min(d, key=d.get)
    assert best_dense == sm.AS_BUILT.name                     # the MLP resident: the best dense design
    r = sm.board_times(m, [all_rep, all_rep], sparse=(5, 65))
    best = min(r, key=r.get)
    assert "MLP weights" not in best                          # everything replays: stream the MLP
    assert r[best] < 2 * d[best_dense]
    # two videos take twice one's time in every placement
    one = sm.board_times(m, [all_rep], sparse=(5, 65))
    assert all(r[k] == pytest.approx(2 * one[k]) for k in r)
