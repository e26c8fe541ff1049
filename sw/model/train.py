"""Train the shipped text-to-video model: data, VQ tokenizer, decoder, in one seeded run.

Usage::

    python sw/model/train.py                         # writes sw/checkpoints/default/ (refuses to overwrite)
    python sw/model/train.py --out DIR --steps 300   # a shorter run elsewhere

Everything is deterministic for a seed on a given machine: the procedural clips
(:mod:`sw.model.data`), the k-means codebook (:mod:`sw.model.tokenizer`), the initialisation, the batches and
the prompt dropout that teaches the unconditional prompt for classifier-free guidance. The default
budget finishes in well under 30 minutes on 2 CPU cores (the run's wall time is recorded in
``train.json``).

The checkpoint directory holds ``model.safetensors`` (HF LLaMA names), ``config.json`` (the
:class:`sw.model.decoder.ModelConfig` plus the token layout and training settings), ``tokenizer.safetensors``,
``train.json`` (loss curve, timings, prompt-following accuracy) and ``loss.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from sw.atomic import OutputExistsError, atomic_dir
from sw.config import SHIPPED_MODEL
from sw.model import data
from sw.model.decoder import Decoder, ModelConfig
from sw.model.fastcar import SparseConfig, sparse_attention_mask
from sw.model.tokenizer import VQTokenizer
from sw.model.tokens import TokenLayout

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "sw" / "checkpoints" / "default"

#: The shipped model's size (see docs/model.md for why it is this small).
MODEL_DEFAULTS = SHIPPED_MODEL


def build_sequences(layout: TokenLayout, tokens: np.ndarray, prompts: list[str]) -> np.ndarray:
    """int64 [n, prompt_len + T * N] training sequences."""
    return np.stack([layout.sequence(p, t) for p, t in zip(prompts, tokens, strict=True)])


def drop_prompts(batch: torch.Tensor, layout: TokenLayout, p: float, gen: torch.Generator) -> torch.Tensor:
    """Replace the words of a fraction ``p`` of the rows with ``<pad>`` (the unconditional prompt)."""
    drop = torch.rand(batch.shape[0], generator=gen) < p
    if drop.any():
        batch = batch.clone()
        batch[drop, 1:layout.prompt_len] = layout.text_offset + data.encode_prompt("")[0]
    return batch


def loss_on_frames(model: Decoder, batch: torch.Tensor, prompt_len: int, *,
                   replay_fraction: float | None = None, replay_tau: float | None = None,
                   attn_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Next-token cross-entropy on the frame tokens only (with FastCar replaying ``replay_fraction``
    of the tokens after frame 0 in every layer, or those whose TAS clears ``replay_tau``; see
    :meth:`sw.model.decoder.Decoder.forward`), under the attention mask ``attn_mask`` (bool [T, T],
    ``None``: causal)."""
    logits = model(batch[:, :-1], attn_mask, replay_fraction=replay_fraction, replay_tau=replay_tau)
    targets = batch[:, 1:]
    start = prompt_len - 1
    return F.cross_entropy(logits[:, start:].reshape(-1, logits.shape[-1]), targets[:, start:].reshape(-1))


