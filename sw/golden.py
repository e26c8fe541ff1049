"""The integer path: the accelerator's golden model, calibrated from a trained model.

:func:`calibrate` runs the float model on calibration prompts and fixes, per layer, the int8
scales of the MLP input, gate, up, SiLU output, gated product, MLP output, and of ``q`` and the
previous frame's ``k`` for the temporal attention score. It quantises the MLP weights per output
channel and turns every scale ratio into the integer ``(mult, shift)`` constants of
``sw/quant.py``. The result, :class:`IntegerPath`, computes the MLP and the replay decision with
integer arithmetic only (:func:`sw.quant.swiglu_int8`, :func:`sw.quant.tas_int`); floating point
appears only where a float activation enters (quantisation of ``x``, ``q``, ``k``) and where the
int8 result leaves (``y_q * s_y``).

:meth:`IntegerPath.install` plugs it into a :class:`sw.model.Decoder`, so that generation runs
with the integer MLP and integer replay decisions, exactly as the accelerator would.

The shipped model's constants are stored (:mod:`sw.int8`, ``int8.safetensors``) rather than
recalibrated by every export: ``python -m sw.golden --calibrate`` writes a new file from a float64
calibration, ``python -m sw.golden --from-trace DIR`` takes the constants of a decode trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from sw import quant


@dataclass
class LayerInt:
    """Integer constants of one layer (plus the float scales they came from)."""

    wg: np.ndarray              # int8 [d, d_ff]
    wu: np.ndarray              # int8 [d, d_ff]
    wd: np.ndarray              # int8 [d_ff, d]
    consts: dict                # mult_*/shift_* and lut, as sw.quant.swiglu_int8 wants them
    scales: dict = field(default_factory=dict)   # s_x, s_gate, s_up, s_act, s_h, s_y, s_q, s_k


def _scale(amax: float) -> float:
    return float(amax) / quant.INT8_MAX if amax > 0 else 1.0


def _mult_shift(scale):
    mult, shift = quant.scale_to_mult_shift(scale)
    return mult, shift


def quantize_layer(mlp, amax: dict) -> LayerInt:
    """Integer constants for one SwiGLU MLP (``nn.Module`` with gate/up/down projections), from the
    calibration maxima ``amax`` of x, gate, up, act, h, y, q and k."""
    return quantize_layer_scales(mlp, {f"s_{k}": _scale(amax[k]) for k in ("x", "gate", "up", "act", "h", "y",
                                                                         "q", "k")})


def quantize_layer_scales(mlp, scales: dict) -> LayerInt:
    """Integer constants for one SwiGLU MLP from its activation scales ``s_x .. s_k``.

    Everything here is deterministic IEEE arithmetic (weight maxima, divisions, rounding) except the
    SiLU table, which calls ``exp``; the constants are stored (:mod:`sw.int8`) rather than rebuilt.
    """
    wg_f = mlp.gate_proj.weight.detach().double().numpy().T       # [d, d_ff]
    wu_f = mlp.up_proj.weight.detach().double().numpy().T
    wd_f = mlp.down_proj.weight.detach().double().numpy().T       # [d_ff, d]
    wg, s_wg = quant.quantize_weight(wg_f)
    wu, s_wu = quant.quantize_weight(wu_f)
    wd, s_wd = quant.quantize_weight(wd_f)
    s = {k: float(scales[f"s_{k}"]) for k in ("x", "gate", "up", "act", "h", "y", "q", "k")}
    mult_g, shift_g = _mult_shift(s["x"] * s_wg / s["gate"])
    mult_u, shift_u = _mult_shift(s["x"] * s_wu / s["up"])
    mult_h, shift_h = _mult_shift(s["act"] * s["up"] / s["h"])
    mult_d, shift_d = _mult_shift(s["h"] * s_wd / s["y"])
    consts = {
        "mult_g": mult_g, "shift_g": shift_g, "mult_u": mult_u, "shift_u": shift_u,
        "lut": quant.silu_lut(s["gate"], s["act"]),
        "mult_h": mult_h[0], "shift_h": shift_h[0],
        "mult_d": mult_d, "shift_d": shift_d,
    }
    return LayerInt(wg=wg, wu=wu, wd=wd, consts=consts, scales={f"s_{k}": v for k, v in s.items()})


class IntegerPath:
    """Integer MLP and integer TAS for every layer of a model.

    Parameters
    ----------
    layers : list of LayerInt
    n_heads, head_dim : int
        Attention geometry (for the TAS threshold).
    """

    def __init__(self, layers: list[LayerInt], n_heads: int, head_dim: int):
        self.layers = layers
        self.n_heads = n_heads
        self.head_dim = head_dim

    # -- the MLP ------------------------------------------------------------------------------
    def quantize_x(self, layer: int, x) -> np.ndarray:
        return quant.quantize_activation(np.asarray(x, dtype=np.float64), self.layers[layer].scales["s_x"])

    def mlp_int(self, layer: int, x_q) -> np.ndarray:
        """int8 [rows, d] -> int8 [rows, d]."""
        L = self.layers[layer]
        return quant.swiglu_int8(x_q, L.wg, L.wu, L.wd, L.consts)

    def mlp(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """Float in, float out, integer inside: the MLP override for :class:`sw.model.Decoder`."""
        y_q = self.mlp_int(layer, self.quantize_x(layer, x.detach().cpu().numpy()))
        if x.dtype == torch.float64:
            return torch.from_numpy(y_q.astype(np.float64) * self.layers[layer].scales["s_y"])
        return torch.from_numpy(y_q.astype(np.float32) * np.float32(self.layers[layer].scales["s_y"]))

    # -- the temporal attention score ---------------------------------------------------------
    def quantize_qk(self, layer: int, q, k_prev) -> tuple[np.ndarray, np.ndarray]:
        s = self.layers[layer].scales
        return (quant.quantize_activation(np.asarray(q, dtype=np.float64), s["s_q"]),
                quant.quantize_activation(np.asarray(k_prev, dtype=np.float64), s["s_k"]))

    def threshold(self, layer: int, tau: float, *, strict: bool = False) -> int:
        s = self.layers[layer].scales
        return quant.tas_threshold(tau, s["s_q"], s["s_k"], self.n_heads, self.head_dim, strict=strict)

    def tas_int(self, layer: int, q, k_prev) -> np.ndarray:
        q_q, k_q = self.quantize_qk(layer, q, k_prev)
        return quant.tas_int(q_q, k_q)

    # -- plugging into the model --------------------------------------------------------------
    def install(self, model, *, replay: bool = True) -> None:
        """Use the integer MLP (and, if ``replay``, integer replay decisions) in ``model``."""
        model.set_mlp_override(self.mlp)
        if replay:
            model.set_replay_rule(self.replay_rule)

    def replay_rule(self, layer: int, q: torch.Tensor, k_prev: torch.Tensor, tau: float,
                    strict: bool) -> torch.Tensor:
        """Integer replay decision: ``tas_int(q_q, k_q) >= T(tau)``."""
        score = self.tas_int(layer, q.detach().cpu().numpy(), k_prev.detach().cpu().numpy())
        th = self.threshold(layer, tau, strict=strict)
        return torch.from_numpy(quant.replay_decision(score, th))


def calibrate(model, prompt_tokens: torch.Tensor, frames: int, *, seed: int = 0, cfg_scale=None,
              uncond_prompt_tokens=None, progress: bool = False) -> IntegerPath:
    """Run a dense float rollout and take per-layer maxima of every quantised quantity."""
    from sw.model import generate

    n_layers = model.config.n_layers
    amax = [dict.fromkeys(("x", "gate", "up", "act", "h", "y", "q", "k"), 0.0) for _ in range(n_layers)]

    def upd(li, key, t):
        amax[li][key] = max(amax[li][key], float(t.abs().max()))

    def recorder(rec):
        li = rec.layer
        mlp = model.layers[li].mlp
        x = rec.x
        gate = mlp.gate_proj(x)
        up = mlp.up_proj(x)
        act = torch.nn.functional.silu(gate)
        upd(li, "x", x)
        upd(li, "gate", gate)
        upd(li, "up", up)
        upd(li, "act", act)
        upd(li, "h", act * up)
        upd(li, "y", rec.mlp_out)
        if rec.q is not None:
            upd(li, "q", rec.q)
            upd(li, "k", rec.k_prev)

    with torch.no_grad():
        generate(model, prompt_tokens, frames, seed=seed, cfg_scale=cfg_scale,
                 uncond_prompt_tokens=uncond_prompt_tokens, recorder=recorder, progress=progress)
        layers = [quantize_layer(model.layers[li].mlp, amax[li]) for li in range(n_layers)]
    return IntegerPath(layers, model.config.n_heads, model.config.head_dim)


def use_float64(model) -> None:
    """Cast ``model`` to float64 in place, RoPE tables included (computed by scalar ``math``).

    The trace export runs its float rollout this way: the rounding differences of float kernels
    between CPUs (instruction sets, thread counts) are about 1e-16 relative in float64, far below
    the distance of any quantised value from a rounding boundary (``docs/quantization.md``).
    """
    model.double()
    model.set_max_seq_len(model.config.max_seq_len)


#: How the shipped constants are calibrated (the defaults of :func:`calibrate_default`).
CALIBRATION = {"prompts": "sw.export_trace.calibration_prompts()", "frames": 8, "seed": 0, "cfg_scale": 1.5,
               "statistic": "max |value| per layer over a dense rollout, mapped to 127"}


def calibrate_default(ckpt, *, dtype=torch.float64) -> tuple[IntegerPath, dict]:
    """Calibrate ``ckpt``'s model as the shipped constants are calibrated; returns the integer path
    and the provenance record stored with it. The model is cast to ``dtype`` (float64: see
    :func:`use_float64`)."""
    from sw.export_trace import calibration_prompts

    model = ckpt.model
    if dtype == torch.float64:
        use_float64(model)
    frames = CALIBRATION["frames"]
    model.set_max_seq_len(max(model.config.max_seq_len,
                              ckpt.layout.prompt_len + frames * ckpt.layout.tokens_per_frame))
    prompts = calibration_prompts()
    cond, uncond = ckpt.layout.prompt_batch(prompts)
    ip = calibrate(model, cond, frames, seed=CALIBRATION["seed"], cfg_scale=CALIBRATION["cfg_scale"],
                   uncond_prompt_tokens=uncond)
    prov = {**CALIBRATION, "prompts": prompts, "dtype": str(dtype).removeprefix("torch."),
            "torch": torch.__version__}
    return ip, prov


def integer_vs_float(ckpt, prompts, *, frames: int = 8, cfg_scale: float = 1.5, seed: int = 0,
                     calibration=None) -> dict:
    """Generate the same prompts (same sampling seed) with the float MLP and with the integer path;
    report token agreement, PSNR of the decoded frames and prompt following of both."""
    from sw import data
    from sw.model import generate

    lay, model = ckpt.layout, ckpt.model

    cal_c, cal_u = lay.prompt_batch(calibration or prompts)
    ip = calibrate(model, cal_c, frames, seed=seed, cfg_scale=cfg_scale, uncond_prompt_tokens=cal_u)
    cond, uncond = lay.prompt_batch(prompts)
    with torch.no_grad():
        f_tok, _ = generate(model, cond, frames, seed=seed, cfg_scale=cfg_scale, uncond_prompt_tokens=uncond,
                            progress=False)
        ip.install(model, replay=False)
        try:
            i_tok, _ = generate(model, cond, frames, seed=seed, cfg_scale=cfg_scale,
                                uncond_prompt_tokens=uncond, progress=False)
        finally:
            model.set_mlp_override(None)
    f_vid = [ckpt.tokenizer.decode(t.numpy()) for t in f_tok]
    i_vid = [ckpt.tokenizer.decode(t.numpy()) for t in i_tok]

    def follows(vids):
        ok = 0
        for v, p in zip(vids, prompts, strict=True):
            try:
                ok += data.describe_clip(v)["prompt"] == p
            except Exception:
                pass
        return ok / len(prompts)

    from sw.tokenizer import psnr

    return {"token_agreement": float((f_tok == i_tok).float().mean()),
            "psnr_db": float(psnr(np.stack(f_vid), np.stack(i_vid))),
            "prompt_following_float": follows(f_vid), "prompt_following_integer": follows(i_vid)}


def main(argv=None) -> int:
    import argparse
    import json
    import sys
    from pathlib import Path

    from sw import data, int8
    from sw.atomic import OutputExistsError
    from sw.checkpoint import DEFAULT_CHECKPOINT, CheckpointError, load_checkpoint
    from sw.trace import TraceError

    ap = argparse.ArgumentParser(description="Integer path against float on the shipped model; with "
                                 "--calibrate or --from-trace, write the stored integer constants instead.")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--prompts", type=int, default=12, help="number of evaluation prompts")
    ap.add_argument("--calibrate", action="store_true",
                    help=f"calibrate (float64 rollout) and write the constants to --out "
                         f"(default: CHECKPOINT/{int8.FILE_NAME})")
    ap.add_argument("--from-trace", type=Path, default=None, metavar="DIR",
                    help="write the constants of the decode trace DIR (checked against the model) to --out")
    ap.add_argument("--out", type=Path, default=None,
                    help=f"constants file (default: CHECKPOINT/{int8.FILE_NAME})")
    ap.add_argument("--force", action="store_true", help="overwrite an existing constants file")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.calibrate or args.from_trace is not None:
        try:
            if args.calibrate and args.from_trace is not None:
                raise int8.Int8Error("--calibrate and --from-trace: give one of them")
            out = args.out or args.checkpoint / int8.FILE_NAME
            if out.exists() and not args.force:
                raise OutputExistsError(f"{out}: already exists; pass --force to overwrite")
            ckpt = load_checkpoint(args.checkpoint)
            model_sha = int8.file_sha256(ckpt.path / "model.safetensors")
            if args.calibrate:
                ip, prov = calibrate_default(ckpt)
                source = f"python -m sw.golden --calibrate (checkpoint {ckpt.path.name})"
            else:
                from sw.decode_trace import load_decode_trace
                from sw.export_trace import _display_path

                tr = load_decode_trace(args.from_trace)
                ip = int8.from_trace(tr, ckpt.model)
                # A trace names its constants' calibration; older traces (before stored constants)
                # were calibrated at export, in float32, as CALIBRATION describes.
                known = (tr.manifest.get("integer_constants") or {}).get("calibration")
                prov = dict(known) if isinstance(known, dict) else {
                    **CALIBRATION, "prompts": tr.manifest.get("calibration_prompts"), "dtype": "float32"}
                man_sha = int8.file_sha256(args.from_trace / "manifest.json")
                prov["extracted_from"] = {"trace": _display_path(args.from_trace), "manifest_sha256": man_sha,
                                          "trace_source": tr.manifest.get("source")}
                source = (f"python -m sw.golden --from-trace {_display_path(args.from_trace)} "
                          f"(checkpoint {ckpt.path.name})")
            int8.save_int8(out, ip, model_sha256=model_sha, source=source, calibration=prov, force=args.force)
        except (int8.Int8Error, CheckpointError, TraceError, OutputExistsError, quant.QuantError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"wrote {out}: {len(ip.layers)} layers, sha256 {int8.file_sha256(out)}")
        return 0
    rng = np.random.default_rng(7)
    prompts = [str(p) for p in rng.choice(data.all_prompts(), size=args.prompts, replace=False)]
    from sw.export_trace import calibration_prompts

    res = integer_vs_float(load_checkpoint(args.checkpoint), prompts, calibration=calibration_prompts())
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that sw.int8 and this command share one IntegerPath class.
    from sw.golden import main as _main

    raise SystemExit(_main())
