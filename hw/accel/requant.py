"""Requantisation stage: int32 sums -> int8, per output channel, exactly as ``sw/golden/quant.py``."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.mult18 import Mult18
from hw.lib.widths import index_bits
from sw.golden import quant

__all__ = ["Requant", "round_shift", "shift_controls", "saturate", "params_layout", "load_layout"]


def shift_controls(m, shift, width, *, domain="comb", name="shift"):
    """The shift-dependent half of :func:`round_shift` for a ``width - 1``-bit product:
    ``(sh, half, below)`` with ``sh = min(shift, width - 1)``, ``half = 2**(sh-1)`` (0 when
    ``sh == 0``) and ``below = half - 1``. With ``domain="sync"`` they are registered, which takes
    the clamp, the decoder and the subtraction off the data path when the shift is known a cycle
    ahead (a per-layer parameter, or a per-element shift that travels one stage ahead of its
    product).
    """
    sh = Signal(range(width), name=f"{name}_clamped")
    half = Signal(width, name=f"{name}_half")
    below = Signal(width, name=f"{name}_below")
    sh_c = Mux(shift > width - 1, width - 1, shift)
    half_c = ((Const(1, width + 1) << sh_c) >> 1)[:width]
    m.d[domain] += [sh.eq(sh_c), half.eq(half_c), below.eq((half_c - 1)[:width])]
    return sh, half, below


def round_shift(m, p, shift=None, *, controls=None):
    """Return ``(q, up)`` with ``q = p >> shift`` and ``up`` the round-half-to-even increment.

    This is the RTL form of :func:`sw.golden.quant.round_shift_rne`: ``round_half_even(p / 2**shift)
    = q + up``. With ``q = p >> shift`` (arithmetic), the bits of ``p`` below the shift are the
    remainder ``r`` in two's complement, so ``r > half`` is "round bit and any lower bit set" and
    ``r == half`` is "round bit and no lower bit set"; ties go to even ``q``. ``controls`` are
    :func:`shift_controls` of the shift for ``width = len(p) + 1`` (then ``shift`` is not used).
    """
    # Shifts of len(p) or more all give 0 (|p| <= 2**(len(p)-1) <= half, and an exact tie at
    # -2**(len(p)-1) rounds to the even 0), so the shift is clamped to len(p) and p gets one more
    # sign bit: then 2**(shift-1) always lies inside p and the remainder logic below holds.
    width = len(p) + 1
    pe = Signal(signed(width), name="p_ext")
    m.d.comb += pe.eq(p)
    sh, half, below = controls if controls is not None else shift_controls(m, shift, width)
    q = Signal(signed(width), name="q")
    m.d.comb += q.eq(pe >> sh)
    round_bit = (pe.as_unsigned() & half).any()
    sticky = (pe.as_unsigned() & below).any()
    up = Signal(name="up")
    m.d.comb += up.eq(round_bit & (sticky | q[0]))
    return q, up


def saturate(m, q, up):
    """Return ``saturate_int8(q + up)`` (:func:`sw.golden.quant.saturate_int8`) for ``up`` in {0, 1}.

    Decided on ``q``'s bits instead of a full-width add and compare (shorter logic): ``q + up``
    is above 127 when ``q`` is non-negative with a bit above bit 6 set, or ``q = 127`` and
    ``up``; when ``q`` is below -128 (negative with a 0 above bit 6) the result is -128 whatever
    ``up`` is. Otherwise it is ``q[:8] + up`` in 8 bits.
    """
    assert len(q) > 8, "saturate() expects a value wider than int8"
    sign = q[-1]
    upper = q[7:]
    all_zero = ~upper.any()
    all_ones = upper.all()
    low8 = q[:8]
    hi = Signal(name="sat_hi")
    lo = Signal(name="sat_lo")
    m.d.comb += [
        hi.eq((~sign & ~all_zero) | (all_zero & (low8 == 0x7F) & up)),
        lo.eq(sign & ~all_ones),
    ]
    y = Signal(signed(8), name="sat")
    with m.If(hi):
        m.d.comb += y.eq(quant.INT8_MAX)
    with m.Elif(lo):
        m.d.comb += y.eq(quant.INT8_MIN)
    with m.Else():
        m.d.comb += y.eq(low8 + up)
    return y


def params_layout(lanes):
    return data.StructLayout({
        "mult": data.ArrayLayout(unsigned(quant.MULT_BITS), lanes),
        "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), lanes),
    })


def load_layout(lanes, entries):
    """One parameter-table write: entry ``addr`` gets ``p``."""
    return data.StructLayout({"addr": index_bits(entries), "p": params_layout(lanes)})


class Requant(wiring.Component):
    """Vector requantiser with a table of per-channel ``(mult, shift)`` parameters.

    Six pipeline stages, all advancing together when the output can move
    (``~o.valid | o.ready``): parameter lookup; the looked-up parameters and the sums in the
    input registers of two DSP multipliers (:class:`hw.lib.mult18.Mult18`); the partial products
    ``acc[17:] * mult`` and ``acc[:17] * mult`` in their output registers; their sum
    ``acc * mult``; arithmetic shift with the rounding increment; then the increment added and
    the result saturated.
    ``sel`` picks the table entry (the tile's output slice) and travels with the data; with
    ``tag_bits`` its top bits are a tag that travels along but does not address the table (for
    example the lane of a requantiser shared by several cores).

    Parameters
    ----------
    lanes : int
        Channels per beat.
    entries : int
        Parameter table entries.
    tag_bits : int
        Extra high bits of ``sel`` that are carried but not looked up.

    Members
    -------
    i : In(stream.Signature({acc: ArrayLayout(signed(32), lanes), sel}))
        int32 sums.
    o : Out(stream.Signature({y: ArrayLayout(signed(8), lanes), sel}))
        int8 results.
    params : In(stream.Signature({addr, mult: ArrayLayout(unsigned(16), lanes),
                                  shift: ArrayLayout(unsigned(6), lanes)}, always_ready=True))
        Table writes.
    """

    def __init__(self, lanes, entries, tag_bits=0):
        for name, v in (("lanes", lanes), ("entries", entries)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"Requant {name} must be a positive integer, not {v!r}")
        if not isinstance(tag_bits, int) or tag_bits < 0:
            raise ValueError(f"Requant tag_bits must be an integer >= 0, not {tag_bits!r}")
        self._lanes, self._entries = lanes, entries
        sw = index_bits(entries) + tag_bits
        super().__init__({
            "i": In(stream.Signature(data.StructLayout({
                "acc": data.ArrayLayout(signed(quant.ACC_BITS), lanes), "sel": sw}))),
            "o": Out(stream.Signature(data.StructLayout({
                "y": data.ArrayLayout(signed(8), lanes), "sel": sw}))),
            "params": In(stream.Signature(load_layout(lanes, entries), always_ready=True)),
        })

    latency = 6

    def elaborate(self, platform):
        m = Module()
        L = self._lanes
        # A few hundred entries, read once per output slice: distributed RAM (LUTs) keeps the block
        # RAMs for the weights and the replay cache.
        m.submodules.table = table = memory.Memory(shape=params_layout(L), depth=self._entries, init=[],
                                                   attrs={"ram_style": "distributed"})
        wr = table.write_port()
        rd = table.read_port(domain="sync")

        en = Signal()
        m.d.comb += [
            en.eq(~self.o.valid | self.o.ready),
            self.i.ready.eq(en),
            wr.en.eq(self.params.valid), wr.addr.eq(self.params.p.addr), wr.data.eq(self.params.p.p),
            rd.addr.eq(self.i.p.sel[:index_bits(self._entries)]), rd.en.eq(en),
        ]

        # Stage 1: table lookup.
        v1, acc1, sel1 = Signal(), Signal.like(self.i.p.acc), Signal.like(self.i.p.sel)
        # Stage 1b: inputs of the multipliers registered (in the DSP blocks); stage 2: partial
        # products. acc = hi * 2**LO + lo with lo unsigned, so acc * mult = (hi * mult << LO) +
        # lo * mult, each an 18 x 18 product.
        v1b, sel1b, v2, sel2 = Signal(), Signal.like(self.i.p.sel), Signal(), Signal.like(self.i.p.sel)
        LO = 17
        mult_w = quant.MULT_BITS + 1                  # unsigned multiplier as a signed operand
        shift1b = [Signal(quant.SHIFT_BITS, name=f"shift1b_{lane}") for lane in range(L)]
        shift2 = [Signal(quant.SHIFT_BITS, name=f"shift2_{lane}") for lane in range(L)]
        parts = []
        for lane in range(L):
            lo = Mult18(LO + 1, mult_w, enable=True)
            hi = Mult18(quant.ACC_BITS - LO, mult_w, enable=True)
            m.submodules[f"mul_lo_{lane}"], m.submodules[f"mul_hi_{lane}"] = lo, hi
            m.d.comb += [
                lo.a.eq(acc1[lane][:LO]), hi.a.eq(acc1[lane][LO:].as_signed()),
                lo.b.eq(rd.data.mult[lane]), hi.b.eq(rd.data.mult[lane]),
                lo.ce.eq(en), hi.ce.eq(en),
            ]
            parts.append((hi.p, lo.p))
        # Stage 2b: the product.
        v2b, sel2b = Signal(), Signal.like(self.i.p.sel)
        prods = [Signal(signed(quant.PRODUCT_BITS), name=f"prod_{lane}") for lane in range(L)]
        # Stage 3: arithmetic shift and rounding increment.
        v3, sel3 = Signal(), Signal.like(self.i.p.sel)
        # The shift's controls are registered alongside the product (from the shift one stage
        # ahead), so stage 3 is only the shifter and the remainder tests.
        with m.If(en):
            controls = [shift_controls(m, shift2[lane], quant.PRODUCT_BITS + 1, domain="sync",
                                       name=f"shift_{lane}") for lane in range(L)]
        rounded = [round_shift(m, prods[lane], controls=controls[lane]) for lane in range(L)]
        qs = [Signal.like(q, name=f"q_{lane}") for lane, (q, _) in enumerate(rounded)]
        ups = [Signal(name=f"up_{lane}") for lane in range(L)]
        # Stage 4: add the increment and saturate.
        sats = [saturate(m, qs[lane], ups[lane]) for lane in range(L)]
        with m.If(en):
            m.d.sync += [v1.eq(self.i.valid), acc1.eq(self.i.p.acc), sel1.eq(self.i.p.sel)]
            m.d.sync += [v1b.eq(v1), sel1b.eq(sel1), v2.eq(v1b), sel2.eq(sel1b)]
            m.d.sync += [v2b.eq(v2), sel2b.eq(sel2)]
            m.d.sync += [v3.eq(v2b), sel3.eq(sel2b)]
            m.d.sync += [self.o.valid.eq(v3), self.o.p.sel.eq(sel3)]
            for lane in range(L):
                hi_p, lo_p = parts[lane]
                m.d.sync += [
                    shift1b[lane].eq(rd.data.shift[lane]),
                    shift2[lane].eq(shift1b[lane]),
                    prods[lane].eq((hi_p << LO) + lo_p),
                    qs[lane].eq(rounded[lane][0]),
                    ups[lane].eq(rounded[lane][1]),
                    self.o.p.y[lane].eq(sats[lane]),
                ]
        return m
