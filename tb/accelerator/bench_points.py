"""The RTL runs of ``python -m tb.bench``: one pytest test per tau (its modes one after the other in
one simulator, configured once), so that pytest-xdist runs the points side by side. Not collected
by the test suite; ``tb.bench`` runs this file with the points to measure in ``FASTCAR_BENCH``
(JSON: ``points`` = ``[[tau, trace_dir], ...]``, ``groups``, ``out``) and assembles
``out/point-<tau>-<mode>.json`` into its report."""

import json
import os
import shutil
from pathlib import Path

import pytest

from sw.config import DEFAULT_ACCEL
from tb.accelerator.runner import MODES, run

SPEC = json.loads(os.environ.get("FASTCAR_BENCH", '{"points": [], "groups": "first:8", "out": ""}'))


def point_file(out, tau: float, mode: str) -> Path:
    return Path(out) / f"point-{tau}-{mode}.json"


@pytest.mark.parametrize("tau,trace", [tuple(p) for p in SPEC["points"]], ids=lambda v: str(v))
def test_bench_point(tau, trace):
    """Every mode of one bench point, bit-exact (one report per mode in the bench's directory)."""
    rep = run(DEFAULT_ACCEL, {"FASTCAR_TRACE": str(trace), "FASTCAR_GROUPS": SPEC["groups"],
                              "FASTCAR_MODES": ",".join(MODES)}, f"bench-{tau}")
    for mode in MODES:
        dst = point_file(SPEC["out"], tau, mode)
        tmp = dst.with_suffix(".tmp")
        tmp.write_text(json.dumps({**rep, "modes": {mode: rep["modes"][mode]}}))
        shutil.move(tmp, dst)
