"""The UART transmitter and receiver in amaranth.sim: loopback at several dividers, the exact bit
timing on the line, a receiver clocked 3 % off the sender, and the errors it reports (low stop
bit, byte lost while the previous one waits, a glitch that is not a start bit)."""

import random

import pytest
from amaranth import Module
from amaranth.sim import Simulator

from hw.board.uart_rx import UartRx
from hw.board.uart_tx import UartTx


async def put_byte(ctx, stream, byte):
    """Offer one byte on a byte stream and wait until it is taken."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, byte)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


def simulate(dut, *benches, cycles):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    for bench in benches:
        sim.add_testbench(bench)
    sim.run_until(1e-8 * cycles)


@pytest.mark.parametrize("cpb", [4, 5, 8, 13])
def test_loopback(cpb):
    """Random bytes through UartTx -> line -> UartRx, back to back, with a consumer that pauses
    (but never for a whole byte)."""
    rng = random.Random(cpb)
    data = [rng.randrange(256) for _ in range(40)]
    m = Module()
    m.submodules.tx = tx = UartTx(cpb)
    m.submodules.rx = rx = UartRx(cpb)
    m.d.comb += rx.rx.eq(tx.tx)
    got, errors = [], []

    async def producer(ctx):
        for b in data:
            await put_byte(ctx, tx.i, b)

    async def consumer(ctx):
        while len(got) < len(data):
            ctx.set(rx.o.ready, rng.random() < 0.5)
            _, _, payload, valid, ready, fe, ov = await ctx.tick().sample(
                rx.o.payload, rx.o.valid, rx.o.ready, rx.frame_error, rx.overflow)
            if valid and ready:
                got.append(payload)
            if fe or ov:
                errors.append((fe, ov))

    simulate(m, producer, consumer, cycles=len(data) * 10 * cpb + 200)
    assert errors == []
    assert got == data


def run_line(bits_cycles, cpb, *, ready=True, cycles=None):
    """Drive the receiver's line with ``(level, cycles)`` pairs; returns (bytes, frame errors, overflows)."""
    dut = UartRx(cpb)
    got, fe, ov = [], [], []
    total = sum(c for _, c in bits_cycles) + 4 * cpb

    async def line(ctx):
        for level, n in bits_cycles:
            ctx.set(dut.rx, level)
            await ctx.tick().repeat(n)
        ctx.set(dut.rx, 1)

    async def watch(ctx):
        ctx.set(dut.o.ready, ready)
        for _ in range(total):
            _, _, payload, valid, f, o = await ctx.tick().sample(dut.o.payload, dut.o.valid,
                                                                 dut.frame_error, dut.overflow)
            if valid and ready:
                got.append(payload)
            fe.append(f)
            ov.append(o)
        if not ready:
            got.append(ctx.get(dut.o.payload) if ctx.get(dut.o.valid) else None)

    simulate(dut, line, watch, cycles=cycles or total + 10)
    return got, sum(fe), sum(ov)


def frame(byte, bit_cycles, stop=1):
    """``(level, cycles)`` of one 8N1 character (bits LSB first) followed by one idle bit."""
    bits = [0] + [(byte >> k) & 1 for k in range(8)] + [stop, 1]
    return [(b, bit_cycles) for b in bits]


@pytest.mark.parametrize("bit_cycles", [31, 33])
def test_rx_tolerates_three_percent(bit_cycles):
    """A sender 3 % slower or faster than the receiver's 32 cycles per bit."""
    data = [0x55, 0x00, 0xFF, 0xA3, 0x3C]
    got, fe, ov = run_line([p for b in data for p in frame(b, bit_cycles)], 32)
    assert (got, fe, ov) == (data, 0, 0)


def test_rx_reports_low_stop_bit_and_drops_the_byte():
    got, fe, ov = run_line(frame(0x5A, 8, stop=0) + [(1, 16)] + frame(0x21, 8), 8)
    assert (got, fe, ov) == ([0x21], 1, 0)


def test_rx_ignores_a_glitch():
    got, fe, ov = run_line([(1, 5), (0, 2), (1, 30)] + frame(0x77, 8), 8)
    assert (got, fe, ov) == ([0x77], 0, 0)


def test_rx_overflow_keeps_the_first_byte():
    """Nobody takes the bytes: the first waits in ``o``, the second is lost and reported."""
    got, fe, ov = run_line(frame(0x11, 8) + frame(0x22, 8), 8, ready=False)
    assert (got, fe, ov) == ([0x11], 0, 1)


def test_tx_waveform():
    """Start bit, eight data bits LSB first, stop bit: each exactly ``cpb`` cycles, idle high."""
    cpb = 6
    dut = UartTx(cpb)
    levels = []

    async def bench(ctx):
        levels.append(ctx.get(dut.tx))
        await put_byte(ctx, dut.i, 0b1011_0010)
        for _ in range(12 * cpb):
            levels.append(ctx.get(dut.tx))
            await ctx.tick()

    simulate(dut, bench, cycles=14 * cpb)
    assert levels[0] == 1
    line = levels[1:]
    start = line.index(0)
    want = [0, 0, 1, 0, 0, 1, 1, 0, 1, 1]
    assert line[start:start + 10 * cpb] == [b for b in want for _ in range(cpb)], line
    assert all(v == 1 for v in line[start + 10 * cpb:])


def test_clocks_per_bit_is_checked():
    from hw.board.uart_rx import check_clocks_per_bit

    with pytest.raises(ValueError, match="at least 4"):
        check_clocks_per_bit(3)
    with pytest.raises(TypeError, match="integer"):
        check_clocks_per_bit(8.0)
