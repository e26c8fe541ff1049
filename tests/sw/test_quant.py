"""The integer spec against an independent, straightforward implementation with Python ints."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.spec import quant


def reference_requant(acc: int, mult: int, shift: int) -> int:
    """Round-half-even of an exact rational, then clamp: written without shifts or masks."""
    v = Fraction(acc * mult, 2 ** shift)
    fl = v.numerator // v.denominator
    frac = v - fl
    if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    return max(-128, min(127, fl))


@settings(max_examples=2000, deadline=None)
@given(acc=st.integers(quant.ACC_MIN, quant.ACC_MAX), mult=st.integers(0, quant.MULT_MAX),
       shift=st.integers(0, quant.SHIFT_MAX))
def test_requant_matches_reference(acc, mult, shift):
    assert int(quant.requantize([acc], [mult], [shift])[0]) == reference_requant(acc, mult, shift)


@pytest.mark.parametrize("acc,shift,want", [
    (5, 1, 2), (7, 1, 4), (-5, 1, -2), (-7, 1, -4),      # ties go to even
    (6, 2, 2), (-6, 2, -2), (10, 2, 2), (-10, 2, -2),
    (255, 1, 127), (-257, 1, -128),                      # saturation both sides
    (quant.ACC_MAX, 0, 127), (quant.ACC_MIN, 0, -128),
    (-5, 63, 0), (5, 63, 0), (1, 0, 1),
])
def test_requant_directed(acc, shift, want):
    assert int(quant.requantize([acc], [1], [shift])[0]) == want


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 24), st.integers(1, 24), st.integers(0, 2**32 - 1))
def test_gemm_matches_python_ints(k, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(3, k)).astype(np.int8)
    w = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    mult = rng.integers(0, quant.MULT_MAX + 1, size=n).astype(np.uint16)
    shift = rng.integers(0, 40, size=n).astype(np.uint8)
    y = quant.gemm_int8(x, w, mult, shift)
    for b in range(3):
        for j in range(n):
            acc = sum(int(x[b, i]) * int(w[i, j]) for i in range(k))
            assert int(y[b, j]) == reference_requant(acc, int(mult[j]), int(shift[j]))


def test_accumulator_limit():
    quant.check_accumulator(131071)
    with pytest.raises(ValueError, match="131072 could overflow the int32 accumulator"):
        quant.check_accumulator(131072)


def test_operand_range_checked():
    with pytest.raises(quant.QuantError, match=r"x\[0, 1\]: value 128 outside"):
        quant.matmul_int(np.array([[1, 128]]), np.zeros((2, 1), dtype=np.int8))
    with pytest.raises(quant.QuantError, match="expected an integer array"):
        quant.requantize(np.array([1.5]), [1], [0])


def test_scale_to_mult_shift_precision():
    scales = np.array([1e-6, 3.3e-3, 0.5, 0.999, 1.0, 7.25])
    mult, shift = quant.scale_to_mult_shift(scales)
    approx = mult.astype(np.float64) / 2.0 ** shift.astype(np.float64)
    assert np.all(np.abs(approx / scales - 1) < 2e-5)
    assert mult.max() <= quant.MULT_MAX and shift.max() <= quant.SHIFT_MAX
    with pytest.raises(quant.QuantError):
        quant.scale_to_mult_shift([0.0])
    with pytest.raises(quant.QuantError):
        quant.scale_to_mult_shift([float("nan")])


def test_weight_quantisation_is_symmetric_per_channel():
    w = np.array([[1.0, -0.01], [-2.0, 0.02]])
    w_q, s = quant.quantize_weight(w)
    assert w_q.dtype == np.int8
    assert list(w_q[:, 0]) == [64, -127] and list(w_q[:, 1]) == [-64, 127]
    with pytest.raises(quant.QuantError, match="NaN or inf"):
        quant.quantize_weight(np.array([[np.inf]]))

