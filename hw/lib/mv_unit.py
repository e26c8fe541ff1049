"""Weight-resident matrix-vector unit of the MLP datapath: ``n_in x n_out`` int8 MACs per cycle
into ``n_out`` block accumulators."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import ceil_log2

from hw.lib.mult18 import Mult18

__all__ = ["MvUnit", "mv_latency", "tree_levels", "tree_width"]

#: Operand width of the activations and weights (int8).
OPERAND_BITS = 8
#: Fabric registers between each DSP output and the adder tree.
PRODUCT_REGISTERS = 1


def tree_levels(n_in: int) -> int:
    """Registered levels of the binary adder tree that sums ``n_in`` products."""
    return ceil_log2(n_in)


def mv_latency(n_in: int) -> int:
    """:attr:`MvUnit.latency` of a unit of ``n_in`` activations: the DSP's two registers, the
    product register, the tree's levels and the accumulator."""
    return Mult18.latency + PRODUCT_REGISTERS + tree_levels(n_in) + 1


def tree_width(n_in: int) -> int:
    """Width of the adder tree's output: the product's 16 bits plus one bit per level."""
    return 2 * OPERAND_BITS + tree_levels(n_in)


class MvUnit(wiring.Component):
    """``n_out`` dot products of ``n_in`` int8 pairs per cycle, accumulated over a run of beats.

    Every beat on ``i`` carries ``n_in`` activations ``x[k]`` and a block of ``n_in * n_out``
    weights ``w[n * n_in + k]``; the unit adds ``sum_k x[k] * w[n * n_in + k]`` into accumulator
    ``n``. A run of beats, marked ``first`` on its first beat and ``last`` on its last (both on a
    run of one beat), accumulates one output block: ``latency`` cycles after the ``last`` beat,
    ``o.valid`` is high for one cycle with the ``n_out`` exact sums, and the next ``first`` beat
    starts again from zero. Runs may follow each other with no bubble, and ``i.valid`` may be low
    inside or between runs (such cycles change nothing). There is no backpressure: ``i`` is always
    ready and the consumer must take ``o`` in the cycle it is valid. ``o.payload`` is the
    accumulator register itself, so it is only meaningful while ``o.valid`` is high.

    The pipeline, one register after each step (so ``latency = 2 + 1 + tree_levels(n_in) + 1``):

    * one :class:`hw.lib.mult18.Mult18` per product (``n_in * n_out`` ``MULT18X18D`` on an ECP5,
      with its input and output registers inside the block, latency 2). Activation ``x[k]``
      drives the ``n_out`` multipliers of row ``k``; the operands are not widened beyond the
      sign extension of the DSP pins;
    * a fabric register for each product. The DSP blocks sit in a few rows across the die and a
      column's adder tree gathers eight of them: without this register, the route from a DSP
      output to the first adder (4.2 ns of a 5.6 ns path in the 180 MHz harness) limited the unit to
      156 MHz;
    * per output ``n``, a binary adder tree over its ``n_in`` products with a register after every
      level (``ceil(log2(n_in))`` levels, one bit wider per level; an odd operand out is carried
      through the level's register);
    * the accumulator: ``acc = tree`` on a ``first`` beat, ``acc + tree`` otherwise, loaded only
      for valid beats. The ``valid``/``first``/``last`` marks travel along a reset register chain
      beside the sums; the datapath registers have no reset. The last stage's ``valid`` and
      ``first`` drive all ``n_out * acc_bits`` accumulator bits (per-output copies would be merged
      back into one by Yosys); in the 180 MHz harness this is the critical path, with 3 % slack.

    The sums are exact as long as every accumulated block fits in ``acc_bits`` signed bits (at
    most ``(2 ** (acc_bits - 1) - 1) // (n_in * 16384)`` beats of ``(-128) * (-128)``); beyond
    that they wrap modulo ``2 ** acc_bits``.

    Parameters
    ----------
    n_in : int
        Activations per beat (``AccelConfig.mv_in``).
    n_out : int
        Outputs (accumulators) per beat (``AccelConfig.mv_out``).
    acc_bits : int
        Signed width of the accumulators and of ``o``; at least :func:`tree_width` ``(n_in)``.
        The caller sizes it for its longest run, e.g.
        ``max(cfg.gu_sum_bits, sw.spec.quant.sum_bits(cfg.chunk_width))``.

    Members
    -------
    i : In(stream.Signature(StructLayout({"x": ArrayLayout(signed(8), n_in), "w": ArrayLayout(signed(8), n_in * n_out), "first": 1, "last": 1}), always_ready=True))
        One beat of activations and weights.
    o : Out(stream.Signature(ArrayLayout(signed(acc_bits), n_out), always_ready=True))
        The ``n_out`` sums of a run, valid for one cycle ``latency`` cycles after its ``last`` beat.

    Attributes
    ----------
    latency : int
        Cycles from a ``last`` beat on ``i`` to its sums on ``o``.
    """  # noqa: E501

    def __init__(self, n_in: int, n_out: int, acc_bits: int):
        for name, v in (("n_in", n_in), ("n_out", n_out)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"MvUnit {name} must be a positive integer, not {v!r}")
        if not isinstance(acc_bits, int) or isinstance(acc_bits, bool) or acc_bits < tree_width(n_in):
            raise ValueError(f"MvUnit acc_bits must be an integer of at least {tree_width(n_in)} (the adder "
                             f"tree's output for n_in={n_in}), not {acc_bits!r}")
        self._n_in, self._n_out, self._acc_bits = n_in, n_out, acc_bits
        beat = data.StructLayout({
            "x": data.ArrayLayout(signed(OPERAND_BITS), n_in),
            "w": data.ArrayLayout(signed(OPERAND_BITS), n_in * n_out),
            "first": 1,
            "last": 1,
        })
        super().__init__({
            "i": In(stream.Signature(beat, always_ready=True)),
            "o": Out(stream.Signature(data.ArrayLayout(signed(acc_bits), n_out), always_ready=True)),
        })

    @property
    def n_in(self) -> int:
        return self._n_in

    @property
    def n_out(self) -> int:
        return self._n_out

    @property
    def acc_bits(self) -> int:
        return self._acc_bits

    @property
    def latency(self) -> int:
        return mv_latency(self._n_in)

    def elaborate(self, platform):
        m = Module()
        n_in, n_out = self._n_in, self._n_out
        levels = tree_levels(n_in)

        # Products: Mult18's own registers are the first two pipeline stages.
        products = [[None] * n_in for _ in range(n_out)]
        for n in range(n_out):
            for k in range(n_in):
                mul = Mult18(OPERAND_BITS, OPERAND_BITS)
                m.submodules[f"mul_{n}_{k}"] = mul
                m.d.comb += [mul.a.eq(self.i.payload.x[k]), mul.b.eq(self.i.payload.w[n * n_in + k])]
                p = mul.p
                for r in range(PRODUCT_REGISTERS):
                    q = Signal.like(p, name=f"prod_{n}_{k}_r{r}", reset_less=True)
                    m.d.sync += q.eq(p)
                    p = q
                products[n][k] = p

        # Marks beside the products and the tree levels (control: reset).
        marks = Signal(3)    # valid, first, last
        m.d.comb += marks.eq(Cat(self.i.valid, self.i.payload.first, self.i.payload.last))
        for stage in range(Mult18.latency + PRODUCT_REGISTERS + levels):
            nxt = Signal(3, name=f"marks_{stage}")
            m.d.sync += nxt.eq(marks)
            marks = nxt
        valid, first, last = marks[0], marks[1], marks[2]
        m.d.sync += self.o.valid.eq(valid & last)

        for n in range(n_out):
            # Adder tree, a register after each level, one bit wider per level.
            row = products[n]
            for level in range(levels):
                width = 2 * OPERAND_BITS + level + 1
                nxt = []
                for j in range(0, len(row), 2):
                    s = Signal(signed(width), name=f"sum_{n}_l{level}_{j // 2}", reset_less=True)
                    m.d.sync += s.eq(row[j] + row[j + 1] if j + 1 < len(row) else row[j])
                    nxt.append(s)
                row = nxt
            tree = row[0]

            acc = self.o.payload[n]
            acc_reg = Signal(signed(self._acc_bits), name=f"acc_{n}", reset_less=True)
            with m.If(valid):
                m.d.sync += acc_reg.eq(Mux(first, 0, acc_reg) + tree)
            m.d.comb += acc.eq(acc_reg)
        return m
