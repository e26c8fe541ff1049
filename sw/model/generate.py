"""Generate videos from prompts and write a PNG frame grid, at the default operating point.

Usage::

    python sw/model/generate.py                             # the default prompts -> build/generate/grid.png
    python sw/model/generate.py --prompt "red square moves up" --prompt "white cross moves left" \\
        --seed 3 --json build/generate/mine.json --out build/generate/mine.png
    python sw/model/generate.py --dense                     # the shipped model, every MLP, dense attention

By default the videos are decoded as :data:`sw.operating_point.DEFAULT` says: its checkpoint, FastCar's
threshold and sparse attention. ``--dense`` decodes with the best dense design's model and no
replay or sparsity; ``--tau``, ``--sinks/--window`` and ``--checkpoint`` override the default's
settings one by one. Rows are prompts, columns are frames. ``--json OUT`` writes one record per
video: ``prompt``, ``reads_as`` (what :func:`sw.model.data.describe_clip` reads back, ``null`` when it
reads nothing), ``replay`` (the video's MLP replay ratio) and ``sparse_density`` (the attended share of
the causal key positions over the decode steps; 1 for dense attention).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from sw.model import data
from sw.model.checkpoint import CheckpointError, load_checkpoint


def generate_videos(ckpt, prompts, *, frames=8, seed=0, cfg_scale=1.5, fastcar=None, sparse=None,
                    progress=True):
    """Decoded uint8 videos [len(prompts), frames, 64, 64, 3] and the decode statistics."""
    from sw import budget
    from sw.model.decoder import generate

    layout = ckpt.layout
    rows = len(prompts) * (2 if cfg_scale else 1)
    pixels = len(prompts) * frames * 64 * 64 * 3
    budget.check(f"--frames {frames} ({len(prompts)} prompts)",
                 {**budget.decode_memory(ckpt.model.config, batch=rows, frames=frames,
                                         prompt_len=layout.prompt_len,
                                         float_bytes=ckpt.model.rope_cos.element_size()),
                  "decoded videos and the grid image": 3 * pixels})
    cond, uncond = layout.prompt_batch(prompts)
    need = layout.prompt_len + frames * layout.tokens_per_frame
    ckpt.model.set_max_seq_len(max(ckpt.model.config.max_seq_len, need))
    with torch.no_grad():
        tokens, stats = generate(ckpt.model, cond, frames, seed=seed, cfg_scale=cfg_scale,
                                 uncond_prompt_tokens=uncond if cfg_scale else None, fastcar=fastcar,
                                 sparse=sparse, progress=progress)
    return np.stack([ckpt.tokenizer.decode(t.numpy()) for t in tokens]), stats


def sparse_density(prompt_len: int, positions: int, sparse) -> float:
    """The share of the causal attention's (query, key) pairs that ``sparse`` keeps over the decode
    steps of a video of ``positions`` positions (1.0 for ``None``)."""
    if sparse is None:
        return 1.0
    p = np.arange(prompt_len, positions)
    kept = np.minimum(p + 1, sparse.sinks + sparse.window)
    return float(kept.sum() / (p + 1).sum())


def video_records(prompts, videos, stats, *, prompt_len: int, sparse) -> list[dict]:
    """One record per video (see the module docstring)."""
    n = len(prompts)
    rep = stats.replayed.numpy()
    filled = int(stats.filled.sum())
    positions = prompt_len + stats.filled.shape[0] * stats.filled.shape[1]
    density = sparse_density(prompt_len, positions, sparse)
    out = []
    for i, (p, v) in enumerate(zip(prompts, videos, strict=True)):
        try:
            seen = data.describe_clip(v)["prompt"]
        except Exception:  # an unreadable video reads as nothing
            seen = None
        rows = [i, i + n] if rep.shape[3] == 2 * n else [i]
        total = filled * rep.shape[0] * len(rows)
        out.append({"prompt": p, "reads_as": seen,
                    "replay": float(rep[..., rows].sum() / total) if total else 0.0,
                    "sparse_density": density})
    return out


def main(argv=None, *, prog: str | None = None, integer=None) -> int:
    """The command. ``integer``: a callable ``integer(ckpt, args)`` that installs the integer path in
    the checkpoint's model (``python -m sw.golden.generate`` passes the golden model's; this
    package does not import it)."""
    from sw import operating_point
    from sw.atomic import atomic_file
    from sw.model.fastcar import FastCarConfig, SparseConfig

    op = operating_point.DEFAULT
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable; default: the 4 default prompts)")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    ap.add_argument("--cfg", type=float, default=1.5, help="classifier-free guidance scale (0: off)")
    ap.add_argument("--dense", action="store_true",
                    help=f"the best dense design: {operating_point.DENSE.describe()} "
                         f"(default: the operating point, {op.describe()})")
    ap.add_argument("--tau", type=float, default=None,
                    help="FastCar threshold (default: the operating point's)")
    ap.add_argument("--sinks", type=int, default=None, help="sparse attention: sink tokens")
    ap.add_argument("--window", type=int, default=None, help="sparse attention: local window (0: dense)")
    ap.add_argument("--checkpoint", type=Path, default=None,
                    help="checkpoint directory (default: the operating point's)")
    ap.add_argument("--out", type=Path, default=Path("build/generate/grid.png"))
    ap.add_argument("--json", type=Path, default=None, metavar="OUT",
                    help="also write one record per video (prompt, reads_as, replay, sparse_density)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    args = ap.parse_args(argv)
    prompts = args.prompt or list(data.DEFAULT_PROMPTS)
    base = operating_point.DENSE if args.dense else op
    try:
        if args.json is not None and args.json.exists() and not args.force:
            raise ValueError(f"{args.json}: already exists; pass --force to overwrite")
        for p in prompts:
            data.encode_prompt(p)
        ckpt = load_checkpoint(args.checkpoint or base.checkpoint_path)
        tau = args.tau if args.tau is not None else base.tau
        fastcar = None if tau is None else FastCarConfig(tau=list(tau) if isinstance(tau, tuple) else tau)
        sinks = base.sinks if args.sinks is None else args.sinks
        window = base.window if args.window is None else args.window
        if args.sinks is not None and args.window is None and not window:
            window = 16
        sparse = SparseConfig(sinks=sinks, window=window) if window else None
        if integer is not None:
            integer(ckpt, args)
        videos, stats = generate_videos(ckpt, prompts, frames=args.frames, seed=args.seed,
                                        cfg_scale=args.cfg or None, fastcar=fastcar, sparse=sparse)
    except (ValueError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    records = video_records(prompts, videos, stats, prompt_len=ckpt.layout.prompt_len, sparse=sparse)
    labels = [r["prompt"] if r["reads_as"] == r["prompt"] else
              f"{r['prompt']}\n(reads as: {r['reads_as'] or '?'})" for r in records]
    data.save_grid_png(list(videos), labels, args.out)
    if args.json is not None:
        with atomic_file(args.json) as tmp:
            Path(tmp).write_text(json.dumps(records, indent=1) + "\n")
    extra = f", replay ratio {stats.replay_ratio():.2f}" if fastcar else ""
    extra += f", sparse attention {sparse.sinks}+{sparse.window}" if sparse else ""
    print(f"wrote {args.out}: {len(prompts)} prompts x {args.frames} frames{extra}"
          + (f"; {args.json}" if args.json else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
