"""Speed at equal quality: prompt following against replay ratio, for every replay decision.

Usage::

    python -m sw.evidence.frontier                    # all settings, 96 prompts x 2 seeds, float and integer
    python -m sw.evidence.frontier --quick            # 24 prompts x 1 seed, float only (a smoke run)
    python -m sw.evidence.frontier --jobs 2 --out build/frontier --force

Every setting generates the same videos (every prompt of the grammar, the same sampling seeds, CFG
1.5) with the shipped model, and reports:

- the replay ratio and the ideal MLP speed-up ``1 / (1 - replay)``;
- prompt following (:func:`sw.model.data.describe_clip` reads colour, shape and direction back), with
  its 95 % Wilson interval and its colour / shape / direction parts, on all prompts, on the
  training split and on the compositional held-out split (:func:`sw.model.data.heldout_prompts`);
- sprite motion against dense: the median path length of the sprite's centroid, and the videos whose
  sprite moves less than 8 px in all (frozen);
- PSNR and SSIM against the dense video of the same prompt and seed, on the sprite's region only
  (the dense sprite's boxes, 4 px margin), where a mostly static background cannot hide a frozen
  sprite.

The settings (:func:`default_settings`) are dense, the shipped decision (TAS on the replay-aware
model) over tau, the paper's decision (the same TAS on the same architecture trained without
replay, ``sw/checkpoints/dense_trained``), two hindsight-free scores and the hindsight oracle
(replay where the fresh MLP output changes least from the cached one; it computes the MLP to decide,
so it bounds what a rule can keep, it does not save work). The change scores have no integer rule,
so they run on the float path only (the integer plot shows their float curves). The default operating point
(:data:`sw.model.fastcar.DEFAULT_TAU`) is chosen by :func:`choose_common`: the largest replay that
:func:`choose_default` accepts on every path (float and integer); dense and every tau of the
shipped decision are also run on the held-out prompts with 8 seeds (192 videos) to confirm it.

Writes ``frontier.json`` (one entry per setting and path with ``name``, ``replay``,
``prompt_following`` as a fraction, ``dense`` for the baseline and ``"default": true`` on the
default operating point; ``chosen_by_quality`` per path and ``operating_point`` for all paths at
once), ``frontier.md`` and ``frontier.png`` under ``--out``, atomically; an
existing output is refused without ``--force``. Jobs run in parallel across the cores with a
progress bar.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from sw.atomic import OutputExistsError, atomic_dir
from sw.model.fastcar import DISTANCE_SCORES

CFG = 1.5
#: Sampling seeds of the main run (2 x 96 prompts = 192 videos) and of the held-out check (8 x 24).
SEEDS = (0, 1)
HELDOUT_SEEDS = tuple(range(8))
#: A sprite that moves less than this in all (px, summed over frames) is frozen.
FROZEN_PX = 8.0
#: The paper's operating point: 80 % replay, VBench 74.1 -> 71.5 (relative to its dense).
PAPER = {"replay": 0.80, "dense": 74.1, "fastcar": 71.5}
#: Quality budget of the default operating point: prompt following within this many points of dense.
BUDGET_POINTS = 5.0
REPO = Path(__file__).resolve().parents[2]
COMPARISON_CHECKPOINT = REPO / "sw" / "checkpoints" / "dense_trained"


class FrontierError(ValueError):
    """A setting or option that cannot be run."""


@dataclass(frozen=True)
class Setting:
    """One replay decision to measure.

    Attributes
    ----------
    name : str
        Unique label (``dense`` for the baseline).
    family : str
        Curve it belongs to on the plot.
    score : str or None
        ``FastCarConfig.score`` (``None``: dense).
    tau : float
        Threshold (TAS units for ``logit``, relative L2 change for ``input`` / ``oracle``).
    model : str
        ``"default"`` (the shipped, replay-aware checkpoint) or ``"dense_trained"``.
    """

    name: str
    family: str
    score: str | None
    tau: float = math.inf
    model: str = "default"

    def fastcar(self):
        from sw.model.fastcar import FastCarConfig

        return None if self.score is None else FastCarConfig(tau=self.tau, score=self.score)


FAMILIES = {
    "shipped": "TAS, replay-aware model (shipped)",
    "paper": "TAS, model trained dense (paper)",
    "input": "MLP-input change, replay-aware model",
    "oracle": "oracle: MLP-output change (hindsight)",
    "paper_oracle": "oracle, model trained dense",
}
TAS_TAUS = (1.0, 0.0, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0)
CHANGE_TAUS = (0.2, 0.4, 0.6, 0.8, 1.0)


def default_settings(*, comparison: bool = True) -> list[Setting]:
    """Dense, the shipped TAS over tau, the paper's TAS (model trained dense), MLP-input change and
    the hindsight oracle (on both models)."""
    from sw.model.fastcar import DEFAULT_TAU

    out = [Setting("dense", "dense", None)]
    taus = sorted(set(TAS_TAUS) | {DEFAULT_TAU}, reverse=True)
    out += [Setting(f"tas {t:g}", "shipped", "logit", t) for t in taus]
    if comparison:
        out += [Setting("dense_trained dense", "paper", None, model="dense_trained")]
        out += [Setting(f"paper tas {t:g}", "paper", "logit", t, "dense_trained") for t in taus]
    out += [Setting(f"input {t:g}", "input", "input", t) for t in CHANGE_TAUS]
    out += [Setting(f"oracle {t:g}", "oracle", "oracle", t) for t in CHANGE_TAUS]
    if comparison:
        out += [Setting(f"paper oracle {t:g}", "paper_oracle", "oracle", t, "dense_trained")
                for t in CHANGE_TAUS]
    return out


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a proportion ``k / n``."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    lo, hi = max(0.0, c - h), min(1.0, c + h)
    return (0.0 if k == 0 else lo, 1.0 if k == n else hi)


# --------------------------------------------------------------------------------------------------
# Worker: one (setting, path, seed, prompt set) job


_CKPTS: dict = {}


def _checkpoint(model: str, integer: bool):
    """The checkpoint of ``model`` in this process (loaded once), with the integer path installed
    or removed."""
    from sw.golden.calibrate import integer_constants
    from sw.model.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    if model not in _CKPTS:
        path = DEFAULT_CHECKPOINT if model == "default" else COMPARISON_CHECKPOINT
        ckpt = load_checkpoint(path)
        _CKPTS[model] = (ckpt, None)
    ckpt, ip = _CKPTS[model]
    if integer and ip is None:
        import torch

        ip, _ = integer_constants(ckpt, dtype=torch.float32)
        _CKPTS[model] = (ckpt, ip)
    if integer:
        ip.install(ckpt.model)
    else:
        ckpt.model.set_mlp_override(None)
        ckpt.model.set_replay_rule(None)
    return ckpt


def _init_worker():
    import torch

    torch.set_num_threads(1)


def run_job(job: dict) -> dict:
    """Generate one job's videos and read them back; returns per-video records and the replay ratio."""
    from sw.model import data
    from sw.model.generate import generate_videos

    setting: Setting = job["setting"]
    ckpt = _checkpoint(setting.model, job["integer"])
    videos, stats = generate_videos(ckpt, job["prompts"], seed=job["seed"], cfg_scale=CFG,
                                    fastcar=setting.fastcar(), progress=False)
    reads = []
    for video in videos:
        try:
            r = data.describe_clip(video)
        except Exception:  # an unreadable video counts as a miss
            r = {"colour": None, "shape": None, "direction": None, "prompt": None,
                 "centroids": np.full((len(video), 2), np.nan)}
        reads.append({k: r[k] for k in ("colour", "shape", "direction", "prompt", "centroids")})
    replayed = int(stats.replayed.sum())
    total = int(stats.filled.sum()) * stats.replayed.shape[0] * stats.replayed.shape[3]
    return {"key": job["key"], "videos": videos, "reads": reads, "replayed": replayed, "total": total}


