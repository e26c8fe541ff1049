"""hw.flow.congestion: spread per band and the RUDY estimate on a hand-made placed netlist."""

import json

import pytest

from hw.flow import congestion


def _cell(kind, x, y, conns, slot="SLICEA"):
    return {"type": kind, "attributes": {"NEXTPNR_BEL": f"X{x}/Y{y}/{slot}"}, "connections": conns}


def _netlist(cells):
    return {"modules": {"top": {"attributes": {"top": "1"}, "cells": cells}}}


NETLIST = _netlist({
    "a": _cell("TRELLIS_COMB", 0, 0, {"F": [10], "A": [11]}),
    "b": _cell("TRELLIS_FF", 1, 0, {"DI": [10], "Q": [12]}),     # net 10: (0,0)-(1,0)
    "c": _cell("TRELLIS_COMB", 12, 2, {"A": [12], "B": [13]}),   # net 12: (1,0)-(12,2)
    "d": _cell("MULT18X18D", 12, 2, {"A0": [13]}, "MULT18_0"),   # net 13: one place only
    "e": {"type": "TRELLIS_FF", "attributes": {}, "connections": {"Q": [11]}},   # not placed
})


def test_band_counts_and_rudy():
    cells = congestion.placed_cells(NETLIST)
    assert len(cells) == 4
    assert congestion.band_counts(cells) == {
        "TRELLIS_COMB": [1, 1], "TRELLIS_FF": [1, 0], "MULT18X18D": [0, 1]}
    grid = congestion.rudy(cells)
    assert len(grid) == 3 and len(grid[0]) == 13
    long = (12 + 3) / (12 * 3)              # net 12: a 12 x 3 box
    assert grid[0][0] == pytest.approx(3 / 2)
    assert grid[0][1] == pytest.approx(3 / 2 + long)
    assert grid[2][12] == pytest.approx(long)   # net 13 has one place: no wire
    assert grid[1][5] == pytest.approx(long)
    # A planted change of the estimate is seen: without net 12 the far tile has no demand.
    planted = json.loads(json.dumps(NETLIST))
    planted["modules"]["top"]["cells"]["c"]["connections"]["A"] = [99]
    assert congestion.rudy(congestion.placed_cells(planted))[2][12] == 0


def test_tile_demand_names_the_nets_that_cross_a_tile():
    cells = congestion.placed_cells(NETLIST)
    names = {10: "core.bus[0]", 12: "core.bus[1]"}
    long = (12 + 3) / (12 * 3)
    # Tile (1, 0): net 10 (a 2 x 1 box) and net 12, one group once digits are '#'.
    assert congestion.tile_demand(cells, names, 1, 0) == [("core.bus[#]", round(3 / 2 + long, 1), 2)]
    # Tile (5, 1): only net 12; a net without a name is grouped as 'net'.
    assert congestion.tile_demand(cells, {}, 5, 1) == [("net", round(long, 1), 1)]
    assert congestion.tile_demand(cells, names, 0, 2) == []


def test_cli_writes_plot_and_report(tmp_path, capsys):
    placed = tmp_path / "placed.json"
    placed.write_text(json.dumps(NETLIST))
    assert congestion.main(["--placed", str(placed)]) == 0
    report = json.loads((tmp_path / "congestion.json").read_text())
    assert report["rudy_max_tile"] == [1, 0]
    assert [r["count"] for r in report["rudy_max_tile_nets"]] == [2]
    assert report["cells_per_band"]["TRELLIS_COMB"] == [1, 1]
    assert (tmp_path / "congestion.png").stat().st_size > 0
    assert "RUDY demand per tile" in capsys.readouterr().out


def test_regions_and_blocks():
    grid = [[1.0] * 12 + [5.0] for _ in range(3)]
    # Two regions of 10 x 10 across (the second only 3 wide), one down (3 rows).
    assert congestion.region_means(grid) == [[1.0, round((2 + 5) / 3, 1)]]
    assert congestion.region_means(grid, size=1)[0][12] == 5.0
    named = _netlist({
        "core.tas.x": _cell("TRELLIS_COMB", 1, 1, {}), "core.tas.y": _cell("TRELLIS_FF", 2, 2, {}),
        "core.rob.z": _cell("TRELLIS_FF", 3, 3, {}), "$nextpnr_CCU2C_1": _cell("TRELLIS_COMB", 1, 1, {}),
        "core.far": _cell("TRELLIS_FF", 30, 3, {}), "core.tas.m": _cell("MULT18X18D", 1, 1, {}, "MULT18_0")})
    cells = congestion.placed_cells(named)
    assert congestion.blocks_in(cells, 0, 0, 9, 9, depth=2) == [("core.tas", 2), ("core.rob", 1), ("(nextpnr)", 1)]
    # The cell's own name is not a block: a cell directly in "core" counts for "core".
    assert congestion.blocks_in(cells, 20, 0, 39, 9) == [("core", 1)]


def test_cli_names_the_nets_at_a_tile_and_refuses_a_bad_one(tmp_path, capsys):
    placed = tmp_path / "placed.json"
    placed.write_text(json.dumps(NETLIST))
    assert congestion.main(["--placed", str(placed), "--at", "5/1"]) == 0
    report = json.loads((tmp_path / "congestion.json").read_text())
    assert report["tiles"] == {"X5/Y1": [{"nets": "net", "demand": round((12 + 3) / (12 * 3), 1), "count": 1}]}
    assert report["rudy_max_region"]["tiles"] == [0, 0, 9, 9]
    assert "at X5/Y1" in capsys.readouterr().out
    assert congestion.main(["--placed", str(placed), "--at", "5,1"]) == 1
    assert "--at '5,1'" in capsys.readouterr().err


def test_overuse_by_group(tmp_path, capsys):
    csv = tmp_path / "h_congestion_by_net_2.csv"
    csv.write_text("core.tas.e0_op[3],5\ncore.tas.e1_op[4],2\ncore.leds[4],1\n")
    total, groups = congestion.overuse_by_group(csv)
    assert total == 8 and groups == [("core.tas.e#_op[#]", 7, 2), ("core.leds[#]", 1, 1)]
    assert congestion.main(["--overuse", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "87.5 %" in out and "by block: core.tas 87.5 %, core 12.5 %" in out
    csv.write_text("core.tas.e0_op[3],5\nbroken\n")
    assert congestion.main(["--overuse", str(csv)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{csv}: line 2" in err


@pytest.mark.parametrize("content, field", [
    ("{", "not JSON"),
    ('{"cells": {}}', "field 'modules'"),
    (json.dumps(_netlist({"a": {"type": "TRELLIS_FF", "attributes": {}, "connections": {}}})),
     "field 'NEXTPNR_BEL': no placed cells"),
    (json.dumps(_netlist({"a": _cell("TRELLIS_FF", 0, 0, {})
                          | {"attributes": {"NEXTPNR_BEL": "nowhere"}}})),
     "cell 'a' field 'NEXTPNR_BEL'"),
])
def test_bad_input_one_line(tmp_path, capsys, content, field):
    placed = tmp_path / "placed.json"
    placed.write_text(content)
    assert congestion.main(["--placed", str(placed)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(placed) in err[0] and field in err[0]
    assert not (tmp_path / "congestion.json").exists()


def test_place_needs_a_synthesis_build(tmp_path, capsys):
    assert congestion.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "top.json: not found" in err
