"""The exponential draw's logarithm, one per cycle: :func:`sw.spec.quant.noise_int` of a 32-bit word."""

from amaranth import *
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from sw.spec import quant

__all__ = ["NoiseLane", "noise_in_layout", "noise_out_layout", "NOISE_BITS"]

#: Signed width of a noise value: from about ``-2.7 * 2**16`` (the largest draw) to
#: ``33 * 2**16`` (the smallest), so 23 bits.
NOISE_BITS = 23


def noise_in_layout(tag_bits):
    return data.StructLayout({"r": unsigned(quant.RNG_BITS), "tag": max(1, tag_bits)})


def noise_out_layout(tag_bits):
    return data.StructLayout({"noise": signed(NOISE_BITS), "tag": max(1, tag_bits)})


class NoiseLane(wiring.Component):
    """``-log2(e) * 2**16`` of the exponential draw of each word, exactly
    :func:`sw.spec.quant.noise_int`, one word in and one value out per cycle, fixed latency.

    Stages (like :class:`hw.lib.requant_lane.RequantLane`, no backpressure, every output taken):

    1. ``w = 2 r + 1`` (33 bits) and its leading one ``b``, a priority encoder; ``j``, the word's
       top 8 bits, addresses the ``G`` table.
    2. ``i``, the 8 bits of ``w`` below its leading one, by a left shift of ``32 - b``, addresses
       the ``LOG2`` table; the ``G`` entry is registered.
    3. The ``LOG2`` entry is registered (a table read is a block RAM's slow output).
    4. ``(33 - b) * 2**16 - LOG2[i] - G[j]``, registered.

    The two tables are :func:`sw.spec.quant.noise_tables`, 256 words of 17 bits each, read-only
    memories initialised from the spec (distributed RAM or a block RAM, as synthesis chooses).

    Parameters
    ----------
    tag_bits : int
        Width of the tag that travels with each word.

    Members
    -------
    i : In(stream.Signature(noise_in_layout(tag_bits), always_ready=True))
    o : Out(stream.Signature(noise_out_layout(tag_bits), always_ready=True))
    """

    latency = 4

    def __init__(self, tag_bits=1):
        if not isinstance(tag_bits, int) or tag_bits < 0:
            raise ValueError(f"NoiseLane tag_bits must be an integer >= 0, not {tag_bits!r}")
        self._tag_bits = tag_bits
        super().__init__({
            "i": In(stream.Signature(noise_in_layout(tag_bits), always_ready=True)),
            "o": Out(stream.Signature(noise_out_layout(tag_bits), always_ready=True)),
        })

    def elaborate(self, platform):
        m = Module()
        K, F, R = quant.NOISE_TABLE_BITS, quant.LOGIT_FRAC_BITS, quant.RNG_BITS
        log2_t, g_t = quant.noise_tables()
        width = max(int(log2_t.max()), int(g_t.max())).bit_length()
        m.submodules.log2_table = log2_mem = memory.Memory(shape=unsigned(width), depth=1 << K,
                                                           init=[int(v) for v in log2_t])
        m.submodules.g_table = g_mem = memory.Memory(shape=unsigned(width), depth=1 << K,
                                                     init=[int(v) for v in g_t])
        log2_rd, g_rd = log2_mem.read_port(), g_mem.read_port()

        L = self.latency
        valid = Signal(L)
        tag = [Signal.like(self.i.p.tag, name=f"tag_{s}", reset_less=True) for s in range(L)]
        m.d.sync += [valid.eq(Cat(self.i.valid, valid[:-1])), tag[0].eq(self.i.p.tag)]
        for s in range(1, L):
            m.d.sync += tag[s].eq(tag[s - 1])

        # Stage 1: w and its leading one.
        w = Signal(R + 1)
        m.d.comb += w.eq(Cat(Const(1, 1), self.i.p.r))
        lead = Signal(range(R + 1))
        for k in range(R + 1):              # the last match is the highest set bit
            with m.If(w[k]):
                m.d.comb += lead.eq(k)
        w1 = Signal(R + 1, reset_less=True)
        b1 = Signal(range(R + 1), reset_less=True)
        sh1 = Signal(range(R + 1), reset_less=True)          # R - b, for the normalising shift
        m.d.sync += [w1.eq(w), b1.eq(lead), sh1.eq(R - lead)]
        m.d.comb += g_rd.addr.eq(self.i.p.r[R - K:])          # j = w >> (R + 1 - K) = r >> (R - K)

        # Stage 2: the mantissa's 8 bits below the leading one: (w << (R - b)) >> (R - K).
        norm = Signal(2 * R + 1)
        m.d.comb += norm.eq(w1 << sh1)
        m.d.comb += log2_rd.addr.eq(norm[R - K:R])
        b2 = Signal.like(b1, reset_less=True)
        g2 = Signal(width, reset_less=True)
        m.d.sync += [b2.eq(b1), g2.eq(g_rd.data)]

        # Stage 3: LOG2[i] from the read port into a register; stage 4: the sum.
        b3 = Signal.like(b1, reset_less=True)
        g3 = Signal(width, reset_less=True)
        l3 = Signal(width, reset_less=True)
        m.d.sync += [b3.eq(b2), g3.eq(g2), l3.eq(log2_rd.data)]
        out = Signal(signed(NOISE_BITS), reset_less=True)
        m.d.sync += out.eq(((R + 1 - b3) << F) - l3 - g3)
        m.d.comb += [self.o.valid.eq(valid[-1]), self.o.p.noise.eq(out), self.o.p.tag.eq(tag[-1])]
        return m
