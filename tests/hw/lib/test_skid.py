"""The register slice (hw/lib/skid.py) passes every beat once, in order, under random valid and ready;
sustains one beat per cycle at its stated latency; and has no combinational path through the
directions its mode registers."""

import gc
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from amaranth.hdl import Fragment, Shape, UnusedElaboratable, Value, unsigned
from amaranth.lib import data
from amaranth.sim import Simulator

from hw.lib.skid import SkidBuffer
from tb.mutation import Mutation
from tb.runner import waves_requested

MODES = SkidBuffer.MODES
#: Cycles from a beat accepted on ``i`` to the same beat valid on ``o``.
LATENCY = {"full": 1, "forward": 1, "backward": 0}
#: Beats the slice can hold.
CAPACITY = {"full": 2, "forward": 1, "backward": 1}

WIDE = data.StructLayout({"first": 1, "last": 1, "data": 766})     # 768 bits


def run(sim, name):
    """Run ``sim``; with waveforms asked for (``WAVES=1`` or pytest's ``--waves``:
    :func:`tb.runner.waves_requested`) also write ``build/vcd/<name>.vcd``."""
    if not waves_requested():
        sim.run()
        return
    out = Path(__file__).resolve().parents[3] / "build" / "vcd"
    out.mkdir(parents=True, exist_ok=True)
    with sim.write_vcd(str(out / f"{name}.vcd")):
        sim.run()


# The handshake of tests/streams.py (stream_put / stream_get), for any payload shape and with a
# way out: a slice that loses a beat would leave stream_get waiting forever.

async def put(ctx, port, bits, stop):
    """Offer one beat and wait until it is taken, or until ``stop()``."""
    ctx.set(port.valid, 1)
    ctx.set(Value.cast(port.payload), bits)
    while True:
        _, _, ready = await ctx.tick().sample(port.ready)
        if ready or stop():
            break
    ctx.set(port.valid, 0)


async def get(ctx, port, stop):
    """Take one beat, or give up at ``stop()``."""
    ctx.set(port.ready, 1)
    while True:
        _, _, valid = await ctx.tick().sample(port.valid)
        if valid or stop():
            break
    ctx.set(port.ready, 0)


