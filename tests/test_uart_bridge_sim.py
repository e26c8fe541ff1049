"""The command bridge in amaranth.sim, on its byte streams (no UART): every command of the protocol
on small streams with and without ``user``/``last``, consumers that stall, and the error paths
(unknown opcode, abandoned command, a beat lost because the stream did not take the previous one,
RESET emptying a stuck buffer)."""

import gc
import random
import warnings

import pytest
from amaranth import Value
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import data, stream
from amaranth.sim import Simulator

from hw.board.uart_bridge import RESPONSE, Status, UartBridge, framing

A = stream.Signature(12)                                                          # plain payload
B = stream.Signature(data.StructLayout({"data": 20, "user": 3, "last": 1}))      # framed packet
C = stream.Signature(data.StructLayout({"data": 16, "user": 3, "last": 1}))      # read stream
TIMEOUT = 300


def make():
    return UartBridge({"a": A, "b": B}, {"c": C}, status_bits=12, info=b"hello", timeout=TIMEOUT)


def test_opcodes_and_framing():
    br = make()
    br._MustUse__silence = True
    assert br.opcodes == {"info": 0, "reset": 1, "a": 2, "b": 3, "c": 4, "status": 5}
    fa, fb, fc = (br.framings[n] for n in "abc")
    assert (fa.write_bytes, fa.last) == (2, False)
    assert (fb.write_bytes, fb.last, fb.user_bits) == (3, True, 3)
    assert (fc.data_bytes, fc.tail_bytes, fc.read_bytes) == (2, 1, 3)
    assert framing(stream.Signature(8)).write_bytes == 1


def test_bad_arguments():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)      # the refused objects
        with pytest.raises(ValueError, match="reserved"):
            UartBridge({"o": A}, {})
        with pytest.raises(ValueError, match="reserved"):
            UartBridge({"reset": A}, {})
        with pytest.raises(TypeError, match="stream.Signature"):
            UartBridge({"a": 8}, {})
        with pytest.raises(ValueError, match="255"):
            UartBridge({}, {}, info=bytes(256))
        gc.collect()


class Host:
    """Bytes in and out of the bridge's ``i``/``o`` streams; sent bytes are ``gap`` cycles apart,
    as they would be from a UART receiver."""

    def __init__(self, br, gap=10):
        self.br, self.gap = br, gap

    async def send(self, ctx, raw):
        for b in raw:
            ctx.set(self.br.i.valid, 1)
            ctx.set(self.br.i.payload, b)
            await ctx.tick().until(self.br.i.ready)
            ctx.set(self.br.i.valid, 0)
            await ctx.tick().repeat(self.gap)

    async def recv(self, ctx, n):
        ctx.set(self.br.o.ready, 1)
        got = []
        for _ in range(n):
            (b,) = await ctx.tick().sample(self.br.o.payload).until(self.br.o.valid)
            got.append(b)
        ctx.set(self.br.o.ready, 0)
        return bytes(got)

    async def silent(self, ctx, cycles):
        """No answer byte for ``cycles`` cycles."""
        for _ in range(cycles):
            _, _, valid = await ctx.tick().sample(self.br.o.valid)
            assert not valid, "the bridge answered when nothing was due"


def run(bench, consumers=(), producers=(), cycles=20_000):
    br = make()
    sim = Simulator(br)
    sim.add_clock(1e-8)
    log = {"a": [], "b": [], "resets": 0}

    async def host(ctx):
        await bench(ctx, br, Host(br), log)
    sim.add_testbench(host)
    for c in consumers:
        async def consumer(ctx, c=c):
            await c(ctx, br, log)
        sim.add_testbench(consumer, background=True)
    for p in producers:
        async def producer(ctx, p=p):
            await p(ctx, br)
        sim.add_testbench(producer, background=True)

    async def resets(ctx):
        async for _, _, pulse in ctx.tick().sample(br.soft_reset):
            log["resets"] += pulse
    sim.add_process(resets)
    sim.run_until(1e-8 * cycles)
    return log


def stalling_consumer(name, p_stall, seed=0):
    async def consume(ctx, br, log):
        rng = random.Random(seed)
        port = getattr(br, name)
        raw = Value.cast(port.payload)
        while True:
            ctx.set(port.ready, rng.random() >= p_stall)
            _, _, valid, ready, payload = await ctx.tick().sample(port.valid, port.ready, raw)
            if valid and ready:
                log[name].append(payload)
    return consume


def c_producer(beats):
    async def produce(ctx, br):
        for d, u, last in beats:
            ctx.set(br.c.valid, 1)
            ctx.set(br.c.payload.data, d)
            ctx.set(br.c.payload.user, u)
            ctx.set(br.c.payload.last, last)
            await ctx.tick().until(br.c.ready)
            ctx.set(br.c.valid, 0)
            await ctx.tick().repeat(7)
    return produce


