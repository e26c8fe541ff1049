"""Sampling on chip (sw/spec/quant.py, "Sampling"; sw/golden/sampling.py): the generator, the
exponential draw's logarithm, guidance, and the race itself, each against an independent reference
and each reference shown to catch a planted wrong rule."""

import math

import numpy as np
import pytest
import torch

from sw.golden import sampling
from sw.spec import quant

RNG = np.random.default_rng(11)


def ref_xorshift32(x: int) -> int:
    """Marsaglia (2003), "Xorshift RNGs", the 13/17/5 triple on 32-bit words, written afresh."""
    x ^= x << 13
    x %= 2**32
    x ^= x >> 17
    x ^= x << 5
    return x % 2**32


def test_xorshift32_is_marsaglias():
    assert quant.xorshift32(1) == 270369                   # the published first word from 1
    x = y = 2463534242                                      # Marsaglia's example seed
    for _ in range(1000):
        x, y = quant.xorshift32(x), ref_xorshift32(y)
        assert x == y != 0
    words, last = quant.draws(1, 3)
    assert words.tolist()[0] == 270369 and last == words[-1]
    assert ref_xorshift32(1) != (1 ^ (1 << 13) ^ (1 << 5))  # the reference can tell a wrong order apart
    with pytest.raises(quant.QuantError, match="nonzero"):
        quant.draws(0, 1)


def test_sampler_states_are_distinct_and_never_zero():
    states = {quant.sampler_state(s, b) for s in range(64) for b in range(4)}
    assert len(states) == 256 and 0 not in states
    assert quant.sampler_state(0, 0) == quant.sampler_state(0, 0)
    with pytest.raises(quant.QuantError, match="prompt"):
        quant.sampler_state(0, 256)


def test_noise_tables_are_far_from_rounding_boundaries():
    """Built from floats once: each entry's exact value is far from a half, so every machine's
    libm rounds it the same way."""
    n = 1 << quant.NOISE_TABLE_BITS
    mid = (np.arange(n) + 0.5) / n
    raw_log = (1 << 16) * np.log2(1 + mid)
    raw_g = (1 << 16) * np.log2(-np.log1p(-mid) / mid)
    for raw in (raw_log, raw_g):
        assert np.min(np.abs(raw - np.floor(raw) - 0.5)) > 1e-6
    log2_t, g_t = quant.noise_tables()
    assert np.array_equal(log2_t, np.rint(raw_log)) and np.array_equal(g_t, np.rint(raw_g))


def exact_noise(r) -> np.ndarray:
    """-log2(-ln(1 - v)) * 2**16 with v = (2 r + 1) / 2**33, in float64."""
    v = (2.0 * np.asarray(r, np.float64) + 1.0) / 2.0**33
    return -np.log2(-np.log1p(-v)) * 2**16


def test_noise_int_tracks_the_exact_logarithm():
    r = np.concatenate([RNG.integers(0, 2**32, size=20000), [0, 1, 2, 255, 256, 2**31, 2**32 - 1]])
    got, want = quant.noise_int(r), exact_noise(r)
    v = (2.0 * r + 1) / 2**33
    err = np.abs(got - want) / 2**16                      # in log2 units
    # G's bins are even in v, so they are coarse where e grows fast (v near 1, e above 2.3), where
    # the draw is large and its token rarely wins; the race's probabilities are checked below.
    assert err[v < 0.9].max() < 0.012 and err[v < 0.9].mean() < 0.003
    assert err[v < 0.99].max() < 0.06
    assert got[np.argmax(r == 0)] == max(got)             # the smallest word is the largest noise
    with pytest.raises(quant.QuantError):
        quant.noise_int([2**32])


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_the_race_samples_the_softmax(scale):
    """The exact draw probabilities of the integer race (every one of the 2**32 words counted)
    against softmax: total variation below 1e-4; a planted wrong table is far outside."""
    logits = RNG.normal(size=24) * scale
    z = np.rint(logits * math.log2(math.e) * 2**16).astype(np.int64)
    soft = np.exp(logits - logits.max())
    soft /= soft.sum()
    tv = 0.5 * np.abs(sampling.race_probabilities(z) - soft).sum()
    assert tv < 1e-4
    log2_t, g_t = quant.noise_tables()
    for bad in ((log2_t, np.zeros_like(g_t)), (np.zeros_like(log2_t), g_t), (log2_t, g_t[::-1].copy())):
        assert 0.5 * np.abs(sampling.race_probabilities(z, bad) - soft).sum() > 100 * tv


def test_race_probabilities_against_counted_draws():
    """The exact probabilities are checked against the sampler itself: 40,000 races of 6 tokens."""
    z = np.array([0, 2**16, -2**16, 3 * 2**15, 0, -3 * 2**16], np.int64)
    p = sampling.race_probabilities(z)
    words, _ = quant.draws(12345, 6 * 40000)
    tok = quant.sample_int(z + quant.noise_int(words).reshape(-1, 6))
    counts = np.bincount(tok, minlength=6) / len(tok)
    assert np.abs(counts - p).max() < 4 * math.sqrt(p.max() / len(tok))