def scoreboard(mode, shape, seed, n, p_idle, p_stall, cls=SkidBuffer):
    """Random gaps on both sides. A monitor records every beat taken on ``i`` (the model: they
    must leave in that order) and every beat given on ``o``, counts beats inside in every cycle
    and checks the stream rule on ``o``. Returns ``(sent, taken, given, errors)``."""
    dut = cls(shape, mode=mode)
    width = Shape.cast(shape).width
    rng = np.random.default_rng(seed)
    sent = [int.from_bytes(rng.bytes((width + 7) // 8), "little") & ((1 << width) - 1) for _ in range(n)]
    taken, given, errors = [], [], []
    cycle = [0]
    sim = Simulator(dut)

    def stop():
        return cycle[0] > 20 * n + 100

    sim.add_clock(1e-8)

    async def producer(ctx):
        prng = np.random.default_rng(seed + 1000)
        for beat in sent:
            while prng.random() < p_idle:
                await ctx.tick()
            await put(ctx, dut.i, beat, stop)

    async def consumer(ctx):
        crng = np.random.default_rng(seed + 2000)
        for _ in range(n):
            while crng.random() < p_stall:
                await ctx.tick()
            await get(ctx, dut.o, stop)

    async def monitor(ctx):
        held = None
        inside = 0
        async for _, _, iv, ir, ip, ov, orr, op in ctx.tick().sample(
                dut.i.valid, dut.i.ready, Value.cast(dut.i.payload),
                dut.o.valid, dut.o.ready, Value.cast(dut.o.payload)):
            c = cycle[0]
            if held is not None and not (ov and op == held):
                errors.append(f"cycle {c}: o dropped or changed a beat that was waiting "
                              f"(valid {ov}, payload {op:#x}, was {held:#x})")
            held = op if ov and not orr else None
            if iv and ir:
                taken.append(ip)
            if ov and orr:
                given.append(op)
            inside = len(taken) - len(given)
            if not 0 <= inside <= CAPACITY[mode]:
                errors.append(f"cycle {c}: {inside} beats taken and not given, but the slice holds "
                              f"{CAPACITY[mode]} (a beat was lost or invented)")
            cycle[0] += 1

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.add_testbench(monitor, background=True)
    run(sim, f"skid_{mode}_{seed}")
    return sent, taken, given, errors


def check_scoreboard(sent, taken, given, errors):
    for k, (a, b) in enumerate(zip(taken, given, strict=False)):
        if a != b:
            where = f"beat {k} came out as {b:#x}, expected {a:#x}"
            if b in taken:
                where += f" (beat {taken.index(b)}: a beat was lost, duplicated or reordered)"
            raise AssertionError(where)
    assert not errors, f"{len(errors)} errors: " + "; ".join(errors[:3])
    assert taken == sent, f"the producer got {len(taken)} of {len(sent)} beats in"
    assert len(given) == len(taken), f"{len(taken)} beats in, {len(given)} out"


STALLS = [(0.0, 0.0), (0.3, 0.5), (0.5, 0.3), (0.1, 0.7)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_in_order_random_handshake(mode, seed):
    p_idle, p_stall = STALLS[seed]
    check_scoreboard(*scoreboard(mode, unsigned(16), seed, 300, p_idle, p_stall))


@pytest.mark.parametrize("mode", MODES)
def test_wide_struct_payload(mode):
    check_scoreboard(*scoreboard(mode, WIDE, 11, 80, 0.3, 0.5))


@pytest.mark.parametrize("mode", MODES)
def test_full_throughput_and_latency(mode):
    """``i.valid`` and ``o.ready`` always high: one beat per cycle, each exactly ``LATENCY`` cycles
    after it was accepted, and ``i.ready`` never falls."""
    n = 50
    dut = SkidBuffer(unsigned(16), mode=mode)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    ins, outs = [], []

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        # Latency 1: nothing may appear on o before the first edge.
        assert ctx.get(dut.o.valid) == (LATENCY[mode] == 0), "o.valid before any beat was clocked in"
        for cycle in range(n + 3):
            ctx.set(dut.i.valid, int(cycle < n))
            ctx.set(dut.i.payload, cycle + 1)
            _, _, iv, ir, ov, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.payload)
            if iv:
                assert ir, f"i.ready low in cycle {cycle} with o.ready always high"
                ins.append((cycle, cycle + 1))
            if ov:
                outs.append((cycle, op))

    sim.add_testbench(bench)
    run(sim, f"skid_{mode}_throughput")
    assert [p for _, p in outs] == [p for _, p in ins], "beats lost, duplicated or reordered"
    assert [c for c, _ in outs] == [c + LATENCY[mode] for c, _ in ins], (
        f"expected every beat on o {LATENCY[mode]} cycle(s) after it was taken: "
        f"in at {[c for c, _ in ins][:6]}..., out at {[c for c, _ in outs][:6]}...")


def probe_paths(mode, seed=5, cycles=300, cls=SkidBuffer):
    """In every cycle of random traffic, flip ``o.ready``, ``i.valid`` and ``i.payload`` before
    the clock edge and record which outputs change within the cycle. Returns the set of
    ``(input, output)`` pairs with a combinational path, and the fraction of cycles the slice
    was full."""
    dut = cls(unsigned(8), mode=mode)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    paths = set()
    full = [0]

    async def bench(ctx):
        rng = np.random.default_rng(seed)
        outputs = {"i.ready": dut.i.ready, "o.valid": dut.o.valid, "o.payload": dut.o.payload}
        inputs = {"o.ready": dut.o.ready, "i.valid": dut.i.valid, "i.payload": dut.i.payload}
        for _ in range(cycles):
            full[0] += int(ctx.get(dut.o.valid) and not ctx.get(dut.i.ready))
            for iname, isig in inputs.items():
                width = 8 if iname == "i.payload" else 1
                before = {o: ctx.get(s) for o, s in outputs.items()}
                for v in (0, (1 << width) - 1, int(rng.integers(0, 1 << width))):
                    ctx.set(isig, v)
                    for oname, osig in outputs.items():
                        if ctx.get(osig) != before[oname]:
                            paths.add((iname, oname))
            # The beat actually offered this cycle (held until taken is not needed here: any
            # sequence of inputs must leave the registered outputs alone within the cycle).
            ctx.set(dut.o.ready, int(rng.random() < 0.5))
            ctx.set(dut.i.valid, int(rng.random() < 0.7))
            ctx.set(dut.i.payload, int(rng.integers(0, 256)))
            await ctx.tick()

    sim.add_testbench(bench)
    run(sim, f"skid_{mode}_paths")
    return paths, full[0] / cycles


#: The combinational input-to-output paths each mode has (every other pair must be registered).
COMB_PATHS = {
    "full": set(),
    "forward": {("o.ready", "i.ready")},
    "backward": {("i.valid", "o.valid"), ("i.payload", "o.payload")},
}


@pytest.mark.parametrize("mode", MODES)
def test_no_combinational_path(mode):
    check_paths(mode, *probe_paths(mode))


def check_paths(mode, paths, full):
    assert full > 0.1, f"the probe reached a full slice in only {full:.0%} of the cycles"
    assert paths == COMB_PATHS[mode], (
        f"combinational paths {sorted(paths)}, expected only {sorted(COMB_PATHS[mode])}")


#: Planted bugs in hw/lib/skid.py (never written to the working tree): the mode they break, the test
#: that must catch each on its own, and the words of its failure.
PLANTED = {
    "skid-never-fills": (
        Mutation("hw/lib/skid.py", "        with m.Elif(empty & i.valid):\n"
                               "            m.d.sync += empty.eq(0)\n", ""),
        "full", "scoreboard", "a beat was lost"),
    "main-skips-skid": (
        Mutation("hw/lib/skid.py", "main.eq(Mux(empty, i_bits, skid))", "main.eq(i_bits)"),
        "full", "scoreboard", "a beat was lost"),
    "backward-skid-ignored": (
        Mutation("hw/lib/skid.py", "o_bits.eq(Mux(empty, i_bits, skid))", "o_bits.eq(i_bits)"),
        "backward", "scoreboard", "a beat was lost"),
    "ready-through": (
        Mutation("hw/lib/skid.py", "i.ready.eq(empty)", "i.ready.eq(empty | o.ready)"),
        "full", "paths", "('o.ready', 'i.ready')"),
}


@pytest.mark.parametrize("bug", PLANTED)
def test_planted_bug_is_caught(bug):
    mutation, mode, test, words = PLANTED[bug]
    planted = mutation.load().SkidBuffer
    with pytest.raises(AssertionError, match=re.escape(words)):
        if test == "scoreboard":
            check_scoreboard(*scoreboard(mode, unsigned(16), 1, 300, *STALLS[1], cls=planted))
        else:
            check_paths(mode, *probe_paths(mode, cls=planted))


def test_reset_values_and_resetless_datapath():
    """Only the control flags reset; the payload registers carry no reset."""
    for mode in MODES:
        dut = SkidBuffer(WIDE, mode=mode)
        frag = Fragment.get(dut, None)
        regs = {}
        for stmts in frag.statements.values():
            for stmt in stmts:
                for sig in stmt._lhs_signals():
                    regs.setdefault(sig.name, sig)
        payload = [regs[n] for n in ("main", "skid") if n in regs]
        flags = [regs[n] for n in ("main_valid", "skid_empty") if n in regs]
        assert payload and all(s.reset_less and len(s) == 768 for s in payload), mode
        assert flags and not any(s.reset_less for s in flags), mode
        assert all(s.init == 0 for s in payload + flags if s.name != "skid_empty"), mode


def test_bad_arguments():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)      # the refused objects
        with pytest.raises(ValueError, match="not 'both'"):
            SkidBuffer(unsigned(8), mode="both")
        with pytest.raises(TypeError):
            SkidBuffer("eight")
        gc.collect()
