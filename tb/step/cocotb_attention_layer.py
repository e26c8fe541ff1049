"""cocotb test of a layer's whole attention (``hw.step.attention_layer.AttentionLayer`` behind its
AXI-Stream adapter) against a full-step trace: from the residual rows into each layer (``r_in``), the
layer's weights and constants, the position's RoPE tables and the keys and values of the earlier
positions the golden model attended (its own mask: causal, or sinks + window), every row after
attention (``r_mid``), every decision (``tas``, ``replay``) and the new position's keys and values
(``k``, ``v``). Configuration (the run's :class:`sw.config.BenchConfig`) as ``cocotb_qkv`` (``steps``,
``mv``), with ``max_positions`` (the build's KV cache) and ``plant`` = ``S:L:B:E`` (one element of
``r_mid`` changed).

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i``, ``s_axis_w``, ``s_axis_wo``,
``s_axis_grp`` and ``s_axis_kv`` (the history, a frame per row), ``AxiStreamSink`` on ``m_axis_o``,
``m_axis_d`` and ``m_axis_kv_out``, each with its own idle cycles or backpressure. The scoreboard
counts rows in against rows, decisions and heads out.
"""


import cocotb
import numpy as np
import torch
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.attention_layer import group_layout, kv_layout
from hw.step.residual import residual_out_layout
from hw.step.rmsnorm import rmsnorm_in_layout
from hw.step.row_runs import weight_layout
from hw.step.tas_tap import decision_layout
from sw.model.fastcar import SparseConfig, attention_mask
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import CLOCK_NS, Bench, plant_index, stream_model, weight_frames
from tb.step.cocotb_softmax import selected_steps


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = {n: stream_model(AxiStreamSource, dut, f"s_axis_{n}", stall_seed=s)
                    for n, s in (("i", 0), ("w", 3), ("wo", 4), ("grp", None), ("kv", 5))}
        self.out = {n: stream_model(AxiStreamSink, dut, f"m_axis_{n}", stall_seed=s)
                    for n, s in (("o", 7), ("d", 8), ("kv_out", 9))}

    reset = Bench.reset