# --------------------------------------------------------------------------------------------------
# Metrics


def path_length(centroids: np.ndarray, size: int = 64) -> float:
    """Total distance (px) the centroid travels over the frames, wrap-around aware; NaNs skipped."""
    c = centroids[~np.isnan(centroids).any(1)]
    if len(c) < 2:
        return 0.0
    d = np.diff(c, axis=0)
    d = (d + size / 2) % size - size / 2
    return float(np.hypot(d[:, 0], d[:, 1]).sum())


def sprite_region(centroids: np.ndarray, size: int = 64, side: int = 16, margin: int = 4):
    """bool [T, H, W] mask of the sprite's box in each frame (NaN frames: empty), and the bounding
    box ``(y0, y1, x0, x1)`` of all of them (None when the sprite is never seen)."""
    t_len = len(centroids)
    mask = np.zeros((t_len, size, size), bool)
    half = side / 2 + margin
    for t, (cy, cx) in enumerate(centroids):
        if np.isnan(cy) or np.isnan(cx):
            continue
        y0, y1 = int(max(0, math.floor(cy - half))), int(min(size, math.ceil(cy + half + 1)))
        x0, x1 = int(max(0, math.floor(cx - half))), int(min(size, math.ceil(cx + half + 1)))
        mask[t, y0:y1, x0:x1] = True
    if not mask.any():
        return mask, None
    ys, xs = np.nonzero(mask.any(0))
    return mask, (int(ys.min()), int(ys.max()) + 1, int(xs.min()), int(xs.max()) + 1)


