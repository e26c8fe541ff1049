"""The corner-case trace (sw/trace/corners.py, golden/corners): the committed copy is what the command
makes, it holds every class, it follows the rules, and every class is live: changing one rule in
the golden model alone changes the trace's expected outputs (the RTL side of this is in
tb/accelerator/test_accelerator.py)."""

import json
from pathlib import Path

import numpy as np
import pytest

from sw.config import DEFAULT_ACCEL, SMALL_ACCEL, trace_accel
from sw.spec import quant
from sw.trace import corners
from sw.trace.decode import check_decode_trace, load_decode_trace
from tb.golden_mutants import MUTATIONS, golden_rule_changed, round_half_away, round_half_up

REPO = Path(__file__).resolve().parents[2]
CORNERS = REPO / "golden" / "corners"


# ---------------------------------------------------------------- the committed trace
@pytest.fixture(scope="module")
def committed():
    return load_decode_trace(CORNERS)


@pytest.mark.parametrize("name,cfg", [("corners", None), ("corners-small", SMALL_ACCEL)])
def test_committed_trace_is_what_the_command_makes(name, cfg):
    committed = load_decode_trace(REPO / "golden" / name)
    manifest, t = corners.build(cfg=cfg)
    for tensor, arr in t.items():
        assert np.array_equal(np.asarray(arr), committed.t[tensor]), f"golden/{name}/{tensor}.npy differs"
    want = json.loads(json.dumps(manifest))
    got = {k: v for k, v in committed.manifest.items() if k not in ("format", "version", "kind", "tensors")}
    assert got == want, f"golden/{name}/manifest.json differs from {manifest['source']}"
    assert trace_accel(committed.manifest) == (cfg or DEFAULT_ACCEL)


def test_every_class_is_held_and_the_trace_follows_the_rules(committed):
    counts = committed.manifest["corners"]["counts"]
    assert set(counts) == set(corners.CLASSES)
    assert min(counts.values()) >= 1, {k: v for k, v in counts.items() if v < 1}
    for stage in corners.STAGES:
        assert sum(v for k, v in counts.items() if k.startswith(f"tie/{stage}/")) >= 1
    for name in ("tas==T", "chain==max_chain", "refresh/would-replay", "frame0/tas>=T"):
        assert counts[name] >= 1
    assert check_decode_trace(committed) is None
    # every extreme constant is really in the trace
    for arr in ("mult_g", "mult_u", "mult_d"):
        assert {0, 1, 65535} <= set(committed.t[arr].ravel().tolist())
    for arr in ("shift_g", "shift_u", "shift_d"):
        assert {0, 1, 47, 48, 63} <= set(committed.t[arr].ravel().tolist())
    for arr in ("wg", "wu", "wd"):
        assert committed.t[arr].min() == -128
    assert committed.threshold.tolist()[2:] == [quant.THRESHOLD_NEVER, quant.ACC_MIN]


def test_checker_catches_a_planted_replay_bit(committed):
    """check_decode_trace recomputes the replay rule: a flipped bit on a guard boundary is named."""
    g = next(i for i, c in enumerate(committed.manifest["corners"]["groups"]) if "chain==max_chain" in c)
    committed.t["replay"] = committed.replay.copy()
    b = int(np.flatnonzero(committed.replay[g] == 0)[0])
    committed.t["replay"][g, b] = 1
    try:
        msg = check_decode_trace(committed)
    finally:
        committed.t["replay"] = load_decode_trace(CORNERS).replay
    assert msg is not None and f"group {g} " in msg and f"row {b}" in msg, msg


@pytest.mark.parametrize("name", MUTATIONS)
def test_each_golden_rule_change_changes_the_expected_outputs(name, committed):
    """The corner trace is live for every rule: the changed golden model expects other outputs
    or replay bits, in a group that holds the rule's class."""
    with golden_rule_changed(name):
        _, t = corners.build()
    diff = np.flatnonzero((t["y"] != committed.y).any(axis=(1, 2)) | (t["replay"] != committed.replay).any(1))
    assert diff.size, f"{name}: the corner trace does not tell the changed rule from the spec"
    cls = MUTATIONS[name][2]
    assert any(c.startswith(cls) for c in committed.manifest["corners"]["groups"][int(diff[0])]), (
        name, int(diff[0]))


def _swiglu_one_stage(x, c, stage, rounding):
    """swiglu_int8's four stages with ``rounding`` in ``stage`` only."""
    def rq(s, acc, mult, shift):
        old = quant.round_shift_rne
        quant.round_shift_rne = rounding if s == stage else old
        try:
            return quant.requantize(acc, mult, shift)
        finally:
            quant.round_shift_rne = old

    gate = rq("gate", quant.matmul_int(x, c["wg"]), c["mult_g"], c["shift_g"])
    up = rq("up", quant.matmul_int(x, c["wu"]), c["mult_u"], c["shift_u"])
    act = quant.apply_lut(gate, c["lut"])
    h = rq("h", act.astype(np.int64) * up.astype(np.int64), c["mult_h"], c["shift_h"])
    return rq("down", quant.matmul_int(h, c["wd"]), c["mult_d"], c["shift_d"])


@pytest.mark.parametrize("rounding", [round_half_away, round_half_up], ids=["away", "half-up"])
@pytest.mark.parametrize("stage", corners.STAGES)
def test_ties_of_every_stage_reach_the_output(stage, rounding, committed):
    """A tie rule changed in one requantisation stage alone changes some computed output."""
    tr = committed
    for g in range(tr.dims["groups"]):
        comp = ~tr.replay[g].astype(bool)
        if not comp.any():
            continue
        li = int(tr.group_layer[g])
        c = {**tr.layer_consts(li), "wg": tr.wg[li], "wu": tr.wu[li], "wd": tr.wd[li]}
        y = _swiglu_one_stage(tr.x[g][comp], c, stage, rounding)
        assert np.array_equal(_swiglu_one_stage(tr.x[g][comp], c, None, rounding), tr.y[g][comp])
        if not np.array_equal(y, tr.y[g][comp]):
            return
    pytest.fail(f"no output of the corner trace depends on the tie rule of stage {stage}")


def test_group_selection_with_a_frame_limit(committed):
    """``first:N:F``: positions < N in frames < F, in decode order; bad specs are refused."""
    from sw.trace.decode import select_groups

    g = select_groups(committed, "first:1:4")
    assert len(g) == 16 and g == sorted(g)
    assert all(committed.group_index[i] == 0 and committed.group_frame[i] < 4 for i in g)
    assert select_groups(committed, "first:2") == select_groups(committed, "first:2:8")
    for bad in ("first:0", "first:1:0", "first:1:2:3", "first:x", "last:2"):
        with pytest.raises(ValueError, match="first:N:F"):
            select_groups(committed, bad)
