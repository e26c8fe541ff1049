"""Golden-only rule changes: the spec (sw.spec.quant) with one rule replaced, for showing that the corner
trace (golden/corners) makes the RTL comparison fail when the golden model alone changes a rule
(tests/sw/test_corners.py at the golden level, tb/accelerator/test_accelerator.py against the RTL)."""

from contextlib import contextmanager
from pathlib import Path

import numpy as np

from sw.spec import quant
from sw.trace import corners

# The floor and remainder come from the spec's own sw.spec.quant.shift_parts; only the tie rule changes.
_shift_parts = quant.shift_parts


def round_half_away(p, shift):
    """Ties away from zero instead of to even."""
    p, shift, q, r, half = _shift_parts(p, shift)
    return q + ((shift > 0) & ((r > half) | ((r == half) & (p > 0)))).astype(np.int64)


def round_half_up(p, shift):
    """Ties towards +inf (``floor(x + 1/2)``)."""
    p, shift, q, r, half = _shift_parts(p, shift)
    return q + ((shift > 0) & (r >= half)).astype(np.int64)


def strict_decision(score, threshold):
    """``>`` for ``>=``."""
    return np.asarray(score, dtype=np.int64) > np.int64(threshold)


_guard = quant.replay_guard


def guard_chain_plus_one(want, frame, chain=None, *, refresh_every=None, max_chain=None):
    """max_chain off by one: M + 1 consecutive replays allowed."""
    return _guard(want, frame, chain, refresh_every=refresh_every,
                  max_chain=None if max_chain is None else max_chain + 1)


def guard_refresh_from_one(want, frame, chain=None, *, refresh_every=None, max_chain=None):
    """refresh_every off by one: frames counted from 1 (refresh at 1, K + 1, ...)."""
    replay, forced, new = _guard(want, frame, chain, refresh_every=None, max_chain=max_chain)
    if frame > 0 and refresh_every is not None and (frame - 1) % refresh_every == 0:
        return want & False, want, None if new is None else new * 0
    return replay, forced, new


#: name -> (module attribute, replacement, the corner class that must name the failure)
MUTATIONS = {
    "ties-away-from-zero": ("round_shift_rne", round_half_away, "tie/"),
    "ties-half-up": ("round_shift_rne", round_half_up, "tie/"),
    "strict-greater": ("replay_decision", strict_decision, "tas==T"),
    "max-chain-plus-one": ("replay_guard", guard_chain_plus_one, "chain==max_chain"),
    "refresh-from-frame-one": ("replay_guard", guard_refresh_from_one, "refresh/"),
}


@contextmanager
def golden_rule_changed(name):
    """The golden model (sw.spec.quant) with one rule changed, for as long as the block runs."""
    attr, repl, _ = MUTATIONS[name]
    old = getattr(quant, attr)
    setattr(quant, attr, repl)
    try:
        yield
    finally:
        setattr(quant, attr, old)


def write_mutated_corners(out: Path, name: str) -> Path:
    """The corner trace as the golden model with rule ``name`` changed would export it."""
    spec, _ = corners.build()
    with golden_rule_changed(name):
        manifest, t = corners.build()
    # The classes describe the inputs under the spec, whatever the changed rule makes of them.
    manifest["corners"] = spec["corners"]
    from sw.trace.decode import write_decode_trace

    manifest["source"] += f" (golden rule changed: {name})"
    return write_decode_trace(out, manifest, t)
