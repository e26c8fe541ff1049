"""Repository-wide pytest options: ``--trace-dir`` picks the trace that the RTL is checked on;
``--waves`` dumps waveforms."""

import contextlib
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
FASTCAR = REPO / "golden" / "fastcar"


def pytest_addoption(parser):
    parser.addoption("--trace-dir", default=str(FASTCAR),
                     help="trace directory for the RTL regression (default: golden/fastcar)")
    parser.addoption("--groups", default="first:8",
                     help="groups of the trace for the accelerator regression: 'full' or 'first:N' "
                          "(positions < N of every frame and layer; default first:8)")
    parser.addoption("--full", action="store_true", help="the whole trace (same as --groups full)")
    parser.addoption("--step-trace", default=None,
                     help="full-step trace for the step testbenches (tb/step; default: one exported from "
                          "the test checkpoint)")
    parser.addoption("--seed", type=int, default=1, help="seed of the random idle/backpressure")
    parser.addoption("--seeds", type=int, default=3,
                     help="run the stall regression under this many seeds: --seed, --seed + 1, ... "
                          "(default 3, which the test suite and CI run)")
    parser.addoption("--stall", type=float, default=0.3,
                     help="probability of an idle or backpressure cycle on every stream")
    parser.addoption("--waves", action="store_true",
                     help="dump waveforms (the same as WAVES=1): every cocotb run (Verilator: dump.vcd in "
                          "the testbench's directory), the register slice's amaranth.sim runs into build/vcd")
    parser.addoption("--formal-deep", action="store_true",
                     help="tests/formal: the properties that have one at their longer depth (minutes)")
    parser.addoption("--bench-points", default=None, metavar="FILE",
                     help="tb/accelerator/bench_points.py: the points to measure (python -m tb.bench "
                          "writes it)")


def pytest_configure(config):
    if config.getoption("--waves"):
        # cocotb's own switch, which tb.runner and cocotb's runner read, here and in every worker.
        from tb.runner import WAVES_ENV

        os.environ[WAVES_ENV] = "1"


def pytest_generate_tests(metafunc):
    if "stall_seed" in metafunc.fixturenames:
        first, n = metafunc.config.getoption("--seed"), metafunc.config.getoption("--seeds")
        if n < 1:
            raise pytest.UsageError(f"--seeds must be at least 1, not {n}")
        metafunc.parametrize("stall_seed", range(first, first + n), ids=lambda s: f"seed{s}")


#: Environment variables that choose the tools a test's own process runs: amaranth takes ``YOSYS``
#: (and so the Verilog that ``verilog.convert`` writes) from there, so one test that set it would
#: change what every later test on the same worker builds.
TOOL_ENV = ("YOSYS", "NEXTPNR_ECP5", "ECPPACK", "OPENFPGALOADER", "AMARANTH_USE_YOSYS")


@contextlib.contextmanager
def tool_env_kept():
    """Raise ``AssertionError`` if the block leaves a :data:`TOOL_ENV` variable changed (after
    putting it back, so that one leak is not blamed on every later test)."""
    before = {k: os.environ.get(k) for k in TOOL_ENV}
    yield
    changed = sorted(k for k in TOOL_ENV if os.environ.get(k) != before[k])
    for k in changed:
        if before[k] is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = before[k]
    assert not changed, f"the test left {', '.join(changed)} changed in the worker's environment"


@pytest.fixture(autouse=True)
def tools_left_alone():
    """A test that leaves the tool variables changed fails (give a subprocess its own ``env``)."""
    with tool_env_kept():
        yield


@pytest.fixture(scope="session")
def trace_dir(request):
    from sw.trace.decode import load_decode_trace
    from sw.trace.store import TraceError

    d = Path(request.config.getoption("--trace-dir")).resolve()
    try:
        load_decode_trace(d)
    except TraceError as e:
        raise pytest.UsageError(f"--trace-dir: {e}") from None
    return d


# --- the session summary of the accelerator runs ------------------------------------------------
# Each accelerator simulation (tb/accelerator/test_accelerator.py) records what it measured as the
# user property "fastcar_run"; pytest-xdist sends the properties back to the controlling process,
# where these hooks collect them, compare the modes and print one table at the end.

_runs: list[dict] = []
_summary: list[str] = []


def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        import json

        for name, value in report.user_properties:
            if name == "fastcar_run":
                _runs.append(json.loads(value))


def pytest_sessionstart(session):
    import time

    session.config._fastcar_t0 = time.perf_counter()