def lr_at(step: int, steps: int, lr: float, warmup: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def prompt_following(model: Decoder, tok: VQTokenizer, layout: TokenLayout, prompts: list[str], *,
                     seed: int, cfg_scale: float | None, sparse: SparseConfig | None = None,
                     ) -> tuple[float, list[np.ndarray]]:
    """Fraction of prompts whose generated 8-frame video :func:`sw.model.data.describe_clip` reads back
    as the prompt (colour, shape and direction all right), and the decoded videos (sparse attention
    ``sparse`` when given)."""
    from sw.model.decoder import generate

    cond, uncond = layout.prompt_batch(prompts)
    frames, _ = generate(model, cond, 8, temperature=1.0, top_k=None, seed=seed, cfg_scale=cfg_scale,
                         uncond_prompt_tokens=uncond if cfg_scale else None, progress=False, sparse=sparse)
    videos = [tok.decode(f.numpy()) for f in frames]
    ok = 0
    for video, prompt in zip(videos, prompts, strict=True):
        try:
            ok += data.describe_clip(video)["prompt"] == prompt
        except Exception:  # an unreadable video counts as a miss
            pass
    return ok / len(prompts), videos


def replay_at(step: int, rng: np.random.Generator, replay: dict | None) -> dict:
    """The replay of one training step, as keyword arguments of :func:`loss_on_frames` (``{}``:
    dense).

    Replay-aware training, ``replay`` = ``{"fraction": [lo, hi], "dense": p}`` or
    ``{"tau": [lo, hi], "start": s, "dense": p}``. From step ``s`` on (``0`` when absent), a step
    is dense with probability ``p``; otherwise every layer replays the tokens after frame 0 either
    by share (a fraction drawn uniformly from ``[lo, hi]``, the highest TAS first) or by threshold
    (a TAS threshold drawn uniformly from ``[lo, hi]``), chained as in decode. The model learns to
    carry motion through attention where a token's MLP output is the previous frame's, over the
    range of replay ratios it will run at.
    """
    if replay is None or step < replay.get("start", 0):
        return {}
    draw = rng.random()
    kind = "fraction" if "fraction" in replay else "tau"
    lo, hi = replay[kind]
    value = float(rng.uniform(lo, hi))
    return {} if draw < replay["dense"] else {f"replay_{kind}": value}


def _train_summary(path: Path) -> dict | None:
    """The settings and results of the run that made the checkpoint ``path`` (its ``train.json``
    without the loss curve), or None when it has none."""
    f = Path(path) / "train.json"
    if not f.is_file():
        return None
    info = json.loads(f.read_text())
    return {k: v for k, v in info.items() if k != "losses"}


def train(out: Path, *, steps: int, clips: int, batch: int, lr: float, seed: int, p_uncond: float,
          threads: int, force: bool, eval_prompts: int | None = None, replay: dict | None = None,
          init: Path | None = None, sparse: SparseConfig | None = None) -> dict:
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise OutputExistsError(f"{out}: already exists and is not empty; pass --force to overwrite")
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    t0 = time.monotonic()

    base = None
    if init is not None:
        from sw.model.checkpoint import load_checkpoint

        base = load_checkpoint(init)
    frames, prompts = data.make_dataset(clips, seed=seed, frames=8, size=64, prompts=data.train_prompts())
    tok = VQTokenizer.fit(frames[: min(clips, 2000)], seed=seed) if base is None else base.tokenizer
    tokens = tok.encode(frames)
    del frames
    layout = TokenLayout(codebook_size=tok.vocab_size, tokens_per_frame=tok.tokens_per_frame)
    seqs = torch.from_numpy(build_sequences(layout, tokens, prompts))
    t_data = time.monotonic() - t0

    cfg = ModelConfig(vocab_size=layout.vocab_size, tokens_per_frame=layout.tokens_per_frame,
                      prompt_len=layout.prompt_len, codebook_size=layout.codebook_size,
                      image_token_offset=0, spatial_embedding=True, **MODEL_DEFAULTS)
    model = Decoder(cfg)
    if base is not None:
        if base.model.config != cfg:
            raise ValueError(f"--init {init}: its model config differs from the one trained here")
        model.load_state_dict(base.model.state_dict())
    # Sparse-aware training: every step attends through the pattern the model will decode with.
    mask = None if sparse is None else sparse_attention_mask(seqs.shape[1] - 1, sparse)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
    gen = torch.Generator().manual_seed(seed)
    replay_rng = np.random.default_rng([seed, 1])
    losses = []
    bar = tqdm(range(steps), desc="train", unit="step", dynamic_ncols=True)
    t1 = time.monotonic()
    for step in bar:
        idx = torch.randint(0, seqs.shape[0], (batch,), generator=gen)
        b = drop_prompts(seqs[idx], layout, p_uncond, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps, lr, warmup=max(1, steps // 20))
        loss = loss_on_frames(model, b, layout.prompt_len, attn_mask=mask,
                             **replay_at(step, replay_rng, replay))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-10:]):.4f}")
    t_train = time.monotonic() - t1

    model.eval()
    eval_set = data.heldout_prompts()[:eval_prompts]
    with torch.no_grad():
        acc_cfg, _ = prompt_following(model, tok, layout, eval_set, seed=seed, cfg_scale=1.5, sparse=sparse)

    info = {
        "seed": seed, "steps": steps, "clips": clips, "batch": batch, "lr": lr, "p_uncond": p_uncond,
        "threads": threads, "torch": torch.__version__,
        "train_prompts": len(data.train_prompts()), "replay_aware": replay,
        "sparse": None if sparse is None else {"sinks": sparse.sinks, "window": sparse.window},
        "init": None if init is None else {"checkpoint": str(Path(init).name), "train": _train_summary(init)},
        "seconds_data_and_tokenizer": round(t_data, 1), "seconds_train": round(t_train, 1),
        "seconds_total": round(time.monotonic() - t0, 1),
        "final_loss": float(np.mean(losses[-50:])),
        "prompt_following": {"split": "compositional held-out", "prompts": eval_set, "cfg_1.5": acc_cfg},
        "losses": [round(x, 5) for x in losses],
    }
    save_checkpoint(out, model, tok, layout, info, force=force)
    return info


def save_checkpoint(out: Path, model: Decoder, tok: VQTokenizer, layout: TokenLayout, info: dict, *,
                    force: bool) -> None:
    """Write the checkpoint into a temporary sibling directory, then rename it into place."""
    from safetensors.torch import save_file

    with atomic_dir(out, force=force) as tmp:
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "fastcar-hw-decoder"})
        tok.save(tmp / "tokenizer.safetensors")
        config = {"model": model.config.to_dict(),
                  "layout": {"codebook_size": layout.codebook_size,
                             "tokens_per_frame": layout.tokens_per_frame,
                             "text_vocab": list(data.TEXT_VOCAB), "bos": layout.bos},
                  "frame_size": [64, 64], "frames": 8}
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (tmp / "train.json").write_text(json.dumps(info, indent=1) + "\n")
        plot_loss(info["losses"], tmp / "loss.png")


