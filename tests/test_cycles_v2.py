"""The v2 cycle model (sw/perf/cycles_v2.py): its pipeline depths are the RTL blocks' own, and the
schedules behave as the RTL's (the regression compares it with the RTL's counter on every group)."""

import dataclasses

import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL
from sw.perf.cycles import trace_cycles
from sw.perf.cycles_v2 import Latencies, group_cycles_v2, trace_cycles_v2

V2 = dataclasses.replace(DEFAULT_ACCEL, datapath=2)


def test_latencies_are_the_blocks_own():
    from hw.accel.mv_core import mv_acc_bits
    from hw.accel.mv_unit import MvUnit
    from hw.accel.requant_lane import RequantLane
    from hw.accel.tas_group import TasGroup
    from hw.accel.weight_store import WeightStore
    from hw.lib.mult18 import Mult18

    lat = Latencies(V2)
    tas = TasGroup(V2.d_model, V2.layers, V2.tokens_per_frame, V2.batch, lanes=V2.tas_lanes)
    assert lat.tas == tas.latency
    assert lat.weights == WeightStore.latency
    assert lat.mv == MvUnit(V2.mv_in, V2.mv_out, mv_acc_bits(V2)).latency
    assert lat.requant == RequantLane.latency
    assert lat.mult == Mult18.latency


def test_row_out_latency_is_the_blocks_own():
    from hw.accel.row_out import RowOut
    assert Latencies(V2).row_out == RowOut(V2, cores=2, tag_bits=2).latency


def test_figures_of_the_default():
    """One computed row: 8 chunks over 2 cores = 4 x (GU 96 + D 48) cycles per core, plus the
    front, the h latency of the last chunk and the tail; dense: 4 rows back to back."""
    gu, d = V2.mv_blocks_per_chunk
    one = group_cycles_v2(V2, [0, 1, 1, 1])
    assert 4 * (gu + d) < one < 4 * (gu + d) + 80
    dense = group_cycles_v2(V2, [0, 0, 0, 0])
    assert 16 * (gu + d) < dense < 16 * (gu + d) + 80
    # An all-replayed group: the TAS, the cache read and the reorder buffer, one row per cycle.
    assert group_cycles_v2(V2, [1, 1, 1, 1]) == Latencies(V2).tas + V2.batch + 2
    # Row-static puts a lone row's 8 chunks on one core: about twice the time.
    assert group_cycles_v2(V2, [0, 1, 1, 1], "static") > 1.8 * one


def test_equal_chunks_make_drs_and_chunk_round_robin_equal():
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 2, (40, V2.batch))
    np.testing.assert_array_equal(trace_cycles_v2(V2, masks, "drs"), trace_cycles_v2(V2, masks, "chunk_rr"))


def test_perfmodel_dispatches_on_the_datapath():
    masks = np.array([[0, 1, 0, 1], [1, 1, 1, 1]])
    np.testing.assert_array_equal(trace_cycles(V2, masks, static=True), trace_cycles_v2(V2, masks, "static"))
    v1 = dataclasses.replace(DEFAULT_ACCEL, datapath=1)
    assert not np.array_equal(trace_cycles(v1, masks), trace_cycles(V2, masks))


def test_bad_schedule():
    with pytest.raises(ValueError, match="schedule"):
        group_cycles_v2(V2, [0, 0, 0, 0], "greedy")
