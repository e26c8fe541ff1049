"""The shipped model, its stored integer constants and the committed decode trace agree with the
one configuration, and the export command makes the committed trace on any float code path."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL, SHIPPED_MODEL
from sw.golden import int8
from sw.model.checkpoint import load_checkpoint
from sw.trace.decode import check_decode_trace, load_decode_trace

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_shipped")

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "golden" / "fastcar"


def test_shipped_model_matches_config():
    ck = load_checkpoint()
    cfg = ck.model.config
    for k, v in SHIPPED_MODEL.items():
        assert getattr(cfg, k) == v, k
    accel = DEFAULT_ACCEL
    assert (accel.d_model, accel.d_ff, accel.layers) == (cfg.d_model, cfg.d_ff, cfg.n_layers)
    assert ck.meta["model"]["spatial_embedding"] is True


def test_committed_decode_trace_is_consistent():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    assert check_decode_trace(tr) is None
    m = tr.manifest
    assert 0.1 <= m["replay_ratio"] <= 7 / 8
    assert m["dims"]["d_model"] == SHIPPED_MODEL["d_model"] and m["dims"]["batch"] == 4
    assert m["frames"] == 8 and m["layers"] == 4 and m["tokens_per_frame"] == 64
    assert len(m["replay_ratio_per_layer"]) == 4


#: Two float code paths for the same export: ATen's default-capability (non-vectorised) kernels and
#: MKL's compatible (SSE2) BLAS path against what this CPU picks by itself. Their float64 results
#: differ in the last bits (``python -m sw.evidence.reproducibility``); the traces must not.
CODE_PATHS = {
    "native": {},
    "ATEN_CPU_CAPABILITY=default, MKL_CBWR=COMPATIBLE": {"ATEN_CPU_CAPABILITY": "default",
                                                        "MKL_CBWR": "COMPATIBLE"},
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """``python sw/export_trace.py --out DIR`` under each code path (run side by side, one thread each)."""
    base = tmp_path_factory.mktemp("exports")
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    procs = {}
    for i, (name, extra) in enumerate(CODE_PATHS.items()):
        out = base / f"fastcar-{i}"
        procs[name] = (out, subprocess.Popen([sys.executable, "sw/export_trace.py", "--out", str(out)],
                                             cwd=REPO, env={**env, **extra}, stdout=subprocess.PIPE,
                                             stderr=subprocess.PIPE, text=True))
    dirs = {}
    for name, (out, proc) in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, (name, err[-2000:])
        dirs[name] = out
    return dirs


@pytest.mark.parametrize("path", CODE_PATHS)
def test_export_is_the_committed_trace_on_every_code_path(exports, path):
    """`python sw/export_trace.py --out golden/fastcar` reproduces the committed trace bit for bit,
    whichever float kernels the CPU runs: every tensor, the replay mask and the video tokens."""
    fresh = json.loads((exports[path] / "manifest.json").read_text())
    shipped = json.loads((GOLDEN / "manifest.json").read_text())
    differ = [n for n, e in shipped["tensors"].items() if e["sha256"] != fresh["tensors"][n]["sha256"]]
    assert not differ, f"{path}: tensors that differ from golden/fastcar: {differ}"
    for f in sorted(GOLDEN.glob("*.npy")):
        assert (exports[path] / f.name).read_bytes() == f.read_bytes(), f.name
    def rest(m):  # all but 'source', which names the torch version
        return {k: v for k, v in m.items() if k != "source"}

    assert rest(fresh) == rest(shipped)


@pytest.mark.parametrize("path", CODE_PATHS)
def test_exported_trace_verifies_by_integer_recomputation(exports, path):
    r = subprocess.run([sys.executable, "-m", "sw.trace", str(exports[path])], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr


def test_stored_constants_are_the_committed_traces():
    """The stored integer constants (sw/checkpoints/default/int8.safetensors) are the committed
    trace's: weights, (mult, shift), SiLU tables, scales and the thresholds they give."""
    ck = load_checkpoint()
    path = ck.path / int8.FILE_NAME
    ip, meta = int8.load_for_checkpoint(path, ck)
    tr = load_decode_trace(GOLDEN)
    stored = int8.to_tensors(ip)
    for name in ("wg", "wu", "wd", *int8.CONSTS):
        assert stored[name].dtype == tr.t[name].dtype and np.array_equal(stored[name], tr.t[name]), name
    for li, scales in enumerate(tr.manifest["scales"]):
        assert ip.layers[li].scales == scales     # exactly: JSON round-trips float64
        tau = tr.manifest["decode"]["tau"][li]
        assert ip.threshold(li, tau) == tr.threshold[li]
    assert tr.manifest["integer_constants"]["file"] == "sw/checkpoints/default/int8.safetensors"
    assert tr.manifest["integer_constants"]["sha256"] == int8.file_sha256(path)
    assert tr.manifest["decode"]["float_dtype"] == "float64"
    assert meta["format"] == int8.FORMAT
    assert meta["calibration"]["prompts"] == tr.manifest["calibration_prompts"]


def test_stored_constants_follow_from_the_model():
    """The committed trace's weights are the shipped model's weights quantised by the spec, and its
    (mult, shift) and SiLU tables follow from its scales (what `python -m sw.golden --from-trace` checks)."""
    ck = load_checkpoint()
    ip = int8.from_trace(load_decode_trace(GOLDEN), ck.model)
    assert len(ip.layers) == ck.model.config.n_layers
