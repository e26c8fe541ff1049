"""Speed at equal quality: prompt following against replay ratio and against the whole decode step's
speed-up, for every setting, chosen on calibration seeds and confirmed on test seeds.

Usage::

    python -m sw.evidence.frontier                    # calibrate, choose, confirm: float and integer
    python -m sw.evidence.frontier --quick            # 24 prompts x 1 seed, float only (a smoke run)
    python -m sw.evidence.frontier --jobs 2 --out build/frontier --force
    python -m sw.evidence.frontier --scheduler tcp://10.0.0.5:8786   # on a Dask cluster's workers

Every setting generates the same videos (every prompt of the grammar, the same sampling seeds, CFG
1.5) and reports, on all prompts, on the training split and on the compositional held-out split
(:func:`sw.model.data.heldout_prompts`):

- prompt following (:func:`sw.model.data.describe_clip` reads colour, shape and direction back),
  with its 95 % Wilson interval, and its difference from dense **paired** on the same prompts and
  seeds: a 95 % paired bootstrap interval and McNemar's discordant pairs;
- the MLP stage: the replay ratio and the ideal MLP speed-up ``1 / (1 - replay)``;
- the whole video: its cycles on the decode step as built in RTL (the KV cache and the weights over
  AXI4, the MLP's weights resident), from the cycle model fitted on RTL runs
  (:func:`sw.perf.system_model.rtl_video_cycles`), two prompts a video as the step batches them, and
  the speed-up against dense on the same design, which is the best dense design on this board
  (``python -m sw.perf.system_model``: streaming the MLP weights or holding the LM head or the KV
  cache on chip makes dense slower);
- sprite motion, frozen sprites, and PSNR / SSIM on the sprite's region against dense.

The evaluation cannot be tuned to: every choice is made on the **calibration seeds**
(:data:`CALIBRATION_SEEDS` over all 96 prompts, and :data:`CALIBRATION_HELDOUT_SEEDS` more on the 24
held-out prompts). The operating point (:func:`choose`) is the setting with the largest whole-step
speed-up whose prompt following stays within :data:`BUDGET_POINTS` of dense on all prompts and on
the held-out split, float and integer. It and dense are then run again on the **test seeds**
(:data:`TEST_SEEDS`, at least 8 x 96 prompts), which took no part in the choice; the confirmation
holds when the same budget holds there. ``frontier.json`` names both seed sets.

The settings (:func:`default_settings`): dense; FastCar's TAS on the shipped model over tau and per
layer; sparse attention (StreamingLLM's sinks and window) on the shipped model, which never saw its
mask; the model trained with that mask (``sw/checkpoints/sparse_aware``) with and without FastCar;
the paper's decision (TAS on the model trained dense) and the hindsight oracle, on the float path.

The float path is calibrated first, every setting; the integer path (the golden model's MLP and
replay decision, slower) then calibrates dense and the candidates that hold on float, since a
setting must hold on both to be chosen.

Writes ``frontier.json``, ``frontier.md``, ``frontier.png`` (prompt following against replay, the
MLP stage) and ``speed.png`` (prompt following against the whole video's speed-up, with the paper's
1.77x and 2.1x) under ``--out``, atomically; an existing output is refused without ``--force``. Jobs
run in parallel across the cores with a progress bar (a local Dask cluster, :mod:`sw.jobs`), or with
``--scheduler tcp://HOST:PORT`` on the workers of a running Dask scheduler; the results are the same.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np

from sw.atomic import OutputExistsError, atomic_dir
from sw.jobs import SchedulerError

CFG = 1.5
#: Sampling seeds that choose: every prompt with these, and the held-out prompts with the second set.
CALIBRATION_SEEDS = (0, 1)
CALIBRATION_HELDOUT_SEEDS = (2, 3, 4, 5)
#: Sampling seeds that confirm the choice (every prompt with each); they take no part in choosing.
TEST_SEEDS = tuple(range(100, 108))
#: A sprite that moves less than this in all (px, summed over frames) is frozen.
FROZEN_PX = 8.0
#: The paper's operating points: 80 % replay, VBench 74.1 -> 71.5 (relative to its dense); its FPGA
#: speed-ups of the whole decode, FastCar alone and with sparse attention.
PAPER = {"replay": 0.80, "dense": 74.1, "fastcar": 71.5, "speedup": 1.77, "speedup_sparse": 2.1}
#: Quality budget of the operating point: prompt following within this many points of dense.
BUDGET_POINTS = 5.0
#: Paired bootstrap resamples for the interval of a difference from dense.
BOOTSTRAP = 2000
REPO = Path(__file__).resolve().parents[2]
CHECKPOINTS = {"default": REPO / "sw" / "checkpoints" / "default",
               "dense_trained": REPO / "sw" / "checkpoints" / "dense_trained",
               "sparse_aware": REPO / "sw" / "checkpoints" / "sparse_aware"}
SPLITS = ("all", "train", "heldout")


class FrontierError(ValueError):
    """A setting or option that cannot be run."""


@dataclass(frozen=True)
class Setting:
    """One way of decoding to measure.

    Attributes
    ----------
    name : str
        Unique label (``dense`` for the baseline).
    family : str
        Curve it belongs to on the plots (:data:`FAMILIES`).
    score : str or None
        ``FastCarConfig.score`` (``None``: every MLP computed).
    tau : float or tuple of float
        Threshold (TAS units for ``logit``, relative L2 change for ``input`` / ``oracle``), one for
        every layer or one per layer.
    model : str
        A key of :data:`CHECKPOINTS`.
    sparse : tuple of int or None
        ``(sinks, window)`` of sparse attention; ``None``: dense attention.
    paths : tuple of str
        The paths it runs on (``float``, ``integer``); the change scores have no integer rule.
    """

    name: str
    family: str
    score: str | None
    tau: float | tuple = math.inf
    model: str = "default"
    sparse: tuple | None = None
    paths: tuple = ("float", "integer")

    def fastcar(self):
        from sw.model.fastcar import FastCarConfig

        if self.score is None:
            return None
        return FastCarConfig(tau=list(self.tau) if isinstance(self.tau, tuple) else self.tau, score=self.score)

    def sparse_config(self):
        from sw.model.fastcar import SparseConfig

        return None if self.sparse is None else SparseConfig(sinks=self.sparse[0], window=self.sparse[1])

    def tau_json(self):
        t = self.tau
        if isinstance(t, tuple):
            return [x if math.isfinite(x) else str(x) for x in t]
        return t if math.isfinite(t) else None

    @classmethod
    def from_operating_point(cls, op, name: str = "default operating point") -> Setting:
        model = next((k for k, v in CHECKPOINTS.items() if v == op.checkpoint_path), None)
        if model is None:
            raise FrontierError(f"operating point checkpoint {op.checkpoint_path} is not one of {list(CHECKPOINTS)}")
        return cls(name, "default", None if op.tau is None else "logit",
                   math.inf if op.tau is None else op.tau, model, op.sparse_pattern)


FAMILIES = {
    "shipped": "TAS, shipped model",
    "shipped_layers": "shipped model, layers 0-2 replay, layer 3 computes",
    "sparse_untrained": "sparse 5+65, shipped model (never saw the mask)",
    "sparse_aware": "sparse 5+65, model trained with the mask",
    "sparse_aware_layers": "sparse-aware, layers 0-2 replay, layer 3 computes",
    "paper": "TAS, model trained dense (paper)",
    "oracle": "oracle: MLP-output change (hindsight)",
}
#: Families that may become the operating point (the others are references).
CANDIDATES = ("shipped", "shipped_layers", "sparse_aware", "sparse_aware_layers")
SPARSE = (5, 65)
TAS_TAUS = (-3.0, -4.0, -5.0)
SPARSE_TAUS = (-4.0, -5.0, -6.0)
CHANGE_TAUS = (0.4, 0.8)
LAYERS_TAU = (-math.inf, -math.inf, -math.inf, math.inf)


def default_settings(*, comparison: bool = True, sparse_aware: bool = True) -> list[Setting]:
    """Dense; the shipped model's TAS over tau and per layer; sparse attention on the shipped model
    and on the model trained with its mask; the paper's decision and the hindsight oracle."""
    fl = ("float",)
    out = [Setting("dense", "dense", None)]
    out += [Setting(f"tas {t:g}", "shipped", "logit", t) for t in TAS_TAUS]
    out += [Setting("tas layers 0-2", "shipped_layers", "logit", LAYERS_TAU)]
    out += [Setting("sparse", "sparse_untrained", None, sparse=SPARSE, paths=fl),
            Setting("sparse tas -4", "sparse_untrained", "logit", -4.0, sparse=SPARSE, paths=fl)]
    if sparse_aware:
        sa = dict(model="sparse_aware", sparse=SPARSE)
        out += [Setting("sparse-aware", "sparse_aware", None, **sa)]
        out += [Setting(f"sparse-aware tas {t:g}", "sparse_aware", "logit", t, **sa) for t in SPARSE_TAUS]
        out += [Setting("sparse-aware tas layers 0-2", "sparse_aware_layers", "logit", LAYERS_TAU, **sa)]
    if comparison:
        out += [Setting("paper tas -4", "paper", "logit", -4.0, "dense_trained", paths=fl)]
    out += [Setting(f"oracle {t:g}", "oracle", "oracle", t, paths=fl) for t in CHANGE_TAUS]
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
    from sw.model.checkpoint import load_checkpoint

    if model not in _CKPTS:
        _CKPTS[model] = (load_checkpoint(CHECKPOINTS[model]), None)
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
    """Generate one job's videos and read them back; returns per-video records, the replay ratio and
    the whole videos' cycles on the decode step as built."""
    from sw.model import data
    from sw.model.generate import generate_videos
    from sw.perf import system_model as sm

    setting: Setting = job["setting"]
    ckpt = _checkpoint(setting.model, job["integer"])
    videos, stats = generate_videos(ckpt, job["prompts"], seed=job["seed"], cfg_scale=CFG,
                                    fastcar=setting.fastcar(), sparse=setting.sparse_config(), progress=False)
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
    m = sm.Dims.from_config(ckpt.model.config)
    cycles = sum(sm.rtl_video_cycles(m, r, sparse=setting.sparse)
                 for r in sm.ReplayStats.from_decode(stats.replayed.numpy(), m.prompts))
    pairs = -(-len(job["prompts"]) // m.prompts)
    dense = pairs * sm.rtl_video_cycles(m, sm.ReplayStats.dense(m), sparse=None)
    board = sm.board_times(m, sm.ReplayStats.from_decode(stats.replayed.numpy(), m.prompts),
                           sparse=setting.sparse)
    board_dense = pairs * min(sm.board_times(m, [sm.ReplayStats.dense(m)], sparse=None).values())
    return {"key": job["key"], "prompts": list(job["prompts"]), "seed": job["seed"], "videos": videos,
            "reads": reads, "replayed": replayed, "total": total, "cycles": float(cycles),
            "dense_cycles": float(dense), "pairs": pairs, "board_s": board, "board_dense_s": board_dense}


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


def paired(hits: np.ndarray, ref: np.ndarray, *, resamples: int = BOOTSTRAP, seed: int = 0) -> dict:
    """The difference in prompt following between two settings on the same videos (same prompts and
    seeds): ``diff`` (fraction), its 95 % paired bootstrap interval (percentile, ``resamples``
    resamples of the videos, a fixed seed), and McNemar's discordant pairs (``worse``: dense right
    and the setting wrong; ``better``: the other way) with the exact two-sided p-value."""
    hits, ref = np.asarray(hits, bool), np.asarray(ref, bool)
    if hits.shape != ref.shape or hits.ndim != 1:
        raise ValueError(f"paired: {hits.shape} against {ref.shape}: not the same videos")
    n = len(hits)
    d = hits.astype(np.int8) - ref.astype(np.int8)
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, n, (resamples, n))].mean(1) if n else np.zeros(1)
    worse, better = int(((d < 0)).sum()), int((d > 0).sum())
    k, m = min(worse, better), worse + better
    p = min(1.0, 2 * sum(math.comb(m, i) for i in range(k + 1)) / 2 ** m) if m else 1.0
    return {"diff": float(d.mean()) if n else 0.0,
            "ci95": [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))],
            "worse": worse, "better": better, "mcnemar_p": p}


