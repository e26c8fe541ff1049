"""hw.flow.floorplan: the assignment is optimal, every site is real and used once, the script and the
placed-netlist check catch what they are for."""

import itertools
import json

import numpy as np
import pytest

from hw.accel.weight_store import weight_position
from hw.flow import floorplan as fp
from hw.flow.synth import SynthError, board_overrides
from sw.config import DEFAULT_ACCEL, SMALL_ACCEL, AccelConfig


def test_assign_is_the_minimum_cost_assignment():
    rng = np.random.default_rng(7)
    for n, m in ((1, 1), (3, 3), (4, 6), (5, 7)):
        for _ in range(10):
            cost = rng.integers(0, 20, size=(n, m))
            col = fp.assign(cost)
            assert len(set(col)) == n
            best = min(sum(cost[i, c] for i, c in enumerate(p)) for p in itertools.permutations(range(m), n))
            assert sum(cost[i, c] for i, c in enumerate(col)) == best
    # A planted suboptimal answer is not the minimum: the check above can fail.
    cost = np.array([[1, 9], [9, 1]])
    assert list(fp.assign(cost)) == [0, 1]
    assert cost[0, 1] + cost[1, 0] != cost[0, 0] + cost[1, 1]
    with pytest.raises(fp.FloorplanError, match="3 cells for 2 sites"):
        fp.assign(np.zeros((3, 2)))


def test_default_floorplan_uses_real_sites_once():
    plan = fp.floorplan(DEFAULT_ACCEL)
    lanes = DEFAULT_ACCEL.mv_in * DEFAULT_ACCEL.mv_out // 2
    tables = sum(fp.table_blocks(DEFAULT_ACCEL).values())
    assert tables == 4                                                  # rq_table 3, silu_table 1
    assert len(plan) == DEFAULT_ACCEL.cores * 2 * lanes + lanes * 5 + tables   # 128 multipliers, 160 banks
    # The shared tables sit in the block-RAM row between the cores' DSP rows.
    assert {site.split("/")[1] for cell, site in plan.items() if "table" in cell} == {"Y46"}
    assert len(set(plan.values())) == len(plan)
    mult = {fp.bel(x, y, s) for y in fp.DSP_ROWS for x, s in fp.MULT_SITES}
    ebr = {fp.bel(x, y, s) for y in fp.EBR_ROWS for x, s in fp.EBR_SITES}
    assert len(mult) == 156 and len(ebr) == 208
    for cell, site in plan.items():
        assert site in (mult if cell.endswith(".dsp") else ebr), (cell, site)


def test_lanes_sit_together_and_the_cores_align():
    cfg = DEFAULT_ACCEL
    mults = fp.mult_sites(cfg)
    for n in range(cfg.mv_out):
        for k in range(0, cfg.mv_in, 2):
            for p in range(cfg.cores):
                (x0, y0, _), (x1, y1, _) = mults[p, n, k], mults[p, n, k + 1]
                assert y0 == y1 and x1 - x0 == 1           # a lane's two multipliers side by side
            lane = weight_position(n, k, cfg.mv_in)[0]
            if lane < 26:                                   # home rows: core 0 above core 1, same X
                assert mults[0, n, k][1] == 34 and mults[1, n, k][1] == 58
                assert mults[0, n, k][0] == mults[1, n, k][0]
            else:
                assert mults[0, n, k][1] == mults[1, n, k][1] == fp.SPILL_ROW
    banks = fp.bank_sites(cfg, mults)
    # The banks of a home lane are no further than the next block-RAM rows out from the cores.
    for (lane, _), (x, y, _) in banks.items():
        assert y in (22, 46, 70, 82)
        if isinstance(lane, int) and lane < 26:
            assert abs(x - mults[0, lane // 4, 2 * (lane % 4)][0]) <= 12, lane


def test_floorplan_errors_when_it_does_not_fit():
    big = AccelConfig(**{**DEFAULT_ACCEL.to_dict(), "d_model": 192, "d_ff": 512, "mv_in": 16})
    with pytest.raises(fp.FloorplanError, match="multiplier pairs on the DSP row at Y 10"):
        fp.mult_sites(big)
    board = {"device": "LFE5U-85F"}
    with pytest.raises(SynthError, match="--no-floorplan"):
        board_overrides(big, board)
    # Another device, or asked not to: no floorplan at all.
    assert board_overrides(big, {"device": "LFE5U-25F"})[1] is None
    assert board_overrides(DEFAULT_ACCEL, board, floorplan=False)[1] is None
    overrides, plan = board_overrides(SMALL_ACCEL, board)
    assert len(plan) == 2 * 16 + 8 + sum(fp.table_blocks(SMALL_ACCEL).values())
    assert "script_after_synth" in overrides


def test_yosys_script_asserts_each_cell():
    script = fp.yosys_script({"core.a.dsp": "X4/Y10/MULT18_0"})
    assert script.splitlines() == ["select -assert-count 1 top/c:core.a.dsp",
                                   'setattr -set BEL "X4/Y10/MULT18_0" top/c:core.a.dsp']


def test_check_placed_names_the_misplaced_cell(tmp_path):
    plan = {"core.a.dsp": "X4/Y10/MULT18_0", "core.b.ebr": "X4/Y22/EBR0"}
    cells = {c: {"type": "X", "attributes": {"NEXTPNR_BEL": site}} for c, site in plan.items()}
    placed = tmp_path / "placed.json"
    placed.write_text(json.dumps({"modules": {"top": {"attributes": {"top": "1"}, "cells": cells}}}))
    assert fp.check_placed(placed, plan) == 2
    cells["core.b.ebr"]["attributes"]["NEXTPNR_BEL"] = "X6/Y22/EBR1"      # planted: placed elsewhere
    placed.write_text(json.dumps({"modules": {"top": {"attributes": {"top": "1"}, "cells": cells}}}))
    with pytest.raises(fp.FloorplanError, match=r"'core.b.ebr' field 'NEXTPNR_BEL' is 'X6/Y22/EBR1'"):
        fp.check_placed(placed, plan)
    del cells["core.a.dsp"]
    placed.write_text(json.dumps({"modules": {"top": {"attributes": {"top": "1"}, "cells": cells}}}))
    with pytest.raises(fp.FloorplanError, match="'core.a.dsp' of the floorplan is not in"):
        fp.check_placed(placed, plan)
