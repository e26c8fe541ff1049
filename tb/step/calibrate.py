"""``nox -s step -- --calibrate``: RTL cycles and SDRAM bytes of whole decode steps in the four modes,
against the system model.

For each mode (``tb/step/modes.py``) the shipped model's full-step trace is exported and its first
``--steps`` steps (the prompt, frame 0 and the start of frame 1, where FastCar replays) run on
Verilator through :class:`hw.step.decode_step.DecodeStep`, with cocotbext-axi's ``AxiRam`` moving
``--sdram`` bytes a cycle on its data channels (the SDRAM's bandwidth at the step's clock) and no
other pause; so do ``--late-steps`` steps from each step of ``--late`` in dense and sparse attention
(the earlier keys and values written into the memory first), where the attended history is long.
Every token, decision and key and value written is checked as in the step's tests. Then:

- **bytes**: the RTL's totals (every burst counted) against :func:`sw.perf.rtl_step.step_bytes`,
  which must match exactly, and against the system model's SDRAM term
  (:func:`sw.perf.system_model.step_costs`, KV cache streamed) over the image steps;
- **cycles**: the coefficients of :mod:`sw.perf.rtl_step` fitted on the first steps of the ``--fit``
  modes and checked on every other run (and on a whole video's steps with ``--video``); the system
  model's cycles (compute and SDRAM streaming added) over each run's image steps beside them;
- **the whole video** of each mode by the fitted model, its speed-up against dense attention
  without FastCar (the best dense design the RTL has), and the RTL's cycles where a whole video was
  simulated.

Writes ``report.json``, ``report.md`` and ``cycles.png`` under ``--out``; ``--reuse`` keeps the
runs already there.
"""

import argparse
import json
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def trace_dir(mode: str) -> Path:
    name = "full_step" + ("" if mode == "fastcar" else "_" + mode.replace("+", "_"))
    return REPO / "build" / "traces" / name


def system_model_terms(manifest, replay, steps, sdram: float, mv=(8, 8)):
    """The system model's SDRAM bytes, compute cycles and step cycles over the image steps among
    ``steps`` with the placement the RTL has (the KV cache and the attention and LM head weights
    streamed over AXI4, the MLP's weights resident; ``mv``: the MAC array's weight block), the memory
    at the bench's bandwidth (``sdram`` bytes a cycle, paced in whole beats)."""
    from sw.perf.system_model import AS_BUILT, Dims, ReplayStats, System, step_costs

    d = manifest["dims"]
    start, N = manifest["prompt_len"], d["tokens_per_frame"]
    img = [s for s in steps if s >= start]
    m = Dims(d=d["d_model"], d_ff=d["d_ff"], layers=d["layers"], heads=d["n_heads"], head_dim=d["head_dim"],
             vocab=d["vocab"], tokens_per_frame=N, prompt_len=start, frames=(d["steps"] - start) // N,
             batch=d["batch"], prompts=d["prompts"], codebook=d["codebook"])
    rep = replay[img].astype(bool)
    stats = ReplayStats((~rep).sum(2), rep.all(2), "trace")
    sp = manifest["decode"]["sparse"]
    from sw.perf.rtl_step import sdram_beat_every

    s = System(block=tuple(mv))
    bench = 8 / sdram_beat_every(sdram) * s.clock_mhz * 1e6      # bytes a second the bench's AxiRam moves
    s = replace(s, sdram_efficiency=bench / (s.sdram_mhz * 1e6 * s.sdram_bytes_per_cycle))
    c = step_costs(m, s, AS_BUILT, stats, sparse=sp is not None, first=img[0] - start)
    return {"image_steps": len(img), "sdram_bytes": c["sdram_bytes"], "compute_cycles": c["compute_cycles"],
            "step_cycles": c["step_cycles"]}


