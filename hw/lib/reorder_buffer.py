"""Reorder buffer: results that finish out of order leave in sequence order."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.ff_copies import word_copies
from hw.lib.widths import index_bits

__all__ = ["ReorderBuffer"]


class ReorderBuffer(wiring.Component):
    """Holds up to ``depth`` results tagged with their sequence number modulo ``depth`` and emits
    them in sequence order, whatever order the cores finished in.

    A result is accepted when its slot is free. A free slot loads the input in every cycle and
    holds once its result is taken, so that no slot's clock enable depends on the handshake (the
    results are hundreds of bits wide). The producer must keep at most ``depth`` results in
    flight beyond ``head`` (the sequence number, modulo ``depth``, of the next result to leave), which
    the DRS dispatcher does with a credit count.

    Parameters
    ----------
    shape : shape-castable
        Payload of one result.
    depth : int
        Slots; a power of two.
    select_bits : int or None
        Bits of ``o.payload`` selected by each copy of the head register (None: one head for all).
        A wide row selected by one register is a net with a load per bit; with a copy per group of
        bits each copy can sit beside its group of slots.

    Members
    -------
    i : In(stream.Signature({tag, data}))
    o : Out(stream.Signature(shape))
    head : Out(range(depth))
    occupied : Out(depth)
        Which slots hold a result (for coverage counts; nothing else reads it).
    """

    def __init__(self, shape, depth, *, select_bits=None):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"ReorderBuffer depth must be a power of two >= 2, not {depth!r}")
        if select_bits is not None and (isinstance(select_bits, bool) or not isinstance(select_bits, int)
                                        or select_bits < 1):
            raise ValueError(f"ReorderBuffer select_bits must be a positive int or None, not {select_bits!r}")
        self._shape, self._depth, self._select_bits = shape, depth, select_bits
        tag_bits = index_bits(depth)
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({"tag": tag_bits, "data": shape}))),
            "o": Out(stream.Signature(shape)),
            "head": Out(tag_bits),
            "occupied": Out(depth),
        })

    def elaborate(self, platform):
        m = Module()
        D = self._depth
        slots = Array(Signal(self._shape, name=f"slot_{n}", reset_less=True) for n in range(D))
        full = Signal(D)
        m.d.comb += self.occupied.eq(full)
        # ``o.valid`` is a flop of its own, ``full[head]`` computed a cycle ahead, so that the
        # consumer's handshake starts at a register and not at the head's select.
        head_valid = Signal(name="head_valid")
        m.d.comb += [
            self.i.ready.eq(~full.bit_select(self.i.p.tag, 1)),
            self.o.valid.eq(head_valid),
        ]
        set_mask = Signal(D)
        clr_mask = Signal(D)
        full_n = Signal(D)
        head_n = Signal.like(self.head)
        # A free slot loads ``i.p.data`` in every cycle and holds from the cycle its result is
        # taken: its clock enable is its own ``~full`` flip-flop, not the handshake.
        for n in range(D):
            with m.If(~full[n]):
                m.d.sync += slots[n].eq(self.i.p.data)
        with m.If(self.i.valid & self.i.ready):
            m.d.comb += set_mask.eq(1 << self.i.p.tag)
        m.d.comb += head_n.eq(self.head)
        with m.If(self.o.valid & self.o.ready):
            m.d.comb += [head_n.eq(self.head + 1), clr_mask.eq(1 << self.head)]
        m.d.comb += full_n.eq((full | set_mask) & ~clr_mask)
        m.d.sync += [self.head.eq(head_n), full.eq(full_n), head_valid.eq(full_n.bit_select(head_n, 1))]
        # The output row: each group of ``select_bits`` bits is selected by a copy of the head
        # register of its own (all equal to ``head``).
        width = Value.cast(slots[0]).shape().width
        step = self._select_bits or width
        groups = -(-width // step)
        heads = word_copies(m, platform, head_n, groups, "head_sel") if groups > 1 else [self.head]
        flat = [Value.cast(s) for s in slots]
        m.d.comb += self.o.p.eq(Cat(*(Array(f[g * step:min(width, (g + 1) * step)] for f in flat)[heads[g]]
                                      for g in range(groups))))
        return m
