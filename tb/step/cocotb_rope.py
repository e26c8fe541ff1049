"""cocotb test of RoPE (``hw.step.rope.Rope`` behind its AXI-Stream adapter) against a full-step trace:
for every step, layer, row and head, q and k before the rotation (the golden functions on the trace's
``r_in`` and constants: the input norm, the projection, its requantisation; in the step these are the
RMSNorm block and the MAC array) and the position's tables go in, and the trace's rotated ``q`` and
``k`` must come out. Configuration as ``cocotb_sampler``; ``plant`` = ``q:S:L:B:H:E``.
"""


import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.rope import rope_in_layout, rope_out_layout
from sw.spec import quant
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import Bench, plant_index


@cocotb.test()
async def rope_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, H, dh = (m["dims"][k] for k in ("steps", "layers", "batch", "n_heads", "head_dim"))
    want = {n: t[n].astype(np.int64).copy() for n in ("q", "k")}
    plant = config.plant
    if plant:
        name, *idx = plant.split(":")
        idx = plant_index(":".join(idx))
        want[name][idx] = want[name][idx] + 1 if want[name][idx] < 127 else want[name][idx] - 1

    bench = Bench(dut)
    src, sink = bench.src, bench.sink
    await bench.reset()

    f_in, f_out = fields(rope_in_layout(dh)), fields(rope_out_layout(dh))
    eps = int(m["eps"])
    order = []
    for li in range(L):
        xn = quant.rmsnorm_int(t["r_in"][:, li].astype(np.int64), t["n1_mult"][li], t["n1_shift"][li], eps)
        pre = {n: quant.requantize(quant.matmul_int(xn, t[f"w{n}"][li]), t[f"{n}_mult"][li],
                                   t[f"{n}_shift"][li]).reshape(S, B, H, dh) for n in ("q", "k")}
        for s in range(S):
            c, sn = t["rope_c"][s], t["rope_s"][s]
            for b in range(B):
                for h in range(H):
                    for n in ("q", "k"):
                        vals = {f"x.{j}": pre[n][s, b, h, j] for j in range(dh)}
                        vals.update({f"c.{j}": c[j] for j in range(dh // 2)})
                        vals.update({f"s.{j}": sn[j] for j in range(dh // 2)})
                        order.append((n, s, li, b, h))
                        await src.send(AxiStreamFrame([pack_fields(f_in, **vals)]))
    for n, s, li, b, h in order:
        word = (await sink.recv()).tdata[0]
        for j in range(dh):
            y = unpack_field(f_out, word, f"y.{j}")
            assert y == want[n][s, li, b, h, j], (f"step {s}, layer {li}, block rope ({n}), row {b}, "
                                                  f"head {h}, element {j}: RTL {y}, "
                                                  f"expected {want[n][s, li, b, h, j]}")
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert sink.empty(), "more heads out than in"
    dut._log.info(f"rope: {len(order)} heads of q and k bit-exact")
