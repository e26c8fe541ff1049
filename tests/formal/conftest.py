"""The formal tests need SymbiYosys, the YoWASP Yosys tools and yices: one clear line if not."""

import pytest

from tb.formal import FormalToolError, tool_env


@pytest.fixture(scope="session")
def formal_tools():
    try:
        tool_env()
    except FormalToolError as e:
        pytest.fail(str(e), pytrace=False)
