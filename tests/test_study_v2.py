"""The v2 cycle model (``sw/perf/study_v2.py``): closed forms, schedule invariants, the trace figures
quoted in ``docs/architecture.md`` ("v2 datapath: design study")."""

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sw.perf.study_v2 import (
    DEFAULT_V2,
    SCHEDULES,
    V2Geometry,
    _advance,
    group_cycles_v2,
    group_schedule_v2,
    resource_estimate,
    trace_cycles_v2,
    v1_group_cycles_chunk_rr,
)

G = DEFAULT_V2
B, P, S = G.batch, G.cores, G.chunks
MASKS = list(itertools.product((0, 1), repeat=B))
GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "fastcar"


def test_derived_constants_of_the_proposal():
    assert (G.macs, G.gu_cycles, G.d_cycles, G.row_cycles) == (128, 96, 48, 576)
    assert G.mv_latency == 1 + 2 + 2 + 3 + 1                      # addr, DP16KD, MULT18X18D, tree, acc
    assert G.h_latency == G.mv_latency + 6 + 16 + 6 == 37          # < D pass (48): hidden
    assert G.tail == G.mv_latency + 1 + 1 + 8 // 2 + 6 + 2 == 23
    assert G.front == 1 + 1 + 96 // 16 + (2 + 4) + 1 == 15


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_all_replayed_group(schedule):
    # Last row's beat in cycle B - 1, its TAS and decision, cache read and output.
    assert group_cycles_v2(G, [1] * B, schedule) == (B - 1) + G.front + G.replayed_tail == 20


