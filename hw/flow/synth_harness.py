"""Generic synthesis harness: LFSR-chain stimulus in, XOR-folded observation out."""
from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal, Value
from amaranth.lib import stream
from amaranth.lib.wiring import In

__all__ = ["SynthHarness"]

_LFSR_WIDTH = 32
_LFSR_TAPS = (31, 21, 1, 0)   # x^32 + x^22 + x^2 + x + 1, maximal length
_ACC_WIDTH = 32
#: Bits XOR-ed into one flop per level of the registered fold of a wide output (one LUT4 each).
_TREE_ARITY = 4


def _fold(value, width):
    """XOR-fold ``value`` down to ``width`` bits (zero-extending the last chunk)."""
    value = Value.cast(value)
    chunks = [value[i:i + width] for i in range(0, len(value), width)]
    result = Const(0, width)
    for chunk in chunks:
        result = result ^ chunk
    return result


def _fold_tree(m, value, width, name):
    """``value`` (already a register) reduced to at most ``width`` bits by levels of registers, each
    bit the XOR of ``_TREE_ARITY`` *adjacent* bits of the level before; returns ``(bits, levels)``.

    Every input bit still reaches the result (XOR keeps each one observable), through one LUT4 and
    one flop per level; adjacent bits of a port usually come from neighbouring cells, so each level
    is short, where one flat fold of a wide port gathers bits from all over the die into each
    accumulator bit."""
    levels = 0
    while len(value) > width:
        groups = [value[i:i + _TREE_ARITY] for i in range(0, len(value), _TREE_ARITY)]
        nxt = Signal(len(groups), name=f"{name}_fold{levels}", reset_less=True)
        m.d.sync += nxt.eq(Cat(g.xor() for g in groups))
        value, levels = nxt, levels + 1
    return value, levels


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
      stream ``ready``, and any other input port) is driven from one register
      chain: a free-running 32-bit LFSR whose output is shifted on through as
      many further flops as the DUT has input bits. Each input bit gets its own
      flop. (Reusing the 32 LFSR bits for every lane would be cheaper, but then
      DUT registers that capture equal bits under the same enable have equal
      inputs and yosys merges them, so the report would undercount the DUT.)
      Inputs thus arrive straight from flops, like registered ports;
    * every port the DUT drives is XOR-folded into a 32-bit accumulator
      register; ``Out`` stream payloads are folded in only on a transfer
      (``valid & ready``). The accumulator is folded once more into a register
      that drives ``leds``, so every output bit is observable at a pin. With
      ``register_outputs``, a port wider than the accumulator is first reduced
      by a registered tree (each flop the XOR of 4 adjacent bits of the level
      before, the transfer condition delayed alongside), so that no fold path
      gathers bits from across the die in one cycle.

    The harness itself costs at most :attr:`register_bits` flops and the fold
    trees. It is generic over ``dut.signature`` (nested signatures, port arrays,
    ``data.Layout`` payloads through :func:`Value.cast`; the constant ``ready``
    of an ``always_ready`` stream is skipped).

    Parameters
    ----------
    dut : wiring.Component
        Component under synthesis, usually with only :mod:`amaranth.lib.stream`
        members. It becomes the ``dut`` submodule.
    leds : Value-like or sequence of Value-like
        Output bits (for example LED pins) that observe the folded outputs.
    register_outputs : bool
        Capture every DUT output bit (and each stream's transfer condition) in a flop of its
        own before the fold, so that no path ends in the harness's XOR tree: the timing flow
        (``python -m hw.flow.timing``) then measures the DUT's register-to-register paths only. Ports
        wider than 32 bits are then folded by a registered tree of 4-input XORs (one LUT level
        per register) before the accumulator; narrower ports go straight into it as before.

    Attributes
    ----------
    stimulus_width : int
        Number of DUT input bits driven by the harness.
    register_bits : int
        Upper bound on the harness's own flops (stimulus chain, accumulator, LED
        register and, with ``register_outputs``, the output registers and fold
        trees); yosys drops accumulator bits that nothing feeds.
    """

    def __init__(self, dut, leds, *, register_outputs=False):
        self.dut = dut
        self.register_outputs = register_outputs
        self.leds = Cat(leds) if isinstance(leds, (list, tuple)) else Value.cast(leds)
        self.stimulus_width = sum(len(Value.cast(value)) for _, flow, value in self._ports()
                                  if flow == In)
        self.register_bits = (max(_LFSR_WIDTH, self.stimulus_width) + _ACC_WIDTH
                              + len(self.leds))
        if register_outputs:
            for _, flow, value in self._ports():
                if flow == In:
                    continue
                bits = len(Value.cast(value))
                self.register_bits += bits + 1
                while bits > _ACC_WIDTH:            # the fold tree and the delayed transfer flag
                    bits = -(-bits // _TREE_ARITY)
                    self.register_bits += bits + 1

    def _ports(self):
        for path, member, value in self.dut.signature.flatten(self.dut):
            if not isinstance(Value.cast(value), Const):   # always_ready/valid: constants
                yield path, member.flow, value

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.dut

        chain = Signal(max(_LFSR_WIDTH, self.stimulus_width), init=1)
        feedback = 0
        for tap in _LFSR_TAPS:
            feedback = feedback ^ chain[tap]
        m.d.sync += chain.eq(Cat(feedback, chain[:-1]))

        cursor = 0
        acc = Signal(_ACC_WIDTH)
        acc_next = acc
        for path, flow, value in self._ports():
            value = Value.cast(value)
            if flow == In:
                m.d.comb += value.eq(chain[cursor:cursor + len(value)])
                cursor += len(value)
                continue
            parent = _resolve(dut, path[:-1])
            is_payload = path[-1] == "payload" and isinstance(getattr(parent, "signature", None),
                                                              stream.Signature)
            fire = parent.valid & parent.ready if is_payload else None
            if self.register_outputs:
                name = "_".join(str(item) for item in path)
                value_q = Signal(len(value), name=f"{name}_q", reset_less=True)
                m.d.sync += value_q.eq(value)
                value, levels = _fold_tree(m, value_q, _ACC_WIDTH, name)
                if is_payload:
                    for level in range(levels + 1):     # the transfer flag, delayed alongside
                        fire_q = Signal(name=f"{name}_fire{level}")
                        m.d.sync += fire_q.eq(fire)
                        fire = fire_q
            term = _fold(value, _ACC_WIDTH)
            if is_payload:
                term = Mux(fire, term, 0)
            acc_next = acc_next ^ term
        m.d.sync += acc.eq(acc_next)

        leds_q = Signal(len(self.leds))
        m.d.sync += leds_q.eq(_fold(acc, len(self.leds)))
        m.d.comb += self.leds.eq(leds_q)
        return m
