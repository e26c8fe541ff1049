"""A whole decode step: the embedding, every decoder layer, the final norm, the LM head and the sampler."""

from amaranth import *
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from hw.accel.accelerator import cfg_layout
from hw.lib.axi import AxiReadSignature, AxiWriteSignature
from hw.lib.axi_read_mux import AxiReadMux
from hw.lib.widths import index_bits
from hw.step.attention_layer import group_layout
from hw.step.channel_join import ChannelJoin
from hw.step.decoder_layer import DecoderLayer, mlp_group_layout
from hw.step.residual import R_BITS, residual_out_layout
from hw.step.sampler import sampler_out_layout, sampler_z_layout, seed_layout
from hw.step.step_memory import StepMemory, step_command_layout
from hw.step.tas_tap import decision_layout
from hw.step.token_head import TokenHead
from hw.step.weight_stream import WeightStream
from sw.config import AccelConfig
from sw.spec import quant

__all__ = ["DecodeStep", "decode_command_layout"]


def decode_command_layout(batch, vocab, positions, tokens_per_frame):
    """A step to run: :func:`hw.step.step_memory.step_command_layout`, whether its tokens are drawn
    after it (``sample``) and whether its rows' tokens are the ones drawn after the step before
    (``feedback``: each prompt's token, plus ``token_offset``, for its conditional and
    unconditional rows) rather than ``step.token``."""
    return data.StructLayout({"step": step_command_layout(batch, vocab, positions, tokens_per_frame),
                              "sample": 1, "feedback": 1})


