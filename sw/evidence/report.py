"""Evidence report: the paper's claims measured on the shipped model, as PNG plots and a table.

Usage::

    python -m sw.evidence.report [--out build/report] [--force] [--long]

Writes under ``--out`` (default ``build/report/``):

- ``replay_vs_tau.png``     (a) replay ratio against tau, overall and per layer (paper Fig. 5)
- ``similarity.png``        (b) cosine similarity of adjacent-frame MLP outputs per layer (Fig. 2)
- ``quality.png``           (c) PSNR, SSIM and token agreement against a dense rollout with the same
                            sampling seed, at several tau, with and without sparse attention
- ``drift.png``             (d) 8- and 32-frame rollouts (64 with ``--long``): hidden-state
                            divergence under teacher forcing, PSNR against dense and replay ratio
                            per frame, with and without the drift guard
- ``flops.png``             (e) decoder FLOPs against replay ratio, ours and at VILA-U-7B sizes
- ``report.md``, ``report.json``   every number, and (f) the MLP share of dense decode time on
                            CPU from torch's profiler

Everything is generated from the shipped model with fixed seeds; the output directory is
written atomically and is not overwritten without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
import torch
from tqdm import tqdm

from sw.atomic import OutputExistsError, atomic_dir
from sw.model.fastcar import DEFAULT_TAU

TAUS = (-6, -5, -4, -3, -2, -1, 0, 1, 2)
QUALITY_TAUS = (-5, -3, -1, 1)
SPARSE = {"sinks": 8, "window": 96}
GUARD = {"refresh_every": 8, "max_chain": 4}
CFG = 1.5
#: VILA-U-7B decoder sizes for the FLOP projection (LLaMA-2-7B: 32 layers, 4096 / 11008, MHA).
VILA_U_7B = {"d_model": 4096, "d_ff": 11008, "n_layers": 32, "tokens_per_frame": 256, "frames": 8,
             "prompt_len": 64}


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _videos(ckpt, tokens: torch.Tensor) -> np.ndarray:
    return np.stack([ckpt.tokenizer.decode(t.numpy()) for t in tokens])


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM of uint8 frames [..., H, W, 3] (pytorch-msssim, Gaussian window 11, sigma 1.5)."""
    from pytorch_msssim import ssim as _ssim

    ta = torch.from_numpy(a.reshape(-1, *a.shape[-3:])).permute(0, 3, 1, 2).float()
    tb = torch.from_numpy(b.reshape(-1, *b.shape[-3:])).permute(0, 3, 1, 2).float()
    return float(_ssim(ta, tb, data_range=255, size_average=True))


def rollout(ckpt, prompts, frames, *, fastcar=None, sparse=None, seed=0, recorder=None):
    from sw.model.decoder import generate

    lay = ckpt.layout
    cond, uncond = lay.prompt_batch(prompts)
    need = lay.prompt_len + frames * lay.tokens_per_frame
    ckpt.model.set_max_seq_len(max(ckpt.model.config.max_seq_len, need))
    with torch.no_grad():
        return generate(ckpt.model, cond, frames, seed=seed, cfg_scale=CFG, uncond_prompt_tokens=uncond,
                        fastcar=fastcar, sparse=sparse, recorder=recorder, progress=False)


def teacher_forced(ckpt, prompts, tokens, *, fastcar=None):
    """Decode the given frame tokens (both CFG rows get the same token) and return the MLP outputs
    used, float32 [L, F, N, rows, d], and the decode statistics."""
    lay, model = ckpt.layout, ckpt.model
    cond, uncond = lay.prompt_batch(prompts)
    rows = torch.cat([cond, uncond])
    b, frames, n = tokens.shape
    cfg = model.config
    out = torch.zeros(cfg.n_layers, frames, n, rows.shape[0], cfg.d_model)

    def rec(r):
        if r.frame is not None:
            out[r.layer, r.frame, r.index] = r.mlp_out.float()

    need = lay.prompt_len + frames * n
    model.set_max_seq_len(max(cfg.max_seq_len, need))
    state = model.new_state(rows.shape[0], capacity=need, fastcar=fastcar, recorder=rec, frames=frames)
    with torch.no_grad():
        model.prefill(rows, state)
        for t in range(frames):
            for i in range(n):
                model.step(tokens[:, t, i].repeat(2), state)
    return out, state.stats()


# --- (a) replay ratio against tau ----------------------------------------------------------

def replay_vs_tau(ckpt, prompts):
    from sw.model.fastcar import FastCarConfig

    rows = []
    for tau in tqdm(TAUS, desc="(a) replay vs tau"):
        _, stats = rollout(ckpt, prompts, 8, fastcar=FastCarConfig(tau=float(tau)))
        rows.append({"tau": tau, "replay_ratio": stats.replay_ratio(),
                     "per_layer": [float(v) for v in stats.replay_ratio_per_layer()]})
    return rows


