"""hw.flow.placed_timing: the longest path of a hand-written placed netlist and SDF, delay by delay."""

import json

import pytest

from hw.flow import placed_timing as pt

# Four flip-flops, two LUTs and a carry pair, clocked from a global buffer. The SDF carries the
# cells' delays and checks; its interconnect delays are 0 (as if unrouted) except where noted, so
# the estimate from the placement must supply them.
SDF = r"""(DELAYFILE
  (SDFVERSION "3.0")
  (DESIGN "top")
  (DIVIDER /)
  (TIMESCALE 1ps)
  (CELL
    (CELLTYPE "top")
    (INSTANCE )
    (DELAY
      (ABSOLUTE
        (INTERCONNECT \$gbuf\$clk/CLKO a.q_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT \$gbuf\$clk/CLKO b.q_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT \$gbuf\$clk/CLKO c.q_TRELLIS_FF_Q_2/CLK (0:0:0) (0:0:0))
        (INTERCONNECT \$gbuf\$clk/CLKO d.q_TRELLIS_FF_Q/CLK (0:0:0) (0:0:0))
        (INTERCONNECT a.q_TRELLIS_FF_Q/Q x_LUT4_Z/A (0:0:0) (0:0:0))
        (INTERCONNECT c.q_TRELLIS_FF_Q_2/Q x_LUT4_Z/B (0:0:0) (0:0:0))
        (INTERCONNECT x_LUT4_Z/F y_LUT4_Z/A (0:0:0) (0:0:0))
        (INTERCONNECT y_LUT4_Z/F b.q_TRELLIS_FF_Q/DI (0:0:0) (0:0:0))
        (INTERCONNECT c.q_TRELLIS_FF_Q_2/Q s\$CCU2_COMB0/A (0:0:0) (0:0:0))
        (INTERCONNECT s\$CCU2_COMB0/FCO s\$CCU2_COMB1/FCI (0:0:0) (0:0:0))
        (INTERCONNECT s\$CCU2_COMB1/F d.q_TRELLIS_FF_Q/DI (0:0:0) (0:0:0))
        (INTERCONNECT c.q_TRELLIS_FF_Q_2/Q c.q_TRELLIS_FF_Q_2/DI (123:123:123) (123:123:123))
      )
    )
  )
  (CELL
    (CELLTYPE "DCCA")
    (INSTANCE \$gbuf\$clk)
    (DELAY
      (ABSOLUTE
        (IOPATH CLKI CLKO (0:0:0) (0:0:0))
      )
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE a.q_TRELLIS_FF_Q)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (430:477:525) (430:477:525))
      )
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE c.q_TRELLIS_FF_Q_2)
    (DELAY
      (ABSOLUTE
        (IOPATH CLK Q (430:477:525) (430:477:525))
      )
    )
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (0:0:0) (0:0:0))
      (SETUPHOLD (negedge DI) (posedge CLK) (0:0:0) (0:0:0))
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE x_LUT4_Z)
    (DELAY
      (ABSOLUTE
        (IOPATH B F (200:218:236) (200:218:236))
        (IOPATH A F (200:218:236) (200:218:236))
      )
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE y_LUT4_Z)
    (DELAY
      (ABSOLUTE
        (IOPATH A F (200:218:236) (200:218:236))
      )
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE s\$CCU2_COMB0)
    (DELAY
      (ABSOLUTE
        (IOPATH A FCO (175:311:447) (175:311:447))
      )
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_COMB")
    (INSTANCE s\$CCU2_COMB1)
    (DELAY
      (ABSOLUTE
        (IOPATH FCI F (295:349:403) (295:349:403))
      )
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE b.q_TRELLIS_FF_Q)
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (50:60:70) (0:0:0))
      (SETUPHOLD (negedge DI) (posedge CLK) (50:60:70) (0:0:0))
    )
    )
  (CELL
    (CELLTYPE "TRELLIS_FF")
    (INSTANCE d.q_TRELLIS_FF_Q)
    (TIMINGCHECK
      (SETUPHOLD (posedge DI) (posedge CLK) (50:60:70) (0:0:0))
      (SETUPHOLD (negedge DI) (posedge CLK) (50:60:70) (0:0:0))
    )
    )
)
"""


def _cell(kind, bel, conns, dirs):
    return {"type": kind, "attributes": {"NEXTPNR_BEL": bel}, "connections": conns, "port_directions": dirs}