def region_psnr(a: np.ndarray, b: np.ndarray, mask: np.ndarray) -> float:
    """PSNR (dB) of uint8 videos [T, H, W, 3] over the pixels of ``mask`` [T, H, W]."""
    diff = a.astype(np.float64)[mask] - b.astype(np.float64)[mask]
    mse = float((diff ** 2).mean())
    return 99.0 if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def region_ssim(a: np.ndarray, b: np.ndarray, box) -> float:
    """Mean SSIM of uint8 videos [T, H, W, 3] cropped to ``box`` (pytorch-msssim, window 7)."""
    import torch
    from pytorch_msssim import ssim

    y0, y1, x0, x1 = box
    win = min(7, y1 - y0, x1 - x0)
    win -= 1 - win % 2  # odd
    ta = torch.from_numpy(a[:, y0:y1, x0:x1]).permute(0, 3, 1, 2).double()
    tb = torch.from_numpy(b[:, y0:y1, x0:x1]).permute(0, 3, 1, 2).double()
    return float(ssim(ta, tb, data_range=255, size_average=True, win_size=max(win, 1)))


def summarise(results: list[dict], prompts: list[str], dense: list[dict] | None) -> dict:
    """Figures of one setting from its jobs' results (one per seed, same prompts), against dense."""
    from sw.model import data

    want = [data.parse_prompt(p) for p in prompts]
    ok = {"prompt": 0, "colour": 0, "shape": 0, "direction": 0}
    split = {"train": [0, 0], "heldout": [0, 0]}
    motion, psnrs, ssims = [], [], []
    n = 0
    for ri, res in enumerate(results):
        for vi, r in enumerate(res["reads"]):
            c, s, d = want[vi]
            n += 1
            hit = r["prompt"] == prompts[vi]
            ok["prompt"] += hit
            ok["colour"] += r["colour"] == c
            ok["shape"] += r["shape"] == s
            ok["direction"] += r["direction"] == d
            part = split["heldout" if data.is_heldout(prompts[vi]) else "train"]
            part[0] += hit
            part[1] += 1
            motion.append(path_length(r["centroids"]))
            if dense is not None:
                ref_read, ref_video = dense[ri]["reads"][vi], dense[ri]["videos"][vi]
                mask, box = sprite_region(ref_read["centroids"])
                if box is not None:
                    psnrs.append(region_psnr(res["videos"][vi], ref_video, mask))
                    ssims.append(region_ssim(res["videos"][vi], ref_video, box))
    replayed = sum(r["replayed"] for r in results)
    total = sum(r["total"] for r in results)
    replay = replayed / total if total else 0.0
    lo, hi = wilson(ok["prompt"], n)
    out = {
        "replay": replay,
        "ideal_speedup": 1.0 / (1.0 - replay),
        "videos": n,
        "prompt_following": ok["prompt"] / n,
        "prompt_following_ci95": [lo, hi],
        "parts": {k: ok[k] / n for k in ("colour", "shape", "direction")},
        "motion_median_px": float(np.median(motion)),
        "frozen": int(sum(m < FROZEN_PX for m in motion)),
        "splits": {k: {"videos": v[1], "prompt_following": v[0] / v[1] if v[1] else None}
                   for k, v in split.items()},
    }
    if psnrs:
        out["sprite_psnr_db"] = float(np.mean(psnrs))
        out["sprite_ssim"] = float(np.mean(ssims))
    return out


