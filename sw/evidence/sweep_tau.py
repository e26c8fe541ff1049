"""Replay ratio against tau on the shipped model (float path), as a table and a PNG.

Usage::

    python sw/evidence/sweep_tau.py                       # default prompts, 8 frames, CFG 1.5
    python sw/evidence/sweep_tau.py --taus=-3,-2,-1,0 --out build/sweep_tau

For each tau the default prompts are generated with FastCar (the same sampling seed each time);
the replay ratio counts every frame token, frame 0 included, so it is at most (F-1)/F.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from tqdm import tqdm

from sw.model import data
from sw.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

DEFAULT_TAUS = (-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2)


def sweep(ckpt, taus, *, prompts, frames=8, cfg_scale=1.5, seed=0) -> list[dict]:
    from sw.model.decoder import generate
    from sw.model.fastcar import FastCarConfig

    lay = ckpt.layout
    cond, uncond = lay.prompt_batch(prompts)
    rows = []
    with torch.no_grad():
        dense, _ = generate(ckpt.model, cond, frames, seed=seed, cfg_scale=cfg_scale,
                            uncond_prompt_tokens=uncond, progress=False)
        for tau in tqdm(taus, desc="tau"):
            toks, stats = generate(ckpt.model, cond, frames, seed=seed, cfg_scale=cfg_scale,
                                   uncond_prompt_tokens=uncond, fastcar=FastCarConfig(tau=float(tau)),
                                   progress=False)
            rows.append({"tau": float(tau), "replay_ratio": stats.replay_ratio(),
                         "per_layer": [float(v) for v in stats.replay_ratio_per_layer()],
                         "token_agreement": float((toks == dense).float().mean())})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--taus", type=str, default=",".join(map(str, DEFAULT_TAUS)))
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    ap.add_argument("--out", type=Path, default=Path("build/sweep_tau"))
    args = ap.parse_args(argv)
    taus = [float(t) for t in args.taus.split(",")]
    ckpt = load_checkpoint(args.checkpoint)
    rows = sweep(ckpt, taus, prompts=list(data.DEFAULT_PROMPTS[:2]), frames=args.frames)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sweep.json").write_text(json.dumps(rows, indent=1) + "\n")
    print(f"{'tau':>6} {'replay':>7} {'agree':>6}  per layer")
    for r in rows:
        per = " ".join(f"{v:.2f}" for v in r["per_layer"])
        print(f"{r['tau']:>6.2f} {r['replay_ratio']:>7.3f} {r['token_agreement']:>6.3f}  {per}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    ax.plot([r["tau"] for r in rows], [r["replay_ratio"] for r in rows], "o-", label="all layers")
    for li in range(len(rows[0]["per_layer"])):
        ax.plot([r["tau"] for r in rows], [r["per_layer"][li] for r in rows], lw=0.8, alpha=0.7,
                label=f"layer {li}")
    ax.axhline((args.frames - 1) / args.frames, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("tau")
    ax.set_ylabel("replay ratio")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out / "replay_vs_tau.png")
    print(f"wrote {args.out / 'replay_vs_tau.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
