"""FastCar decode traces: what the accelerator sees, group by group, from a real rollout.

A *group* is one layer at one decode step and holds the B rows of the batch (several prompts, and
the conditional and unconditional rows of classifier-free guidance). Groups are stored in decode
order: step (frame, index) major, layer minor. For every group and row the trace holds the MLP
input ``x``, the ``q`` of the token and the ``k`` of the same position one frame earlier, the integer
TAS, the replay decision and the int8 MLP output that was used. The per-layer integer constants
(weights, requantisation, SiLU table, TAS threshold) sit beside them. The format is described in
``golden/README.md``; :func:`load_decode_trace` validates a directory, including a SHA-256 per file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sw.atomic import atomic_dir
from sw.trace.format import FORMAT, MANIFEST, TraceError, load_tensor, read_manifest

KIND = "fastcar_decode"
VERSION = 1


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tensor_specs(L: int, G: int, B: int, d: int, f: int, H: int, dh: int) -> dict:
    """name -> (dtype, shape) of every tensor of a decode trace."""
    return {
        # per layer constants
        "wg": ("int8", (L, d, f)), "wu": ("int8", (L, d, f)), "wd": ("int8", (L, f, d)),
        "mult_g": ("uint16", (L, f)), "shift_g": ("uint8", (L, f)),
        "mult_u": ("uint16", (L, f)), "shift_u": ("uint8", (L, f)),
        "lut": ("int8", (L, 256)),
        "mult_h": ("uint16", (L,)), "shift_h": ("uint8", (L,)),
        "mult_d": ("uint16", (L, d)), "shift_d": ("uint8", (L, d)),
        "threshold": ("int64", (L,)),
        # per group
        "group_layer": ("int16", (G,)), "group_frame": ("int16", (G,)), "group_index": ("int16", (G,)),
        "x": ("int8", (G, B, d)),
        "q": ("int8", (G, B, H, dh)), "k_prev": ("int8", (G, B, H, dh)),
        "tas": ("int64", (G, B)),
        "replay": ("uint8", (G, B)),
        "y": ("int8", (G, B, d)),
    }


@dataclass
class DecodeTrace:
    path: Path
    manifest: dict
    t: dict  # name -> ndarray

    def __getattr__(self, name):
        try:
            return self.__dict__["t"][name]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def dims(self) -> dict:
        return self.manifest["dims"]

    def layer_consts(self, layer: int) -> dict:
        """Constants of one layer in the form :func:`sw.spec.quant.swiglu_int8` takes."""
        names = ("mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h", "mult_d", "shift_d")
        return {n: self.t[n][layer] for n in names}


def write_decode_trace(out, manifest: dict, tensors: dict, *, force: bool = False) -> Path:
    """Write atomically: a temporary sibling directory, then a rename. Refuses an existing
    non-empty directory unless ``force``."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise TraceError(f"{out}: already exists and is not empty; pass --force to overwrite")
    dims = manifest["dims"]
    specs = tensor_specs(dims["layers"], dims["groups"], dims["batch"], dims["d_model"], dims["d_ff"],
                         dims["n_heads"], dims["head_dim"])
    if set(tensors) != set(specs):
        raise TraceError(f"{out}: tensors {sorted(set(specs) ^ set(tensors))} missing or unexpected")
    with atomic_dir(out, force=True) as tmp:
        entries = {}
        for name, (dtype, shape) in specs.items():
            arr = np.ascontiguousarray(tensors[name])
            if str(arr.dtype) != dtype or arr.shape != shape:
                raise TraceError(f"{out}: tensor '{name}' is {arr.dtype} {arr.shape}, "
                                 f"expected {dtype} {shape}")
            np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
            entries[name] = {"file": f"{name}.npy", "dtype": dtype, "shape": list(shape),
                             "sha256": _sha256(tmp / f"{name}.npy")}
        man = {"format": FORMAT, "version": VERSION, "kind": KIND, **manifest, "tensors": entries}
        (tmp / MANIFEST).write_text(json.dumps(man, indent=1) + "\n")
    return out