def _videos(results: list[dict]):
    """Every video of some jobs: ``(prompt, seed, read, video, main)`` in a fixed order (``main``:
    from a job over all the prompts, not one of the extra held-out seeds)."""
    for res in sorted(results, key=lambda r: (r["key"][3], r["seed"])):
        for prompt, read, video in zip(res["prompts"], res["reads"], res["videos"], strict=True):
            yield prompt, res["seed"], read, video, res["key"][3] == "main"


def summarise(results: list[dict], dense: list[dict] | None) -> dict:
    """Figures of one setting on one path from its jobs' results, against dense's jobs on the same
    prompts and seeds (``None``: this is dense)."""
    from sw.model import data

    vids = list(_videos(results))
    ref = {(p, s): (r, v) for p, s, r, v, _ in _videos(dense)} if dense is not None else None
    hits = np.array([r["prompt"] == p for p, _, r, _, _ in vids], bool)
    held = np.array([data.is_heldout(p) for p, *_ in vids], bool)
    main = np.array([v[4] for v in vids], bool)
    out = {}
    for split, sel in (("all", main), ("train", main & ~held), ("heldout", held)):
        n = int(sel.sum())
        k = int(hits[sel].sum())
        e = {"videos": n, "prompt_following": k / n if n else None, "ci95": list(wilson(k, n))}
        if ref is not None and n:
            r_hits = np.array([ref[v[:2]][0]["prompt"] == v[0] for v, x in zip(vids, sel, strict=True) if x])
            e["dense"] = float(r_hits.mean())
            e["paired"] = paired(hits[sel], r_hits)
        out[split] = e
    want = {p: data.parse_prompt(p) for p, *_ in vids}
    sel = [i for i, x in enumerate(main) if x] or list(range(len(vids)))
    parts = {k: float(np.mean([vids[i][2][k] == want[vids[i][0]][j] for i in sel]))
             for j, k in enumerate(("colour", "shape", "direction"))}
    motion = [path_length(vids[i][2]["centroids"]) for i in sel]
    psnrs, ssims = [], []
    if ref is not None:
        for i in sel:
            p, s, _, video, _ = vids[i]
            ref_read, ref_video = ref[(p, s)]
            mask, box = sprite_region(ref_read["centroids"])
            if box is not None:
                psnrs.append(region_psnr(video, ref_video, mask))
                ssims.append(region_ssim(video, ref_video, box))
    replayed = sum(r["replayed"] for r in results)
    total = sum(r["total"] for r in results)
    replay = replayed / total if total else 0.0
    cycles = sum(r["cycles"] for r in results) / sum(r["pairs"] for r in results)
    dense_cycles = sum(r["dense_cycles"] for r in results) / sum(r["pairs"] for r in results)
    e = {"replay": replay, "ideal_mlp_speedup": 1.0 / (1.0 - replay),
         "video_cycles": cycles, "step_speedup": dense_cycles / cycles,
         "splits": out, "parts": parts,
         "motion_median_px": float(np.median(motion)) if motion else 0.0,
         "frozen": int(sum(m < FROZEN_PX for m in motion))}
    if all("board_s" in r for r in results):
        # The board design this setting would be built on (the system model's placements that fit the
        # chip, not built): its fastest, against the best dense design on the same board.
        times = {k: sum(r["board_s"][k] for r in results) for k in results[0]["board_s"]}
        best = min(times, key=times.get)
        e["board"] = {"placement": best, "speedup": sum(r["board_dense_s"] for r in results) / times[best]}
    if psnrs:
        e["sprite_psnr_db"] = float(np.mean(psnrs))
        e["sprite_ssim"] = float(np.mean(ssims))
    return e


