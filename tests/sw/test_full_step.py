"""Full-step traces (sw/trace/full_step.py): the export verifies, and a planted change in any one
stored tensor (checksum updated, so only the recomputation can see it) is caught and named."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sw.trace.full_step import DIMS, check_full_step, export_full_step, load_full_step, tensor_specs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def trace(tiny_ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("fs") / "t"
    export_full_step(out, checkpoint=tiny_ckpt, frames=2, tau=0.0)
    return out


def test_export_verifies(trace):
    tr = load_full_step(trace)
    assert check_full_step(tr) is None
    rep = tr.t["replay"]
    assert rep.any() and not rep.all()                       # tau 0: some rows replay
    r = subprocess.run([sys.executable, "-m", "sw.trace", str(trace)], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0 and "fastcar_full_step" in r.stdout, r.stderr


def _plant(src: Path, dst: Path, name: str, tr) -> None:
    """A real change to ``name`` (one layer or row of it, where the step uses it), with its checksum
    updated so that only the recomputation can see it."""
    shutil.copytree(src, dst)
    arr = np.load(dst / f"{name}.npy")
    if arr.dtype.kind == "f":
        arr[0] *= 3.0
    elif name == "token":
        arr[0, 0] = (arr[0, 0] + 1) % tr.manifest["model"]["vocab_size"]
    elif name == "replay":
        arr[-1, 0, 0] ^= 1
    elif name == "emb":
        arr[int(tr.t["token"][0, 0])] //= 2
    elif name in ("rope_c", "rope_s"):
        arr[3] = -arr[3]
    elif name == "exp_table":
        arr[1:] //= 2
    elif name == "lut":
        arr[0] = arr[0][::-1]
    elif name == "sampler_state":
        arr[0] ^= 1
    elif name == "threshold":
        arr[:] = -(2**31) if arr[0] > 0 else 2**31
    elif name.endswith("shift") or name == "shift_h" or name.startswith("shift_"):
        arr[0] = np.where(arr[0] > 0, arr[0] - 1, 1)
    elif name.endswith("mult") or name.startswith("mult_") or name == "a_exp":
        arr[0] = arr[0] // 2 + 1
    elif name in tensor_specs_names_stored():
        idx = (0,) * arr.ndim
        info = np.iinfo(arr.dtype)
        arr[idx] = arr[idx] - 1 if arr[idx] > info.min + 2 else arr[idx] + 1
    else:                                            # weights: one layer's matrix, negated
        arr[0] = np.clip(-arr[0].astype(np.int64), -127, 127).astype(arr.dtype)
    np.save(dst / f"{name}.npy", arr)
    m = json.loads((dst / "manifest.json").read_text())
    m["tensors"][name]["sha256"] = hashlib.sha256((dst / f"{name}.npy").read_bytes()).hexdigest()
    (dst / "manifest.json").write_text(json.dumps(m))


def tensor_specs_names_stored():
    from sw.trace.full_step import STEP_NAMES

    return (*STEP_NAMES, "logits", "sample_z", "sample_token")


NAMES = sorted(tensor_specs({k: 2 for k in DIMS}))


@pytest.mark.parametrize("name", NAMES)
def test_a_planted_change_is_caught(trace, tmp_path, name):
    """One tensor changed (checksum updated): the recomputation names it."""
    tr = load_full_step(trace)
    if name == "spatial" and tr.t["spatial"].size == 0:
        pytest.skip("the checkpoint has no in-frame position embedding")
    bad = tmp_path / name
    _plant(trace, bad, name, tr)
    msg = check_full_step(load_full_step(bad))
    assert msg is not None, f"a changed {name} is not caught"