def test_every_command():
    """INFO, writes with and without ``last`` into stalling consumers, a read, the status word,
    an empty write, an unknown opcode and RESET, each answered with a clean status byte."""
    c_beats = [(0xBEEF, 5, 0), (0x0102, 2, 1)]
    results = {}

    async def bench(ctx, br, host, log):
        ctx.set(br.status, 0xABC)
        await host.send(ctx, [0x00, 0, 0])
        results["info"] = await host.recv(ctx, 2 + 5 + 1)
        await host.send(ctx, [0x02, 3, 0, 0x23, 0x01, 0xBC, 0x0A, 0x01, 0x00])
        results["a"] = await host.recv(ctx, 2)
        # b: data 0x12345 user 6, then data 0xFFFFF user 1 (23-bit beats in 3 bytes)
        await host.send(ctx, [0x03, 2, 0, 0x45, 0x23, 0x61, 0xFF, 0xFF, 0x1F])
        results["b"] = await host.recv(ctx, 2)
        await host.send(ctx, [0x04, 2, 0])
        results["c"] = await host.recv(ctx, 1 + 2 * 3 + 1)
        await host.send(ctx, [0x05, 0, 0])
        results["status"] = await host.recv(ctx, 1 + 2 + 1)
        await host.send(ctx, [0x02, 0, 0])
        results["empty"] = await host.recv(ctx, 2)
        await host.send(ctx, [0x40, 0, 0])
        results["bad"] = await host.recv(ctx, 2)
        await host.send(ctx, [0x01, 0, 0])
        results["reset"] = await host.recv(ctx, 2)
        results["done"] = True

    log = run(bench, consumers=[stalling_consumer("a", 0.6, 1), stalling_consumer("b", 0.6, 2)],
              producers=[c_producer(c_beats)])
    assert results.get("done"), results
    assert results["info"] == bytes([RESPONSE]) + bytes([5]) + b"hello" + bytes([0])
    assert results["a"] == bytes([0x82, 0]) and log["a"] == [0x123, 0xABC, 0x001]
    b_beats = [(v & 0xFFFFF, (v >> 20) & 7, v >> 23) for v in log["b"]]
    assert results["b"] == bytes([0x83, 0]) and b_beats == [(0x12345, 6, 0), (0xFFFFF, 1, 1)]
    want_c = bytes([0x84, 0xEF, 0xBE, 5, 0x02, 0x01, 2 | 8, 0])
    assert results["c"] == want_c, results["c"].hex()
    assert results["status"] == bytes([0x85, 0xBC, 0x0A, 0])
    assert results["empty"] == bytes([0x82, 0])
    assert results["bad"] == bytes([0xC0, Status.BAD_OP])
    assert results["reset"] == bytes([0x81, 0]) and log["resets"] == 1


def test_abandoned_command_and_overrun():
    """A header that never finishes is abandoned after the timeout; a beat that finds the stream's
    buffer full is lost (OVERRUN), the command then times out waiting for the stuck beat, and
    RESET empties the buffer. Each is reported once, in the next status byte."""
    results = {}

    async def bench(ctx, br, host, log):
        ctx.set(br.a.ready, 0)                       # nobody takes stream a
        await host.send(ctx, [0x02])                 # a command without its count
        await host.silent(ctx, TIMEOUT + 20)
        await host.send(ctx, [0x00, 0, 0])
        results["info1"] = await host.recv(ctx, 8)
        await host.send(ctx, [0x02, 2, 0, 0x11, 0x00, 0x22, 0x00])
        await host.silent(ctx, TIMEOUT + 20)         # the second beat is lost, the first stuck
        results["stuck"] = ctx.get(br.a.valid), ctx.get(br.a.payload)
        await host.send(ctx, [0x01, 0, 0])
        results["reset"] = await host.recv(ctx, 2)
        results["after"] = ctx.get(br.a.valid)
        await host.send(ctx, [0x00, 0, 0])
        results["info2"] = await host.recv(ctx, 8)

    run(bench)
    assert results["info1"][-1] == Status.TIMEOUT
    assert results["stuck"] == (1, 0x011)
    assert results["reset"] == bytes([0x81, Status.OVERRUN | Status.TIMEOUT])
    assert results["after"] == 0
    assert results["info2"][-1] == 0


def test_rx_error_is_reported():
    results = {}

    async def bench(ctx, br, host, log):
        ctx.set(br.rx_error, 1)
        await ctx.tick()
        ctx.set(br.rx_error, 0)
        assert ctx.get(br.flags) == Status.LINE
        await host.send(ctx, [0x05, 0, 0])
        results["status"] = await host.recv(ctx, 4)

    run(bench)
    assert results["status"][-1] == Status.LINE
