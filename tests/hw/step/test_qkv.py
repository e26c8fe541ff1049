"""QkvRope in amaranth.sim against sw.spec.quant (rmsnorm_int, matmul_int and requantize per channel,
rope_int): every head of q, k and v of every row, three steps at three positions back to back, with
and without idle inputs and backpressure; the check shown to fail on k's weights given for v."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.qkv import QkvRope
from sw.spec import quant

D, H, B, NI, NO = 8, 2, 2, 4, 2
DH = D // H


def case(steps, seed=0):
    rng = np.random.default_rng(seed)
    r = rng.integers(-30000, 30000, size=(steps, B, D))
    norm = quant.scale_to_mult_shift(rng.uniform(80.0, 400.0, size=D))
    w = rng.integers(-128, 128, size=(3, D, D))
    qkv = [quant.scale_to_mult_shift(rng.uniform(0.001, 0.006, size=D)) for _ in range(3)]
    ang = rng.uniform(-np.pi, np.pi, size=(steps, DH // 2))
    c, s = np.rint(np.cos(ang) * 2**14).astype(np.int64), np.rint(np.sin(ang) * 2**14).astype(np.int64)
    return r, norm, w, qkv, c, s


def golden(r, norm, w, qkv, c, s, eps=7):
    out = []
    for st in range(len(r)):
        x = quant.rmsnorm_int(r[st], *norm, eps)
        q, k, v = (quant.requantize(quant.matmul_int(x, w[n]), *qkv[n]).reshape(B, H, DH) for n in range(3))
        q, k = quant.rope_int(q, c[st], s[st]), quant.rope_int(k, c[st], s[st])
        out += [(q[b, h], k[b, h], v[b, h]) for b in range(B) for h in range(H)]
    return out


def run(r, norm, w, qkv, c, s, *, eps=7, stall=0.0, seed=1):
    dut = QkvRope(D, H, B, n_in=NI, n_out=NO)
    rng = np.random.default_rng(seed)
    steps = len(r)
    elems = [(st, b, e) for st in range(steps) for b in range(B) for e in range(D)]
    blocks = [(n, j, kk) for n in range(3) for j in range(D // NO) for kk in range(D // NI)] * steps
    heads = []

    async def bench(ctx):
        ctx.set(dut.eps, eps)
        ie = iw = ip = cycles = 0
        while len(heads) < steps * B * H:
            send_i = ie < len(elems) and rng.random() >= stall
            if send_i:
                st, b, e = elems[ie]
                ctx.set(dut.i.p.data.r, int(r[st, b, e]))
                ctx.set(dut.i.p.data.mult, int(norm[0][e]))
                ctx.set(dut.i.p.data.shift, int(norm[1][e]))
                ctx.set(dut.i.p.last, int(e == D - 1))
            ctx.set(dut.i.valid, int(send_i))
            send_w = iw < len(blocks) and rng.random() >= stall
            if send_w:
                n, j, kk = blocks[iw]
                cols = range(j * NO, (j + 1) * NO)
                ctx.set(dut.w.p.w, [int(w[n, kk * NI + i, o]) for o in cols for i in range(NI)])
                ctx.set(dut.w.p.mult, [int(qkv[n][0][o]) for o in cols])
                ctx.set(dut.w.p.shift, [int(qkv[n][1][o]) for o in cols])
            ctx.set(dut.w.valid, int(send_w))
            ctx.set(dut.pos.valid, int(ip < steps))
            if ip < steps:
                ctx.set(dut.pos.p.c, [int(x) for x in c[ip]])
                ctx.set(dut.pos.p.s, [int(x) for x in s[ip]])
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            ie += send_i and ctx.get(dut.i.ready)
            iw += send_w and ctx.get(dut.w.ready)
            ip += ip < steps and ctx.get(dut.pos.ready)
            if ready and ctx.get(dut.o.valid):
                p = dut.o.p
                heads.append(tuple(np.array([ctx.get(getattr(p.data, f)[e]) for e in range(DH)])
                                   for f in ("q", "k", "v")) + (ctx.get(p.last),))
            await ctx.tick()
            cycles += 1
            assert cycles < 100 * (len(elems) + len(blocks)) + 500, "the block stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return heads


def check(heads, want):
    assert len(heads) == len(want)
    for n, ((q, k, v, last), (wq, wk, wv)) in enumerate(zip(heads, want, strict=True)):
        st, b, h = n // (B * H), n // H % B, n % H
        for name, got, exp in (("q", q, wq), ("k", k, wk), ("v", v, wv)):
            assert (got == exp).all(), (f"step {st}, row {b}, head {h}, {name}: RTL {list(got)}, "
                                        f"golden {list(exp)}")
        assert last == (h == H - 1)


@pytest.mark.parametrize("stall", [0.0, 0.4])
def test_heads_are_the_golden_models(stall):
    case_ = case(3)
    check(run(*case_, stall=stall), golden(*case_))


def test_the_check_fails_on_swapped_weights():
    r, norm, w, qkv, c, s = case(1)
    heads = run(r, norm, w[[0, 1, 1]], qkv, c, s)
    with pytest.raises(AssertionError, match="step 0, row 0, head 0, v"):
        check(heads, golden(r, norm, w, qkv, c, s))


def test_bad_parameters():
    for kw, name in (({"heads": 3}, "heads"), ({"n_in": 3}, "n_in"), ({"n_out": 3}, "n_out")):
        with pytest.raises(ValueError, match=name):
            QkvRope(**{"d_model": D, "heads": H, "batch": B, "n_in": NI, "n_out": NO, **kw})
