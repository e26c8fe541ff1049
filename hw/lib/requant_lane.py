"""One requantisation per cycle, fixed latency: ``saturate(round_half_even(acc * mult / 2**shift))``,
into int8 or a wider signed result."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.mult18 import WIDTH as DSP_WIDTH
from hw.lib.mult18 import Mult18, is_ecp5
from sw.spec import quant

__all__ = ["RequantLane", "lane_in_layout", "lane_out_layout", "registered_shift_controls", "shift_right",
           "MUX2_INIT"]

#: Low part of a split operand: 17 bits, unsigned, so that it is a non-negative 18-bit signed
#: operand of the DSP.
LO_BITS = DSP_WIDTH - 1


def lane_in_layout(acc_bits, tag_bits):
    return data.StructLayout({"acc": signed(acc_bits), "mult": unsigned(quant.MULT_BITS),
                              "shift": unsigned(quant.SHIFT_BITS), "tag": max(1, tag_bits)})


def lane_out_layout(tag_bits, out_bits=8):
    return data.StructLayout({"y": signed(out_bits), "tag": max(1, tag_bits)})


#: ``INIT`` of a LUT4 that is a 2:1 multiplexer: ``Z = C ? B : A`` (``D`` unused); bit
#: ``8 D + 4 C + 2 B + A`` of ``INIT`` is the output, as in Yosys's ECP5 ``LUT4`` model.
MUX2_INIT = sum(1 << i for i in range(16) if ((i >> 1) & 1 if (i >> 2) & 1 else i & 1))


def _mux4_primitive(m, name, d, s0, s1):
    """``d[s1 s0]`` as one ECP5 slice: two LUT4 2:1 multiplexers and the PFUMX between them
    (``Z = C0 ? ALUT : BLUT``)."""
    lo, hi, z = Signal(name=f"{name}_lo"), Signal(name=f"{name}_hi"), Signal(name=f"{name}_z")
    for out, (a, b) in ((lo, (d[0], d[1])), (hi, (d[2], d[3]))):
        m.submodules[f"{name}_{'lo' if out is lo else 'hi'}"] = Instance(
            "LUT4", p_INIT=Const(MUX2_INIT, 16), i_A=a, i_B=b, i_C=s0, i_D=Const(0), o_Z=out)
    m.submodules[f"{name}_mux"] = Instance("PFUMX", i_ALUT=hi, i_BLUT=lo, i_C0=s1, o_Z=z)
    return z


def shift_right(m, x, sh, *, primitive=False, name="shr"):
    """``x >> sh`` (arithmetic) as a logarithmic shifter of 4:1 multiplexers, two bits of ``sh``
    per level (``ceil(len(sh) / 2)`` levels). With ``primitive`` each 4:1 multiplexer is an
    explicit ECP5 slice (:func:`_mux4_primitive`), so that ABC cannot fold the levels into deeper
    LUT4 / PFUMX / L6MUX21 trees (five LUT levels for a 6-bit shift, 145 MHz); otherwise the same
    structure from :class:`Array` selections (simulation)."""
    x = Value.cast(x)
    sign = x[-1]
    cur = [x[i] for i in range(len(x))]
    for level, lo in enumerate(range(0, len(sh), 2)):
        bits = sh[lo:lo + 2]
        step = 1 << lo
        nxt = []
        for i in range(len(cur)):
            d = [cur[i + k * step] if i + k * step < len(cur) else sign for k in range(1 << len(bits))]
            if primitive and len(bits) == 2:
                nxt.append(_mux4_primitive(m, f"{name}_l{level}_{i}", d, bits[0], bits[1]))
            else:
                z = Signal(name=f"{name}_l{level}_{i}")
                m.d.comb += z.eq(Array(d)[bits])
                nxt.append(z)
        cur = nxt
    out = Signal(signed(len(x)), name=f"{name}_out")
    m.d.comb += out.eq(Cat(*cur))
    return out


def saturate(m, low8, up, sign, zero, ones):
    """Return ``saturate_int8(q + up)`` (:func:`sw.spec.quant.saturate_int8`) for ``up`` in {0, 1},
    from ``q``'s low 8 bits and flags of its upper bits that an earlier stage registered; for a
    wider result, ``low8`` is ``q``'s low ``n`` bits and the result saturates to ``n`` bits
    (:func:`sw.spec.quant.saturate`), by the same rule with 7 read as ``n - 1``.

    ``sign`` is ``q``'s sign bit; ``zero`` says that every bit of ``q`` from bit 7 up is 0
    (``0 <= q <= 127``) and ``ones`` that every one is 1 (``-128 <= q <= -1``). So no reduction
    over ``q``'s width is left for this stage: ``q + up`` is above 127 when ``q`` is non-negative and
    not ``zero``, or ``zero`` and ``low8 + up`` carries into bit 7 (``q = 127``, ``up = 1``); it is
    below -128 when ``q`` is negative and not ``ones``. Otherwise it is ``low8 + up`` in 8 bits
    (no wrap: ``-128 <= q + up <= 0`` when ``ones``).
    """
    n = len(low8)
    assert n >= 2, "saturate() takes q's low bits, the width of the result"
    # low8 + 1 from the register alone, so the increment's carry chain does not wait for up.
    inc = Signal(n, name="sat_inc")
    m.d.comb += inc.eq(low8 + 1)
    s = Signal(n, name="sat_sum")
    m.d.comb += s.eq(Mux(up, inc, low8))
    hi = Signal(name="sat_hi")
    lo = Signal(name="sat_lo")
    m.d.comb += [
        hi.eq(~sign & (~zero | (up & inc[-1]))),
        lo.eq(sign & ~ones),
    ]
    y = Signal(signed(n), name="sat")
    with m.If(hi):
        m.d.comb += y.eq((1 << (n - 1)) - 1)
    with m.Elif(lo):
        m.d.comb += y.eq(-(1 << (n - 1)))
    with m.Else():
        m.d.comb += y.eq(s)
    return y


def registered_upper_mask(m, shift, width, out_bits=8):
    """The bits of a ``width``-bit value ``p`` that land at bit 7 or above of ``p >> shift``
    (arithmetic), registered: bit ``i`` is set when ``i >= shift + 7`` (for an ``out_bits``-wide
    result, 7 is ``out_bits - 1`` throughout). So ``(p & mask) == 0`` says
    that bits 7 up of the shifted value are all 0, and ``(~p & mask) == 0`` that they are all 1: a
    reduction beside the shifter, as for the round and sticky bits, instead of one after it.
    Decoded bit by bit from ``shift`` against constants (``shift <= i - 7``, no adder before the
    compare). Where the mask is empty (``shift > width - 8``) the
    shifted value is 0 or -1, inside int8 whatever the flags say, so it needs neither the sign
    bit nor the clamp of :func:`registered_shift_controls`."""
    mask = Signal(width, name="shift_upper")
    k = out_bits - 1
    for i in range(width):
        m.d.sync += mask[i].eq(shift <= i - k if i >= k else 0)
    return mask


def registered_shift_controls(m, shift, width):
    """The shift-dependent half of the rounding for a ``width - 1``-bit product, registered:
    ``(sh, half, below)``, with ``half`` and
    ``below`` decoded bit by bit from ``shift`` (a few LUTs per bit) instead of a decoder and a
    ``width``-bit subtraction (a carry chain after the clamp, which limited the lane to 125 MHz).
    The same values: ``sh = min(shift, width - 1)``, ``half = 2**(sh-1)`` (0 when ``sh == 0``),
    ``below = (half - 1) mod 2**width`` (all ones when ``sh == 0``)."""
    top = width - 1
    sh = Signal(range(width), name="shift_clamped")
    half = Signal(width, name="shift_half")
    below = Signal(width, name="shift_below")
    over = shift > top
    m.d.sync += sh.eq(Mux(over, top, shift))
    for i in range(width):
        m.d.sync += [half[i].eq(Mux(over, i + 1 == top, shift == i + 1)),
                     below[i].eq(((shift > i + 1) & (i + 1 < top)) | (shift == 0))]
    return sh, half, below


class RequantLane(wiring.Component):
    """A requantiser lane for pipelines that never stall: one value in and one out per cycle,
    exactly :func:`sw.spec.quant.requantize` (round half to even, saturate to int8), or with
    ``out_bits`` wider :func:`sw.spec.quant.requant_wide` (saturate to ``out_bits``).

    The value, its ``(mult, shift)`` and a tag enter together and leave :attr:`latency` cycles
    later. There is no backpressure and no clock enable, so no handshake fans out into the
    registers (``docs/timing.md``): the consumer takes every output.

    Stages: the operands in the DSP input registers (:class:`hw.lib.mult18.Mult18`); the product(s)
    in the DSP output registers; for an ``acc`` wider than 18 bits, ``acc = hi * 2**17 + lo`` with
    ``lo`` unsigned, so ``acc * mult = (hi * mult << 17) + lo * mult`` from two DSPs, added in
    the third stage; the arithmetic shift, with the round and sticky bits of what it shifts out
    and whether the bits it leaves from bit 7 up are all 0 or all 1 (:func:`registered_upper_mask`);
    the rounding increment added and the result saturated, from those flags (:func:`saturate`).
    ``mult`` is unsigned 16-bit, a 17-bit signed operand.

    Parameters
    ----------
    acc_bits : int
        Signed width of the values (for example :func:`sw.spec.quant.sum_bits` of the sum's length);
        at most :data:`sw.spec.quant.ACC_BITS`.
    tag_bits : int
        Width of the tag that travels with each value (at least 1 bit is kept).
    out_bits : int
        Signed width of the result: 8 (default) or wider, at most the product's
        ``acc_bits + MULT_BITS + 1``.

    Members
    -------
    i : In(stream.Signature(lane_in_layout(acc_bits, tag_bits), always_ready=True))
    o : Out(stream.Signature(lane_out_layout(tag_bits, out_bits), always_ready=True))
    """

    latency = 5

    def __init__(self, acc_bits, tag_bits=1, out_bits=8):
        if not isinstance(acc_bits, int) or not 2 <= acc_bits <= quant.ACC_BITS:
            raise ValueError(f"RequantLane acc_bits must be an integer in 2..{quant.ACC_BITS}, "
                             f"not {acc_bits!r}")
        if not isinstance(tag_bits, int) or tag_bits < 0:
            raise ValueError(f"RequantLane tag_bits must be an integer >= 0, not {tag_bits!r}")
        widest = acc_bits + quant.MULT_BITS + 1
        if not isinstance(out_bits, int) or not 8 <= out_bits <= widest:
            raise ValueError(f"RequantLane out_bits must be an integer in 8..{widest}, not {out_bits!r}")
        self._acc_bits, self._tag_bits, self._out_bits = acc_bits, tag_bits, out_bits
        super().__init__({
            "i": In(stream.Signature(lane_in_layout(acc_bits, tag_bits), always_ready=True)),
            "o": Out(stream.Signature(lane_out_layout(tag_bits, out_bits), always_ready=True)),
        })

    @property
    def dsps(self) -> int:
        """MULT18X18D blocks of this lane: one when ``acc`` fits an 18-bit operand, else two."""
        return 1 if self._acc_bits <= DSP_WIDTH else 2

    def elaborate(self, platform):
        m = Module()
        A = self._acc_bits
        mult_w = quant.MULT_BITS + 1
        width = A + mult_w                   # the signed product
        acc, mult = self.i.p.acc, self.i.p.mult

        # Stages 1-2: the DSPs (input and output registers inside the block).
        if self.dsps == 1:
            mul = Mult18(A, mult_w)
            m.submodules.mul = mul
            m.d.comb += [mul.a.eq(acc), mul.b.eq(mult)]
            full = mul.p
        else:
            lo = Mult18(LO_BITS + 1, mult_w)
            hi = Mult18(A - LO_BITS, mult_w)
            m.submodules.mul_lo, m.submodules.mul_hi = lo, hi
            m.d.comb += [lo.a.eq(acc[:LO_BITS]), hi.a.eq(acc[LO_BITS:].as_signed()),
                         lo.b.eq(mult), hi.b.eq(mult)]
            full = (hi.p << LO_BITS) + lo.p

        valid = Signal(self.latency, reset_less=False)
        tag = [Signal.like(self.i.p.tag, name=f"tag_{s}", reset_less=True) for s in range(self.latency)]
        shift = [Signal(quant.SHIFT_BITS, name=f"shift_{s}", reset_less=True) for s in range(2)]
        m.d.sync += [valid.eq(Cat(self.i.valid, valid[:-1])), tag[0].eq(self.i.p.tag),
                     shift[0].eq(self.i.p.shift), shift[1].eq(shift[0])]
        for s in range(1, self.latency):
            m.d.sync += tag[s].eq(tag[s - 1])

        # Stage 3: the product; the shift's controls registered beside it.
        prod = Signal(signed(width), reset_less=True)
        m.d.sync += prod.eq(full)
        controls = registered_shift_controls(m, shift[1], width + 1)
        upper = registered_upper_mask(m, shift[1], width + 1, self._out_bits)
        # Stage 4: arithmetic shift, and beside it the round bit and the sticky bit of the bits
        # shifted out (round_shift's increment is ``round & (sticky | q[0])``; q[0] is the last
        # bit out of the shifter, so the increment is formed in stage 5, not after the shifter).
        pe = Signal(signed(width + 1))
        m.d.comb += pe.eq(prod)
        sh, half, below = controls
        q4 = Signal(signed(width + 1), reset_less=True)
        round4 = Signal(reset_less=True)
        sticky4 = Signal(reset_less=True)
        # Beside them, whether the shifted value's bits 7 up are all 0 or all 1 (saturate()).
        zero4 = Signal(reset_less=True)
        ones4 = Signal(reset_less=True)
        m.d.sync += [q4.eq(shift_right(m, pe, sh, primitive=is_ecp5(platform))),
                     round4.eq((pe.as_unsigned() & half).any()),
                     sticky4.eq((pe.as_unsigned() & below).any()),
                     zero4.eq(~(pe.as_unsigned() & upper).any()),
                     ones4.eq(~(~pe.as_unsigned() & upper).any())]
        # Stage 5: the increment and saturation.
        up = Signal()
        m.d.comb += up.eq(round4 & (sticky4 | q4[0]))
        y = Signal(signed(self._out_bits), reset_less=True)
        m.d.sync += y.eq(saturate(m, q4[:self._out_bits], up, q4[-1], zero4, ones4))
        m.d.comb += [self.o.valid.eq(valid[-1]), self.o.p.y.eq(y), self.o.p.tag.eq(tag[-1])]
        return m
