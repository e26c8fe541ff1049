"""cocotb tests of the board core (UART receiver, command bridge, transmitter and accelerator) through
its two UART pins, with cocotbext-uart bus models. The host side is the real host code
(``hw.board.run``): it runs in a bridge thread and talks to the simulated board through
:class:`SimSerial`, a pyserial-like port on the UART models. Driven by ``test_board.py``; its
configuration (:func:`tb.runner.bench_config`, a :class:`sw.config.BenchConfig`): ``accel``, ``cpb``
and ``timeout`` (the accelerator, clock cycles per UART bit and the bridge's timeout in cycles: must
match the Verilog that was built), ``trace`` (a decode trace directory), ``groups`` (``full`` or
``first:N``) and ``seed`` (of the idle generator; ``trace_over_uart`` runs without and with idle
gaps before the bytes the host sends).
"""

import random

import cocotb
from cocotb.clock import Clock
from cocotb.task import bridge, resume
from cocotb.triggers import ClockCycles, First, ReadOnly, RisingEdge, Timer
from cocotbext.uart import UartSink, UartSource

from hw.board.core import LED_NAMES
from hw.board.host import config_words, trace_layers
from hw.board.run import BoardLink, run_trace, select_groups
from hw.board.uart_bridge import RESPONSE, Status
from sw.config import AccelConfig
from sw.trace.decode import load_decode_trace
from tb.runner import bench_config
from tb.stalls import random_pauses

CLOCK_NS = 10


class TB:
    """Clock, reset, the UART models on ``rx``/``tx`` and a scoreboard on the accelerator's streams.

    The scoreboard watches the handshakes of the accelerator's ``cfg``, ``x`` and ``y`` streams
    inside the design (``accel`` instance), independently of the host code: configuration words
    and rows in, rows and groups (``last``) out.
    """

    def __init__(self, dut, clocks_per_bit: int, *, seed: int = 1, stall: float = 0.0):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.bit_ns = clocks_per_bit * CLOCK_NS
        baud = 1e9 / self.bit_ns
        self.source = UartSource(dut.rx, baud=baud)
        self.sink = UartSink(dut.tx, baud=baud)
        for model in (self.source, self.sink):
            model.log.setLevel("WARNING")
        self.pauses = random_pauses(seed, stall) if stall else None
        self.rng = random.Random(seed + 3)
        self.cfg_in = self.rows_in = self.rows_out = self.groups_out = 0
        self.bytes_sent = self.bytes_received = 0

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)
        self.cfg_in = self.rows_in = self.rows_out = self.groups_out = 0
        self._monitor = cocotb.start_soon(self.monitor())

    async def monitor(self):
        """Counts the handshakes of every cycle; sleeps until a ``valid`` rises while none is high."""
        a = self.dut.accel
        valids = (a.cfg__valid, a.x__valid, a.y__valid)
        while True:
            await ReadOnly()
            cfg_v, x_v, y_v = (int(v.value) for v in valids)
            if cfg_v:                           # the configuration stream is always ready
                self.cfg_in += 1
            if x_v and int(a.x__ready.value):
                self.rows_in += 1
            if y_v and int(a.y__ready.value):
                self.rows_out += 1
                self.groups_out += int(a.y__payload.value) >> (len(a.y__payload) - 1)
            if cfg_v or x_v or y_v:
                await RisingEdge(self.dut.clk)
            else:
                await First(*(RisingEdge(v) for v in valids))

    async def send(self, data: bytes):
        """The host's bytes on ``rx``; with stalls, an idle gap of 1 to 30 bits before some bytes."""
        self.bytes_sent += len(data)
        if self.pauses is None:
            await self.source.write(data)
            return
        for b in data:
            if next(self.pauses):
                await self.source.wait()
                await Timer(self.bit_ns * self.rng.randint(1, 30), unit="ns")
            await self.source.write([b])

    async def recv(self, n: int, timeout_ns: int) -> bytes:
        """Up to ``n`` bytes from ``tx``; fewer if none comes for ``timeout_ns`` (as pyserial does)."""
        got = bytearray()
        while len(got) < n:
            if self.sink.empty():
                await self.sink.wait(timeout_ns, "ns")
                if self.sink.empty():
                    break
            got += self.sink.read_nowait(min(n - len(got), self.sink.count()))
        self.bytes_received += len(got)
        return bytes(got)

    def leds(self) -> dict[str, int]:
        value = int(self.dut.leds.value)
        return {name: (value >> k) & 1 for k, name in enumerate(LED_NAMES)}


