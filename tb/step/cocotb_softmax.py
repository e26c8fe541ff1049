"""cocotb test of one head's softmax, ``p . v`` and normalisation (``hw.step.softmax_av.SoftmaxAv``
behind its AXI-Stream adapter) against a full-step trace's attention output ``attn``: for each
selected step, layer, row and head, the scores ``q . k_j`` over the positions the golden model
attended (the trace's q and k; the MAC array computes them in the whole step) and the ``v_j`` go in,
and the head's slice of ``attn`` must come out. Configuration as ``cocotb_sampler``, and ``steps`` =
``all`` or ``stride:N`` (every N-th step, the last one included); ``plant`` = ``S:L:B:E`` (one
expected element of ``attn`` changed).

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i`` (one frame per head),
``AxiStreamSink`` on ``m_axis_o``; the scoreboard counts heads in against heads out.
"""


import cocotb
import numpy as np
import torch
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.softmax_av import softmax_in_layout, softmax_out_layout
from sw.model.fastcar import SparseConfig, attention_mask
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import Bench, plant_index


def selected_steps(S, spec):
    if spec in ("", "all"):
        return list(range(S))
    n = int(spec.split(":")[1])
    return sorted(set(range(0, S, n)) | {S - 1})


@cocotb.test()
async def attention_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, H, dh = (m["dims"][k] for k in ("steps", "layers", "batch", "n_heads", "head_dim"))
    sp = m["decode"]["sparse"]
    sparse = SparseConfig(**sp) if sp else None
    want = t["attn"].astype(np.int64).copy()
    plant = config.plant
    if plant:
        idx = plant_index(plant)
        want[idx] = want[idx] + 1 if want[idx] < 127 else want[idx] - 1
    steps = selected_steps(S, config.steps)

    bench = Bench(dut)
    src, sink = bench.src, bench.sink
    await bench.reset()

    f_in, f_out = fields(softmax_in_layout(dh)), fields(softmax_out_layout())
    q, k, v = (t[n].astype(np.int64) for n in ("q", "k", "v"))
    heads = 0
    for li in range(L):                   # the layer's constants are static while its heads flow
        dut.a_exp.value = int(t["a_exp"][li])
        dut.a_mult.value = int(t["a_mult"][li])
        dut.a_shift.value = int(t["a_shift"][li])
        order = [(s, b, h) for s in steps for b in range(B) for h in range(H)]
        for s, b, h in order:
            pos = np.flatnonzero(attention_mask(torch.tensor([s]), s + 1, sparse)[0].numpy())
            scores = k[pos, li, b, h] @ q[s, li, b, h]
            beats = []
            for j, pj in enumerate(pos):
                vals = {"data.score": scores[j], "last": j == len(pos) - 1}
                vals.update({f"data.v.{i}": v[pj, li, b, h, i] for i in range(dh)})
                beats.append(pack_fields(f_in, **vals))
            await src.send(AxiStreamFrame(beats))
        for s, b, h in order:
            frame = await sink.recv()
            ys = [unpack_field(f_out, w, "data.y") for w in frame.tdata]
            where = f"step {s}, layer {li}, block softmax_av, row {b}, head {h}"
            assert len(ys) == dh, f"{where}: {len(ys)} elements out, expected {dh}"
            for i, y in enumerate(ys):
                e = h * dh + i
                assert y == want[s, li, b, e], f"{where}, element {e}: RTL {y}, expected {want[s, li, b, e]}"
            heads += 1
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert sink.empty(), "more heads out than in"
    assert heads == L * len(steps) * B * H, f"scoreboard: {heads} heads out of {L * len(steps) * B * H}"
    dut._log.info(f"softmax_av: {heads} heads of {len(steps)} steps bit-exact")