def within_budget(e: dict, split: str) -> bool:
    """Prompt following of entry ``e`` on ``split`` within :data:`BUDGET_POINTS` of dense's on the
    same videos."""
    s = e["splits"][split]
    return s.get("dense") is not None and s["prompt_following"] >= s["dense"] - BUDGET_POINTS / 100 - 1e-12


def holds(e: dict) -> bool:
    """Within the budget on all prompts and on the held-out split."""
    return within_budget(e, "all") and within_budget(e, "heldout")


def choose(entries: list[dict], paths, families=CANDIDATES) -> dict | None:
    """The operating point: among the settings of ``families`` measured on every path in ``paths``,
    those that :func:`holds` on every path; of these the largest whole-step speed-up on the path where
    it is smallest, then the largest replay. Returns ``{"name", "step_speedup": {path: x},
    "replay": {path: r}}`` or ``None``."""
    by = {}
    for e in entries:
        if e["family"] in families and e["path"] in paths:
            by.setdefault(e["name"], {})[e["path"]] = e
    ok = {n: d for n, d in by.items() if set(d) == set(paths) and all(holds(x) for x in d.values())}
    if not ok:
        return None
    name = max(ok, key=lambda n: (min(x["step_speedup"] for x in ok[n].values()),
                                  min(x["replay"] for x in ok[n].values())))
    return {"name": name, "step_speedup": {p: ok[name][p]["step_speedup"] for p in paths},
            "replay": {p: ok[name][p]["replay"] for p in paths}}


