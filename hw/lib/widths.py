"""Bit widths shared by the gateware (one definition, used by every block). The accumulators'
widths are the spec's (:func:`sw.spec.quant.sum_bits`)."""

from amaranth.hdl import Const, Value

__all__ = ["index_bits", "mul_const"]


def index_bits(n: int) -> int:
    """Bits of an index into ``n`` items (at least 1, so a single item still has a field)."""
    return max(1, (n - 1).bit_length())


def mul_const(value, c: int):
    """``value * c`` for a constant ``c >= 0``, as shifts and adds.

    Yosys maps a multiplication by a constant that is not a power of two onto a DSP block; the
    address arithmetic (for example ``k_tiles = 24``) needs none, and the DSPs are all taken by
    the MACs and requantisers.
    """
    if not isinstance(c, int) or c < 0:
        raise ValueError(f"mul_const needs a constant integer >= 0, not {c!r}")
    value = Value.cast(value)
    terms = [value << i for i in range(c.bit_length()) if (c >> i) & 1]
    if not terms:
        return Const(0, 1)
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total
