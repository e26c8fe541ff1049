"""The integer path: the accelerator's golden model, calibrated from a trained model.

:func:`calibrate` runs the float model on calibration prompts and fixes, per layer, the int8
scales of the MLP input, gate, up, SiLU output, gated product, MLP output, and of ``q`` and the
previous frame's ``k`` for the temporal attention score. It quantises the MLP weights per output
channel and turns every scale ratio into the integer ``(mult, shift)`` constants of
``sw/spec/quant.py``. The result, :class:`IntegerPath`, computes the MLP and the replay decision with
integer arithmetic only (:func:`sw.spec.quant.swiglu_int8`, :func:`sw.spec.quant.tas_int`); floating point
appears only where a float activation enters (quantisation of ``x``, ``q``, ``k``) and where the
int8 result leaves (``y_q * s_y``).

:meth:`IntegerPath.install` plugs it into a :class:`sw.model.decoder.Decoder`, so that generation runs
with the integer MLP and integer replay decisions, exactly as the accelerator would.

The shipped model's constants are stored (:mod:`sw.golden.int8`, ``int8.safetensors``) rather than
recalibrated by every export: ``python -m sw.golden --calibrate`` writes a new file from a float64
calibration, ``python -m sw.golden --from-trace DIR`` takes the constants of a decode trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from sw.golden.integer_path import IntegerPath, LayerInt, quantize_layer, quantize_layer_scales
from sw.spec import quant

__all__ = ["IntegerPath", "LayerInt", "quantize_layer", "quantize_layer_scales", "calibrate", "use_float64",
           "calibrate_default", "calibration_prompts", "integer_constants", "display_path",
           "integer_vs_float", "main"]


def calibrate(model, prompt_tokens: torch.Tensor, frames: int, *, seed: int = 0, cfg_scale=None,
              uncond_prompt_tokens=None, progress: bool = False) -> IntegerPath:
    """Run a dense float rollout and take per-layer maxima of every quantised quantity."""
    from sw.model.decoder import generate

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
CALIBRATION = {"prompts": "sw.trace.export.calibration_prompts()", "frames": 8, "seed": 0, "cfg_scale": 1.5,
               "statistic": "max |value| per layer over a dense rollout, mapped to 127"}


def calibrate_default(ckpt, *, dtype=torch.float64) -> tuple[IntegerPath, dict]:
    """Calibrate ``ckpt``'s model as the shipped constants are calibrated; returns the integer path
    and the provenance record stored with it. The model is cast to ``dtype`` (float64: see
    :func:`use_float64`)."""

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


def calibration_prompts(n: int = 8, seed: int = 1234) -> list[str]:
    """A fixed set of training-split prompts for calibrating the integer path (none of the defaults,
    none held out)."""
    from sw.model import data

    pool = [p for p in data.train_prompts() if p not in data.DEFAULT_PROMPTS]
    rng = np.random.default_rng(seed)
    return [str(p) for p in rng.choice(pool, size=n, replace=False)]


def display_path(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it (stable across clones)."""
    repo = Path(__file__).resolve().parents[2]
    try:
        return str(Path(path).resolve().relative_to(repo))
    except ValueError:
        return str(path)


def integer_constants(ckpt, *, int8_file=None, recalibrate: bool = False, dtype=None):
    """The integer path for an export, and the manifest's record of where it came from.

    By default the stored constants ``CHECKPOINT/int8.safetensors`` (:mod:`sw.golden.int8`); a checkpoint
    without that file, or ``recalibrate``, calibrates from the float model instead (in ``dtype``,
    default float64), in memory only.
    """
    from sw.golden import int8

    path = Path(int8_file) if int8_file is not None else ckpt.path / int8.FILE_NAME
    if recalibrate or (int8_file is None and not path.exists()):
        ip, prov = calibrate_default(ckpt, dtype=dtype or torch.float64)
        why = "--recalibrate" if recalibrate else f"no {int8.FILE_NAME} in the checkpoint"
        return ip, {"file": None, "calibrated_at_export": why, "calibration": prov}
    ip, meta = int8.load_for_checkpoint(path, ckpt)
    return ip, {"file": display_path(path), "sha256": int8.file_sha256(path), "source": meta["source"],
                "calibration": meta["calibration"]}


def integer_vs_float(ckpt, prompts, *, frames: int = 8, cfg_scale: float = 1.5, seed: int = 0,
                     calibration=None) -> dict:
    """Generate the same prompts (same sampling seed) with the float MLP and with the integer path;
    report token agreement, PSNR of the decoded frames and prompt following of both."""
    from sw.model.decoder import generate

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
    return compare_rollouts(ckpt, prompts, f_tok, i_tok)


def compare_rollouts(ckpt, prompts, f_tok, i_tok) -> dict:
    """Token agreement, PSNR of the decoded videos and prompt following (``sw.model.data.describe_clip``)
    of a float rollout ``f_tok`` against an integer one ``i_tok`` of the same ``prompts``."""
    from sw.model import data
    from sw.model.tokenizer import psnr

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

    return {"token_agreement": float((f_tok == i_tok).float().mean()),
            "psnr_db": float(psnr(np.stack(f_vid), np.stack(i_vid))),
            "prompt_following_float": follows(f_vid), "prompt_following_integer": follows(i_vid)}


def main(argv=None) -> int:
    import argparse
    import json
    import sys
    from pathlib import Path

    from sw.atomic import OutputExistsError
    from sw.golden import int8
    from sw.model import data
    from sw.model.checkpoint import DEFAULT_CHECKPOINT, CheckpointError, load_checkpoint
    from sw.trace.format import TraceError

    ap = argparse.ArgumentParser(prog="python -m sw.golden",
                                 description="Integer path against float on the shipped model; with "
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
                from sw.trace.decode import load_decode_trace

                tr = load_decode_trace(args.from_trace)
                ip = int8.from_trace(tr, ckpt.model)
                # A trace names its constants' calibration; older traces (before stored constants)
                # were calibrated at export, in float32, as CALIBRATION describes.
                known = (tr.manifest.get("integer_constants") or {}).get("calibration")
                prov = dict(known) if isinstance(known, dict) else {
                    **CALIBRATION, "prompts": tr.manifest.get("calibration_prompts"), "dtype": "float32"}
                man_sha = int8.file_sha256(args.from_trace / "manifest.json")
                prov["extracted_from"] = {"trace": display_path(args.from_trace), "manifest_sha256": man_sha,
                                          "trace_source": tr.manifest.get("source")}
                source = (f"python -m sw.golden --from-trace {display_path(args.from_trace)} "
                          f"(checkpoint {ckpt.path.name})")
            int8.save_int8(out, ip, model_sha256=model_sha, source=source, calibration=prov, force=args.force)
        except (int8.Int8Error, CheckpointError, TraceError, OutputExistsError, quant.QuantError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        print(f"wrote {out}: {len(ip.layers)} layers, sha256 {int8.file_sha256(out)}")
        return 0
    held = data.heldout_prompts()
    if not 1 <= args.prompts <= len(held):
        ap.error(f"--prompts must be in [1, {len(held)}] (the compositional held-out prompts)")
    prompts = held[:args.prompts]

    res = integer_vs_float(load_checkpoint(args.checkpoint), prompts, calibration=calibration_prompts())
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that sw.golden.int8 and this command share one IntegerPath class.
    from sw.golden.calibrate import main as _main

    raise SystemExit(_main())
