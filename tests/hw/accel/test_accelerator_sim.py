"""The whole accelerator in amaranth.sim on every group of a small configuration's decode trace
(tb/board/small_trace.py): every output byte and replay bit, rows in order, in every schedule. The
default configuration runs the shipped trace in cocotb on Verilator (tb/accelerator), about a
thousand times faster than amaranth.sim would."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.accelerator import Accelerator
from hw.board.host import config_words, row_beats, trace_layers, unpack_y
from sw.trace.decode import load_decode_trace


async def configure(ctx, dut, words):
    """Every configuration word, one per cycle (the cfg stream is always ready)."""
    for w in words:
        ctx.set(dut.cfg.valid, 1)
        ctx.set(dut.cfg.p.data.as_value(), w)
        await ctx.tick()
    ctx.set(dut.cfg.valid, 0)


def run_to_end(sim, cycles, what):
    """Run ``sim`` until its testbenches are done; fail if that takes more than ``cycles`` clock
    cycles (a background watchdog: the simulation stops as soon as the work is done, instead of
    clocking an idle design up to the bound)."""
    async def watchdog(ctx):
        for _ in range(cycles):
            await ctx.tick()
        raise AssertionError(f"{what}: not done in {cycles:,} cycles")

    sim.add_testbench(watchdog, background=True)
    sim.run()


async def send_group(ctx, dut, beats):
    """The ``(bits, last)`` row beats of one group on ``x``."""
    for bits, last in beats:
        ctx.set(dut.x.valid, 1)
        ctx.set(dut.x.p.data.as_value(), bits)
        ctx.set(dut.x.p.last, last)
        await ctx.tick().until(dut.x.ready)
    ctx.set(dut.x.valid, 0)


@pytest.mark.parametrize("mode", ["drs", "chunk_rr", "static"])
def test_every_group_of_a_small_trace(tmp_path, mode):
    from tb.board.small_trace import SMALL_ACCEL, write_small_trace

    tr = load_decode_trace(write_small_trace(tmp_path / "trace"))
    cfg = SMALL_ACCEL
    groups = list(range(len(tr.group_layer)))
    assert 0 < tr.replay.sum() < tr.replay.size, "the trace must both replay and compute"
    words = config_words(cfg, trace_layers(tr), static=mode == "static", chunk_rr=mode == "chunk_rr")
    dut = Accelerator(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    B, d = tr.dims["batch"], tr.dims["d_model"]

    async def host(ctx):
        await configure(ctx, dut, words)
        for g in groups:
            await send_group(ctx, dut, row_beats(cfg, tr, g))

    async def sink(ctx):
        ctx.set(dut.y.ready, 1)
        for _ in range(len(groups) * B):
            y, replay, row, tas, last = await ctx.tick().sample(
                dut.y.p.data.as_value(), dut.y.p.user.replay, dut.y.p.user.row, dut.y.p.user.tas,
                dut.y.p.last).until(dut.y.valid)
            got.append((unpack_y(y, d), int(replay), int(row), int(tas), int(last)))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    run_to_end(sim, len(words) + len(groups) * 1500, f"{mode} run of the small trace")
    assert len(got) == len(groups) * B, f"{len(got)} rows out for {len(groups) * B} in"
    for k, (y, replay, row, tas, last) in enumerate(got):
        g, b = groups[k // B], k % B
        where = (f"group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                 f"index {tr.group_index[g]}), row {b}")
        assert row == b and last == (b == B - 1), f"{where}: out of order (row {row}, last {last})"
        assert replay == tr.replay[g, b], f"{where}: replay bit {replay}, trace {tr.replay[g, b]}"
        assert tas == tr.tas[g, b], f"{where}: TAS {tas}, trace {tr.tas[g, b]}"
        bad = np.flatnonzero(y != tr.y[g, b])
        assert bad.size == 0, f"{where}, element {bad[0]}: RTL {y[bad[0]]}, trace {tr.y[g, b][bad[0]]}"


@pytest.mark.parametrize("flip", [False, True])
def test_decisions_given_with_the_rows(tmp_path, flip):
    """``decisions="row"`` (the whole step's MLP): each row's TAS and replay bit come with it; the
    outputs are the trace's, replayed rows from the cache. With one replay bit flipped the run must
    differ on that row (the decision is the one given, not one the accelerator takes itself)."""
    from hw.accel.layouts import decided_row_in_layout
    from hw.lib.payload import pack
    from tb.board.small_trace import SMALL_ACCEL, write_small_trace

    tr = load_decode_trace(write_small_trace(tmp_path / "trace"))
    cfg = SMALL_ACCEL
    B, d = tr.dims["batch"], tr.dims["d_model"]
    replay = tr.replay.astype(np.int64).copy()
    # The last replayed row: its cache entry was written by an earlier frame, so computing it instead
    # gives other bytes.
    g_f, b_f = map(int, np.argwhere(replay == 1)[-1])
    if flip:
        replay[g_f, b_f] = 0
    groups = list(range(len(tr.group_layer)))
    lay = decided_row_in_layout(cfg)
    words = config_words(cfg, trace_layers(tr))
    dut = Accelerator(cfg, decisions="row")
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []

    async def host(ctx):
        await configure(ctx, dut, words)
        for g in groups:
            await send_group(ctx, dut, [(pack(lay, {
                "x": tr.x[g, b], "tas": int(tr.tas[g, b]), "replay": int(replay[g, b]),
                "layer": int(tr.group_layer[g]), "index": int(tr.group_index[g]), "row": b}), b == B - 1)
                for b in range(B)])

    async def sink(ctx):
        ctx.set(dut.y.ready, 1)
        for _ in range(len(groups) * B):
            y, rep, row, tas = await ctx.tick().sample(
                dut.y.p.data.as_value(), dut.y.p.user.replay, dut.y.p.user.row,
                dut.y.p.user.tas).until(dut.y.valid)
            got.append((unpack_y(y, d), int(rep), int(row), int(tas)))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    run_to_end(sim, len(words) + len(groups) * 1500, "the small trace with its decisions given")
    differ = []
    for k, (y, rep, row, tas) in enumerate(got):
        g, b = groups[k // B], k % B
        assert (row, rep, tas) == (b, replay[g, b], tr.tas[g, b]), f"group {g}, row {b}: {(row, rep, tas)}"
        if (y != tr.y[g, b]).any():
            differ.append((g, b))
    assert differ == ([(g_f, b_f)] if flip else []), f"rows that differ from the trace: {differ[:5]}"


def test_run_to_end_fails_a_run_that_does_not_finish():
    """The watchdog of ``run_to_end``: a testbench waiting on something that never comes fails."""
    from amaranth import Module, Signal

    m = Module()
    never = Signal()
    m.d.sync += never.eq(never)
    sim = Simulator(m)
    sim.add_clock(1e-8)

    async def hangs(ctx):
        await ctx.tick().until(never)

    sim.add_testbench(hangs)
    with pytest.raises(AssertionError, match="planted hang: not done in 40 cycles"):
        run_to_end(sim, 40, "planted hang")
