"""RTL benchmark: the accelerator on decode traces exported at several tau, cycles measured.

Usage::

    python -m tb.bench [--taus=-5,-3,-1,1] [--groups first:8 | --full] [--out build/bench] [--force]

For every tau: ``sw/export_trace.py`` exports the shipped model's decode trace (the committed
``golden/fastcar`` is the point of the default operating point, ``sw.model.fastcar.DEFAULT_TAU``),
then the Verilator build of the default accelerator runs it four times without stalls, one after the
other in one simulator configured once (tb/accelerator/bench_points.py): FastCar with DRS, FastCar
with chunk round-robin (chunk ``j`` of every row on core ``j mod cores``, no scheduler), FastCar
with row-static assignment (row ``b`` on core ``b mod cores``), and dense (tau = +inf on the same
inputs, DRS). Every output is checked bit for bit, and every group's cycles against the cycle model
(``sw/perf/cycles.py``): the bench stops with the mode, group and both counts if any group is more
than 2 % off (:func:`model_check`).

Writes ``report.json``:

- ``accel``: the configuration that ran; ``macs``: its MAC units (``cfg.mac_units``); ``fmax_mhz`` and
  ``fmax_source``: the routed Fmax of ``build/synth/ulx3s_85f/report.json`` when that report names
  the same configuration (``fmax_source`` says which build it was), else ``null`` and the reason
  (:func:`synth_fmax`; the bench never synthesises);
- ``points``, one per tau: tau, replay_ratio, cycles_dense, cycles_fastcar (DRS), cycles_static
  (row-static), cycles_static_chunk (chunk round-robin), speedup = dense / fastcar, ideal = rows /
  computed rows, mac_ops = MACs done, mac_utilization = MACs done / (MAC units x cycles), gops = 2 x
  mac_ops / (cycles_fastcar / clock_mhz) in 1e9 per second, where ``clock_mhz`` is the PLL clock of
  that build if it met it (``null``, and no GOPS, otherwise: :func:`synth_clock`, the reason in
  ``clock_source``), drs_gain = static / fastcar,
  drs_gain_chunk = static_chunk / fastcar; the cycle model's totals model_cycles_fastcar,
  model_cycles_static, model_cycles_static_chunk, model_cycles_dense, cycle_model_worst_error and
  per mode cycle_model;

``report.md`` (the three schedules side by side) and ``speedup.png``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def default_taus() -> tuple[float, ...]:
    """The bench's points: the default operating point and three around it, high replay to low."""
    from sw.model.fastcar import DEFAULT_TAU

    return tuple(sorted({-5.0, -3.0, -1.0, 1.0, float(DEFAULT_TAU)}))


def export(tau: float, out: Path) -> Path:
    from sw.model.fastcar import DEFAULT_TAU

    if tau == DEFAULT_TAU:
        return REPO / "golden" / "fastcar"
    cmd = [sys.executable, str(REPO / "sw" / "export_trace.py"), f"--tau={tau}", "--out", str(out), "--force"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"tb.bench: export at tau {tau} failed:\n{r.stderr[-2000:]}")
    return out


def run_points(points: list[tuple[float, Path]], groups: str, workers: str = "auto") -> list[dict]:
    """The RTL reports of every point, each mode run as its own pytest test
    (``tb/accelerator/bench_points.py``) on ``workers`` pytest-xdist workers."""
    import shutil
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="bench-", dir=REPO / "build"))
    try:
        from tb.accelerator.bench_points import point_file, write_spec
        from tb.accelerator.runner import MODES

        spec = write_spec(out / "points.json", points, groups, out)
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", workers,
               "--dist", "worksteal", str(REPO / "tb" / "accelerator" / "bench_points.py"),
               f"--bench-points={spec}"]
        r = subprocess.run(cmd, cwd=REPO)
        if r.returncode:
            raise SystemExit(f"tb.bench: the RTL runs failed (pytest exit {r.returncode}); see above")

        reps = []
        for tau, _ in points:
            parts = [json.loads(point_file(out, tau, mode).read_text()) for mode in MODES]
            reps.append({"groups": parts[0]["groups"],
                         "modes": {m: p["modes"][m] for m, p in zip(MODES, parts, strict=True)}})
        return reps
    finally:
        shutil.rmtree(out, ignore_errors=True)


#: Largest relative difference between the cycle model and the RTL on any group of a bench point:
#: none, the model steps the RTL's control cycle for cycle (a one-cycle slip in a core's start
#: changes a group by under 1 %, so any tolerance would let it through).
MODEL_TOLERANCE = 0.0
#: The RTL run's mode -> the report's name for it.
MODE_KEYS = {"drs": "fastcar", "static": "static", "chunk_rr": "static_chunk", "dense": "dense"}
#: The synthesis report whose Fmax the bench quotes (``nox -s synth``).
SYNTH_REPORT = REPO / "build" / "synth" / "ulx3s_85f" / "report.json"


