"""hw.flow.fanout on a hand-made netlist: counts, names and pin kinds, and one-line errors."""

import json

from hw.flow.fanout import high_fanout, main


def netlist():
    dirs = {"DI": "input", "LSR": "input", "Q": "output"}
    cells = {f"ff{i}": {"type": "TRELLIS_FF", "port_directions": dirs,
                        "connections": {"DI": [10 + i], "LSR": [2], "Q": [110 + i]}} for i in range(5)}
    cells["lut"] = {"type": "LUT4", "port_directions": {"A": "input", "B": "input", "Z": "output"},
                    "connections": {"A": [10], "B": ["0"], "Z": [2]}}
    return {"modules": {"top": {"cells": cells, "netnames": {
        "rst": {"bits": [2]}, "a_long_alias_of_rst": {"bits": [2]}, "d0": {"bits": [10]}}}}}


def test_counts_names_and_pins():
    rows = high_fanout(netlist(), top=2)
    assert rows[0] == {"net": "rst", "fanout": 5, "pins": {"TRELLIS_FF.LSR": 5}}
    assert rows[1]["net"] == "d0" and rows[1]["fanout"] == 2
    assert rows[1]["pins"] == {"TRELLIS_FF.DI": 1, "LUT4.A": 1}


def test_cli(tmp_path, capsys):
    p = tmp_path / "top.json"
    p.write_text(json.dumps(netlist()))
    assert main([str(p), "--top", "1"]) == 0
    assert "5  rst  (TRELLIS_FF.LSR 5)" in capsys.readouterr().out
    p.write_text("{")
    assert main([str(p)]) == 1
    assert str(p) in capsys.readouterr().err
    p.write_text(json.dumps({"modules": {}}))
    assert main([str(p)]) == 1
    assert "module 'top'" in capsys.readouterr().err
