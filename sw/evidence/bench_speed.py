"""CPU decode-speed benchmark: dense against FastCar replay, side by side in one run.

Usage::

    python -m sw.evidence.bench_speed                          # shipped model and the wide configuration
    python -m sw.evidence.bench_speed --config wide --ratios 0.5,0.8,0.87 --frames 3 --repeats 3

For each configuration the same token stream (teacher forcing: fixed random frame tokens, one
sequence) is decoded densely and with FastCar at each replay ratio; the replay decisions come
from a seeded Bernoulli rule at exactly that ratio, so that the ratio, not the threshold, is the
variable. Frame 0 never replays and is not timed; the figure is the wall time per frame of
frames 1 .. F-1, the median over ``--repeats`` interleaved repetitions.

The MLP share ``s`` of dense decoding is measured the same way, as the time a run saves when
every MLP replays (``s = 1 - T(all replayed) / T(dense)``). Amdahl's law then gives the ideal
speed-up at replay ratio ``r``: ``1 / (1 - s * r)``, printed next to the measured one.

With one sequence a replayed token skips its MLP entirely. (With several rows per step, a CPU
matmul of a few rows costs about as much as one row, because it is bound by reading the weights;
then only steps whose rows all replay save time. The accelerator's per-row dataflow is built to
avoid exactly that; see docs/architecture.md.)

Writes ``build/bench_speed/speed.json``, ``speed.md`` and ``speed.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from tqdm import tqdm

from sw.atomic import OutputExistsError, atomic_dir

#: The wide configuration of the benchmark (random weights: only the timing matters).
WIDE = {"d_model": 1024, "d_ff": 2816, "n_layers": 4, "n_heads": 16, "tokens_per_frame": 256}


def build_model(name: str):
    from sw.model.decoder import Decoder, ModelConfig

    if name == "shipped":
        from sw.model.checkpoint import load_checkpoint

        return load_checkpoint().model
    if name == "wide":
        torch.manual_seed(0)
        cfg = ModelConfig(vocab_size=1024, codebook_size=512, prompt_len=6, **WIDE)
        return Decoder(cfg).eval()
    raise ValueError(f"--config: unknown configuration {name!r} (shipped, wide)")


def run_once(model, tokens: torch.Tensor, frames: int, ratio: float | None, seed: int) -> tuple[float, float]:
    """Decode ``tokens`` [1, prompt_len + frames * N]; returns (seconds per timed frame, replay ratio
    over the timed frames). ``ratio`` None is dense."""
    from sw.model.fastcar import FastCarConfig

    cfg = model.config
    n, p0 = cfg.tokens_per_frame, cfg.prompt_len
    fastcar = None
    if ratio is not None:
        gen = torch.Generator().manual_seed(seed)
        def rule(layer, q, k, tau, strict):
            return torch.rand(q.shape[0], generator=gen) < ratio

        model.set_replay_rule(rule)
        fastcar = FastCarConfig(tau=0.0)
    try:
        state = model.new_state(1, capacity=p0 + frames * n, fastcar=fastcar, frames=frames)
        with torch.no_grad():
            model.prefill(tokens[:, :p0], state)
            for p in range(p0, p0 + n):                   # frame 0: always computed, not timed
                model.step(tokens[:, p], state)
            start = time.perf_counter()
            for p in range(p0 + n, p0 + frames * n):
                model.step(tokens[:, p], state)
            seconds = time.perf_counter() - start
    finally:
        model.set_replay_rule(None)
    per_frame = state.stats().replay_ratio_per_frame()[1:]
    return seconds / (frames - 1), float(per_frame.mean()) if ratio is not None else 0.0


def bench(name: str, ratios, frames: int, repeats: int, seed: int = 0) -> dict:
    model = build_model(name)
    cfg = model.config
    model.set_max_seq_len(max(cfg.max_seq_len, cfg.prompt_len + frames * cfg.tokens_per_frame))
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(cfg.image_token_offset, cfg.image_token_offset + cfg.codebook_size,
                           (1, cfg.prompt_len + frames * cfg.tokens_per_frame), generator=g)
    modes = [None, 1.0, *ratios]
    times = {m: [] for m in modes}
    measured = {m: 0.0 for m in modes}
    for rep in tqdm(range(repeats), desc=f"{name}: repeats"):
        for m in modes:                                  # interleaved: drift in machine load is shared
            t, r = run_once(model, tokens, frames, m, seed + rep)
            times[m].append(t)
            measured[m] = r
    med = {m: statistics.median(v) for m, v in times.items()}
    share = 1.0 - med[1.0] / med[None]
    points = []
    for r in ratios:
        rr = measured[r]
        ideal = 1.0 / (1.0 - share * rr)
        speedup = med[None] / med[r]
        points.append({"target_ratio": r, "replay_ratio": rr, "seconds_per_frame": med[r],
                       "speedup": speedup, "ideal": ideal, "fraction_of_ideal": speedup / ideal})
    return {"config": name, "sizes": {k: getattr(cfg, k) for k in
                                      ("d_model", "d_ff", "n_layers", "n_heads", "tokens_per_frame")},
            "threads": torch.get_num_threads(), "frames": frames, "repeats": repeats,
            "dense_seconds_per_frame": med[None], "all_replayed_seconds_per_frame": med[1.0],
            "mlp_share": share, "points": points}


def markdown(results) -> str:
    lines = ["| config | replay ratio | dense s/frame | FastCar s/frame | speed-up | Amdahl ideal "
             "| of ideal |",
             "|---|---|---|---|---|---|---|"]
    for res in results:
        for p in res["points"]:
            lines.append(f"| {res['config']} (MLP share {res['mlp_share']:.2f}) | {p['replay_ratio']:.3f} | "
                         f"{res['dense_seconds_per_frame']:.3f} | {p['seconds_per_frame']:.3f} | "
                         f"{p['speedup']:.2f}x | {p['ideal']:.2f}x | {p['fraction_of_ideal']:.2f} |")
    return "\n".join(lines) + "\n"


def plot(results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
    for res, color in zip(results, ("tab:blue", "tab:orange", "tab:green"), strict=False):
        r = [p["replay_ratio"] for p in res["points"]]
        ax.plot(r, [p["speedup"] for p in res["points"]], "o-", color=color,
                label=f"{res['config']}: measured")
        ax.plot(r, [p["ideal"] for p in res["points"]], "--", color=color,
                label=f"{res['config']}: Amdahl, MLP share {res['mlp_share']:.2f}")
    ax.set_xlabel("replay ratio")
    ax.set_ylabel("decode speed-up over dense (CPU)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.evidence.bench_speed",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", choices=("shipped", "wide", "both"), default="both")
    ap.add_argument("--ratios", default="0.5,0.8,0.87", help="replay ratios (comma-separated)")
    ap.add_argument("--frames", type=int, default=3, help="frames per run (frame 0 is not timed)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    ap.add_argument("--out", type=Path, default=Path("build/bench_speed"))
    ap.add_argument("--force", action="store_true", help="replace an existing output directory")
    args = ap.parse_args(argv)
    if args.out.exists() and not args.force and any(args.out.iterdir()):
        ap.error(f"{args.out}: already exists; pass --force to overwrite")
    try:
        ratios = [float(v) for v in args.ratios.split(",")]
    except ValueError:
        ap.error(f"--ratios {args.ratios!r}: expected comma-separated numbers")
    if not all(0.0 <= r <= 1.0 for r in ratios):
        ap.error(f"--ratios {args.ratios!r}: replay ratios lie in [0, 1]")
    if args.frames < 2 or args.repeats < 1:
        ap.error("--frames must be >= 2 (frame 0 is not timed) and --repeats >= 1")
    torch.set_num_threads(args.threads)
    names = ["shipped", "wide"] if args.config == "both" else [args.config]
    results = [bench(n, ratios, args.frames, args.repeats) for n in names]
    table = markdown(results)
    try:
        with atomic_dir(args.out, force=args.force) as tmp:
            (tmp / "speed.json").write_text(json.dumps(results, indent=1) + "\n")
            (tmp / "speed.md").write_text(table)
            plot(results, tmp / "speed.png")
    except OutputExistsError as e:
        print(f"bench_speed: error: {e}", file=sys.stderr)
        return 1
    print(table)
    print(f"wrote {args.out}/speed.json, speed.md, speed.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
