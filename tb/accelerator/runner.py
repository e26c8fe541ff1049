"""The accelerator's testbench runner: build the whole accelerator behind its AXI-Stream adapter on
a simulator and run its cocotb test on a decode trace, and what its runs report (the summary, the
cycle model's check, the modes compared). The tests (``test_accelerator.py``), the session summary
(``conftest.py``) and the tools (``tb/bench.py``, ``tb/simspeed.py``, ``bench_points.py``) import
them from here."""

import hashlib
import json
from pathlib import Path

import numpy as np

from hw.accel.accelerator import Accelerator
from hw.lib.axis_adapter import AxisAdapter
from sw.config import AccelConfig, BenchConfig, trace_accel
from sw.perf.cycles import trace_cycles
from sw.trace.decode import load_decode_trace
from sw.trace.format import read_manifest
from tb.runner import BUILD, run_cocotb

HERE = Path(__file__).resolve().parent


#: The no-stall runs, in the order one simulator runs them (static after DRS: a core's accumulators
#: then hold rows that the static schedule never gives it).
MODES = ("drs", "static", "chunk_rr", "dense")


def build_dir(cfg: AccelConfig, variant: str = "", sim: str = "verilator") -> Path:
    key = hashlib.sha1(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    return BUILD / "accelerator" / f"{sim}-{key}{variant}"


#: Simulator builds: the one the tests use, and two for measuring what its options bring
#: (``python -m tb.simspeed --compare``): cocotb's default (every signal public, Verilator's default
#: optimisation), and only the ports public without the further options.
VARIANTS = {"": {"public": "ports"}, "-cocotb-default": {"public": "all", "fast": False},
            "-ports-only": {"public": "ports", "fast": False}}


def run(cfg: AccelConfig, tag: str, testcase="run_trace", variant: str = "", sim: str = "verilator",
        **fields) -> dict:
    """The accelerator ``cfg`` (with its coverage counters) on ``sim``: the cocotb test ``testcase`` of
    ``cocotb_accelerator.py``, configured by ``fields`` (:class:`sw.config.BenchConfig`'s: ``trace``,
    ``groups``, ``seed``, ``stall``, ``x_stall``, ``modes``, ``resets``, ``cycles``, ``log_every``);
    ``tag`` names the run's files in the build directory (``variant``: :data:`VARIANTS`). Returns the
    run's report (what it measured)."""
    report = build_dir(cfg, variant, sim) / f"cycles-{tag}.json"
    bench = BenchConfig(accel=cfg, report=report, **fields)
    opts = VARIANTS[variant] if sim == "verilator" else {}
    run_cocotb(lambda: AxisAdapter(Accelerator(cfg, coverage=True)), toplevel="accelerator_axis",
               test_module="cocotb_accelerator", test_dir=HERE, build_dir=build_dir(cfg, variant, sim),
               sim=sim, bench=bench, tag=tag, testcase=testcase,
               key={**cfg.to_dict(), "coverage": True}, **opts)
    return json.loads(report.read_text())


def accel_of(trace_dir) -> AccelConfig:
    """The accelerator the trace is built for (``sw.config.trace_accel``)."""
    return trace_accel(read_manifest(Path(trace_dir)))


def groups_option(request):
    return "full" if request.config.getoption("--full") else request.config.getoption("--groups")


def stall_groups(groups: str) -> str:
    """The stall runs' selection: for ``first:N`` (the default ``first:8``) ``cover:N``, which adds
    frames 0 and 1 of every other position (``sw.trace.decode.select_groups``), so that the default
    session touches every position, layer and row; any other selection as it is."""
    kind, *nums = groups.split(":")
    return f"cover:{nums[0]}" if kind == "first" and len(nums) == 1 else groups


def summary(trace_dir, groups: str, rep: dict, mode: str, seed=None) -> str:
    """What one run measured, as JSON for the session summary (conftest.py); ``starved`` marks a run
    whose input idles more often than the other streams stall (:func:`test_trace_starved_input`)."""
    m = rep["modes"][mode]
    tr = load_decode_trace(trace_dir)
    where = {"positions": sorted({int(i) for i in tr.group_index[rep["groups"]]}),
             "layers": sorted({int(i) for i in tr.group_layer[rep["groups"]]}), "rows": tr.dims["batch"]}
    x_stall = rep.get("x_stall", rep["stall"])
    return json.dumps({"trace": str(trace_dir), **where, "groups": groups, "mode": mode, "seed": seed,
                       "stall": rep["stall"], "x_stall": x_stall, "starved": x_stall > rep["stall"],
                       "n_groups": len(rep["groups"]),
                       **{k: m[k] for k in ("total_cycles", "rows_replayed", "rows_computed", "rows_checked",
                                            "sim_cycles", "wall_s", "cpu_s", "quiet_cycles", "quiet_cpu_s",
                                            "config_cycles", "config_cpu_s", "coverage", "schedules")}})


def check_cycle_model(cfg: AccelConfig, trace_dir, rep: dict, mode: str, tolerance: float = 0.0) -> str:
    """The cycle model (sw/perf/cycles.py, docs/architecture.md) against the RTL, group by group;
    AssertionError naming the worst group when it is off by more than ``tolerance``."""
    tr = load_decode_trace(trace_dir)
    m, groups = rep["modes"][mode], rep["groups"]
    n = len(groups)
    masks = tr.replay[groups] if mode != "dense" else np.zeros((n, tr.dims["batch"]), int)
    model = trace_cycles(cfg, masks, "drs" if mode == "dense" else mode)
    err = np.abs(model - np.array(m["cycles"])) / np.array(m["cycles"])
    worst = int(np.argmax(err))
    assert err[worst] <= tolerance, (f"{mode}: the cycle model is off by {err[worst]:.1%} on group "
                                     f"{groups[worst]} (RTL {m['cycles'][worst]}, model {model[worst]})")
    return (f"cycle model, {mode}: worst group {groups[worst]} measured {m['cycles'][worst]}, "
            f"model {model[worst]} ({err[worst]:.2%}); total {model.sum()} vs {m['total_cycles']}")


def compare_modes(total: dict) -> None:
    """DRS against static and dense on the same groups (``total[mode]`` = the RTL's cycles):
    AssertionError unless FastCar with DRS is faster than both."""
    drs, static, dense = (total[k] for k in ("drs", "static", "dense"))
    assert drs < static, f"DRS is not faster than static assignment ({drs} cycles against {static})"
    assert drs < dense, f"replay saved no cycles ({drs} cycles against {dense} dense)"
