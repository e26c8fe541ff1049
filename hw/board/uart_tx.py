"""UART transmitter: 8 data bits, no parity, one stop bit, least significant bit first."""

from amaranth import *
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hw.board.uart_rx import check_clocks_per_bit

__all__ = ["UartTx"]


class UartTx(wiring.Component):
    """Sends the bytes of ``i`` on an asynchronous serial line (8N1, idle high).

    A byte is taken when the previous one has finished its stop bit; it then occupies the line for
    ten bits (start, eight data bits, stop) of ``clocks_per_bit`` cycles each. Back-to-back bytes
    follow each other without idle time.

    Parameters
    ----------
    clocks_per_bit : int
        Clock cycles per bit (clock frequency / baud rate), at least
        :data:`hw.board.uart_rx.MIN_CLOCKS_PER_BIT`.

    Members
    -------
    i : In(stream.Signature(8))
        Bytes to send.
    tx : Out(1, init=1)
        The serial line.
    """

    i: In(stream.Signature(8))
    tx: Out(1, init=1)

    def __init__(self, clocks_per_bit: int):
        self._clocks_per_bit = check_clocks_per_bit(clocks_per_bit)
        super().__init__()

    @property
    def clocks_per_bit(self) -> int:
        return self._clocks_per_bit

    def elaborate(self, platform):
        m = Module()
        cpb = self._clocks_per_bit
        timer = Signal(range(cpb))
        rest = Signal(9)                 # bits still to send after the one on the line: data, stop
        left = Signal(range(10))
        busy = Signal()

        m.d.comb += self.i.ready.eq(~busy)
        with m.If(~busy):
            with m.If(self.i.valid):
                m.d.sync += [self.tx.eq(0), rest.eq(Cat(self.i.payload, C(1, 1))), left.eq(9),
                             timer.eq(cpb - 1), busy.eq(1)]
        with m.Elif(timer != 0):
            m.d.sync += timer.eq(timer - 1)
        with m.Elif(left == 0):
            m.d.sync += busy.eq(0)       # the stop bit has lasted a whole bit
        with m.Else():
            m.d.sync += [self.tx.eq(rest[0]), rest.eq(rest >> 1), left.eq(left - 1), timer.eq(cpb - 1)]
        return m
