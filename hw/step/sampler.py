"""The on-chip sampler: classifier-free guidance and ``argmax(p / e)`` over the image tokens, in integers."""

from amaranth import *
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.credit_queue import CreditQueue
from hw.lib.requant_lane import RequantLane
from hw.lib.widths import index_bits
from hw.step.noise_lane import NOISE_BITS, NoiseLane
from sw.spec import quant

__all__ = ["Sampler", "sampler_in_layout", "sampler_out_layout", "sampler_z_layout", "seed_layout",
           "xorshift32"]

#: Width of the guided logits ``z`` (:func:`sw.spec.quant.cfg_logits_int`).
Z_BITS = quant.RESIDUAL_BITS


def sampler_in_layout(prompts):
    """One image token's accumulators: conditional and unconditional (read only with guidance), the
    token's logit constants, the prompt; ``last`` on a row's last token."""
    return data.StructLayout({
        "data": data.StructLayout({"acc_c": signed(quant.ACC_BITS), "acc_u": signed(quant.ACC_BITS),
                                   "mult": unsigned(quant.MULT_BITS), "shift": unsigned(quant.SHIFT_BITS),
                                   "prompt": index_bits(prompts)}),
        "last": 1})


def sampler_out_layout(prompts, codebook):
    """The token drawn for a row: its index into the image tokens."""
    return data.StructLayout({"data": data.StructLayout({"prompt": index_bits(prompts),
                                                         "token": index_bits(codebook)})})


def sampler_z_layout(prompts, codebook):
    """Each token's guided logit ``z``, as it enters the race (for block-level checks)."""
    return data.StructLayout({"data": data.StructLayout({"z": signed(Z_BITS), "index": index_bits(codebook),
                                                         "prompt": index_bits(prompts)})})


def seed_layout(prompts):
    """A generator state for a prompt (:func:`sw.spec.quant.sampler_state`)."""
    return data.StructLayout({"prompt": index_bits(prompts), "state": unsigned(quant.RNG_BITS)})


def xorshift32(x):
    """:func:`sw.spec.quant.xorshift32` as a 32-bit expression (three shift-xor levels)."""
    x = Value.cast(x)
    x = x ^ (x << 13)[:32]
    x = x ^ (x >> 17)
    return x ^ (x << 5)[:32]