def load_decode_trace(d, *, verify: bool = True) -> DecodeTrace:
    """Load and validate a decode trace directory (checksums too, unless ``verify=False``)."""
    d = Path(d)
    man = read_manifest(d, version=VERSION)
    mpath = d / MANIFEST
    if man.get("kind") != KIND:
        raise TraceError(f"{mpath}: not a {KIND} trace (field 'kind' is {man.get('kind')!r})")
    dims = man.get("dims")
    keys = ("layers", "groups", "batch", "d_model", "d_ff", "n_heads", "head_dim")
    if not isinstance(dims, dict) or any(not isinstance(dims.get(k), int) or dims[k] < 1 for k in keys):
        raise TraceError(f"{mpath}: field 'dims' needs positive integers {list(keys)}")
    specs = tensor_specs(*(dims[k] for k in keys))
    t = {}
    for name, (dtype, shape) in specs.items():
        ent = man.get("tensors", {}).get(name) if isinstance(man.get("tensors"), dict) else None
        want_sha = ent.get("sha256", "") if (verify and isinstance(ent, dict)) else None
        arr = load_tensor(d, man, name, sha256=want_sha)
        f = d / ent["file"]
        if str(arr.dtype) != dtype:
            raise TraceError(f"{f}: field '{name}' has dtype {arr.dtype}, expected {dtype}")
        if arr.shape != shape:
            raise TraceError(f"{f}: field '{name}' has shape {list(arr.shape)}, expected {list(shape)}")
        t[name] = arr
    _check_values(d, man, t, dims)
    return DecodeTrace(path=d, manifest=man, t=t)


def _check_values(d: Path, man: dict, t: dict, dims: dict):
    """Refuse values that the integer spec or the accelerator cannot take, naming file and field."""
    from sw.spec import quant

    def fail(name, what):
        raise TraceError(f"{d / man['tensors'][name]['file']}: field '{name}' {what}")

    th = t["threshold"]
    bad = (th < quant.ACC_MIN) | (th > quant.THRESHOLD_NEVER)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        fail("threshold", f"of layer {i} is {int(th[i])}, outside the accelerator's range "
                          f"[{quant.ACC_MIN}, {quant.THRESHOLD_NEVER}] (int32, and 2**31 for 'never')")
    for name in ("shift_g", "shift_u", "shift_h", "shift_d"):
        if t[name].size and int(t[name].max()) > quant.SHIFT_MAX:
            fail(name, f"has {int(t[name].max())}, above the spec's maximum {quant.SHIFT_MAX}")
    if t["replay"].size and int(t["replay"].max()) > 1:
        fail("replay", f"has {int(t['replay'].max())}; replay bits are 0 or 1")
    gl = t["group_layer"]
    if gl.size and (int(gl.min()) < 0 or int(gl.max()) >= dims["layers"]):
        fail("group_layer", f"has layer {int(gl.min()) if gl.min() < 0 else int(gl.max())}; "
                            f"the trace has layers 0..{dims['layers'] - 1}")
    for name in ("group_frame", "group_index"):
        if t[name].size and int(t[name].min()) < 0:
            fail(name, f"has {int(t[name].min())}; must not be negative")


