"""Integer SwiGLU and TAS against independent straightforward computations."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.spec import quant
from tests.sw.test_quant import reference_requant


def reference_swiglu(x, wg, wu, wd, p):
    """Python ints, element by element, with reference_requant (Fractions)."""
    b, d = x.shape
    f = wg.shape[1]
    out = np.zeros((b, d), dtype=np.int64)
    for r in range(b):
        h = []
        for j in range(f):
            g = reference_requant(sum(int(x[r, i]) * int(wg[i, j]) for i in range(d)),
                                  int(p["mult_g"][j]), int(p["shift_g"][j]))
            u = reference_requant(sum(int(x[r, i]) * int(wu[i, j]) for i in range(d)),
                                  int(p["mult_u"][j]), int(p["shift_u"][j]))
            a = int(p["lut"][g + 128])
            h.append(reference_requant(a * u, int(p["mult_h"]), int(p["shift_h"])))
        for i in range(d):
            out[r, i] = reference_requant(sum(h[j] * int(wd[j, i]) for j in range(f)),
                                          int(p["mult_d"][i]), int(p["shift_d"][i]))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_swiglu_matches_reference(seed):
    rng = np.random.default_rng(seed)
    d, f = 6, 10
    x = rng.integers(-128, 128, (3, d)).astype(np.int8)
    wg, wu = (rng.integers(-128, 128, (d, f)).astype(np.int8) for _ in range(2))
    wd = rng.integers(-128, 128, (f, d)).astype(np.int8)
    p = {
        "mult_g": rng.integers(1, 2**16, f), "shift_g": rng.integers(14, 26, f),
        "mult_u": rng.integers(1, 2**16, f), "shift_u": rng.integers(14, 26, f),
        "lut": quant.silu_lut(0.05, 0.04),
        "mult_h": int(rng.integers(1, 2**16)), "shift_h": int(rng.integers(14, 24)),
        "mult_d": rng.integers(1, 2**16, d), "shift_d": rng.integers(14, 26, d),
    }
    np.testing.assert_array_equal(quant.swiglu_int8(x, wg, wu, wd, p), reference_swiglu(x, wg, wu, wd, p))


def test_silu_lut():
    lut = quant.silu_lut(0.1, 0.05)
    assert lut.dtype == np.int8 and lut.shape == (256,)
    for g in (-128, -30, -1, 0, 1, 7, 127):
        v = g * 0.1
        want = max(-128, min(127, round(v / (1 + math.exp(-v)) / 0.05)))
        assert int(lut[g + 128]) == want
    with pytest.raises(quant.QuantError):
        quant.silu_lut(0.0, 1.0)


@settings(max_examples=500, deadline=None)
@given(tau=st.floats(-50, 50), s_q=st.floats(1e-3, 0.1), s_k=st.floats(1e-3, 0.1),
       score=st.integers(-200000, 200000), strict=st.booleans())
def test_tas_threshold_equals_float_rule(tau, s_q, s_k, score, strict):
    heads, dh = 4, 24
    th = quant.tas_threshold(tau, s_q, s_k, heads, dh, strict=strict)
    real = score * s_q * s_k / (heads * math.sqrt(dh))
    c = heads * math.sqrt(dh) / (s_q * s_k)
    if abs(score - tau * c) < 1e-6 * max(1.0, abs(score)):
        return                          # too close to the boundary to judge in floating point
    assert bool(quant.replay_decision(score, th)) == ((real > tau) if strict else (real >= tau))


def test_tas_threshold_infinities_and_ties():
    assert not quant.replay_decision(quant.ACC_MAX, quant.tas_threshold(np.inf, 0.1, 0.1, 2, 4))
    assert quant.replay_decision(quant.ACC_MIN, quant.tas_threshold(-np.inf, 0.1, 0.1, 2, 4))
    # tau * c = 40 exactly: >= replays at 40, > does not.
    c = 2 * 2 / (0.5 * 0.5)
    assert quant.tas_threshold(40 / c, 0.5, 0.5, 2, 4) == 40
    assert quant.tas_threshold(40 / c, 0.5, 0.5, 2, 4, strict=True) == 41


def test_tas_int():
    rng = np.random.default_rng(0)
    q = rng.integers(-128, 128, (5, 4, 24)).astype(np.int8)
    k = rng.integers(-128, 128, (5, 4, 24)).astype(np.int8)
    want = [sum(int(q[b, h, e]) * int(k[b, h, e]) for h in range(4) for e in range(24)) for b in range(5)]
    assert list(quant.tas_int(q, k)) == want
