"""The ULX3S-85F board top: PLL clock, the FTDI UART pins and the LEDs around :class:`BoardCore`.

What ``nox -s synth`` builds by default and ``python -m hw.board.run`` talks to. The pins come from
amaranth-boards' ULX3S platform (resources named in ``constraints/ulx3s_85f.toml``), the clock
from :func:`hw.board.clock.add_pll_domain`. Everything else is :class:`hw.board.core.BoardCore`, which
the board testbench (``tb/board/``) simulates without the PLL.
"""

from amaranth import *

from hw.board.core import BoardCore
from sw.config import AccelConfig

__all__ = ["BoardTop", "uart_divider", "uart_settings", "BAUD_TOLERANCE"]

#: Largest relative difference between the requested baud rate and the one the clock divides to.
BAUD_TOLERANCE = 0.02


def uart_divider(clock_hz: float, baud: int) -> int:
    """Clock cycles per UART bit for ``baud`` at ``clock_hz``; :class:`ValueError` when the nearest
    divider is off by more than :data:`BAUD_TOLERANCE`."""
    if not isinstance(baud, int) or baud <= 0:
        raise ValueError(f"baud rate must be a positive integer, not {baud!r}")
    cpb = round(clock_hz / baud)
    if cpb < 4 or abs(clock_hz / cpb - baud) > BAUD_TOLERANCE * baud:
        raise ValueError(f"{baud} baud cannot be made from {clock_hz / 1e6:.3f} MHz "
                         f"(nearest divider {cpb} gives {clock_hz / max(cpb, 1):.0f} baud)")
    return cpb


def uart_settings(board: dict, clock_hz: float, baud: int | None = None) -> tuple[int, int, int]:
    """``(baud, clocks_per_bit, timeout_cycles)`` of the board file's ``[uart]`` table at
    ``clock_hz`` (``baud`` overrides the file's); :class:`ValueError` names what is wrong."""
    uart = board.get("uart")
    if not isinstance(uart, dict) or any(k not in uart for k in ("resource", "baud", "timeout_ms")):
        raise ValueError(f"{board.get('_path', 'board file')}: needs [uart] resource, baud and timeout_ms")
    baud = int(baud if baud is not None else uart["baud"])
    return baud, uart_divider(clock_hz, baud), int(clock_hz * uart["timeout_ms"] / 1000)


class BoardTop(Elaboratable):
    """The whole board: ``clk25`` -> EHXPLLL -> ``sync`` -> :class:`hw.board.core.BoardCore` (UART
    bridge and accelerator), with the FTDI UART (``[uart] resource``) and the LEDs (``[leds]``).

    The arguments are checked by :func:`uart_settings` and :class:`hw.board.core.BoardCore`; check
    them before construction (as :func:`hw.flow.synth.make_board_top` does) to fail without leaving an
    unused elaboratable behind.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator to build.
    board : dict
        Board facts (:func:`hw.board.facts.load_board`); needs ``[uart] resource``, ``baud`` and
        ``timeout_ms`` besides the clock and LEDs.
    pll : hw.flow.synth.PllConfig
        The PLL setting (:func:`hw.flow.synth.compute_pll`); its output is the ``sync`` clock.
    baud : int, optional
        Overrides the board file's baud rate.

    Attributes
    ----------
    core : BoardCore or None
        Set by ``elaborate()``.
    """

    def __init__(self, cfg: AccelConfig, board: dict, pll, *, baud: int | None = None):
        self.cfg, self.board, self.pll = cfg, board, pll
        self.clock_hz = pll.fout_mhz * 1e6
        self.baud, self.clocks_per_bit, self.timeout = uart_settings(board, self.clock_hz, baud)
        self.core = None

    def elaborate(self, platform):
        from hw.board.clock import add_pll_domain, request_leds

        m = Module()
        add_pll_domain(m, platform, self.board, self.pll)
        uart = platform.request(self.board["uart"]["resource"], 0)
        leds = request_leds(platform, self.board)
        m.submodules.core = self.core = core = BoardCore(self.cfg, self.clocks_per_bit, timeout=self.timeout)
        m.d.comb += [core.rx.eq(uart.rx.i), uart.tx.o.eq(core.tx)]
        m.d.comb += [pin.eq(core.leds[k]) for k, pin in enumerate(leds[:len(core.leds)])]
        return m
