"""The fixed-latency requantiser lane against sw.spec.quant.requantize: ties, saturation, shift 0 and the
widest shifts, operand extremes, one value per cycle, both DSP arrangements (one and two blocks)."""

import numpy as np
import pytest
from amaranth.hdl import Const, Signal

from hw.lib.requant_lane import MUX2_INIT, RequantLane, shift_right
from sw.spec import quant
from tests import lanes


def cases_for(acc_bits, seed=7):
    """(acc, mult, shift) triples inside ``acc_bits``, every tie and saturation corner included."""
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    cases = []
    for shift in (0, 1, 2, 3, 7, 15, 31, 47, 48, 63):
        for acc in range(-5, 6):
            half = 1 << shift >> 1
            for a in (acc, acc * (1 << shift) + half, acc * (1 << shift) - half):
                if lo <= a <= hi:
                    cases.append((a, 1, shift))
    for shift in (1, 3, 12):
        for v2 in [*range(-261, -250), *range(250, 261)]:
            if lo <= v2 << (shift - 1) <= hi:
                cases.append((v2 << (shift - 1), 1, shift))
    for acc in (lo, hi, -129, -128, 127, 128, 0, -1):
        for mult in (0, 1, quant.MULT_MAX):
            for shift in (0, 8, 40, 63):
                cases.append((max(lo, min(hi, acc)), mult, shift))
    rng = np.random.default_rng(seed)
    for _ in range(300):
        cases.append((int(rng.integers(lo, hi + 1)), int(rng.integers(0, quant.MULT_MAX + 1)),
                      int(rng.integers(0, 64))))
    return cases


def run_lane(acc_bits, cases, gaps=None, out_bits=8):
    """Feed ``cases`` one per cycle (with idle cycles where ``gaps`` says) and return
    ``(cycles_in, [(cycle_out, y, tag)])``."""
    dut = RequantLane(acc_bits, tag_bits=10, out_bits=out_bits)

    def set_item(ctx, case, k):
        a, mu, sh = case
        ctx.set(dut.i.p.acc, a)
        ctx.set(dut.i.p.mult, mu)
        ctx.set(dut.i.p.shift, sh)
        ctx.set(dut.i.p.tag, k)

    return lanes.run_lane(dut, cases, set_item, lambda ctx: (ctx.get(dut.o.p.y), ctx.get(dut.o.p.tag)), gaps)


@pytest.mark.parametrize("acc_bits", [16, 18, 22, 24, 32])
def test_lane_is_the_spec_one_per_cycle(acc_bits):
    cases = cases_for(acc_bits)
    sent, got = run_lane(acc_bits, cases)
    assert len(got) == len(cases), f"{len(cases)} values in, {len(got)} out"
    want = quant.requantize(*(np.array(c, dtype=np.int64) for c in zip(*cases, strict=True)))
    for k, (cycle, y, tag) in enumerate(got):
        assert tag == k, f"output {k} carries tag {tag}"
        assert cycle - sent[k] == RequantLane.latency, f"value {k}: latency {cycle - sent[k]}"
        assert y == want[k], f"acc {cases[k][0]} * {cases[k][1]} >> {cases[k][2]}: RTL {y}, spec {want[k]}"


def wide_cases(acc_bits, out_bits, seed=5):
    """:func:`cases_for` plus values at the ``out_bits`` saturation bounds and their ties."""
    lo, hi = -(1 << (acc_bits - 1)), (1 << (acc_bits - 1)) - 1
    top = 1 << (out_bits - 1)
    cases = cases_for(acc_bits, seed)
    for shift in (0, 1, 2, 9):
        for v in (top - 1, top, top + 1, -top, -top - 1, -top + 1):
            for a in (v << shift, (v << shift) + (1 << shift >> 1), (v << shift) - (1 << shift >> 1)):
                if lo <= a <= hi:
                    cases.append((a, 1, shift))
    return cases


