"""Trace directories: the command-line check, the comparison message, and one clear error for each
kind of bad file (the format rules of ``sw/trace/format.py``, on a copy of the corner trace)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sw.trace.decode import load_decode_trace
from sw.trace.store import TraceError, first_mismatch

REPO = Path(__file__).resolve().parents[2]
CORNERS = REPO / "golden" / "corners"


@pytest.fixture
def trace(tmp_path):
    d = tmp_path / "t"
    shutil.copytree(CORNERS, d)
    return d


def test_first_mismatch():
    assert first_mismatch(np.zeros((2, 3)), np.zeros((2, 3))) is None
    a = np.zeros((2, 3), dtype=np.int8)
    b = a.copy()
    b[1, 2] = 5
    b[1, 1] = 4
    assert first_mismatch(a, b) == "y[1, 1]: got 0, expected 4 (2 of 6 elements differ)"
    assert "shape" in first_mismatch(a, b[:1])


def _edit_manifest(trace, fn):
    m = json.loads((trace / "manifest.json").read_text())
    fn(m)
    (trace / "manifest.json").write_text(json.dumps(m))


def _x_shape(d):
    return np.load(d / "x.npy").shape


@pytest.mark.parametrize("breakage,msg", [
    (lambda d: shutil.rmtree(d), "trace directory does not exist"),
    (lambda d: (d / "manifest.json").unlink(), "manifest.json: missing"),
    (lambda d: (d / "manifest.json").write_text("{nope"), "manifest.json: not valid JSON"),
    (lambda d: (d / "wg.npy").unlink(), "wg.npy: missing"),
    # A changed tensor fails its manifest checksum before its dtype or shape is read.
    (lambda d: (d / "x.npy").write_bytes((d / "x.npy").read_bytes()[:100]), "x.npy: SHA-256 does not match"),
    (lambda d: np.save(d / "x.npy", np.zeros(_x_shape(d), np.float32)), "x.npy: SHA-256 does not match"),
    (lambda d: _edit_manifest(d, lambda m: m.update(version=9)), "field 'version' is 9"),
])
def test_bad_trace_is_refused(trace, breakage, msg):
    breakage(trace)
    with pytest.raises(TraceError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        load_decode_trace(trace)


def run_cli(*args):
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True)


def test_trace_check_cli(trace):
    r = run_cli("-m", "sw.trace", str(CORNERS))
    assert r.returncode == 0 and "fastcar_decode" in r.stdout, r.stderr
    (trace / "y.npy").unlink()
    r = run_cli("-m", "sw.trace", str(trace))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "y.npy: missing" in r.stderr, r.stderr


def test_trace_check_cli_refuses_an_unknown_kind(trace):
    _edit_manifest(trace, lambda m: m.update(kind="gemm_tile"))
    r = run_cli("-m", "sw.trace", str(trace))
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert "field 'kind' is 'gemm_tile'" in r.stderr, r.stderr
