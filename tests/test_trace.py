"""Trace files: the shipped golden trace is consistent, and bad input gives one clear error."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sw.config import DEFAULT_TILE, TileConfig
from sw.trace.store import TraceError, check_golden, first_mismatch, load_trace, write_gemm_trace

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "golden" / "gemm_tile"


@pytest.fixture
def trace(tmp_path):
    d = tmp_path / "t"
    shutil.copytree(GOLDEN, d)
    return d


def test_golden_trace_agrees_with_golden_model():
    tr = load_trace(GOLDEN, DEFAULT_TILE)
    assert check_golden(tr) is None
    # It exercises the arithmetic: both signs, and more than a handful of distinct values.
    assert tr.y.min() < 0 < tr.y.max() and len(np.unique(tr.y)) > 50


def test_changed_byte_names_first_element(trace):
    raw = bytearray((trace / "y.npy").read_bytes())
    raw[-1] ^= 0x01                               # the last element
    (trace / "y.npy").write_bytes(bytes(raw))
    b, n = np.load(trace / "y.npy").shape
    msg = check_golden(load_trace(trace))
    assert msg is not None and f"y[{b - 1}, {n - 1}]" in msg and f"1 of {b * n} elements differ" in msg


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


@pytest.mark.parametrize("breakage,msg", [
    (lambda d: shutil.rmtree(d), "trace directory does not exist"),
    (lambda d: (d / "manifest.json").unlink(), "manifest.json: missing"),
    (lambda d: (d / "manifest.json").write_text("{nope"), "manifest.json: not valid JSON"),
    (lambda d: (d / "w.npy").unlink(), "w.npy: missing"),
    (lambda d: (d / "x.npy").write_bytes((d / "x.npy").read_bytes()[:100]), "x.npy: cannot read tensor 'x'"),
    (lambda d: np.save(d / "x.npy", np.zeros((16, DEFAULT_TILE.k_dim), np.float32)),
     "x.npy: field 'x' has dtype float32"),
    (lambda d: np.save(d / "w.npy", np.zeros((DEFAULT_TILE.k_dim, 31), np.int8)),
     f"w.npy: field 'w' has shape [{DEFAULT_TILE.k_dim}, 31]"),
    (lambda d: _edit_manifest(d, lambda m: m.update(version=9)), "field 'version' is 9"),
    (lambda d: _edit_manifest(d, lambda m: m["tile"].update(k_dim=97)),
     "k_dim=97 is not a multiple of rows=4"),
    (lambda d: _edit_manifest(d, lambda m: m["tile"].update(rows=1, k_dim=200000)),
     "k_dim=200000 could overflow the int32 accumulator"),
])
def test_bad_trace_is_refused(trace, breakage, msg):
    breakage(trace)
    with pytest.raises(TraceError, match=msg.replace("[", r"\[").replace("]", r"\]")):
        load_trace(trace)


def test_trace_for_another_tile_is_refused():
    with pytest.raises(TraceError, match="but the design is built for"):
        load_trace(GOLDEN, TileConfig(rows=2, cols=2, k_dim=DEFAULT_TILE.k_dim, n_dim=DEFAULT_TILE.n_dim))


def test_write_is_atomic_and_refuses_overwrite(tmp_path):
    tr = load_trace(GOLDEN)
    out = tmp_path / "out"
    kw = dict(x=tr.x, w=tr.w, mult=tr.mult, shift=tr.shift, y=tr.y)
    write_gemm_trace(out, tr.tile, **kw)
    before = (out / "manifest.json").read_text()
    with pytest.raises(TraceError, match="already exists; pass --force"):
        write_gemm_trace(out, tr.tile, **kw)
    # A failing write (bad shape) leaves the old directory and no temporary behind.
    with pytest.raises(TraceError):
        write_gemm_trace(out, tr.tile, **{**kw, "y": tr.y[:, :3]}, force=True)
    assert (out / "manifest.json").read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    write_gemm_trace(out, tr.tile, **kw, force=True)
    assert load_trace(out).batch == tr.batch


def run_cli(*args):
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True)


def test_export_trace_cli(tmp_path):
    out = tmp_path / "tr"
    r = run_cli("sw/export_trace.py", "--linear", "--out", str(out), "--batch", "4", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert check_golden(load_trace(out)) is None
    r = run_cli("sw/export_trace.py", "--linear", "--out", str(out))
    assert r.returncode == 1
    assert r.stderr.strip() == f"error: {out}: already exists; pass --force to overwrite"
    r = run_cli("sw/export_trace.py", "--linear", "--out", str(out), "--batch", "0", "--force")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "--batch must be at least 1" in r.stderr


def test_export_reproduces_shipped_golden(tmp_path):
    """The committed trace is what the documented command makes (same torch, same seed)."""
    out = tmp_path / "g"
    r = run_cli("sw/export_trace.py", "--linear", "--out", str(out))
    assert r.returncode == 0, r.stderr
    a, b = load_trace(out), load_trace(GOLDEN)
    for name in ("x", "w", "mult", "shift", "y"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_trace_check_cli(trace):
    assert run_cli("-m", "sw.trace", str(GOLDEN)).returncode == 0
    np.save(trace / "shift.npy", np.full(DEFAULT_TILE.n_dim, 64, np.uint8))
    r = run_cli("-m", "sw.trace", str(trace))
    assert r.returncode == 1 and r.stderr.count("\n") == 1
    assert "shift.npy: field 'shift' has 64, above the spec's maximum 63" in r.stderr