class SimSerial:
    """A pyserial-like port on the simulated board, for host code running in a bridge thread:
    ``write`` queues bytes on the UART source, ``flush`` waits (in simulated time) until they have
    been sent, ``read(n)`` waits for up to ``n`` bytes from the UART sink."""

    def __init__(self, tb: TB, timeout_ns: int):
        self._send, self._recv, self.timeout_ns = resume(tb.send), resume(tb.recv), timeout_ns
        self._flush = resume(tb.source.wait)

    def write(self, data) -> int:
        self._send(bytes(data))
        return len(data)

    def flush(self) -> None:
        self._flush()

    def read(self, n: int) -> bytes:
        return self._recv(n, self.timeout_ns)


def settings() -> tuple[AccelConfig, int, int]:
    """The build's accelerator, clock cycles per UART bit and timeout."""
    bench = bench_config()
    return bench.require("accel"), bench.require("cpb"), bench.require("timeout")


@cocotb.test()
@cocotb.parametrize(stall=[0.0, 0.3])
async def trace_over_uart(dut, stall):
    """The trace's groups through the UART, checked bit for bit by ``hw.board.run.run_trace``, with a
    scoreboard: rows in (host and design) against rows out, and against the RTL's counters."""
    cfg, cpb, timeout = settings()
    bench = bench_config()
    tr = load_decode_trace(bench.require("trace"))
    groups = select_groups(tr, bench.groups)
    tb = TB(dut, cpb, seed=bench.seed, stall=stall)
    await tb.reset()
    link = BoardLink(SimSerial(tb, timeout_ns=4 * timeout * CLOCK_NS))
    result = await bridge(run_trace)(link, tr, groups)

    await ClockCycles(dut.clk, 20)
    B = cfg.batch
    words = len(config_words(cfg, trace_layers(tr)))
    c = result["counters"]
    assert tb.cfg_in == words, f"{tb.cfg_in} configuration words reached the accelerator, {words} sent"
    assert tb.rows_in == result["rows_sent"] == len(groups) * B, (
        f"rows in: {tb.rows_in} seen at the accelerator, {result['rows_sent']} sent by the host")
    assert tb.rows_out == result["rows_received"] == tb.rows_in, (
        f"rows out: {tb.rows_out} left the accelerator, {result['rows_received']} reached the host, "
        f"{tb.rows_in} went in")
    assert tb.groups_out == c["groups"] == len(groups), (tb.groups_out, c["groups"], len(groups))
    assert c["rows_replayed"] + c["rows_computed"] == tb.rows_in, c
    assert tb.sink.empty(), f"{tb.sink.count()} bytes from the board that nobody asked for"
    leds = tb.leds()
    assert leds["configured"] and not leds["error"] and not leds["group in flight"], leds
    dut._log.info("stall %.1f: %d groups, %d rows bit-exact over the UART (%d replayed), %d bytes "
                  "sent, %d received, %d accelerator cycles", stall, len(groups), tb.rows_out,
                  c["rows_replayed"], tb.bytes_sent, tb.bytes_received, c["total_cycles"])


@cocotb.test()
async def protocol_errors(dut):
    """An unknown opcode and a command the host abandons are reported in the status byte, and the
    board answers normally afterwards."""
    cfg, cpb, timeout = settings()
    tb = TB(dut, cpb)
    await tb.reset()
    wait = 4 * timeout * CLOCK_NS

    await tb.send(bytes([0x7E, 0, 0]))
    assert await tb.recv(2, wait) == bytes([0x7E | RESPONSE, Status.BAD_OP]), "unknown opcode"
    assert tb.leds()["error"], "the error LED is off after an unknown opcode"

    # x command with only one of its two count bytes: abandoned after the timeout.
    await tb.send(bytes([0x03, 0x01]))
    await ClockCycles(dut.clk, timeout + 10 * cpb * 10)
    assert tb.sink.empty(), "the board answered a command that was never finished"

    link = BoardLink(SimSerial(tb, wait))
    assert await bridge(link.connect)() == cfg
    # INFO does not raise on old flags; they were reported there. The next answer is clean.
    await bridge(link.reset)()
    counters = await bridge(link.counters)()
    assert counters["groups"] == 0 and counters["total_cycles"] == 0, counters
    assert not tb.leds()["error"], "RESET leaves the error LED on"


@cocotb.test()
async def info_reports_abandoned_command(dut):
    """The status byte after an abandoned command carries TIMEOUT."""
    cfg, cpb, timeout = settings()
    tb = TB(dut, cpb)
    await tb.reset()
    wait = 4 * timeout * CLOCK_NS
    await tb.send(bytes([0x02, 0x05, 0x00, 0x11]))          # 5 cfg words promised, 1 byte sent
    await ClockCycles(dut.clk, timeout + 5 * cpb * 10)
    await tb.send(bytes([0x00, 0x00, 0x00]))
    head = await tb.recv(2, wait)
    assert head[0] == RESPONSE and head[1] > 0, head
    rest = await tb.recv(head[1] + 1, wait)
    assert rest[-1] == Status.TIMEOUT, f"status {rest[-1]:#04x}, expected TIMEOUT"
