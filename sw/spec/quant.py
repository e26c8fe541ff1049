"""The quantisation spec of FastCar-HW, written once.

Every rule that the golden model and the RTL must agree on bit for bit is defined here and only
here; ``docs/quantization.md`` states the same rules in prose. The gateware imports the constants
(widths, limits) from this module, and its tests compare it against the functions below.

Integer path (compared bit for bit, no floating point anywhere)
---------------------------------------------------------------
1. Operands are int8 in ``[-128, 127]``: activations ``x`` and weights ``w``.
2. Products are summed exactly into a signed ``ACC_BITS`` (= 32) accumulator. The configuration is
   refused if ``K * 128 * 128`` could exceed ``2**31 - 1`` (:func:`check_accumulator`), so the
   accumulator never wraps.
3. Requantisation, per output channel ``n``, with an unsigned ``MULT_BITS``-bit multiplier
   ``mult[n]`` and a right shift ``shift[n]`` in ``[0, SHIFT_MAX]``::

       p = acc * mult                       (exact, fits in ACC_BITS + MULT_BITS signed bits)
       q = p >> shift                       (arithmetic shift = floor division by 2**shift)
       r = p - (q << shift)                 (remainder, 0 <= r < 2**shift)
       h = 2**(shift - 1)                   (half; no rounding when shift == 0)
       q = q + 1  if r > h or (r == h and q is odd)      # round half to even
       y = min(max(q, -128), 127)           (saturate to int8)

Float path (calibration only, never compared bit for bit)
----------------------------------------------------------
Weights are quantised symmetrically per output channel, activations per tensor, and the float
requantisation scale ``s = s_x * s_w[n] / s_y`` becomes ``(mult, shift)`` with
:func:`scale_to_mult_shift`. These steps use floating point, but they only *produce* the integer
parameters that the bit-exact path then consumes.
"""

from __future__ import annotations

import numpy as np

INT8_MIN = -128
INT8_MAX = 127
#: Weights from :func:`quantize_weight` use the symmetric range [-127, 127]; the integer path
#: still accepts -128 everywhere.
WEIGHT_QMAX = 127
ACC_BITS = 32
ACC_MIN = -(1 << (ACC_BITS - 1))
ACC_MAX = (1 << (ACC_BITS - 1)) - 1
MULT_BITS = 16
MULT_MAX = (1 << MULT_BITS) - 1
SHIFT_BITS = 6
SHIFT_MAX = (1 << SHIFT_BITS) - 1
#: Width of ``acc * mult`` (signed times unsigned).
PRODUCT_BITS = ACC_BITS + MULT_BITS + 1


class QuantError(ValueError):
    """An integer operand outside the range that the spec allows."""


def max_abs_product() -> int:
    """Largest ``|x * w|`` for int8 operands: ``(-128) * (-128)``."""
    return INT8_MIN * INT8_MIN


def check_accumulator(k: int, acc_bits: int = ACC_BITS, *, what: str = "K") -> None:
    """Refuse a reduction length whose worst-case sum would not fit the accumulator.

    The worst case is ``K`` products of ``(-128) * (-128) = 16384``, so we need
    ``K * 16384 <= 2**(acc_bits-1) - 1``; for int32 that is ``K <= 131071``.
    """
    limit = ((1 << (acc_bits - 1)) - 1) // max_abs_product()
    if k > limit:
        raise ValueError(
            f"{what}={k} could overflow the int{acc_bits} accumulator: "
            f"{k} * 128 * 128 = {k * max_abs_product()} > 2**{acc_bits - 1} - 1 (K must be <= {limit})"
        )