class CalRun(NamedTuple):
    """One simulation of the calibration."""

    #: What the report calls it: the mode, and ``@A`` for a run from step ``A``.
    name: str
    #: The trace's mode (``tb/step/modes.py``).
    mode: str
    #: Its steps, the whole step's ``steps`` (``first:N`` or ``from:A:N``).
    spec: str


def plan(steps: int, late, late_steps: int) -> list[CalRun]:
    """The runs: each mode's first ``steps`` steps, and ``late_steps`` from each step of ``late`` in
    the modes without FastCar (a run from a later step cannot replay rows it did not compute)."""
    from tb.step.modes import STEP_MODES

    runs = [CalRun(mode, mode, f"first:{steps}") for mode in STEP_MODES]
    runs += [CalRun(f"{mode}@{a}", mode, f"from:{a}:{late_steps}")
             for mode in ("dense", "sparse") for a in late]
    return runs


def _spec_steps(spec: str) -> list[int]:
    kind, *arg = spec.split(":")
    if kind == "first":
        return list(range(int(arg[0])))
    return list(range(int(arg[0]), int(arg[0]) + int(arg[1])))


def _simulate(share: list[CalRun], variant: str, sdram: float, tmp: Path) -> dict:
    """Run ``share`` one after another on the build ``variant``; their wall times in seconds."""
    from tb.step.runner import run_decode_step

    seconds = {}
    for r in share:
        t0 = time.monotonic()
        tag = "calibrate-" + r.name.replace("+", "_").replace("@", "-")
        run_decode_step(trace_dir(r.mode), "verilator", tag, taps=False, variant=variant, steps=r.spec,
                        sdram=sdram, out=tmp / f"{r.name}.json")
        seconds[r.name] = time.monotonic() - t0
        rtl = json.loads((tmp / f"{r.name}.json").read_text())
        print(f"{r.name}: steps {rtl['steps'][0]}-{rtl['steps'][-1]}, {sum(rtl['cycles']):,} cycles, "
              f"{seconds[r.name]:.0f} s", file=sys.stderr)
    return seconds


def _reusable(path: Path, spec: str, sdram: float) -> bool:
    try:
        rtl = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    # A run from before the weights were read over AXI4 has no "mv": run again.
    return (rtl.get("steps") == _spec_steps(spec) and rtl.get("sdram_bytes_per_cycle") == sdram
            and "mv" in rtl)