NETLIST = {"modules": {"top": {
    "attributes": {"top": "00000000000000000000000000000001"},
    "settings": {"arch.speed": "6"},
    "cells": {
        "$gbuf$clk": _cell("DCCA", "X67/Y0/TDCC0", {"CLKO": [2]}, {"CLKO": "output"}),
        "a.q_TRELLIS_FF_Q": _cell("TRELLIS_FF", "X10/Y10/SLICEA.FF0", {"CLK": [2], "Q": [3]},
                                  {"CLK": "input", "Q": "output"}),
        "c.q_TRELLIS_FF_Q_2": _cell("TRELLIS_FF", "X11/Y10/SLICEA.FF0", {"CLK": [2], "Q": [4], "DI": [4]},
                                    {"CLK": "input", "Q": "output", "DI": "input"}),
        "x_LUT4_Z": _cell("TRELLIS_COMB", "X12/Y10/SLICEA.K0", {"A": [3], "B": [4], "F": [5]},
                          {"A": "input", "B": "input", "F": "output"}),
        "y_LUT4_Z": _cell("TRELLIS_COMB", "X30/Y14/SLICEB.K1", {"A": [5], "F": [6]},
                          {"A": "input", "F": "output"}),
        "b.q_TRELLIS_FF_Q": _cell("TRELLIS_FF", "X30/Y14/SLICEB.FF1", {"CLK": [2], "DI": [6]},
                                  {"CLK": "input", "DI": "input"}),
        "s$CCU2_COMB0": _cell("TRELLIS_COMB", "X11/Y11/SLICEA.K0", {"A": [4], "FCO": [7]},
                              {"A": "input", "FCO": "output"}),
        "s$CCU2_COMB1": _cell("TRELLIS_COMB", "X11/Y11/SLICEA.K1", {"FCI": [7], "F": [8]},
                              {"FCI": "input", "F": "output"}),
        "d.q_TRELLIS_FF_Q": _cell("TRELLIS_FF", "X11/Y11/SLICEA.FF1", {"CLK": [2], "DI": [8]},
                                  {"CLK": "input", "DI": "input"}),
    },
    "netnames": {
        "$glbnet$clk": {"hide_name": 1, "bits": [2],
                        "attributes": {"ECP5_IS_GLOBAL": "00000000000000000000000000000001"}},
        "a.q": {"hide_name": 0, "bits": [3], "attributes": {}},
        "c.q": {"hide_name": 0, "bits": [4], "attributes": {}},
        "x": {"hide_name": 0, "bits": [5], "attributes": {}},
        "y": {"hide_name": 0, "bits": [6], "attributes": {}},
    },
}}}

# The longest path, a.q -> x -> y -> b.q, by hand (80 ps a unit at speed grade 6):
#   clock-to-Q 525; a.q (X10/Y10) -> x (X12/Y10): 80 * (6 + 2*2) = 800; LUT A->F 236;
#   x (X12/Y10) -> y (X30/Y14): 80 * (6 + 13 + 0 + 2*(5 + 4)) = 2960; LUT A->F 236;
#   y.F -> b.q.DI: F -> DI is free; setup 70.
LONGEST_PS = 525 + 800 + 236 + 2960 + 236 + 0 + 70
# The carry path c.q -> s.COMB0 (X11/Y10 -> X11/Y11, 640) -> FCO (447) -> FCI (free) -> F (403)
# -> d.q.DI (free) + 70 = 2085 ps.
CARRY_PS = 525 + 640 + 447 + 0 + 403 + 0 + 70


@pytest.fixture
def files(tmp_path):
    (tmp_path / "placed.json").write_text(json.dumps(NETLIST))
    (tmp_path / "placed.sdf").write_text(SDF)
    return tmp_path / "placed.json", tmp_path / "placed.sdf"


def test_delay_model():
    assert pt.parse_bel("X12/Y10/SLICEA.K0") == (12, 10, 0)
    assert pt.parse_bel("X30/Y14/SLICEB.K1") == (30, 14, 3 << 2)
    assert pt.parse_bel("X30/Y14/SLICEB.FF1") == (30, 14, (3 << 2) | 1)
    assert pt.parse_bel("X71/Y46/EBR1") == (71, 46, 0)
    here, there = (5, 5, 0), (25, 8, 0)
    assert pt.predict_delay(here, "Q", here, "M") == 480                 # same tile: 6 units
    assert pt.predict_delay(here, "Q", there, "A") == 80 * (6 + 15 + 2 * (5 + 3))
    assert pt.predict_delay(here, "Q", there, "A", unit=62) == 62 * (6 + 15 + 2 * (5 + 3))
    assert pt.predict_delay(here, "FCO", there, "FCI") == 0
    assert pt.predict_delay(here, "OFX", there, "FXB") == 0
    assert pt.predict_delay(here, "F", there, "DI") == 0
    lut2, ff2, lut1 = (5, 5, 2 << 2), (5, 5, (2 << 2) | 1), (5, 5, 1 << 2)
    assert pt.predict_delay(ff2, "Q", lut2, "C") == 0                     # FF into its own LUT
    assert pt.predict_delay(ff2, "Q", lut1, "C") == 480
    assert pt.predict_delay(lut2, "F", lut1, "A") == 0                    # LUT to LUT in a tile
    assert pt.predict_delay(lut1, "F", lut2, "A") == 480                  # ... but not from LUT 1