class Sampler(wiring.Component):
    """Draws one token per row of image-token accumulators, exactly
    :class:`sw.golden.sampling.IntegerSampler` ("Sampling" in ``docs/quantization.md``).

    A row is one prompt's ``codebook`` image tokens in order, one per beat of ``i``, ``last`` on
    its last. Each token's accumulators become base-2 Q16 logits on two requantiser lanes
    (:class:`hw.lib.requant_lane.RequantLane` into 24 bits, the same lane as the MLP's), the
    guidance is a third lane (``l_c - l_u`` by the Q8 ``gain``, into 32 bits) and an add, the
    prompt's xorshift32 generator steps once, :class:`hw.step.noise_lane.NoiseLane` turns its word into
    the draw's logarithm, and a running ``argmax`` over ``z + noise`` keeps the lowest index on
    ties. The row's token leaves on ``o``, :attr:`latency` cycles after its last beat.

    ``i`` is taken every cycle while fewer than ``queue_depth`` rows are in flight or waiting on
    ``o``; inside, nothing stalls (the lanes have no backpressure).

    Parameters
    ----------
    prompts : int
        Prompts of a batch: one generator state each.
    codebook : int
        Image tokens of a row (the width of the token index).
    queue_depth : int
        Tokens that may wait on ``o``.

    Members
    -------
    i : In(stream.Signature(sampler_in_layout(prompts)))
    o : Out(stream.Signature(sampler_out_layout(prompts, codebook)))
    z : Out(stream.Signature(sampler_z_layout(prompts, codebook), always_ready=True))
        Every token's ``z``, for the testbench (unused in a build, so synthesis removes it).
    seed : In(stream.Signature(seed_layout(prompts), always_ready=True))
        Loads a prompt's generator state (before its first row; a load wins over a step).
    gain : In(quant.MULT_BITS)
        The guidance scale in Q8 (:func:`sw.spec.quant.cfg_gain`).
    guided : In(1)
        Guidance on (the unconditional accumulators are read).
    greedy : In(1)
        Temperature 0: ``argmax(z)``, the generators do not step.
    """

    #: Cycles from a row's last beat (taken) to its token on ``o`` (with ``o.ready`` and nothing queued).
    #: The logit lanes, the difference's register, the guidance lane, ``z``, the score, and the
    #: queue's write and read (``SyncFIFOBuffered``).
    latency = RequantLane.latency + 1 + RequantLane.latency + 1 + 1 + 2

    def __init__(self, prompts=2, codebook=512, *, queue_depth=4):
        for name, v in (("prompts", prompts), ("codebook", codebook), ("queue_depth", queue_depth)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Sampler {name} must be a positive integer, not {v!r}")
        self._prompts, self._codebook, self._depth = prompts, codebook, queue_depth
        super().__init__({
            "i": In(stream.Signature(sampler_in_layout(prompts))),
            "o": Out(stream.Signature(sampler_out_layout(prompts, codebook))),
            "z": Out(stream.Signature(sampler_z_layout(prompts, codebook), always_ready=True)),
            "seed": In(stream.Signature(seed_layout(prompts), always_ready=True)),
            "gain": In(quant.MULT_BITS), "guided": In(1), "greedy": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        P, LB = self._prompts, quant.LOGIT_BITS
        ib = len(self.z.p.data.index)
        pb = len(self.i.p.data.prompt)

        # ---- input, row index, credits ---------------------------------------------------------
        out_layout = data.StructLayout({"prompt": pb, "token": ib})
        m.submodules.queue = queue = CreditQueue(out_layout, self._depth)
        take = Signal()
        m.d.comb += [self.i.ready.eq(queue.room), take.eq(self.i.valid & self.i.ready),
                     queue.take.eq(take & self.i.p.last)]
        index = Signal(ib)
        with m.If(take):
            m.d.sync += index.eq(Mux(self.i.p.last, 0, index + 1))

        # ---- the generators: one state per prompt, a step per token ----------------------------
        states = [Signal(quant.RNG_BITS, name=f"state_{p}", init=1) for p in range(P)]
        cur = Array(states)[self.i.p.data.prompt]
        nxt = Signal(quant.RNG_BITS)
        m.d.comb += nxt.eq(xorshift32(cur))
        for p in range(P):
            with m.If(self.seed.valid & (self.seed.p.prompt == p)):
                m.d.sync += states[p].eq(self.seed.p.state)
            with m.Elif(take & ~self.greedy & (self.i.p.data.prompt == p)):
                m.d.sync += states[p].eq(nxt)
        word1 = Signal(quant.RNG_BITS, reset_less=True)
        valid1 = Signal()
        m.d.sync += [word1.eq(nxt), valid1.eq(take)]

        # ---- logits: two lanes into 24 bits (stages 1-5); the noise lane (stages 2-5) ------------
        meta_layout = data.StructLayout({"prompt": pb, "index": ib, "last": 1})
        meta = Signal(meta_layout)
        m.d.comb += [meta.prompt.eq(self.i.p.data.prompt), meta.index.eq(index), meta.last.eq(self.i.p.last)]
        m.submodules.lane_c = lane_c = RequantLane(quant.ACC_BITS, tag_bits=len(meta.as_value()), out_bits=LB)
        m.submodules.lane_u = lane_u = RequantLane(quant.ACC_BITS, tag_bits=0, out_bits=LB)
        for lane, acc in ((lane_c, self.i.p.data.acc_c), (lane_u, self.i.p.data.acc_u)):
            m.d.comb += [lane.i.valid.eq(take), lane.i.p.acc.eq(acc), lane.i.p.mult.eq(self.i.p.data.mult),
                         lane.i.p.shift.eq(self.i.p.data.shift)]
        m.d.comb += lane_c.i.p.tag.eq(meta)
        m.submodules.noise = noise = NoiseLane(tag_bits=0)
        m.d.comb += [noise.i.valid.eq(valid1), noise.i.p.r.eq(word1)]
        assert 1 + NoiseLane.latency == RequantLane.latency

        # ---- stage 6: l_c - l_u into the guidance lane, everything else in its tag ---------------
        tag_layout = data.StructLayout({"meta": meta_layout, "l_c": signed(LB), "l_u": signed(LB),
                                        "noise": signed(NOISE_BITS)})
        diff = Signal(signed(LB + 1), reset_less=True)
        tag6 = Signal(tag_layout, reset_less=True)
        valid6 = Signal()
        m.d.sync += [diff.eq(lane_c.o.p.y - lane_u.o.p.y), valid6.eq(lane_c.o.valid),
                     tag6.meta.eq(lane_c.o.p.tag), tag6.l_c.eq(lane_c.o.p.y), tag6.l_u.eq(lane_u.o.p.y),
                     tag6.noise.eq(Mux(self.greedy, 0, noise.o.p.noise))]
        m.submodules.lane_g = lane_g = RequantLane(LB + 1, tag_bits=len(tag6.as_value()), out_bits=Z_BITS)
        m.d.comb += [lane_g.i.valid.eq(valid6), lane_g.i.p.acc.eq(diff), lane_g.i.p.mult.eq(self.gain),
                     lane_g.i.p.shift.eq(quant.CFG_BITS), lane_g.i.p.tag.eq(tag6)]

        # ---- stage 12: z = saturate32(l_u + guided term), or l_c -----------------------------------
        t11 = Signal(tag_layout)
        m.d.comb += t11.eq(lane_g.o.p.tag)
        zsum = Signal(signed(Z_BITS + 2))
        m.d.comb += zsum.eq(t11.l_u + lane_g.o.p.y)
        zmax, zmin = (1 << (Z_BITS - 1)) - 1, -(1 << (Z_BITS - 1))
        z12 = Signal(signed(Z_BITS), reset_less=True)
        noise12 = Signal(signed(NOISE_BITS), reset_less=True)
        meta12 = Signal(meta_layout, reset_less=True)
        valid12 = Signal()
        with m.If(~self.guided):
            m.d.sync += z12.eq(t11.l_c)
        with m.Elif(zsum > zmax):
            m.d.sync += z12.eq(zmax)
        with m.Elif(zsum < zmin):
            m.d.sync += z12.eq(zmin)
        with m.Else():
            m.d.sync += z12.eq(zsum)
        m.d.sync += [noise12.eq(t11.noise), meta12.eq(t11.meta), valid12.eq(lane_g.o.valid)]
        m.d.comb += [self.z.valid.eq(valid12), self.z.p.data.z.eq(z12), self.z.p.data.index.eq(meta12.index),
                     self.z.p.data.prompt.eq(meta12.prompt)]

        # ---- stage 13: the score; stage 14: the running argmax -----------------------------------
        score = Signal(signed(Z_BITS + 1), reset_less=True)
        meta13 = Signal(meta_layout, reset_less=True)
        valid13 = Signal()
        m.d.sync += [score.eq(z12 + noise12), meta13.eq(meta12), valid13.eq(valid12)]
        best = Signal.like(score, reset_less=True)
        best_i = Signal(ib, reset_less=True)
        first = Signal(init=1)
        wins = Signal()
        m.d.comb += wins.eq(first | (score > best))
        token = Signal(ib)
        m.d.comb += token.eq(Mux(wins, meta13.index, best_i))
        with m.If(valid13):
            m.d.sync += first.eq(meta13.last)
            with m.If(wins):
                m.d.sync += [best.eq(score), best_i.eq(meta13.index)]

        # ---- the row's token: queue and output register --------------------------------------------
        m.d.comb += [queue.i.p.prompt.eq(meta13.prompt), queue.i.p.token.eq(token),
                     queue.i.valid.eq(valid13 & meta13.last),
                     self.o.valid.eq(queue.o.valid), self.o.p.data.prompt.eq(queue.o.p.prompt),
                     self.o.p.data.token.eq(queue.o.p.token), queue.o.ready.eq(self.o.ready)]
        return m
