"""The cycle model (sw/perf/cycles.py): its pipeline depths are the RTL blocks' own, and the
schedules behave as the RTL's (the regression compares it with the RTL's counter on every group)."""


import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL
from sw.perf.cycles import Latencies, group_cycles, trace_cycles

CFG = DEFAULT_ACCEL


def test_latencies_are_the_blocks_own():
    from hw.accel.mv_core import mv_acc_bits
    from hw.accel.mv_unit import MvUnit
    from hw.accel.requant_lane import RequantLane
    from hw.accel.tas_group import TasGroup
    from hw.accel.weight_store import WeightStore
    from hw.lib.mult18 import Mult18

    lat = Latencies(CFG)
    tas = TasGroup(CFG.d_model, CFG.layers, CFG.tokens_per_frame, CFG.batch, lanes=CFG.tas_lanes)
    assert lat.tas == tas.latency
    assert lat.weights == WeightStore.latency
    assert lat.mv == MvUnit(CFG.mv_in, CFG.mv_out, mv_acc_bits(CFG)).latency
    assert lat.requant == RequantLane.latency
    assert lat.mult == Mult18.latency


def test_row_out_latency_is_the_blocks_own():
    from hw.accel.row_out import RowOut
    assert Latencies(CFG).row_out == RowOut(CFG, cores=2, tag_bits=2).latency


def test_figures_of_the_default():
    """One computed row: 8 chunks over 2 cores = 4 x (GU 96 + D 48) cycles per core, plus the
    front, the h latency of the last chunk and the tail; dense: 4 rows back to back."""
    gu, d = CFG.mv_blocks_per_chunk
    one = group_cycles(CFG, [0, 1, 1, 1])
    assert 4 * (gu + d) < one < 4 * (gu + d) + 80
    dense = group_cycles(CFG, [0, 0, 0, 0])
    assert 16 * (gu + d) < dense < 16 * (gu + d) + 80
    # An all-replayed group: the TAS, the cache read and the reorder buffer, one row per cycle.
    assert group_cycles(CFG, [1, 1, 1, 1]) == Latencies(CFG).tas + CFG.batch + 2
    # Row-static puts a lone row's 8 chunks on one core: about twice the time.
    assert group_cycles(CFG, [0, 1, 1, 1], "static") > 1.8 * one


def test_equal_chunks_make_drs_and_chunk_round_robin_equal():
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 2, (40, CFG.batch))
    np.testing.assert_array_equal(trace_cycles(CFG, masks, "drs"), trace_cycles(CFG, masks, "chunk_rr"))


def test_bad_schedule():
    with pytest.raises(ValueError, match="schedule"):
        group_cycles(CFG, [0, 0, 0, 0], "greedy")