def within_budget(e: dict, dense: dict, split: str) -> bool:
    """Prompt following of ``e`` on ``split`` within :data:`BUDGET_POINTS` of ``dense``'s."""
    return (e["splits"][split]["prompt_following"]
            >= dense["splits"][split]["prompt_following"] - BUDGET_POINTS / 100 - 1e-12)


def _qualifying(entries: list[dict], family: str) -> list[dict]:
    """The entries of ``family`` (one path, all prompts) whose prompt following stays within
    :data:`BUDGET_POINTS` of dense on the training split and, when they have a held-out entry,
    also on the held-out split."""
    dense = next(d for d in entries if d["name"] == "dense" and d["prompts"] == "all")
    held = {e["name"]: e for e in entries if e["prompts"] == "held-out"}
    dense_held = held.get("dense (held-out)")
    out = []
    for e in entries:
        if e["family"] != family or e["prompts"] != "all" or not within_budget(e, dense, "train"):
            continue
        h = held.get(f"{e['name']} (held-out)")
        if h is not None and dense_held is not None and not within_budget(h, dense_held, "heldout"):
            continue
        out.append(e)
    return out


def choose_default(entries: list[dict], family: str = "shipped") -> dict | None:
    """The operating point chosen by quality on one path: the largest-replay entry of ``family``
    whose prompt following stays within :data:`BUDGET_POINTS` of dense on the training split (the
    prompts it was calibrated and trained on) and is confirmed on the held-out split (its held-out
    entry, when there is one, also within the budget); ``None`` if none is. Entries of one path."""
    return max(_qualifying(entries, family), key=lambda e: e["replay"], default=None)


def choose_common(entries: list[dict], family: str = "shipped") -> dict | None:
    """The operating point of every path at once: the setting (by name) that qualifies as in
    :func:`choose_default` on each path of ``entries``, with the largest replay on the path where
    it is smallest; ``None`` if none qualifies on all. Returns ``{"name", "tau", "replay": {path:
    ratio}}``. The accelerator runs the integer path, the float model the other: one threshold
    must hold for both."""
    paths = sorted({e["path"] for e in entries})
    ok = [{e["name"]: e for e in _qualifying([x for x in entries if x["path"] == p], family)} for p in paths]
    common = set(ok[0]).intersection(*ok[1:]) if ok else set()
    if not common:
        return None
    name = max(common, key=lambda n: min(q[n]["replay"] for q in ok))
    return {"name": name, "tau": ok[0][name]["tau"], "replay": {p: q[name]["replay"] for p, q in zip(paths, ok)}}


# --------------------------------------------------------------------------------------------------
# The run


