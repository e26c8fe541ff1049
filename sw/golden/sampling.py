"""Samplers for :func:`sw.model.decoder.generate`: ``argmax(p / e)`` in integers, and its float twin.

The whole decode step samples on chip (``docs/decoder.md``), so the token is drawn in integers by
the rules of :mod:`sw.spec.quant` ("Sampling" in ``docs/quantization.md``): the LM head's int32
accumulators become base-2 Q16 logits, classifier-free guidance combines the conditional and
unconditional rows, and the token is ``argmax(z + noise)``, the exponential-race (Gumbel-max) form
of sampling from ``softmax``, with one xorshift32 word per image token and step.

:class:`IntegerSampler` is that rule, for the integer golden model (:class:`sw.golden.step.IntegerDecoder`
with ``integer_logits=True``); :class:`GumbelSampler` is the same race in float64 on the float
model's logits with the same words, so that the float model and the integer one can still be
compared token for token (``python -m sw.golden.step``).
"""

from __future__ import annotations

import math

import numpy as np

from sw.spec import quant

__all__ = ["IntegerSampler", "GumbelSampler", "uniforms", "noise_atoms", "race_probabilities"]


def _check(seed, batch, cfg_scale, temperature, what):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"{what}: seed must be an integer >= 0, not {seed!r}")
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or not 1 <= batch <= 256:
        raise ValueError(f"{what}: batch must be an integer in [1, 256], not {batch!r}")
    if cfg_scale is not None:
        quant.cfg_gain(cfg_scale)
    t = float(temperature)
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"{what}: temperature must be a number >= 0, not {temperature!r}")


class _Streams:
    """One xorshift32 stream per prompt (:func:`sw.spec.quant.sampler_state`)."""

    def __init__(self, seed: int, batch: int):
        self.seed, self.batch = int(seed), int(batch)
        self.state = [quant.sampler_state(self.seed, b) for b in range(self.batch)]

    def words(self, n: int) -> np.ndarray:
        """int64 [batch, n]: the next ``n`` words of every prompt's stream."""
        out = np.empty((self.batch, n), np.int64)
        for b in range(self.batch):
            out[b], self.state[b] = quant.draws(self.state[b], n)
        return out


def uniforms(words) -> np.ndarray:
    """``v = (2 r + 1) / 2**33`` of 32-bit words ``r``, in float64 (exact)."""
    return (2.0 * np.asarray(words, np.float64) + 1.0) / float(1 << (quant.RNG_BITS + 1))


class IntegerSampler:
    """The on-chip sampler: :func:`~sw.spec.quant.cfg_logits_int`, :func:`~sw.spec.quant.noise_int`
    and :func:`~sw.spec.quant.sample_int` on the LM head's accumulators over the image tokens.

    Parameters
    ----------
    head_scale : array of float or None
        ``s_f * s_w[n]`` of the image tokens (the slice ``generate`` samples from), turned into
        ``(mult, shift)`` at ``temperature``; or None, and ``logit`` gives them.
    logit : (mult, shift) or None
        The stored integer constants of the logits (a trace's ``logit_mult``, ``logit_shift``).
    seed, batch : int
        The generation seed and the number of prompts: prompt ``b`` draws from its own stream.
    cfg_scale : float or None
        Classifier-free guidance (Q8, :func:`~sw.spec.quant.cfg_gain`); must match ``generate``'s.
    temperature : float
        Folded into the logits' constants (:func:`~sw.spec.quant.logit_consts`); 0 is greedy and
        draws nothing.

    ``record``: one dict per call (``z`` Q16 logits, ``noise``, ``token``) when a list.
    """

    def __init__(self, head_scale=None, *, logit=None, seed: int = 0, batch: int = 1, cfg_scale=None,
                 temperature: float = 1.0, record: list | None = None):
        _check(seed, batch, cfg_scale, temperature, "IntegerSampler")
        if (head_scale is None) == (logit is None):
            raise ValueError("IntegerSampler: give head_scale or logit=(mult, shift), not both")
        if logit is None:
            self.mult, self.shift = quant.logit_consts(head_scale, temperature)
        else:
            self.mult, self.shift = (np.asarray(a, np.int64) for a in logit)
            if self.mult.shape != self.shift.shape or self.mult.ndim != 1:
                raise ValueError(f"IntegerSampler: logit mult {self.mult.shape} and shift {self.shift.shape} "
                                 "must be vectors of one length")
        self.cfg_scale = cfg_scale
        self.gain = None if cfg_scale is None else quant.cfg_gain(cfg_scale)
        self.greedy = float(temperature) == 0
        self.streams = _Streams(seed, batch)
        self.first_state = list(self.streams.state)
        self.tables = quant.noise_tables()
        self.record = record

    def __call__(self, cond, uncond=None) -> np.ndarray:
        cond = np.asarray(cond, np.int64)
        if cond.shape != (self.streams.batch, len(self.mult)):
            raise ValueError(f"IntegerSampler: accumulators of shape {cond.shape}, expected "
                             f"{(self.streams.batch, len(self.mult))}")
        if (uncond is None) != (self.gain is None):
            raise ValueError("IntegerSampler: unconditional rows given exactly when cfg_scale is set")
        z = quant.cfg_logits_int(cond, None if uncond is None else np.asarray(uncond, np.int64),
                                 self.mult, self.shift, self.gain)
        noise = None if self.greedy else quant.noise_int(self.streams.words(z.shape[-1]), self.tables)
        token = quant.sample_int(z, noise)
        if self.record is not None:
            self.record.append({"z": z, "noise": noise, "token": token})
        return token


