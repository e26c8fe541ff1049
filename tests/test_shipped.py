"""The shipped model and the committed decode trace agree with the one configuration."""

from pathlib import Path

from sw.checkpoint import load_checkpoint
from sw.config import DEFAULT_TILE, SHIPPED_MODEL
from sw.decode_trace import check_decode_trace, load_decode_trace

REPO = Path(__file__).resolve().parent.parent


def test_shipped_model_matches_config():
    ck = load_checkpoint()
    cfg = ck.model.config
    for k, v in SHIPPED_MODEL.items():
        assert getattr(cfg, k) == v, k
    assert (DEFAULT_TILE.k_dim, DEFAULT_TILE.n_dim) == (cfg.d_model, cfg.d_ff)
    assert ck.meta["model"]["spatial_embedding"] is True


def test_committed_decode_trace_is_consistent():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    assert check_decode_trace(tr) is None
    m = tr.manifest
    assert 0.5 <= m["replay_ratio"] <= 0.9
    assert m["tile"] == DEFAULT_TILE.to_dict()
    assert m["dims"]["d_model"] == SHIPPED_MODEL["d_model"] and m["dims"]["batch"] == 4
    assert m["frames"] == 8 and m["layers"] == 4 and m["tokens_per_frame"] == 64
    assert len(m["replay_ratio_per_layer"]) == 4


def test_committed_trace_is_what_the_export_command_makes(tmp_path):
    """`python sw/export_trace.py --out golden/fastcar` reproduces the committed trace bit for bit."""
    import json
    import subprocess
    import sys

    out = tmp_path / "fastcar"
    r = subprocess.run([sys.executable, "sw/export_trace.py", "--out", str(out)], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    fresh = json.loads((out / "manifest.json").read_text())["tensors"]
    shipped = json.loads((REPO / "golden" / "fastcar" / "manifest.json").read_text())["tensors"]
    differ = [n for n in shipped if shipped[n]["sha256"] != fresh[n]["sha256"]]
    assert not differ, f"tensors that differ from golden/fastcar: {differ}"
