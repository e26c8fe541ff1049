"""cocotb test of the projections on the MAC unit (``hw.step.projection.Projection`` behind its
AXI-Stream adapter) against a full-step trace. For each selected step, layer and row:

- the requantising build (``block`` = ``qkv``): ``q``, ``k`` and ``v`` from the input norm ``xn`` (the
  golden RMSNorm of the trace's ``r_in``; in the step the RMSNorm block makes it). ``v`` must be the
  trace's ``v``; ``q`` and ``k`` the golden model's before the rotation (RoPE's test starts from those);
- the accumulating build (``block`` = ``o_head``): the output projection's accumulators from the trace's
  ``attn`` (they go on to the residual block), and at each step the LM head's accumulators from the
  final norm of the last layer's ``r_out``, which must be the trace's ``logits``.

The weights stream in beside the row, block by block, as ``Projection`` takes them; output columns
are padded with zero weights to a multiple of ``n_out``. Configuration (the run's
:class:`sw.config.BenchConfig`) as ``cocotb_softmax`` (``steps``), ``mv`` = ``(n_in, n_out)``,
``plant`` = ``NAME:S:L:B:N`` (``logits``: ``logits:S:B:N``). Bus models: cocotbext-axi
``AxiStreamSource`` on ``s_axis_i`` (one frame per run), ``AxiStreamSink`` on ``m_axis_o`` (one frame
per row); the scoreboard counts rows in against out.
"""


import cocotb
import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame

from hw.lib.payload import fields, pack_fields, unpack_field
from hw.step.projection import projection_in_layout, projection_out_layout
from sw.spec import quant
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import Bench, plant_index
from tb.step.cocotb_softmax import selected_steps


def runs(f_in, x, w, mult, shift, ni, no):
    """The frames (runs) of one row: ``w`` [d_in, d_out] padded to whole blocks of ``no``."""
    d_in, d_out = w.shape
    pad = -d_out % no
    w = np.pad(w, ((0, 0), (0, pad)))
    mult, shift = np.pad(mult, (0, pad)), np.pad(shift, (0, pad))
    blocks = w.shape[1] // no
    for ob in range(blocks):
        cols = slice(ob * no, (ob + 1) * no)
        beats = []
        for j in range(d_in // ni):
            rows = slice(j * ni, (j + 1) * ni)
            vals = {"data.end": ob == blocks - 1, "last": j == d_in // ni - 1}
            vals.update({f"data.x.{k}": x[rows][k] for k in range(ni)})
            vals.update({f"data.w.{n * ni + k}": w[rows, cols][k, n] for n in range(no) for k in range(ni)})
            vals.update({f"data.mult.{n}": mult[cols][n] for n in range(no)})
            vals.update({f"data.shift.{n}": shift[cols][n] for n in range(no)})
            beats.append(pack_fields(f_in, **vals))
        yield AxiStreamFrame(beats)


@cocotb.test()
async def projection_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    m, t = tr.manifest, tr.t
    S, L, B, d, V = (m["dims"][k] for k in ("steps", "layers", "batch", "d_model", "vocab"))
    block = config.require("block")
    ni, no = config.require("mv")
    requant = block == "qkv"
    steps = selected_steps(S, config.steps)
    eps = int(m["eps"])

    bench = Bench(dut)
    src, sink = bench.src, bench.sink
    await bench.reset()
    f_in, f_out = fields(projection_in_layout(ni, no)), fields(projection_out_layout(no, requant))

    # (name, step, layer, row) -> (x, w, mult, shift, expected)
    jobs = []
    zeros = np.zeros(max(d, V), np.int64)
    for s in steps:
        for li in range(L):
            if requant:
                xn = quant.rmsnorm_int(t["r_in"][s, li].astype(np.int64), t["n1_mult"][li], t["n1_shift"][li],
                                       eps)
                for n in ("q", "k", "v"):
                    want = quant.requantize(quant.matmul_int(xn, t[f"w{n}"][li]), t[f"{n}_mult"][li],
                                            t[f"{n}_shift"][li])
                    if n == "v":
                        assert (want == t["v"][s, li].reshape(B, d)).all(), "golden v differs from the trace"
                    for b in range(B):
                        jobs.append(((n, s, li, b), xn[b], t[f"w{n}"][li], t[f"{n}_mult"][li],
                                     t[f"{n}_shift"][li], want[b].astype(np.int64).copy()))
            else:
                a = t["attn"][s, li].astype(np.int64)
                acc = quant.matmul_int(a, t["wo"][li])
                for b in range(B):
                    jobs.append((("o", s, li, b), a[b], t["wo"][li], zeros[:d], zeros[:d], acc[b].copy()))
        if not requant:
            xf = quant.rmsnorm_int(t["r_out"][s, L - 1].astype(np.int64), t["nf_mult"], t["nf_shift"], eps)
            for b in range(B):
                jobs.append((("logits", s, None, b), xf[b], t["head"], zeros[:V], zeros[:V],
                             t["logits"][s, b].astype(np.int64).copy()))
    plant = config.plant
    if plant:
        name, *idx = plant.split(":")
        idx = plant_index(":".join(idx))
        key = (name, idx[0], None, idx[1]) if name == "logits" else (name, *idx[:3])
        for job in jobs:
            if job[0] == key:
                job[5][idx[-1]] += 1

    async def feed():
        for _, x, w, mult, shift, _ in jobs:
            for frame in runs(f_in, x, w, mult, shift, ni, no):
                await src.send(frame)

    cocotb.start_soon(feed())
    rows = 0
    for (name, s, li, b), *_, want in jobs:
        frame = await sink.recv()
        ys = [unpack_field(f_out, w, f"data.y.{n}") for w in frame.tdata for n in range(no)][:len(want)]
        layer = "" if li is None else f"layer {li}, "
        where = f"step {s}, {layer}block projection ({name}), row {b}"
        assert len(ys) == len(want), f"{where}: {len(ys)} outputs, expected {len(want)}"
        for n, y in enumerate(ys):
            assert y == want[n], f"{where}, element {n}: RTL {y}, expected {want[n]}"
        rows += 1
    for _ in range(20):
        await RisingEdge(dut.clk)
    assert sink.empty(), "more rows out than in"
    assert rows == len(jobs), f"scoreboard: {len(jobs)} rows in, {rows} out"
    dut._log.info(f"projection ({block}): {rows} rows of {len(steps)} steps bit-exact")
