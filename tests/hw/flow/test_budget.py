"""hw.flow.budget on a hand-made netlist (blocks, LUT4 weights, totals, errors) and on a real one."""

import json

import pytest

from hw.flow.budget import block_of, budget, format_budget, main


def netlist():
    cells = {
        "accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3": "TRELLIS_FF",
        "accel.core_0.rq_gu.pe_TRELLIS_FF_Q_4": "TRELLIS_FF",
        "accel.core_0.lane_1.mult": "MULT18X18D",
        "accel.core_0.acc_LUT4_Z": "LUT4",
        "accel.core_1.bank_3.ebr": "DP16KD",
        "accel.core_1.sum_CCU2C_S0": "CCU2C",
        "accel.rob.slots_TRELLIS_DPR16X4_DO": "TRELLIS_DPR16X4",
        "bridge.state_TRELLIS_FF_Q": "TRELLIS_FF",
        "led_TRELLIS_FF_Q": "TRELLIS_FF",
        "$abc$123$auto$blifparse.cc:396:parse_blif$124": "LUT4",
        "pll": "EHXPLLL",
    }
    return {"modules": {"top": {"cells": {name: {"type": kind} for name, kind in cells.items()}}}}


def test_blocks_by_hierarchy():
    assert block_of("accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3", 2) == "accel.core_0"
    assert block_of("accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3", 1) == "accel"
    assert block_of("accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3", 5) == "accel.core_0.rq_gu"
    assert block_of("bridge.state_TRELLIS_FF_Q", 2) == "bridge"
    assert block_of("led_TRELLIS_FF_Q", 2) == "(top)"
    assert block_of("$abc$123$auto$x", 2) == "(unnamed)"
    # One level more inside an expanded block, and inside an expanded child again.
    assert block_of("accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3", 1, {"accel"}) == "accel.core_0"
    both = {"accel", "accel.core_0"}
    assert block_of("accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3", 1, both) == "accel.core_0.rq_gu"
    assert block_of("bridge.state_TRELLIS_FF_Q", 1, {"accel"}) == "bridge"


def test_counts_and_totals():
    result = budget(netlist(), depth=2)
    rows = {r["block"]: r for r in result["blocks"]}
    assert rows["accel.core_0"] == {"block": "accel.core_0", "DP16KD": 0, "MULT18X18D": 1, "LUT4": 1,
                                    "FF": 2, "DPRAM": 0}
    # A carry cell is two LUT4s, a distributed RAM six, as nextpnr counts them.
    assert rows["accel.core_1"]["DP16KD"] == 1 and rows["accel.core_1"]["LUT4"] == 2
    assert rows["accel.rob"]["LUT4"] == 6 and rows["accel.rob"]["DPRAM"] == 1
    assert rows["(top)"]["FF"] == 1 and rows["(unnamed)"]["LUT4"] == 1
    # The PLL counts in no column, so it makes no row; the totals are the rows' sums.
    assert "(top)" in rows and len(rows) == 6
    assert result["total"] == {"DP16KD": 1, "MULT18X18D": 1, "LUT4": 10, "FF": 4, "DPRAM": 1}
    # Largest block-RAM user first.
    assert result["blocks"][0]["block"] == "accel.core_1"
    assert "**total**" in format_budget(result, markdown=True)


def test_expand_splits_one_block():
    rows = {r["block"] for r in budget(netlist(), depth=1, expand={"accel"})["blocks"]}
    assert rows == {"accel.core_0", "accel.core_1", "accel.rob", "bridge", "(top)", "(unnamed)"}


def test_a_planted_cell_changes_the_count():
    n = netlist()
    n["modules"]["top"]["cells"]["accel.core_0.extra_TRELLIS_FF_Q"] = {"type": "TRELLIS_FF"}
    assert budget(n)["total"]["FF"] == 5


def test_errors(tmp_path, capsys):
    with pytest.raises(ValueError, match="depth"):
        budget(netlist(), depth=0)
    p = tmp_path / "top.json"
    p.write_text(json.dumps(netlist()))
    assert main([str(p), "--depth", "1"]) == 0
    assert "accel" in capsys.readouterr().out
    p.write_text("{")
    assert main([str(p)]) == 1 and str(p) in capsys.readouterr().err
    p.write_text(json.dumps({"modules": {}}))
    assert main([str(p)]) == 1 and "module 'top'" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.json")]) == 1 and "cannot read" in capsys.readouterr().err
