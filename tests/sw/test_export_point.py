"""``python sw/export_trace.py``'s operating point: the full-step trace starts from the default
point, ``--point dense`` from the best dense design's, explicit flags override, and the decode
trace stays the MLP engine's (the shipped model at ``DEFAULT_TAU``)."""

import argparse
import math

import pytest

from sw import operating_point
from sw.model.fastcar import DEFAULT_TAU
from sw.trace.export import apply_point
from sw.trace.store import TraceError


def args(**kw):
    base = dict(point=None, full_step=False, tau=None, checkpoint=None, sinks=None, sparse_window=None)
    return argparse.Namespace(**{**base, **kw})


def test_full_step_starts_from_the_default_point():
    a = args(full_step=True)
    taus = apply_point(a)
    op = operating_point.DEFAULT
    assert a.checkpoint == op.checkpoint_path
    assert taus == ([math.inf] if op.tau is None else list(op.tau) if isinstance(op.tau, tuple) else [op.tau])
    assert (a.sinks or 0, a.sparse_window or 0) == (op.sinks, op.window)


def test_point_dense_is_the_shipped_model_without_replay_or_sparsity():
    a = args(full_step=True, point="dense")
    assert apply_point(a) == [math.inf]
    assert a.checkpoint == operating_point.DENSE.checkpoint_path
    assert (a.sinks, a.sparse_window) == (None, None)


def test_flags_override_the_point():
    a = args(full_step=True, tau="-4", sinks="2", sparse_window="9")
    assert apply_point(a) == [-4.0]
    assert (a.sinks, a.sparse_window) == ("2", "9")
    a = args(full_step=True, tau="-inf,-inf,1,inf")
    assert apply_point(a) == [-math.inf, -math.inf, 1.0, math.inf]


def test_decode_trace_is_the_engines():
    a = args()
    assert apply_point(a) == [DEFAULT_TAU]
    assert a.checkpoint is None and a.sparse_window is None


def test_bad_tau_names_the_flag():
    with pytest.raises(TraceError, match="--tau"):
        apply_point(args(tau="minus four"))


def test_step_modes_spell_the_engine_threshold():
    from tb.step.modes import STEP_MODES

    for mode in ("fastcar", "fastcar+sparse"):
        flags = STEP_MODES[mode]
        assert float(flags[flags.index("--tau") + 1]) == DEFAULT_TAU
    assert STEP_MODES["dense"] == ["--point", "dense"]
