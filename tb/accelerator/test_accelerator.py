"""pytest driver: the whole accelerator's RTL on Verilator against a decode trace (default: the
shipped golden/fastcar), under random idle and backpressure with a random schedule for every group,
and without stalls with DRS, chunk round-robin, static assignment and a dense run compared on the
same inputs; plus planted mismatches that must be caught.

Every stall seed is its own test and its own simulator process, and so are the no-stall runs (the
four modes one after the other in one simulator, configured once), so pytest-xdist (``-n auto``)
runs them side by side; the workers share one Verilator build (``tb.runner.build``).
Each run records what it measured (``record_property("fastcar_run", ...)``), and
``conftest.py`` prints one summary table at the end of the session and checks the
modes against each other (:func:`compare_modes`).
"""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL
from tb.accelerator.runner import (  # noqa: F401
    HERE,
    MODES,
    VARIANTS,
    accel_of,
    build_dir,
    check_cycle_model,
    compare_modes,
    groups_option,
    run,
    stall_groups,
    summary,
)
from tb.golden_mutants import MUTATIONS, write_mutated_corners
from tb.runner import CocotbFailure, available_simulators

#: The directed corner-case trace (sw/trace/corners.py).
CORNERS = Path(__file__).resolve().parents[2] / "golden" / "corners"

#: In the whole test suite (``--dist loadgroup``) these tests run on one worker: the first builds the
#: simulator (minutes on a fresh clone) while the other worker runs other tests instead of waiting
#: for the build. ``nox -s sim`` (``--dist worksteal``) spreads them over every worker.
pytestmark = pytest.mark.xdist_group("accelerator")


def test_trace_under_stalls(trace_dir, request, stall_seed, record_property):
    """Every output byte, replay bit and TAS of the trace, with random idle cycles on the inputs
    (and now and then a pause of about one chunk's length), backpressure on the output (probability
    --stall; one run per seed, --seed and --seeds) and a random schedule for every group; the
    testbench's scoreboard counts rows in against rows out."""
    seed, stall = stall_seed, request.config.getoption("--stall")
    groups = stall_groups(groups_option(request))
    rep = run(accel_of(trace_dir), f"stall-{seed}", trace=trace_dir, groups=groups, seed=seed, stall=stall,
              modes=("mixed",))
    record_property("fastcar_run", summary(trace_dir, groups, rep, "mixed", seed))
    m = rep["modes"]["mixed"]
    print(f"\n{len(rep['groups'])} groups bit-exact under stalls (p={stall}, seed {seed}): "
          f"{m['rows_replayed']} rows replayed, {m['rows_computed']} computed")


#: The starved-input run: the idle probability on ``x`` (the rows arrive about ten times slower than
#: back to back, as over the board's UART, while ``y`` sees the usual backpressure), and its groups:
#: positions 0-1 of every frame and layer, whose frames 1-7 replay most rows.
STARVED_P = 0.9
STARVED_GROUPS = "first:2"


def test_trace_starved_input(trace_dir, request, record_property):
    """The input paused most of the time (idle probability :data:`STARVED_P` on ``x`` only; the
    configuration stream and ``y``'s backpressure at --stall): the engine then outputs every row it
    has of a group before the group's last row arrives (the DUT's ``cov_drained_mid_group``, which
    must be reached), where the output's end-of-group logic must not end the group early.
    Bit-exact, rows in = rows out, on :data:`STARVED_GROUPS` with a random schedule per group."""
    seed, stall = request.config.getoption("--seed"), request.config.getoption("--stall")
    rep = run(accel_of(trace_dir), f"starved-{seed}", trace=trace_dir, groups=STARVED_GROUPS, seed=seed,
              stall=stall, x_stall=STARVED_P, modes=("mixed",))
    record_property("fastcar_run", summary(trace_dir, STARVED_GROUPS, rep, "mixed", seed))
    m = rep["modes"]["mixed"]
    drained = m["coverage"]["cov_drained_mid_group"]
    n = len(rep["groups"])
    assert drained > 0, (f"the input idled with p = {STARVED_P} on {n} groups, yet the engine never "
                         f"output everything of a group before its last row arrived")
    print(f"\n{n} groups bit-exact with the input starved (p={STARVED_P} on x, {stall} on y, seed {seed}): "
          f"drained mid-group in {drained} cycles")


def test_reset_mid_frame(trace_dir, request):
    """Three resets at random cycles while groups are in flight (under random idle and
    backpressure); after each the trace's first two positions of every frame and layer run
    bit-exact from frame 0 with a fresh configuration."""
    rep = run(accel_of(trace_dir), "reset", testcase="reset_mid_frame", trace=trace_dir, groups="first:2",
              seed=request.config.getoption("--seed"), stall=request.config.getoption("--stall"), resets=3)
    assert len(rep["resets"]) == 3 and all(r["groups_after"] == len(rep["groups"]) for r in rep["resets"])
    print(f"\nresets at cycles {[r['at_cycle'] for r in rep['resets']]} "
          f"(groups finished before: {[r['groups_before'] for r in rep['resets']]}); bit-exact after each")