def run(out: Path, *, steps: int, sdram: float, fit_modes, force: bool, jobs: int = 2, late=(261, 509),
        late_steps: int = 4, reuse: bool = False, video: Path | None = None) -> dict:
    from sw.atomic import atomic_dir
    from sw.perf import rtl_step
    from sw.trace.export import main as export_main
    from sw.trace.full_step import load_full_step
    from tb.step.modes import STEP_MODES

    todo = plan(steps, late, late_steps)
    with atomic_dir(out, force=force) as tmp:
        kept = [r for r in todo if reuse and _reusable(out / f"{r.name}.json", r.spec, sdram)]
        for r in kept:
            shutil.copy(out / f"{r.name}.json", tmp / f"{r.name}.json")
            print(f"{r.name}: reused from {out}", file=sys.stderr)
        for mode, flags in STEP_MODES.items():
            if (not (trace_dir(mode) / "manifest.json").exists() or not reuse) and \
                    export_main(["--full-step", "--out", str(trace_dir(mode)), "--force", *flags]):
                raise SystemExit(f"the {mode} trace export failed")
        sim = [r for r in todo if r not in kept]
        # Each worker runs its share one after another on a build of its own.
        shares = [sim[k::jobs] for k in range(jobs)]
        with ProcessPoolExecutor(jobs) as pool:
            done = list(pool.map(_simulate, shares, [f"cal{k or ''}" for k in range(jobs)], [sdram] * jobs,
                                 [tmp] * jobs))
        seconds = {name: t for share in done for name, t in share.items()}
        traces = {mode: load_full_step(trace_dir(mode), verify=False) for mode in STEP_MODES}
        runs = {}
        for r in todo:
            tr = traces[r.mode]
            rtl = json.loads((tmp / f"{r.name}.json").read_text())
            runs[r.name] = {**r._asdict(), "rtl": rtl, "manifest": tr.manifest, "replay": tr.t["replay"],
                            "seconds": seconds.get(r.name)}
        if video:
            rep = json.loads((video / "report.json").read_text())
            if rep.get("sdram_bytes_per_cycle") != sdram:
                raise SystemExit(f"{video / 'report.json'}: sdram_bytes_per_cycle "
                                 f"{rep.get('sdram_bytes_per_cycle')}, not {sdram}")
            tr = load_full_step(video / "trace", verify=False)
            mode = next(mo for mo, fl in STEP_MODES.items() if fl == rep["export_flags"])
            runs["video"] = {"name": f"{mode} (whole video)", "mode": mode, "spec": "all",
                             "manifest": tr.manifest, "rtl": json.loads((video / "rtl.json").read_text()),
                             "replay": tr.t["replay"],
                             "seconds": rep["simulation_seconds"]}

        # ---- bytes ------------------------------------------------------------------------------
        rows = []
        for r in runs.values():
            rtl, man = r["rtl"], r["manifest"]
            if "mv" not in rtl:
                raise SystemExit(f"{r['name']}: the RTL run has no weight block (\"mv\"); it predates the "
                                 "weights over AXI4: run it again")
            exact = rtl_step.step_bytes(man, rtl["steps"], rtl["data_width"], tuple(rtl["mv"]))
            row = {"run": r["name"], "mode": r["mode"], "first_step": rtl["steps"][0],
                   "steps": len(rtl["steps"]),
                   "read_bytes": rtl["read_bytes"], "write_bytes": rtl["write_bytes"],
                   "weight_read_bytes": rtl["weight_read_bytes"],
                   "formula_read": int(exact[:, 0].sum()), "formula_write": int(exact[:, 1].sum()),
                   "formula_weights": int(exact[:, 2].sum()),
                   "rtl_cycles": int(sum(rtl["cycles"])), "seconds": r["seconds"]}
            if any(st >= man["prompt_len"] for st in rtl["steps"]):
                sm = system_model_terms(man, r["replay"], rtl["steps"], sdram, rtl["mv"])
                img = [k for k, s in enumerate(rtl["steps"]) if s >= man["prompt_len"]]
                row.update(image_steps=sm["image_steps"], rtl_image_bytes=int(exact[img, 0].sum()
                                                                               + exact[img, 1].sum()),
                           system_model_image_bytes=sm["sdram_bytes"],
                           system_model_compute_cycles=sm["compute_cycles"],
                           system_model_cycles=sm["step_cycles"],
                           rtl_image_cycles=int(np.asarray(rtl["cycles"])[img].sum()))
            rows.append(row)

        # ---- cycles: fitted on some modes' first steps, checked on every other run -----------------
        # Every step, the first ones too: the video's first step has its own term (video_start); a
        # later run's first step starts from an idle pipeline too, a few hundred cycles, in its error.
        feats = {k: rtl_step.features(r["manifest"], r["replay"], r["rtl"]["steps"]) for k, r in runs.items()}
        cyc = {k: np.asarray(r["rtl"]["cycles"], np.float64) for k, r in runs.items()}
        coef = rtl_step.fit(np.concatenate([feats[mo] for mo in fit_modes]),
                            np.concatenate([cyc[mo] for mo in fit_modes]))
        for key, row in zip(runs, rows, strict=True):
            pred = rtl_step.predict(feats[key], coef)
            err = (pred - cyc[key]) / cyc[key]
            row.update(fitted_on=key in fit_modes, model_cycles=float(pred.sum()),
                       total_error=float(pred.sum() / cyc[key].sum() - 1),
                       max_step_error=float(np.abs(err).max()), mean_step_error=float(np.abs(err).mean()))
        held_out = [r for r in rows if not r["fitted_on"]]

        # ---- the whole video of each mode by the fitted model, and the speed-ups --------------------
        videos = []
        for mode in STEP_MODES:
            man, rep = runs[mode]["manifest"], runs[mode]["replay"]
            S = man["dims"]["steps"]
            x, dw = rtl_step.features(man, rep, range(S)), runs[mode]["rtl"]["data_width"]
            by = rtl_step.step_bytes(man, range(S), dw, tuple(runs[mode]["rtl"]["mv"]))
            v = {"mode": mode, "model_cycles": float(rtl_step.predict(x, coef).sum()),
                 "sdram_bytes": int(by[:, :2].sum()), "weight_bytes": int(by[:, 2].sum()),
                 "replayed_rows": float(rep.mean())}
            if "video" in runs and runs["video"]["mode"] == mode:
                v["rtl_cycles"] = int(sum(runs["video"]["rtl"]["cycles"]))
            videos.append(v)
        dense = next(v for v in videos if v["mode"] == "dense")
        for v in videos:
            v["speedup_model"] = dense["model_cycles"] / v["model_cycles"]
            if "rtl_cycles" in v:
                v["speedup_measured_over_model_dense"] = dense["model_cycles"] / v["rtl_cycles"]
        report = {"command": "nox -s step -- --calibrate", "steps": steps, "sdram_bytes_per_cycle": sdram,
                  "sdram_beat_every": rtl_step.sdram_beat_every(sdram),
                  "fit_modes": list(fit_modes), "features": list(rtl_step.FEATURES),
                  "coefficients": [float(c) for c in coef], "runs": rows, "videos": videos,
                  "held_out_worst_total_error": max(abs(r["total_error"]) for r in held_out),
                  "bytes_exact": all((r["read_bytes"], r["write_bytes"], r["weight_read_bytes"])
                                     == (r["formula_read"], r["formula_write"], r["formula_weights"])
                                     for r in rows)}
        (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        (tmp / "report.md").write_text(render_md(report))
        plot(runs, feats, coef, tmp / "cycles.png")
    return report


def render_md(rep) -> str:
    every = rep["sdram_beat_every"]
    out = [f"RTL decode steps (`{rep['command']}`): SDRAM {rep['sdram_bytes_per_cycle']} bytes a cycle "
           f"(a 64-bit beat every {every} cycles on R and W, {8 / every:.2f} bytes a cycle); cycle model "
           f"fitted on the first steps of {', '.join(rep['fit_modes'])}, checked on every other run.",
           "", "| run | steps | RTL cycles | cycle model | worst step | RTL bytes read + written (formula) "
           "| of which weights |",
           "|---|---|---|---|---|---|---|"]
    for r in rep["runs"]:
        fit = " (fitted)" if r["fitted_on"] else ""
        same = "=" if ((r["read_bytes"], r["write_bytes"], r["weight_read_bytes"])
                       == (r["formula_read"], r["formula_write"], r["formula_weights"])) else "!="
        out.append(f"| {r['run']} | {r['first_step']}-{r['first_step'] + r['steps'] - 1} | "
                   f"{r['rtl_cycles']:,} | {r['total_error']:+.1%}{fit} | {r['max_step_error']:.1%} | "
                   f"{r['read_bytes'] + r['write_bytes']:,} ({same}) | {r['weight_read_bytes']:,} |")
    out += ["", f"Worst held-out run: {rep['held_out_worst_total_error']:.1%} off the RTL's cycles; bytes "
            f"{'equal to the formula in every run' if rep['bytes_exact'] else 'NOT equal to the formula'}.",
            "", "Against the system model (the KV cache and the attention and LM head weights streamed, the "
            "MLP's weights on chip), over each run's image steps:",
            "",
            "| run | RTL bytes | system model bytes | RTL cycles | system model cycles | of which compute |",
            "|---|---|---|---|---|---|"]
    for r in rep["runs"]:
        if "rtl_image_bytes" in r:
            err = r["system_model_cycles"] / r["rtl_image_cycles"] - 1
            out.append(f"| {r['run']} | {r['rtl_image_bytes']:,} | {r['system_model_image_bytes']:,.0f} | "
                       f"{r['rtl_image_cycles']:,} | {r['system_model_cycles']:,.0f} ({err:+.1%}) | "
                       f"{r['system_model_compute_cycles']:,.0f} |")
    out += ["", "The whole video (every step), by the cycle model; RTL where a whole video was simulated:",
            "",
            "| mode | rows replayed | SDRAM MB (weights) | cycles (model) | cycles (RTL) | speed-up vs dense "
            "(model) |",
            "|---|---|---|---|---|---|"]
    for v in rep["videos"]:
        rtl = f"{v['rtl_cycles']:,}" if "rtl_cycles" in v else "-"
        out.append(f"| {v['mode']} | {v['replayed_rows']:.1%} | {v['sdram_bytes'] / 1e6:.1f} "
                   f"({v['weight_bytes'] / 1e6:.1f}) | "
                   f"{v['model_cycles']:,.0f} | {rtl} | {v['speedup_model']:.2f}x |")
    coef = ", ".join(f"{n} {c:.2f}" for n, c in zip(rep["features"], rep["coefficients"], strict=True))
    out += ["", f"Cycle model coefficients: {coef}.", ""]
    return "\n".join(out)


def plot(runs, feats, coef, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from sw.perf import rtl_step

    fig = Figure(figsize=(8, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    colours = {}
    for key, r in runs.items():
        steps = r["rtl"]["steps"]
        c = colours.setdefault(r["mode"], f"C{len(colours)}")
        first = key == r["mode"]
        ax.plot(steps, r["rtl"]["cycles"], color=c, lw=1, marker=None if len(steps) > 8 else "o", ms=3,
                label=f"{r['mode']} (RTL)" if first else None)
        ax.plot(steps, rtl_step.predict(feats[key], coef), "--", color=c, lw=1,
                label=f"{r['mode']} (model)" if first else None)
    ax.set_yscale("log")
    ax.set_xlabel("decode step")
    ax.set_ylabel("cycles")
    ax.set_title("Whole decode steps in RTL against the fitted cycle model (nox -s step -- --calibrate)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.step.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=85, help="steps of each trace, from the first (default 85)")
    ap.add_argument("--sdram", type=float, default=2.8,
                    help="bytes a cycle of the memory (default 2.8: the system model's 140 MB/s at 50 MHz)")
    ap.add_argument("--fit", default="dense,fastcar", help="modes the cycle model is fitted on")
    ap.add_argument("--jobs", type=int, default=2, help="runs simulated side by side (default 2)")
    ap.add_argument("--late", default="261,509",
                    help="steps the later runs of dense and sparse start from (default 261,509; '' none)")
    ap.add_argument("--late-steps", type=int, default=4, help="steps of each later run (default 4)")
    ap.add_argument("--video", type=Path, default=None,
                    help="a whole video's directory (nox -s step -- --video --sdram S) to check the model on")
    ap.add_argument("--reuse", action="store_true",
                    help="keep the runs of the output directory that match (their steps and --sdram)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "step" / "calibration")
    ap.add_argument("--force", action="store_true", help="overwrite an existing output directory")
    args = ap.parse_args(argv)
    late = [int(a) for a in args.late.split(",") if a]
    rep = run(args.out.resolve(), steps=args.steps, sdram=args.sdram, fit_modes=args.fit.split(","),
              force=args.force or args.reuse, jobs=max(1, args.jobs), late=late, late_steps=args.late_steps,
              reuse=args.reuse, video=args.video.resolve() if args.video else None)
    print(render_md(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