def plot_loss(losses: list[float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
    ax.plot(losses, lw=0.6, alpha=0.5, label="batch")
    k = 25
    if len(losses) > k:
        smooth = np.convolve(losses, np.ones(k) / k, mode="valid")
        ax.plot(np.arange(k - 1, len(losses)), smooth, lw=1.5, label=f"mean of {k}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy on frame tokens")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT,
                    help="checkpoint directory (default: %(default)s)")
    ap.add_argument("--steps", type=int, default=3000, help="optimiser steps (default: %(default)s)")
    ap.add_argument("--clips", type=int, default=6000, help="training clips (default: %(default)s)")
    ap.add_argument("--batch", type=int, default=16, help="clips per step (default: %(default)s)")
    ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (default: %(default)s)")
    ap.add_argument("--p-uncond", type=float, default=0.1,
                    help="prompt dropout for CFG (default: %(default)s)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    ap.add_argument("--eval-prompts", type=int, default=24,
                    help="held-out prompts for the prompt-following check (default: all %(default)s)")
    ap.add_argument("--init", type=Path, default=None, metavar="DIR",
                    help="start from this checkpoint's weights and tokenizer (fine-tuning)")
    ap.add_argument("--replay-fraction", default="off", metavar="LO,HI",
                    help="replay-aware training: each step replays a fraction drawn from [LO, HI] of the "
                         "tokens after frame 0 in every layer, the highest TAS first (default: off)")
    ap.add_argument("--replay-tau", default="off", metavar="LO,HI",
                    help="replay-aware training by threshold: each step replays the tokens after frame 0 "
                         "whose TAS clears a threshold drawn from [LO, HI] (default: off)")
    ap.add_argument("--replay-start", type=float, default=0.0, metavar="F",
                    help="with --replay-tau: replay-aware steps begin after this fraction of the steps "
                         "(default: %(default)s)")
    ap.add_argument("--replay-dense", type=float, default=0.25,
                    help="with --replay-fraction or --replay-tau: the share of replay-aware steps that stay "
                         "dense (default: %(default)s)")
    ap.add_argument("--sparse", default="off", metavar="SINKS,WINDOW",
                    help="sparse-aware training: every step attends to the first SINKS positions and the "
                         "last WINDOW (the query included), as decode with that pattern does (default: off)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing checkpoint directory")
    args = ap.parse_args(argv)
    sparse = None
    if args.sparse != "off":
        try:
            sinks, window = (int(v) for v in args.sparse.split(","))
            sparse = SparseConfig(sinks=sinks, window=window)
        except ValueError as e:
            ap.error(f"--sparse: expected 'SINKS,WINDOW' (integers, window >= 1) or 'off', "
                     f"not {args.sparse!r} ({e})")
    replay = None
    if args.replay_fraction != "off" and args.replay_tau != "off":
        ap.error("give --replay-fraction or --replay-tau, not both")
    if args.replay_start and args.replay_tau == "off":
        ap.error("--replay-start needs --replay-tau")
    for name in ("fraction", "tau"):
        text = getattr(args, f"replay_{name}")
        if text == "off":
            continue
        try:
            lo, hi = (float(v) for v in text.split(","))
        except ValueError:
            ap.error(f"--replay-{name}: expected 'LO,HI' or 'off', not {text!r}")
        if name == "fraction" and not (0 <= lo <= hi <= 1 and 0 <= args.replay_dense <= 1):
            ap.error("--replay-fraction needs 0 <= LO <= HI <= 1 and --replay-dense in [0, 1]")
        if name == "tau" and not (lo <= hi and 0 <= args.replay_start <= 1 and 0 <= args.replay_dense <= 1):
            ap.error("--replay-tau needs LO <= HI; --replay-start and --replay-dense are fractions in [0, 1]")
        replay = {name: [lo, hi], "dense": args.replay_dense}
        if name == "tau":
            replay = {"tau": [lo, hi], "start": int(args.replay_start * args.steps), "dense": args.replay_dense}
    try:
        info = train(args.out, steps=args.steps, clips=args.clips, batch=args.batch, lr=args.lr,
                     seed=args.seed, p_uncond=args.p_uncond, threads=args.threads, force=args.force,
                     eval_prompts=args.eval_prompts, replay=replay, init=args.init,
                     sparse=sparse)
    except (FileExistsError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    pf = info["prompt_following"]
    print(f"wrote {args.out}: loss {info['final_loss']:.4f}, {info['seconds_total']:.0f} s; "
          f"prompt following {pf['cfg_1.5']:.0%} on the held-out prompts (CFG 1.5, no replay"
          f"{'' if sparse is None else f', sparse {sparse.sinks}+{sparse.window}'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
