"""Export golden traces: FastCar decode traces from the shipped model, whole-step traces, the corner trace.

With no arguments, ``python sw/export_trace.py`` loads the shipped model and its stored integer
constants (``int8.safetensors``, :mod:`sw.golden.int8`; ``--recalibrate`` calibrates them from the float
model instead, :mod:`sw.golden.calibrate`), generates the default prompts with FastCar replay decided and
computed by that integer path (exactly as the accelerator runs it) around a float64 rollout of the
rest of the model, and writes a decode trace (:mod:`sw.trace.decode`, format in
``golden/README.md``) to ``build/traces/fastcar``. With stored constants and float64 the trace
does not depend on the CPU's float kernels (``docs/quantization.md``, "What is reproducible across
machines"). ``nox -s sim`` checks the committed copy in ``golden/fastcar``;
``nox -s sim -- --trace build/traces/fastcar`` checks a fresh one.

Usage::

    python sw/export_trace.py                                   # decode trace of the shipped model
    python sw/export_trace.py --prompt "red square moves up" --tau -2 --frames 8 --out DIR --force
    python sw/export_trace.py --corners --out golden/corners --force   # the corner-case trace
    python sw/export_trace.py --corners --small --out golden/corners-small --force   # ... on SMALL_ACCEL
    python sw/export_trace.py --full-step                       # the whole step at the default point
    python sw/export_trace.py --full-step --point dense         # ... at the best dense design's

The decode trace is the MLP engine's: by default the shipped model at FastCar's engine threshold
(``sw.model.fastcar.DEFAULT_TAU``), where replay has work to skip. The full-step trace is the whole
decode step's: by default at the default operating point (:data:`sw.operating_point.DEFAULT`: its
checkpoint, threshold and sparse attention). ``--point default|dense`` starts either trace from that
operating point; ``--checkpoint``, ``--tau``, ``--sinks`` and ``--sparse-window`` override its parts.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from sw.config import ConfigError
from sw.golden.calibrate import integer_constants
from sw.model.fastcar import DEFAULT_TAU
from sw.spec import quant
from sw.trace.store import TraceError

#: Default batch: two prompts, each with its conditional and unconditional (CFG) row.
DEFAULT_EXPORT_PROMPTS = 2
DEFAULT_CFG = 1.5


def rollout(ckpt, ip, prompts, frames: int, *, fastcar, sparse=None, cfg_scale=DEFAULT_CFG, seed: int = 0,
            progress: bool = True):
    """Generate ``prompts`` with the integer MLP and integer replay decisions of ``ip`` installed,
    recording every layer at every decode step. Returns ``(records, tokens, stats)``, the records of
    frame tokens only."""
    import torch

    from sw.model.decoder import generate

    model, layout = ckpt.model, ckpt.layout
    cond, uncond = layout.prompt_batch(prompts)
    records = []
    ip.install(model)
    try:
        with torch.no_grad():
            tokens, stats = generate(model, cond, frames, seed=seed, cfg_scale=cfg_scale,
                                     uncond_prompt_tokens=uncond if cfg_scale else None, fastcar=fastcar,
                                     sparse=sparse, recorder=records.append, progress=progress)
    finally:
        model.set_mlp_override(None)
        model.set_replay_rule(None)
    return [r for r in records if r.frame is not None], tokens, stats


def export_decode_trace(out, *, checkpoint=None, prompts=None, frames: int = 8, tau=DEFAULT_TAU,
                        strict: bool = False, refresh_every=None, max_chain=None, sinks=None, window=None,
                        cfg_scale: float | None = DEFAULT_CFG, seed: int = 0, force: bool = False,
                        progress: bool = True, int8_file=None, recalibrate: bool = False,
                        dtype=None) -> dict:
    """Run the shipped model through the integer path with FastCar and write a decode trace.

    The integer constants come from the checkpoint's ``int8.safetensors`` (see
    :func:`integer_constants`); the float part of the rollout (attention, norms, sampling) runs in
    ``dtype``, float64 unless asked otherwise (float32 is for comparisons only: its last-bit
    differences between CPUs flip int8 roundings).
    """
    import torch

    from sw.golden.calibrate import use_float64
    from sw.model import data
    from sw.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
    from sw.model.fastcar import FastCarConfig, SparseConfig
    from sw.trace.decode import write_decode_trace

    dtype = dtype or torch.float64
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise TraceError(f"{out}: already exists and is not empty; pass --force to overwrite")
    prompts = list(prompts or data.DEFAULT_PROMPTS[:DEFAULT_EXPORT_PROMPTS])
    for p in prompts:
        data.encode_prompt(p)
    if frames < 2:
        raise TraceError(f"--frames must be at least 2 (frame 0 is never replayed), not {frames}")
    ckpt = load_checkpoint(checkpoint or DEFAULT_CHECKPOINT)
    model, layout, mc = ckpt.model, ckpt.layout, ckpt.model.config
    from sw.budget import check_decode_trace

    check_decode_trace(mc, layout, out, batch=len(prompts) * (2 if cfg_scale else 1), frames=frames,
                       float_bytes=torch.empty((), dtype=dtype).element_size())
    taus = [float(tau)] * mc.n_layers if np.isscalar(tau) else [float(t) for t in tau]
    if len(taus) != mc.n_layers:
        raise TraceError(f"--tau: {len(taus)} values for {mc.n_layers} layers")
    if any(np.isnan(t) for t in taus):
        raise TraceError("--tau: NaN is not a threshold")
    fastcar = FastCarConfig(tau=taus, strict=strict, refresh_every=refresh_every, max_chain=max_chain)
    sparse = SparseConfig(sinks=sinks or 0, window=window) if window is not None else None

    ip, constants = integer_constants(ckpt, int8_file=int8_file, recalibrate=recalibrate, dtype=dtype)
    if dtype == torch.float64:
        use_float64(model)
    model.set_max_seq_len(max(mc.max_seq_len, layout.prompt_len + frames * layout.tokens_per_frame))
    recs, tokens, stats = rollout(ckpt, ip, prompts, frames, fastcar=fastcar, sparse=sparse,
                                  cfg_scale=cfg_scale, seed=seed, progress=progress)

    G, B = len(recs), recs[0].x.shape[0]
    H, dh, d, f, L = mc.n_heads, mc.head_dim, mc.d_model, mc.d_ff, mc.n_layers
    t = {
        "group_layer": np.array([r.layer for r in recs], np.int16),
        "group_frame": np.array([r.frame for r in recs], np.int16),
        "group_index": np.array([r.index for r in recs], np.int16),
        "x": np.zeros((G, B, d), np.int8), "q": np.zeros((G, B, H, dh), np.int8),
        "k_prev": np.zeros((G, B, H, dh), np.int8), "tas": np.zeros((G, B), np.int64),
        "replay": np.zeros((G, B), np.uint8), "y": np.zeros((G, B, d), np.int8),
    }
    for g, r in enumerate(recs):
        li = r.layer
        t["x"][g] = ip.quantize_x(li, r.x.numpy())
        if r.q is not None:
            q_q, k_q = ip.quantize_qk(li, r.q.numpy(), r.k_prev.numpy())
            t["q"][g], t["k_prev"][g] = q_q, k_q
            t["tas"][g] = quant.tas_int(q_q, k_q)
        t["replay"][g] = r.replay.numpy()
        # The MLP output used is y_q * s_y (the integer path's, or the cached one): recover y_q.
        y = r.mlp_out.double().numpy() / ip.layers[li].scales["s_y"]
        if np.abs(y - np.rint(y)).max() > 1e-3:
            raise TraceError(f"layer {li}: MLP output is not an int8 multiple of s_y "
                             "(integer path not installed?)")
        t["y"][g] = np.rint(y).astype(np.int8)
    for name in ("wg", "wu", "wd"):
        t[name] = np.stack([getattr(Lr, name) for Lr in ip.layers])
    for name in ("mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h", "mult_d", "shift_d"):
        dtype_ = {"lut": np.int8}.get(name, np.uint16 if name.startswith("mult") else np.uint8)
        t[name] = np.stack([np.asarray(Lr.consts[name]) for Lr in ip.layers]).astype(dtype_)
    t["threshold"] = np.array([ip.threshold(li, taus[li], strict=strict) for li in range(L)], np.int64)

    ratio_layer = stats.replay_ratio_per_layer().tolist()
    manifest = {
        "source": f"python sw/export_trace.py (checkpoint {ckpt.path.name}, torch {torch.__version__})",
        "model": mc.to_dict(),
        "dims": {"layers": L, "groups": G, "batch": B, "d_model": d, "d_ff": f, "n_heads": H, "head_dim": dh},
        "layers": L, "frames": frames, "tokens_per_frame": mc.tokens_per_frame,
        "decode": {"prompts": prompts, "rows": ["cond", "uncond"] if cfg_scale else ["cond"],
                   "row_order": "conditional rows first, then unconditional", "cfg_scale": cfg_scale,
                   "seed": seed, "tau": taus, "strict": strict, "score": "logit",
                   "refresh_every": refresh_every, "max_chain": max_chain,
                   "sparse": None if sparse is None else {"sinks": sparse.sinks, "window": sparse.window},
                   "float_dtype": str(dtype).removeprefix("torch.")},
        "integer_constants": constants,
        "calibration_prompts": constants["calibration"].get("prompts"),
        "scales": [Lr.scales for Lr in ip.layers],
        "replay_ratio": float(stats.replay_ratio()),
        "replay_ratio_per_layer": [float(v) for v in ratio_layer],
        "video_tokens": tokens.tolist(),
    }
    write_decode_trace(out, manifest, t, force=force)
    return {"out": str(out), "groups": G, "batch": B, "replay_ratio": manifest["replay_ratio"],
            "replay_ratio_per_layer": manifest["replay_ratio_per_layer"],
            "integer_constants": constants["file"] or f"calibrated ({constants['calibrated_at_export']})"}


def apply_point(args) -> list[float]:
    """Fill the model flags that ``args`` leaves out from its operating point (``--point``; with
    ``--full-step`` the default point, else the MLP engine's trace: the shipped model at
    ``DEFAULT_TAU``). Returns the thresholds, one or one per layer."""
    taus = None
    if args.tau is not None:
        try:
            taus = [float(v) for v in args.tau.split(",")]
        except ValueError:
            raise TraceError(f"--tau: not a number or comma-separated numbers: {args.tau!r}") from None
    point = args.point or ("default" if args.full_step else None)
    if point is None:
        return taus or [DEFAULT_TAU]
    from sw import operating_point

    op = operating_point.DEFAULT if point == "default" else operating_point.DENSE
    if args.checkpoint is None:
        args.checkpoint = op.checkpoint_path
    if taus is None:
        tau = math.inf if op.tau is None else op.tau
        taus = list(tau) if isinstance(tau, tuple) else [tau]
    if args.sparse_window is None and args.sinks is None and op.window:
        args.sparse_window, args.sinks = op.window, op.sinks
    return taus


def main(argv=None) -> int:
    from sw.model.checkpoint import CheckpointError

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None,
                    help="trace directory (default: build/traces/fastcar, full_step or corners)")
    ap.add_argument("--prompt", action="append", help="prompt (repeatable; default: two default prompts)")
    ap.add_argument("--frames", type=int, default=8, help="frames to generate (default: %(default)s)")
    ap.add_argument("--point", choices=("default", "dense"), default=None,
                    help="start from an operating point (sw/operating_point.py): its checkpoint, threshold "
                         "and sparse attention (default: with --full-step the default point; the decode "
                         f"trace: the shipped model at tau {DEFAULT_TAU:g})")
    ap.add_argument("--tau", type=str, default=None,
                    help="threshold: one value, or comma-separated per layer, inf: no replay "
                         f"(default: the point's; the decode trace {DEFAULT_TAU:g})")
    ap.add_argument("--strict", action="store_true", help="replay when score > tau (default: >=)")
    ap.add_argument("--refresh-every", type=int, default=None, help="drift guard: compute every K-th frame")
    ap.add_argument("--max-chain", type=int, default=None, help="drift guard: longest replay chain")
    ap.add_argument("--sparse-window", type=int, default=None, help="sparse attention: local window")
    ap.add_argument("--sinks", type=int, default=None, help="sparse attention: sink tokens")
    ap.add_argument("--cfg", type=float, default=DEFAULT_CFG,
                    help="guidance scale, 0 = off (default: %(default)s)")
    ap.add_argument("--checkpoint", type=Path, default=None,
                    help="model directory (default: the shipped model)")
    ap.add_argument("--int8", type=Path, default=None, metavar="FILE",
                    help="integer constants (default: CHECKPOINT/int8.safetensors; a checkpoint without "
                         "it is calibrated at export)")
    ap.add_argument("--recalibrate", action="store_true",
                    help="calibrate the integer constants from the float model (float64) instead of "
                         "reading them; nothing is written but the trace (python -m sw.golden --calibrate "
                         "writes a new int8.safetensors)")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    ap.add_argument("--full-step", action="store_true",
                    help="write a full-step trace instead: the whole decode step in integers "
                         "(sw/golden/step.py), block by block (default --out build/traces/full_step)")
    ap.add_argument("--corners", action="store_true",
                    help="write the directed corner-case trace instead (constructed integers, "
                         "sw/trace/corners.py; default --out build/traces/corners)")
    ap.add_argument("--small", action="store_true",
                    help="with --corners: for the second geometry, sw.config.SMALL_ACCEL (d 16, d_ff 48, "
                         "3 chunks; golden/corners-small)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads of the float rollout (default: %(default)s; the tiny matrices run "
                         "fastest on one, and the trace does not depend on it)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing trace directory")
    args = ap.parse_args(argv)
    try:
        taus = apply_point(args)
        if args.full_step:
            from sw.trace.full_step import export_full_step

            info = export_full_step(args.out or Path("build/traces/full_step"), checkpoint=args.checkpoint,
                                    prompts=args.prompt, frames=args.frames,
                                    tau=taus[0] if len(taus) == 1 else taus, sinks=args.sinks,
                                    window=args.sparse_window, cfg_scale=args.cfg or None, seed=args.seed,
                                    force=args.force)
            print(f"wrote {info['out']}: {info['steps']} steps x {info['batch']} rows of the whole decode "
                  "step in integers (python -m sw.trace verifies it)")
            return 0
        if args.small and not args.corners:
            raise TraceError("--small goes with --corners (the model traces are cut for the default accelerator)")
        if args.corners:
            from sw.trace.corners import export_corner_trace

            info = export_corner_trace(args.out or Path("build/traces/corners" + "-small" * args.small),
                                       force=args.force, small=args.small)
            counts = info["counts"]
            held = [v for v in counts.values() if v]
            print(f"wrote {info['out']}: {info['groups']} groups, {len(held)} of {len(counts)} corner classes, "
                  f"each held by {min(held)} to {max(held)} groups")
            return 0
        if args.threads < 1:
            raise TraceError(f"--threads must be at least 1, not {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
        if args.recalibrate and args.int8 is not None:
            raise TraceError("--recalibrate and --int8: give one of them")
        for flag, value, least in (("--sparse-window", args.sparse_window, 1), ("--sinks", args.sinks, 0),
                                   ("--refresh-every", args.refresh_every, 1),
                                   ("--max-chain", args.max_chain, 0)):
            if value is not None and value < least:
                raise TraceError(f"{flag} must be at least {least}, not {value}")
        info = export_decode_trace(args.out or Path("build/traces/fastcar"), checkpoint=args.checkpoint,
                                   prompts=args.prompt, frames=args.frames,
                                   tau=taus[0] if len(taus) == 1 else taus, strict=args.strict,
                                   refresh_every=args.refresh_every, max_chain=args.max_chain,
                                   sinks=args.sinks, window=args.sparse_window, cfg_scale=args.cfg or None,
                                   seed=args.seed, force=args.force, int8_file=args.int8,
                                   recalibrate=args.recalibrate)
    except (TraceError, ConfigError, quant.QuantError, CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    per_layer = ", ".join(f"{v:.2f}" for v in info["replay_ratio_per_layer"])
    print(f"wrote {info['out']}: {info['groups']} groups x {info['batch']} rows, "
          f"replay ratio {info['replay_ratio']:.3f} (per layer {per_layer}); integer constants: "
          f"{info['integer_constants']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