@pytest.mark.parametrize("acc_bits, out_bits", [(32, 24), (25, 32), (32, 32), (18, 20)])
def test_wide_lane_is_requant_wide(acc_bits, out_bits):
    """With ``out_bits`` wider than 8 the lane is ``requant_wide`` into that width, corners included;
    the int8 lane's netlist is the same as before the parameter (checked by the caller's RTLIL)."""
    cases = wide_cases(acc_bits, out_bits)
    sent, got = run_lane(acc_bits, cases, out_bits=out_bits)
    want = quant.requant_wide(*(np.array(c, dtype=np.int64) for c in zip(*cases, strict=True)), bits=out_bits)
    assert len(got) == len(cases)
    sat = 0
    for k, (cycle, y, tag) in enumerate(got):
        assert tag == k and cycle - sent[k] == RequantLane.latency
        assert y == want[k], f"acc {cases[k][0]} * {cases[k][1]} >> {cases[k][2]} into {out_bits} bits: " \
                             f"RTL {y}, spec {want[k]}"
        sat += abs(int(want[k])) >= (1 << (out_bits - 1)) - 1
    assert sat >= 4, "the cases reach the saturation bounds"
    # The check can fail: the int8 rule on the same cases differs.
    assert (quant.requantize(*(np.array(c, dtype=np.int64) for c in zip(*cases, strict=True))) != want).any()


def test_lane_with_idle_cycles_keeps_order_and_latency():
    cases = cases_for(24, seed=3)[:120]
    sent, got = run_lane(24, cases, gaps=[0, 1, 0, 0, 1, 1, 0])
    want = quant.requantize(*(np.array(c, dtype=np.int64) for c in zip(*cases, strict=True)))
    assert [t for _, _, t in got] == list(range(len(cases)))
    assert [c - s for (c, _, _), s in zip(got, sent, strict=True)] == [RequantLane.latency] * len(cases)
    assert [y for _, y, _ in got] == list(want)


def test_dsp_count_and_bad_parameters():
    assert RequantLane(18).dsps == 1 and RequantLane(19).dsps == 2
    for bad in (1, 33, 8.0):
        with pytest.raises(ValueError, match="acc_bits"):
            RequantLane(bad)
    with pytest.raises(ValueError, match="tag_bits"):
        RequantLane(20, tag_bits=-1)
    for bad in (7, 50, 24.0):
        with pytest.raises(ValueError, match="out_bits"):
            RequantLane(32, out_bits=bad)


# ---------------------------------------------------------------- the requantiser's shifter

def _lut4(init, a, b, c, d):
    """Yosys's ECP5 LUT4 model: bit ``8 D + 4 C + 2 B + A`` of ``INIT``."""
    return (init >> (8 * d + 4 * c + 2 * b + a)) & 1


def test_mux2_lut_init_is_a_multiplexer():
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                assert _lut4(MUX2_INIT, a, b, c, 0) == (b if c else a), (a, b, c)


def _eval_primitive_shifter(m, x, sh, xv, shv):
    """Evaluate the LUT4 / PFUMX instances of ``shift_right(..., primitive=True)`` bit by bit."""
    drivers = {}
    for inst, _ in m._named_submodules.values():
        drivers[id(inst.ports["Z"][0])] = inst

    def bit(v):
        if isinstance(v, Const):
            return v.value & 1
        if id(v) in drivers:
            inst = drivers[id(v)]
            p = {k: bit(val) for k, (val, d) in inst.ports.items() if d == "i"}
            if inst.type == "LUT4":
                return _lut4(inst.parameters["INIT"].value, p["A"], p["B"], p["C"], p["D"])
            assert inst.type == "PFUMX"
            return p["ALUT"] if p["C0"] else p["BLUT"]
        # A slice (possibly nested) of x or sh.
        start = 0
        while not isinstance(v, Signal):
            start += v.start
            v = v.value
        assert v is x or v is sh, v
        return ((xv if v is x else shv) >> start) & 1

    levels = -(-len(sh) // 2)
    out = 0
    for i in range(len(x)):
        z = m._named_submodules[f"shr_l{levels - 1}_{i}_mux"][0].ports["Z"][0]
        out |= bit(z) << i
    return out - (1 << len(x)) if out >> (len(x) - 1) else out


@pytest.mark.parametrize("width, sh_bits", [(51, 6), (42, 6), (20, 4)])
def test_shifter_instances_shift_right(width, sh_bits):
    from amaranth import Module, signed

    m = Module()
    x, sh = Signal(signed(width), name="x"), Signal(sh_bits, name="sh")
    shift_right(m, x, sh, primitive=True)
    rng = np.random.default_rng(width)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    for xv in [lo, hi, -1, 0, 1, *rng.integers(lo, hi + 1, 6)]:
        for shv in range(1 << sh_bits):
            got = _eval_primitive_shifter(m, x, sh, int(xv) & ((1 << width) - 1), shv)
            assert got == int(xv) >> shv, f"{int(xv)} >> {shv}: {got}"