def test_signal_names():
    assert pt.signal_name("harness.dut.tas.queue_level_TRELLIS_FF_Q_3") == "harness.dut.tas.queue_level"
    assert pt.signal_name("h.busy_1_LUT4_B_1_Z_PFUMX_ALUT_Z_L6MUX21_D1_Z") == "h.busy_1"
    assert pt.signal_name("h.shift_TRELLIS_FF_Q_16_DI_LUT4_Z_B_CCU2C_COUT$CCU2_COMB1") == "h.shift"
    assert pt.signal_name("h.tas.chain_1.0.1$RAMW_SLICE") == "h.tas.chain_1.0.1"
    assert pt.signal_name("$nextpnr_CCU2C_186$CCU2_COMB1") == "$nextpnr_CCU2C"
    assert pt.signal_name("h.store.ram_l0_b0.ebr") == "h.store.ram_l0_b0.ebr"
    assert pt.signal_name("core.$signal_TRELLIS_FF_Q_LSR_LUT4_Z") == "core.$signal"
    assert pt.signal_name("core.tas.$signal$2682_TRELLIS_FF_Q_DI$CCU2_COMB1") == "core.tas.$signal$2682"


def test_longest_path_from_placement(files):
    placed, sdf = files
    an = pt.analyse(pt.read_sdf(sdf), pt.read_placement(placed))
    report = pt.build_report(an, top=3, periods=(4.0, 2.0))
    clock = report["clocks"]["$glbnet$clk"]
    assert clock["worst_ns"] == pytest.approx(LONGEST_PS / 1000)
    assert clock["fmax_mhz"] == pytest.approx(1e6 / LONGEST_PS, abs=1e-3)
    worst = report["paths"][0]
    assert (worst["from"], worst["to"]) == ("a.q", "b.q")
    assert [(s["type"], s["cell"], s["pin"]) for s in worst["steps"]] == [
        ("clk-to-q", "a.q_TRELLIS_FF_Q", "Q"), ("routing", "x_LUT4_Z", "A"), ("logic", "x_LUT4_Z", "F"),
        ("routing", "y_LUT4_Z", "A"), ("logic", "y_LUT4_Z", "F"), ("routing", "b.q_TRELLIS_FF_Q", "DI"),
        ("setup", "b.q_TRELLIS_FF_Q", "DI")]
    assert [s["delay_ns"] for s in worst["steps"]] == pytest.approx([0.525, 0.8, 0.236, 2.96, 0.236, 0, 0.07])
    assert worst["routing_ns"] == pytest.approx(3.76) and worst["logic_ns"] == pytest.approx(1.067)
    assert worst["distances"] == [2, 22, 0]
    assert worst["steps"][3]["net"] == "x"
    # The carry path is second; the loop c.q -> c.q (the SDF's own 123 ps ignored) is third.
    assert report["paths"][1]["budget_ns"] == pytest.approx(CARRY_PS / 1000)
    assert report["paths"][1]["to"] == "d.q"
    assert report["paths"][2]["budget_ns"] == pytest.approx((525 + 480) / 1000)
    assert [p["to"] for p in pt.build_report(an, top=2, distinct=True)["paths"]] == ["b.q", "d.q"]
    # Failing endpoints, grouped by signal.
    assert report["failing"]["4"]["endpoints"] == 1
    assert report["failing"]["4"]["by_signal"][0]["signal"] == "b.q"
    assert report["failing"]["4"]["by_signal"][0]["pins"] == {"DI": 1}
    assert report["failing"]["4"]["by_signal"][0]["starts"] == {"a.q": 1}
    assert report["failing"]["2"]["endpoints"] == 2
    assert {g["signal"] for g in report["failing"]["2"]["by_signal"]} == {"b.q", "d.q"}
    assert report["crosscheck"] == {"sdf_equals_estimate": 7, "arcs": 12}   # the free arcs: 0 in both


def test_routed_uses_the_sdf_delays(files):
    placed, sdf = files
    an = pt.analyse(pt.read_sdf(sdf), pt.read_placement(placed), routed=True)
    report = pt.build_report(an, top=1)
    # With the SDF's delays (all 0 but the loop's 123 ps) the longest path is the carry chain's.
    assert report["clocks"]["$glbnet$clk"]["worst_ns"] == pytest.approx((525 + 447 + 403 + 70) / 1000)


def test_cli_json_and_overwrite(files, capsys):
    placed, sdf = files
    out = placed.parent / "sta.json"
    assert pt.main([str(placed), str(sdf), "--json", str(out), "--period", "4"]) == 0
    text = capsys.readouterr().out
    assert f"Fmax {1e6 / LONGEST_PS:.2f} MHz" in text and "a.q -> b.q" in text
    assert json.loads(out.read_text())["paths"][0]["delay_ns"] == pytest.approx(LONGEST_PS / 1000)
    assert pt.main([str(placed), str(sdf), "--json", str(out)]) == 1
    assert "use --force" in capsys.readouterr().err
    assert pt.main([str(placed), str(sdf), "--json", str(out), "--force"]) == 0


def test_bad_input(tmp_path, files, capsys):
    placed, sdf = files
    bad = tmp_path / "bad.sdf"
    bad.write_text("(DELAYFILE\n)\n")
    assert pt.main([str(placed), str(bad)]) == 1
    assert "not an SDF with INTERCONNECT" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert pt.main([str(tmp_path / "bad.json"), str(sdf)]) == 1
    assert "not JSON" in capsys.readouterr().err
