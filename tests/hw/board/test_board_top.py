"""The board top for the ULX3S-85F: the UART divider, which top ``hw.flow.synth`` builds, and that the
board top elaborates for the platform with the FTDI UART pins, the LEDs and the PLL (without
running yosys or nextpnr)."""

import pytest

from hw.board.top import BoardTop, uart_divider
from hw.flow import synth
from sw.config import DEFAULT_ACCEL
from tb.board.small_trace import SMALL_ACCEL


def test_uart_divider():
    assert uart_divider(150e6, 3_000_000) == 50
    assert uart_divider(100e6, 115_200) == 868
    with pytest.raises(ValueError, match="cannot be made"):
        uart_divider(25e6, 3_000_000)         # 8 cycles per bit give 3.125 Mbaud, 4 % off
    with pytest.raises(ValueError, match="cannot be made"):
        uart_divider(10e6, 3_000_000)


def test_which_top(monkeypatch):
    board = synth.load_board()
    pll = synth.compute_pll(25, 150)
    top = synth.make_board_top(DEFAULT_ACCEL, board, pll)
    assert isinstance(top, BoardTop) and top.clocks_per_bit == 50 and top.baud == board["uart"]["baud"]
    assert top.timeout == 150_000_000 * board["uart"]["timeout_ms"] // 1000
    top._MustUse__silence = True
    monkeypatch.setattr("hw.accel.accelerator.Accelerator", lambda design: design)   # nothing to elaborate
    for design in (DEFAULT_ACCEL, SMALL_ACCEL):
        top = synth.make_board_top(design, board, pll, harness=True)
        assert isinstance(top, synth.HarnessTop) and top.dut is design
        top._MustUse__silence = True
    with pytest.raises(synth.SynthError, match="cannot be made"):
        synth.make_board_top(DEFAULT_ACCEL, board, synth.compute_pll(25, 20), baud=3_000_000)
    no_uart = {k: v for k, v in board.items() if k != "uart"}
    with pytest.raises(synth.SynthError, match=r"needs \[uart\]"):
        synth.make_board_top(DEFAULT_ACCEL, no_uart, pll)


def test_board_top_elaborates_for_the_ulx3s():
    board = synth.load_board()
    platform = synth.make_platform(board)
    top = BoardTop(SMALL_ACCEL, board, synth.compute_pll(25, 150))
    plan = platform.prepare(top, name="top")
    lpf = plan.files["top.lpf"]
    for pin in ("M1", "L4", "G2", "B2", "H3"):      # UART rx, tx, clk25, LED 0, LED 7
        assert f'SITE "{pin}"' in lpf, pin
    assert 'LOCATE COMP "uart_0__rx__io" SITE "M1"' in lpf
    assert 'LOCATE COMP "uart_0__tx__io" SITE "L4"' in lpf
    il = plan.files["top.il"]
    assert "EHXPLLL" in il and "core.bridge" in il and "core.accel" in il
    assert top.core is not None and top.core.clocks_per_bit == 50


def test_cli_bad_baud_is_one_line(tmp_path, capsys):
    assert synth.main(["--build-dir", str(tmp_path), "--baud", "7000000", "--mhz", "20"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hw.flow.synth: error: 7000000 baud cannot be made" in err