def sum_bits(k: int) -> int:
    """Signed bits that hold any sum of ``k`` int8 x int8 products exactly.

    The largest magnitude is ``k * (-128) * (-128)`` (positive), so the width is that number's bit
    length plus the sign bit: 16 bits for one product, 18 for four. The hardware may keep such a
    sum in fewer bits than :data:`ACC_BITS`: the value is the same integer, so nothing of the spec
    changes (``tests/formal/test_accumulators.py`` proves the widths the gateware uses).
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"sum_bits needs a positive number of products, not {k!r}")
    check_accumulator(k)
    return (k * max_abs_product()).bit_length() + 1


def _as_int64(a, name: str, lo: int, hi: int) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise QuantError(f"{name}: expected an integer array, not dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < lo or arr.max() > hi):
        bad = tuple(int(i) for i in np.argwhere((arr < lo) | (arr > hi))[0])
        raise QuantError(
            f"{name}[{', '.join(map(str, bad))}]: value {arr[bad]} outside [{lo}, {hi}]"
        )
    return arr


def shift_parts(p, shift):
    """``p = q * 2**shift + r`` with ``q = floor(p / 2**shift)`` and ``0 <= r < 2**shift``, and the
    half unit ``h = 2**(shift - 1)`` (0 where ``shift == 0``): what every rounding rule looks at.
    Returns int64 ``(p, shift, q, r, h)``, ``shift`` broadcast to ``p``'s shape."""
    p = np.asarray(p, dtype=np.int64)
    shift = np.broadcast_to(np.asarray(shift, dtype=np.int64), p.shape)
    q = p >> shift
    r = p - (q << shift)
    h = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    return p, shift, q, r, h


def round_shift_rne(p, shift) -> np.ndarray:
    """``p / 2**shift`` rounded to nearest, ties to even, in exact integer arithmetic."""
    p, shift, q, r, half = shift_parts(p, shift)
    up = (shift > 0) & ((r > half) | ((r == half) & ((q & 1) == 1)))
    return q + up.astype(np.int64)


def saturate_int8(q) -> np.ndarray:
    """Clip to ``[-128, 127]`` and return int8."""
    return np.clip(np.asarray(q, dtype=np.int64), INT8_MIN, INT8_MAX).astype(np.int8)


def requantize(acc, mult, shift) -> np.ndarray:
    """int32 accumulators -> int8 by ``saturate(round_half_even(acc * mult / 2**shift))``.

    ``mult`` and ``shift`` broadcast against ``acc`` along the last axis (per output channel).
    """
    acc = _as_int64(acc, "acc", ACC_MIN, ACC_MAX)
    mult = _as_int64(mult, "mult", 0, MULT_MAX)
    shift = _as_int64(shift, "shift", 0, SHIFT_MAX)
    acc, mult, shift = np.broadcast_arrays(acc, mult, shift)
    return saturate_int8(round_shift_rne(acc * mult, shift))


def matmul_int(x, w) -> np.ndarray:
    """Exact int8 x int8 -> int32 matrix product (returned as int64, range checked).

    The product is taken in int32, the accumulator's width: :func:`check_accumulator` has refused
    any ``K`` whose sum could leave it, so no sum wraps (and int32 is faster than int64 here)."""
    x = _as_int64(x, "x", INT8_MIN, INT8_MAX)
    w = _as_int64(w, "w", INT8_MIN, INT8_MAX)
    check_accumulator(x.shape[-1])
    acc = (x.astype(np.int32) @ w.astype(np.int32)).astype(np.int64)
    assert acc.min(initial=0) >= ACC_MIN and acc.max(initial=0) <= ACC_MAX
    return acc


def gemm_int8(x, w, mult, shift) -> np.ndarray:
    """One requantised matrix product: ``requantize(x @ w, mult, shift)`` with x [B, K], w [K, N]."""
    return requantize(matmul_int(x, w), mult, shift)


# --- float calibration (produces integer parameters; not part of the bit-exact path) ----------

