"""The stored integer constants of a model: ``int8.safetensors`` beside its checkpoint.

Calibration (:func:`sw.golden.calibrate.calibrate`) is floating point: it takes maxima from a float
rollout, and the last bits of those maxima depend on the CPU's float kernels. Its result is
therefore stored once, as an artefact of the shipped model, and every trace export reads it
instead of recalibrating. The file holds, for L layers (d = d_model, f = d_ff):

=========================================  =======  ==========  ==========================================
tensor                                     dtype    shape       meaning
=========================================  =======  ==========  ==========================================
``wg``, ``wu``                             int8     [L, d, f]   gate and up weights, ``gate = x @ wg``
``wd``                                     int8     [L, f, d]   down weights
``mult_g``, ``mult_u``                     uint16   [L, f]      requantisation of gate and up
``shift_g``, ``shift_u``                   uint8    [L, f]
``lut``                                    int8     [L, 256]    SiLU table, indexed by ``gate + 128``
``mult_h`` / ``shift_h``                   uint16   [L]         requantisation of ``silu(gate) * up``
                                           / uint8
``mult_d`` / ``shift_d``                   uint16   [L, d]      requantisation of the down projection
                                           / uint8
``s_x``, ``s_gate``, ``s_up``, ``s_act``,  float64  [L]         the activation scales (exact); ``s_x``,
``s_h``, ``s_y``, ``s_q``, ``s_k``                              ``s_q``, ``s_k`` quantise the float
                                                                model's x, q and k, ``s_y`` dequantises
                                                                the MLP output, ``s_q s_k`` give the TAS
                                                                threshold
=========================================  =======  ==========  ==========================================

Metadata (strings): ``format`` (``fastcar-hw-int8``), ``version`` (``1``), ``model_sha256`` (the
SHA-256 of the ``model.safetensors`` the constants belong to), ``source`` (the command that wrote
the file) and ``calibration`` (JSON: how the maxima were taken, or which trace the constants were
extracted from). :func:`load_int8` refuses a file that breaks any of this with one
:class:`Int8Error` naming the file and the field.

``python -m sw.golden --calibrate`` writes a new file from a float64 calibration;
``python -m sw.golden --from-trace DIR`` extracts one from a decode trace (that is how the shipped
file was made from ``golden/fastcar``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from sw.atomic import OutputExistsError, atomic_file
from sw.spec import quant

FILE_NAME = "int8.safetensors"
FORMAT = "fastcar-hw-int8"
VERSION = 1
SCALES = ("s_x", "s_gate", "s_up", "s_act", "s_h", "s_y", "s_q", "s_k")
CONSTS = ("mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h", "mult_d", "shift_d")
METADATA = ("format", "version", "model_sha256", "source", "calibration")


class Int8Error(ValueError):
    """An integer-constants file that cannot be used; the message names the file and the field."""


def file_sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def tensor_specs(L: int, d: int, f: int) -> dict:
    """name -> (dtype, shape) of every tensor of the file."""
    specs = {
        "wg": ("int8", (L, d, f)), "wu": ("int8", (L, d, f)), "wd": ("int8", (L, f, d)),
        "mult_g": ("uint16", (L, f)), "shift_g": ("uint8", (L, f)),
        "mult_u": ("uint16", (L, f)), "shift_u": ("uint8", (L, f)),
        "lut": ("int8", (L, quant.LUT_SIZE)),
        "mult_h": ("uint16", (L,)), "shift_h": ("uint8", (L,)),
        "mult_d": ("uint16", (L, d)), "shift_d": ("uint8", (L, d)),
    }
    specs.update({s: ("float64", (L,)) for s in SCALES})
    return specs


def to_tensors(ip) -> dict:
    """The arrays of an :class:`sw.golden.calibrate.IntegerPath`, stacked over layers, in the file's
    dtypes."""
    L = len(ip.layers)
    d, f = ip.layers[0].wg.shape
    specs = tensor_specs(L, d, f)
    t = {n: np.stack([getattr(lr, n) for lr in ip.layers]) for n in ("wg", "wu", "wd")}
    t.update({n: np.stack([np.asarray(lr.consts[n]) for lr in ip.layers]) for n in CONSTS})
    t.update({s: np.array([lr.scales[s] for lr in ip.layers], np.float64) for s in SCALES})
    return {n: np.ascontiguousarray(t[n].astype(dt, casting="unsafe")) for n, (dt, _) in specs.items()}


def from_tensors(t: dict, n_heads: int, head_dim: int):
    """An :class:`sw.golden.calibrate.IntegerPath` from the file's arrays."""
    from sw.golden.integer_path import IntegerPath, LayerInt

    layers = []
    for li in range(t["wg"].shape[0]):
        consts = {n: t[n][li] for n in CONSTS}
        layers.append(LayerInt(wg=t["wg"][li], wu=t["wu"][li], wd=t["wd"][li], consts=consts,
                               scales={s: float(t[s][li]) for s in SCALES}))
    return IntegerPath(layers, n_heads, head_dim)


def save_int8(path, ip, *, model_sha256: str, source: str, calibration: dict, force: bool = False) -> Path:
    """Write ``ip``'s constants atomically; refuses an existing file unless ``force``."""
    from safetensors.numpy import save_file

    path = Path(path)
    if path.exists() and not force:
        raise OutputExistsError(f"{path}: already exists; pass --force to overwrite")
    meta = {"format": FORMAT, "version": str(VERSION), "model_sha256": model_sha256, "source": source,
            "calibration": json.dumps(calibration, sort_keys=True)}
    with atomic_file(path) as tmp:
        save_file(to_tensors(ip), tmp, metadata=meta)
    return path