def test_trace_cycles(trace_dir, request, record_property):
    """No stalls, the four modes one after the other in one simulator (configured once, then only
    the control word): FastCar with DRS, with static assignment, with chunk round-robin, and dense
    (tau = +inf, same inputs); bit-exact, and every group's cycles equal to the cycle model's.
    The session summary reports each mode on its own and compares them (DRS must beat static and
    dense)."""
    groups = groups_option(request)
    rep = run(accel_of(trace_dir), "cycles", trace=trace_dir, groups=groups, modes=MODES)
    for mode in MODES:
        record_property("fastcar_run", summary(trace_dir, groups, rep, mode))
        m = rep["modes"][mode]
        print(f"\n{len(rep['groups'])} groups, {mode}: {m['total_cycles']} cycles")
        print(check_cycle_model(accel_of(trace_dir), trace_dir, rep, mode))


def test_compare_modes_catches_a_slow_drs():
    """The session's mode comparison fails when DRS loses to static or to dense."""
    compare_modes({"drs": 100, "static": 120, "dense": 400})
    with pytest.raises(AssertionError, match="static"):
        compare_modes({"drs": 130, "static": 120, "dense": 400})
    with pytest.raises(AssertionError, match="replay saved no cycles"):
        compare_modes({"drs": 400, "static": 420, "dense": 400})


def test_planted_mismatches_are_caught(tmp_path, request):
    """One changed byte of a stored output, or one flipped replay bit, must fail and be named."""
    src = Path(request.config.getoption("--trace-dir"))
    for what in ("y", "replay"):
        bad = tmp_path / what
        shutil.copytree(src, bad)
        arr = np.load(bad / f"{what}.npy")
        g = int(np.flatnonzero(np.load(bad / "group_index.npy") == 0)[5])   # layer 1, frame 1
        if what == "y":
            arr[g, 2, 17] ^= 0x04
        else:
            arr[g, 1] ^= 1
        np.save(bad / f"{what}.npy", arr)
        # A consistent trace (checksum updated), so only the comparison with the RTL can catch it.
        manifest = json.loads((bad / "manifest.json").read_text())
        manifest["tensors"][what]["sha256"] = hashlib.sha256((bad / f"{what}.npy").read_bytes()).hexdigest()
        (bad / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(CocotbFailure) as err:
            run(DEFAULT_ACCEL, f"planted-{what}", trace=bad, groups="first:1")
        msg = str(err.value)
        assert f"group {g} " in msg and "row" in msg, msg
        assert ("row 2, element 17" in msg if what == "y" else "row 1: replay bit" in msg), msg


#: The corner trace on the default geometry and on the small one (``sw.config.SMALL_ACCEL``: other
#: sizes, 3 chunks a row, so two cores can finish chunks of one row in the same cycle).
CORNER_RUNS = [
    ("corners", "verilator"), ("corners-small", "verilator"),
    # its own group: in the test suite it runs beside the Verilator runs
    pytest.param("corners-small", "icarus", marks=pytest.mark.xdist_group("icarus")),
]


@pytest.mark.parametrize("trace,sim", CORNER_RUNS)
def test_corner_trace(trace, sim, request, record_property):
    """A corner-case trace (golden/corners and golden/corners-small: every tie, saturation and
    replay boundary), whole, bit-exact under random idle and backpressure with a random schedule
    per group; Icarus, the second simulator, runs the small geometry's."""
    if sim not in available_simulators():
        pytest.skip(f"{sim} is not installed (.ci/run installs Icarus where it can)")
    seed, stall = request.config.getoption("--seed"), request.config.getoption("--stall")
    trace_dir = CORNERS.parent / trace
    cfg = accel_of(trace_dir)
    rep = run(cfg, f"{trace}-{sim}", sim=sim, trace=trace_dir, groups="full", seed=seed, stall=stall,
              modes=("mixed",))
    m = rep["modes"]["mixed"]
    if sim == "verilator":
        record_property("fastcar_run", summary(trace_dir, "full", rep, "mixed", seed))
    assert m["rows_checked"] == 4 * len(rep["groups"]) == 512
    print(f"\n{trace} on {sim}: {len(rep['groups'])} groups bit-exact under stalls (p={stall}), "
          f"{m['rows_replayed']} rows replayed, {m['rows_computed']} computed; coverage {m['coverage']}")


@pytest.mark.parametrize("name", MUTATIONS)
def test_golden_rule_changes_fail_the_rtl_comparison(name, tmp_path):
    """With one rule changed in the golden model only (ties away from zero or half up, > for >=,
    max_chain or refresh_every off by one), the corner trace's expected outputs change and the
    RTL comparison fails, naming the group and the rule's class."""
    bad = write_mutated_corners(tmp_path / name, name)
    with pytest.raises(CocotbFailure) as err:
        run(DEFAULT_ACCEL, f"golden-{name}", trace=bad, groups="full")
    msg = str(err.value)
    assert "group " in msg and "the group exercises" in msg and MUTATIONS[name][2] in msg, msg
    print(f"\n{name}: {msg.splitlines()[1][:300]}")
