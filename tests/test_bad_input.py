"""Bad input to every user-facing command gives one clear line and changes nothing.

The commands: ``python sw/export_trace.py`` (checkpoint in, trace out), ``python -m sw.trace``
(the check ``nox -s sim -- --trace DIR`` runs before any simulator starts), ``python -m hw.board.run``
(the board host) and ``python -m sw.model.hf_loader`` (Hugging Face checkpoints). Each case breaks one
thing in a copy of a good input (a truncated or corrupted tensor file, a manifest with wrong
shapes, dtypes or checksums, NaN or inf weights, a threshold out of range, an output directory
that already exists) and requires: exit status 1, exactly one line on stderr that names the file
and the field, no traceback, no output directory left behind and the input untouched.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from sw.budget import MEMORY_LIMIT_ENV
from sw.spec import quant
from tb.board.small_trace import write_small_trace

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_bad_input")

REPO = Path(__file__).resolve().parent.parent


def run(*argv):
    return subprocess.run([sys.executable, *map(str, argv)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)


def snapshot(d: Path) -> dict:
    if not d.exists():
        return {}
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def assert_one_clear_line(r, *needles):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# ------------------------------------------------------------------ traces (sim and board host)

def _manifest(d):
    return json.loads((d / "manifest.json").read_text())


def _edit_manifest(d, fn):
    m = _manifest(d)
    fn(m)
    (d / "manifest.json").write_text(json.dumps(m))


def _rewrite(d, name, arr=None, raw=None):
    """Replace tensor ``name`` (by array or raw bytes) and update its checksum, so that the check
    after the checksum is the one that must refuse it."""
    f = d / _manifest(d)["tensors"][name]["file"]
    if raw is not None:
        f.write_bytes(raw)
    else:
        np.save(f, arr)
    _edit_manifest(d, lambda m: m["tensors"][name].update(sha256=hashlib.sha256(f.read_bytes()).hexdigest()))


def _changed(d, name, fn):
    arr = np.load(d / _manifest(d)["tensors"][name]["file"])
    arr = arr.copy()
    fn(arr)
    _rewrite(d, name, arr)


def _flip_byte(f):
    b = bytearray(f.read_bytes())
    b[-1] ^= 0x01
    f.write_bytes(bytes(b))


TRACE_CASES = {
    "missing directory": (lambda d: shutil.rmtree(d), "trace directory does not exist"),
    "manifest not JSON": (lambda d: (d / "manifest.json").write_text("{nope"),
                          "manifest.json: not valid JSON"),
    "tensor missing from manifest": (lambda d: _edit_manifest(d, lambda m: m["tensors"].pop("tas")),
                                     "manifest.json: field 'tensors.tas' missing"),
    "truncated npy": (lambda d: _rewrite(d, "x", raw=(d / "x.npy").read_bytes()[:100]),
                      "x.npy: cannot read tensor 'x'"),
    "corrupted npy": (lambda d: _flip_byte(d / "y.npy"), "y.npy: SHA-256 does not match"),
    "checksum mismatch": (lambda d: _edit_manifest(d, lambda m: m["tensors"]["wg"].update(sha256="0" * 64)),
                          "wg.npy: SHA-256 does not match"),
    "wrong shape": (lambda d: _edit_manifest(d, lambda m: m["dims"].update(d_model=m["dims"]["d_model"] + 1)),
                    "wg.npy: field 'wg' has shape"),
    "wrong dtype": (lambda d: _changed_dtype(d, "x", np.int16),
                    "x.npy: field 'x' has dtype int16, expected int8"),
    "bad dims": (lambda d: _edit_manifest(d, lambda m: m["dims"].update(batch=0)),
                 "manifest.json: field 'dims' needs positive integers"),
    "threshold above range": (lambda d: _changed(d, "threshold", lambda a: a.__setitem__(0, 2 ** 40)),
                              "threshold.npy: field 'threshold' of layer 0 is 1099511627776, outside"),
    "threshold below range": (lambda d: _changed(d, "threshold",
                                                 lambda a: a.__setitem__(1, quant.ACC_MIN - 1)),
                              f"field 'threshold' of layer 1 is {quant.ACC_MIN - 1}, outside"),
    "replay bit not 0/1": (lambda d: _changed(d, "replay", lambda a: a.__setitem__((0, 0), 2)),
                           "replay.npy: field 'replay' has 2"),
    "shift above the spec": (lambda d: _changed(d, "shift_d", lambda a: a.__setitem__((0, 0), 200)),
                             f"shift_d.npy: field 'shift_d' has 200, above the spec's maximum "
                             f"{quant.SHIFT_MAX}"),
    "layer out of range": (lambda d: _changed(d, "group_layer", lambda a: a.__setitem__(0, 7)),
                           "group_layer.npy: field 'group_layer' has layer 7"),
}


def _changed_dtype(d, name, dtype):
    _rewrite(d, name, np.load(d / f"{name}.npy").astype(dtype))


TRACE_COMMANDS = {
    "sim check (python -m sw.trace)": lambda d: ["-m", "sw.trace", d],
    "board host (python -m hw.board.run)": lambda d: ["-m", "hw.board.run", "--port", "/dev/null",
                                                      "--trace", d],
}


@pytest.fixture(scope="module")
def good_trace(tmp_path_factory):
    d = write_small_trace(tmp_path_factory.mktemp("good") / "trace")
    r = run("-m", "sw.trace", d)
    assert r.returncode == 0, r.stderr
    return d


@pytest.mark.parametrize("command", TRACE_COMMANDS)
@pytest.mark.parametrize("case", TRACE_CASES)
def test_bad_trace(good_trace, tmp_path, case, command):
    breakage, message = TRACE_CASES[case]
    d = tmp_path / "trace"
    shutil.copytree(good_trace, d)
    breakage(d)
    before = snapshot(d)
    r = run(*TRACE_COMMANDS[command](d))
    assert_one_clear_line(r, message)
    assert snapshot(d) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == (["trace"] if before else [])


def test_trace_breakages_are_planted(good_trace, tmp_path):
    """The breakages are real: every case but the ones that leave the files loadable fails the
    loader (and the unbroken copy passes, in the fixture)."""
    from sw.trace.decode import load_decode_trace
    from sw.trace.store import TraceError

    for case, (breakage, _) in TRACE_CASES.items():
        d = tmp_path / case.replace(" ", "_").replace("/", "_")
        shutil.copytree(good_trace, d)
        breakage(d)
        with pytest.raises(TraceError):
            load_decode_trace(d)


# ------------------------------------------------------------------ export (our checkpoint format)

def _edit_weights(path, fn):
    state = load_file(str(path))
    fn(state)
    save_file(state, str(path))


def _set_config(d, **model):
    meta = json.loads((d / "config.json").read_text())
    meta["model"].update(model)
    (d / "config.json").write_text(json.dumps(meta))


def _poke(state, key, value):
    state[key] = state[key].clone()
    state[key].view(-1)[0] = value


def _truncate(path: Path, n: int):
    path.write_bytes(path.read_bytes()[:n])


EXPORT_CASES = {
    "truncated weights": (lambda d: _truncate(d / "model.safetensors", 300),
                          [], "model.safetensors: cannot read"),
    "corrupted weights header": (lambda d: _corrupt_header(d / "model.safetensors"), [],
                                 "model.safetensors: cannot read"),
    "truncated tokenizer": (lambda d: _truncate(d / "tokenizer.safetensors", 50), [],
                            "tokenizer.safetensors"),
    "NaN weight": (lambda d: _edit_weights(d / "model.safetensors",
                                           lambda s: _poke(s, "norm.weight", float("nan"))),
                   [], "model.safetensors: key 'norm.weight' contains NaN or inf"),
    "inf weight": (lambda d: _edit_weights(d / "model.safetensors",
                                           lambda s: _poke(s, "layers.1.mlp.down_proj.weight", float("inf"))),
                   [], "model.safetensors: key 'layers.1.mlp.down_proj.weight' contains NaN or inf"),
    "integer weight": (lambda d: _edit_weights(d / "model.safetensors",
                                               lambda s: s.update(
                                                   {"norm.weight": s["norm.weight"].to(torch.int32)})),
                       [], "model.safetensors: key 'norm.weight' has dtype int32, expected a floating-point"),
    "shapes differ from config": (lambda d: _set_config(d, d_ff=96), [],
                                  "model.safetensors: key 'layers.0.mlp."),
    "config not JSON": (lambda d: (d / "config.json").write_text("{"), [], "config.json: not valid JSON"),
    "threshold NaN": (None, ["--tau", "nan"], "--tau: NaN is not a threshold"),
    "threshold not a number": (None, ["--tau", "high"], "--tau: not a number"),
    "threshold per layer, wrong count": (None, ["--tau", "1,2,3"], "--tau: 3 values for 2 layers"),
    "refresh period 0": (None, ["--refresh-every", "0"], "--refresh-every"),
    "negative chain limit": (None, ["--max-chain", "-1"], "--max-chain"),
    "negative sinks": (None, ["--sinks", "-1"], "--sinks"),
    "output directory exists": ("existing", [], "already exists and is not empty; pass --force"),
}


def _corrupt_header(f):
    b = bytearray(f.read_bytes())
    b[8:16] = b"\xff" * 8        # the JSON header starts at byte 8
    f.write_bytes(bytes(b))


@pytest.mark.parametrize("case", EXPORT_CASES)
def test_bad_export(tiny_ckpt, tmp_path, case):
    breakage, args, message = EXPORT_CASES[case]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, ckpt)
    out = tmp_path / "out"
    if breakage == "existing":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    elif breakage is not None:
        breakage(ckpt)
    before_ckpt, before_out = snapshot(ckpt), snapshot(out)
    r = run("sw/export_trace.py", "--checkpoint", ckpt, "--out", out, "--frames", "2", *args)
    assert_one_clear_line(r, message)
    assert snapshot(ckpt) == before_ckpt
    assert snapshot(out) == before_out
    assert out.exists() == (breakage == "existing")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ckpt"] + (["out"] if out.exists() else []))


def test_good_export_passes(tiny_ckpt, tmp_path):
    """The same command on the unbroken checkpoint writes a trace (so the cases fail for their
    breakage, not for the command line)."""
    r = run("sw/export_trace.py", "--checkpoint", tiny_ckpt, "--out", tmp_path / "out", "--frames", "2")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "manifest.json").is_file()


# ------------------------------------------------------------------ stored integer constants

@pytest.fixture(scope="module")
def int8_ckpt(tiny_ckpt, tmp_path_factory):
    """The tiny checkpoint with its constants stored by `python -m sw.golden --calibrate`."""
    d = tmp_path_factory.mktemp("int8") / "ckpt"
    shutil.copytree(tiny_ckpt, d)
    r = run("-m", "sw.golden", "--calibrate", "--checkpoint", d)
    assert r.returncode == 0, r.stderr
    assert (d / "int8.safetensors").is_file()
    return d


def _edit_int8(f, tensors=None, meta=None):
    from safetensors import safe_open
    from safetensors.numpy import save_file as save_np

    with safe_open(str(f), framework="np") as fh:
        m = dict(fh.metadata())
        t = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118
    if tensors:
        tensors(t)
    if meta:
        meta(m)
    save_np(t, str(f), metadata=m)


INT8_CASES = {
    "truncated": (lambda f: f.write_bytes(f.read_bytes()[:200]), "int8.safetensors: cannot read"),
    "shift above the spec": (lambda f: _edit_int8(f, lambda t: t["shift_d"].__setitem__((0, 0), 200)),
                             f"int8.safetensors: field 'shift_d' has 200, above the spec's maximum "
                             f"{quant.SHIFT_MAX}"),
    "NaN scale": (lambda f: _edit_int8(f, lambda t: t["s_q"].__setitem__(1, np.nan)),
                  "int8.safetensors: field 's_q' of layer 1 is nan"),
    "wrong shape": (lambda f: _edit_int8(f, lambda t: t.update(lut=t["lut"][:, :255].copy())),
                    "int8.safetensors: field 'lut' has shape [2, 255], expected [2, 256]"),
    "another model's constants": (lambda f: _edit_int8(f, meta=lambda m: m.update(model_sha256="0" * 64)),
                                  "int8.safetensors: metadata field 'model_sha256' is 0000"),
}


@pytest.mark.parametrize("case", INT8_CASES)
def test_bad_int8_constants(int8_ckpt, tmp_path, case):
    breakage, message = INT8_CASES[case]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(int8_ckpt, ckpt)
    breakage(ckpt / "int8.safetensors")
    before = snapshot(ckpt)
    r = run("sw/export_trace.py", "--checkpoint", ckpt, "--out", tmp_path / "out", "--frames", "2")
    assert_one_clear_line(r, message)
    assert snapshot(ckpt) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_good_int8_constants_are_used(int8_ckpt, tmp_path):
    """The unbroken file passes and is the one the trace names; a missing --int8 file is refused."""
    r = run("sw/export_trace.py", "--checkpoint", int8_ckpt, "--out", tmp_path / "out", "--frames", "2")
    assert r.returncode == 0, r.stderr
    man = json.loads((tmp_path / "out" / "manifest.json").read_text())
    stored = hashlib.sha256((int8_ckpt / "int8.safetensors").read_bytes()).hexdigest()
    assert man["integer_constants"]["sha256"] == stored
    r = run("sw/export_trace.py", "--checkpoint", int8_ckpt, "--out", tmp_path / "out2", "--frames", "2",
            "--int8", tmp_path / "none.safetensors")
    assert_one_clear_line(r, "none.safetensors: missing")
    r = run("-m", "sw.golden", "--calibrate", "--checkpoint", int8_ckpt)
    assert_one_clear_line(r, "int8.safetensors: already exists; pass --force")


# ------------------------------------------------------------------ Hugging Face checkpoints

@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    from tests.sw.test_hf_loader import make_checkpoint

    d = tmp_path_factory.mktemp("hf") / "llama"
    make_checkpoint(d)
    return d


def _set_hf_config(d, **fields):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(fields)
    (d / "config.json").write_text(json.dumps(cfg))


HF_CASES = {
    "truncated weights": (lambda d: _truncate(d / "model.safetensors", 300),
                          "model.safetensors: cannot read safetensors file"),
    "corrupted weights header": (lambda d: _corrupt_header(d / "model.safetensors"),
                                 "model.safetensors: cannot read safetensors file"),
    "NaN weight": (lambda d: _edit_weights(d / "model.safetensors",
                                           lambda s: _poke(s, "model.norm.weight", float("nan"))),
                   "model.safetensors: key 'model.norm.weight' has 1 NaN/inf value(s)"),
    "inf weight": (lambda d: _edit_weights(d / "model.safetensors",
                                           lambda s: _poke(s, "model.layers.0.mlp.up_proj.weight",
                                                           float("-inf"))),
                   "key 'model.layers.0.mlp.up_proj.weight' has 1 NaN/inf value(s)"),
    "integer weight": (lambda d: _edit_weights(d / "model.safetensors", lambda s: s.update(
        {"model.norm.weight": s["model.norm.weight"].to(torch.int32)})),
                       "key 'model.norm.weight' has dtype int32, expected a floating-point tensor"),
    "shapes differ from config": (lambda d: _set_hf_config(d, intermediate_size=96), "has shape"),
    "config not JSON": (lambda d: (d / "config.json").write_text("{"), "config.json"),
    "config field out of range": (lambda d: _set_hf_config(d, num_attention_heads=5), "config.json"),
    "no weights": (lambda d: (d / "model.safetensors").unlink(), "no *.safetensors weight files"),
    "missing directory": (lambda d: shutil.rmtree(d), "not a checkpoint directory"),
}


@pytest.mark.parametrize("case", HF_CASES)
def test_bad_hf_checkpoint(hf_checkpoint, tmp_path, case):
    breakage, message = HF_CASES[case]
    d = tmp_path / "llama"
    shutil.copytree(hf_checkpoint, d)
    breakage(d)
    before = snapshot(d)
    r = run("-m", "sw.model.hf_loader", d)
    assert_one_clear_line(r, message)
    assert r.stderr.startswith("sw.model.hf_loader: error: ")
    assert snapshot(d) == before


def test_good_hf_checkpoint_loads(hf_checkpoint):
    r = run("-m", "sw.model.hf_loader", hf_checkpoint)
    assert r.returncode == 0 and "ok, 2 layers, d_model 32, d_ff 64" in r.stdout, r.stderr


# ------------------------------------------------------------------ work the machine cannot hold

def test_export_of_100000_frames_is_refused_at_once(tmp_path):
    """The shipped model with --frames 100000 (hundreds of GB) is refused before anything is
    allocated: one line naming the argument, the estimate and the limit; nothing written."""
    out = tmp_path / "out"
    r = run("sw/export_trace.py", "--frames", "100000", "--out", out)
    assert_one_clear_line(r, "--frames 100000", "of memory", "available", "nothing was written")
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [
    ["sw/export_trace.py", "--frames", "40"],
    ["sw/model/generate.py", "--frames", "40", "--prompt", "red square moves right"],
])
def test_memory_limit_is_applied(tiny_ckpt, tmp_path, command):
    """Under a lower memory limit (sw.budget.MEMORY_LIMIT_ENV), a size that fits the machine is refused
    the same way, so the refusal follows the limit and not a fixed number of frames."""
    out = tmp_path / ("out" if "export" in command[0] else "grid.png")
    env = {**os.environ, MEMORY_LIMIT_ENV: "64K"}
    r = subprocess.run([sys.executable, *command, "--checkpoint", str(tiny_ckpt), "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert_one_clear_line(r, "--frames 40", "of memory", "64.0 KB available")
    assert not out.exists()


def test_simulation_selection_is_refused(tmp_path):
    """What nox -s sim runs first: the selection times the simulator processes against the limit."""
    env = {**os.environ, MEMORY_LIMIT_ENV: "1M"}
    r = subprocess.run([sys.executable, "-m", "sw.trace", "golden/fastcar", "--sim-groups", "full",
                        "--processes", "2"], cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert_one_clear_line(r, "--groups full (2,048 groups", "of memory", "1.0 MB available")
    r = run("-m", "sw.trace", "golden/fastcar", "--sim-groups", "first:2", "--processes", "2")
    assert r.returncode == 0, r.stderr


def test_disk_budget_names_the_output(tmp_path):
    from sw import budget

    with pytest.raises(budget.BudgetError, match=r"--frames 9: writes about .* to .*out, which has .* free"):
        budget.check("--frames 9", {"small": 1}, disk={"trace": 1 << 60}, out=tmp_path / "out")
    budget.check("--frames 9", {"small": 1}, disk={"trace": 1}, out=tmp_path / "out")


def test_generate_refuses_before_the_kv_cache(tiny_ckpt, monkeypatch):
    """sw.model.decoder.generate, which every sweep and report calls, checks the same budget itself."""
    from sw import budget
    from sw.model import data
    from sw.model.checkpoint import load_checkpoint
    from sw.model.decoder import generate

    ck = load_checkpoint(tiny_ckpt)
    cond, uncond = ck.layout.prompt_batch(data.DEFAULT_PROMPTS[:1])
    monkeypatch.setenv(budget.MEMORY_LIMIT_ENV, "16K")
    with pytest.raises(budget.BudgetError, match=r"frames=2 \(2 rows\): needs about .* of memory"):
        generate(ck.model, cond, 2, cfg_scale=1.5, uncond_prompt_tokens=uncond, progress=False)
    monkeypatch.delenv(budget.MEMORY_LIMIT_ENV)
    tokens, _ = generate(ck.model, cond, 2, cfg_scale=1.5, uncond_prompt_tokens=uncond, progress=False)
    assert tokens.shape[:2] == (1, 2)