def check_decode_trace(tr: DecodeTrace) -> str | None:
    """Recompute every group with the golden model; ``None`` if the trace is self-consistent.

    Checks, group by group in decode order: the integer TAS equals :func:`sw.spec.quant.tas_int` (every
    frame); every replay bit equals the replay rule (:func:`sw.spec.quant.replay_decision` against the
    layer's threshold, then :func:`sw.spec.quant.replay_guard`: frame 0 computes, and the manifest's
    ``refresh_every`` / ``max_chain`` drift guard); computed rows' ``y`` equals
    :func:`sw.spec.quant.swiglu_int8` of their ``x``; replayed rows' ``y`` equals the ``y`` used at the same
    (layer, index, row) one frame earlier (chaining).
    """
    from sw.spec import quant

    decode = tr.manifest.get("decode", {})
    refresh_every, max_chain = decode.get("refresh_every"), decode.get("max_chain")
    B = tr.dims["batch"]
    prev, chains = {}, {}
    for g in range(tr.dims["groups"]):
        li, fr, ix = int(tr.group_layer[g]), int(tr.group_frame[g]), int(tr.group_index[g])
        at = f"group {g} (layer {li}, frame {fr}, index {ix})"
        rep = tr.replay[g].astype(bool)
        tas = quant.tas_int(tr.q[g], tr.k_prev[g])
        if not np.array_equal(tas, tr.tas[g]):
            return f"{at}: tas {tr.tas[g]} != {tas}"
        key = (li, ix)
        want = quant.replay_decision(tas, tr.threshold[li])
        rule, _, chain = quant.replay_guard(want, fr, chains.get(key, np.zeros(B, np.int64)) if max_chain
                                            is not None else None, refresh_every=refresh_every,
                                            max_chain=max_chain)
        if chain is not None:
            chains[key] = chain
        if not np.array_equal(rule, rep):
            b = int(np.flatnonzero(rule != rep)[0])
            return (f"{at}, row {b}: replay bit {int(rep[b])}, the rule gives {int(rule[b])} "
                    f"(tas {int(tas[b])}, threshold {int(tr.threshold[li])}, refresh_every {refresh_every}, "
                    f"max_chain {max_chain})")
        comp = ~rep
        if comp.any():
            y = quant.swiglu_int8(tr.x[g][comp], tr.wg[li], tr.wu[li], tr.wd[li], tr.layer_consts(li))
            if not np.array_equal(y, tr.y[g][comp]):
                return f"{at}: MLP output differs from the golden model"
        if rep.any():
            if key not in prev or not np.array_equal(prev[key][rep], tr.y[g][rep]):
                return f"{at}: replayed output is not the cached one"
        prev[key] = tr.y[g]
    return None


def select_groups(tr, spec: str) -> list[int]:
    """Groups of a decode trace: ``full`` is every group; ``first:N`` every group whose in-frame
    position is below N (all layers and frames; self-contained, since a position only replays its
    own earlier outputs); ``first:N:F`` the same in frames below F only (a prefix of the decode, so
    still self-contained); ``cover:N`` every group of ``first:N`` and frames 0 and 1 of every other
    position, in the layer ``position mod layers`` and, for the last position, in every layer (so
    that every position, layer and row is touched, every position replays once from its own frame
    0, and the replay cache's entries on both sides of every boundary between layers are used). :class:`ValueError` for any
    other ``spec``."""
    if spec == "full":
        return list(range(len(tr.group_layer)))
    kind, *nums = spec.split(":")
    if kind == "cover" and len(nums) == 1 and nums[0].isdigit() and int(nums[0]) >= 1:
        n, layers = int(nums[0]), int(tr.group_layer.max()) + 1
        last = int(tr.group_index.max())
        return [g for g in range(len(tr.group_layer))
                if tr.group_index[g] < n
                or (tr.group_frame[g] < 2 and (tr.group_layer[g] == tr.group_index[g] % layers
                                               or tr.group_index[g] == last))]
    if kind != "first" or len(nums) not in (1, 2) or not all(n.isdigit() and int(n) >= 1 for n in nums):
        raise ValueError(f"{spec!r}: expected 'full', 'first:N', 'first:N:F' or 'cover:N' with N, F >= 1")
    n, f = int(nums[0]), int(nums[1]) if len(nums) == 2 else None
    return [g for g in range(len(tr.group_layer))
            if tr.group_index[g] < n and (f is None or tr.group_frame[g] < f)]