def test_cfg_logits_int_rounds_half_even_and_saturates():
    mult, shift = np.array([1, 1, 1, 1]), np.array([0, 0, 0, 0])
    c, u = np.array([[3, 1, 5, -3]]), np.array([[0, 0, 0, 0]])
    g = quant.cfg_gain(1.5)
    assert g == 384
    # 1.5 * (3, 1, 5, -3) = 4.5, 1.5, 7.5, -4.5 -> ties to even: 4, 2, 8, -4
    assert quant.cfg_logits_int(c, u, mult, shift, g).tolist() == [[4, 2, 8, -4]]
    assert quant.cfg_logits_int(c, None, mult, shift, g).tolist() == c.tolist()
    # logits saturate at 24 bits, then the guided value at 32
    big = quant.cfg_logits_int(np.array([[2**31 - 1, -2**31]]), np.array([[-2**31, 2**31 - 1]]),
                               [2**16 - 1] * 2, [0] * 2, 2**16 - 1)
    assert big.tolist() == [[2**31 - 1 - 2**23, -2**31 + 2**23 - 1]]   # l_u added after the 32-bit clamp
    assert quant.cfg_logits_int(np.array([[2**30]]), None, [1], [0], None).tolist() == [[2**23 - 1]]
    assert quant.cfg_logits_int(np.array([[2**30]]), np.array([[2**30 - 5]]), [1], [0], 384).tolist() == \
        [[2**23 - 1]]
    acc = RNG.integers(-2**14, 2**14, size=(2, 50))        # logits within the 24 bits
    scale = RNG.uniform(1e-4, 1e-3, size=50)
    m, s = quant.logit_consts(scale)
    z = quant.cfg_logits_int(acc[:1], acc[1:], m, s, g)
    ref = (acc[1] + 1.5 * (acc[0] - acc[1])) * scale * math.log2(math.e) * 2**16
    assert np.abs(z[0] - ref).max() <= 2 + 1e-4 * np.abs(ref).max()
    assert quant.cfg_gain(255.99) == 65533
    for bad in (-1, 256, float("nan")):
        with pytest.raises(quant.QuantError, match="cfg_scale"):
            quant.cfg_gain(bad)
    with pytest.raises(quant.QuantError, match="temperature"):
        quant.logit_consts(scale, -1)


def test_integer_and_float_samplers_draw_the_same_tokens():
    """The float twin races on the same words: on logits that the integer constants carry
    closely, the two draw the same token nearly always; a different seed does not."""
    head_scale = RNG.uniform(1e-3, 3e-3, size=64)
    acc = RNG.integers(-600, 600, size=(200, 4, 64))        # 200 steps, cond and uncond of 2 prompts
    isamp = sampling.IntegerSampler(head_scale, seed=7, batch=2, cfg_scale=1.5)
    fsamp = sampling.GumbelSampler(seed=7, batch=2, cfg_scale=1.5)
    other = sampling.GumbelSampler(seed=8, batch=2, cfg_scale=1.5)
    same = diff = 0
    for a in acc:
        ti = isamp(a[:2], a[2:])
        tf = fsamp(a[:2] * head_scale, a[2:] * head_scale)
        to = other(a[:2] * head_scale, a[2:] * head_scale)
        same += int((ti == tf).sum())
        diff += int((ti == to).sum())
    assert same >= 0.99 * 400 and diff < 0.5 * 400
    greedy = sampling.IntegerSampler(head_scale, seed=7, batch=2, temperature=0)
    assert greedy(acc[0][:2]).tolist() == (acc[0][:2] * head_scale).argmax(-1).tolist()
    with pytest.raises(ValueError, match="unconditional"):
        isamp(acc[0][:2])
    with pytest.raises(ValueError, match="shape"):
        isamp(acc[0][:3], acc[0][:3])


def test_generate_with_a_sampler(tiny_ckpt):
    """``generate`` hands the image logits to the sampler; the same seed gives the same video,
    and the sampler's guidance must be generate's."""
    from sw.model.checkpoint import load_checkpoint
    from sw.model.decoder import generate

    ck = load_checkpoint(tiny_ckpt)
    cond, uncond = ck.layout.prompt_batch(["red circle moves left"])
    kw = dict(cfg_scale=1.5, uncond_prompt_tokens=uncond, progress=False)
    a, _ = generate(ck.model, cond, 1, **kw, sampler=sampling.GumbelSampler(seed=3, batch=1, cfg_scale=1.5))
    b, _ = generate(ck.model, cond, 1, **kw, sampler=sampling.GumbelSampler(seed=3, batch=1, cfg_scale=1.5))
    c, _ = generate(ck.model, cond, 1, **kw, sampler=sampling.GumbelSampler(seed=4, batch=1, cfg_scale=1.5))
    assert torch.equal(a, b) and not torch.equal(a, c)
    with pytest.raises(ValueError, match="cfg_scale"):
        generate(ck.model, cond, 1, **kw, sampler=sampling.GumbelSampler(seed=3, batch=1, cfg_scale=2.0))
    with pytest.raises(ValueError, match="top_k"):
        generate(ck.model, cond, 1, **kw, top_k=4,
                 sampler=sampling.GumbelSampler(seed=3, batch=1, cfg_scale=1.5))
