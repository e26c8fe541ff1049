"""The cycle model (sw/perf/cycles.py): its pipeline depths are the RTL blocks' own, the schedules
behave as the RTL's, and on every replay mask of four rows it gives the cycles the RTL measures here
in amaranth.sim (the regression compares it with the RTL's counter on every group of a trace); the
bench's model check on those measured cycles."""


from types import SimpleNamespace

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.accelerator import Accelerator
from hw.board.host import config_words, row_beats
from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.perf.cycles import Latencies, group_cycles, trace_cycles
from sw.spec import quant
from tb.bench import MODEL_TOLERANCE, model_check
from tests.hw.accel.test_accelerator_sim import configure, run_to_end, send_group

#: Module-scoped fixtures: with pytest-xdist (--dist loadgroup) these tests share one worker.
pytestmark = pytest.mark.xdist_group("test_cycles")

CFG = DEFAULT_ACCEL


def test_latencies_are_the_blocks_own():
    from hw.accel.mv_core import mv_acc_bits
    from hw.accel.replay_cache import ReplayCache
    from hw.accel.tas_group import TasGroup
    from hw.accel.weight_store import WeightStore
    from hw.lib.mult18 import Mult18
    from hw.lib.mv_unit import MvUnit
    from hw.lib.requant_lane import RequantLane
    from hw.lib.skid import SkidBuffer

    lat = Latencies(CFG)
    tas = TasGroup(CFG.d_model, CFG.layers, CFG.tokens_per_frame, CFG.batch, lanes=CFG.tas_lanes)
    # The accelerator's tas_out register slice follows the TAS group.
    assert lat.tas == tas.latency + SkidBuffer(1, mode="full").latency
    assert lat.weights == WeightStore.latency
    assert lat.mv == MvUnit(CFG.mv_in, CFG.mv_out, mv_acc_bits(CFG)).latency
    assert lat.requant == RequantLane.latency
    assert lat.mult == Mult18.latency
    assert lat.cache == ReplayCache.latency


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
    lat = Latencies(CFG)
    assert group_cycles(CFG, [1, 1, 1, 1]) == lat.tas + CFG.batch + lat.cache + 1
    # Row-static puts a lone row's 8 chunks on one core: about twice the time.
    assert group_cycles(CFG, [0, 1, 1, 1], "static") > 1.8 * one


def test_equal_chunks_make_drs_and_chunk_round_robin_equal():
    rng = np.random.default_rng(0)
    masks = rng.integers(0, 2, (40, CFG.batch))
    np.testing.assert_array_equal(trace_cycles(CFG, masks, "drs"), trace_cycles(CFG, masks, "chunk_rr"))


def test_bad_schedule():
    with pytest.raises(ValueError, match="schedule"):
        group_cycles(CFG, [0, 0, 0, 0], "greedy")


# ---------------------------------------------------------------------------------------------
# The cycle model against the RTL's own counter, measured in this test
# ---------------------------------------------------------------------------------------------

#: Small enough for amaranth.sim, large enough that a group is hundreds of cycles like the
#: default's.
SIM_CFG = AccelConfig(d_model=16, d_ff=64, layers=1, tokens_per_frame=4, batch=4, cores=2, chunks=4,
                      tas_lanes=4, mv_in=4, mv_out=4)
#: All 16 replay masks of four rows, in frames 1 to 4 (frame 0 computes every row: dense groups).
MASKS = [tuple((m >> (3 - b)) & 1 for b in range(4)) for m in range(16)]


def random_layer(rng, d, f):
    """Random int8 weights and integer constants of one SwiGLU layer, in the spec's ranges."""
    return {"wg": rng.integers(-128, 128, (d, f)).astype(np.int8),
            "wu": rng.integers(-128, 128, (d, f)).astype(np.int8),
            "wd": rng.integers(-128, 128, (f, d)).astype(np.int8),
            "mult_g": rng.integers(20000, 60000, f), "shift_g": rng.integers(23, 25, f),
            "mult_u": rng.integers(20000, 60000, f), "shift_u": rng.integers(23, 25, f),
            "lut": quant.silu_lut(rng.uniform(0.03, 0.06), 0.04),
            "mult_h": int(rng.integers(40000, 60000)), "shift_h": 21,
            "mult_d": rng.integers(20000, 60000, d), "shift_d": rng.integers(22, 24, d)}


def every_mask_trace(cfg: AccelConfig, seed: int = 0):
    """A one-layer decode trace whose frames 1-4 replay the rows of :data:`MASKS`, one per group.

    Every ``q`` is 10; ``k_prev`` is 10 where a row must replay (TAS 16 * 100 = 1600 >= 400) and 0
    elsewhere (TAS 0 < 400).
    """
    rng = np.random.default_rng(seed)
    B, N, d = cfg.batch, cfg.tokens_per_frame, cfg.d_model
    frames = 1 + len(MASKS) // N
    G = frames * N
    want = np.array([(0,) * B] * N + MASKS, np.uint8)
    k = np.where(want[:, :, None] == 1, 10, 0).astype(np.int8) * np.ones((1, 1, d), np.int8)
    tr = SimpleNamespace(group_layer=np.zeros(G, int), group_frame=np.repeat(np.arange(frames), N),
                         group_index=np.tile(np.arange(N), frames),
                         dims={"batch": B, "layers": 1, "d_model": d},
                         x=rng.integers(-128, 128, (G, B, d)).astype(np.int8),
                         q=np.full((G, B, d), 10, np.int8), k_prev=k, threshold=np.array([400]))
    return tr, want, random_layer(rng, d, cfg.d_ff)


