"""cocotb test of a whole decoder layer (``hw.step.decoder_layer.DecoderLayer`` behind its AXI-Stream
adapter) against a full-step trace: from the residual rows into each layer (``r_in``), the layer's
weights and constants (the MLP's loaded once into the accelerator), the position's tables and the
attended earlier positions' keys and values, every row out of the layer (``r_out``), every decision
the MLP used and every new key and value. The steps run in order from the first (the replay cache
carries from frame to frame): ``steps`` = ``all`` or ``first:N``. ``plant`` = ``S:L:B:E`` changes
one expected element of ``r_out``. ``accel``: the accelerator of the build's MLP. Configuration (the
run's :class:`sw.config.BenchConfig`) otherwise as ``cocotb_attention_layer``.

Bus models: cocotbext-axi ``AxiStreamSource`` on every input (idle cycles on the rows, weights and
history), ``AxiStreamSink`` on ``m_axis_o``, ``m_axis_d`` and ``m_axis_kv_out`` (backpressure on
the rows). The scoreboard counts rows in against rows, decisions and heads out.
"""


import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.board.host import config_words
from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.attention_layer import kv_layout
from hw.step.decoder_layer import channel_layout, mlp_group_layout
from hw.step.residual import residual_out_layout
from hw.step.tas_tap import decision_layout
from sw.config import AccelConfig
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import CLOCK_NS, Bench, plant_index, stream_model
from tb.step.cocotb_attention_layer import LayerFeed
from tb.step.cocotb_step_mlp import position, step_layers


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = {n: stream_model(AxiStreamSource, dut, f"s_axis_{n}", stall_seed=s)
                    for n, s in (("i", 0), ("w", 3), ("wo", 4), ("grp", None), ("kv", 5), ("cfg", None),
                                 ("n2", None), ("mg", None))}
        self.out = {n: stream_model(AxiStreamSink, dut, f"m_axis_{n}", stall_seed=s)
                    for n, s in (("o", 7), ("d", None), ("kv_out", None))}

    reset = Bench.reset


@cocotb.test()
async def decoder_layer_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, d, H, dh = (m["dims"][k] for k in ("steps", "layers", "batch", "d_model", "n_heads", "head_dim"))
    N, start = m["dims"]["tokens_per_frame"], m["prompt_len"]
    cfg: AccelConfig = config.require("accel")
    ni, no = cfg.mv_in, cfg.mv_out
    spec = config.steps
    steps = list(range(S if spec == "all" else min(S, int(spec.split(":")[1]))))
    r_out = t["r_out"].astype(np.int64).copy()
    plant = config.plant
    if plant:
        r_out[plant_index(plant)] += 1
    P = config.require("max_positions")

    tb = TB(dut)
    dut.eps.value = int(m["eps"])
    await tb.reset()
    await tb.src["cfg"].send(AxiStreamFrame(config_words(cfg, step_layers(t, L))))
    await tb.src["cfg"].wait()
    await ClockCycles(dut.clk, 4)

    f_mg, f_ch = fields(mlp_group_layout(cfg)), fields(channel_layout())
    f_r, f_d, f_kv = fields(residual_out_layout()), fields(decision_layout()), fields(kv_layout(dh))
    k_ = t["k"].astype(np.int64)
    n2 = [[pack_fields(f_ch, mult=int(t["n2_mult"][li, e]), shift=int(t["n2_shift"][li, e])) for e in range(d)]
          for li in range(L)]
    feed_layer = LayerFeed(t, m, tb, ni, no, P)
    groups = [(s, li) for s in steps for li in range(L)]

    async def feed():
        for s, li in groups:
            mg = pack_fields(f_mg, layer=li, index=position(s, start, N)[1], y_mult=int(t["y_mult"][li]),
                      y_shift=int(t["y_shift"][li]))
            await tb.src["mg"].send(AxiStreamFrame([mg]))
            await tb.src["n2"].send(AxiStreamFrame(n2[li]))
            await feed_layer.send(s, li)

    kv_words, decisions = [], []

    async def collect(name, into):
        while True:
            into.extend((await tb.out[name].recv()).tdata)

    cocotb.start_soon(feed())
    cocotb.start_soon(collect("kv_out", kv_words))
    cocotb.start_soon(collect("d", decisions))
    rows = replays = 0
    for s, li in groups:
        for b in range(B):
            where = f"step {s}, layer {li}, block decoder_layer, row {b}"
            frame = await tb.out["o"].recv()
            got = [unpack_field(f_r, w, "data.r") for w in frame.tdata]
            assert len(got) == d, f"{where}: {len(got)} elements out, expected {d}"
            for e in range(d):
                rep = " (replayed)" if t["replay"][s, li, b] else ""
                assert got[e] == r_out[s, li, b, e], (f"{where}{rep}, element {e}: RTL r_out {got[e]}, "
                                                      f"expected {r_out[s, li, b, e]}")
            rows += 1
            replays += int(t["replay"][s, li, b])
    for _ in range(50):
        await RisingEdge(dut.clk)
    assert tb.out["o"].empty(), "more rows out than in"
    assert rows == len(groups) * B, f"scoreboard: {len(groups) * B} rows in, {rows} out"
    assert len(decisions) == rows and len(kv_words) == rows * H, \
        f"scoreboard: {rows} rows, {len(decisions)} decisions, {len(kv_words)} heads of k and v out"
    for n, word in enumerate(decisions):
        (s, li), b = groups[n // B], n % B
        got = (unpack_field(f_d, word, "data.tas"), unpack_field(f_d, word, "data.replay"))
        assert got == (int(t["tas"][s, li, b]), int(t["replay"][s, li, b])), \
            f"step {s}, layer {li}, block decoder_layer, row {b}: decision {got}"
    for n, word in enumerate(kv_words):
        (s, li), b, h = groups[n // (B * H)], n // H % B, n % H
        assert [unpack_field(f_kv, word, f"k.{e}") for e in range(dh)] == list(k_[s, li, b, h]), \
            f"step {s}, layer {li}, row {b}, head {h}: the new key"
    dut._log.info(f"decoder_layer: {len(groups)} steps and layers, {rows} rows bit-exact "
                  f"({replays} replayed)")
