"""Repository-wide pytest options: ``--trace-dir`` picks the trace that the RTL is checked on."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
GOLDEN = REPO / "golden" / "gemm_tile"


def pytest_addoption(parser):
    parser.addoption("--trace-dir", default=str(GOLDEN),
                     help="trace directory for the RTL regression (default: golden/gemm_tile)")


@pytest.fixture(scope="session")
def golden_dir():
    return GOLDEN


@pytest.fixture(scope="session")
def trace_dir(request):
    from sw.trace import TraceError, load_trace

    d = Path(request.config.getoption("--trace-dir")).resolve()
    try:
        load_trace(d)
    except TraceError as e:
        raise pytest.UsageError(f"--trace-dir: {e}") from None
    return d