class DecodeStep(wiring.Component):
    """Decode steps, whole, bit for bit the golden model's (:class:`sw.golden.step.IntegerDecoder`
    and :class:`sw.golden.sampling.IntegerSampler`): for each step taken on ``i``, the rows'
    embeddings and the KV cache through :class:`hw.step.step_memory.StepMemory` (AXI4 on ``rd`` and
    ``wr``), each layer in turn through one :class:`hw.step.decoder_layer.DecoderLayer` (its rows
    joined to the layer's input-norm constants; a layer's rows out go back in as the next
    layer's), and after the last layer, in a step that samples, the final norm, the LM head and the
    sampler (:class:`hw.step.token_head.TokenHead`). The tokens drawn leave on ``o`` and, for a
    ``feedback`` step, become the next step's tokens on chip.

    The projections' and the LM head's weights and the norms' constants are read from memory at
    ``w_base`` over the same AXI4 read port (:class:`hw.step.weight_stream.WeightStream`, its
    bursts beside the KV cache's through :class:`hw.lib.axi_read_mux.AxiReadMux`, ``arid`` 0 for
    the KV cache and embeddings, 1 for the weights), step by step, prefetched ahead of the blocks.
    The MLP's weights are loaded once on ``cfg`` into the MLP's weight store; the per-step
    descriptors come on ``grp`` (RoPE row and attention constants, without its ``history``,
    which the memory's sequencer sets) and ``mg``.

    Only wiring and sequencing.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator: the model's sizes and the MAC geometry.
    heads, vocab, prompts, codebook, positions : int
        The model's (``positions``: the most a step attends and the KV cache holds).
    addr_width, data_width, max_burst, depth : int
        The AXI4 bus and the KV cache's read prefetch buffer (words).
    weight_depth : int
        The weights' prefetch buffer (words).
    taps : bool
        With ``r``: every row out of every layer (for the testbench's scoreboard).

    Members
    -------
    i : In(stream.Signature(decode_command_layout(...)))
    grp, cfg, mg
        As :class:`hw.step.decoder_layer.DecoderLayer`.
    w_base : In(addr_width)
        The weights' image (:class:`hw.step.weight_stream.WeightStream`), static while steps run.
    seed, o, eps, gain, guided, greedy
        As :class:`hw.step.token_head.TokenHead`.
    d : Out(stream.Signature(decision_layout()))
        Each row's FastCar decision, per step's layer.
    r : Out(stream.Signature(residual_out_layout()))
        With ``taps``: every row out of every layer.
    z : Out(stream.Signature(sampler_z_layout(prompts, codebook), always_ready=True))
        With ``taps``: the sampler's guided logits.
    sinks, window, emb_base, spatial_base, kv_base, wr
        As :class:`hw.step.step_memory.StepMemory`.
    rd : Out(AxiReadSignature(addr_width, data_width))
        The KV cache's and embeddings' reads (``arid`` 0) and the weights' (``arid`` 1).
    error : Out(1)
        Set (and held) on an AXI4 answer other than OKAY.
    token_offset : In
        The vocabulary index of image token 0.
    """

    def __init__(self, cfg: AccelConfig, heads, vocab, prompts, codebook, positions, *, addr_width=32,
                 data_width=64, max_burst=16, depth=64, weight_depth=512, taps=True):
        if cfg.batch % prompts:
            raise ValueError(f"DecodeStep prompts ({prompts}) must divide the batch ({cfg.batch})")
        self._cfg, self._pr, self._taps = cfg, prompts, taps
        D, B, L, N = cfg.d_model, cfg.batch, cfg.layers, cfg.tokens_per_frame
        dh = D // heads
        self._mem = StepMemory(D, L, B, heads, vocab, N, positions, addr_width=addr_width,
                               data_width=data_width, max_burst=max_burst, depth=depth)
        self._weights = WeightStream(D, L, prompts, codebook, cfg.mv_in, cfg.mv_out, addr_width=addr_width,
                                     data_width=data_width, max_burst=max_burst, depth=weight_depth)
        self._layer = DecoderLayer(cfg, heads, max_positions=positions)
        self._head = TokenHead(D, prompts, codebook, n_in=cfg.mv_in, n_out=cfg.mv_out)
        members = {
            "i": In(stream.Signature(decode_command_layout(B, vocab, positions, N))),
            "grp": In(stream.Signature(group_layout(dh, positions))),
            "cfg": In(stream.Signature(data.StructLayout({"data": cfg_layout(cfg)}))),
            "mg": In(stream.Signature(mlp_group_layout(cfg))),
            "seed": In(stream.Signature(seed_layout(prompts), always_ready=True)),
            "o": Out(stream.Signature(sampler_out_layout(prompts, codebook))),
            "d": Out(stream.Signature(decision_layout())),
            "sinks": In(range(positions + 1)), "window": In(range(positions + 1)),
            "emb_base": In(addr_width), "spatial_base": In(addr_width), "kv_base": In(addr_width),
            "w_base": In(addr_width),
            "token_offset": In(index_bits(vocab)),
            "eps": In(32), "gain": In(quant.MULT_BITS), "guided": In(1), "greedy": In(1),
            "rd": Out(AxiReadSignature(addr_width, data_width)),
            "wr": Out(AxiWriteSignature(addr_width, data_width)),
            "error": Out(1),
        }
        if taps:
            members["r"] = Out(stream.Signature(residual_out_layout()))
            members["z"] = Out(stream.Signature(sampler_z_layout(prompts, codebook), always_ready=True))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg, PR = self._cfg, self._pr
        D, B, L = cfg.d_model, cfg.batch, cfg.layers
        m.submodules.mem = mem = self._mem
        m.submodules.weights = ws = self._weights
        m.submodules.rd_mux = rd_mux = AxiReadMux(2, len(self.rd.araddr), len(self.rd.rdata))
        m.submodules.layer = layer = self._layer
        m.submodules.head = head = self._head
        m.submodules.join_l = join_l = ChannelJoin(D, B)
        m.submodules.join_f = join_f = ChannelJoin(D, B)

        for name in ("sinks", "window", "emb_base", "spatial_base", "kv_base"):
            m.d.comb += getattr(mem, name).eq(getattr(self, name))
        wiring.connect(m, mem.rd, rd_mux.s0)
        wiring.connect(m, ws.rd, rd_mux.s1)
        wiring.connect(m, rd_mux.m_axi, wiring.flipped(self.rd))
        wiring.connect(m, mem.wr, wiring.flipped(self.wr))
        m.d.comb += [self.error.eq(mem.error | ws.error), ws.base.eq(self.w_base)]
        for name in ("cfg", "mg"):
            wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(layer, name))
        for name in ("w", "wo", "n2"):
            wiring.connect(m, getattr(ws, name), getattr(layer, name))
        wiring.connect(m, layer.d, wiring.flipped(self.d))
        wiring.connect(m, layer.kv_out, mem.kv_in)
        wiring.connect(m, mem.kv, layer.kv)
        wiring.connect(m, ws.n1, join_l.c)
        wiring.connect(m, join_l.o, layer.i)
        wiring.connect(m, ws.nf, join_f.c)
        wiring.connect(m, join_f.o, head.i)
        wiring.connect(m, ws.hw, head.w)
        wiring.connect(m, wiring.flipped(self.seed), head.seed)
        m.d.comb += [layer.eps.eq(self.eps), head.eps.eq(self.eps), head.gain.eq(self.gain),
                     head.guided.eq(self.guided), head.greedy.eq(self.greedy)]

        # ---- the steps: tokens given, or drawn after the step before ---------------------------------
        drawn = Array(Signal(len(head.o.p.data.token), name=f"drawn{p}") for p in range(PR))
        have = Signal()                                   # every prompt's token of the last draw is in
        m.submodules.samples = samples = fifo.SyncFIFOBuffered(width=1, depth=4)
        cmd = self.i.p
        ok = Signal()                                     # the step may go: its tokens known, room
        m.d.comb += [ok.eq(samples.w_rdy & (~cmd.feedback | have)),
                     mem.i.p.eq(cmd.step), ws.i.p.sample.eq(cmd.sample),
                     mem.i.valid.eq(self.i.valid & ok & ws.i.ready),
                     ws.i.valid.eq(self.i.valid & ok & mem.i.ready),
                     self.i.ready.eq(mem.i.ready & ws.i.ready & ok),
                     samples.w_en.eq(self.i.valid & self.i.ready), samples.w_data.eq(cmd.sample)]
        with m.If(cmd.feedback):
            for b in range(B):
                m.d.comb += mem.i.p.token[b].eq(drawn[b % PR] + self.token_offset)
        wiring.connect(m, head.o, wiring.flipped(self.o))
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += drawn[self.o.p.data.prompt].eq(self.o.p.data.token)
            with m.If(self.o.p.data.prompt == PR - 1):
                m.d.sync += have.eq(1)
        with m.If(self.i.valid & self.i.ready & cmd.feedback):
            m.d.sync += have.eq(0)

        # ---- each step's layer's rows in: the embeddings, or the layer before's rows out ----------
        m.submodules.loop = loop = fifo.SyncFIFOBuffered(width=R_BITS, depth=B * D)
        l_in = Signal(range(L))
        e_in = Signal(range(B * D))
        src_valid = Mux(l_in == 0, mem.emb.valid, loop.r_rdy)
        m.d.comb += [join_l.i.valid.eq(src_valid),
                     join_l.i.p.data.r.eq(Mux(l_in == 0, mem.emb.p.data.r, loop.r_data)),
                     mem.emb.ready.eq((l_in == 0) & join_l.i.ready),
                     loop.r_en.eq((l_in != 0) & join_l.i.ready)]
        with m.If(join_l.i.valid & join_l.i.ready):
            m.d.sync += e_in.eq(Mux(e_in == B * D - 1, 0, e_in + 1))
            with m.If(e_in == B * D - 1):
                m.d.sync += l_in.eq(Mux(l_in == L - 1, 0, l_in + 1))

        # ---- each step's layer's rows out: to the next layer, or the token head (or dropped) --------
        g = Signal.like(self.grp.p)
        m.d.comb += [g.eq(self.grp.p), g.history.eq(mem.n.p.history),
                     layer.grp.p.eq(g), layer.grp.valid.eq(self.grp.valid & mem.n.valid),
                     self.grp.ready.eq(layer.grp.ready & mem.n.valid),
                     mem.n.ready.eq(layer.grp.ready & self.grp.valid)]

        l_out = Signal(range(L))
        e_out = Signal(range(B * D))
        last_layer = l_out == L - 1
        # where the element goes: ready of it, and its valid
        dest_ready = Mux(last_layer, Mux(samples.r_data, join_f.i.ready, 1), loop.w_rdy)
        tap_ready = Signal()
        if self._taps:
            wiring.connect(m, head.z, wiring.flipped(self.z))
            m.submodules.tap = tap = fifo.SyncFIFOBuffered(width=residual_out_layout().size, depth=4)
            m.d.comb += [tap_ready.eq(tap.w_rdy), tap.w_data.eq(layer.o.payload),
                         self.r.valid.eq(tap.r_rdy), self.r.payload.eq(tap.r_data), tap.r_en.eq(self.r.ready)]
        else:
            m.d.comb += tap_ready.eq(1)
        go = Signal()
        m.d.comb += [go.eq(layer.o.valid & dest_ready & tap_ready & samples.r_rdy),
                     layer.o.ready.eq(dest_ready & tap_ready & samples.r_rdy),
                     loop.w_data.eq(layer.o.p.data.r), loop.w_en.eq(go & ~last_layer),
                     join_f.i.p.data.r.eq(layer.o.p.data.r),
                     join_f.i.valid.eq(layer.o.valid & last_layer & samples.r_data & tap_ready
                                       & samples.r_rdy)]
        if self._taps:
            m.d.comb += tap.w_en.eq(go)
        with m.If(go):
            m.d.sync += e_out.eq(Mux(e_out == B * D - 1, 0, e_out + 1))
            with m.If(e_out == B * D - 1):
                m.d.sync += l_out.eq(Mux(last_layer, 0, l_out + 1))
                with m.If(last_layer):
                    m.d.comb += samples.r_en.eq(1)
        return m
