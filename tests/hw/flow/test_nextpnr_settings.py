"""hw.flow.nextpnr_settings: settings written into nextpnr's input netlist, and read by nextpnr."""

import json
import os
import subprocess

import pytest

from hw.flow import synth
from hw.flow.nextpnr_settings import SettingsError, add_settings, main

# A netlist of one LUT between two ports, as Yosys writes it for the ECP5.
NETLIST = {
    "creator": "test",
    "modules": {
        "top": {
            "attributes": {"top": "00000000000000000000000000000001"},
            "ports": {"a": {"direction": "input", "bits": [2]}, "y": {"direction": "output", "bits": [3]}},
            "cells": {
                "lut": {"type": "LUT4", "parameters": {"INIT": "0101010101010101"},
                        "port_directions": {"A": "input", "B": "input", "C": "input", "D": "input",
                                            "Z": "output"},
                        "connections": {"A": [2], "B": ["0"], "C": ["0"], "D": ["0"], "Z": [3]}},
            },
            "netnames": {"a": {"bits": [2]}, "y": {"bits": [3]}},
        },
        "other": {"attributes": {}, "ports": {}, "cells": {}, "netnames": {}},
    },
}


def _write(tmp_path, netlist=NETLIST):
    path = tmp_path / "top.json"
    path.write_text(json.dumps(netlist))
    return path


def test_settings_go_to_the_top_module_only(tmp_path):
    path = _write(tmp_path)
    written = add_settings(path, {"router2/histCongWeight": 2, "router": "router2"})
    assert written == {"router2/histCongWeight": "2.0", "router": "router2"}
    got = json.loads(path.read_text())
    assert got["modules"]["top"]["settings"] == written
    assert "settings" not in got["modules"]["other"]
    assert got["modules"]["top"]["cells"] == NETLIST["modules"]["top"]["cells"]
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize("netlist, field", [
    ({"modules": []}, "field 'modules'"),
    ({"modules": {"a": {"attributes": {}}}}, "0 top modules"),
    ({"modules": {"a": {"attributes": {"top": 1}}, "b": {"attributes": {"top": 1}}}}, r"2 top modules \(a, b\)"),
    ({"modules": {"a": {"attributes": {"top": 1}, "settings": []}}}, "field 'modules.a.settings'"),
])
def test_bad_netlist_is_named_and_left_alone(tmp_path, netlist, field):
    path = _write(tmp_path, netlist)
    before = path.read_text()
    with pytest.raises(SettingsError, match=field) as e:
        add_settings(path, {"router2/histCongWeight": 2.0})
    assert str(path) in str(e.value)
    assert path.read_text() == before


def test_a_value_nextpnr_would_misread_is_refused(tmp_path):
    path = _write(tmp_path)
    with pytest.raises(SettingsError, match="bit vector"):
        add_settings(path, {"router1/maxIterCnt": "10"})
    with pytest.raises(SettingsError, match="not a number"):
        add_settings(path, {"x": True})


def test_command_line(tmp_path, capsys):
    path = _write(tmp_path)
    assert main([str(path), "router2/histCongWeight=2.5", "router=router2"]) == 0
    assert json.loads(path.read_text())["modules"]["top"]["settings"] == {
        "router2/histCongWeight": "2.5", "router": "router2"}
    assert main([str(tmp_path / "missing.json"), "a=1.0"]) == 1
    assert "missing.json: cannot read" in capsys.readouterr().err


def test_nextpnr_reads_them(tmp_path):
    """The point of it all: nextpnr takes a setting from the netlist. ``router`` chosen there (and
    not on its command line) decides which router runs."""
    path = _write(tmp_path)
    env = dict(os.environ)      # not the worker's: amaranth reads YOSYS there (conftest.tool_env_kept)
    synth.setup_tool_env(env)

    def route(settings):
        netlist = tmp_path / "n.json"
        netlist.write_text(path.read_text())
        if settings:
            add_settings(netlist, settings)
        log = tmp_path / "n.log"
        r = subprocess.run([env["NEXTPNR_ECP5"], "--25k", "--json", "n.json", "--log", "n.log",
                            "--lpf-allow-unconstrained", "--textcfg", "n.config"],
                           cwd=tmp_path, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        return log.read_text()

    assert "Running router2" not in route({})
    assert "Running router2" in route({"router": "router2"})