class GumbelSampler:
    """The same race in float64 on float logits: ``argmax(l * log2(e) / T - log2(-ln(1 - v)))`` with
    ``l = u + cfg_scale * (c - u)`` and the words of :class:`IntegerSampler`'s streams."""

    def __init__(self, *, seed: int = 0, batch: int = 1, cfg_scale=None, temperature: float = 1.0):
        _check(seed, batch, cfg_scale, temperature, "GumbelSampler")
        self.cfg_scale, self.temperature = cfg_scale, float(temperature)
        self.streams = _Streams(seed, batch)

    def __call__(self, cond, uncond=None) -> np.ndarray:
        c = np.asarray(cond, np.float64)
        if (uncond is None) != (self.cfg_scale is None):
            raise ValueError("GumbelSampler: unconditional rows given exactly when cfg_scale is set")
        if uncond is not None:
            u = np.asarray(uncond, np.float64)
            c = u + self.cfg_scale * (c - u)
        if self.temperature == 0:
            return c.argmax(-1)
        v = uniforms(self.streams.words(c.shape[-1]))
        return (c * (math.log2(math.e) / self.temperature) - np.log2(-np.log1p(-v))).argmax(-1)


def noise_atoms(tables=None) -> tuple[np.ndarray, np.ndarray]:
    """Every value :func:`~sw.spec.quant.noise_int` takes over all ``2**32`` words, and its
    probability, exactly: below ``2**9`` each odd ``w = 2 r + 1`` is its own case; above, the
    value depends only on ``w``'s bit length and its top 9 bits (``i`` and ``j``)."""
    K = quant.NOISE_TABLE_BITS
    vals, wts = [], []
    w = np.arange(1, 1 << (K + 1), 2, dtype=np.int64)
    vals.append(quant.noise_int((w - 1) // 2, tables))
    wts.append(np.ones(len(w)))
    for b in range(K + 1, quant.RNG_BITS + 1):
        top = np.arange(1 << K, dtype=np.int64) + (1 << K)
        rep = (top << (b - K)) | 1                       # one odd word of each case
        vals.append(quant.noise_int((rep - 1) // 2, tables))
        wts.append(np.full(1 << K, 2.0 ** (b - K - 1)))  # odd words of the case
    v, p = np.concatenate(vals), np.concatenate(wts)
    return v, p / p.sum()


def race_probabilities(z, tables=None) -> np.ndarray:
    """The exact probability that :func:`~sw.spec.quant.sample_int` draws each index of the Q16
    logits ``z`` [V] (independent words per index; ties, which favour the lower index, are
    counted for neither): what sampling from ``softmax(z / 2**16 * ln 2)`` should give."""
    v, p = noise_atoms(tables)
    order = np.argsort(v, kind="stable")
    v, p = v[order], p[order]
    cdf = np.concatenate([[0.0], np.cumsum(p)])           # cdf[k] = P(noise < v[k])
    z = np.asarray(z, np.int64)
    out = np.empty(len(z))
    for k in range(len(z)):
        x = z[k] + v[:, None] - np.delete(z, k)[None, :]  # every other index's noise must be below
        F = cdf[np.searchsorted(v, x, side="left")]
        out[k] = float((p * np.exp(np.log(np.maximum(F, 1e-300)).sum(1))).sum())
    return out