def accelerator_summary(runs: list[dict], wall_s: float) -> tuple[list[str], str | None]:
    """Table lines of the accelerator runs of a session, and the failure of the mode comparison
    (None when DRS beats static and dense, or when not all three ran on the same groups)."""
    from tb.accelerator.runner import compare_modes

    runs = sorted(runs, key=lambda r: (r["trace"], r["seed"] is None, r["mode"], r["seed"] or 0))
    lines = [f"{'trace':<15}{'run':<16}{'groups':>7}{'rows checked':>14}{'DUT cycles':>12}{'sim cycles':>12}"
             f"{'wall s':>8}{'cycles/s':>10}{'of model':>10}"]
    for r in runs:
        name = (f"{'starved' if r.get('starved') else 'stalls'} seed {r['seed']}" if r["seed"] is not None
                else r["mode"])
        lines.append(f"{Path(r['trace']).name:<15}{name:<16}{r['n_groups']:>7}{r['rows_checked']:>14,}{r['total_cycles']:>12,}"
                     f"{r['sim_cycles']:>12,}{r['wall_s']:>8.1f}{r['sim_cycles'] / r['wall_s']:>10,.0f}"
                     f"{_of_model(r):>10}")
    failure = None
    nostall = {}
    for r in runs:
        if r["seed"] is None:
            nostall.setdefault((r["trace"], r["groups"]), {})[r["mode"]] = r
    for (trace, groups), modes in nostall.items():
        if not {"drs", "static", "dense"} <= set(modes):
            continue
        drs, static, dense = (modes[k]["total_cycles"] for k in ("drs", "static", "dense"))
        rows = modes["drs"]["rows_replayed"] + modes["drs"]["rows_computed"]
        ideal = rows / max(modes["drs"]["rows_computed"], 1)
        lines.append(f"{trace} ({groups}): FastCar+DRS {drs:,} cycles, static {static:,} "
                     f"({static / drs - 1:+.1%}), dense {dense:,}; speed-up {dense / drs:.2f}x "
                     f"(ideal rows / computed rows {ideal:.2f}x)")
        try:
            compare_modes({"drs": drs, "static": static, "dense": dense})
        except AssertionError as e:
            failure = f"{trace} ({groups}): {e}"
    for trace in sorted({r["trace"] for r in runs}):
        mine = [r for r in runs if r["trace"] == trace and "coverage" in r]
        if not mine:
            continue
        cov = {k: (max if k.endswith("_peak") else sum)(r["coverage"][k] for r in mine)
               for k in mine[0]["coverage"]}
        pos = sorted({p for r in mine for p in r.get("positions", [])})
        lay = sorted({n for r in mine for n in r.get("layers", [])})
        lines.append(f"{Path(trace).name}: {len(pos)} positions ({_ranges(pos)}), {len(lay)} layers, "
                     f"{mine[0].get('rows', '?')} rows; coverage, cycles in which each held over its runs: "
                     + ", ".join(f"{k.removeprefix('cov_')} {v:,}" for k, v in cov.items()))
        from hw.accel.accelerator import NEVER_EVENTS, STARVED_EVENTS

        # The stall runs must reach every event but those only a starved-input run reaches (the
        # others never idle the input long enough), and a starved-input run must reach those.
        stalls = any(r["seed"] is not None and r["stall"] > 0 and not r.get("starved") for r in mine)
        starved = any(r.get("starved") for r in mine)
        missed = [k for k, v in cov.items() if v == 0 and k not in NEVER_EVENTS
                  and (starved if k in STARVED_EVENTS else stalls)]
        broken = [k for k in NEVER_EVENTS if cov.get(k)]
        if missed:
            failure = (f"{trace}: the runs never reached {', '.join(missed)} "
                       f"(the stall runs are meant to reach every coverage event, the starved-input "
                       f"run {', '.join(STARVED_EVENTS)})")
        if broken:
            failure = f"{trace}: {', '.join(broken)} must stay 0 and did not"
    seeds = sorted(r["seed"] for r in runs if r["seed"] is not None and not r.get("starved"))
    starved = sorted(r["seed"] for r in runs if r.get("starved"))
    sim = sum(r["sim_cycles"] for r in runs)
    busy = sum(r["wall_s"] for r in runs)
    which = [f"stall seeds {', '.join(map(str, seeds))}"] if seeds else []
    if starved:
        which.append(f"starved-input seed{'s' if len(starved) > 1 else ''} {', '.join(map(str, starved))}")
    lines.append(f"{sum(r['rows_checked'] for r in runs):,} rows checked bit-exact in {len(runs)} runs"
                 + (f" ({'; '.join(which)})" if which else "")
                 + f"; {sim:,} cycles simulated in {wall_s:.0f} s of session wall time; "
                 f"{sim / busy:,.0f} cycles/s per simulator, {sim / wall_s:,.0f} cycles/s in all")
    return lines, failure


def _of_model(r: dict) -> str:
    """A no-stall run's speed as a fraction of the simulator's own speed in its model-only stretches
    (no testbench Python runs there)."""
    if r["seed"] is not None or not r.get("quiet_cpu_s") or not r.get("cpu_s"):
        return ""
    return f"{(r['sim_cycles'] / r['cpu_s']) / (r['quiet_cycles'] / r['quiet_cpu_s']):.0%}"


def _ranges(values: list[int]) -> str:
    """``0-7, 9, 12-63`` for a sorted list of integers."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ", ".join(out)


def pytest_sessionfinish(session, exitstatus):
    import time

    if not _runs or hasattr(session.config, "workerinput"):
        return
    wall = time.perf_counter() - getattr(session.config, "_fastcar_t0", time.perf_counter())
    lines, failure = accelerator_summary(_runs, wall)
    _summary[:] = lines
    if failure:
        _summary.append(f"FAILED: {failure}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _summary:
        terminalreporter.write_sep("=", "accelerator runs")
        for line in _summary:
            terminalreporter.write_line(line)
