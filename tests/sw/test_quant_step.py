"""The integer rules of the rest of the decoder layer (sw/spec/quant.py): exact against plain-Python
references where the rule is exact, close to float where it approximates, and each reference
shown to catch a planted wrong rule."""

import math
from fractions import Fraction

import numpy as np
import pytest

from sw.spec import quant

RNG = np.random.default_rng(5)


def ref_div_rne(n: int, d: int) -> int:
    f = Fraction(n, d)
    q = math.floor(f)
    r = f - q
    return q + (1 if r > Fraction(1, 2) or (r == Fraction(1, 2) and q % 2) else 0)


def test_div_rne_against_fractions_and_ties():
    n = RNG.integers(-10**9, 10**9, size=400)
    d = RNG.integers(1, 10**5, size=400)
    got = quant.div_rne(n, d)
    assert all(int(g) == ref_div_rne(int(a), int(b)) for g, a, b in zip(got, n, d, strict=True))
    ties = {(5, 2): 2, (7, 2): 4, (-5, 2): -2, (-7, 2): -4, (1, 2): 0, (-1, 2): 0, (3, 2): 2}
    for (a, b), want in ties.items():
        assert int(quant.div_rne(a, b)) == want == ref_div_rne(a, b)
    # the reference is able to fail: half away from zero differs on a tie
    assert ref_div_rne(5, 2) != math.floor(5 / 2 + 0.5)
    with pytest.raises(quant.QuantError):
        quant.div_rne(1, 0)


def test_rsqrt_int_is_the_exact_floor():
    D = np.concatenate([RNG.integers(1, 2**40, size=300), [1, 2, 3, 4, 2**60 - 1, 2**59]])
    inv = quant.rsqrt_int(D)
    for x, i in zip(D.tolist(), inv.tolist(), strict=True):
        assert i * i * x <= 2**60 < (i + 1) * (i + 1) * x
    with pytest.raises(quant.QuantError):
        quant.rsqrt_int([0])


def test_rmsnorm_int_tracks_float():
    r = RNG.integers(-20000, 20000, size=(16, 96))
    g = RNG.uniform(0.5, 1.5, size=96)
    s_out = 0.03
    mult, shift = quant.scale_to_mult_shift(g * math.sqrt(96) / s_out,
                                            shift_max=quant.SHIFT_MAX - quant.RSQRT_BITS)
    y = quant.rmsnorm_int(r, mult, shift, eps=0)
    ref = r / np.sqrt((r.astype(np.float64) ** 2).mean(-1, keepdims=True)) * g / s_out
    assert np.abs(y - np.clip(ref, -128, 127)).max() <= 1.0
    with pytest.raises(quant.QuantError, match="shift"):
        quant.rmsnorm_int(r, mult, np.full(96, 40), eps=0)


def test_rope_int_tracks_float_and_rounds_half_even():
    theta = RNG.uniform(0, 2 * np.pi, size=12)
    cos = np.concatenate([np.cos(theta), np.cos(theta)])
    sin = np.concatenate([np.sin(theta), np.sin(theta)])
    C, S = quant.rope_tables_int(cos[None], sin[None])
    x = RNG.integers(-90, 90, size=(50, 24))
    y = quant.rope_int(x, C[0], S[0])
    x1, x2 = x[:, :12], x[:, 12:]
    ref = np.concatenate([x1 * np.cos(theta) - x2 * np.sin(theta),
                          x2 * np.cos(theta) + x1 * np.sin(theta)], 1)
    assert np.abs(y - ref).max() <= 1.0
    # exact: a rotation by 0 is the identity, and a half-unit product rounds to even
    assert np.array_equal(quant.rope_int(x, np.full(12, 1 << 14), np.zeros(12, int)), x)
    half = quant.rope_int(np.array([1] * 12 + [0] * 12), np.full(12, 1 << 13), np.zeros(12, int))
    assert half[:12].tolist() == [0] * 12                     # 0.5 -> 0 (even)


def test_softmax_av_int_tracks_float():
    s_q, s_k, dh = 0.05, 0.04, 24
    a = int(round(s_q * s_k / math.sqrt(dh) * math.log2(math.e) * 2**16))
    table = quant.exp2_table()
    assert table[0] == 2**15 and table.dtype == np.int32 and np.all(np.diff(table) <= 0)
    for P in (1, 7, 300):
        scores = RNG.integers(-4000, 4000, size=(3, 4, P))
        v = RNG.integers(-128, 128, size=(3, 4, P, dh))
        o, E = quant.softmax_av_int(scores, v, a, table)
        assert (E >= 2**15).all()
        z = scores * s_q * s_k / math.sqrt(dh)
        p = np.exp(z - z.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        ref = (p[..., None] * v).sum(-2)
        assert np.abs(o / E[..., None] - ref).max() < 0.02 * 128
        out = quant.attention_out_int(o, E, 1, 0)
        assert np.abs(out - np.clip(ref, -128, 127)).max() <= 2


def test_requant_wide_saturates_at_its_width():
    assert quant.requant_wide(np.array([2**31 - 1]), 65535, 0).tolist() == [2**31 - 1]
    assert quant.requant_wide(np.array([-(2**31)]), 65535, 0, bits=16).tolist() == [-(2**15)]
    assert quant.requant_wide(np.array([5, 7, -5, -7]), 1, 1).tolist() == [2, 4, -2, -4]
