"""Repository-wide pytest options: ``--trace-dir`` picks the trace that the RTL is checked on."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
GOLDEN = REPO / "golden" / "gemm_tile"
FASTCAR = REPO / "golden" / "fastcar"


def pytest_addoption(parser):
    parser.addoption("--trace-dir", default=str(FASTCAR),
                     help="trace directory for the RTL regression (default: golden/fastcar)")
    parser.addoption("--groups", default="first:8",
                     help="groups of the trace for the accelerator regression: 'full' or 'first:N' "
                          "(positions < N of every frame and layer; default first:8)")
    parser.addoption("--full", action="store_true", help="the whole trace (same as --groups full)")
    parser.addoption("--seed", type=int, default=1, help="seed of the random idle/backpressure")
    parser.addoption("--seeds", type=int, default=3,
                     help="run the stall regression under this many seeds: --seed, --seed + 1, ... "
                          "(default 3, which the test suite and CI run)")
    parser.addoption("--stall", type=float, default=0.3,
                     help="probability of an idle or backpressure cycle on every stream")


def pytest_generate_tests(metafunc):
    if "stall_seed" in metafunc.fixturenames:
        first, n = metafunc.config.getoption("--seed"), metafunc.config.getoption("--seeds")
        if n < 1:
            raise pytest.UsageError(f"--seeds must be at least 1, not {n}")
        metafunc.parametrize("stall_seed", range(first, first + n), ids=lambda s: f"seed{s}")


@pytest.fixture(scope="session")
def golden_dir():
    return GOLDEN


@pytest.fixture(scope="session")
def trace_dir(request):
    from sw.decode_trace import load_decode_trace
    from sw.trace import TraceError, load_trace, trace_kind

    d = Path(request.config.getoption("--trace-dir")).resolve()
    try:
        load_decode_trace(d) if trace_kind(d) == "fastcar_decode" else load_trace(d)
    except TraceError as e:
        raise pytest.UsageError(f"--trace-dir: {e}") from None
    return d
