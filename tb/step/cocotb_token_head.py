"""cocotb test of the end of the step (``hw.step.token_head.TokenHead`` behind its AXI-Stream adapter)
against a full-step trace: from the last layer's residual rows of each sampling step to the tokens
drawn, every guided logit ``z`` and every token. Configuration as ``cocotb_sampler`` (``trace``,
``seed``, ``stall``, ``plant`` = ``z:K:B:N`` or ``token:K:B``), ``mv`` (the build's matrix-vector
unit), and ``stride``: every that many samples (default 1, all of them, back to
back; above 1 each tested sample runs alone, its generators loaded with the state the golden model
reached there).

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i`` (a frame per row), ``s_axis_w`` (the
LM head's weights over the image tokens, a frame per block) and ``s_axis_seed``;
``AxiStreamSink`` on ``m_axis_o`` and ``m_axis_z``. The scoreboard counts rows and weight blocks
in against tokens and ``z`` beats out.
"""


import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.rmsnorm import rmsnorm_in_layout
from hw.step.sampler import sampler_out_layout, sampler_z_layout, seed_layout
from hw.step.token_head import head_weight_layout
from sw.spec import quant
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import CLOCK_NS, Bench, plant_index, stream_model, weight_frames


class TB:
    """Rows, weights and seeds in (idle cycles on rows and weights), tokens and ``z`` out
    (backpressure on the tokens)."""

    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = stream_model(AxiStreamSource, dut, "s_axis_i", stall_seed=0)
        self.w = stream_model(AxiStreamSource, dut, "s_axis_w", stall_seed=3)
        self.seed = stream_model(AxiStreamSource, dut, "s_axis_seed")
        self.out = stream_model(AxiStreamSink, dut, "m_axis_o", stall_seed=7)
        self.z = stream_model(AxiStreamSink, dut, "m_axis_z")

    reset = Bench.reset


@cocotb.test()
async def head_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    dec = m["decode"]
    L, B, d, PR, NS, C = (m["dims"][k]
                          for k in ("layers", "batch", "d_model", "prompts", "samples", "codebook"))
    off, L0 = m["image_token_offset"], m["prompt_len"] - 1        # sample k reads step L0 + k
    guided = dec["cfg_scale"] is not None
    greedy = dec["temperature"] == 0
    stride = config.stride
    samples = list(range(0, NS, stride))
    want_z, want_tok = t["sample_z"].astype(np.int64), t["sample_token"].astype(np.int64)
    plant = config.plant
    if plant:
        kind, *idx = plant.split(":")
        idx = plant_index(":".join(idx))
        if kind == "z":
            want_z[idx] += 1
        else:
            want_tok[idx] = (want_tok[idx] + 1) % C

    tb = TB(dut)
    dut.eps.value = int(m["eps"])
    dut.gain.value = int(dec["cfg_gain"] or 0)
    dut.guided.value = int(guided)
    dut.greedy.value = int(greedy)
    await tb.reset()

    NI, NO = config.require("mv")
    f_in, f_w = fields(rmsnorm_in_layout()), fields(head_weight_layout(NI, NO))
    f_seed, f_out = fields(seed_layout(PR)), fields(sampler_out_layout(PR, C))
    f_z = fields(sampler_z_layout(PR, C))
    r_out = t["r_out"].astype(np.int64)
    nf_m, nf_s = t["nf_mult"].astype(np.int64), t["nf_shift"].astype(np.int64)
    head = t["head"].astype(np.int8)
    lm, ls = t["logit_mult"].astype(np.int64), t["logit_shift"].astype(np.int64)
    rows = B if guided else PR

    # The weight frames of one step (the same for every step and prompt): a frame per block.
    blocks = weight_frames(head[:, off:off + C], lm, ls, NI, NO, f_w)

    def state_at(p, k):
        st = quant.sampler_state(int(dec["seed"]), p)
        if not greedy and k:
            _, st = quant.draws(st, k * C)
        return st

    async def load_seeds(k):
        for p in range(PR):
            await tb.seed.send(AxiStreamFrame([pack_fields(f_seed, prompt=p, state=state_at(p, k))]))
        await tb.seed.wait()

    async def send(k):
        s = L0 + k
        for b in range(rows):
            row = [pack_fields(f_in, **{"data.r": r_out[s, L - 1, b, n], "data.mult": nf_m[n],
                                 "data.shift": nf_s[n], "last": n == d - 1}) for n in range(d)]
            await tb.src.send(AxiStreamFrame(row))
        for _ in range(PR):
            for beats in blocks:
                await tb.w.send(AxiStreamFrame(beats))

    def where(k, p):
        return f"step {L0 + k} (sample {k}), layer {L - 1}, block token head, prompt {p}"

    out = {"tokens": 0, "z": 0}

    async def check(k):
        for p in range(PR):
            word = (await tb.out.recv()).tdata[0]
            zs = []
            while len(zs) < C:
                zs += (await tb.z.recv()).tdata
            for n, zw in enumerate(zs):
                zp, zi, zv = (unpack_field(f_z, zw, f"data.{x}") for x in ("prompt", "index", "z"))
                assert (zp, zi) == (p, n), f"{where(k, p)}: z beat {n} is prompt {zp}, token {zi}"
                assert zv == want_z[k, p, n], (f"{where(k, p)}, element {n}: RTL z {zv}, "
                                               f"expected {want_z[k, p, n]}")
            out["tokens"] += 1
            out["z"] += len(zs)
            got_p, tok = unpack_field(f_out, word, "data.prompt"), unpack_field(f_out, word, "data.token")
            assert got_p == p, f"{where(k, p)}: the token is prompt {got_p}'s"
            assert tok == want_tok[k, p], f"{where(k, p)}: RTL token {tok}, expected {want_tok[k, p]}"

    if stride == 1:
        await load_seeds(0)
        for k in samples:
            await send(k)
        for k in samples:
            await check(k)
    else:
        for k in samples:
            await load_seeds(k)
            await send(k)
            await check(k)
    for _ in range(50):
        await RisingEdge(dut.clk)
    assert tb.out.empty() and tb.z.empty(), "more tokens or z beats than rows"
    assert out["tokens"] == len(samples) * PR and out["z"] == len(samples) * PR * C, (
        f"scoreboard: {len(samples) * rows} rows in, {out['tokens']} tokens and {out['z']} z out")
    dut._log.info(f"token head: {len(samples)} samples ({len(samples) * rows} rows, "
                  f"{len(samples) * PR * C // NO} weight blocks in), {len(samples) * PR} tokens and "
                  f"{len(samples) * PR * C} z bit-exact")