def measure(cfg: AccelConfig, static: bool,
            chunk_rr: bool = False) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Run the trace through the RTL: the ``group_cycles`` counter after every group, the replay bits."""
    tr, want, layer = every_mask_trace(cfg)
    words = config_words(cfg, [layer], static=static, chunk_rr=chunk_rr)
    dut = Accelerator(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    G, B = want.shape
    cycles, replay = [], []

    async def host(ctx):
        await configure(ctx, dut, words)
        for g in range(G):
            await send_group(ctx, dut, row_beats(cfg, tr, g))
            await ctx.tick().until(dut.groups == g + 1)
            cycles.append(ctx.get(dut.group_cycles))

    async def sink(ctx):
        ctx.set(dut.y.ready, 1)
        for _ in range(G * B):
            (bit,) = await ctx.tick().sample(dut.y.p.user.replay).until(dut.y.valid)
            replay.append(int(bit))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    run_to_end(sim, len(words) + G * 1500, "every-mask trace")
    assert len(cycles) == G, f"{len(cycles)} of {G} groups finished"
    return cycles, np.array(replay).reshape(G, B), want


# Session scope: pytest-xdist may run other modules' tests on this worker between the ones that use
# it, and a module fixture would then be measured again (75 s each time).
@pytest.fixture(scope="session")
def rtl_cycles():
    """DRS, static and chunk round-robin runs of every replay mask, measured on the RTL (about 60 s)."""
    out = {}
    for mode in ("drs", "static", "chunk_rr"):
        cycles, replay, want = measure(SIM_CFG, static=(mode == "static"), chunk_rr=(mode == "chunk_rr"))
        np.testing.assert_array_equal(replay, want, err_msg=f"{mode}: replay bits differ from the plan")
        out[mode] = cycles
    return out, want


@pytest.mark.parametrize("mode", ["drs", "static", "chunk_rr"])
def test_cycle_model_against_rtl_on_every_mask(rtl_cycles, mode):
    """Every one of the 16 masks of four rows, and dense groups: the model equal to the RTL."""
    measured, masks = rtl_cycles
    for g, (m, rtl) in enumerate(zip(masks, measured[mode], strict=True)):
        model = group_cycles(SIM_CFG, m, mode)
        assert abs(model - rtl) <= MODEL_TOLERANCE * rtl, \
            f"{mode}, group {g}, mask {m.tolist()}: RTL {rtl} cycles, model {model}"
    # Not a flat line: a group with one computed row is far shorter than a dense one.
    one_row = MASKS.index((0, 1, 1, 1)) + SIM_CFG.tokens_per_frame
    assert measured[mode][one_row] < 0.75 * measured[mode][0]


def test_bench_model_check_on_measured_cycles(rtl_cycles):
    """``tb.bench.model_check`` accepts the RTL's counts and stops on a group one cycle off."""
    measured, masks = rtl_cycles
    groups = list(range(len(masks)))
    modes = {m: {"cycles": c} for m, c in measured.items()}
    check = model_check(SIM_CFG, masks, modes, groups, where="sim")
    assert check["drs"]["rtl_total"] == sum(measured["drs"])
    assert check["drs"]["worst_error"] <= MODEL_TOLERANCE
    bad = {m: {"cycles": list(c)} for m, c in measured.items()}
    bad["static"]["cycles"][1] += 1
    with pytest.raises(SystemExit, match=r"static: the cycle model is off by .* on group 1 \(RTL"):
        model_check(SIM_CFG, masks, bad, groups, where="sim")


def _same_row_finishes(cfg: AccelConfig, rng, runs: int) -> int:
    """Groups, of ``runs`` with random replay masks, schedules and pauses between rows, in which the
    cycle model counts two finished D passes of one row in the same cycle."""
    hits = 0
    for _ in range(runs):
        B = cfg.batch
        arrive, a = [], 0
        for _b in range(B):
            arrive.append(a)
            a += 1 + (int(rng.integers(0, 3 * sum(cfg.mv_blocks_per_chunk))) if rng.random() < 0.6 else 0)
        seen = []
        group_cycles(cfg, rng.random(B) < 0.4, str(rng.choice(["drs", "chunk_rr", "static"])), arrive=arrive,
                     on_finish=lambda t, rows, seen=seen: seen.append(len(rows) != len(set(rows))))
        hits += any(seen)
    return hits


def test_two_cores_finish_one_row_together_only_when_chunks_split_unevenly():
    """With a row's chunks a multiple of the two cores (the default: 8), DRS and chunk round-robin
    alternate them between the cores one cycle apart, so no two chunks of a row finish in the same
    cycle, whatever the pauses between rows; with 3 chunks (``SMALL_ACCEL``) they do, and the
    testbench's pauses (``same_row_gaps``) make it happen on the RTL."""
    from sw.config import SMALL_ACCEL
    from tb.accelerator.cocotb_accelerator import same_row_gaps

    rng = np.random.default_rng(0)
    even = [DEFAULT_ACCEL, SIM_CFG, AccelConfig(d_model=16, d_ff=48, layers=1, tokens_per_frame=4, batch=4,
                                                   cores=2, chunks=2, tas_lanes=4, mv_in=4, mv_out=4)]
    for cfg in even:
        assert _same_row_finishes(cfg, rng, 150) == 0, cfg
        assert same_row_gaps(cfg, (0, 0, 0, 0), "drs") == ()
    assert _same_row_finishes(SMALL_ACCEL, rng, 150) > 0
    row, gap = same_row_gaps(SMALL_ACCEL, (0, 0, 0, 0), "drs")[0]
    seen = []
    group_cycles(SMALL_ACCEL, [0, 0, 0, 0], "drs", arrive=[b + (gap if b >= row else 0) for b in range(4)],
                 on_finish=lambda t, rows: seen.append(rows))
    assert any(len(r) == 2 and r[0] == r[1] for r in seen)
