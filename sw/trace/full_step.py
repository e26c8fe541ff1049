"""Full-step traces (``kind: "fastcar_full_step"``): the whole decode step in integers, block by block.

``python sw/export_trace.py --full-step`` runs the integer golden model of the whole step
(:mod:`sw.golden.step`) on the prompts and writes, for every decode step (prompt positions
included) and layer, the residual stream in, after attention and out, q/k/v after RoPE, the
attention output, the MLP input, TAS, the replay decisions and the MLP output; per step the token
fed in and the LM head's int32 logits; per sampled token the sampler's Q16 logits after guidance
and the token it drew (the on-chip integer sampler, :class:`sw.golden.sampling.IntegerSampler`);
and every integer constant. ``python -m sw.trace DIR`` verifies it by running the golden model
again from the stored constants, prompt and generator states and comparing every stored value.
Format: ``golden/README.md``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sw.atomic import atomic_dir
from sw.spec import quant
from sw.trace.format import FORMAT, MANIFEST, TraceError, load_tensor, read_manifest

KIND = "fastcar_full_step"
VERSION = 2
LAYER_NAMES = ("n1_mult", "n1_shift", "wq", "wk", "wv", "q_mult", "q_shift", "k_mult", "k_shift",
               "v_mult", "v_shift", "a_exp", "a_mult", "a_shift", "wo", "o_mult", "o_shift", "n2_mult",
               "n2_shift", "y_mult", "y_shift", "threshold", "wg", "wu", "wd", "mult_g", "shift_g", "mult_u",
               "shift_u", "lut", "mult_h", "shift_h", "mult_d", "shift_d")
MLP_NAMES = ("wg", "wu", "wd", "mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h", "mult_d",
             "shift_d")
DIMS = ("layers", "steps", "batch", "d_model", "d_ff", "n_heads", "head_dim", "vocab", "tokens_per_frame",
        "positions", "prompts", "samples", "codebook")
STEP_NAMES = ("r_in", "q", "k", "v", "attn", "r_mid", "m", "tas", "replay", "y", "r_out")


def tensor_specs(m: dict) -> dict:
    """name -> (dtype, shape) from the manifest's ``dims``."""
    L, S, B, d, f, H, dh, V, N, P, PR, NS, C = (m[k] for k in DIMS)
    u16, u8 = "uint16", "uint8"
    return {
        "emb": ("int32", (V, d)), "spatial": ("int32", (N, d)), "rope_c": ("int16", (P, dh // 2)),
        "rope_s": ("int16", (P, dh // 2)), "exp_table": ("int32", (256,)),
        "nf_mult": (u16, (d,)), "nf_shift": (u8, (d,)), "head": ("int8", (d, V)),
        "n1_mult": (u16, (L, d)), "n1_shift": (u8, (L, d)),
        **{w: ("int8", (L, d, d)) for w in ("wq", "wk", "wv", "wo")},
        "q_mult": (u16, (L, d)), "q_shift": (u8, (L, d)), "k_mult": (u16, (L, d)), "k_shift": (u8, (L, d)),
        "v_mult": (u16, (L, d)), "v_shift": (u8, (L, d)), "o_mult": (u16, (L, d)), "o_shift": (u8, (L, d)),
        "a_exp": ("int64", (L,)), "a_mult": (u16, (L,)), "a_shift": (u8, (L,)),
        "n2_mult": (u16, (L, d)), "n2_shift": (u8, (L, d)), "y_mult": (u16, (L,)), "y_shift": (u8, (L,)),
        "threshold": ("int64", (L,)),
        "wg": ("int8", (L, d, f)), "wu": ("int8", (L, d, f)), "wd": ("int8", (L, f, d)),
        "mult_g": (u16, (L, f)), "shift_g": (u8, (L, f)), "mult_u": (u16, (L, f)), "shift_u": (u8, (L, f)),
        "lut": ("int8", (L, 256)), "mult_h": (u16, (L,)), "shift_h": (u8, (L,)),
        "mult_d": (u16, (L, d)), "shift_d": (u8, (L, d)),
        "token": ("int64", (S, B)), "logits": ("int32", (S, B, V)),
        "logit_mult": (u16, (C,)), "logit_shift": (u8, (C,)), "sampler_state": ("uint32", (PR,)),
        "sample_z": ("int32", (NS, PR, C)), "sample_token": ("int64", (NS, PR)),
        "r_in": ("int32", (S, L, B, d)), "r_mid": ("int32", (S, L, B, d)), "r_out": ("int32", (S, L, B, d)),
        "q": ("int8", (S, L, B, H, dh)), "k": ("int8", (S, L, B, H, dh)), "v": ("int8", (S, L, B, H, dh)),
        "attn": ("int8", (S, L, B, d)), "m": ("int8", (S, L, B, d)), "tas": ("int64", (S, L, B)),
        "replay": ("uint8", (S, L, B)), "y": ("int8", (S, L, B, d)),
    }


def _tensors_of(consts, thresholds, records, sampler) -> dict:
    c = consts
    t = {"emb": c.emb.astype(np.int32), "spatial": (c.spatial if c.spatial is not None
                                                    else np.zeros((0, c.emb.shape[1]))).astype(np.int32),
         "rope_c": c.rope_c, "rope_s": c.rope_s, "exp_table": c.exp_table.astype(np.int32),
         "nf_mult": c.nf[0], "nf_shift": c.nf[1], "head": c.head,
         "threshold": np.asarray(thresholds, np.int64)}
    per = {n: [] for n in LAYER_NAMES if n != "threshold"}
    for L in c.layers:
        vals = {"n1_mult": L.n1[0], "n1_shift": L.n1[1], "wq": L.wq, "wk": L.wk, "wv": L.wv,
                "q_mult": L.q[0], "q_shift": L.q[1], "k_mult": L.k[0], "k_shift": L.k[1], "v_mult": L.v[0],
                "v_shift": L.v[1], "a_exp": L.a_exp, "a_mult": L.a_out[0], "a_shift": L.a_out[1], "wo": L.wo,
                "o_mult": L.o[0], "o_shift": L.o[1], "n2_mult": L.n2[0], "n2_shift": L.n2[1],
                "y_mult": L.y[0], "y_shift": L.y[1], **{k: L.mlp[k] for k in MLP_NAMES}}
        for n in per:
            per[n].append(np.asarray(vals[n]))
    t.update({n: np.stack(v) for n, v in per.items()})
    t["token"] = np.stack([r["token"] for r in records])
    t["logits"] = np.stack([r["logits"] for r in records]).astype(np.int32)
    for n in STEP_NAMES:
        t[n] = np.stack([np.stack(r[n]) for r in records])
    t["q"], t["k"], t["v"] = (t[n].astype(np.int8) for n in ("q", "k", "v"))
    t["logit_mult"], t["logit_shift"] = sampler.mult, sampler.shift
    t["sampler_state"] = np.asarray(sampler.first_state, np.uint32)
    t["sample_z"] = np.stack([r["z"] for r in sampler.record])
    t["sample_token"] = np.stack([r["token"] for r in sampler.record])
    return t


def consts_from(t: dict, eps: int, s_r: float):
    """:class:`sw.golden.step.StepConsts` from a trace's tensors."""
    from sw.golden.step import LayerConsts, StepConsts

    layers = []
    for li in range(t["wq"].shape[0]):
        g = {n: t[n][li] for n in LAYER_NAMES}
        layers.append(LayerConsts(
            n1=(g["n1_mult"], g["n1_shift"]), wq=g["wq"], wk=g["wk"], wv=g["wv"],
            q=(g["q_mult"], g["q_shift"]),
            k=(g["k_mult"], g["k_shift"]), v=(g["v_mult"], g["v_shift"]), a_exp=int(g["a_exp"]),
            a_out=(int(g["a_mult"]), int(g["a_shift"])), wo=g["wo"], o=(g["o_mult"], g["o_shift"]),
            n2=(g["n2_mult"], g["n2_shift"]), y=(int(g["y_mult"]), int(g["y_shift"])),
            mlp={k: g[k] for k in MLP_NAMES}))
    spatial = t["spatial"].astype(np.int64) if t["spatial"].size else None
    return StepConsts(s_r=s_r, eps=eps, emb=t["emb"].astype(np.int64), spatial=spatial, layers=layers,
                      nf=(t["nf_mult"], t["nf_shift"]), head=t["head"], head_scale=None,
                      rope_c=t["rope_c"], rope_s=t["rope_s"], exp_table=t["exp_table"])


def _run(config, consts, thresholds, prompt_rows, frames, *, seed, cfg_scale, fastcar, sparse, logit=None):
    """The golden model's generation with recording and the integer sampler (its constants from
    ``consts.head_scale``, or the stored ``logit=(mult, shift)``); returns (records, tokens, sampler)."""
    import torch

    from sw.golden.step import IntegerDecoder, integer_sampler
    from sw.model.decoder import generate

    records = []
    dec = IntegerDecoder(config, consts, thresholds, record=records, integer_logits=True)
    B = prompt_rows.shape[0]
    cond = prompt_rows[: B // 2] if cfg_scale else prompt_rows
    uncond = prompt_rows[B // 2:] if cfg_scale else None
    sampler = integer_sampler(config, consts, seed=seed, batch=len(cond), cfg_scale=cfg_scale, record=[],
                              logit=logit)
    with torch.no_grad():
        tokens, _ = generate(dec, torch.as_tensor(cond), frames, seed=seed, cfg_scale=cfg_scale,
                             uncond_prompt_tokens=None if uncond is None else torch.as_tensor(uncond),
                             fastcar=fastcar, sparse=sparse, progress=False, sampler=sampler)
    return records, tokens, sampler


def export_full_step(out, *, checkpoint=None, prompts=None, frames: int = 8, tau=None, sinks=None,
                     window=None, cfg_scale: float | None = 1.5, seed: int = 0, force: bool = False) -> dict:
    """Calibrate the whole step, generate with it and write the trace (atomically). ``tau``: the
    FastCar threshold, one for every layer or a list of one per layer (``None``: the default
    operating point's, ``sw.model.fastcar.DEFAULT_TAU``)."""
    from sw.model.fastcar import DEFAULT_TAU

    tau = DEFAULT_TAU if tau is None else tau
    from sw.budget import check_decode_trace
    from sw.golden.calibrate import calibration_prompts, integer_constants
    from sw.golden.step import calibrate_step
    from sw.model import data
    from sw.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
    from sw.model.fastcar import FastCarConfig, SparseConfig

    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise TraceError(f"{out}: already exists and is not empty; pass --force to overwrite")
    prompts = list(prompts or data.DEFAULT_PROMPTS[:2])
    ckpt = load_checkpoint(checkpoint or DEFAULT_CHECKPOINT)
    mc, lay = ckpt.model.config, ckpt.layout
    B = len(prompts) * (2 if cfg_scale else 1)
    check_decode_trace(mc, lay, out, batch=B, frames=frames)
    ckpt.model.set_max_seq_len(max(mc.max_seq_len, lay.prompt_len + frames * lay.tokens_per_frame))
    mc = ckpt.model.config
    ip, _ = integer_constants(ckpt)
    cal_c, cal_u = lay.prompt_batch(calibration_prompts())
    consts = calibrate_step(ckpt.model, ip, cal_c, min(frames, 8), uncond=cal_u, cfg_scale=cfg_scale or 1.5)
    fastcar = FastCarConfig(tau=list(tau) if isinstance(tau, (list, tuple)) else tau) if tau is not None else None
    sparse = SparseConfig(sinks=sinks or 0, window=window) if window is not None else None
    taus = fastcar.layer_taus(mc.n_layers) if fastcar is not None else None
    th = [ip.threshold(li, float(taus[li]), strict=False) if tau is not None else 2**31
          for li in range(mc.n_layers)]
    cond, uncond = lay.prompt_batch(prompts)
    rows = np.concatenate([cond.numpy(), uncond.numpy()]) if cfg_scale else cond.numpy()
    records, tokens, sampler = _run(mc, consts, th, rows, frames, seed=seed, cfg_scale=cfg_scale,
                                    fastcar=fastcar, sparse=sparse)
    t = _tensors_of(consts, th, records, sampler)
    dims = dict(zip(DIMS, (mc.n_layers, len(records), B, mc.d_model, mc.d_ff, mc.n_heads, mc.head_dim,
                           mc.vocab_size, mc.tokens_per_frame, int(consts.rope_c.shape[0]), len(prompts),
                           frames * mc.tokens_per_frame, mc.codebook_size), strict=True))
    manifest = {"format": FORMAT, "version": VERSION, "kind": KIND,
                "source": f"python sw/export_trace.py --full-step (checkpoint {ckpt.path.name})",
                "model": mc.to_dict(), "dims": dims, "frames": frames, "prompt_len": lay.prompt_len,
                "image_token_offset": mc.image_token_offset, "codebook_size": mc.codebook_size,
                "decode": {"prompts": prompts, "cfg_scale": cfg_scale, "seed": seed, "tau": tau,
                           "sampler": "int", "temperature": 1.0,
                           "cfg_gain": None if cfg_scale is None else quant.cfg_gain(cfg_scale),
                           "strict": False, "refresh_every": None, "max_chain": None,
                           "sparse": None if sparse is None else {"sinks": sparse.sinks,
                                                                  "window": sparse.window}},
                "eps": consts.eps, "s_r": consts.s_r, "video_tokens": tokens.tolist()}
    write_full_step(out, manifest, t)
    return {"out": str(out), "steps": len(records), "batch": B}


def write_full_step(out, manifest: dict, t: dict) -> Path:
    specs = tensor_specs(manifest["dims"])
    with atomic_dir(Path(out), force=True) as tmp:
        entries = {}
        for name, (dtype, shape) in specs.items():
            arr = np.ascontiguousarray(np.asarray(t[name]).astype(dtype))
            if arr.shape != shape:
                raise TraceError(f"{out}: tensor '{name}' has shape {arr.shape}, expected {shape}")
            np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
            entries[name] = {"file": f"{name}.npy", "dtype": dtype, "shape": list(shape),
                             "sha256": hashlib.sha256((tmp / f"{name}.npy").read_bytes()).hexdigest()}
        (tmp / MANIFEST).write_text(json.dumps({**manifest, "tensors": entries}, indent=1) + "\n")
    return Path(out)


@dataclass
class FullStepTrace:
    path: Path
    manifest: dict
    t: dict


def load_full_step(d, *, verify: bool = True) -> FullStepTrace:
    d = Path(d)
    man = read_manifest(d, version=VERSION)
    if man.get("kind") != KIND:
        raise TraceError(f"{d / MANIFEST}: not a {KIND} trace (field 'kind' is {man.get('kind')!r})")
    dims = man.get("dims")
    keys = DIMS
    if not isinstance(dims, dict) or any(not isinstance(dims.get(k), int) or dims[k] < 1 for k in keys):
        raise TraceError(f"{d / MANIFEST}: field 'dims' needs positive integers {list(keys)}")
    t = {}
    for name, (dtype, shape) in tensor_specs(dims).items():
        ent = man.get("tensors", {}).get(name)
        want = ent.get("sha256", "") if verify and isinstance(ent, dict) else None
        arr = load_tensor(d, man, name, sha256=want)
        if str(arr.dtype) != dtype or arr.shape != shape:
            raise TraceError(f"{d / ent['file']}: field '{name}' is {arr.dtype} {list(arr.shape)}, "
                             f"expected {dtype} {list(shape)}")
        t[name] = arr
    return FullStepTrace(d, man, t)


def check_full_step(tr: FullStepTrace) -> str | None:
    """Run the golden model again from the trace's constants and prompt; the first stored value that
    differs, named by tensor, step and layer, or None."""
    from sw.model.decoder import ModelConfig
    from sw.model.fastcar import FastCarConfig, SparseConfig

    m, t = tr.manifest, tr.t
    mc = ModelConfig(**m["model"])
    dec = m["decode"]
    consts = consts_from(t, int(m["eps"]), float(m["s_r"]))
    prompt_len = int(m["prompt_len"])
    rows = t["token"][:prompt_len].T                                   # [B, prompt_len]
    fastcar = FastCarConfig(tau=dec["tau"]) if dec["tau"] is not None else None
    sparse = SparseConfig(**dec["sparse"]) if dec["sparse"] else None
    records, tokens, sampler = _run(mc, consts, t["threshold"], rows, int(m["frames"]), seed=dec["seed"],
                                    cfg_scale=dec["cfg_scale"], fastcar=fastcar, sparse=sparse,
                                    logit=(t["logit_mult"], t["logit_shift"]))
    if len(records) != t["token"].shape[0]:
        return f"{tr.path}: {len(records)} steps recomputed, {t['token'].shape[0]} stored"
    if [int(x) for x in t["sampler_state"]] != sampler.first_state:
        return (f"{tr.path / 'sampler_state.npy'}: stored {t['sampler_state'].tolist()}, the seed "
                f"{dec['seed']} gives {sampler.first_state}")
    got = _tensors_of(consts, t["threshold"], records, sampler)
    for name in ("token", *STEP_NAMES, "logits", "sample_z", "sample_token"):
        a, b = np.asarray(got[name]), t[name]
        if not np.array_equal(a.astype(b.dtype), b):
            idx = tuple(int(i) for i in np.argwhere(a.astype(b.dtype) != b)[0])
            if name.startswith("sample_"):
                where = f"sample {idx[0]}, prompt {idx[1]}"
            else:
                where = f"step {idx[0]}" + (f", layer {idx[1]}" if name in STEP_NAMES else "")
            return (f"{tr.path / (name + '.npy')}: {where}: stored {b[idx]}, the golden model gives "
                    f"{a.astype(b.dtype)[idx]}")
    return None