class LayerFeed:
    """What a step's layer takes from a full-step trace, sent on the attention's streams of ``tb``:
    the group beat (RoPE tables, history length, the layer's constants), the rows of ``r_in``, the
    q/k/v and o weight blocks, and the attended earlier positions' keys and values (marked one frame
    earlier when the trace was made with FastCar). Shared by the attention and decoder-layer benches."""

    def __init__(self, t, manifest, tb, ni, no, max_positions):
        dims = manifest["dims"]
        self.t, self.tb = t, tb
        self.B, self.d, self.H, self.dh = (dims[k] for k in ("batch", "d_model", "n_heads", "head_dim"))
        self.N, self.start = dims["tokens_per_frame"], manifest["prompt_len"]
        sp = manifest["decode"]["sparse"]
        self.sparse = SparseConfig(**sp) if sp else None
        self.fastcar = manifest["decode"]["tau"] is not None
        self.f_in, f_w = fields(rmsnorm_in_layout()), fields(weight_layout(ni, no))
        self.f_kv, self.f_g = fields(kv_layout(self.dh)), fields(group_layout(self.dh, max_positions))
        self.k, self.v = (t[n].astype(np.int64) for n in ("k", "v"))
        self.r_in = t["r_in"].astype(np.int64)
        self.weights = []
        for li in range(dims["layers"]):
            qkv = []
            for n in ("q", "k", "v"):
                qkv += weight_frames(t[f"w{n}"][li], t[f"{n}_mult"][li], t[f"{n}_shift"][li], ni, no, f_w)
            o = weight_frames(t["wo"][li], t["o_mult"][li], t["o_shift"][li], ni, no, f_w)
            self.weights.append((qkv, o))

    def kv_word(self, pj, li, b, h, mark):
        vals = {"tas": mark}
        for e in range(self.dh):
            vals[f"k.{e}"], vals[f"v.{e}"] = self.k[pj, li, b, h, e], self.v[pj, li, b, h, e]
        return pack_fields(self.f_kv, **vals)

    async def send(self, s, li):
        t, src, dh = self.t, self.tb.src, self.dh
        mask = attention_mask(torch.tensor([s]), s + 1, self.sparse)[0].numpy()
        hist = [int(p) for p in np.flatnonzero(mask) if p != s]
        marked = self.fastcar and s - self.start >= self.N
        g = {f"{x}.{e}": int(t[f"rope_{x}"][s, e]) for x in ("c", "s") for e in range(dh // 2)}
        g.update(history=len(hist), a_exp=int(t["a_exp"][li]), a_mult=int(t["a_mult"][li]),
                 a_shift=int(t["a_shift"][li]), threshold=int(t["threshold"][li]))
        await src["grp"].send(AxiStreamFrame([pack_fields(self.f_g, **g)]))
        mult, shift = t["n1_mult"][li], t["n1_shift"][li]
        for b in range(self.B):
            row = [pack_fields(self.f_in, **{"data.r": self.r_in[s, li, b, e], "data.mult": mult[e],
                                      "data.shift": shift[e], "last": e == self.d - 1})
                   for e in range(self.d)]
            await src["i"].send(AxiStreamFrame(row))
        for frame in self.weights[li][0]:
            await src["w"].send(AxiStreamFrame(frame))
        for frame in self.weights[li][1]:
            await src["wo"].send(AxiStreamFrame(frame))
        for b in range(self.B):
            beats = [self.kv_word(pj, li, b, h, marked and pj == s - self.N)
                     for h in range(self.H) for pj in hist]
            if beats:
                await src["kv"].send(AxiStreamFrame(beats))


@cocotb.test()
async def layer_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, d, H, dh = (m["dims"][k] for k in ("steps", "layers", "batch", "d_model", "n_heads", "head_dim"))
    ni, no = config.require("mv")
    steps = selected_steps(S, config.steps)
    r_mid = t["r_mid"].astype(np.int64).copy()
    plant = config.plant
    if plant:
        r_mid[plant_index(plant)] += 1

    tb = TB(dut)
    dut.eps.value = int(m["eps"])
    await tb.reset()
    f_kv, f_r, f_d = fields(kv_layout(dh)), fields(residual_out_layout()), fields(decision_layout())
    P = config.require("max_positions")
    k_, v_ = (t[n].astype(np.int64) for n in ("k", "v"))

    feed_layer = LayerFeed(t, m, tb, ni, no, P)
    groups = [(s, li) for s in steps for li in range(L)]

    async def feed():
        for s, li in groups:
            await feed_layer.send(s, li)

    kv_words = []

    async def collect_kv():
        while True:
            kv_words.extend((await tb.out["kv_out"].recv()).tdata)

    cocotb.start_soon(feed())
    cocotb.start_soon(collect_kv())
    rows = 0
    for s, li in groups:
        for b in range(B):
            where = f"step {s}, layer {li}, block attention_layer, row {b}"
            frame = await tb.out["o"].recv()
            got = [unpack_field(f_r, w, "data.r") for w in frame.tdata]
            assert len(got) == d, f"{where}: {len(got)} elements out, expected {d}"
            for e in range(d):
                assert got[e] == r_mid[s, li, b, e], (f"{where}, element {e}: RTL r_mid {got[e]}, "
                                                      f"expected {r_mid[s, li, b, e]}")
            word = (await tb.out["d"].recv()).tdata[0]
            dec = (unpack_field(f_d, word, "data.tas"), unpack_field(f_d, word, "data.replay"))
            want = (int(t["tas"][s, li, b]), int(t["replay"][s, li, b]))
            assert dec == want, f"{where}: RTL tas {dec[0]} replay {dec[1]}, expected {want[0]} {want[1]}"
            rows += 1
    for _ in range(50):
        await RisingEdge(dut.clk)
    heads = len(groups) * B * H
    assert len(kv_words) == heads, f"{len(kv_words)} heads of k and v out, {heads} heads in"
    for n, word in enumerate(kv_words):
        (s, li), b, h = groups[n // (B * H)], n // H % B, n % H
        got_k = [unpack_field(f_kv, word, f"k.{e}") for e in range(dh)]
        got_v = [unpack_field(f_kv, word, f"v.{e}") for e in range(dh)]
        assert got_k == list(k_[s, li, b, h]) and got_v == list(v_[s, li, b, h]), \
            f"step {s}, layer {li}, block attention_layer, row {b}, head {h}: the new key or value"
    assert tb.out["o"].empty() and tb.out["d"].empty(), "more rows or decisions out than rows in"
    assert rows == len(groups) * B, f"scoreboard: {len(groups) * B} rows in, {rows} out"
    dut._log.info(f"attention_layer: {len(groups)} steps and layers, {rows} rows, decisions and "
                  f"{rows * H} heads of k and v bit-exact")