def model_check(cfg, mask, modes: dict, groups, *, where: str = "",
                tolerance: float = MODEL_TOLERANCE) -> dict:
    """The cycle model's prediction of every group of every mode, against the RTL's counters.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator that ran.
    mask : ndarray
        ``[G, B]`` replay bits of the groups that ran (the dense run replays nothing).
    modes : dict
        The RTL report's ``modes``: for ``drs``, ``chunk_rr``, ``static`` and ``dense`` (the bench
        runs all four; a mode that is absent is not checked) the measured ``cycles`` of every group.
    groups : sequence of int
        Trace group index of each row of ``mask`` (to name the worst group).
    where : str
        Prefix of the error message (the bench point).
    tolerance : float
        Largest relative error allowed on any group.

    Returns
    -------
    dict
        Per mode: ``model_total``, ``rtl_total``, ``worst_error`` and ``worst_group``.

    Raises
    ------
    SystemExit
        When some group is off by more than ``tolerance``, naming the mode, the group and both counts.
    """
    from sw.perf.cycles import trace_cycles

    out = {}
    for mode in (k for k in MODE_KEYS if k in modes):
        masks = np.zeros_like(mask) if mode == "dense" else mask
        model = trace_cycles(cfg, masks, "drs" if mode == "dense" else mode)
        rtl = np.asarray(modes[mode]["cycles"])
        if rtl.shape != model.shape:
            raise SystemExit(f"tb.bench: {where}: {mode}: {rtl.size} measured groups for "
                             f"{model.size} modelled")
        err = np.abs(model - rtl) / rtl
        w = int(np.argmax(err))
        if err[w] > tolerance:
            raise SystemExit(f"tb.bench: {where}: {mode}: the cycle model is off by {err[w]:.2%} on group "
                             f"{groups[w]} (RTL {int(rtl[w])} cycles, model {int(model[w])}); the limit is "
                             f"{tolerance:.1%}")
        out[mode] = {"model_total": int(model.sum()), "rtl_total": int(rtl.sum()),
                     "worst_error": float(err[w]), "worst_group": int(groups[w])}
    return out


def point(tau: float, trace: Path, rep: dict) -> dict:
    from sw.config import DEFAULT_ACCEL as cfg
    from sw.trace.decode import load_decode_trace

    tr = load_decode_trace(trace)
    groups = rep["groups"]
    mask = tr.replay[groups]
    rows, computed = mask.size, int((1 - mask).sum())
    m = rep["modes"]
    fast, static, chunk, dense = (m[k]["total_cycles"] for k in ("drs", "static", "chunk_rr", "dense"))
    check = model_check(cfg, mask, m, groups, where=f"tau {tau}")
    worst = max(c["worst_error"] for c in check.values())
    macs = computed * 3 * cfg.d_model * cfg.d_ff
    busy = m["drs"]["core_busy"]
    return {"drs_balance": max(busy) / (sum(busy) / len(busy)) - 1, "drs_core_busy": busy,
            "losses": losses(cfg, mask, fast, macs),
            "tau": tau, "trace": str(trace), "groups": len(groups), "rows": rows,
            "replay_ratio": float(mask.mean()), "cycles_dense": dense, "cycles_fastcar": fast,
            "cycles_static": static, "cycles_static_chunk": chunk, "speedup": dense / fast,
            "ideal": rows / max(computed, 1),
            "fraction_of_ideal": dense / fast / (rows / max(computed, 1)),
            "mac_ops": macs, "mac_utilization": macs / (cfg.mac_units * fast), "drs_gain": static / fast,
            "drs_gain_chunk": chunk / fast,
            "cycle_model_worst_error": worst,
            **{f"model_cycles_{MODE_KEYS[k]}": c["model_total"] for k, c in check.items()},
            "cycle_model": check}


