"""How close the trace export comes to a machine-dependent result: margin against discrepancy.

The integer constants are stored (``int8.safetensors``) and the integer path is exact, so the only
place where the CPU can still change a trace is where a float from the model is rounded to an
integer: the int8 activations ``x``, ``q`` and ``k_prev`` (``rint(v)`` with ``v = value / scale``)
and the sampled tokens (``argmax(p / e)`` with exponential draws ``e``, as ``torch.multinomial``
does). This command runs the export's rollout under several float code paths, each in its own
process (``ATEN_CPU_CAPABILITY``, the thread count, MKL's code path, float32 or float64), and
reports for each quantity

- the **margin**: the smallest distance of a pre-rounding value ``v`` from a rounding boundary
  (``k + 0.5``; values that saturate either way are left out), and the smallest relative gap between
  the best and the second-best ``p / e`` of a sampling step;
- the **discrepancy**: the largest difference of the same values between two code paths.

A code path can change the trace only where its discrepancy reaches the margin. Usage::

    python -m sw.evidence.reproducibility               # all variants; build/reproducibility/report.json
    python -m sw.evidence.reproducibility --dump F.npz  # one rollout in this process (what each variant runs)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from sw.atomic import atomic_file

REPO = Path(__file__).resolve().parents[2]

#: name -> (float dtype, environment, torch threads)
VARIANTS = {
    "float64": ("float64", {}, 1),
    "float64, ATEN_CPU_CAPABILITY=default": ("float64", {"ATEN_CPU_CAPABILITY": "default"}, 1),
    "float64, 2 threads": ("float64", {}, 2),
    "float64, MKL_CBWR=COMPATIBLE": ("float64", {"MKL_CBWR": "COMPATIBLE"}, 1),
    "float32": ("float32", {}, 1),
    "float32, ATEN_CPU_CAPABILITY=default": ("float32", {"ATEN_CPU_CAPABILITY": "default"}, 1),
}


def dump(out, *, dtype: str = "float64", threads: int = 1) -> dict:
    """Run the default export's rollout (stored constants, default prompts, tau and seed) and save
    every pre-rounding value and sampling gap to ``out`` (npz)."""
    import torch

    import sw.model.decoder
    from sw.golden.calibrate import use_float64
    from sw.model import data
    from sw.model.checkpoint import load_checkpoint
    from sw.model.fastcar import FastCarConfig
    from sw.trace.export import DEFAULT_EXPORT_PROMPTS, DEFAULT_TAU, integer_constants, rollout

    torch.set_num_threads(threads)
    ckpt = load_checkpoint()
    ip, _ = integer_constants(ckpt)
    if dtype == "float64":
        use_float64(ckpt.model)
    frames = 8
    mc, lay = ckpt.model.config, ckpt.layout
    ckpt.model.set_max_seq_len(max(mc.max_seq_len, lay.prompt_len + frames * lay.tokens_per_frame))

    real_sample = sw.model.decoder._sample
    gaps, tops, agree = [], [], []

    def sample(logits, temperature, top_k, generator):
        state = generator.get_state()
        tok = real_sample(logits, temperature, top_k, generator)
        # The same draws as torch.multinomial(probs, 1): argmax(probs / Exp(1)).
        lg = (logits if logits.dtype == torch.float64 else logits.float()) / temperature
        probs = torch.softmax(lg, dim=-1)
        again = torch.Generator().set_state(state)
        r = (probs / torch.empty_like(probs).exponential_(1, generator=again)).double()
        top2 = torch.topk(r, 2, dim=-1).values
        gaps.append(((top2[:, 0] - top2[:, 1]) / top2[:, 0]).numpy())
        tops.append(top2[:, 0].numpy())
        agree.append(bool((r.argmax(-1) == tok).all()))
        return tok

    sw.model.decoder._sample = sample
    try:
        fastcar = FastCarConfig(tau=[DEFAULT_TAU] * mc.n_layers)
        recs, tokens, _ = rollout(ckpt, ip, list(data.DEFAULT_PROMPTS[:DEFAULT_EXPORT_PROMPTS]), frames,
                                  fastcar=fastcar, progress=False)
    finally:
        sw.model.decoder._sample = real_sample
    s = [lr.scales for lr in ip.layers]
    v = {"x": np.stack([r.x.double().numpy() / s[r.layer]["s_x"] for r in recs]),
         "q": np.stack([r.q.double().numpy() / s[r.layer]["s_q"] if r.q is not None
                        else np.zeros((r.x.shape[0], mc.n_heads, mc.head_dim)) for r in recs]),
         "k_prev": np.stack([r.k_prev.double().numpy() / s[r.layer]["s_k"] if r.q is not None
                             else np.zeros((r.x.shape[0], mc.n_heads, mc.head_dim)) for r in recs])}
    np.savez(out, **{f"v_{k}": a for k, a in v.items()}, gap=np.stack(gaps), top=np.stack(tops),
             tokens=tokens.numpy(), sampler_agrees=np.array(all(agree)))
    return {"out": str(out)}


def boundary_distance(v: np.ndarray) -> np.ndarray:
    """Distance of each value from the nearest rounding boundary ``k + 0.5``, for the values whose
    int8 result depends on the rounding (saturated values are left out)."""
    v = v[(v > -128) & (v < 127)]
    return np.abs(v - np.floor(v) - 0.5)


def compare(dumps: dict) -> dict:
    """Margins of the first float64 dump; discrepancies of every dump against the first of its dtype."""
    loaded = {n: dict(np.load(f)) for n, f in dumps.items()}
    report = {"variants": {}}
    for dt in ("float64", "float32"):
        names = [n for n in dumps if VARIANTS[n][0] == dt]
        if not names:
            continue
        ref = loaded[names[0]]
        margin = {k: float(boundary_distance(ref[f"v_{k}"]).min()) for k in ("x", "q", "k_prev")}
        report[f"margin_{dt}"] = {**margin, "values": int(sum(boundary_distance(ref[f'v_{k}']).size
                                                              for k in ("x", "q", "k_prev"))),
                                  "sampling_relative_gap": float(ref["gap"].min()),
                                  "sampling_steps": int(ref["gap"].shape[0])}
        for n in names:
            d = loaded[n]
            same_tokens = bool(np.array_equal(d["tokens"], ref["tokens"]))
            row = {"reference": names[0], "same_tokens": same_tokens,
                   "sampler_agrees_with_multinomial": bool(d["sampler_agrees"])}
            for k in ("x", "q", "k_prev"):
                a, b = d[f"v_{k}"], ref[f"v_{k}"]
                if a.shape == b.shape and same_tokens:
                    row[f"max_abs_diff_{k}"] = float(np.abs(a - b).max())
                    q_a, q_b = np.rint(a).clip(-128, 127), np.rint(b).clip(-128, 127)
                    row[f"int8_differ_{k}"] = int((q_a != q_b).sum())
            if same_tokens:
                row["max_rel_diff_sampling"] = float(np.abs(d["top"] / ref["top"] - 1).max())
            report["variants"][n] = row
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.evidence.reproducibility",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--dump", type=Path, default=None, help="run one rollout here and save it (npz)")
    ap.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default=None,
                    help="comma-separated subset of the variant names (default: all)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "reproducibility")
    args = ap.parse_args(argv)
    if args.dump is not None:
        dump(args.dump, dtype=args.dtype, threads=args.threads)
        return 0
    names = list(VARIANTS) if args.variants is None else [n.strip() for n in args.variants.split(",")]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        print(f"error: --variants: unknown {unknown}; known: {list(VARIANTS)}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    dumps, seconds = {}, {}
    for n in names:
        dt, env, threads = VARIANTS[n]
        f = args.out / f"dump-{len(dumps)}.npz"
        t0 = time.time()
        r = subprocess.run([sys.executable, "-m", "sw.evidence.reproducibility", "--dump", str(f),
                            "--dtype", dt, "--threads", str(threads)], cwd=REPO, env={**os.environ, **env},
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"error: variant {n!r} failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            return 1
        seconds[n] = round(time.time() - t0, 1)
        dumps[n] = f
        print(f"{n}: {seconds[n]} s", flush=True)
    report = compare(dumps)
    for n, s in seconds.items():
        report["variants"][n]["seconds"] = s
    report["command"] = "python -m sw.evidence.reproducibility"
    with atomic_file(args.out / "report.json") as tmp:
        Path(tmp).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
