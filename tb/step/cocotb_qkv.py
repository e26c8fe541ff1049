"""cocotb test of the front of a layer (``hw.step.qkv.QkvRope`` behind its AXI-Stream adapter) against a
full-step trace: from the residual rows into a layer (``r_in``) with the input norm's constants, the
layer's q, k and v weights and the position's RoPE tables, every head of ``q`` and ``k`` (after
RoPE) and ``v`` of every row. Configuration (the run's :class:`sw.config.BenchConfig`) as
``cocotb_softmax`` (``trace``, ``seed``, ``stall``, ``steps``), ``mv`` = ``(n_in, n_out)``, and
``plant`` = ``q|k|v:S:L:B:H:E`` (one expected element changed).

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i`` (a frame per row), ``s_axis_w`` (a frame
per weight block) and ``s_axis_pos`` (a beat per step), ``AxiStreamSink`` on ``m_axis_o`` (a frame
per row, a beat per head). The scoreboard counts rows in against rows and heads out.
"""


import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.qkv import qkv_head_layout, rope_row_layout
from hw.step.rmsnorm import rmsnorm_in_layout
from hw.step.row_runs import weight_layout
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import CLOCK_NS, Bench, stream_model, weight_frames
from tb.step.cocotb_softmax import selected_steps


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.src = stream_model(AxiStreamSource, dut, "s_axis_i", stall_seed=0)
        self.w = stream_model(AxiStreamSource, dut, "s_axis_w", stall_seed=3)
        self.pos = stream_model(AxiStreamSource, dut, "s_axis_pos")
        self.out = stream_model(AxiStreamSink, dut, "m_axis_o", stall_seed=7)

    reset = Bench.reset


@cocotb.test()
async def qkv_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, d, H, dh = (m["dims"][k] for k in ("steps", "layers", "batch", "d_model", "n_heads", "head_dim"))
    ni, no = config.require("mv")
    steps = selected_steps(S, config.steps)
    want = {n: t[n].astype(np.int64).copy() for n in ("q", "k", "v")}
    plant = config.plant
    if plant:
        name, *idx = plant.split(":")
        idx = tuple(int(i) for i in idx)
        want[name][idx] = want[name][idx] + 1 if want[name][idx] < 127 else want[name][idx] - 1

    tb = TB(dut)
    dut.eps.value = int(m["eps"])
    await tb.reset()
    f_in, f_w = fields(rmsnorm_in_layout()), fields(weight_layout(ni, no))
    f_pos, f_out = fields(rope_row_layout(dh)), fields(qkv_head_layout(dh))
    def layer_frames(li):
        out = []
        for n in ("q", "k", "v"):
            out += weight_frames(t[f"w{n}"][li], t[f"{n}_mult"][li], t[f"{n}_shift"][li], ni, no, f_w)
        return out

    weights = [layer_frames(li) for li in range(L)]
    r_in = t["r_in"].astype(np.int64)
    groups = [(s, li) for s in steps for li in range(L)]

    async def feed():
        for s, li in groups:
            mult, shift = t["n1_mult"][li], t["n1_shift"][li]
            for b in range(B):
                row = [pack_fields(f_in, **{"data.r": r_in[s, li, b, e], "data.mult": mult[e],
                                     "data.shift": shift[e], "last": e == d - 1}) for e in range(d)]
                await tb.src.send(AxiStreamFrame(row))
            tables = {f"{x}.{e}": int(t[f"rope_{x}"][s, e]) for x in ("c", "s") for e in range(dh // 2)}
            await tb.pos.send(AxiStreamFrame([pack_fields(f_pos, **tables)]))
            for frame in weights[li]:
                await tb.w.send(AxiStreamFrame(frame))

    cocotb.start_soon(feed())
    heads = 0
    for s, li in groups:
        for b in range(B):
            frame = await tb.out.recv()
            where = f"step {s}, layer {li}, block qkv, row {b}"
            assert len(frame.tdata) == H, f"{where}: {len(frame.tdata)} heads out, expected {H}"
            for h, word in enumerate(frame.tdata):
                for n in ("q", "k", "v"):
                    got = [unpack_field(f_out, word, f"data.{n}.{e}") for e in range(dh)]
                    exp = want[n][s, li, b, h]
                    for e in range(dh):
                        assert got[e] == exp[e], (f"{where}, head {h}, {n} element {e}: RTL {got[e]}, "
                                                  f"expected {exp[e]}")
                heads += 1
    for _ in range(50):
        await RisingEdge(dut.clk)
    assert tb.out.empty(), "more rows out than in"
    assert heads == len(groups) * B * H, f"scoreboard: {len(groups) * B} rows in, {heads} heads out"
    dut._log.info(f"qkv: {len(groups)} steps and layers, {heads} heads of q, k and v bit-exact")
