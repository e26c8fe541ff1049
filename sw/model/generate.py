"""Generate videos from prompts with the shipped model and write a PNG frame grid.

Usage::

    python sw/model/generate.py                             # the default prompts -> build/generate/grid.png
    python sw/model/generate.py --prompt "red square moves up" --prompt "white cross moves left" \\
        --tau -1.5 --frames 8 --out build/generate/mine.png

Rows are prompts, columns are frames. With ``--tau`` the video is decoded with FastCar replay
(``--sinks/--window`` add sparse attention); the grid title gives the replay ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch

from sw.model import data
from sw.model.checkpoint import DEFAULT_CHECKPOINT, CheckpointError, load_checkpoint


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


def main(argv=None) -> int:
    from sw.model.fastcar import FastCarConfig, SparseConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable; default: the 4 default prompts)")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cfg", type=float, default=1.5, help="classifier-free guidance scale (0: off)")
    ap.add_argument("--tau", type=float, default=None, help="FastCar threshold (default: dense)")
    ap.add_argument("--sinks", type=int, default=None, help="sparse attention: sink tokens")
    ap.add_argument("--window", type=int, default=None, help="sparse attention: local window")
    ap.add_argument("--integer", action="store_true",
                    help="run the MLP and the replay decision on the integer path (the golden model)")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--out", type=Path, default=Path("build/generate/grid.png"))
    args = ap.parse_args(argv)
    prompts = args.prompt or list(data.DEFAULT_PROMPTS)
    try:
        for p in prompts:
            data.encode_prompt(p)
        ckpt = load_checkpoint(args.checkpoint)
        fastcar = FastCarConfig(tau=args.tau) if args.tau is not None else None
        sparse = None
        if args.sinks is not None or args.window is not None:
            sparse = SparseConfig(sinks=args.sinks or 0, window=args.window or 16)
        if args.integer:
            from sw.golden.calibrate import calibrate, calibration_prompts

            cal, unc = ckpt.layout.prompt_batch(calibration_prompts())
            calibrate(ckpt.model, cal, min(args.frames, 8), cfg_scale=args.cfg or None,
                      uncond_prompt_tokens=unc if args.cfg else None).install(ckpt.model)
        videos, stats = generate_videos(ckpt, prompts, frames=args.frames, seed=args.seed,
                                        cfg_scale=args.cfg or None, fastcar=fastcar, sparse=sparse)
    except (ValueError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    labels = []
    for p, v in zip(prompts, videos, strict=True):
        try:
            seen = data.describe_clip(v)["prompt"]
        except Exception:
            seen = "?"
        labels.append(p if seen == p else f"{p}\n(reads as: {seen})")
    data.save_grid_png(list(videos), labels, args.out)
    extra = f", replay ratio {stats.replay_ratio():.2f}" if fastcar else ""
    print(f"wrote {args.out}: {len(prompts)} prompts x {args.frames} frames{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
