"""Simulation speed benchmark: the Verilated accelerator alone against the testbench, side by side.

Usage::

    python -m tb.simspeed [--cycles 200000] [--groups first:8] [--repeat 3] [--compare]
                          [--out build/simspeed] [--force]

For the simulator build the tests use, one after the other in the same session:

- ``raw``: the model alone (``raw_model`` in ``tb/accelerator/cocotb_accelerator.py``: the clock and
  one long timer, inputs idle, no Python in between);
- ``dense`` and ``drs``: the testbench's no-stall runs of the default subset of ``golden/fastcar``
  (every output byte, replay bit and counter checked), as ``nox -s sim`` runs them.

Speeds are simulated cycles per CPU second of the simulator process (wall seconds too; on a shared
machine the CPU figure is the steadier one), the fastest of ``--repeat`` runs of each kind, and each
testbench run as a fraction of the raw model. The testbench runs also time their model-only
stretches (from a group's last input row to its output: no testbench Python runs), which is the
simulator's own speed under the run's activity; a busy model is slower than an idle one.
``--compare`` measures the same on two more builds, to show what the chosen Verilator options bring:
cocotb's default (``--public-flat-rw``, Verilator's default optimisation) and only the top level's
ports public without the further options. Each build takes some minutes the first time.

Writes ``report.json`` and ``report.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

NAMES = {"": "ports public, -O3 --x-assign fast --x-initial fast --noassert, OPT_FAST=-O2 (used)",
         "-cocotb-default": "cocotb default: --public-flat-rw, Verilator's default optimisation",
         "-ports-only": "ports public, Verilator's default optimisation"}


def best(runs: list[dict]) -> dict:
    """The run with the least CPU time: on a shared machine, the others were slowed by it."""
    return min(runs, key=lambda r: r["cpu_s"])


def measure(variant: str, cycles: int, groups: str, repeat: int = 1) -> dict:
    from sw.config import DEFAULT_ACCEL as cfg
    from tb.accelerator.runner import run

    raw = best([run(cfg, "raw", testcase="raw_model", variant=variant, cycles=cycles)
                for _ in range(repeat)])
    out = {"raw": raw}
    for mode in ("dense", "drs"):
        m = best([run(cfg, f"speed-{mode}", variant=variant, trace=REPO / "golden" / "fastcar", groups=groups,
                      modes=(mode,))["modes"][mode]
                  for _ in range(repeat)])
        out[mode] = {k: m[k] for k in ("sim_cycles", "wall_s", "cpu_s", "rows_checked", "total_cycles",
                                       "config_cycles", "config_cpu_s")}
        out[mode]["config_us_per_word"] = 1e6 * m["config_cpu_s"] / m["config_cycles"]
        out[f"{mode}: model-only stretches"] = {"sim_cycles": m["quiet_cycles"], "cpu_s": m["quiet_cpu_s"],
                                                "wall_s": m["quiet_cpu_s"]}
    for v in out.values():
        v["cycles_per_cpu_s"] = v["sim_cycles"] / v["cpu_s"]
        v["cycles_per_wall_s"] = v["sim_cycles"] / v["wall_s"]
    for mode in ("dense", "drs"):
        out[mode]["of_raw"] = out[mode]["cycles_per_cpu_s"] / out["raw"]["cycles_per_cpu_s"]
        quiet = out[f"{mode}: model-only stretches"]["cycles_per_cpu_s"]
        out[mode]["of_model_in_run"] = out[mode]["cycles_per_cpu_s"] / quiet
    return out


def table(results: dict) -> str:
    lines = ["| build | run | simulated cycles | cycles / CPU s | cycles / wall s | of the raw model (idle) "
             "| of the model-only stretches of the same run |", "|---|---|---|---|---|---|---|"]
    for variant, res in results.items():
        for run_name, r in res.items():
            frac = f"{r['of_raw']:.0%}" if "of_raw" in r else ""
            frac2 = f"{r['of_model_in_run']:.0%}" if "of_model_in_run" in r else ""
            wall = f"{r['cycles_per_wall_s']:,.0f}" if "stretches" not in run_name else ""
            lines.append(f"| {NAMES[variant]} | {run_name} | {r['sim_cycles']:,} "
                         f"| {r['cycles_per_cpu_s']:,.0f} | {wall} | {frac} | {frac2} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.simspeed", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, default=200_000, help="cycles of the raw-model run")
    ap.add_argument("--groups", default="first:8", help="trace groups of the testbench runs")
    ap.add_argument("--compare", action="store_true", help="also measure the two reference builds")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each kind; the fastest counts (default 3)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "simspeed")
    ap.add_argument("--force", action="store_true", help="replace an existing report")
    args = ap.parse_args(argv)
    if args.cycles < 1000:
        ap.error(f"--cycles {args.cycles}: at least 1000")
    if (args.out / "report.json").exists() and not args.force:
        ap.error(f"{args.out}: already holds a report; pass --force to overwrite")
    from tqdm import tqdm

    from sw.atomic import atomic_dir

    variants = list(NAMES) if args.compare else [""]
    if args.repeat < 1:
        ap.error(f"--repeat {args.repeat}: at least 1")
    results = {v: measure(v, args.cycles, args.groups, args.repeat)
               for v in tqdm(variants, desc="simulator builds")}
    text = table(results)
    with atomic_dir(args.out, force=True) as tmp:
        report = {"groups": args.groups, "results": results}
        (tmp / "report.json").write_text(json.dumps(report, indent=1) + "\n")
        (tmp / "report.md").write_text(text)
    print(text)
    for v, res in results.items():
        print(f"{NAMES[v]}: configuration {res['drs']['config_us_per_word']:.1f} us of CPU per word "
              f"(DRS run), idle raw model {1e6 / res['raw']['cycles_per_cpu_s']:.1f} us per cycle")
    print(f"wrote {args.out}/report.json and report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