def synth_fmax(cfg, path: Path | None = None) -> tuple[float | None, str]:
    """``(fmax_mhz, fmax_source)``: the routed Fmax of the synthesis report at ``path`` (default
    :data:`SYNTH_REPORT`) if it names the accelerator configuration ``cfg``; otherwise ``None`` and
    why not. ``fmax_source`` says which build it was (board top or synthesis harness) and whether it
    met its PLL clock."""
    path = Path(path or SYNTH_REPORT)
    try:
        rel = path.relative_to(REPO)
    except ValueError:
        rel = path
    if not path.is_file():
        return None, f"{rel} does not exist (nox -s synth writes it)"
    try:
        rep = json.loads(path.read_text())
        fmax = float(rep["fmax_mhz"])
    except (ValueError, KeyError, TypeError) as e:
        return None, f"{rel}: no readable fmax_mhz ({type(e).__name__}: {e})"
    if "accel" not in rep:
        return None, f"{rel} has no accelerator configuration (field 'accel')"
    if rep["accel"] != cfg.to_dict():
        diff = sorted(k for k in set(rep["accel"]) | set(cfg.to_dict())
                      if rep["accel"].get(k) != cfg.to_dict().get(k))
        return None, f"{rel} names another accelerator configuration (differs in {', '.join(diff)})"
    build = "synthesis harness" if rep.get("harness_ff_max") is not None else "board top"
    met = "timing met" if rep.get("timing_met") else "timing NOT met"
    pll = rep.get("pll_mhz")
    return fmax, (f"{rel}: {build}, clock {rep.get('clock', '?')}"
                  + (f", PLL {pll:.3f} MHz" if isinstance(pll, (int, float)) else "") + f", {met}")


def synth_clock(cfg, path: Path | None = None) -> tuple[float | None, str]:
    """``(clock_mhz, why)``: the clock the bitstream of the synthesis report at ``path`` runs at,
    its PLL clock, if that build met it (and names ``cfg``, :func:`synth_fmax`); otherwise ``None``
    and why not. A build that misses its clock has none to run at, whatever its Fmax."""
    fmax, source = synth_fmax(cfg, path)
    if fmax is None:
        return None, source
    rep = json.loads(Path(path or SYNTH_REPORT).read_text())
    pll = rep.get("pll_mhz")
    if not rep.get("timing_met") or not isinstance(pll, (int, float)):
        return None, f"timing not met ({source})"
    return float(pll), f"the PLL clock, met ({source})"


def achieved_gops(p: dict, clock_mhz: float | None) -> float | None:
    """Achieved GOPS of a bench point at a clock (:func:`synth_clock`: the met PLL clock): 2
    operations per MAC done, over the FastCar+DRS cycles at ``clock_mhz``; ``None`` without one."""
    if clock_mhz is None:
        return None
    return 2 * p["mac_ops"] / (p["cycles_fastcar"] / (clock_mhz * 1e6)) / 1e9


def losses(cfg, mask, fast: int, macs: int) -> dict:
    """Where the FastCar cycles beyond pure computation go (from the cycle model, which the RTL
    matches within ``model_check``'s tolerance).

    ``compute`` is MACs / MAC units: the cycles if every multiplier worked every cycle.
    ``all_replayed_groups`` are groups in which no row computes (front end and cache reads only).
    ``group_fill_drain`` is the rest of the computed groups' cycles: the front end before the first
    chunk, the D passes of the last chunks after their GU passes, the output stage and the reorder
    buffer; a group is one layer of one decode step and the next one needs this one's output, so
    groups cannot overlap. ``fragmentation`` would be cycles in
    which one core idles while the other computes because a row's chunks do not split evenly;
    ``weight_loading`` is 0 because the weights stay on chip.
    """
    from sw.perf.cycles import trace_cycles

    per_group = trace_cycles(cfg, mask)
    none_computed = mask.all(axis=1)
    compute = macs / cfg.mac_units
    replayed = int(per_group[none_computed].sum())
    chunks = int((1 - mask).sum()) * cfg.chunks
    chunk_time = sum(cfg.mv_blocks_per_chunk)
    frag = (chunks % cfg.cores) * chunk_time if cfg.chunks % cfg.cores else 0
    return {"compute": compute, "all_replayed_groups": replayed,
            "group_fill_drain": int(per_group[~none_computed].sum()) - compute - frag,
            "fragmentation": frag, "weight_loading": 0, "measured_total": fast,
            "model_total": int(per_group.sum())}


