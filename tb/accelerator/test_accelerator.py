"""pytest driver: the whole accelerator's RTL on Verilator against a decode trace (default: the
shipped golden/fastcar), under random idle and backpressure, with DRS, static assignment and a
dense run compared on the same inputs; plus planted mismatches that must be caught."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from hw.accelerator import Accelerator
from hw.axis_adapter import AxisAdapter
from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.decode_trace import load_decode_trace
from sw.perfmodel import trace_cycles
from tb.runner import BUILD, CocotbFailure, run_cocotb

HERE = Path(__file__).resolve().parent


def run(cfg: AccelConfig, env: dict, tag: str, testcase="run_trace"):
    key = hashlib.sha1(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:8]
    build_dir = BUILD / "accelerator" / f"verilator-{key}"
    report = build_dir / f"cycles-{tag}.json"
    env = {"FASTCAR_ACCEL": json.dumps(cfg.to_dict()), "FASTCAR_REPORT": str(report), **env}
    run_cocotb(lambda: AxisAdapter(Accelerator(cfg)), toplevel="accelerator_axis",
               test_module="cocotb_accelerator", test_dir=HERE, build_dir=build_dir, sim="verilator",
               env=env, results_name=f"results-{tag}.xml", testcase=testcase)
    return json.loads(report.read_text())


def groups_option(request):
    return "full" if request.config.getoption("--full") else request.config.getoption("--groups")


def test_trace_under_stalls(trace_dir, request, stall_seed):
    """Every output byte and replay bit of the trace, with random idle cycles on the inputs and
    backpressure on the output (probability --stall; one run per seed, --seed and --seeds); the
    testbench's scoreboard counts rows in against rows out."""
    seed, stall = stall_seed, request.config.getoption("--stall")
    rep = run(DEFAULT_ACCEL, {"FASTCAR_TRACE": str(trace_dir), "FASTCAR_GROUPS": groups_option(request),
                              "FASTCAR_SEED": str(seed), "FASTCAR_STALL": str(stall),
                              "FASTCAR_MODES": "drs"}, f"stall-{seed}")
    m = rep["modes"]["drs"]
    print(f"\n{len(rep['groups'])} groups bit-exact under stalls (p={stall}, seed {seed}): "
          f"{m['rows_replayed']} rows replayed, {m['rows_computed']} computed")


def test_reset_mid_frame(trace_dir, request):
    """Three resets at random cycles while groups are in flight (under random idle and
    backpressure); after each the trace's first two positions of every frame and layer run
    bit-exact from frame 0 with a fresh configuration."""
    rep = run(DEFAULT_ACCEL, {"FASTCAR_TRACE": str(trace_dir), "FASTCAR_GROUPS": "first:2",
                              "FASTCAR_SEED": str(request.config.getoption("--seed")),
                              "FASTCAR_STALL": str(request.config.getoption("--stall")),
                              "FASTCAR_RESETS": "3"}, "reset", testcase="reset_mid_frame")
    assert len(rep["resets"]) == 3 and all(r["groups_after"] == len(rep["groups"]) for r in rep["resets"])
    print(f"\nresets at cycles {[r['at_cycle'] for r in rep['resets']]} "
          f"(groups finished before: {[r['groups_before'] for r in rep['resets']]}); bit-exact after each")


def test_trace_cycles(trace_dir, request):
    """No stalls: DRS, static assignment and a dense run (tau = +inf) of the same inputs, all
    bit-exact; prints the cycle counts, and DRS must beat static."""
    rep = run(DEFAULT_ACCEL, {"FASTCAR_TRACE": str(trace_dir), "FASTCAR_GROUPS": groups_option(request),
                              "FASTCAR_MODES": "drs,static,dense"}, "cycles")
    drs, static, dense = (rep["modes"][k] for k in ("drs", "static", "dense"))
    n = len(rep["groups"])
    print(f"\n{n} groups: FastCar+DRS {drs['total_cycles']} cycles, static {static['total_cycles']}, "
          f"dense {dense['total_cycles']}; "
          f"speed-up over dense {dense['total_cycles'] / drs['total_cycles']:.3f}x, "
          f"static takes {static['total_cycles'] / drs['total_cycles'] - 1:.1%} more than DRS")
    assert drs["total_cycles"] < static["total_cycles"], "DRS is not faster than static assignment"
    assert drs["total_cycles"] < dense["total_cycles"], "replay saved no cycles"
    # The cycle model (sw/perfmodel.py, docs/architecture.md) against the RTL, group by group.
    tr = load_decode_trace(trace_dir)
    for mode, m in rep["modes"].items():
        masks = tr.replay[rep["groups"]] if mode != "dense" else np.zeros((n, tr.dims["batch"]), int)
        model = trace_cycles(DEFAULT_ACCEL, masks, static=(mode == "static"))
        err = np.abs(model - np.array(m["cycles"])) / np.array(m["cycles"])
        worst = int(np.argmax(err))
        print(f"cycle model, {mode}: worst group {rep['groups'][worst]} measured {m['cycles'][worst]}, "
              f"model {model[worst]} ({err[worst]:.2%}); total {model.sum()} vs {m['total_cycles']}")
        assert err[worst] <= 0.02, f"{mode}: the cycle model is off by {err[worst]:.1%} on group " \
                                   f"{rep['groups'][worst]}"


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
            run(DEFAULT_ACCEL, {"FASTCAR_TRACE": str(bad), "FASTCAR_GROUPS": "first:1"}, f"planted-{what}")
        assert "row" in str(err.value) and ("element 17" in str(err.value) if what == "y"
                                            else "replay bit" in str(err.value)), str(err.value)
