"""UART receiver: 8 data bits, no parity, one stop bit, least significant bit first.

The project's own (with :mod:`hw.board.uart_tx`): amaranth-stdio, which has an ``AsyncSerial``, is only an
empty placeholder on PyPI, and the project installs everything from PyPI.
"""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UartRx", "MIN_CLOCKS_PER_BIT"]

#: Fewest clock cycles per bit that the receiver and the transmitter accept: the receiver samples
#: the middle of each bit, so it needs a few cycles of margin on either side.
MIN_CLOCKS_PER_BIT = 4


def check_clocks_per_bit(clocks_per_bit):
    """``clocks_per_bit`` as an int, or :class:`TypeError`/:class:`ValueError` naming it."""
    if not isinstance(clocks_per_bit, int) or isinstance(clocks_per_bit, bool):
        raise TypeError(f"clocks_per_bit must be an integer, not {clocks_per_bit!r}")
    if clocks_per_bit < MIN_CLOCKS_PER_BIT:
        raise ValueError(f"clocks_per_bit must be at least {MIN_CLOCKS_PER_BIT}, not {clocks_per_bit!r}")
    return clocks_per_bit


class UartRx(wiring.Component):
    """Receives bytes from an asynchronous serial line (8N1, idle high).

    The line goes through a two-flop synchroniser. A falling edge starts a byte; the start bit is
    checked half a bit later (a shorter low pulse is ignored), and every following bit is sampled in
    its middle, ``clocks_per_bit`` cycles apart. A byte whose stop bit is low is dropped and
    reported on ``frame_error``. A received byte waits in ``o`` until it is taken; a byte that
    arrives while the previous one is still waiting is dropped and reported on ``overflow``.

    Parameters
    ----------
    clocks_per_bit : int
        Clock cycles per bit (clock frequency / baud rate), at least :data:`MIN_CLOCKS_PER_BIT`.

    Members
    -------
    rx : In(1, init=1)
        The serial line.
    o : Out(stream.Signature(8))
        Received bytes.
    frame_error, overflow : Out(1)
        One-cycle pulses: a byte with a low stop bit, a byte lost because ``o`` was still full.
    """

    rx: In(1, init=1)
    o: Out(stream.Signature(8))
    frame_error: Out(1)
    overflow: Out(1)

    def __init__(self, clocks_per_bit: int):
        self._clocks_per_bit = check_clocks_per_bit(clocks_per_bit)
        super().__init__()

    @property
    def clocks_per_bit(self) -> int:
        return self._clocks_per_bit

    def elaborate(self, platform):
        m = Module()
        cpb = self._clocks_per_bit
        line = Signal(init=1)
        m.submodules.sync_rx = FFSynchronizer(self.rx, line, init=1)

        timer = Signal(range(cpb))
        bits = Signal(range(8))
        shreg = Signal(8)

        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)

        with m.If(timer != 0):
            m.d.sync += timer.eq(timer - 1)

        with m.FSM(name="rx"):
            with m.State("IDLE"):
                with m.If(~line):
                    m.d.sync += timer.eq(cpb // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer == 0):
                    with m.If(~line):
                        m.d.sync += [timer.eq(cpb - 1), bits.eq(0)]
                        m.next = "DATA"
                    with m.Else():
                        m.next = "IDLE"         # a glitch, not a start bit
            with m.State("DATA"):
                with m.If(timer == 0):
                    m.d.sync += [shreg.eq(Cat(shreg[1:], line)), bits.eq(bits + 1), timer.eq(cpb - 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer == 0):
                    with m.If(~line):
                        m.d.comb += self.frame_error.eq(1)
                    with m.Elif(self.o.valid & ~self.o.ready):
                        m.d.comb += self.overflow.eq(1)
                    with m.Else():
                        m.d.sync += [self.o.payload.eq(shreg), self.o.valid.eq(1)]
                    # Back to IDLE in the middle of the stop bit: the next start bit's edge is
                    # at least half a bit away.
                    m.next = "IDLE"
        return m