@pytest.mark.parametrize("f", range(B))
def test_one_computed_row(f):
    trailing = B - 1 - f                          # replayed rows after it leave one per cycle
    start = f + G.front + G.dispatch              # its first chunk enters core 0
    spread = start + (S // P) * G.chunk_cycles + (P - 1) + G.tail + trailing
    mask = [1] * B
    mask[f] = 0
    assert group_cycles_v2(G, mask, "chunk_rr") == spread
    assert group_cycles_v2(G, mask, "drs") == spread
    assert group_cycles_v2(G, mask, "row_static") == start + S * G.chunk_cycles + G.tail + trailing
    if f == 0:
        assert spread == 16 + 576 + 1 + 23 + 3 == 619


@pytest.mark.parametrize("schedule", ("chunk_rr", "drs"))
def test_dense_group(schedule):
    assert group_cycles_v2(G, [0] * B, schedule) == (G.front + G.dispatch + B * S // P * G.chunk_cycles
                                                       + (P - 1) + G.tail) == 2344


def test_dense_row_static_queues_at_the_output_requantisers():
    # Rows 2 and 3 end together on the two cores; their 2 x 12 output blocks share 2 lanes.
    nb = G.d_model // G.mv_out
    core1_end = G.front + G.dispatch + 1 + B * S // P * G.chunk_cycles
    first_block = core1_end - 1 - (nb - 1) * G.d_block_beats + G.mv_latency + G.acc_write + G.core_sum
    assert group_cycles_v2(G, [0] * B, "row_static") == (first_block + 2 * nb * G.out_block_cycles
                                                           + G.req_latency + G.out_latency) == 2391


def test_h_latency_hidden_up_to_the_d_pass():
    mask = (0, 1, 1, 1)
    base = group_cycles_v2(G, mask, "chunk_rr")
    for extra in (0, 5, 11):                      # h_latency 37 .. 48 = D pass
        assert group_cycles_v2(replace(G, swiglu_latency=6 + extra), mask, "chunk_rr") == base
    for extra in (12, 40):                        # the last D of each core waits
        g = replace(G, swiglu_latency=6 + extra)
        assert group_cycles_v2(g, mask, "chunk_rr") == base + g.h_latency - G.d_cycles


GEOMETRIES = [G, replace(G, cores=3), replace(G, cores=4, chunks=16), replace(G, swiglu_latency=100),
              replace(G, chunks=4)]


@pytest.mark.parametrize("g", GEOMETRIES, ids=lambda g: f"P{g.cores}S{g.chunks}h{g.h_latency}")
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_chunk_once_and_dependencies(g, schedule):
    for mask in MASKS:
        r = group_schedule_v2(g, mask, schedule)
        computed = [b for b in range(B) if not mask[b]]
        for kind, n in (("gu", g.gu_cycles), ("d", g.d_cycles)):
            got = sorted((p.row, p.chunk) for p in r.passes if p.kind == kind)
            assert got == [(b, j) for b in computed for j in range(g.chunks)], (mask, kind)
            assert all(p.end - p.start == p.issue == n for p in r.passes if p.kind == kind)
        gu = {(p.row, p.chunk): p for p in r.passes if p.kind == "gu"}
        for p in r.passes:
            if p.kind == "d":          # down of chunk c after its SiLU output, on the same core
                assert p.start >= gu[p.row, p.chunk].end + g.h_latency
                assert p.core == gu[p.row, p.chunk].core
        for c in range(g.cores):       # one pass at a time per core
            ps = sorted((p.start, p.end) for p in r.passes if p.core == c)
            assert all(a[1] <= b[0] for a, b in zip(ps, ps[1:], strict=False))
        assert r.macs_done == len(computed) * 3 * g.d_model * g.d_ff
        if computed:
            last = max(p.end for p in r.passes)
            assert r.cycles >= last + g.tail
        if schedule == "chunk_rr":
            assert all(c == j % g.cores for (b, j), c in r.assignment.items())
        if schedule == "row_static":
            assert all(c == b % g.cores for (b, j), c in r.assignment.items())


@pytest.mark.parametrize("g", GEOMETRIES + [replace(G, cores=3, chunks=16)],
                         ids=lambda g: f"P{g.cores}S{g.chunks}h{g.h_latency}")
def test_drs_against_round_robin_on_equal_chunks(g):
    for mask in MASKS:
        chunks = (B - sum(mask)) * g.chunks
        drs, rr = group_cycles_v2(g, mask, "drs"), group_cycles_v2(g, mask, "chunk_rr")
        assert drs <= rr + chunks
        if g.chunks % g.cores == 0:   # (otherwise per-row round robin overloads the low cores:
            assert drs == rr          # with 3 cores and 3 rows row-static beats it)
            assert group_cycles_v2(g, mask, "row_static") >= rr


def test_drs_routes_around_a_stalled_core():
    work = None
    stalled = [[], [(0, 10_000)]]                 # core 1 never ready during the group
    mask = (0, 1, 1, 1)
    drs = group_schedule_v2(G, mask, "drs", work=work, stalls=stalled)
    rr = group_schedule_v2(G, mask, "chunk_rr", work=work, stalls=stalled)
    assert set(drs.assignment.values()) == {0}
    assert drs.cycles == G.front + G.dispatch + S * G.chunk_cycles + G.tail + 3
    assert rr.cycles > 10_000


def test_skipped_chunks_cost_nothing_in_the_cores():
    work = np.ones((B, S))
    work[0, 1::2] = 0.0                           # every chunk of core 1 skipped
    r = group_schedule_v2(G, (0, 1, 1, 1), "chunk_rr", work=work)
    assert {p.core for p in r.passes} == {0}
    assert r.macs_done == 3 * G.d_model * G.d_ff // 2
    # Half work: GU 48, D 24 < h_latency 37, so each core's last D waits for its h; core 1:
    # GU [17,65) [65,113) D [113,137) GU [137,185) D [185,209) GU [209,257) D [257,281), last D
    # at 257 + 37 = 294 .. 318. Output blocks (2 beats each) final at 318 - 2 * (11 - j) + 11,
    # the first at 307; 12 blocks x 4 cycles on the requantisers, + 6 + 2, + 3 replayed rows.
    half = group_schedule_v2(G, (0, 1, 1, 1), "drs", work=np.full((B, S), 0.5))
    assert max(p.end for p in half.passes) == 17 + 4 * 72 + (G.h_latency - 24) == 318
    assert half.cycles == 307 + 12 * 4 + 6 + 2 + 3 == 366


def test_advance_skips_stalls():
    st = [(10, 20), (30, 35)]
    assert _advance(0, 5, st) == (0, 5)
    assert _advance(0, 15, st) == (0, 25)         # 10 before the stall, 5 after it
    assert _advance(12, 3, st) == (20, 23)        # starts after the stall
    assert _advance(25, 10, st) == (25, 40)
    assert _advance(15, 0, st) == (20, 20)


def test_v1_chunk_round_robin_equals_its_drs_on_equal_chunks():
    from sw.config import DEFAULT_ACCEL
    from sw.perf.cycles import group_cycles

    for mask in MASKS:
        assert v1_group_cycles_chunk_rr(DEFAULT_ACCEL, mask) == group_cycles(DEFAULT_ACCEL, mask)


def test_geometry_is_checked():
    with pytest.raises(ValueError):
        V2Geometry(mv_out=7)
    with pytest.raises(ValueError):
        V2Geometry(swiglu_lanes=0)
    with pytest.raises(ValueError, match="values/cycle"):     # 16 x 16 MV units outrun the stages
        V2Geometry(mv_in=16, mv_out=16)


def test_resources_of_the_proposal():
    r = resource_estimate(G)
    assert r["weight_bytes"] == 3 * 96 * 256 * 4 == 294_912
    assert (r["lanes"], r["words_per_lane"], r["blocks_per_lane"]) == (32, 4608, 5)
    assert r["bram"]["weights"] == 160 and r["bram_total"] == 208
    assert r["dsp_total"] == 138 <= 156


def test_whole_trace_figures():
    from sw.trace.decode import load_decode_trace

    replay = load_decode_trace(GOLDEN, verify=False).replay.astype(np.uint8)
    rows, computed = replay.size, int((1 - replay).sum())
    fast = trace_cycles_v2(G, replay, "drs").sum()
    dense = trace_cycles_v2(G, np.zeros_like(replay), "drs").sum()
    assert int(dense) == 4_800_512                             # dense: the trace's shape only
    assert fast == trace_cycles_v2(G, replay, "chunk_rr").sum()
    util = computed * 3 * 96 * 256 / (G.macs * fast)
    # Whatever the committed trace's replay: at least 0.95 of the ideal (rows / computed rows),
    # never above it.
    assert util >= 0.93 and 0.95 <= dense / fast / (rows / computed) <= 1.0