def write(points, out: Path) -> None:
    from sw.atomic import atomic_dir
    from sw.config import DEFAULT_ACCEL as cfg

    fmax, fmax_source = synth_fmax(cfg)
    run_mhz, run_source = synth_clock(cfg)
    for p in points:
        p["gops"] = achieved_gops(p, run_mhz)
    clock = (f"Fmax {fmax:.2f} MHz ({fmax_source})" if fmax is not None else f"Fmax not known: {fmax_source}")
    clock += (f"; GOPS at {run_mhz:.3f} MHz, {run_source}" if run_mhz is not None
              else f"; no GOPS: {run_source}")
    lines = [f"{cfg.mac_units} MAC units ({cfg.cores} cores); {clock}.", "",
             "Three schedules of the same FastCar rows: DRS (each chunk to the first free core), chunk "
             "round-robin (chunk j on core j mod cores) and row-static (row b on core b mod cores).", "",
             "| tau | replay ratio | dense cycles | FastCar+DRS | chunk-RR | row-static | speed-up | ideal "
             "| of ideal | MAC utilisation | GOPS at the met clock | chunk-RR / DRS | static / DRS "
             "| cycle model (DRS / chunk-RR / static) | model worst group |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        gops = "-" if p["gops"] is None else f"{p['gops']:.1f}"
        lines.append(f"| {p['tau']} | {p['replay_ratio']:.3f} | {p['cycles_dense']:,} "
                     f"| {p['cycles_fastcar']:,} | {p['cycles_static_chunk']:,} | {p['cycles_static']:,} "
                     f"| {p['speedup']:.2f}x | {p['ideal']:.2f}x | {p['fraction_of_ideal']:.2f} "
                     f"| {p['mac_utilization']:.2f} | {gops} "
                     f"| {p['drs_gain_chunk']:.3f} | {p['drs_gain']:.3f} "
                     f"| {p['model_cycles_fastcar']:,} / {p['model_cycles_static_chunk']:,} "
                     f"/ {p['model_cycles_static']:,} | {p['cycle_model_worst_error']:.2%} |")
    lines += ["", "Where the FastCar+DRS cycles go (cycle model; `compute` = MACs / MAC units), and how "
              "evenly DRS kept the two cores busy (busiest core / mean - 1):", "",
              "| tau | compute | all-replayed groups | group fill/drain | fragmentation | weight loading "
              "| DRS imbalance |", "|---|---|---|---|---|---|---|"]
    for p in points:
        los, tot = p["losses"], p["losses"]["model_total"]
        lines.append(f"| {p['tau']} | " + " | ".join(
            f"{los[k]:,.0f} ({los[k] / tot:.0%})" for k in
            ("compute", "all_replayed_groups", "group_fill_drain", "fragmentation", "weight_loading"))
            + f" | {p['drs_balance']:.1%} |")
    table = "\n".join(lines) + "\n"
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with atomic_dir(out, force=True) as tmp:
        report = {"accel": cfg.to_dict(), "macs": cfg.mac_units, "fmax_mhz": fmax, "fmax_source": fmax_source,
                  "clock_mhz": run_mhz, "clock_source": run_source, "points": points}
        (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        (tmp / "report.md").write_text(table)
        fig, ax = plt.subplots(figsize=(5.5, 3.4), dpi=100)
        r = np.linspace(0, 0.9, 50)
        ratio = [p["replay_ratio"] for p in points]
        ax.plot(r, 1 / (1 - r), "k--", lw=0.8, label="ideal 1/(1-r)")
        ax.plot(ratio, [p["speedup"] for p in points], "o-", label="RTL, FastCar + DRS")
        ax.plot(ratio, [p["cycles_dense"] / p["cycles_static_chunk"] for p in points], "^--", mfc="none",
                label="RTL, FastCar + chunk round-robin")
        ax.plot(ratio, [p["cycles_dense"] / p["cycles_static"] for p in points], "s:",
                label="RTL, FastCar + row-static")
        ax.set_xlabel("replay ratio r")
        ax.set_ylabel("speed-up over dense (cycles)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(tmp / "speedup.png")
        plt.close(fig)
    print(table)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--taus", default=",".join(map(str, default_taus())))
    ap.add_argument("--groups", default="first:8", help="'full' or 'first:N' (positions < N)")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "bench")
    ap.add_argument("--force", action="store_true", help="replace an existing report")
    ap.add_argument("--workers", default="auto",
                    help="pytest-xdist workers for the RTL runs (default: auto, one per core)")
    args = ap.parse_args(argv)
    try:
        taus = [float(t) for t in args.taus.split(",")]
    except ValueError:
        ap.error(f"--taus {args.taus!r}: expected comma-separated numbers")
    if (args.out / "report.json").exists() and not args.force:
        ap.error(f"{args.out}: already holds a report; pass --force to overwrite")
    groups = "full" if args.full else args.groups
    from tqdm import tqdm

    traces = [(tau, export(tau, REPO / "build" / "bench_traces" / f"tau_{tau}"))
              for tau in tqdm(taus, desc="exporting traces")]
    reps = run_points(traces, groups, args.workers)
    points = [point(tau, trace, rep) for (tau, trace), rep in zip(traces, reps, strict=True)]
    write(points, args.out)
    print(f"wrote {args.out}/report.json, report.md, speedup.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
