"""The repository's pytest fixtures catch what they are there to catch."""

import os

import pytest

from conftest import tool_env_kept


def test_a_test_that_leaves_a_tool_variable_changed_fails():
    before = os.environ.get("YOSYS")
    with pytest.raises(AssertionError, match="left YOSYS changed"):
        with tool_env_kept():
            os.environ["YOSYS"] = "/nowhere/yosys"
    assert os.environ.get("YOSYS") == before            # and the worker gets its own back


def test_a_test_that_leaves_them_alone_passes():
    with tool_env_kept():
        env = dict(os.environ, YOSYS="/nowhere/yosys")  # a subprocess's own environment
    assert env["YOSYS"] != os.environ.get("YOSYS")
