"""Accumulator widths: the arithmetic of hw/formal/accumulators.py for the shipped configuration,
the limit where it stops holding (the failing twin), and the PE width the RTL really builds."""

from types import SimpleNamespace

import pytest

from hw.formal.accumulators import Site, accumulator_budget, check_accumulators
from hw.lib import widths
from sw.config import DEFAULT_ACCEL, TileConfig
from sw.golden import quant


def test_shipped_configuration_cannot_overflow():
    sites = {s.name: s for s in check_accumulators(DEFAULT_ACCEL)}
    # d_model 96, d_ff 256, 8 chunks, 4x4 arrays: the arithmetic written out.
    assert (sites["PE partial sum"].terms, sites["PE partial sum"].bits) == (4, 18)
    assert sites["PE partial sum"].worst == (4 * -16256, 4 * 16384) == (-65024, 65536)
    assert 65536 <= 2**17 - 1
    assert sites["gate/up column accumulator"].worst[1] == 96 * 16384 == 1_572_864
    assert sites["down column accumulator"].worst[1] == 32 * 16384 == 524_288
    assert sites["reducer sum over chunks"].worst[1] == 256 * 16384 == 4_194_304 <= 2**31 - 1
    assert sites["TAS dot product"].worst[1] == 96 * 16384
    assert all(s.fits for s in sites.values())
    text = sites["reducer sum over chunks"].arithmetic()
    assert "256 * 16384 = 4,194,304 <= 2**31 - 1 = 2,147,483,647" in text


@pytest.mark.parametrize("rows", range(1, 65))
def test_sum_bits_is_the_least_width_that_fits(rows):
    """sum_bits(rows) holds rows worst-case products; one bit less does not."""
    bits = widths.sum_bits(rows)
    assert Site("pe", rows, bits).fits
    assert not Site("pe", rows, bits - 1).fits


def test_limit_agrees_with_the_quantisation_spec():
    limit = ((1 << 31) - 1) // (128 * 128)          # 131071, as sw.golden.quant.check_accumulator
    assert Site("k", limit, quant.ACC_BITS).fits
    assert not Site("k", limit + 1, quant.ACC_BITS).fits
    quant.check_accumulator(limit)
    with pytest.raises(ValueError):
        quant.check_accumulator(limit + 1)


def test_overflowing_configuration_is_refused():
    """The failing twin of the static check: a reduction one term past the int32 limit. (A real
    AccelConfig refuses such a d_ff when it is created, so the check is fed a plain namespace.)"""
    cfg = SimpleNamespace(rows=4, d_model=96, d_ff=8 * 16384, chunks=8)
    with pytest.raises(ValueError,
                       match=r"reducer sum over chunks: 131072 \* 16384 = 2,147,483,648 > 2\*\*31 - 1"):
        check_accumulators(cfg)
    narrow = [s for s in accumulator_budget(DEFAULT_ACCEL) if s.name == "PE partial sum"][0]
    assert not Site(narrow.name, narrow.terms, narrow.bits - 1).fits


def test_rtl_partial_sums_use_sum_bits():
    """The systolic array builds its PEs with the width the budget assumes."""
    from amaranth.hdl import Fragment

    from hw.accel.pe import ProcessingElement
    from hw.accel.systolic_array import SystolicArray

    cfg = TileConfig(rows=4, cols=2, k_dim=8, n_dim=2)
    fragment = Fragment.get(SystolicArray(cfg), None)
    pes = [origin for sub, name, _ in fragment.subfragments if name.startswith("pe_")
           for origin in sub.origins if isinstance(origin, ProcessingElement)]
    assert len(pes) == cfg.rows * cfg.cols
    for pe in pes:
        assert len(pe.s_o[0]) == widths.sum_bits(cfg.rows) == 18
