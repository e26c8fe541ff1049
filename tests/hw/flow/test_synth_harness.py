# amaranth: UnusedElaboratable=no
"""SynthHarness with ``register_outputs``: the registered fold tree of wide outputs against a model of
its own, every bit of a wide port observed at the LEDs, and a stream payload folded only on a
transfer after the tree's delay."""
import random

import pytest
from amaranth import Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hw.flow.synth_harness import _ACC_WIDTH, _TREE_ARITY, SynthHarness, _fold_tree


def _tree_model(value, width):
    """The fold tree in Python: each level's bit i is the parity of bits 4i..4i+3 of the level before."""
    levels = 0
    while len(value) > width:
        value = [sum(value[i:i + _TREE_ARITY]) % 2 for i in range(0, len(value), _TREE_ARITY)]
        levels += 1
    return value, levels


@pytest.mark.parametrize("bits, want_levels", [(32, 0), (33, 1), (100, 1), (129, 2), (512, 2), (769, 3)])
def test_fold_tree_matches_model(bits, want_levels):
    m = Module()
    value = Signal(bits)
    out, levels = _fold_tree(m, value, _ACC_WIDTH, "x")
    assert levels == want_levels and len(out) <= _ACC_WIDTH
    if not levels:
        assert out is value            # narrow ports go straight into the accumulator, as before
        return
    rng = random.Random(bits)
    vectors = [rng.getrandbits(bits) for _ in range(12)] + [1 << (bits - 1), 1]
    seen = []

    async def bench(ctx):
        for v in vectors + [0] * levels:
            ctx.set(value, v)
            await ctx.tick()
            seen.append(ctx.get(out))

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    for i, v in enumerate(vectors):
        want, _ = _tree_model([(v >> b) & 1 for b in range(bits)], _ACC_WIDTH)
        got = seen[i + levels - 1]
        assert got == sum(b << j for j, b in enumerate(want)), f"vector {i}: {got:#x}"


class _OneBit(wiring.Component):
    """A wide output with a single live bit ``j``, following an input bit."""

    def __init__(self, width, j):
        self._j = j
        super().__init__({"a": In(1), "b": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.b.eq(self.a << self._j)
        return m


def _leds(dut, cycles=48, *, register_outputs=True):
    """The harness's LED values over ``cycles`` clock cycles around ``dut``."""
    leds = Signal(8)
    harness = SynthHarness(dut, leds, register_outputs=register_outputs)
    seen = []

    async def bench(ctx):
        for _ in range(cycles):
            await ctx.tick()
            seen.append(ctx.get(leds))

    sim = Simulator(harness)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen


@pytest.mark.parametrize("j", [0, 1, 3, 4, 31, 32, 63, 64, 127, 128, 300, 511, 512, 768])
def test_every_bit_of_a_wide_output_reaches_the_leds(j):
    assert len(set(_leds(_OneBit(769, j)))) == 2     # one LED bit toggles


class _Gated(wiring.Component):
    """A stream whose wide payload has one live bit: ``"always"`` live, ``"gated"`` zero in the
    cycles where ``valid`` is high, ``"never"`` zero."""

    def __init__(self, width, mode):
        self._mode = mode
        super().__init__({"a": In(2), "o": Out(stream.Signature(width))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.o.valid.eq(self.a[0])
        hot = {"always": self.a[1], "gated": Mux(self.a[0], 0, self.a[1]), "never": 0}[self._mode]
        m.d.comb += self.o.payload.eq(hot << (len(self.o.payload) - 211))
        return m


def test_wide_payload_is_folded_only_on_a_transfer():
    # valid is folded in too, and ready comes from the stimulus chain: every run sees the same
    # valid/ready sequence, and only payloads of transfers may change the LEDs.
    never = _leds(_Gated(512, "never"), cycles=64)
    assert len(set(never)) == 2
    assert _leds(_Gated(512, "always"), cycles=64) != never
    assert _leds(_Gated(512, "gated"), cycles=64) == never


def test_register_bits_counts_the_tree():
    h = SynthHarness(_OneBit(769, 0), Signal(8), register_outputs=True)
    # stimulus chain 32, accumulator 32, LEDs 8; the output 769 + 1, then 193 + 1, 49 + 1, 13 + 1.
    assert h.register_bits == 32 + 32 + 8 + 770 + 194 + 50 + 14
