"""The end of a decode step: the final norm, the LM head over the image tokens and the sampler."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.lib.widths import index_bits
from hw.step.projection import Projection
from hw.step.rmsnorm import RmsNorm, rmsnorm_in_layout
from hw.step.row_runs import RowRuns, weight_layout
from hw.step.sampler import Sampler, sampler_out_layout, sampler_z_layout, seed_layout
from sw.spec import quant

__all__ = ["TokenHead", "head_weight_layout"]


def head_weight_layout(n_in, n_out):
    """One beat of the LM head's weights over the image tokens (:func:`hw.step.row_runs.weight_layout`),
    with, on a block's last beat, the block's logit constants (:func:`sw.spec.quant.logit_consts`)."""
    return weight_layout(n_in, n_out)


class TokenHead(wiring.Component):
    """From the last layer's residual rows to the tokens drawn, bit for bit the golden model's
    final RMSNorm, LM head (over the image tokens) and integer sampler.

    Only wiring and sequencing of the step's blocks: :class:`hw.step.rmsnorm.RmsNorm` normalises the
    step's rows (the prompts' conditional rows, then, with guidance, their unconditional rows, as
    the trace's batch holds them) into :class:`hw.step.row_runs.RowRuns`; then, prompt by prompt
    and block of ``n_out`` image tokens by block, the conditional row and then the unconditional
    one run through :class:`hw.step.projection.Projection` (int32 accumulators), with each block's
    weights taken once on ``w`` and replayed for the second row. The two blocks of accumulators
    leave one image token a cycle, with the token's logit constants, into
    :class:`hw.step.sampler.Sampler`, a prompt's ``codebook`` tokens as one row. The next step's
    rows are normalised once the last run has gone into the projection.

    Parameters
    ----------
    d_model : int
    prompts : int
        Prompts of the batch (conditional rows; as many unconditional ones with guidance).
    codebook : int
        Image tokens; a multiple of ``n_out``.
    n_in, n_out : int
        The MAC unit's geometry (``AccelConfig.mv_in``, ``AccelConfig.mv_out``); ``n_in`` divides
        ``d_model``.

    Members
    -------
    i : In(stream.Signature(rmsnorm_in_layout()))
        The step's rows of the last layer's output, an element a beat with the final norm's
        channel constants, ``last`` on each row's last.
    w : In(stream.Signature(head_weight_layout(n_in, n_out)))
        Per prompt, per block of image tokens in order, the block's ``d_model / n_in`` beats.
    o : Out(stream.Signature(sampler_out_layout(prompts, codebook)))
        The token drawn for each prompt.
    z : Out(stream.Signature(sampler_z_layout(prompts, codebook), always_ready=True))
        Every image token's guided logit (the sampler's, for the testbench).
    seed : In(stream.Signature(seed_layout(prompts), always_ready=True))
    eps : In(32)
    gain, guided, greedy : In
        As :class:`hw.step.sampler.Sampler` (static while a step runs).
    """

    def __init__(self, d_model, prompts, codebook, *, n_in=8, n_out=8):
        for name, v in (("d_model", d_model), ("prompts", prompts), ("codebook", codebook), ("n_in", n_in),
                        ("n_out", n_out)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"TokenHead {name} must be a positive integer, not {v!r}")
        if d_model % n_in:
            raise ValueError(f"TokenHead n_in ({n_in}) must divide d_model ({d_model})")
        if codebook % n_out:
            raise ValueError(f"TokenHead n_out ({n_out}) must divide codebook ({codebook})")
        self._d, self._pr, self._c, self._ni, self._no = d_model, prompts, codebook, n_in, n_out
        super().__init__({
            "i": In(stream.Signature(rmsnorm_in_layout())),
            "w": In(stream.Signature(head_weight_layout(n_in, n_out))),
            "o": Out(stream.Signature(sampler_out_layout(prompts, codebook))),
            "z": Out(stream.Signature(sampler_z_layout(prompts, codebook), always_ready=True)),
            "seed": In(stream.Signature(seed_layout(prompts), always_ready=True)),
            "eps": In(32), "gain": In(quant.MULT_BITS), "guided": In(1), "greedy": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        D, PR, C, NI, NO = self._d, self._pr, self._c, self._ni, self._no
        NB = C // NO                                  # blocks of a row

        m.submodules.norm = norm = RmsNorm(max_d=D)
        m.submodules.runs = runs = RowRuns(D, NI, NO, groups=PR, blocks=NB, max_repeat=2, report=True)
        m.submodules.proj = proj = Projection(NI, NO, requant=False)
        m.submodules.sampler = sampler = Sampler(PR, C)
        wiring.connect(m, wiring.flipped(self.i), norm.i)
        wiring.connect(m, norm.o, runs.i)
        wiring.connect(m, wiring.flipped(self.w), runs.w)
        wiring.connect(m, runs.o, proj.i)
        wiring.connect(m, sampler.o, wiring.flipped(self.o))
        wiring.connect(m, sampler.z, wiring.flipped(self.z))
        wiring.connect(m, wiring.flipped(self.seed), sampler.seed)
        m.d.comb += [norm.eps.eq(self.eps), sampler.gain.eq(self.gain), sampler.guided.eq(self.guided),
                     sampler.greedy.eq(self.greedy), runs.repeat.eq(Mux(self.guided, 2, 1))]

        # Each block's logit constants, prompt and place in the row, for the sampler.
        const_layout = data.StructLayout({"mult": data.ArrayLayout(unsigned(quant.MULT_BITS), NO),
                                          "shift": data.ArrayLayout(unsigned(quant.SHIFT_BITS), NO),
                                          "prompt": index_bits(PR), "last": 1})
        m.submodules.consts = consts = fifo.SyncFIFOBuffered(width=const_layout.size, depth=8)
        kin = Signal(const_layout)
        m.d.comb += [kin.mult.eq(runs.k.p.mult), kin.shift.eq(runs.k.p.shift), kin.prompt.eq(runs.k.p.group),
                     kin.last.eq(runs.k.p.block == NB - 1),
                     consts.w_data.eq(kin), consts.w_en.eq(runs.k.valid), runs.k.ready.eq(consts.w_rdy)]

        # ---- the blocks paired and sent one image token a cycle to the sampler -----------------------
        acc = data.ArrayLayout(signed(quant.ACC_BITS), NO)
        acc_c, acc_u = Signal(acc), Signal(acc)
        have_c, sending = Signal(), Signal()
        kreg = Signal(const_layout)
        n = Signal(range(NO))
        m.d.comb += proj.o.ready.eq(~sending)
        with m.If(proj.o.valid & ~sending):
            with m.If(self.guided & ~have_c):
                m.d.sync += [acc_c.eq(proj.o.p.data.y), have_c.eq(1)]
            with m.Else():
                m.d.sync += [have_c.eq(0), sending.eq(1), n.eq(0), kreg.eq(consts.r_data)]
                with m.If(self.guided):
                    m.d.sync += acc_u.eq(proj.o.p.data.y)
                with m.Else():
                    m.d.sync += [acc_c.eq(proj.o.p.data.y), acc_u.eq(0)]
                m.d.comb += consts.r_en.eq(1)
        s = sampler.i.p
        m.d.comb += [sampler.i.valid.eq(sending),
                     s.data.acc_c.eq(acc_c[n]), s.data.acc_u.eq(acc_u[n]),
                     s.data.mult.eq(kreg.mult[n]), s.data.shift.eq(kreg.shift[n]),
                     s.data.prompt.eq(kreg.prompt), s.last.eq(kreg.last & (n == NO - 1))]
        with m.If(sampler.i.valid & sampler.i.ready):
            m.d.sync += n.eq(Mux(n == NO - 1, 0, n + 1))
            with m.If(n == NO - 1):
                m.d.sync += sending.eq(0)
        return m