# --------------------------------------------------------------------------------------------------
# The run


def plan(settings: list[Setting], paths, *, phase: str, prompts, seeds, heldout_seeds) -> list[dict]:
    """Every job of one phase: each setting x path x seed on ``prompts``, and the candidates and
    dense on the held-out prompts with ``heldout_seeds`` as well."""
    from sw.model import data

    jobs = []
    for path in paths:
        for s in settings:
            if path not in s.paths:
                continue
            for seed in seeds:
                jobs.append({"key": (phase, s.name, path, "main", seed), "setting": s,
                             "integer": path == "integer", "seed": seed, "prompts": list(prompts)})
            if s.family in (*CANDIDATES, "dense", "default"):
                for seed in heldout_seeds:
                    jobs.append({"key": (phase, s.name, path, "heldout", seed), "setting": s,
                                 "integer": path == "integer", "seed": seed, "prompts": data.heldout_prompts()})
    return jobs


def job_name(key: tuple) -> str:
    """A job's key as the job runner names it (``calibration/dense/float/main/0``)."""
    return "/".join(map(str, key))


def _execute(todo: list[dict], runner, progress: bool, desc: str, store: Path | None = None) -> dict:
    """Run the jobs on ``runner`` (:class:`sw.jobs.JobRunner`), the longest first; their results by
    key, in that order whatever order they finished in (``store``: each result kept there by its
    key as it arrives, and a job whose result is there already not run again)."""
    todo = sorted(todo, key=lambda j: (not j["integer"], -len(j["prompts"])))  # the longest first
    done = runner.run(run_job, {job_name(j["key"]): j for j in todo}, progress=progress, desc=desc,
                      worker_init=_init_worker, store=store)
    return {r["key"]: r for r in done.values()}


