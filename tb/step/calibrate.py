"""``nox -s step -- --calibrate``: RTL cycles and SDRAM bytes of whole decode steps in the four modes,
against the system model.

For each mode (``tb/step/modes.py``) the shipped model's full-step trace is exported and its first
``--steps`` steps (the prompt, frame 0 and the start of frame 1, where FastCar replays) run on
Verilator through :class:`hw.step.decode_step.DecodeStep`, with cocotbext-axi's ``AxiRam`` moving
``--sdram`` bytes a cycle on its data channels (the SDRAM's bandwidth at the step's clock) and no
other pause; every token, decision and key and value written is checked as in the step's tests.
Then:

- **bytes**: the RTL's totals (every burst counted) against :func:`sw.perf.rtl_step.step_bytes`,
  which must match exactly, and against the system model's SDRAM term
  (:func:`sw.perf.system_model.step_costs`, KV cache streamed) over the image steps;
- **cycles**: the coefficients of :mod:`sw.perf.rtl_step` fitted on the ``--fit`` modes and checked
  on the others, step by step; the system model's compute term over the same steps beside them;
- **speed-up**: each mode's RTL cycles over the steps run against dense attention without FastCar
  (the best dense design the RTL has), and the fitted model over the whole video.

Writes ``report.json``, ``report.md`` and ``cycles.png`` under ``--out``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]


def trace_dir(mode: str) -> Path:
    name = "full_step" + ("" if mode == "fastcar" else "_" + mode.replace("+", "_"))
    return REPO / "build" / "traces" / name


def system_model_terms(manifest, replay, steps):
    """The system model's SDRAM bytes and compute cycles over the image steps among ``steps``
    (KV cache streamed, weights on chip: what the RTL moves over AXI)."""
    from sw.perf.system_model import Dims, Placement, ReplayStats, System, step_costs

    d = manifest["dims"]
    start, N = manifest["prompt_len"], d["tokens_per_frame"]
    img = [s for s in steps if s >= start]
    m = Dims(d=d["d_model"], d_ff=d["d_ff"], layers=d["layers"], heads=d["n_heads"], head_dim=d["head_dim"],
             vocab=d["vocab"], tokens_per_frame=N, prompt_len=start, frames=-(-len(img) // N),
             batch=d["batch"], prompts=d["prompts"])
    rep = replay[img].astype(bool)
    stats = ReplayStats((~rep).sum(2), rep.all(2), "trace")
    sp = manifest["decode"]["sparse"]
    c = step_costs(m, System(), Placement(("KV cache",)), stats, sparse=sp is not None)
    return {"image_steps": len(img), "sdram_bytes": c["sdram_bytes"], "compute_cycles": c["compute_cycles"]}


def run(out: Path, *, steps: int, sdram: float, fit_modes, force: bool) -> dict:
    from sw.atomic import atomic_dir
    from sw.perf import rtl_step
    from sw.trace.export import main as export_main
    from sw.trace.full_step import load_full_step
    from tb.step.modes import STEP_MODES
    from tb.step.test_step import run_decode_step

    with atomic_dir(out, force=force) as tmp:
        runs = {}
        for mode, flags in STEP_MODES.items():
            trace = trace_dir(mode)
            if export_main(["--full-step", "--out", str(trace), "--force", *flags]):
                raise SystemExit(f"the {mode} trace export failed")
            t0 = time.monotonic()
            run_decode_step(trace, "verilator", f"calibrate-{mode.replace('+', '_')}", taps=False,
                            variant="cal", FASTCAR_STEPS=f"first:{steps}", FASTCAR_SDRAM=str(sdram),
                            FASTCAR_OUT=str(tmp / f"{mode}.json"))
            rtl = json.loads((tmp / f"{mode}.json").read_text())
            tr = load_full_step(trace, verify=False)
            runs[mode] = {"rtl": rtl, "manifest": tr.manifest, "replay": tr.t["replay"],
                          "seconds": time.monotonic() - t0}
            print(f"{mode}: {len(rtl['steps'])} steps, {sum(rtl['cycles']):,} cycles, "
                  f"{time.monotonic() - t0:.0f} s", file=sys.stderr)

        # ---- bytes ------------------------------------------------------------------------------
        rows = []
        for mode, r in runs.items():
            rtl, man = r["rtl"], r["manifest"]
            exact = rtl_step.step_bytes(man, rtl["steps"], rtl["data_width"])
            sm = system_model_terms(man, r["replay"], rtl["steps"])
            start = man["prompt_len"]
            img = [k for k, s in enumerate(rtl["steps"]) if s >= start]
            rows.append({"mode": mode, "steps": len(rtl["steps"]), "read_bytes": rtl["read_bytes"],
                         "write_bytes": rtl["write_bytes"], "formula_read": int(exact[:, 0].sum()),
                         "formula_write": int(exact[:, 1].sum()),
                         "image_steps": sm["image_steps"], "rtl_image_bytes": int(exact[img].sum()),
                         "system_model_image_bytes": sm["sdram_bytes"],
                         "system_model_compute_cycles": sm["compute_cycles"],
                         "rtl_image_cycles": int(np.asarray(rtl["cycles"])[img].sum()),
                         "rtl_cycles": int(sum(rtl["cycles"])), "seconds": round(r["seconds"], 1)})

        # ---- cycles: fitted on some modes, checked on the others -------------------------------
        feats = {mode: rtl_step.features(r["manifest"], r["replay"], r["rtl"]["steps"])
                 for mode, r in runs.items()}
        cyc = {mode: np.asarray(r["rtl"]["cycles"], np.float64) for mode, r in runs.items()}
        # The first step carries the pipeline's fill and the steps' feed starting: left out of the fit.
        x = np.concatenate([feats[mo][1:] for mo in fit_modes])
        y = np.concatenate([cyc[mo][1:] for mo in fit_modes])
        coef = rtl_step.fit(x, y)
        for row in rows:
            mo = row["mode"]
            pred = rtl_step.predict(feats[mo][1:], coef)
            err = (pred - cyc[mo][1:]) / cyc[mo][1:]
            row.update(fitted_on=mo in fit_modes, model_cycles=float(pred.sum()),
                       total_error=float(pred.sum() / cyc[mo][1:].sum() - 1),
                       max_step_error=float(np.abs(err).max()), mean_step_error=float(np.abs(err).mean()))

        # ---- the whole video by the fitted model, and the speed-ups --------------------------------
        base = next(r for r in rows if r["mode"] == "dense")
        for row in rows:
            mo = row["mode"]
            man, rep = runs[mo]["manifest"], runs[mo]["replay"]
            allx = rtl_step.features(man, rep, range(man["dims"]["steps"]))
            row["video_model_cycles"] = float(rtl_step.predict(allx, coef).sum())
        for row in rows:
            row["speedup_measured"] = base["rtl_cycles"] / row["rtl_cycles"]
            row["speedup_video_model"] = base["video_model_cycles"] / row["video_model_cycles"]
        report = {"command": "nox -s step -- --calibrate", "steps": steps, "sdram_bytes_per_cycle": sdram,
                  "fit_modes": list(fit_modes), "features": list(rtl_step.FEATURES),
                  "coefficients": [float(c) for c in coef], "modes": rows}
        (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        (tmp / "report.md").write_text(render_md(report))
        plot(runs, feats, coef, tmp / "cycles.png")
    return report


def render_md(rep) -> str:
    out = [f"RTL decode steps (`{rep['command']}`): the first {rep['steps']} steps of each mode, SDRAM "
           f"{rep['sdram_bytes_per_cycle']} bytes a cycle; cycle model fitted on "
           f"{', '.join(rep['fit_modes'])}.",
           "", "| mode | RTL cycles | cycle model | worst step | RTL bytes read + written (formula) | "
           "RTL bytes, image steps | system model bytes, image steps | RTL cycles, image steps | "
           "system model compute cycles, image steps | speed-up (RTL) | speed-up, whole video (model) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rep["modes"]:
        fit = " (fitted)" if r["fitted_on"] else ""
        same = "=" if (r["read_bytes"], r["write_bytes"]) == (r["formula_read"], r["formula_write"]) else "!="
        out.append(f"| {r['mode']} | {r['rtl_cycles']:,} | {r['total_error']:+.1%}{fit} | "
                   f"{r['max_step_error']:.1%} | {r['read_bytes'] + r['write_bytes']:,} ({same}) | "
                   f"{r['rtl_image_bytes']:,} | {r['system_model_image_bytes']:,.0f} | "
                   f"{r['rtl_image_cycles']:,} | "
                   f"{r['system_model_compute_cycles']:,.0f} | {r['speedup_measured']:.2f}x | "
                   f"{r['speedup_video_model']:.2f}x |")
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
    for mode, r in runs.items():
        steps = r["rtl"]["steps"]
        line, = ax.plot(steps, r["rtl"]["cycles"], label=f"{mode} (RTL)")
        ax.plot(steps, rtl_step.predict(feats[mode], coef), "--", color=line.get_color(),
                label=f"{mode} (model)")
    ax.set_xlabel("decode step")
    ax.set_ylabel("cycles")
    ax.set_title("Whole decode steps in RTL, against the fitted cycle model")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.step.calibrate", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=85, help="steps of each trace, from the first (default 85)")
    ap.add_argument("--sdram", type=float, default=2.8,
                    help="bytes a cycle of the memory (default 2.8: the system model's 140 MB/s at 50 MHz)")
    ap.add_argument("--fit", default="dense,fastcar", help="modes the cycle model is fitted on")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "step" / "calibration")
    ap.add_argument("--force", action="store_true", help="overwrite an existing output directory")
    args = ap.parse_args(argv)
    rep = run(args.out.resolve(), steps=args.steps, sdram=args.sdram, fit_modes=args.fit.split(","),
              force=args.force)
    print(render_md(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
