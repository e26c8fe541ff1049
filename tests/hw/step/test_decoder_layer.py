"""DecoderLayer in amaranth.sim against sw.spec.quant: two layers at one position over two frames (the
second frame's rows replayed where the attention's TAS clears the threshold, from the replay cache the
first frame wrote), every row out of the layer and every decision, idle inputs and backpressure; the
check shown to fail on an MLP output scale given one shift off."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.board.host import config_words
from hw.step.decoder_layer import DecoderLayer
from sw.spec import quant
from tb.board.small_trace import SMALL_ACCEL, _layer
from tests.hw.step.test_attention_layer import golden as attention_golden

CFG = SMALL_ACCEL
D, B, H, P, EPS = CFG.d_model, CFG.batch, 2, 8, 7
DH = D // H
NI, NO = CFG.mv_in, CFG.mv_out


def case(seed=3):
    rng = np.random.default_rng(seed)
    layers = []
    for _ in range(CFG.layers):
        layers.append(dict(
            n1=quant.scale_to_mult_shift(rng.uniform(80.0, 400.0, size=D)),
            w=rng.integers(-128, 128, size=(4, D, D)),
            qkv=[quant.scale_to_mult_shift(rng.uniform(0.001, 0.006, size=D)) for _ in range(3)],
            o=quant.scale_to_mult_shift(rng.uniform(0.5, 4.0, size=D)),
            a_exp=150, a_mult=1 << 14, a_shift=14,
            n2=quant.scale_to_mult_shift(rng.uniform(80.0, 400.0, size=D)),
            y=(int(rng.integers(20000, 60000)), 6), mlp=_layer(rng, D, CFG.d_ff)))
    steps = []
    for frame, hist, mark in ((0, 2, None), (1, 4, 1)):
        for li in range(CFG.layers):
            ang = rng.uniform(-np.pi, np.pi, size=DH // 2)
            steps.append(dict(
                layer=li, index=1, frame=frame, r=rng.integers(-30000, 30000, size=(B, D)),
                c=np.rint(np.cos(ang) * 2**14).astype(np.int64),
                s=np.rint(np.sin(ang) * 2**14).astype(np.int64),
                hk=rng.integers(-128, 128, size=(B, H, hist, DH)),
                hv=rng.integers(-128, 128, size=(B, H, hist, DH)), mark=mark, threshold=0))
    # Thresholds between the rows' TAS, so that the second frame both replays and computes.
    for st in steps:
        if st["mark"] is not None:
            tas = attention_golden([st], layers[st["layer"]])[0]["tas"]
            st["threshold"] = int(np.sort(tas)[len(tas) // 2])
    return steps, layers


def golden(steps, layers, y_shift_delta=0):
    cache, out = {}, []
    for st in steps:
        L = layers[st["layer"]]
        a = attention_golden([st], L)[0]
        m = quant.rmsnorm_int(a["r_mid"], *L["n2"], EPS)
        y = quant.swiglu_int8(m, L["mlp"]["wg"], L["mlp"]["wu"], L["mlp"]["wd"], L["mlp"]).astype(np.int64)
        key = (st["layer"], st["index"])
        if st["frame"] >= 1:
            y = np.where(a["replay"][:, None], cache[key], y)
        cache[key] = y
        r_out = quant.saturate(a["r_mid"] + quant.requant_wide(y, L["y"][0], L["y"][1] + y_shift_delta),
                               quant.RESIDUAL_BITS)
        out.append(dict(r_out=r_out, tas=a["tas"], replay=a["replay"]))
    return out


def run(steps, layers, *, stall=0.0, seed=1):
    dut = DecoderLayer(CFG, H, max_positions=P)
    rng = np.random.default_rng(seed)
    words = config_words(CFG, [L["mlp"] for L in layers])
    items = {
        "i": [(n, b, e) for n in range(len(steps)) for b in range(B) for e in range(D)],
        "w": [(n, m_, j, kk) for n in range(len(steps)) for m_ in range(3) for j in range(D // NO)
              for kk in range(D // NI)],
        "wo": [(n, 3, j, kk) for n in range(len(steps)) for j in range(D // NO) for kk in range(D // NI)],
        "kv": [(n, b, h, j) for n, st in enumerate(steps) for b in range(B) for h in range(H)
               for j in range(st["hk"].shape[2])],
        "grp": list(range(len(steps))), "mg": list(range(len(steps))),
        "n2": [(n, e) for n in range(len(steps)) for e in range(D)],
    }
    got = dict(r=[], d=[])

    def drive(ctx, name, item):
        port = getattr(dut, name)
        if name == "i":
            n, b, e = item
            L = layers[steps[n]["layer"]]
            vals = [(port.p.data.r, int(steps[n]["r"][b, e])), (port.p.data.mult, int(L["n1"][0][e])),
                    (port.p.data.shift, int(L["n1"][1][e])), (port.p.last, int(e == D - 1))]
        elif name in ("w", "wo"):
            n, m_, j, kk = item
            L = layers[steps[n]["layer"]]
            cols = range(j * NO, (j + 1) * NO)
            consts = L["qkv"][m_] if m_ < 3 else L["o"]
            vals = [(port.p.w, [int(L["w"][m_, kk * NI + i, c]) for c in cols for i in range(NI)]),
                    (port.p.mult, [int(consts[0][c]) for c in cols]),
                    (port.p.shift, [int(consts[1][c]) for c in cols])]
        elif name == "kv":
            n, b, h, j = item
            st = steps[n]
            vals = [(port.p.k, [int(x) for x in st["hk"][b, h, j]]),
                    (port.p.v, [int(x) for x in st["hv"][b, h, j]]),
                    (port.p.tas, int(st["mark"] == j))]
        elif name == "grp":
            st, L = steps[item], layers[steps[item]["layer"]]
            vals = [(port.p.c, [int(x) for x in st["c"]]), (port.p.s, [int(x) for x in st["s"]]),
                    (port.p.history, st["hk"].shape[2]), (port.p.a_exp, L["a_exp"]),
                    (port.p.a_mult, L["a_mult"]),
                    (port.p.a_shift, L["a_shift"]), (port.p.threshold, st["threshold"])]
        elif name == "mg":
            st, L = steps[item], layers[steps[item]["layer"]]
            vals = [(port.p.layer, st["layer"]), (port.p.index, st["index"]), (port.p.y_mult, L["y"][0]),
                    (port.p.y_shift, L["y"][1])]
        else:
            n, e = item
            L = layers[steps[n]["layer"]]
            vals = [(port.p.mult, int(L["n2"][0][e])), (port.p.shift, int(L["n2"][1][e]))]
        for sig, v in vals:
            ctx.set(sig, v)

    async def bench(ctx):
        ctx.set(dut.eps, EPS)
        for w in words:
            ctx.set(dut.cfg.valid, 1)
            ctx.set(dut.cfg.p.data.as_value(), w)
            await ctx.tick()
        ctx.set(dut.cfg.valid, 0)
        idx = {name: 0 for name in items}
        cycles = 0
        while len(got["r"]) < len(steps) * B * D:
            offer = {}
            for name, its in items.items():
                k = idx[name]
                offer[name] = k < len(its) and (name in ("grp", "mg") or rng.random() >= stall)
                ctx.set(getattr(dut, name).valid, int(offer[name]))
                if offer[name]:
                    drive(ctx, name, its[k])
            readies = {name: rng.random() >= stall for name in ("o", "d", "kv_out")}
            for name, r in readies.items():
                ctx.set(getattr(dut, name).ready, int(r))
            await ctx.delay(1e-9)
            for name in items:
                if offer[name] and ctx.get(getattr(dut, name).ready):
                    idx[name] += 1
            if readies["o"] and ctx.get(dut.o.valid):
                got["r"].append((ctx.get(dut.o.p.data.r), ctx.get(dut.o.p.last)))
            if readies["d"] and ctx.get(dut.d.valid):
                got["d"].append((ctx.get(dut.d.p.data.tas), ctx.get(dut.d.p.data.replay)))
            await ctx.tick()
            cycles += 1
            assert cycles < 60_000, f"the layer stopped after {len(got['r'])} elements"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


def check(got, want):
    assert len(got["r"]) == len(want) * B * D
    for n, w in enumerate(want):
        for b in range(B):
            assert got["d"][n * B + b] == (w["tas"][b], int(w["replay"][b])), f"step {n}, row {b}: decision"
            for e in range(D):
                r, last = got["r"][(n * B + b) * D + e]
                assert (r, last) == (w["r_out"][b, e], int(e == D - 1)), \
                    f"step {n}, row {b}, element {e}: RTL {r}, golden {w['r_out'][b, e]}"


@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_the_layer_is_the_golden_models(stall):
    steps, layers = case()
    want = golden(steps, layers)
    replays = np.concatenate([w["replay"] for w in want])
    assert replays.any() and not replays.all(), "the case must both replay and compute"
    check(run(steps, layers, stall=stall), want)


def test_the_check_fails_on_another_output_scale():
    steps, layers = case()
    got = run(steps, layers)
    with pytest.raises(AssertionError, match="step 0, row 0, element"):
        check(got, golden(steps, layers, y_shift_delta=1))
