"""The decode-trace export end to end on a tiny random checkpoint, and its bad-input handling."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sw.golden.calibrate import calibrate
from sw.model import data
from sw.model.checkpoint import CheckpointError, load_checkpoint
from sw.spec import quant
from sw.trace.decode import check_decode_trace, load_decode_trace
from sw.trace.export import export_decode_trace
from sw.trace.store import TraceError

REPO = Path(__file__).resolve().parents[2]


def test_checkpoint_round_trip(tiny_ckpt):
    ck = load_checkpoint(tiny_ckpt)
    assert ck.model.config.d_model == 32 and ck.layout.codebook_size == 64


def test_checkpoint_errors(tiny_ckpt, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(tiny_ckpt, bad)
    (bad / "tokenizer.safetensors").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.safetensors: missing"):
        load_checkpoint(bad)
    shutil.copy(tiny_ckpt / "tokenizer.safetensors", bad)
    from safetensors.torch import load_file, save_file
    st = load_file(str(bad / "model.safetensors"))
    st["norm.weight"][0] = float("nan")
    save_file(st, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="key 'norm.weight' contains NaN or inf"):
        load_checkpoint(bad)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nope")


def test_integer_mlp_matches_spec(tiny_ckpt):
    ck = load_checkpoint(tiny_ckpt)
    lay = ck.layout
    prompts, _ = lay.prompt_batch(data.DEFAULT_PROMPTS[:2])
    ip = calibrate(ck.model, prompts, 2)
    x = torch.randn(3, 32)
    y = ip.mlp(1, x)
    L = ip.layers[1]
    x_q = quant.quantize_activation(x.double().numpy(), L.scales["s_x"])
    want = quant.swiglu_int8(x_q, L.wg, L.wu, L.wd, L.consts).astype(np.float32) * np.float32(L.scales["s_y"])
    np.testing.assert_array_equal(y.numpy(), want)
    # The integer MLP tracks the float one (a sanity check of the calibration, not bit-exactness).
    ref = ck.model.layers[1].mlp(x * 0.5)
    err = (ip.mlp(1, x * 0.5) - ref).norm() / ref.norm()
    assert err < 0.25


def test_export_decode_trace(tiny_ckpt, tmp_path):
    out = tmp_path / "tr"
    info = export_decode_trace(out, checkpoint=tiny_ckpt, frames=3, tau=-1e9, progress=False)
    tr = load_decode_trace(out)
    assert check_decode_trace(tr) is None
    B, N, L = 4, 64, 2
    assert tr.dims["batch"] == B and tr.dims["groups"] == 3 * N * L
    rep = tr.replay.astype(bool)
    frame = tr.group_frame
    assert not rep[frame == 0].any() and rep[frame > 0].all()      # tau = -1e9: everything replays
    assert abs(info["replay_ratio"] - 2 / 3) < 1e-9
    # A planted change is caught by the checksum, and a consistent-but-wrong y by the golden check.
    raw = bytearray((out / "y.npy").read_bytes())
    raw[-1] ^= 1
    (out / "y.npy").write_bytes(bytes(raw))
    with pytest.raises(TraceError, match="y.npy: SHA-256 does not match"):
        load_decode_trace(out)
    tr2 = load_decode_trace(out, verify=False)
    assert check_decode_trace(tr2) is not None


def test_export_tau_inf_is_dense(tiny_ckpt, tmp_path):
    export_decode_trace(tmp_path / "d", checkpoint=tiny_ckpt, frames=2, tau=float("inf"), progress=False)
    tr = load_decode_trace(tmp_path / "d")
    assert not tr.replay.any() and check_decode_trace(tr) is None
    assert (tr.threshold == quant.ACC_MAX + 1).all()


def run_cli(*args):
    return subprocess.run([sys.executable, "sw/export_trace.py", *args], cwd=REPO, capture_output=True,
                          text=True)


def test_export_cli_errors(tiny_ckpt, tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run_cli("--checkpoint", str(tiny_ckpt), "--out", str(out))
    assert r.returncode == 1 and "already exists and is not empty; pass --force" in r.stderr
    assert (out / "keep.txt").read_text() == "mine"
    for args, msg in ((["--tau", "abc"], "--tau: not a number"),
                      (["--tau", "1,2,3"], "--tau: 3 values for 2 layers"),
                      (["--prompt", "purple square moves left"], "purple"),
                      (["--frames", "1"], "--frames must be at least 2"),
                      (["--checkpoint", str(tmp_path / "none")], "checkpoint directory does not exist")):
        r = run_cli("--checkpoint", str(tiny_ckpt), "--out", str(tmp_path / "x"), *args)
        assert r.returncode == 1 and msg in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
        assert not (tmp_path / "x").exists()


def test_trace_check_cli_on_decode_trace(tiny_ckpt, tmp_path):
    export_decode_trace(tmp_path / "t", checkpoint=tiny_ckpt, frames=2, tau=0.0, progress=False)
    r = subprocess.run([sys.executable, "-m", "sw.trace", str(tmp_path / "t")], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "fastcar_decode" in r.stdout
    m = json.loads((tmp_path / "t" / "manifest.json").read_text())
    m["tensors"]["x"]["sha256"] = "0" * 64
    (tmp_path / "t" / "manifest.json").write_text(json.dumps(m))
    r = subprocess.run([sys.executable, "-m", "sw.trace", str(tmp_path / "t")], cwd=REPO,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "x.npy: SHA-256 does not match" in r.stderr