def _entries(settings, paths, phase, done) -> list[dict]:
    entries = []
    for path in paths:
        dense = [r for k, r in done.items() if k[:3] == (phase, "dense", path)]
        for s in settings:
            res = [r for k, r in done.items() if k[:3] == (phase, s.name, path)]
            if not res:
                continue
            e = {"name": s.name, "family": s.family, "score": s.score, "tau": s.tau_json(), "model": s.model,
                 "sparse": list(s.sparse) if s.sparse else None, "path": path, "phase": phase,
                 "seeds": sorted({r["seed"] for r in res}),
                 **summarise(res, None if s.name == "dense" else dense)}
            entries.append(e)
    return entries


def run(settings: list[Setting], *, paths=("float", "integer"), prompts=None, seeds=CALIBRATION_SEEDS,
        heldout_seeds=CALIBRATION_HELDOUT_SEEDS, test_seeds=TEST_SEEDS, jobs: int | None = None,
        scheduler: str | None = None, progress: bool = True, store: Path | None = None) -> dict:
    """Calibrate every setting, choose the operating point, confirm it on the test seeds; returns
    the frontier (``{"entries": [...], "chosen", "confirmation", ...}``).

    The jobs run on a local Dask cluster of ``jobs`` processes (default one per core; ``1``: here,
    one after another), or on the workers of the Dask scheduler at ``scheduler``
    (``tcp://HOST:PORT``, :mod:`sw.jobs`); the results are the same. With ``store``, each job's
    result is kept there by its key, so that a stopped run given the same ``store`` resumes."""
    from sw import operating_point
    from sw.jobs import JobRunner
    from sw.model import data

    prompts = list(prompts or data.all_prompts())
    names = [s.name for s in settings]
    if len(set(names)) != len(names):
        raise FrontierError(f"setting names must be unique: {names}")
    if "dense" not in names:
        raise FrontierError("the settings need the dense baseline (name 'dense')")
    for s in settings:
        if s.model not in CHECKPOINTS or not CHECKPOINTS[s.model].is_dir():
            raise FrontierError(f"setting {s.name!r}: checkpoint {CHECKPOINTS.get(s.model, s.model)} is missing")
    overlap = set(test_seeds) & (set(seeds) | set(heldout_seeds))
    if overlap:
        raise FrontierError(f"test seeds {sorted(overlap)} are also calibration seeds")
    paths = list(paths)
    with JobRunner(scheduler=scheduler, workers=jobs) as runner:
        entries, chosen, current, confirmation = _phases(settings, paths, prompts, seeds, heldout_seeds,
                                                         test_seeds, runner, progress, store)
    return {"cfg": CFG, "prompts": len(prompts), "budget_points": BUDGET_POINTS, "paper": PAPER,
            "seeds": {"calibration": {"all_prompts": list(seeds), "heldout_prompts": list(heldout_seeds),
                                      "role": "every setting; the operating point is chosen on these"},
                      "test": {"all_prompts": list(test_seeds),
                               "role": "dense, the chosen setting and the shipped default, run after the "
                                       "choice to confirm it; no choice is made on these"}},
            "design": "the decode step as built in RTL (KV cache and weights over AXI4, MLP weights "
                      "resident), cycles by sw.perf.system_model.rtl_video_cycles; dense on it is the "
                      "best dense design (python -m sw.perf.system_model)",
            "default": {**operating_point.DEFAULT.to_dict(),
                        "setting": None if current is None else current.name},
            "chosen": chosen, "confirmation": confirmation, "entries": entries}


