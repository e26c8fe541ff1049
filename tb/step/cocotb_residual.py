"""cocotb test of the residual add (``hw.step.residual.Residual`` behind its AXI-Stream adapter) against a
full-step trace: for every step, layer and row, both adds of the layer, in the order the step makes them:

- **attention**: ``r_in`` and ``attn . wo`` (the output projection's accumulators, computed here from the
  trace's ``attn`` and ``wo``; in the step the MAC array makes them) with the per-channel ``o``
  constants must give the trace's ``r_mid``;
- **mlp**: ``r_mid`` and the MLP's output ``y`` with the layer's ``y`` constants must give ``r_out``.

Configuration as ``cocotb_sampler``; ``plant`` = ``r_mid:S:L:B:N`` or ``r_out:S:L:B:N``.
Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i`` (one frame per row) and ``AxiStreamSink``
on ``m_axis_o``; the scoreboard counts rows in against rows out.
"""


import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.residual import residual_in_layout, residual_out_layout
from sw.spec import quant
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import Bench, plant_index

NAMES = {"r_mid": "attention", "r_out": "mlp"}


@cocotb.test()
async def residual_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, d = (m["dims"][k] for k in ("steps", "layers", "batch", "d_model"))
    want = {n: t[n].astype(np.int64).copy() for n in NAMES}
    plant = config.plant
    if plant:
        name, *idx = plant.split(":")
        idx = plant_index(":".join(idx))
        want[name][idx] += 1

    bench = Bench(dut)
    src, sink = bench.src, bench.sink
    await bench.reset()

    f_in, f_out = fields(residual_in_layout()), fields(residual_out_layout())
    r_in, r_mid = t["r_in"].astype(np.int64), t["r_mid"].astype(np.int64)
    y = t["y"].astype(np.int64)
    proj = np.stack([quant.matmul_int(t["attn"][:, li], t["wo"][li]) for li in range(L)], axis=1)
    order = []
    for s in range(S):
        for li in range(L):
            for b in range(B):
                adds = (("r_mid", r_in[s, li, b], proj[s, li, b], t["o_mult"][li], t["o_shift"][li]),
                        ("r_out", r_mid[s, li, b], y[s, li, b], np.full(d, t["y_mult"][li]),
                         np.full(d, t["y_shift"][li])))
                for name, r, acc, mult, shift in adds:
                    order.append((name, s, li, b))
                    await src.send(AxiStreamFrame([pack_fields(f_in, **{"data.r": r[n], "data.acc": acc[n],
                                                                 "data.mult": mult[n], "data.shift": shift[n],
                                                                 "last": n == d - 1})
                                                   for n in range(d)]))
    out = 0
    for name, s, li, b in order:
        frame = await sink.recv()
        rs = [unpack_field(f_out, w, "data.r") for w in frame.tdata]
        where = f"step {s}, layer {li}, block residual ({NAMES[name]}), row {b}"
        assert len(rs) == d, f"{where}: {len(rs)} elements out, expected {d}"
        for n, v in enumerate(rs):
            assert v == want[name][s, li, b, n], (f"{where}, element {n}: RTL {v}, "
                                                  f"expected {want[name][s, li, b, n]}")
        out += 1
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert sink.empty(), "more rows out than in"
    assert out == len(order), f"scoreboard: {len(order)} rows in, {out} out"
    dut._log.info(f"residual: {out} rows, {out * d} elements bit-exact")