def load_int8(path, *, n_layers: int, d_model: int, d_ff: int, n_heads: int, head_dim: int,
              model_sha256: str | None = None):
    """Load and validate a constants file for a model of the given geometry.

    Returns ``(IntegerPath, metadata)``; ``metadata['calibration']`` is decoded from JSON. With
    ``model_sha256``, the file must name that model file.
    """
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise Int8Error(f"{path}: missing (write it with `python -m sw.golden --calibrate`)")
    try:
        with safe_open(str(path), framework="np") as fh:
            meta = dict(fh.metadata() or {})
            t = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not a dict)
    except Exception as e:  # safetensors raises several types for corrupt files
        raise Int8Error(f"{path}: cannot read ({type(e).__name__}: {e})".splitlines()[0]) from None

    def fail(what):
        raise Int8Error(f"{path}: {what}")

    for key in METADATA:
        if key not in meta:
            fail(f"metadata field '{key}' missing")
    if meta["format"] != FORMAT:
        fail(f"metadata field 'format' is {meta['format']!r}, expected {FORMAT!r}")
    if meta["version"] != str(VERSION):
        fail(f"metadata field 'version' is {meta['version']!r}, this code reads {VERSION}")
    try:
        meta["calibration"] = json.loads(meta["calibration"])
    except json.JSONDecodeError as e:
        fail(f"metadata field 'calibration' is not valid JSON ({e})")
    if model_sha256 is not None and meta["model_sha256"] != model_sha256:
        fail(f"metadata field 'model_sha256' is {meta['model_sha256'][:16]}..., but the model file has "
             f"{model_sha256[:16]}...: these constants belong to another model "
             "(recalibrate with `python -m sw.golden --calibrate --force`)")
    specs = tensor_specs(n_layers, d_model, d_ff)
    for name, (dtype, shape) in specs.items():
        if name not in t:
            fail(f"field '{name}' missing")
        arr = t[name]
        if str(arr.dtype) != dtype:
            fail(f"field '{name}' has dtype {arr.dtype}, expected {dtype}")
        if arr.shape != shape:
            fail(f"field '{name}' has shape {list(arr.shape)}, expected {list(shape)} "
                 f"(layers {n_layers}, d_model {d_model}, d_ff {d_ff})")
    extra = sorted(set(t) - set(specs))
    if extra:
        fail(f"unexpected field '{extra[0]}'")
    for name in ("shift_g", "shift_u", "shift_h", "shift_d"):
        if int(t[name].max()) > quant.SHIFT_MAX:
            fail(f"field '{name}' has {int(t[name].max())}, above the spec's maximum {quant.SHIFT_MAX}")
    for name in SCALES:
        bad = ~(np.isfinite(t[name]) & (t[name] > 0))
        if bad.any():
            li = int(np.flatnonzero(bad)[0])
            fail(f"field '{name}' of layer {li} is {t[name][li]}; scales must be finite and positive")
    return from_tensors(t, n_heads, head_dim), meta


def load_for_checkpoint(path, ckpt):
    """:func:`load_int8` for a loaded :class:`sw.model.checkpoint.Checkpoint` (geometry and model file)."""
    mc = ckpt.model.config
    return load_int8(path, n_layers=mc.n_layers, d_model=mc.d_model, d_ff=mc.d_ff, n_heads=mc.n_heads,
                     head_dim=mc.head_dim, model_sha256=file_sha256(ckpt.path / "model.safetensors"))


def from_trace(tr, model) -> tuple:
    """The constants of a decode trace (:class:`sw.trace.decode.DecodeTrace`), checked against
    ``model`` (the float :class:`sw.model.decoder.Decoder` the trace was exported from).

    The weights must be the model's weights quantised by the spec, and every ``(mult, shift)``
    and SiLU table must follow from the manifest's scales; :class:`Int8Error` names the first
    that does not. Returns the :class:`sw.golden.calibrate.IntegerPath`.
    """
    from sw.golden.integer_path import quantize_layer_scales

    man, where = tr.manifest, tr.path
    mc = model.config
    L, d, f = man["dims"]["layers"], man["dims"]["d_model"], man["dims"]["d_ff"]
    if (L, d, f, man["dims"]["n_heads"], man["dims"]["head_dim"]) != (
            mc.n_layers, mc.d_model, mc.d_ff, mc.n_heads, mc.head_dim):
        raise Int8Error(f"{where / 'manifest.json'}: field 'dims' does not match the model")
    scales = man.get("scales")
    if not isinstance(scales, list) or len(scales) != L or any(
            not isinstance(s, dict) or set(s) != set(SCALES) for s in scales):
        raise Int8Error(f"{where / 'manifest.json'}: field 'scales' needs {L} objects with {list(SCALES)}")
    t = {n: tr.t[n] for n in ("wg", "wu", "wd", *CONSTS)}
    t.update({s: np.array([float(scales[li][s]) for li in range(L)], np.float64) for s in SCALES})
    ip = from_tensors(t, mc.n_heads, mc.head_dim)
    for li in range(L):
        ref = quantize_layer_scales(model.layers[li].mlp, ip.layers[li].scales)
        for name in ("wg", "wu", "wd", *CONSTS):
            got = getattr(ip.layers[li], name) if name in ("wg", "wu", "wd") else ip.layers[li].consts[name]
            want = getattr(ref, name) if name in ("wg", "wu", "wd") else ref.consts[name]
            if not np.array_equal(np.asarray(got), np.asarray(want)):
                raise Int8Error(f"{where / (name + '.npy')}: field '{name}' of layer {li} does not follow "
                                "from the model's weights and the manifest's scales")
    return ip