def _phases(settings, paths, prompts, seeds, heldout_seeds, test_seeds, runner, progress, store=None):
    """The calibration on every path, the choice and its confirmation on the test seeds:
    ``(entries, chosen, the default operating point's setting or None, confirmation)``."""
    from sw import operating_point

    # The float path first, every setting; then the integer path for dense and the candidates that
    # hold on float (a setting must hold on every path to be chosen, and the integer path costs the
    # most: its MLP is the golden model's, in numpy).
    entries = []
    for k, path in enumerate(paths):
        todo = [s for s in settings if s.name == "dense" or k == 0 or (
            s.family in CANDIDATES and all(holds(e) for e in entries if e["name"] == s.name))]
        done = _execute(plan(todo, [path], phase="calibration", prompts=prompts, seeds=seeds,
                             heldout_seeds=heldout_seeds), runner, progress, f"calibration, {path}", store)
        entries += _entries(todo, [path], "calibration", done)
    chosen = choose(entries, paths)
    default = Setting.from_operating_point(operating_point.DEFAULT)
    current = next((s for s in settings if (s.score, s.tau, s.model, s.sparse)
                    == (default.score, default.tau, default.model, default.sparse)), None)
    confirmation = None
    if test_seeds and chosen is not None:
        pick = next(s for s in settings if s.name == chosen["name"])
        confirm = [next(s for s in settings if s.name == "dense"), pick]
        if current is not None and current.name != pick.name:
            confirm.append(current)      # the shipped default, whether or not it is the choice
        done_t = _execute(plan(confirm, paths, phase="test", prompts=prompts, seeds=test_seeds,
                               heldout_seeds=()), runner, progress, "test", store)
        test = _entries(confirm, paths, "test", done_t)
        entries += test
        confirmation = {"name": pick.name,
                        "holds": all(holds(e) for e in test if e["name"] == pick.name),
                        "step_speedup": {e["path"]: e["step_speedup"] for e in test if e["name"] == pick.name},
                        "replay": {e["path"]: e["replay"] for e in test if e["name"] == pick.name}}
    return entries, chosen, current, confirmation


# --------------------------------------------------------------------------------------------------
# Output


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def _diff(split: dict) -> str:
    p = split.get("paired")
    if p is None:
        return "-"
    lo, hi = p["ci95"]
    return f"{p['diff'] * 100:+.1f} [{lo * 100:+.1f}, {hi * 100:+.1f}]"