def plan(settings: list[Setting], paths: list[str], *, prompts: list[str], seeds, heldout_seeds) -> list[dict]:
    """Every job: each setting x path x seed on ``prompts``; dense and the shipped decision also on
    the held-out prompts with ``heldout_seeds`` (the confirmation of the operating point)."""
    from sw.model import data

    jobs = []
    for path in paths:
        integer = path == "integer"
        for s in settings:
            if integer and s.score in DISTANCE_SCORES:
                continue  # no integer rule: the change scores are float measurements
            for seed in seeds:
                jobs.append({"key": (s.name, path, "main", seed), "setting": s, "integer": integer,
                             "seed": seed, "prompts": prompts})
            if (s.name == "dense" or (s.family == "shipped" and s.model == "default")) and heldout_seeds:
                for seed in heldout_seeds:
                    jobs.append({"key": (s.name, path, "heldout", seed), "setting": s, "integer": integer,
                                 "seed": seed, "prompts": data.heldout_prompts()})
    return jobs


def run(settings: list[Setting], *, paths=("float", "integer"), prompts=None, seeds=SEEDS,
        heldout_seeds=HELDOUT_SEEDS, jobs: int | None = None, progress: bool = True) -> dict:
    """Run every setting and return the frontier (``{"entries": [...], ...}``)."""
    import multiprocessing as mp

    from tqdm import tqdm

    from sw.model import data
    from sw.model.fastcar import DEFAULT_TAU

    prompts = list(prompts or data.all_prompts())
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise FrontierError(f"setting names must be unique: {names}")
    if "dense" not in names:
        raise FrontierError("the settings need the dense baseline (name 'dense')")
    if any(s.model == "dense_trained" for s in settings) and not COMPARISON_CHECKPOINT.exists():
        raise FrontierError(f"{COMPARISON_CHECKPOINT}: the comparison checkpoint is missing "
                            f"(train it with python sw/model/train.py --replay-tau off --out ...)")
    default = next((s for s in settings if s.family == "shipped" and s.tau == DEFAULT_TAU), None)
    todo = plan(settings, list(paths), prompts=prompts, seeds=seeds, heldout_seeds=heldout_seeds)
    todo.sort(key=lambda j: (not j["integer"], -len(j["prompts"])))  # the longest first
    jobs = jobs or os.cpu_count() or 1
    done = {}
    bar = tqdm(total=len(todo), desc="frontier", unit="job", disable=not progress)
    if jobs == 1:
        _init_worker()
        for job in todo:
            r = run_job(job)
            done[r["key"]] = r
            bar.update()
    else:
        ctx = mp.get_context("spawn")
        with ctx.Pool(jobs, initializer=_init_worker) as pool:
            for r in pool.imap_unordered(run_job, todo):
                done[r["key"]] = r
                bar.update()
    bar.close()

    entries = []
    for path in paths:
        for part, part_prompts, part_seeds in (("main", prompts, seeds),
                                                ("heldout", data.heldout_prompts(), heldout_seeds)):
            dense = [done[("dense", path, part, s)] for s in part_seeds] if part_seeds else None
            for s in settings:
                keys = [(s.name, path, part, seed) for seed in part_seeds]
                if not keys or keys[0] not in done:
                    continue
                res = [done[k] for k in keys]
                same_model = dense if s.model == "default" else \
                    [done[("dense_trained dense", path, part, seed)] for seed in part_seeds] \
                    if ("dense_trained dense", path, part, part_seeds[0]) in done else None
                e = {"name": s.name if part == "main" else f"{s.name} (held-out)", "family": s.family,
                     "score": s.score, "tau": s.tau if math.isfinite(s.tau) else None, "model": s.model,
                     "path": path, "prompts": "all" if part == "main" else "held-out",
                     "seeds": list(part_seeds),
                     **summarise(res, part_prompts, same_model if s.score is not None else None)}
                if part == "main" and default is not None and s.name == default.name:
                    e["default"] = True
                entries.append(e)
    chosen = {p: choose_default([e for e in entries if e["path"] == p]) for p in paths}
    return {"cfg": CFG, "seeds": list(seeds), "heldout_seeds": list(heldout_seeds), "prompts": len(prompts),
            "default_tau": DEFAULT_TAU, "budget_points": BUDGET_POINTS, "paper": PAPER,
            "chosen_by_quality": {p: (None if c is None else {"name": c["name"], "tau": c["tau"],
                                                              "replay": c["replay"],
                                                              "is_default": c.get("default", False)})
                                  for p, c in chosen.items()},
            "operating_point": _with_default(choose_common(entries), DEFAULT_TAU),
            "entries": entries}