def quantize_weight(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-output-channel int8 weights for ``w`` of shape [K, N].

    Returns ``(w_q, scale)`` with ``w ~= w_q * scale[None, :]``.
    """
    w = np.asarray(w, dtype=np.float64)
    if not np.all(np.isfinite(w)):
        raise QuantError("weights contain NaN or inf")
    amax = np.abs(w).max(axis=0)
    scale = np.where(amax > 0, amax / WEIGHT_QMAX, 1.0)
    w_q = np.clip(np.rint(w / scale), -WEIGHT_QMAX, WEIGHT_QMAX).astype(np.int8)
    return w_q, scale


def activation_scale(x: np.ndarray) -> float:
    """Symmetric per-tensor scale so that ``max|x|`` maps to 127."""
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise QuantError("activations contain NaN or inf")
    amax = float(np.abs(x).max()) if x.size else 0.0
    return amax / INT8_MAX if amax > 0 else 1.0


def quantize_activation(x: np.ndarray, scale: float) -> np.ndarray:
    """Round to nearest (ties to even, as ``np.rint``) and saturate to int8."""
    return saturate_int8(np.rint(np.asarray(x, dtype=np.float64) / scale))


def scale_to_mult_shift(scale, *, shift_max: int = SHIFT_MAX) -> tuple[np.ndarray, np.ndarray]:
    """Express positive float scales as ``mult * 2**-shift`` with ``mult < 2**MULT_BITS``.

    The shift is the largest in ``[0, shift_max]`` that keeps ``mult`` within ``MULT_BITS`` bits,
    which keeps the most precision.
    """
    scale = np.atleast_1d(np.asarray(scale, dtype=np.float64))
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise QuantError(f"requantisation scales must be finite and positive, got {scale}")
    mult = np.zeros(scale.shape, dtype=np.int64)
    shift = np.zeros(scale.shape, dtype=np.int64)
    for idx, s in np.ndenumerate(scale):
        best = None
        for sh in range(shift_max, -1, -1):
            m = int(round(s * (1 << sh)))
            if 0 < m <= MULT_MAX:
                best = (m, sh)
                break
        if best is None:
            raise QuantError(f"scale {s} cannot be written as mult * 2**-shift with "
                             f"mult <= {MULT_MAX}, shift <= {SHIFT_MAX}")
        mult[idx], shift[idx] = best
    return mult.astype(np.uint16), shift.astype(np.uint8)


# --- SwiGLU MLP and TAS: the accelerator's integer operations --------------------------------

#: SiLU is a 256-entry int8 -> int8 table indexed by ``gate_q + 128``.
LUT_SIZE = 256


def silu_lut(s_gate: float, s_act: float) -> np.ndarray:
    """Build the SiLU table: ``lut[g + 128] = saturate(rint(silu(g * s_gate) / s_act))``.

    Built once per layer at calibration time (floating point); from then on the table itself is
    the integer artefact that the golden model and the RTL both use.
    """
    if not (np.isfinite(s_gate) and np.isfinite(s_act) and s_gate > 0 and s_act > 0):
        raise QuantError(f"SiLU table scales must be finite and positive, got {s_gate}, {s_act}")
    g = np.arange(INT8_MIN, INT8_MAX + 1, dtype=np.float64) * s_gate
    silu = g / (1.0 + np.exp(-g))
    return saturate_int8(np.rint(silu / s_act))


def apply_lut(codes, lut) -> np.ndarray:
    """``lut[codes + 128]`` for int8 ``codes``."""
    codes = _as_int64(codes, "codes", INT8_MIN, INT8_MAX)
    lut = np.asarray(lut)
    if lut.shape != (LUT_SIZE,) or lut.dtype != np.int8:
        raise QuantError(f"lookup table must be int8 of shape ({LUT_SIZE},), not {lut.dtype} {lut.shape}")
    return lut[codes + 128]


def swiglu_int8(x, wg, wu, wd, p) -> np.ndarray:
    """The golden SwiGLU MLP on int8 rows ``x`` [B, d]; returns int8 [B, d].

    ``p`` holds the integer constants: ``mult_g, shift_g, mult_u, shift_u`` (per d_ff channel),
    ``lut`` (int8 [256]), ``mult_h, shift_h`` (scalars), ``mult_d, shift_d`` (per d channel)::

        gate = requant(x @ wg)          up = requant(x @ wu)          (int8)
        act  = lut[gate + 128]                                        (int8, SiLU)
        h    = requant(act * up)                                      (int8; the product is int16)
        y    = requant(h @ wd)                                        (int8)
    """
    gate = gemm_int8(x, wg, p["mult_g"], p["shift_g"])
    up = gemm_int8(x, wu, p["mult_u"], p["shift_u"])
    act = apply_lut(gate, p["lut"])
    h = requantize(act.astype(np.int64) * up.astype(np.int64), p["mult_h"], p["shift_h"])
    return gemm_int8(h, wd, p["mult_d"], p["shift_d"])


def tas_int(q, k) -> np.ndarray:
    """Integer temporal attention score: ``sum over heads and head dims of q * k``.

    ``q``, ``k``: int8 [..., heads, head_dim] -> int64 [...] (fits int32: |sum| <= d * 16384).
    """
    q = _as_int64(q, "q", INT8_MIN, INT8_MAX)
    k = _as_int64(k, "k", INT8_MIN, INT8_MAX)
    check_accumulator(q.shape[-1] * q.shape[-2], what="heads * head_dim")
    return (q * k).sum(axis=(-1, -2))


#: The threshold of tau = +inf: above every int32 TAS, so no row replays.
THRESHOLD_NEVER = ACC_MAX + 1


def tas_threshold(tau: float, s_q: float, s_k: float, heads: int, head_dim: int, *,
                  strict: bool = False) -> int:
    """Integer threshold ``T`` such that ``tas_int >= T`` exactly when the real score clears ``tau``.

    The real score is ``s = tas_int * s_q * s_k / (heads * sqrt(head_dim))``. For the default rule
    ``s >= tau`` that is ``tas_int >= ceil(tau * c)`` with ``c = heads * sqrt(head_dim) / (s_q s_k)``;
    for the strict rule ``s > tau`` it is ``tas_int >= floor(tau * c) + 1``. Infinite ``tau`` maps
    to a threshold outside the int32 range (never / always replay).
    """
    if np.isnan(tau):
        raise QuantError("tau is NaN")
    if tau == np.inf:
        return THRESHOLD_NEVER
    if tau == -np.inf:
        return ACC_MIN
    c = heads * np.sqrt(head_dim) / (s_q * s_k)
    t = tau * c
    th = int(np.floor(t)) + 1 if strict else int(np.ceil(t))
    return int(np.clip(th, ACC_MIN, THRESHOLD_NEVER))


def replay_decision(score, threshold) -> np.ndarray:
    """The replay rule in integer form: replay where ``score >= threshold``."""
    return np.asarray(score, dtype=np.int64) >= np.int64(threshold)


def replay_guard(want, frame: int, chain=None, *, refresh_every=None, max_chain=None):
    """The replay decision of one group's rows: the frame-0 rule and the drift guard.

    ``want`` (bool [B]) is :func:`replay_decision` of the rows; ``chain`` (int [B]) holds, per
    row, how many times this (layer, in-frame index, row) replayed in a row up to the previous
    frame (0 before frame 0; ``None`` when ``max_chain`` is ``None``). Works on numpy and torch
    arrays alike (it only uses ``&``, ``~``, ``>=`` and ``*``)::

        if frame == 0:                       # frame 0 always computes
            replay = forced = False
            chain  = 0
        else:
            force  = (refresh_every is not None and frame % refresh_every == 0)
                     or (max_chain is not None and chain >= max_chain)
            replay = want and not force
            forced = want and force          # rows the guard made compute
            chain  = chain + 1 if replay else 0

    ``frame`` counts the generated frames from 0 (not from the last computed frame), so
    ``refresh_every = K`` computes frames K, 2K, ...; ``max_chain = M`` allows exactly M
    consecutive replays of one (layer, index, row), and the next frame computes (``M = 0``: never
    replay). Returns ``(replay, forced, chain)``.
    """
    if frame == 0:
        none = want & False
        return none, none, None if chain is None else chain * 0
    force = want & False
    if refresh_every is not None and frame % refresh_every == 0:
        force = ~force
    elif max_chain is not None:
        if chain is None:
            raise ValueError("replay_guard: max_chain needs the chain counters")
        force = chain >= max_chain
    replay, forced = want & ~force, want & force
    return replay, forced, None if chain is None or max_chain is None else (chain + 1) * replay


# --- the rest of the decoder layer (the whole decode step on chip; docs/quantization.md) -------

#: Fixed-point bits of the RoPE tables and of the reciprocal square root.
ROPE_BITS = 14
RSQRT_BITS = 30
#: The softmax's exponent: base 2, Q16 exponents, a 256-entry table of 2**(-f/256) in Q15.
EXP_FRAC_BITS = 16
EXP_TABLE_BITS = 8
EXP_ONE = 1 << 15
#: The residual stream is int32 (it never comes near the bounds; adds saturate there).
RESIDUAL_BITS = 32


def saturate(q, bits: int) -> np.ndarray:
    """Clip to the signed ``bits``-bit range (int64 result)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return np.clip(np.asarray(q, dtype=np.int64), lo, hi)


def requant_wide(acc, mult, shift, bits: int = RESIDUAL_BITS) -> np.ndarray:
    """:func:`requantize`'s rounding (ties to even) into a ``bits``-wide signed result: the
    attention's and the MLP's contributions to the residual stream."""
    acc = np.asarray(acc, dtype=np.int64)
    mult = _as_int64(mult, "mult", 0, MULT_MAX)
    shift = _as_int64(shift, "shift", 0, SHIFT_MAX)
    acc, mult, shift = np.broadcast_arrays(acc, mult, shift)
    return saturate(round_shift_rne(acc * mult, shift), bits)


def div_rne(n, d) -> np.ndarray:
    """``n / d`` rounded to nearest, ties to even, for integers ``n`` and ``d > 0``."""
    n, d = np.broadcast_arrays(np.asarray(n, dtype=np.int64), np.asarray(d, dtype=np.int64))
    if (d <= 0).any():
        raise QuantError("div_rne: the divisor must be positive")
    q = n // d
    r2 = 2 * (n - q * d)
    return q + ((r2 > d) | ((r2 == d) & (q % 2 == 1))).astype(np.int64)


def rsqrt_int(D) -> np.ndarray:
    """``floor(2**RSQRT_BITS / sqrt(D))`` exactly, for integers ``D >= 1``:
    ``isqrt(floor(2**(2 * RSQRT_BITS) / D))`` (an integer square root and an integer division)."""
    import math

    D = np.asarray(D, dtype=np.int64)
    if (D < 1).any():
        raise QuantError("rsqrt_int: D must be at least 1")
    return np.array([math.isqrt((1 << (2 * RSQRT_BITS)) // int(v)) for v in D.ravel()],
                    dtype=np.int64).reshape(D.shape)


def rmsnorm_int(r, mult, shift, eps: int) -> np.ndarray:
    """RMSNorm of int32 residual rows ``r`` [..., d] to int8::

        D   = sum(r * r) + d * eps                (eps: the float eps in residual units squared)
        inv = floor(2**30 / sqrt(D))              (rsqrt_int)
        y   = saturate8(round_half_even(r * inv * mult / 2**(30 + shift)))

    ``mult * 2**-shift`` per channel is ``gamma * sqrt(d) * s_r / s_out`` / ``s_r``: the norm's
    weight and the output scale (``shift <= 33``, so the total shift stays below 64).
    """
    r = np.asarray(r, dtype=np.int64)
    d = r.shape[-1]
    D = (r * r).sum(-1) + d * int(eps)
    inv = rsqrt_int(np.maximum(D, 1))[..., None]
    shift = np.asarray(shift, dtype=np.int64)
    if shift.size and int(shift.max()) > SHIFT_MAX - RSQRT_BITS:
        raise QuantError(f"rmsnorm_int: shift {int(shift.max())} above {SHIFT_MAX - RSQRT_BITS}")
    mult = _as_int64(mult, "mult", 0, MULT_MAX)
    return saturate_int8(round_shift_rne(r * inv * mult, RSQRT_BITS + shift))


def rope_tables_int(cos, sin) -> tuple[np.ndarray, np.ndarray]:
    """int16 RoPE tables ``C = rint(cos * 2**14)``, ``S = rint(sin * 2**14)`` [positions, head_dim / 2]
    from float tables whose two halves repeat (HF LLaMA's layout). Built once, then integers."""
    cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    h = cos.shape[-1] // 2
    return (np.rint(cos[..., :h] * (1 << ROPE_BITS)).astype(np.int16),
            np.rint(sin[..., :h] * (1 << ROPE_BITS)).astype(np.int16))


def rope_int(x, C, S) -> np.ndarray:
    """Rotate int8 ``x`` [..., head_dim] (halves ``x1``, ``x2``) by one position's tables ``C``,
    ``S`` [head_dim / 2]: ``(x1 C - x2 S, x2 C + x1 S) / 2**14``, rounded half to even, saturated
    to int8."""
    x = np.asarray(x, dtype=np.int64)
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    C, S = np.asarray(C, np.int64), np.asarray(S, np.int64)
    out = np.concatenate([x1 * C - x2 * S, x2 * C + x1 * S], axis=-1)
    return saturate_int8(round_shift_rne(out, ROPE_BITS))


def exp2_table() -> np.ndarray:
    """``T[f] = rint(2**15 * 2**(-f / 256))`` for f in 0..255 (int32): the softmax's exponent table."""
    f = np.arange(1 << EXP_TABLE_BITS, dtype=np.float64)
    return np.rint(EXP_ONE * np.exp2(-f / (1 << EXP_TABLE_BITS))).astype(np.int32)


def softmax_av_int(scores, v, a_exp: int, table) -> tuple[np.ndarray, np.ndarray]:
    """Integer softmax-weighted sum of ``v`` over the attended positions.

    ``scores`` int [..., P] (``q . k`` per head), ``v`` int8 [..., P, head_dim], ``a_exp`` the
    exponent constant ``rint(s_q s_k / sqrt(head_dim) * log2(e) * 2**16)``::

        t = (max(scores) - scores) * a_exp          (>= 0: the exponent, Q16, base 2, negated)
        e = table[(t >> 8) & 255] >> (t >> 16)      (2**(-t / 2**16) in Q15; 0 beyond 63 halvings)
        E = sum(e)                                  (>= 2**15: the maximum contributes table[0])
        o = sum(e * v)                              (int64)

    Returns ``(o [..., head_dim], E [...])``; the attention output is ``o / E`` in ``v``'s units.
    """
    s = np.asarray(scores, dtype=np.int64)
    t = (s.max(-1, keepdims=True) - s) * int(a_exp)
    n = np.minimum(t >> EXP_FRAC_BITS, 63)
    frac = (t >> (EXP_FRAC_BITS - EXP_TABLE_BITS)) & ((1 << EXP_TABLE_BITS) - 1)
    e = np.asarray(table, np.int64)[frac] >> n
    o = (e[..., None] * np.asarray(v, np.int64)).sum(-2)
    return o, e.sum(-1)


def attention_out_int(o, E, mult, shift) -> np.ndarray:
    """``saturate8(div_rne(o * mult, E * 2**shift))``: the normalised attention output in int8 at
    the o-projection's input scale (``mult * 2**-shift = s_v / s_a``)."""
    E = np.asarray(E, dtype=np.int64)[..., None]
    return saturate_int8(div_rne(np.asarray(o, np.int64) * int(mult), E << int(shift)))


# --- sampling on chip: CFG and argmax(p / e) in integers (docs/quantization.md, "Sampling") ---

#: Logits enter the sampler in base 2, Q16: ``l = logit * log2(e) / temperature * 2**16``,
#: saturated to 24 bits (128 in base 2, 88 nats: far beyond any logit of a model).
LOGIT_FRAC_BITS = 16
LOGIT_BITS = 24
#: The CFG scale in Q8: ``g = rint(cfg_scale * 2**8)`` (1.5 is 384, exactly).
CFG_BITS = 8
#: Index bits of the two 256-entry tables of the exponential draw's logarithm.
NOISE_TABLE_BITS = 8
#: The draws: xorshift32 (Marsaglia's 13, 17, 5), one 32-bit word per image token and step.
RNG_BITS = 32
_MASK32 = (1 << RNG_BITS) - 1


def xorshift32(x: int) -> int:
    """The next state of the sampler's generator (``x != 0``; the period is ``2**32 - 1``)."""
    x &= _MASK32
    x ^= (x << 13) & _MASK32
    x ^= x >> 17
    x ^= (x << 5) & _MASK32
    return x


def sampler_state(seed: int, prompt: int) -> int:
    """The generator's first state for prompt ``prompt`` of a batch generated with ``seed``: the
    32-bit finaliser of MurmurHash3 of ``seed * 2**8 + prompt + 1`` (mod ``2**32``), never 0. The
    host computes it once and sends it; the chip only steps :func:`xorshift32`."""
    if not 0 <= prompt < 256:
        raise QuantError(f"sampler_state: prompt {prompt} outside [0, 255]")
    h = (int(seed) * 256 + prompt + 1) & _MASK32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK32
    h ^= h >> 16
    return h or 0x6D2B79F5


def noise_tables() -> tuple[np.ndarray, np.ndarray]:
    """The two tables of the exponential draw's base-2 logarithm, Q16, ``2**NOISE_TABLE_BITS``
    entries each, at the middle of each bin (built once from floats; every entry is at least
    1e-6 from a rounding boundary, ``tests/sw/test_sampling.py``)::

        LOG2[i] = rint(2**16 * log2(1 + (i + 1/2) / 256))               log2 of a mantissa
        G[j]    = rint(2**16 * log2(-ln(1 - v) / v)),  v = (j + 1/2) / 256
    """
    n = 1 << NOISE_TABLE_BITS
    mid = (np.arange(n, dtype=np.float64) + 0.5) / n
    log2 = np.rint((1 << LOGIT_FRAC_BITS) * np.log2(1.0 + mid)).astype(np.int64)
    g = np.rint((1 << LOGIT_FRAC_BITS) * np.log2(-np.log1p(-mid) / mid)).astype(np.int64)
    return log2, g


def noise_int(r, tables=None) -> np.ndarray:
    """``-log2(e) * 2**16`` of the exponential draw ``e = -ln(1 - v)`` for the 32-bit words ``r``,
    with ``v = (2 r + 1) / 2**33`` (never 0 or 1)::

        w   = 2 r + 1                                   33 bits, odd
        b   = bit_length(w) - 1                         w = 2**b * (1 + f)
        i   = the 8 bits of w below its leading one     (zeros shifted in when b < 8)
        j   = w >> 25                                   the top 8 bits of v
        out = -((b - 33) * 2**16 + LOG2[i] + G[j])      log2(e) = log2(v) + log2(e / v)

    ``LOG2``, ``G``: :func:`noise_tables`. A larger ``out`` is a smaller draw; the token is
    ``argmax(z + out)`` (:func:`sample_int`).
    """
    log2_t, g_t = noise_tables() if tables is None else tables
    r = np.asarray(r, dtype=np.int64)
    if r.size and (r.min() < 0 or r.max() > _MASK32):
        raise QuantError("noise_int: draws must be 32-bit unsigned words")
    w = 2 * r + 1
    b = np.zeros(w.shape, np.int64)
    for k in range(RNG_BITS + 1):                       # bit_length - 1, vectorised
        b = np.where(w >> k != 0, k, b)
    K = NOISE_TABLE_BITS
    i = ((w << (RNG_BITS - b)) >> (RNG_BITS - K)) & ((1 << K) - 1)
    j = w >> (RNG_BITS + 1 - K)
    return -((b - (RNG_BITS + 1)) * (1 << LOGIT_FRAC_BITS) + log2_t[i] + g_t[j])


def logit_consts(head_scale, temperature: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(mult, shift)`` per vocabulary entry that turn LM-head accumulators into base-2 Q16
    logits at ``temperature``: ``mult * 2**-shift = head_scale * log2(e) / temperature * 2**16``
    (float, calibration only; ``temperature`` 0 is greedy and takes the scale of 1)."""
    import math

    t = float(temperature)
    if not math.isfinite(t) or t < 0:
        raise QuantError(f"logit_consts: temperature must be finite and >= 0, not {temperature!r}")
    s = np.asarray(head_scale, np.float64) * math.log2(math.e) / (t or 1.0) * (1 << LOGIT_FRAC_BITS)
    return scale_to_mult_shift(s)


def cfg_gain(cfg_scale: float) -> int:
    """The CFG scale in Q8, ``rint(cfg_scale * 2**8)`` (a requantiser's ``mult``, so below
    ``2**16``); refused outside ``[0, 2**8)``."""
    import math

    g = float(cfg_scale) * (1 << CFG_BITS) if math.isfinite(float(cfg_scale)) else -1.0
    if not 0 <= g or round(g) > MULT_MAX:
        raise QuantError(f"cfg_gain: cfg_scale {cfg_scale!r} outside [0, {MULT_MAX / (1 << CFG_BITS):.3f}]")
    return int(round(g))


def cfg_logits_int(acc_cond, acc_uncond, mult, shift, gain) -> np.ndarray:
    """Base-2 Q16 logits of the LM head's int32 accumulators, with classifier-free guidance; two
    requantisations of the usual rounding (:func:`requant_wide`), so the RTL uses its lanes::

        l = requant_wide(acc, mult, shift, 24)                     per vocabulary entry
        z = saturate32(l_u + requant_wide(l_c - l_u, gain, 8, 32))  (z = l_c without guidance)

    ``acc_uncond`` None: no guidance (``gain`` is not read). int64 result.
    """
    lc = requant_wide(acc_cond, mult, shift, LOGIT_BITS)
    if acc_uncond is None:
        return lc
    lu = requant_wide(acc_uncond, mult, shift, LOGIT_BITS)
    return saturate(lu + requant_wide(lc - lu, int(gain), CFG_BITS, RESIDUAL_BITS), RESIDUAL_BITS)


def draws(state: int, n: int) -> tuple[np.ndarray, int]:
    """``n`` words of the generator from ``state`` (each the state after one step), and the last."""
    out = np.empty(n, np.int64)
    x = int(state)
    if not 0 < x <= _MASK32:
        raise QuantError(f"draws: the generator state must be a nonzero 32-bit word, not {state!r}")
    for k in range(n):
        x = xorshift32(x)
        out[k] = x
    return out, x


def sample_int(z, noise=None) -> np.ndarray:
    """The token of each row of the Q16 logits ``z`` [..., V]: ``argmax(z + noise)``, the lowest
    index on ties; ``noise`` None is greedy (``argmax(z)``). This is ``argmax(p / e)`` with
    ``p = 2**(z / 2**16)`` and ``e`` the exponential draws of :func:`noise_int`."""
    z = np.asarray(z, np.int64)
    score = z if noise is None else z + np.asarray(noise, np.int64)
    return score.argmax(-1)
