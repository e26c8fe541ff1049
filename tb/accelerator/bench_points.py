"""The RTL runs of ``python -m tb.bench``: one pytest test per tau (its modes one after the other in
one simulator, configured once), so that pytest-xdist runs the points side by side. Not collected
by the test suite; ``tb.bench`` runs this file with ``--bench-points FILE``, a JSON file naming the
points to measure (``points`` = ``[[tau, trace_dir], ...]``, ``groups``, ``out``: :func:`write_spec`),
and assembles ``out/point-<tau>-<mode>.json`` into its report."""

import json
import shutil
from pathlib import Path

from sw.config import DEFAULT_ACCEL
from sw.jsonio import read_json
from tb.accelerator.runner import MODES, run


def point_file(out, tau: float, mode: str) -> Path:
    return Path(out) / f"point-{tau}-{mode}.json"


def write_spec(path: Path, points, groups: str, out: Path) -> Path:
    """The file of ``--bench-points``: ``points`` (``(tau, trace_dir)`` pairs), the trace's ``groups``
    and the directory ``out`` the reports go to."""
    spec = {"points": [[float(tau), str(trace)] for tau, trace in points], "groups": groups, "out": str(out)}
    Path(path).write_text(json.dumps(spec) + "\n")
    return Path(path)


def read_spec(path) -> dict:
    """The ``--bench-points`` file, or one error naming it and what is wrong."""
    spec = read_json(path, ValueError, "bench points")
    missing = sorted({"points", "groups", "out"} - set(spec))
    if missing:
        raise ValueError(f"{path}: no field(s) {missing}")
    return spec


def pytest_generate_tests(metafunc):
    """One test per point of the ``--bench-points`` file (none without one)."""
    path = metafunc.config.getoption("--bench-points")
    spec = read_spec(path) if path else {"points": []}
    metafunc.parametrize("tau,trace", [tuple(p) for p in spec["points"]], ids=lambda v: str(v))


def test_bench_point(tau, trace, request):
    """Every mode of one bench point, bit-exact (one report per mode in the bench's directory)."""
    spec = read_spec(request.config.getoption("--bench-points"))
    rep = run(DEFAULT_ACCEL, f"bench-{tau}", trace=trace, groups=spec["groups"], modes=MODES)
    for mode in MODES:
        dst = point_file(spec["out"], tau, mode)
        tmp = dst.with_suffix(".tmp")
        tmp.write_text(json.dumps({**rep, "modes": {mode: rep["modes"][mode]}}))
        shutil.move(tmp, dst)
