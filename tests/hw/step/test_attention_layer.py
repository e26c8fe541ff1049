"""AttentionLayer in amaranth.sim against sw.spec.quant, the golden model's layer step by step (norm,
q/k/v, RoPE, scores over the history and the position itself, the base-2 softmax, o / E, the o
projection and the residual add, the TAS of the marked position): the rows after attention, every
decision and the new keys and values, two steps back to back (one with no history), with and without
idle inputs and backpressure; the check shown to fail on a history given one position short."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.attention_layer import AttentionLayer
from sw.spec import quant

D, H, B, NI, NO, P = 8, 2, 2, 4, 2, 8
DH = D // H
EPS = 7


def case(seed=0):
    rng = np.random.default_rng(seed)
    steps = []
    for hist, mark in ((3, 1), (0, None), (5, 4)):
        ang = rng.uniform(-np.pi, np.pi, size=DH // 2)
        steps.append(dict(
            r=rng.integers(-30000, 30000, size=(B, D)),
            c=np.rint(np.cos(ang) * 2**14).astype(np.int64), s=np.rint(np.sin(ang) * 2**14).astype(np.int64),
            hk=rng.integers(-128, 128, size=(B, H, hist, DH)),
            hv=rng.integers(-128, 128, size=(B, H, hist, DH)),
            mark=mark, threshold=int(rng.integers(-3000, 3000))))
    layer = dict(
        n1=quant.scale_to_mult_shift(rng.uniform(80.0, 400.0, size=D)),
        w=rng.integers(-128, 128, size=(4, D, D)),
        qkv=[quant.scale_to_mult_shift(rng.uniform(0.001, 0.006, size=D)) for _ in range(3)],
        o=quant.scale_to_mult_shift(rng.uniform(0.5, 4.0, size=D)),
        a_exp=150, a_mult=1 << 14, a_shift=14)
    return steps, layer


def golden(steps, layer):
    table = quant.exp2_table()
    out = []
    for st in steps:
        x = quant.rmsnorm_int(st["r"], *layer["n1"], EPS)
        q, k, v = (quant.requantize(quant.matmul_int(x, layer["w"][n]), *layer["qkv"][n]).reshape(B, H, DH)
                   for n in range(3))
        q, k = quant.rope_int(q, st["c"], st["s"]), quant.rope_int(k, st["c"], st["s"])
        keys = np.concatenate([st["hk"], k[:, :, None]], axis=2).astype(np.int64)
        vals = np.concatenate([st["hv"], v[:, :, None]], axis=2).astype(np.int64)
        scores = np.einsum("bhe,bhpe->bhp", q.astype(np.int64), keys)
        o, E = quant.softmax_av_int(scores, vals, layer["a_exp"], table)
        a = quant.attention_out_int(o, E, layer["a_mult"], layer["a_shift"]).reshape(B, D)
        r_mid = quant.saturate(st["r"] + quant.requant_wide(quant.matmul_int(a, layer["w"][3]), *layer["o"]),
                               quant.RESIDUAL_BITS)
        if st["mark"] is None:
            tas, rep = np.zeros(B, np.int64), np.zeros(B, bool)
        else:
            tas = scores[:, :, st["mark"]].sum(axis=1)
            rep = tas >= st["threshold"]
        out.append(dict(r_mid=r_mid, tas=tas, replay=rep, k=k, v=v))
    return out


def run(steps, layer, *, stall=0.0, seed=1, short=False):
    dut = AttentionLayer(D, H, B, max_positions=P, n_in=NI, n_out=NO)
    rng = np.random.default_rng(seed)
    elems = [(n, b, e) for n in range(len(steps)) for b in range(B) for e in range(D)]
    wq = [(n, j, kk) for n in range(3) for j in range(D // NO) for kk in range(D // NI)] * len(steps)
    wo = [(3, j, kk) for j in range(D // NO) for kk in range(D // NI)] * len(steps)
    kv = [(n, b, h, j) for n, st in enumerate(steps) for b in range(B) for h in range(H)
          for j in range(st["hk"].shape[2])]
    got = dict(r=[], d=[], kv=[])

    def weight_beat(port, n, j, kk):
        cols = range(j * NO, (j + 1) * NO)
        consts = layer["qkv"][n] if n < 3 else layer["o"]
        return [(port.p.w, [int(layer["w"][n, kk * NI + i, c]) for c in cols for i in range(NI)]),
                (port.p.mult, [int(consts[0][c]) for c in cols]),
                (port.p.shift, [int(consts[1][c]) for c in cols])]

    async def bench(ctx):
        ctx.set(dut.eps, EPS)
        idx = dict(i=0, w=0, wo=0, kv=0, grp=0)
        cycles = 0
        while len(got["r"]) < len(steps) * B * D or len(got["d"]) < len(steps) * B:
            offer = {}
            for name, items in (("i", elems), ("w", wq), ("wo", wo), ("kv", kv), ("grp", steps)):
                port = getattr(dut, name)
                k = idx[name]
                send = k < len(items) and (name == "grp" or rng.random() >= stall)
                offer[name] = send
                ctx.set(port.valid, int(send))
                if not send:
                    continue
                if name == "i":
                    n, b, e = items[k]
                    ctx.set(port.p.data.r, int(steps[n]["r"][b, e]))
                    ctx.set(port.p.data.mult, int(layer["n1"][0][e]))
                    ctx.set(port.p.data.shift, int(layer["n1"][1][e]))
                    ctx.set(port.p.last, int(e == D - 1))
                elif name in ("w", "wo"):
                    for sig, val in weight_beat(port, *items[k]):
                        ctx.set(sig, val)
                elif name == "kv":
                    n, b, h, j = items[k]
                    ctx.set(port.p.k, [int(x) for x in steps[n]["hk"][b, h, j]])
                    ctx.set(port.p.v, [int(x) for x in steps[n]["hv"][b, h, j]])
                    ctx.set(port.p.tas, int(steps[n]["mark"] == j))
                else:
                    st = items[k]
                    ctx.set(port.p.c, [int(x) for x in st["c"]])
                    ctx.set(port.p.s, [int(x) for x in st["s"]])
                    ctx.set(port.p.history, st["hk"].shape[2] - (1 if short and st["hk"].shape[2] else 0))
                    ctx.set(port.p.a_exp, layer["a_exp"])
                    ctx.set(port.p.a_mult, layer["a_mult"])
                    ctx.set(port.p.a_shift, layer["a_shift"])
                    ctx.set(port.p.threshold, st["threshold"])
            readies = {name: rng.random() >= stall for name in ("o", "d", "kv_out")}
            for name, r in readies.items():
                ctx.set(getattr(dut, name).ready, int(r))
            await ctx.delay(1e-9)
            for name in idx:
                if offer[name] and ctx.get(getattr(dut, name).ready):
                    idx[name] += 1
            if readies["o"] and ctx.get(dut.o.valid):
                got["r"].append((ctx.get(dut.o.p.data.r), ctx.get(dut.o.p.last)))
            if readies["d"] and ctx.get(dut.d.valid):
                got["d"].append((ctx.get(dut.d.p.data.tas), ctx.get(dut.d.p.data.replay)))
            if readies["kv_out"] and ctx.get(dut.kv_out.valid):
                got["kv"].append(([ctx.get(dut.kv_out.p.k[e]) for e in range(DH)],
                                  [ctx.get(dut.kv_out.p.v[e]) for e in range(DH)]))
            await ctx.tick()
            cycles += 1
            if cycles > 40_000:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return got


def check(got, want):
    assert len(got["r"]) == len(want) * B * D, f"{len(got['r'])} elements out, {len(want) * B * D} expected"
    for n, w in enumerate(want):
        for b in range(B):
            for e in range(D):
                r, last = got["r"][(n * B + b) * D + e]
                assert (r, last) == (w["r_mid"][b, e], int(e == D - 1)), \
                    f"step {n}, row {b}, element {e}: RTL {r}, golden {w['r_mid'][b, e]}"
            assert got["d"][n * B + b] == (w["tas"][b], int(w["replay"][b])), f"step {n}, row {b}: decision"
            for h in range(H):
                kk, vv = got["kv"][(n * B + b) * H + h]
                assert kk == list(w["k"][b, h]) and vv == list(w["v"][b, h]), \
                    f"step {n}, row {b}, head {h}: k, v"


@pytest.mark.parametrize("stall", [0.0, 0.3])
def test_the_layer_is_the_golden_models(stall):
    steps, layer = case()
    want = golden(steps, layer)
    assert any(w["replay"].any() for w in want) and not all(w["replay"].all() for w in want)
    check(run(steps, layer, stall=stall), want)


def test_the_check_fails_on_a_short_history():
    steps, layer = case()
    with pytest.raises(AssertionError, match="step 0, row 0"):
        check(run(steps, layer, short=True), golden(steps, layer))


def test_bad_parameters():
    base = {"d_model": D, "heads": H, "batch": B, "max_positions": P, "n_in": NI, "n_out": NO}
    for kw, name in (({"n_out": 3}, "n_out"), ({"heads": 3}, "heads"),
                     ({"max_positions": 0}, "max_positions")):
        with pytest.raises(ValueError, match=name):
            AttentionLayer(**{**base, **kw})
