"""The real synthesis flow (YoWASP yosys + nextpnr-ecp5 + ecppack) on a small tile."""

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_synth_small_tile(tmp_path):
    tile = tmp_path / "tile.json"
    tile.write_text(json.dumps({"rows": 2, "cols": 2, "k_dim": 4, "n_dim": 4}))
    out = tmp_path / "synth"
    r = subprocess.run([sys.executable, "-m", "hw.flow.synth", "--tile", str(tile), "--build-dir", str(out),
                        "--mhz", "50"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    for key in ("fmax_mhz", "target_mhz", "dsp_used", "dsp_total", "lut4", "ff", "ebr_used",
                "ebr_total", "bitstream"):
        assert key in report, key
    assert Path(report["bitstream"]).stat().st_size > 100_000
    assert report["dsp_total"] == 156 and report["ebr_total"] == 208
    assert report["dsp_used"] >= 4          # one MULT18X18D per PE at least
    assert report["fmax_mhz"] > 10 and report["lut4"] > 100
    assert report["tile"] == {"rows": 2, "cols": 2, "k_dim": 4, "n_dim": 4, "acc_bits": 32}
    assert "fmax" in r.stdout and "DSP" in r.stdout   # the readable table


def test_synth_bad_tile_is_one_line(tmp_path):
    tile = tmp_path / "tile.json"
    tile.write_text(json.dumps({"rows": 1, "cols": 1, "k_dim": 200000, "n_dim": 1}))
    r = subprocess.run([sys.executable, "-m", "hw.flow.synth", "--tile", str(tile)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and "could overflow the int32 accumulator" in r.stderr