def _with_default(point: dict | None, default_tau: float) -> dict | None:
    """``point`` with ``is_default``: whether its tau is the shipped default."""
    return None if point is None else {**point, "is_default": point["tau"] == default_tau}


# --------------------------------------------------------------------------------------------------
# Output


def markdown(front: dict) -> str:
    lines = ["| path | setting | replay | ideal MLP speed-up | prompt following [95 % CI] | colour / shape / "
             "direction | training split | sprite motion (median px) | frozen | sprite PSNR / SSIM |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for e in front["entries"]:
        lo, hi = e["prompt_following_ci95"]
        parts = " / ".join(f"{e['parts'][k]:.0%}" for k in ("colour", "shape", "direction"))
        tr = e["splits"]["train"]["prompt_following"]
        q = (f"{e['sprite_psnr_db']:.1f} dB / {e['sprite_ssim']:.3f}" if "sprite_psnr_db" in e else "-")
        star = " **(default)**" if e.get("default") else ""
        lines.append(f"| {e['path']} | {e['name']}{star} | {e['replay']:.3f} | {e['ideal_speedup']:.2f}x | "
                     f"{e['prompt_following']:.1%} [{lo:.0%}, {hi:.0%}] | {parts} | "
                     f"{'-' if tr is None else f'{tr:.1%}'} | {e['motion_median_px']:.0f} | "
                     f"{e['frozen']}/{e['videos']} | {q} |")
    for p, c in front["chosen_by_quality"].items():
        lines.append("")
        what = "none" if c is None else f"{c['name']} (replay {c['replay']:.3f})"
        if c is not None:
            what += (", the default operating point" if c["is_default"] else
                     f"; the default tau {front['default_tau']:g} is another point")
        lines.append(f"{p}: the largest replay of the shipped decision within {front['budget_points']:g} "
                     f"points of dense on the training split, confirmed on the held-out split: {what}")
    c = front.get("operating_point")
    lines.append("")
    if c is None:
        lines.append("no setting of the shipped decision qualifies on every path")
    else:
        ratios = ", ".join(f"{p} {r:.3f}" for p, r in c["replay"].items())
        lines.append(f"every path at once: {c['name']} (replay {ratios})"
                     + (", the default operating point" if c["is_default"] else
                        f"; the default tau {front['default_tau']:g} is another point"))
    return "\n".join(lines) + "\n"


def plot(front: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = sorted({e["path"] for e in front["entries"]}, key=["float", "integer"].index)
    fig, axes = plt.subplots(1, len(paths), figsize=(6.2 * len(paths), 4.4), dpi=100, squeeze=False)
    colours = {"shipped": "C0", "paper": "C3", "input": "C2", "oracle": "0.35", "paper_oracle": "C3"}
    for ax, p in zip(axes[0], paths, strict=True):
        main = [e for e in front["entries"] if e["path"] == p and e["prompts"] == "all"]
        dense = next(e for e in main if e["name"] == "dense")
        d = dense["prompt_following"] * 100
        ax.axhspan(d - front["budget_points"], d, color="C0", alpha=0.08,
                   label=f"within {front['budget_points']:g} points of dense")
        ax.axhline(d, color="k", lw=0.8)
        ax.plot([0], [d], "ks", label=f"dense {d:.1f} %")
        for fam, label in FAMILIES.items():
            pts = sorted((e["replay"], e["prompt_following"] * 100, e["prompt_following_ci95"])
                         for e in main if e["family"] == fam and e["score"] is not None)
            if not pts and p == "integer":  # the change scores have no integer rule: show float's
                pts = sorted((e["replay"], e["prompt_following"] * 100, e["prompt_following_ci95"])
                             for e in front["entries"] if e["family"] == fam and e["path"] == "float"
                             and e["prompts"] == "all" and e["score"] is not None)
                label += " (float)"
            if not pts:
                continue
            xs, ys, ci = zip(*pts, strict=True)
            err = np.array([[y - c[0] * 100 for y, c in zip(ys, ci, strict=True)],
                            [c[1] * 100 - y for y, c in zip(ys, ci, strict=True)]])
            style = "--" if fam.endswith("oracle") else "-"
            ax.errorbar(xs, ys, yerr=err, fmt="o" + style, ms=4, lw=1.2, capsize=2, color=colours[fam],
                        label=label)
        paper_y = d * front["paper"]["fastcar"] / front["paper"]["dense"]
        ax.plot([front["paper"]["replay"]], [paper_y], "r*", ms=12,
                label="paper: 80 % replay, VBench 74.1 -> 71.5 (scaled to our dense)")
        for e in main:
            if e.get("default"):
                ax.plot([e["replay"]], [e["prompt_following"] * 100], "o", ms=14, mfc="none", mec="C1",
                        mew=2, label=f"default operating point ({e['name']})")
        held = sorted((e for e in front["entries"] if e["path"] == p and e["prompts"] == "held-out"
                       and e["score"] is not None), key=lambda e: e["replay"])
        if held:
            ax.plot([e["replay"] for e in held], [e["prompt_following"] * 100 for e in held], "D:", color="C1",
                    ms=4, lw=1, label=f"TAS, replay-aware, held-out prompts ({held[0]['videos']} videos; "
                                      "dense there: "
                                      f"{next(e for e in front['entries'] if e['path'] == p and e['name'] == 'dense (held-out)')['prompt_following']:.1%})")
        ax.axvline(7 / 8, color="grey", ls=":", lw=0.8)
        ax.set_xlim(-0.02, 0.9)
        ax.set_ylim(0, 100)
        ax.set_xlabel("replay ratio (7/8 = every frame after the first)")
        ax.set_ylabel("prompt following (%)")
        ax.set_title(f"{p} path: {dense['videos']} videos, CFG {front['cfg']:g}")
        ax.legend(fontsize=7, loc="lower right", bbox_to_anchor=(1.0, 0.12))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.evidence.frontier", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("build/frontier"), help="output directory")
    ap.add_argument("--force", action="store_true", help="overwrite an existing output directory")
    ap.add_argument("--jobs", type=int, default=None, help="parallel processes (default: one per core)")
    ap.add_argument("--seeds", type=int, default=len(SEEDS), help="sampling seeds per prompt (default: 2)")
    ap.add_argument("--path", choices=("both", "float", "integer"), default="both",
                    help="float model, integer path (the golden model's MLP and replay decision), or both")
    ap.add_argument("--no-comparison", action="store_true",
                    help="leave out the paper's decision on the model trained dense")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 24 prompts x 1 seed, float path, no held-out check")
    args = ap.parse_args(argv)
    from sw.model import data

    try:
        if args.seeds < 1 or (args.jobs is not None and args.jobs < 1):
            raise FrontierError("--seeds and --jobs must be at least 1")
        if args.out.exists() and not args.force and any(args.out.iterdir()):
            raise OutputExistsError(f"{args.out}: already exists and is not empty; pass --force to overwrite")
        paths = ("float", "integer") if args.path == "both" else (args.path,)
        prompts, seeds, held = data.all_prompts(), tuple(range(args.seeds)), HELDOUT_SEEDS
        if args.quick:
            prompts, seeds, held, paths = data.all_prompts()[::4], (0,), (), ("float",)
        front = run(default_settings(comparison=not args.no_comparison), paths=paths, prompts=prompts,
                    seeds=seeds, heldout_seeds=held, jobs=args.jobs)
        with atomic_dir(args.out, force=args.force) as tmp:
            (tmp / "frontier.json").write_text(json.dumps(front, indent=1) + "\n")
            (tmp / "frontier.md").write_text(markdown(front))
            plot(front, tmp / "frontier.png")
    except (FrontierError, OutputExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(markdown(front))
    print(f"wrote {args.out / 'frontier.json'}, frontier.md and frontier.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
