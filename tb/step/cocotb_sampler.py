"""cocotb test of the on-chip sampler (``hw.step.sampler.Sampler`` behind its AXI-Stream adapter)
against a full-step trace: every guided logit ``z`` and every token the trace's golden model drew.
Driven by ``test_step.py`` (``tb/step/runner.py``); configuration in the run's
:class:`sw.config.BenchConfig` (:func:`tb.runner.bench_config`), these fields:

``trace``  full-step trace directory (version 2, drawn by the integer sampler)
``seed``   seed of the idle/backpressure generators
``stall``  probability of an idle cycle on ``i`` and of backpressure on ``o``
``plant``  ``z:K:B:N`` or ``token:K:B``: change one expected value (the check must fail and name it)

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i`` (one frame per row, ``tlast`` on
its last token) and ``s_axis_seed``, ``AxiStreamSink`` on ``m_axis_o`` and ``m_axis_z``
(``byte_size`` = the bus width: one list element per beat). The scoreboard counts rows in, tokens
out and ``z`` beats out.
"""


import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.sampler import sampler_in_layout, sampler_out_layout, sampler_z_layout, seed_layout
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import CLOCK_NS, Bench, plant_index, stream_model


class TB:
    """The sampler's four streams: tokens in (idle cycles) and seeds in, tokens and ``z`` out
    (backpressure on the tokens)."""

    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = stream_model(AxiStreamSource, dut, "s_axis_i", stall_seed=0)
        self.seed = stream_model(AxiStreamSource, dut, "s_axis_seed")
        self.out = stream_model(AxiStreamSink, dut, "m_axis_o", stall_seed=7)
        self.z = stream_model(AxiStreamSink, dut, "m_axis_z")

    reset = Bench.reset


@cocotb.test()
async def sample_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    dec = m["decode"]
    PR, NS, C = (m["dims"][k] for k in ("prompts", "samples", "codebook"))
    off, L0 = m["image_token_offset"], m["prompt_len"] - 1        # sample k reads the logits of step L0 + k
    guided = dec["cfg_scale"] is not None
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
    dut.gain.value = int(dec["cfg_gain"] or 0)
    dut.guided.value = int(guided)
    dut.greedy.value = int(dec["temperature"] == 0)
    await tb.reset()

    f_in = fields(sampler_in_layout(PR))
    f_seed = fields(seed_layout(PR))
    f_out = fields(sampler_out_layout(PR, C))
    f_z = fields(sampler_z_layout(PR, C))
    for b in range(PR):
        await tb.seed.send(AxiStreamFrame([pack_fields(f_seed, prompt=b, state=int(t["sampler_state"][b]))]))
    await tb.seed.wait()

    mult, shift = t["logit_mult"].astype(np.int64), t["logit_shift"].astype(np.int64)
    logits = t["logits"].astype(np.int64)
    rows = 0
    for k in range(NS):
        for b in range(PR):
            acc_c = logits[L0 + k, b, off:off + C]
            acc_u = logits[L0 + k, PR + b, off:off + C] if guided else np.zeros(C, np.int64)
            beats = [pack_fields(f_in, **{"data.acc_c": acc_c[n], "data.acc_u": acc_u[n], "data.mult": mult[n],
                                   "data.shift": shift[n], "data.prompt": b, "last": n == C - 1})
                     for n in range(C)]
            await tb.src.send(AxiStreamFrame(beats))
            rows += 1

    def step_of(k):
        return f"step {L0 + k} (sample {k})"

    tokens = 0
    for k in range(NS):
        for b in range(PR):
            frame = await tb.out.recv()
            word = frame.tdata[0]
            tokens += 1
            p, tok = unpack_field(f_out, word, "data.prompt"), unpack_field(f_out, word, "data.token")
            zs = []
            while len(zs) < C:
                zs += (await tb.z.recv()).tdata
            for n, zw in enumerate(zs):
                zp, zi, zv = (unpack_field(f_z, zw, f"data.{x}") for x in ("prompt", "index", "z"))
                assert (zp, zi) == (b, n), (f"{step_of(k)}, block sampler, prompt {b}: z beat {n} is prompt "
                                            f"{zp}, token {zi}")
                assert zv == want_z[k, b, n], (f"{step_of(k)}, block sampler, prompt {b}, element {n}: "
                                               f"RTL z {zv}, expected {want_z[k, b, n]}")
            assert p == b, f"{step_of(k)}, block sampler: token for prompt {p}, expected prompt {b}"
            assert tok == want_tok[k, b], (f"{step_of(k)}, block sampler, prompt {b}: RTL token {tok}, "
                                           f"expected {want_tok[k, b]}")
    for _ in range(50):
        await RisingEdge(dut.clk)
    assert tb.out.empty() and tb.z.empty(), "more tokens or z beats than rows"
    assert rows == tokens == NS * PR, f"scoreboard: {rows} rows in, {tokens} tokens out"
    dut._log.info(f"sampler: {rows} rows, {rows * C} z values and {tokens} tokens bit-exact")