def plot_replay(rows, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    ax.plot([r["tau"] for r in rows], [r["replay_ratio"] for r in rows], "o-", lw=2, label="all layers")
    for li in range(len(rows[0]["per_layer"])):
        ax.plot([r["tau"] for r in rows], [r["per_layer"][li] for r in rows], lw=0.9, label=f"layer {li}")
    ax.axhline(7 / 8, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("tau (TAS threshold)")
    ax.set_ylabel("replay ratio (8 frames, frame 0 included)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- (b) adjacent-frame similarity ---------------------------------------------------------

def similarity(ckpt, prompts):
    tokens, _ = rollout(ckpt, prompts, 8)
    y, _ = teacher_forced(ckpt, prompts, tokens)
    cos = torch.nn.functional.cosine_similarity(y[:, 1:], y[:, :-1], dim=-1)      # [L, F-1, N, rows]
    shuffled = torch.nn.functional.cosine_similarity(y[:, 1:], y[:, 1:].roll(7, dims=2), dim=-1)
    return {"per_layer": [float(c.mean()) for c in cos],
            "per_layer_median": [float(c.median()) for c in cos],
            "other_position_per_layer": [float(c.mean()) for c in shuffled],
            "hist": [np.histogram(c.numpy().ravel(), bins=40, range=(-1, 1))[0].tolist() for c in cos]}


def plot_similarity(sim, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    edges = np.linspace(-1, 1, 41)
    centers = (edges[1:] + edges[:-1]) / 2
    for li, h in enumerate(sim["hist"]):
        h = np.asarray(h, float)
        ax.plot(centers, h / h.sum(), label=f"layer {li}: mean {sim['per_layer'][li]:.2f}")
    ax.set_xlabel("cosine similarity of MLP outputs, same position, adjacent frames")
    ax.set_ylabel("fraction of tokens")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- (c) quality ---------------------------------------------------------------------------

def quality(ckpt, prompts):
    from sw.model.fastcar import FastCarConfig, SparseConfig

    dense_tokens, _ = rollout(ckpt, prompts, 8)
    dense = _videos(ckpt, dense_tokens)
    rows = []
    for sparse in (None, SparseConfig(**SPARSE)):
        for tau in tqdm(QUALITY_TAUS, desc=f"(c) quality, sparse={sparse is not None}"):
            toks, stats = rollout(ckpt, prompts, 8, fastcar=FastCarConfig(tau=float(tau)), sparse=sparse)
            vid = _videos(ckpt, toks)
            rows.append({"tau": tau, "sparse": sparse is not None, "replay_ratio": stats.replay_ratio(),
                         "psnr": psnr(vid, dense), "ssim": ssim(vid, dense),
                         "token_agreement": float((toks == dense_tokens).float().mean())})
    return rows


def plot_quality(rows, path):
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(9, 3.0), dpi=100)
    for sparse, style in ((False, "o-"), (True, "s--")):
        sel = [r for r in rows if r["sparse"] == sparse]
        label = "sparse attention" if sparse else "dense attention"
        for ax, key in zip(axes, ("psnr", "ssim", "token_agreement"), strict=True):
            ax.plot([r["replay_ratio"] for r in sel], [r[key] for r in sel], style, label=label)
            ax.set_xlabel("replay ratio")
            ax.set_ylabel({"psnr": "PSNR vs dense (dB)", "ssim": "SSIM vs dense",
                           "token_agreement": "token agreement"}[key])
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- (d) drift -----------------------------------------------------------------------------

def drift(ckpt, prompts, lengths, tau):
    from sw.model.fastcar import FastCarConfig

    out = []
    bar = tqdm(total=len(lengths) * 3, desc="(d) drift rollouts")
    for frames in lengths:
        bar.set_postfix(frames=frames)
        dense_tokens, _ = rollout(ckpt, prompts, frames)
        dense_vid = _videos(ckpt, dense_tokens)
        y_dense, _ = teacher_forced(ckpt, prompts, dense_tokens)
        bar.update()
        for guard in (None, GUARD):
            fc = FastCarConfig(tau=tau, **(guard or {}))
            toks, stats = rollout(ckpt, prompts, frames, fastcar=fc)
            vid = _videos(ckpt, toks)
            y_fc, tstats = teacher_forced(ckpt, prompts, dense_tokens, fastcar=fc)
            div = (y_fc - y_dense).norm(dim=-1).mean(dim=(2, 3))          # [L, F]
            rel = div / y_dense.norm(dim=-1).mean(dim=(2, 3)).clamp(min=1e-9)
            out.append({
                "frames": frames, "guard": guard, "tau": tau,
                "replay_ratio": stats.replay_ratio(),
                "replay_per_frame": [float(v) for v in stats.replay_ratio_per_frame()],
                "psnr_per_frame": [psnr(vid[:, t], dense_vid[:, t]) for t in range(frames)],
                "divergence": div.tolist(), "relative_divergence": rel.tolist(),
                "teacher_forced_replay_ratio": tstats.replay_ratio(),
            })
            bar.update()
    bar.close()
    return out


def plot_drift(rows, path):
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2), dpi=100)
    longest = max(r["frames"] for r in rows)
    for r in rows:
        if r["frames"] != longest:
            continue
        label = "guard" if r["guard"] else "no guard"
        t = np.arange(r["frames"])
        axes[0].plot(t, np.mean(r["relative_divergence"], axis=0), label=label)
        axes[1].plot(t, [min(v, 60) for v in r["psnr_per_frame"]], label=label)
        axes[2].plot(t, r["replay_per_frame"], label=label)
    axes[0].set_ylabel("mean_i |Y_fc - Y_dense| / |Y_dense|")
    axes[1].set_ylabel("PSNR vs dense (dB, capped 60)")
    axes[2].set_ylabel("replay ratio")
    for ax in axes:
        ax.set_xlabel("frame")
        ax.legend(fontsize=7)
    fig.suptitle(f"{longest}-frame rollouts", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- (e) FLOPs -----------------------------------------------------------------------------

def decoder_flops(d_model, d_ff, n_layers, tokens_per_frame, frames, prompt_len, replay, n_kv=None):
    """Decoder FLOPs of the frame tokens (2 per multiply-add) and the dense figure: projections,
    attention over the growing context, MLP; ``replay`` is the fraction of MLP rows skipped."""
    n_kv = d_model if n_kv is None else n_kv
    proj = 2 * (2 * d_model * d_model + 2 * d_model * n_kv)
    mlp = 2 * 3 * d_model * d_ff
    pos = np.arange(prompt_len, prompt_len + frames * tokens_per_frame) + 1
    attn = 2 * 2 * d_model * pos.sum()
    n = frames * tokens_per_frame
    dense = n_layers * (n * (proj + mlp) + attn)
    return dense - n_layers * n * mlp * replay, dense


def flops(ckpt, tau_rows):
    cfg = ckpt.model.config
    ours = []
    for r in tau_rows:
        f, d = decoder_flops(cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.tokens_per_frame, 8, cfg.prompt_len,
                             r["replay_ratio"], cfg.d_model // cfg.n_heads * (cfg.n_kv_heads or cfg.n_heads))
        ours.append({"tau": r["tau"], "replay_ratio": r["replay_ratio"], "saving": 1 - f / d})
    v = VILA_U_7B
    vila = []
    for rr in np.linspace(0, 0.875, 8):
        f, d = decoder_flops(v["d_model"], v["d_ff"], v["n_layers"], v["tokens_per_frame"], v["frames"],
                             v["prompt_len"], rr)
        vila.append({"replay_ratio": float(rr), "saving": 1 - f / d})
    f, d = decoder_flops(v["d_model"], v["d_ff"], v["n_layers"], v["tokens_per_frame"], v["frames"],
                         v["prompt_len"], 0.8)
    return {"ours": ours, "vila_u_7b": vila, "vila_u_7b_at_0.8": 1 - f / d}


def plot_flops(fl, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    ax.plot([r["replay_ratio"] for r in fl["ours"]], [r["saving"] for r in fl["ours"]], "o-",
            label="shipped model (d 96, d_ff 256)")
    ax.plot([r["replay_ratio"] for r in fl["vila_u_7b"]], [r["saving"] for r in fl["vila_u_7b"]], "s--",
            label="VILA-U-7B sizes (analytic)")
    ax.plot([0.8], [0.45], "k*", ms=10, label="paper: 45 % fewer at 80 % replay")
    ax.set_xlabel("replay ratio")
    ax.set_ylabel("decoder FLOPs saved")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- (f) MLP share of decode time ----------------------------------------------------------

def mlp_share(ckpt, prompts):
    """Share of dense decode CPU time inside the MLPs, from torch.profiler (one 8-frame rollout's
    first two frames, MLPs wrapped in a record_function scope)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    model = ckpt.model

    def wrapped(layer, x):
        with record_function("fastcar::mlp"):
            return model.layers[layer].mlp(x)

    model.set_mlp_override(wrapped)
    try:
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with record_function("fastcar::decode"):
                rollout(ckpt, prompts, 2)
    finally:
        model.set_mlp_override(None)
    events = {e.key: e for e in prof.key_averages()}
    mlp = events["fastcar::mlp"].cpu_time_total
    total = events["fastcar::decode"].cpu_time_total
    return {"mlp_us": mlp, "decode_us": total, "share": mlp / total}


# --- report --------------------------------------------------------------------------------

def markdown(res) -> str:
    a = res["replay_vs_tau"]
    near = min(a, key=lambda r: abs(r["replay_ratio"] - 0.8))
    fl = res["flops"]
    q = [r for r in res["quality"] if not r["sparse"]]
    q80 = min(q, key=lambda r: abs(r["replay_ratio"] - 0.8))
    lines = [
        "| claim | paper | measured here | command |",
        "|---|---|---|---|",
        f"| MLP share of decode time (CPU) | MLP dominates decode | {res['mlp_share']['share']:.1%} of dense "
        "decode time (torch profiler, shipped model) | `python -m sw.evidence.report` |",
        "| adjacent-frame similarity of MLP outputs | high (Fig. 2) | mean cosine per layer "
        + ", ".join(f"{v:.2f}" for v in res["similarity"]["per_layer"])
        + " (other positions: " + ", ".join(f"{v:.2f}" for v in res["similarity"]["other_position_per_layer"])
        + ") | `python -m sw.evidence.report` |",
        f"| replay against tau | ~80 % replay (Fig. 5) | {near['replay_ratio']:.3f} at tau {near['tau']}; "
        f"per layer " + ", ".join(f"{v:.2f}" for v in near["per_layer"])
        + " | `python -m sw.evidence.report` |",
        "| FLOPs at 80 % replay | 45 % fewer | shipped model: "
        + f"{min(fl['ours'], key=lambda r: abs(r['replay_ratio'] - 0.8))['saving']:.1%} fewer; "
        f"VILA-U-7B sizes: {fl['vila_u_7b_at_0.8']:.1%} fewer (analytic) | `python -m sw.evidence.report` |",
        f"| quality drop at 8 frames | small | replay {q80['replay_ratio']:.2f}: PSNR {q80['psnr']:.1f} dB, "
        f"SSIM {q80['ssim']:.3f}, token agreement {q80['token_agreement']:.2f} against dense | "
        "`python -m sw.evidence.report` |",
    ]
    for r in res["drift"]:
        last = r["frames"] - 1
        guard = "guard " + json.dumps(r["guard"]) if r["guard"] else "no guard"
        div = np.mean([row[last] for row in r["relative_divergence"]])
        cmd = "python -m sw.evidence.report" + (" --long" if r["frames"] > 32 else "")
        lines.append(
            f"| drift at {r['frames']} frames, {guard} | not studied | divergence at frame {last} "
            f"(mean over layers, relative) {div:.3f}, PSNR {r['psnr_per_frame'][last]:.1f} dB, "
            f"replay {r['replay_ratio']:.3f} | `{cmd}` |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from sw.model import data
    from sw.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    ap = argparse.ArgumentParser(prog="python -m sw.evidence.report", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("build/report"))
    ap.add_argument("--force", action="store_true", help="replace an existing output directory")
    ap.add_argument("--long", action="store_true", help="add the 64-frame drift study")
    ap.add_argument("--tau", type=float, default=DEFAULT_TAU,
                    help="tau of the drift and similarity studies (default: the operating point, %(default)s)")
    ap.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force and any(args.out.iterdir()):
        print(f"sw.evidence.report: error: {args.out}: already exists; pass --force to overwrite",
              file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    ckpt = load_checkpoint(args.checkpoint)
    prompts = list(data.DEFAULT_PROMPTS[:2])
    res = {"prompts": prompts, "cfg_scale": CFG}
    res["mlp_share"] = mlp_share(ckpt, prompts)
    res["replay_vs_tau"] = replay_vs_tau(ckpt, prompts)
    res["similarity"] = similarity(ckpt, prompts)
    res["quality"] = quality(ckpt, prompts)
    lengths = (8, 32, 64) if args.long else (8, 32)
    res["drift"] = drift(ckpt, prompts, lengths, args.tau)
    res["flops"] = flops(ckpt, res["replay_vs_tau"])
    table = markdown(res)
    try:
        with atomic_dir(args.out, force=args.force) as tmp:
            plot_replay(res["replay_vs_tau"], tmp / "replay_vs_tau.png")
            plot_similarity(res["similarity"], tmp / "similarity.png")
            plot_quality(res["quality"], tmp / "quality.png")
            plot_drift(res["drift"], tmp / "drift.png")
            plot_flops(res["flops"], tmp / "flops.png")
            (tmp / "report.json").write_text(json.dumps(res, indent=1, default=float) + "\n")
            (tmp / "report.md").write_text("# FastCar evidence (`python -m sw.evidence.report`)\n\n" + table)
    except OutputExistsError as e:
        print(f"sw.evidence.report: error: {e}", file=sys.stderr)
        return 1
    print(table)
    print(f"wrote {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
