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


# --- the current bridge against the reference (the bridge before its paths were registered) ----------
# The same host script (commands, bytes and the gaps between them), the same consumers and producers
# (random stalls, drawn per cycle) and random backpressure on the answer stream: the bytes out and the
# beats delivered must be the same. The script keeps away from the few cycles by which the two designs
# may differ: bytes at least ``MIN_GAP`` cycles apart (a UART byte takes 40 or more; only inside beats
# of 16 bytes or more, which last long anyway, do they come back to back), consumers that take a beat
# within ``MAX_STALL`` cycles (long before the next beat is complete) unless they are stuck on purpose,
# and waits for abandoned commands well beyond the timeout.

P = stream.Signature(8)                                                             # one-byte beats
Q = stream.Signature(data.StructLayout({"data": 300, "user": 5, "last": 1}))        # 39 bytes, 3 groups
R = stream.Signature(data.StructLayout({"data": 150, "user": 4, "last": 1}))        # read, 20 bytes
S = stream.Signature(data.StructLayout({"data": 40, "last": 1}))                    # read, 6 bytes
CMP_TIMEOUT = 400
MIN_GAP, MAX_STALL = 16, 8
STATUS_BITS = {"wide": 150, "small": 12, "two_reads": 70}


def make_bridge(kind, cls):
    """``wide``: streams that span several enable groups of the receive register and of the shift
    registers; ``small``: this file's bridge; ``two_reads``: two read streams."""
    if kind == "wide":
        return cls({"p": P, "q": Q}, {"r": R}, status_bits=150, info=bytes(range(7, 47)), timeout=CMP_TIMEOUT)
    if kind == "small":
        return cls({"a": A, "b": B}, {"c": C}, status_bits=12, info=b"hello", timeout=CMP_TIMEOUT)
    return cls({"q": Q}, {"r": R, "s": S}, status_bits=70, info=b"", timeout=CMP_TIMEOUT)


def _script(br, rng, n_commands):
    """A random command sequence of ``(kind, bytes, {read stream: beats to offer}, expected answer
    length, or None for an abandoned command)``."""
    fr, ops = br.framings, br.opcodes
    wnames, rnames = list(br._writes), list(br._reads)
    out = []
    for _ in range(n_commands):
        kind = rng.choice(["info", "write", "write", "write", "read", "read", "status", "status", "reset",
                           "bad", "abandon", "short_read", "stuck"])
        rname = rng.choice(rnames)
        rb = fr[rname].read_bytes
        if kind == "info":
            out.append((kind, [ops["info"], 0, 0], {}, 2 + len(br.info) + 1))
        elif kind in ("write", "stuck"):
            name = rng.choice(wnames)
            n = rng.choice([0, 1, 2, 3, 5]) if kind == "write" else 2
            payload = [rng.randrange(256) for _ in range(n * fr[name].write_bytes)]
            out.append((kind, [ops[name], n, 0, *payload], {}, 2 if kind == "write" else None))
        elif kind == "read":
            n = rng.choice([0, 1, 2, 3])
            out.append((kind, [ops[rname], n, 0], {rname: n}, 1 + n * rb + 1))
        elif kind == "short_read":                      # fewer beats than asked: abandoned after one
            out.append((kind, [ops[rname], 3, 0], {rname: 1}, None, 1 + rb))
        elif kind == "status":
            out.append((kind, [ops["status"], 0, 0], {}, 1 + br.status_bytes + 1))
        elif kind == "reset":
            out.append((kind, [ops["reset"], 0, 0], {}, 2))
        elif kind == "bad":
            out.append((kind, [0x70 + rng.randrange(8), rng.randrange(3), 0], {}, 2))
        else:                                           # a command that stops in the middle
            name = wnames[-1]
            full = [ops[name], 2, 0, *(rng.randrange(256) for _ in range(2 * fr[name].write_bytes))]
            out.append((kind, full[:rng.randrange(1, len(full))], {}, None))
    return out


