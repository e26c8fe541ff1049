"""cocotb test of the RMSNorm block (``hw.step.rmsnorm.RmsNorm`` behind its AXI-Stream adapter) against a
full-step trace: the post-attention norm of every step, layer and row (``m`` from ``r_mid`` with the
layer's ``n2`` constants). Configuration as ``cocotb_sampler``: ``trace``, ``seed``, ``stall``, and
``plant`` = ``S:L:B:N`` (one expected element changed).

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_i`` (one frame per row) and
``AxiStreamSink`` on ``m_axis_o``; the scoreboard counts rows and elements in against out.
"""


import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.rmsnorm import rmsnorm_in_layout, rmsnorm_out_layout
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import Bench, plant_index


@cocotb.test()
async def norm_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, d = (m["dims"][k] for k in ("steps", "layers", "batch", "d_model"))
    want = t["m"].astype(np.int64).copy()
    plant = config.plant
    if plant:
        idx = plant_index(plant)
        want[idx] = want[idx] + 1 if want[idx] < 127 else want[idx] - 1

    bench = Bench(dut)
    src, sink = bench.src, bench.sink
    dut.eps.value = int(m["eps"])
    await bench.reset()

    f_in, f_out = fields(rmsnorm_in_layout()), fields(rmsnorm_out_layout())
    r_mid = t["r_mid"].astype(np.int64)
    order = [(s, li, b) for s in range(S) for li in range(L) for b in range(B)]
    for s, li, b in order:
        mult, shift = t["n2_mult"][li], t["n2_shift"][li]
        await src.send(AxiStreamFrame([pack_fields(f_in, **{"data.r": r_mid[s, li, b, n], "data.mult": mult[n],
                                                      "data.shift": shift[n], "last": n == d - 1})
                                       for n in range(d)]))
    out = 0
    for s, li, b in order:
        frame = await sink.recv()
        ys = [unpack_field(f_out, w, "data.y") for w in frame.tdata]
        assert len(ys) == d, f"step {s}, layer {li}, block rmsnorm (post-attention), row {b}: {len(ys)} " \
                             f"elements out, expected {d}"
        for n, y in enumerate(ys):
            assert y == want[s, li, b, n], (f"step {s}, layer {li}, block rmsnorm (post-attention), row {b}, "
                                            f"element {n}: RTL {y}, expected {want[s, li, b, n]}")
        out += 1
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert sink.empty(), "more rows out than in"
    assert out == len(order), f"scoreboard: {len(order)} rows in, {out} out"
    dut._log.info(f"rmsnorm: {out} rows, {out * d} elements bit-exact")
