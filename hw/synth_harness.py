"""Generic synthesis harness: LFSR stimulus in, XOR-folded observation out."""
from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal, Value
from amaranth.lib import stream
from amaranth.lib.wiring import In

__all__ = ["SynthHarness"]

_LFSR_WIDTH = 32
_LFSR_TAPS = (31, 21, 1, 0)   # x^32 + x^22 + x^2 + x + 1, maximal length
_ACC_WIDTH = 32


def _fold(value, width):
    """XOR-fold ``value`` down to ``width`` bits (zero-extending the last chunk)."""
    value = Value.cast(value)
    chunks = [value[i:i + width] for i in range(0, len(value), width)]
    result = Const(0, width)
    for chunk in chunks:
        result = result ^ chunk
    return result


def _resolve(obj, path):
    for item in path:
        obj = obj[item] if isinstance(item, int) else getattr(obj, item)
    return obj


class SynthHarness(Elaboratable):
    """Wrap a stream component so that synthesis keeps all of its logic.

    A bare accelerator has hundreds of stream payload bits but the board has a
    handful of pins. Synthesised as the top level, its ports would need I/O pins
    it cannot get; left unconnected, yosys would constant-fold the inputs and
    delete every cell whose result nobody reads, and the area/Fmax report would
    describe an empty design. This harness closes the loop on chip instead:

    * every port the DUT reads (``In`` stream ``payload``/``valid``, ``Out``
      stream ``ready``, and any other input port) is driven from a free-running
      32-bit LFSR. Wider ports take successive rotations of the LFSR register,
      so no two input bits are the same net at the same time and yosys cannot
      merge duplicate datapaths;
    * every port the DUT drives is XOR-folded into a 32-bit accumulator
      register; ``Out`` stream payloads are folded in only on a transfer
      (``valid & ready``). The accumulator is folded once more into a register
      that drives ``leds``, so every output bit is observable at a pin.

    The harness adds one LFSR, the fold trees and two small registers; it is
    generic over ``dut.signature`` (nested signatures, port arrays, and
    ``data.Layout`` payloads are handled through :func:`Value.cast`).

    Parameters
    ----------
    dut : wiring.Component
        Component under synthesis, usually with only :mod:`amaranth.lib.stream`
        members. It becomes the ``dut`` submodule.
    leds : Value-like or sequence of Value-like
        Output bits (for example LED pins) that observe the folded outputs.
    """

    def __init__(self, dut, leds):
        self.dut = dut
        self.leds = Cat(leds) if isinstance(leds, (list, tuple)) else Value.cast(leds)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut

        lfsr = Signal(_LFSR_WIDTH, init=1)
        feedback = 0
        for tap in _LFSR_TAPS:
            feedback = feedback ^ lfsr[tap]
        m.d.sync += lfsr.eq(Cat(feedback, lfsr[:-1]))

        cursor = 0   # next bit of the (rotated, repeated) LFSR bit stream

        def lfsr_bits(width):
            nonlocal cursor
            bits = []
            while len(bits) < width:
                chunk, bit = divmod(cursor, _LFSR_WIDTH)
                bits.append(lfsr.rotate_left((7 * chunk) % _LFSR_WIDTH)[bit])
                cursor += 1
            return Cat(*bits)

        acc = Signal(_ACC_WIDTH)
        acc_next = acc
        for path, member, value in dut.signature.flatten(dut):
            if isinstance(Value.cast(value), Const):
                continue   # e.g. ready of an always_ready stream: nothing to drive or observe
            if member.flow == In:
                m.d.comb += Value.cast(value).eq(lfsr_bits(len(Value.cast(value))))
                continue
            term = _fold(value, _ACC_WIDTH)
            parent = _resolve(dut, path[:-1])
            if path[-1] == "payload" and isinstance(getattr(parent, "signature", None),
                                                    stream.Signature):
                term = Mux(parent.valid & parent.ready, term, 0)
            acc_next = acc_next ^ term
        m.d.sync += acc.eq(acc_next)

        leds_q = Signal(len(self.leds))
        m.d.sync += leds_q.eq(_fold(acc, len(self.leds)))
        m.d.comb += self.leds.eq(leds_q)
        return m