def compare_run(kind, cls, seed, n_commands=40, status_mode="constant"):
    """Run the random script on ``make_bridge(kind, cls)``. ``status_mode``: ``constant`` (a random
    value for each command) or ``cycle`` (the cycle count). Returns the bytes out, where in them the
    status words of status answers are, those status words less the status input in the cycle in
    which the command's last byte was taken, the beats delivered per write stream and the number of
    soft resets."""
    br = make_bridge(kind, cls)
    script = _script(br, random.Random(seed), n_commands)
    fr = br.framings
    wnames, rnames = list(br._writes), list(br._reads)
    sim = Simulator(br)
    sim.add_clock(1e-8)
    got, beats = [], {n: [] for n in wnames}
    state = {"stuck": False, "resets": 0, "done": False, "spans": [], "statuses": []}
    rd_queue = {n: [] for n in rnames}
    tight = {br.opcodes[n] for n in wnames if fr[n].write_bytes >= 16}

    def held(prev, valid, payload, what):
        """A beat offered and not taken is offered again, unchanged."""
        if prev is not None:
            assert valid and payload == prev, f"{what}: a beat offered was withdrawn or changed"

    async def sink(ctx):                                # random backpressure on the answer stream
        r = random.Random(seed + 1)
        prev = None
        while True:
            ctx.set(br.o.ready, r.random() < 0.4)
            _, _, valid, ready, payload = await ctx.tick().sample(br.o.valid, br.o.ready, br.o.payload)
            held(prev, valid, payload, "o")
            prev = payload if valid and not ready else None
            if valid and ready:
                got.append(payload)

    def consumer(name, k):
        async def run(ctx):
            r = random.Random(seed + 10 + k)
            port = getattr(br, name)
            streak, prev, reset_before = 0, None, 0
            while True:
                ready = not state["stuck"] and (streak >= MAX_STALL or r.random() < 0.5)
                streak = 0 if ready else streak + 1
                ctx.set(port.ready, ready)
                _, _, valid, rdy, payload, reset = await ctx.tick().sample(
                    port.valid, port.ready, Value.cast(port.payload), br.soft_reset)
                if not (reset or reset_before):         # RESET empties a buffer, on purpose
                    held(prev, valid, payload, name)
                prev, reset_before = (payload if valid and not rdy else None), reset
                if valid and rdy:
                    beats[name].append(payload)
        return run

    def producer(name, k):                              # read beats, after random gaps (or none)
        async def run(ctx):
            r = random.Random(seed + 20 + k)
            port = getattr(br, name)
            while True:
                if not rd_queue[name]:
                    await ctx.tick()
                    continue
                gap = r.randrange(0, 12)
                if gap:
                    await ctx.tick().repeat(gap)
                ctx.set(port.valid, 1)
                ctx.set(Value.cast(port.payload), rd_queue[name][0])
                await ctx.tick().until(port.ready)
                rd_queue[name].pop(0)
                ctx.set(port.valid, 0)
        return run

    async def clock(ctx):                               # counts soft resets; the status in ``cycle`` mode
        cycle = 0
        async for _, _, pulse in ctx.tick().sample(br.soft_reset):
            state["resets"] += pulse
            cycle += 1
            if status_mode == "cycle":
                ctx.set(br.status, cycle)

    async def host(ctx):
        r = random.Random(seed + 30)
        for cmd in script:
            kind, raw, offer, want = cmd[:4]
            if status_mode == "constant":
                ctx.set(br.status, r.getrandbits(len(br.status)))
            for name, n in offer.items():
                port = getattr(br, name)
                rd_queue[name].extend(r.getrandbits(len(Value.cast(port.payload))) for _ in range(n))
            state["stuck"] = kind == "stuck"
            before = len(got)
            for j, b in enumerate(raw):
                ctx.set(br.i.valid, 1)
                ctx.set(br.i.payload, b)
                (taken_status,) = await ctx.tick().sample(br.status).until(br.i.ready)
                ctx.set(br.i.valid, 0)
                if j == 1 and r.random() < 0.2:          # a line error in the middle of a command
                    ctx.set(br.rx_error, 1)
                    await ctx.tick()
                    ctx.set(br.rx_error, 0)
                gap = r.randrange(0, 6) if j >= 3 and raw[0] in tight else r.randrange(MIN_GAP, 3 * MIN_GAP)
                if gap:
                    await ctx.tick().repeat(gap)
            if want is None:                            # abandoned: wait well beyond the timeout
                await ctx.tick().repeat(3 * CMP_TIMEOUT)
                assert len(got) - before == (cmd[4] if kind == "short_read" else 0), kind
                if kind == "stuck":
                    state["stuck"] = False
                    await ctx.tick().repeat(2 * MAX_STALL)
                continue
            for _ in range(100_000):
                if len(got) >= before + want:
                    break
                await ctx.tick()
            assert len(got) == before + want, (kind, raw[:3], len(got) - before, want)
            if kind == "status":
                span = (before + 1, before + 1 + br.status_bytes)
                state["spans"].append(span)
                value = int.from_bytes(bytes(got[span[0]:span[1]]), "little")
                state["statuses"].append(value - taken_status)   # relative in ``cycle`` mode
            await ctx.tick().repeat(r.randrange(1, 20))
        await ctx.tick().repeat(4 * CMP_TIMEOUT)        # nothing else comes out
        state["done"] = True

    sim.add_testbench(host)
    sim.add_process(sink)
    sim.add_process(clock)
    for k, name in enumerate(wnames):
        sim.add_process(consumer(name, k))
    for k, name in enumerate(rnames):
        sim.add_process(producer(name, k))
    sim.run()
    assert state["done"], "the script did not finish"
    return {"bytes": bytes(got), "spans": state["spans"], "statuses": state["statuses"], "beats": beats,
            "resets": state["resets"]}


@pytest.mark.parametrize("kind,seed", [("wide", 1), ("wide", 2), ("wide", 3), ("small", 4), ("small", 5),
                                       ("two_reads", 6)])
def test_same_bytes_as_reference(kind, seed):
    """Random commands (every kind, abandoned ones included), random gaps, stalling consumers and
    producers, random backpressure on the answers: the bytes out and the beats delivered are the
    reference's."""
    from tests.uart_bridge_ref import ReferenceBridge
    new = compare_run(kind, UartBridge, seed)
    old = compare_run(kind, ReferenceBridge, seed)
    assert new["beats"] == old["beats"]
    assert new["resets"] == old["resets"]
    assert new["bytes"] == old["bytes"]
    assert len(new["bytes"]) > 100 and all(new["beats"].values()) and new["statuses"]


def test_status_sampling_point():
    """With the cycle count as the status word: the reference returns the count of the cycle in
    which the command's last byte was taken, the bridge that of the next cycle (in which it decodes
    that byte); all other bytes are the same."""
    from tests.uart_bridge_ref import ReferenceBridge
    new = compare_run("wide", UartBridge, 7, status_mode="cycle")
    old = compare_run("wide", ReferenceBridge, 7, status_mode="cycle")
    assert len(new["spans"]) >= 3
    assert old["statuses"] == [0] * len(old["spans"])
    assert new["statuses"] == [1] * len(new["spans"])

    def rest(run):
        b, keep, at = run["bytes"], [], 0
        for lo, hi in run["spans"]:
            keep.append(b[at:lo])
            at = hi
        return b"".join(keep) + b[at:]
    assert rest(new) == rest(old)
