"""Accumulator widths cannot overflow for the configured reduction lengths.

Every sum of int8 x int8 products in the accelerator, with its number of terms ``K`` and the
width of the register that holds it:

====================  =================================  ====================================
site                  terms K                            width
====================  =================================  ====================================
PE partial sum        ``rows`` (one K-slice of a column) ``hw.lib.widths.sum_bits(rows)``
gate / up column      ``d_model``                        ``ACC_BITS`` (int32)
down column (chunk)   ``d_ff / chunks``                  ``ACC_BITS``
reducer (all chunks)  ``d_ff``                           ``ACC_BITS``
TAS dot product       ``d_model`` (heads x head_dim)     ``ACC_BITS``
====================  =================================  ====================================

A product of two int8 lies in ``[-128 * 127, (-128) * (-128)] = [-16256, 16384]``, so a sum of
``K`` of them lies in ``[-16256 K, 16384 K]`` and fits a signed ``b``-bit register when
``16384 K <= 2**(b-1) - 1`` (the negative bound is then met too). The requantiser's product
``acc * mult`` of an int32 and an unsigned ``MULT_BITS``-bit multiplier needs
``|acc * mult| <= 2**31 * (2**16 - 1) < 2**47``, inside its ``PRODUCT_BITS = 49``.

:func:`accumulator_budget` writes this arithmetic out for a configuration and
:func:`check_accumulators` refuses one that could overflow; :class:`PartialSumWidth` proves the
PE's width formally (every input, not just the worst case).
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import *
from amaranth.hdl import Assert

from hw.formal.harness import PropertyWrapper
from hw.lib import widths
from sw.golden import quant

__all__ = ["Site", "accumulator_budget", "check_accumulators", "PartialSumWidth"]

PRODUCT_MAX = quant.INT8_MIN * quant.INT8_MIN          # 16384
PRODUCT_MIN = quant.INT8_MIN * quant.INT8_MAX          # -16256


@dataclass(frozen=True)
class Site:
    """One accumulation: ``terms`` int8 products summed in a signed ``bits``-bit register."""

    name: str
    terms: int
    bits: int

    @property
    def worst(self) -> tuple[int, int]:
        """``(most negative, most positive)`` sum."""
        return self.terms * PRODUCT_MIN, self.terms * PRODUCT_MAX

    @property
    def limits(self) -> tuple[int, int]:
        return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1

    @property
    def fits(self) -> bool:
        lo, hi = self.worst
        return self.limits[0] <= lo and hi <= self.limits[1]

    def arithmetic(self) -> str:
        lo, hi = self.worst
        rel = "<=" if self.fits else ">"
        return (f"{self.name}: {self.terms} * 16384 = {hi:,} {rel} 2**{self.bits - 1} - 1 = "
                f"{self.limits[1]:,} (and {lo:,} >= {self.limits[0]:,})")


def accumulator_budget(cfg) -> list[Site]:
    """Every accumulation of an :class:`sw.config.AccelConfig`, with the widths the RTL uses."""
    return [
        Site("PE partial sum", cfg.rows, widths.sum_bits(cfg.rows)),
        Site("gate/up column accumulator", cfg.d_model, quant.ACC_BITS),
        Site("down column accumulator", cfg.d_ff // cfg.chunks, quant.ACC_BITS),
        Site("reducer sum over chunks", cfg.d_ff, quant.ACC_BITS),
        Site("TAS dot product", cfg.d_model, quant.ACC_BITS),
    ]


def check_accumulators(cfg) -> list[Site]:
    """Raise ``ValueError`` naming every accumulation of ``cfg`` that could overflow; return the
    budget otherwise. Also checks the requantiser's product width."""
    sites = accumulator_budget(cfg)
    bad = [s.arithmetic() for s in sites if not s.fits]
    prod = (1 << (quant.ACC_BITS - 1)) * quant.MULT_MAX
    if prod > (1 << (quant.PRODUCT_BITS - 1)) - 1:
        bad.append(f"requantiser product: 2**31 * {quant.MULT_MAX} = {prod:,} does not fit "
                   f"{quant.PRODUCT_BITS} signed bits")
    if bad:
        raise ValueError("accumulator overflow possible: " + "; ".join(bad))
    return sites


class PartialSumWidth(PropertyWrapper):
    """The sum of ``rows`` int8 products, computed in ``width`` bits (by default the PE's
    :func:`hw.lib.widths.sum_bits`), equals the exact sum, for every choice of operands.

    Parameters
    ----------
    rows : int
        Products per partial sum (the array's rows).
    width : int, optional
        Register width under test.
    """

    def __init__(self, rows, width=None):
        super().__init__()
        self.rows = rows
        self.width = widths.sum_bits(rows) if width is None else width
        self.x = [Signal(signed(8), name=f"x_{r}") for r in range(rows)]
        self.w = [Signal(signed(8), name=f"w_{r}") for r in range(rows)]
        self.free(*self.x, *self.w)

    def elaborate(self, platform):
        m = self.module()
        # The PE chain: each cell adds its product to the partial sum from above, in `width` bits.
        s = Const(0, signed(self.width))
        for r in range(self.rows):
            nxt = Signal(signed(self.width), name=f"s_{r}")
            m.d.comb += nxt.eq(s + self.x[r] * self.w[r])
            s = nxt
        exact = Signal(signed(2 * 8 + self.rows.bit_length() + 1))
        m.d.comb += exact.eq(sum(self.x[r] * self.w[r] for r in range(self.rows)))
        m.d.comb += Assert(s == exact, "the partial sum never wraps")
        self.cover(m, exact == self.rows * PRODUCT_MAX, "the largest sum")
        return m
