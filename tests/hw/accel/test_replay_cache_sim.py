"""The replay cache replays the shipped trace's decisions: every replayed row must read back the
output the software used (chaining included); computed rows are written back."""

from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from hw.accel.replay_cache import ReplayCache, request_layout
from hw.lib.payload import pack, unpack_int8
from sw.trace.decode import load_decode_trace
from tests.streams import stream_get, stream_put

REPO = Path(__file__).resolve().parents[3]


def run_cache(tr, groups, *, corrupt_write=None):
    d = tr.dims
    dim, L, N, B = d["d_model"], d["layers"], tr.manifest["tokens_per_frame"], d["batch"]
    dut = ReplayCache(dim, L, N, B)
    layout = request_layout(dim, L, N, B)
    reqs = []
    for g in groups:
        for b in range(B):
            y = tr.y[g, b].copy()
            write = not tr.replay[g, b]
            if write and corrupt_write == (g, b):
                y[0] ^= 1
            reqs.append((write, int(tr.group_layer[g]), int(tr.group_index[g]), b, y, g))
    expected = [(r[5], r[3], tr.y[r[5], r[3]]) for r in reqs if not r[0]]
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    rng = np.random.default_rng(0)

    async def producer(ctx):
        for write, li, ix, b, y, _ in reqs:
            if rng.random() < 0.2:
                await ctx.tick()
            await stream_put(ctx, dut.i, pack(layout, {"write": write, "layer": li, "index": ix, "row": b,
                                                       "y": [int(v) for v in y]}))

    async def consumer(ctx):
        crng = np.random.default_rng(1)
        for _ in expected:
            while crng.random() < 0.3:
                await ctx.tick()
            bits = await stream_get(ctx, dut.o)
            got.append((unpack_int8(bits & ((1 << 8 * dim) - 1), dim), bits >> 8 * dim))

    sim.add_testbench(producer)
    sim.add_testbench(consumer)
    sim.run_until(1e-8 * 4 * (len(reqs) + 50))
    return expected, got


def first_bad(expected, got, tr):
    assert len(got) == len(expected), f"{len(got)} reads returned for {len(expected)} replayed rows"
    for (g, b, want), (have, row) in zip(expected, got, strict=True):
        if row != b:
            return (f"layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, index {tr.group_index[g]}: "
                    f"the read of row {b} came back as row {row}")
        if not np.array_equal(want, have):
            e = int(np.flatnonzero(want != have)[0])
            return (f"layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, index {tr.group_index[g]}, "
                    f"row {b}, element {e}: cache {have[e]}, software {want[e]}")
    return None


def subset(tr):
    return np.flatnonzero((tr.group_index < 8) & (tr.group_frame <= 4))


def test_cache_serves_replayed_rows():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    groups = subset(tr)
    assert tr.replay[groups].sum() > 100
    expected, got = run_cache(tr, groups)
    msg = first_bad(expected, got, tr)
    assert msg is None, msg


def test_cache_catches_a_corrupted_write():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    groups = subset(tr)
    # A computed row in frame 1 whose position replays in frame 2 (same layer, index, row).
    key = None
    for g in groups:
        if tr.group_frame[g] == 1:
            for b in range(tr.dims["batch"]):
                nxt = [h for h in groups if tr.group_frame[h] == 2
                       and tr.group_layer[h] == tr.group_layer[g] and tr.group_index[h] == tr.group_index[g]]
                if not tr.replay[g, b] and nxt and tr.replay[nxt[0], b]:
                    key = (g, b)
                    break
        if key:
            break
    assert key is not None
    expected, got = run_cache(tr, groups, corrupt_write=key)
    assert first_bad(expected, got, tr) is not None