def markdown(front: dict) -> str:
    lines = []
    for phase in ("calibration", "test"):
        rows = [e for e in front["entries"] if e["phase"] == phase]
        if not rows:
            continue
        seeds = front["seeds"][phase]
        lines += [f"## {phase} seeds: {seeds['all_prompts']}"
                  + (f" (held-out prompts also {seeds['heldout_prompts']})" if seeds.get("heldout_prompts") else ""),
                  "",
                  "| path | setting | replay | whole-step speed-up | on its best board design (not built) "
                  "| prompt following, all | vs dense, paired [95 %] | held-out | vs dense, paired [95 %] "
                  "| frozen | sprite PSNR |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for e in rows:
            a, h = e["splits"]["all"], e["splits"]["heldout"]
            star = " **(chosen)**" if front["chosen"] and e["name"] == front["chosen"]["name"] else ""
            q = f"{e['sprite_psnr_db']:.1f} dB" if "sprite_psnr_db" in e else "-"
            b = f"{e['board']['speedup']:.2f}x ({e['board']['placement']})" if "board" in e else "-"
            lines.append(f"| {e['path']} | {e['name']}{star} | {e['replay']:.3f} | {e['step_speedup']:.2f}x | {b} | "
                         f"{_pct(a['prompt_following'])} ({a['videos']}) | {_diff(a)} | "
                         f"{_pct(h['prompt_following'])} ({h['videos']}) | {_diff(h)} | "
                         f"{e['frozen']}/{a['videos']} | {q} |")
        lines.append("")
    c, conf = front["chosen"], front.get("confirmation")
    if c is None:
        lines.append(f"no candidate holds within {front['budget_points']:g} points of dense on every path "
                     "(calibration seeds)")
    else:
        sp = ", ".join(f"{p} {x:.2f}x" for p, x in c["step_speedup"].items())
        lines.append(f"chosen on the calibration seeds: {c['name']} (whole-step speed-up {sp})")
    if conf is not None:
        lines.append(f"confirmed on the test seeds: {'yes' if conf['holds'] else 'NO'} "
                     f"(speed-up {', '.join(f'{p} {x:.2f}x' for p, x in conf['step_speedup'].items())}, "
                     f"replay {', '.join(f'{p} {x:.3f}' for p, x in conf['replay'].items())})")
    d = front["default"]
    lines.append(f"the default operating point (sw/operating_point.py): {d['setting'] or d}")
    return "\n".join(lines) + "\n"


def _panels(front: dict):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = sorted({e["path"] for e in front["entries"]}, key=["float", "integer"].index)
    fig, axes = plt.subplots(1, len(paths), figsize=(6.6 * len(paths), 6.6), dpi=100, squeeze=False)
    return plt, fig, paths, axes[0]


COLOURS = {"shipped": "C0", "shipped_layers": "C9", "sparse_untrained": "C3", "sparse_aware": "C2",
           "sparse_aware_layers": "C8", "paper": "C1", "oracle": "0.35"}


def _curves(ax, front, path, x_key: str, split: str = "all"):
    """One panel: each family's calibration points, prompt following on ``split`` against ``x_key``;
    the integer panel shows the float-only families' float points."""
    cal = [e for e in front["entries"] if e["phase"] == "calibration"]
    dense = next(e for e in cal if e["name"] == "dense" and e["path"] == path)
    d = dense["splits"][split]["prompt_following"] * 100
    ax.axhspan(d - front["budget_points"], d, color="C0", alpha=0.08,
               label=f"within {front['budget_points']:g} points of dense")
    ax.axhline(d, color="k", lw=0.8)
    ax.plot([dense[x_key] if x_key == "step_speedup" else 0], [d], "ks", label=f"dense {d:.1f} %")
    for fam, label in FAMILIES.items():
        own = [e for e in cal if e["family"] == fam and e["path"] == path]
        if not own and path == "integer":
            own = [e for e in cal if e["family"] == fam and e["path"] == "float"]
            label += " (float)"
        own = [e for e in own if e["name"] != "dense"]
        if not own:
            continue
        pts = sorted((e[x_key], e["splits"][split]["prompt_following"] * 100, e["splits"][split]["ci95"])
                     for e in own if e["splits"][split]["videos"])
        xs, ys, ci = zip(*pts, strict=True)
        err = np.array([[y - c[0] * 100 for y, c in zip(ys, ci, strict=True)],
                        [c[1] * 100 - y for y, c in zip(ys, ci, strict=True)]])
        ax.errorbar(xs, ys, yerr=err, fmt="o" + ("--" if fam == "oracle" else "-"), ms=4, lw=1.2, capsize=2,
                    color=COLOURS[fam], label=label)
    test = [e for e in front["entries"] if e["phase"] == "test" and e["path"] == path and e["name"] != "dense"]
    for k, e in enumerate(test):
        ax.plot([e[x_key]], [e["splits"][split]["prompt_following"] * 100], "D", ms=11, mfc="none",
                mec=("C1", "C4", "C5")[k % 3], mew=2, label=f"{e['name']}, test seeds (dense there "
                                                           f"{e['splits'][split]['dense'] * 100:.1f} %)")
    ax.set_ylim(0, 100)
    ax.set_ylabel(f"prompt following, {'all prompts' if split == 'all' else 'held-out prompts'} (%)")
    ax.grid(alpha=0.3)
    return d


def plot(front: dict, path: Path) -> None:
    """Prompt following against the replay ratio (the MLP stage), calibration seeds."""
    plt, fig, paths, axes = _panels(front)
    for ax, p in zip(axes, paths, strict=True):
        d = _curves(ax, front, p, "replay")
        ax.plot([front["paper"]["replay"]], [d * front["paper"]["fastcar"] / front["paper"]["dense"]], "r*",
                ms=12, label="paper: 80 % replay, VBench 74.1 -> 71.5 (scaled to our dense)")
        ax.axvline(7 / 8, color="grey", ls=":", lw=0.8)
        ax.set_xlim(-0.02, 0.9)
        ax.set_xlabel("MLP replay ratio (7/8 = every frame after the first)")
        ax.set_title(f"{p} path: the MLP stage (calibration seeds; diamonds: test seeds)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.13), ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_speed(front: dict, path: Path) -> None:
    """Prompt following (all prompts, and held-out) against the whole video's speed-up on the decode
    step as built, with the paper's 1.77x and 2.1x."""
    plt, fig, paths, axes = _panels(front)
    for ax, p in zip(axes, paths, strict=True):
        _curves(ax, front, p, "step_speedup")
        held = sorted((e["step_speedup"], e["splits"]["heldout"]["prompt_following"] * 100)
                      for e in front["entries"] if e["phase"] == "calibration" and e["path"] == p
                      and e["family"] in CANDIDATES and e["splits"]["heldout"]["videos"])
        if held:
            ax.plot(*zip(*held, strict=True), "v", ms=5, color="C1", alpha=0.6,
                    label="candidates, held-out prompts")
        for x, lab in ((front["paper"]["speedup"], "paper 1.77x (FastCar)"),
                       (front["paper"]["speedup_sparse"], "paper 2.1x (with sparse attention)")):
            ax.axvline(x, color="r", ls="--", lw=0.9)
            ax.text(x, 50, f" {lab}", color="r", fontsize=7, rotation=90, va="bottom")
        ax.set_xlim(0.9, max(3.1, max(e["step_speedup"] for e in front["entries"]) + 0.2))
        ax.set_xlabel("the whole video's speed-up over the best dense design\n"
                      "(the decode step as built in RTL, its cycle model)")
        ax.set_title(f"{p} path: the video (calibration seeds; diamonds: test seeds)")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.17), ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.evidence.frontier", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("build/frontier"), help="output directory")
    ap.add_argument("--force", action="store_true", help="overwrite an existing output directory")
    ap.add_argument("--resume", action="store_true",
                    help="keep the results of the jobs a stopped run finished (OUT.jobs/) and run the rest")
    ap.add_argument("--jobs", type=int, default=None,
                    help="parallel processes on this machine (default: one per core; not with --scheduler)")
    ap.add_argument("--scheduler", metavar="ADDRESS", default=None,
                    help="run the jobs on the workers of the Dask scheduler at ADDRESS (tcp://HOST:PORT)")
    ap.add_argument("--path", choices=("both", "float", "integer"), default="both",
                    help="float model, integer path (the golden model's MLP and replay decision), or both")
    ap.add_argument("--no-comparison", action="store_true",
                    help="leave out the paper's decision on the model trained dense")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 24 prompts x 1 calibration seed, 1 test seed, float path")
    args = ap.parse_args(argv)
    from sw.model import data

    try:
        if args.jobs is not None and args.jobs < 1:
            raise FrontierError("--jobs must be at least 1")
        if args.jobs is not None and args.scheduler is not None:
            raise FrontierError("--jobs and --scheduler: the scheduler's workers decide how many jobs run")
        if args.out.exists() and not args.force and any(args.out.iterdir()):
            raise OutputExistsError(f"{args.out}: already exists and is not empty; pass --force to overwrite")
        paths = ("float", "integer") if args.path == "both" else (args.path,)
        kw = {}
        if args.quick:
            kw = {"prompts": data.all_prompts()[::4], "seeds": (0,), "heldout_seeds": (),
                  "test_seeds": TEST_SEEDS[:1]}
            paths = ("float",)
        settings = default_settings(comparison=not args.no_comparison,
                                    sparse_aware=CHECKPOINTS["sparse_aware"].is_dir())
        # Each job's result is kept by its key as it finishes; a stopped run leaves them for --resume.
        store = args.out.with_name(args.out.name + ".jobs")
        if store.exists() and not args.resume:
            shutil.rmtree(store)
        front = run(settings, paths=paths, jobs=args.jobs, scheduler=args.scheduler, store=store, **kw)
        with atomic_dir(args.out, force=args.force) as tmp:
            (tmp / "frontier.json").write_text(json.dumps(front, indent=1) + "\n")
            (tmp / "frontier.md").write_text(markdown(front))
            plot(front, tmp / "frontier.png")
            plot_speed(front, tmp / "speed.png")
        shutil.rmtree(store, ignore_errors=True)
    except (FrontierError, OutputExistsError, SchedulerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(markdown(front))
    print(f"wrote {args.out / 'frontier.json'}, frontier.md, frontier.png and speed.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
