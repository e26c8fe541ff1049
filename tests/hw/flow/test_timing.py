"""The per-block timing flow (``python -m hw.flow.timing``): the registered harness, the record check, and
the CI-sized check of the cheapest blocks against the recorded Fmax with the real tools."""
import json
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth import Module, Signal
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.flow import timing
from hw.flow.synth import load_board
from hw.flow.synth_harness import SynthHarness
from tests.hw.flow.test_synth_harness import _leds as harness_leds

REPO = Path(__file__).resolve().parents[3]

#: The cheapest block (under a minute on 2 cores): the regression check that runs in CI.
CI_BLOCKS = ("rob",)


class _Comb(wiring.Component):
    """An output that follows an input combinationally."""
    a: In(8)
    b: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.b.eq(self.a ^ 0x5A)
        return m


def _leds(register_outputs, cycles=40):
    return harness_leds(_Comb(), cycles, register_outputs=register_outputs)


def test_registered_harness_puts_a_flop_after_every_output():
    plain, registered = _leds(False), _leds(True)
    assert len(set(plain)) > 4
    assert registered[1:] == plain[:-1]     # the same observations, one flop later


@pytest.mark.parametrize("name", [*timing.BLOCKS, *timing.STEP_BLOCKS])
def test_every_block_elaborates_in_the_registered_harness(name):
    leds = Signal(8, name="leds")
    harness = SynthHarness(timing.make_block(name), leds, register_outputs=True)
    text = rtlil.convert(harness, ports=[leds])
    assert "cell" in text and harness.stimulus_width > 0


def test_unknown_block_is_one_line():
    r = subprocess.run([sys.executable, "-m", "hw.flow.timing", "nosuch"], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "unknown block 'nosuch'" in r.stderr


def _row(name, fmax):
    return {"block": name, "fmax_mhz": fmax}


def test_check_against_record():
    record = {"cache": 100.0, "rob": 200.0}
    assert timing.check_against_record([_row("cache", 95.01), _row("rob", 250.0)], record) == []
    failures = timing.check_against_record([_row("cache", 94.9), _row("rob", 200.0)], record)
    assert len(failures) == 1 and failures[0].startswith("cache: Fmax 94.90 MHz is more than 5% below")
    assert "no recorded Fmax" in timing.check_against_record([_row("tas", 300.0)], record)[0]
    assert "boom" in timing.check_against_record([{"block": "cache", "error": "boom"}], record)[0]


def test_bad_record_names_the_file_and_field(tmp_path):
    bad = tmp_path / "record.json"
    bad.write_text(json.dumps({"blocks": {"cache": {"fmax": 1}}}))
    with pytest.raises(timing.SynthError, match=r"record.json: field 'blocks.\*.fmax_mhz'"):
        timing.load_record(bad)


def test_every_block_has_a_record():
    assert set(timing.load_record()) == set(timing.BLOCKS)


@pytest.mark.xdist_group("timing")
def test_cheapest_blocks_keep_their_recorded_fmax(tmp_path):
    """Real yosys + nextpnr-ecp5 on the CI blocks; fails if one fell > 5 % below the record."""
    r = subprocess.run([sys.executable, "-m", "hw.flow.timing", "--check", "--jobs", "1",
                        "--build-dir", str(tmp_path), *CI_BLOCKS], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [row["block"] for row in report["blocks"]] == list(CI_BLOCKS)
    for row in report["blocks"]:
        assert row["fmax_mhz"] > 20 and row["lut4"] > 0 and row["path_from"]


def test_chip_places_the_whole_board_top_and_leaves_no_bitstream(tmp_path):
    """``--chip`` on the tiny accelerator's board top (under a minute): nextpnr's placement
    estimate for the clock, the resources, and no bitstream of the unrouted design left behind."""
    from hw.formal.properties import TINY_ACCEL

    accel = tmp_path / "accel.json"
    accel.write_text(json.dumps(TINY_ACCEL.to_dict()))
    r = subprocess.run([sys.executable, "-m", "hw.flow.timing", "--chip", "--accel", str(accel), "--build-dir",
                        str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads((tmp_path / "chip" / "report.json").read_text())
    board_mhz = load_board()["target_mhz"]
    assert report["placed_only"] and report["target_mhz"] == pytest.approx(board_mhz, rel=0.01)
    assert 10 < report["fmax_estimate_mhz"] < 500 and report["clocks"]
    assert report["dsp"] >= TINY_ACCEL.mac_units and report["lut4"] > 100
    assert not list((tmp_path / "chip").glob("*.bit")), "a bitstream of an unrouted design was left"
    assert "placement estimate" in r.stdout and "not routed" in r.stdout
    # The placed paths (hw.flow.placed_timing) reproduce nextpnr's estimate and name the worst path.
    assert report["worst_paths"] and report["worst_paths"][0]["ns"] > 0
    estimate = report["paths_estimate_mhz"][report["clock"]]
    assert estimate == pytest.approx(report["fmax_estimate_mhz"], abs=0.02)
    assert (tmp_path / "chip" / "paths.txt").exists() and "worst placed paths" in r.stdout
    # Floorplanned (hw.flow.floorplan, checked against the placed netlist), and a routed prediction.
    assert report["floorplan_cells"] > 0 and "floorplan:" in r.stdout
    assert report["predicted_routed_mhz"] == timing.predicted_routed(report["fmax_estimate_mhz"])
    assert "predicted routed Fmax" in r.stdout


def test_predicted_routed_spans_the_measured_ratios():
    lo, hi = timing.predicted_routed(100.0)
    assert lo == pytest.approx(100 * 116.78 / 86.39, abs=0.01)
    assert hi == pytest.approx(100 * 103.73 / 68.46, abs=0.01)
    # Each board top routed so far lies inside the range its own estimate predicts.
    for est, routed in ((86.39, 116.78), (48.55, 69.82), (60.23, 88.66), (68.46, 103.73), (72.92, 101.56)):
        lo, hi = timing.predicted_routed(est)
        assert lo - 0.01 <= routed <= hi + 0.01


def test_chip_seed_reaches_nextpnr(monkeypatch, tmp_path):
    """``--seed`` is passed to nextpnr (the build itself is stopped before any tool runs), and is an
    option of ``--chip`` only."""
    from hw.formal.properties import TINY_ACCEL

    seen = {}

    def stop(platform, top, name, build_dir, overrides=None):
        seen["opts"] = overrides["nextpnr_opts"]
        raise timing.SynthError("stopped before the build")

    monkeypatch.setattr(timing, "build_and_parse", stop)
    with pytest.raises(timing.SynthError, match="stopped"):
        timing.run_chip(cfg=TINY_ACCEL, build_dir=tmp_path, seed=7)
    assert seen["opts"].endswith("--seed 7 --no-route --write placed.json --sdf placed.sdf")
    with pytest.raises(timing.SynthError):
        timing.run_chip(cfg=TINY_ACCEL, build_dir=tmp_path)
    assert "--seed" not in seen["opts"]
    with pytest.raises(SystemExit):
        timing.main(["rob", "--seed", "3"])


def test_chip_takes_no_block():
    r = subprocess.run([sys.executable, "-m", "hw.flow.timing", "--chip", "rob"], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "--chip builds the whole board top" in r.stderr, r.stderr
