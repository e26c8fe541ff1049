"""The whole accelerator in amaranth.sim on every group of a small configuration's decode trace
(tb/board/small_trace.py): every output byte and replay bit, rows in order. The default
configuration runs the shipped trace in cocotb on Verilator (tb/accelerator), about a thousand
times faster than amaranth.sim would."""

import dataclasses
from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from hw.accel.accelerator import Accelerator
from hw.board.host import config_words, row_beats, trace_layers, unpack_y
from sw.trace.decode import load_decode_trace

REPO = Path(__file__).resolve().parent.parent


async def configure(ctx, dut, words):
    """Every configuration word, one per cycle (the cfg stream is always ready)."""
    for w in words:
        ctx.set(dut.cfg.valid, 1)
        ctx.set(dut.cfg.p.data.as_value(), w)
        await ctx.tick()
    ctx.set(dut.cfg.valid, 0)


async def send_group(ctx, dut, beats):
    """The ``(bits, last)`` row beats of one group on ``x``."""
    for bits, last in beats:
        ctx.set(dut.x.valid, 1)
        ctx.set(dut.x.p.data.as_value(), bits)
        ctx.set(dut.x.p.last, last)
        await ctx.tick().until(dut.x.ready)
    ctx.set(dut.x.valid, 0)


def test_every_group_of_a_small_trace(tmp_path):
    from tb.board.small_trace import SMALL_ACCEL, write_small_trace

    tr = load_decode_trace(write_small_trace(tmp_path / "trace"))
    cfg = dataclasses.replace(SMALL_ACCEL, datapath=1)     # the v1 datapath
    groups = list(range(len(tr.group_layer)))
    assert 0 < tr.replay.sum() < tr.replay.size, "the trace must both replay and compute"
    words = config_words(cfg, trace_layers(tr))
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
            y, replay, row, last = await ctx.tick().sample(
                dut.y.p.data.as_value(), dut.y.p.user.replay, dut.y.p.user.row,
                dut.y.p.last).until(dut.y.valid)
            got.append((unpack_y(y, d), int(replay), int(row), int(last)))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    sim.run_until(1e-8 * (len(words) + len(groups) * 2500))
    assert len(got) == len(groups) * B, f"{len(got)} rows out for {len(groups) * B} in"
    for k, (y, replay, row, last) in enumerate(got):
        g, b = groups[k // B], k % B
        where = (f"group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                 f"index {tr.group_index[g]}), row {b}")
        assert row == b and last == (b == B - 1), f"{where}: out of order (row {row}, last {last})"
        assert replay == tr.replay[g, b], f"{where}: replay bit {replay}, trace {tr.replay[g, b]}"
        bad = np.flatnonzero(y != tr.y[g, b])
        assert bad.size == 0, f"{where}, element {bad[0]}: RTL {y[bad[0]]}, trace {tr.y[g, b][bad[0]]}"


def small_case(seed=0):
    """A two-row, one-layer model with random weights: frame 0 computes both rows, frame 1
    replays row 1 (its q.k_prev clears the threshold) and computes row 0."""
    from types import SimpleNamespace

    from sw.config import AccelConfig
    from sw.golden import quant
    from tests.test_mlp_core_sim import random_layer

    cfg = AccelConfig(d_model=8, d_ff=16, layers=1, tokens_per_frame=2, batch=2, rows=2, cols=2,
                      cores=2, chunks=2, gate_lanes=2, tas_lanes=4, datapath=1)
    rng = np.random.default_rng(seed)
    layer = random_layer(rng, cfg.d_model, cfg.d_ff)
    G, B, d = 2, 2, cfg.d_model
    x = rng.integers(-128, 128, (G, B, d)).astype(np.int8)
    q = np.full((G, B, d), 10, np.int8)
    k = np.zeros((G, B, d), np.int8)
    k[1, 1] = 10                      # row 1 of frame 1: tas = 800 >= 400
    tr = SimpleNamespace(group_layer=np.zeros(G, int), group_frame=np.arange(G),
                         group_index=np.zeros(G, int), dims={"batch": B, "layers": 1, "d_model": d},
                         x=x, q=q, k_prev=k, threshold=np.array([400]))
    y0 = quant.swiglu_int8(x[0], layer["wg"], layer["wu"], layer["wd"], layer)
    y1 = quant.swiglu_int8(x[1], layer["wg"], layer["wu"], layer["wd"], layer)
    want = [(y0[0], 0), (y0[1], 0), (y1[0], 0), (y0[1], 1)]     # the replayed row is frame 0's
    return cfg, layer, tr, want


def run_small(static, chunk_rr=False):
    cfg, layer, tr, want = small_case()
    words = config_words(cfg, [layer], static=static, chunk_rr=chunk_rr)
    dut = Accelerator(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got, stats = [], []

    async def host(ctx):
        await configure(ctx, dut, words)
        for g in range(2):
            busy0 = [ctx.get(dut.core_busy[p]) for p in range(cfg.cores)]
            await send_group(ctx, dut, row_beats(cfg, tr, g))
            await ctx.tick().until(dut.groups == g + 1)
            stats.append((ctx.get(dut.group_cycles),
                          [ctx.get(dut.core_busy[p]) - busy0[p] for p in range(cfg.cores)]))

    async def sink(ctx):
        ctx.set(dut.y.ready, 1)
        for _ in range(4):
            y, replay = await ctx.tick().sample(dut.y.p.data.as_value(),
                                                dut.y.p.user.replay).until(dut.y.valid)
            got.append((unpack_y(y, cfg.d_model), int(replay)))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    sim.run_until(1e-8 * (len(words) + 3000))
    assert len(got) == 4
    for (gy, gr), (wy, wr) in zip(got, want, strict=True):
        np.testing.assert_array_equal(gy, wy)
        assert gr == wr
    return cfg, stats


def test_drs_beats_static_with_one_row_replayed():
    """B = 2, P = 2, row 1 replayed: static leaves core 1 idle, DRS splits row 0 over both cores
    and takes fewer cycles; both agree with the cycle model."""
    from sw.perf.cycles import group_cycles

    cfg, drs = run_small(static=False)
    _, static = run_small(static=True)
    (c_drs, busy_drs), (c_static, busy_static) = drs[1], static[1]
    assert busy_static[1] == 0 and busy_static[0] > 0, f"static: core busy cycles {busy_static}"
    assert min(busy_drs) > 0, f"DRS left a core idle: {busy_drs}"
    assert c_drs < c_static, f"DRS {c_drs} cycles, static {c_static}"
    assert c_drs == group_cycles(cfg, [0, 1]) and c_static == group_cycles(cfg, [0, 1], static=True), \
        (c_drs, c_static, group_cycles(cfg, [0, 1]), group_cycles(cfg, [0, 1], static=True))


def test_chunk_round_robin_matches_the_cycle_model():
    """Chunk round-robin through the control word: bit-exact, both cores used in both groups (chunk
    j on core j mod 2), and each group's cycles those of the cycle model's chunk-RR schedule (exact
    with row 1 replayed; within the model's 2 % with both rows computed, where it counts one cycle
    more than the RTL in every schedule)."""
    from sw.perf.cycles import group_cycles

    cfg, rr = run_small(static=False, chunk_rr=True)
    for mask, (cycles, busy) in zip(([0, 0], [0, 1]), rr, strict=True):
        model = group_cycles(cfg, mask, chunk_rr=True)
        assert min(busy) > 0, f"chunk-RR left a core idle in group {mask}: {busy}"
        assert abs(cycles - model) <= 0.02 * cycles, (mask, cycles, model)
    model = group_cycles(cfg, [0, 1], chunk_rr=True)
    assert rr[1][0] == model, (rr[1], model)
