"""The matrix-vector unit's adder tree and accumulators never wrap for int8 operands."""

from amaranth import *
from amaranth.hdl import Assert, Assume
from amaranth.utils import ceil_log2

from hw.formal.harness import Internals, PropertyWrapper, in_ports
from hw.lib.mv_unit import MvUnit
from sw.spec import quant

#: The largest int8 product, (-128) x (-128).
PRODUCT_MAX = quant.INT8_MIN * quant.INT8_MIN          # 16384

__all__ = ["MvUnitWidth"]

#: Width of the wrapper's exact reference sums (far more than any run of the formal geometry).
REF_BITS = 40


class MvUnitWidth(PropertyWrapper):
    """Exact-arithmetic scoreboard of a :class:`hw.lib.mv_unit.MvUnit` with ``acc_bits =
    sw.spec.quant.sum_bits(n_in * beats)``: the width a caller gives it for runs of at most
    ``beats`` beats (``MvCore`` sizes it this way for its ``d_model / mv_in``-beat GU runs).

    Every input is free (any int8 activations and weights, any ``valid``, ``first`` and ``last``,
    gaps included); the one assumption is the caller's: a run has at most ``beats`` valid beats
    (the ``beats``-th beat since a ``first`` is followed by another ``first``). The wrapper keeps
    the exact sums in ``REF_BITS`` bits, delayed to the cycle in which the unit's registers hold
    them, and checks in every cycle:

    - **every adder-tree stage**: register ``sum_<n>_l<level>_<j>`` equals the exact sum of the
      products it covers (products ``j * 2**(level+1)`` up to ``(j+1) * 2**(level+1) - 1`` of
      output ``n``), of the beat ``Mult18.latency + PRODUCT_REGISTERS + level + 1`` cycles ago
      (the unit's ``latency`` minus the levels after it);
    - **the accumulator**: ``acc_<n>`` equals the exact sum of the run so far;
    - **the output**: when ``o.valid``, ``o[n]`` is the exact sum of the run.

    The depth must reach a full run of ``beats`` beats of ``(-128) * (-128)`` and its output
    (``latency + beats``); a cover shows that largest sum leaving on ``o``.

    Parameters
    ----------
    n_in, n_out : int
        Unit geometry.
    beats : int
        Longest run.
    dut_class : type
        The unit's class (a planted-bug copy in the failing twin tests).
    """

    def __init__(self, *, n_in=4, n_out=2, beats=4, dut_class=MvUnit):
        super().__init__()
        self.n_in, self.n_out, self.beats = n_in, n_out, beats
        self.dut = dut_class(n_in, n_out, quant.sum_bits(n_in * beats))
        self.free(*in_ports(self.dut))

    def elaborate(self, platform):
        m = self.module()
        dut = self.dut
        body = Internals(dut, platform)
        m.submodules.dut = body.fragment
        I, O = self.n_in, self.n_out
        levels = ceil_log2(I)
        lead = dut.latency - levels - 1           # cycles from a beat to its products' registers
        beat = dut.i.p

        # The caller's contract: at most `beats` beats per run.
        run = Signal(range(self.beats + 1))
        with m.If(dut.i.valid):
            with m.If(~beat.first):
                m.d.comb += Assume(run < self.beats, "a run has at most `beats` beats")
            m.d.sync += run.eq(Mux(beat.first, 1, run + 1))

        def delayed(value, cycles, name):
            for c in range(cycles):
                r = Signal(value.shape(), name=f"{name}_d{c}")
                m.d.sync += r.eq(value)
                value = r
            return value

        products = [[Signal(signed(REF_BITS), name=f"ref_p_{n}_{k}") for k in range(I)] for n in range(O)]
        for n in range(O):
            for k in range(I):
                m.d.comb += products[n][k].eq(beat.x[k] * beat.w[n * I + k])

        for n in range(O):
            # Every stage register against the exact sum of the products it covers.
            for level in range(levels):
                span = 1 << (level + 1)
                for j in range(-(-I // span)):
                    exact = sum(products[n][j * span:(j + 1) * span])
                    ref = delayed(exact, lead + level + 1, f"ref_{n}_l{level}_{j}")
                    stage = body[f"sum_{n}_l{level}_{j}"]
                    m.d.comb += Assert(stage.as_signed() == ref,
                                       f"adder-tree level {level} never wraps")
            # The accumulator against the exact sum of the run.
            tree = delayed(sum(products[n]), lead + levels, f"ref_tree_{n}")
            marks = delayed(Cat(dut.i.valid, beat.first), lead + levels, f"ref_marks_{n}")
            ref_acc = Signal(signed(REF_BITS), name=f"ref_acc_{n}")
            with m.If(marks[0]):
                m.d.sync += ref_acc.eq(Mux(marks[1], 0, ref_acc) + tree)
            m.d.comb += Assert(body[f"acc_{n}"] == ref_acc, "the accumulator never wraps")
            with m.If(dut.o.valid):
                m.d.comb += Assert(dut.o.p[n] == ref_acc, "o carries the exact sum of the run")
        largest = self.beats * I * PRODUCT_MAX
        self.cover(m, dut.o.valid & (dut.o.p[0] == largest), "the largest sum of a full run leaves on o")
        return m
