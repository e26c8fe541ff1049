"""cocotb tests of a head's scores (``hw.step.qk_score.QkScore``) and of a whole head's attention
(``hw.step.attention_head.AttentionHead``: the scores into the softmax), each behind its AXI-Stream
adapter, against a full-step trace. For each selected step, layer, row and head, the beats carry the
trace's ``q`` of the head and the ``k`` and ``v`` of each position the golden model attended (its own
mask: causal, or sinks + window); ``qk_score`` must give ``q . k_j`` with ``v_j`` for each, and
``attention_head`` the head's slice of the trace's ``attn`` and, once a row's heads are through, the
row's ``tas`` and ``replay`` (from the scores of the position one frame earlier, marked on its beats
from the second frame on when the trace was made with FastCar).

Configuration (the run's :class:`sw.config.BenchConfig`) as ``cocotb_softmax`` (``steps``), with
``block`` (``qk_score`` or ``attention_head``: the build), and ``plant`` = ``S:L:B:H:J`` for
``qk_score`` (the score of the J-th attended position changed) or ``S:L:B:E`` for ``attention_head``
(one element of ``attn``) or ``tas:S:L:B`` (a row's TAS). Bus models: cocotbext-axi
``AxiStreamSource`` on ``s_axis_i`` (one frame per head), ``AxiStreamSink`` on ``m_axis_o`` and on
``m_axis_d`` (the decisions, with their own backpressure); the scoreboard counts heads and rows in
against out.
"""


import cocotb
import numpy as np
import torch
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.qk_score import qk_in_layout, qk_out_layout
from hw.step.softmax_av import softmax_out_layout
from hw.step.tas_tap import decision_layout
from sw.model.fastcar import SparseConfig, attention_mask
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import Bench, plant_index, stream_model
from tb.step.cocotb_softmax import selected_steps


async def run(dut, block):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, H, dh = (m["dims"][k] for k in ("steps", "layers", "batch", "n_heads", "head_dim"))
    sp = m["decode"]["sparse"]
    sparse = SparseConfig(**sp) if sp else None
    plant = config.plant
    steps = selected_steps(S, config.steps)
    attn = t["attn"].astype(np.int64).copy()
    tas = t["tas"].astype(np.int64).copy()
    if plant and block == "attention_head":
        if plant.startswith("tas:"):
            tas[plant_index(plant[4:])] += 1
        else:
            idx = plant_index(plant)
            attn[idx] = attn[idx] + 1 if attn[idx] < 127 else attn[idx] - 1
    N, start = m["dims"]["tokens_per_frame"], m["prompt_len"]
    fastcar = m["decode"]["tau"] is not None

    bench = Bench(dut)
    src, sink = bench.src, bench.sink
    dsink = stream_model(AxiStreamSink, dut, "m_axis_d", stall_seed=11) if block == "attention_head" else None
    await bench.reset()

    f_in = fields(qk_in_layout(dh))
    f_out = fields(qk_out_layout(dh) if block == "qk_score" else softmax_out_layout())
    f_dec = fields(decision_layout())
    decisions = 0
    q, k, v = (t[n].astype(np.int64) for n in ("q", "k", "v"))
    heads = 0
    for li in range(L):                   # the layer's constants are static while its heads flow
        if block == "attention_head":
            dut.a_exp.value = int(t["a_exp"][li])
            dut.a_mult.value = int(t["a_mult"][li])
            dut.a_shift.value = int(t["a_shift"][li])
            dut.threshold.value = int(t["threshold"][li])
        order = [(s, b, h) for s in steps for b in range(B) for h in range(H)]
        expect = {}
        for s, b, h in order:
            pos = np.flatnonzero(attention_mask(torch.tensor([s]), s + 1, sparse)[0].numpy())
            scores = k[pos, li, b, h] @ q[s, li, b, h]
            if plant and block == "qk_score" and plant_index(plant)[:4] == (s, li, b, h):
                scores[plant_index(plant)[4]] += 1
            expect[s, b, h] = (pos, scores)
            marked = fastcar and s - start >= N                  # from the second frame on
            if marked and s - N not in pos:
                raise AssertionError(f"step {s}: position {s - N}, one frame earlier, is not attended "
                                     f"(the TAS needs it: window >= tokens_per_frame)")
            beats = []
            for j, pj in enumerate(pos):
                vals = {"last": j == len(pos) - 1, "data.tas": marked and pj == s - N,
                        "data.end": h == H - 1 and j == len(pos) - 1}
                for i in range(dh):
                    vals.update({f"data.q.{i}": q[s, li, b, h, i], f"data.k.{i}": k[pj, li, b, h, i],
                                 f"data.v.{i}": v[pj, li, b, h, i]})
                beats.append(pack_fields(f_in, **vals))
            await src.send(AxiStreamFrame(beats))
        for s, b, h in order:
            frame = await sink.recv()
            where = f"step {s}, layer {li}, block {block}, row {b}, head {h}"
            pos, scores = expect[s, b, h]
            if block == "qk_score":
                n_out = len(frame.tdata)
                assert n_out == len(pos), f"{where}: {n_out} positions out, expected {len(pos)}"
                for j, w in enumerate(frame.tdata):
                    got = unpack_field(f_out, w, "data.score")
                    assert got == scores[j], (f"{where}, position {pos[j]} (attended {j}): RTL score {got}, "
                                              f"expected {scores[j]}")
                    vv = [unpack_field(f_out, w, f"data.v.{i}") for i in range(dh)]
                    assert vv == list(v[pos[j], li, b, h]), f"{where}, position {pos[j]}: v changed"
            else:
                ys = [unpack_field(f_out, w, "data.y") for w in frame.tdata]
                assert len(ys) == dh, f"{where}: {len(ys)} elements out, expected {dh}"
                for i, y in enumerate(ys):
                    e = h * dh + i
                    assert y == attn[s, li, b, e], (f"{where}, element {e}: RTL {y}, "
                                                    f"expected {attn[s, li, b, e]}")
                if h == H - 1:
                    word = (await dsink.recv()).tdata[0]
                    got = (unpack_field(f_dec, word, "data.tas"), unpack_field(f_dec, word, "data.replay"))
                    want = (tas[s, li, b], int(t["replay"][s, li, b]))
                    assert got == want, (f"step {s}, layer {li}, block tas_tap, row {b}: RTL tas {got[0]} "
                                         f"replay {got[1]}, expected {want[0]} {want[1]}")
                    decisions += 1
            heads += 1
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert sink.empty(), "more heads out than in"
    assert dsink is None or dsink.empty(), "more decisions out than rows in"
    if dsink is not None:
        rows = L * len(steps) * B
        assert decisions == rows, f"scoreboard: {decisions} decisions out of {rows} rows"
        dut._log.info(f"tas_tap: {decisions} decisions bit-exact, {int(t['replay'][steps].sum())} replays")
    assert heads == L * len(steps) * B * H, f"scoreboard: {heads} heads out of {L * len(steps) * B * H}"
    dut._log.info(f"{block}: {heads} heads of {len(steps)} steps bit-exact")


@cocotb.test()
async def attention_trace(dut):
    await run(dut, bench_config().require("block"))
