"""The end of the step in amaranth.sim: residual rows in, the final norm, the LM head and the sampler
against sw.golden (quant.rmsnorm_int, the int64 matmul, sampling.IntegerSampler), with and without
guidance, several steps back to back, idle input and backpressure; the checks shown to fail on
weights that meet the wrong row."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.token_head import TokenHead
from sw.golden import sampling
from sw.spec import quant

D, PR, C, NI, NO, SEED = 16, 2, 8, 4, 4, 9


def case(steps, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    r = rng.integers(-30000, 30000, size=(steps, 2 * PR, D))
    r[0, 0] = 0                                               # an all-zero row: D = d * eps
    nm, ns = quant.scale_to_mult_shift(rng.uniform(80.0, 400.0, size=D))
    w = rng.integers(-128, 128, size=(D, C))
    lm, ls = quant.logit_consts(rng.uniform(2e-4, 2e-3, size=C), 1.0)
    return r, (nm, ns), w, (lm, ls)


def golden(r, norm, w, logit, cfg, eps, seed=SEED):
    """Per step, per prompt: (token, z) from the golden model's functions."""
    rec = []
    gold = sampling.IntegerSampler(logit=logit, seed=seed, batch=PR, cfg_scale=cfg, record=rec)
    out = []
    for s in range(len(r)):
        x = quant.rmsnorm_int(r[s], *norm, eps).astype(np.int64)
        acc = x @ w.astype(np.int64)
        tok = gold(acc[:PR], acc[PR:] if cfg is not None else None)
        out.append([(int(tok[p]), [int(v) for v in rec[-1]["z"][p]]) for p in range(PR)])
    return out


def run(r, norm, w, logit, *, cfg, eps=7, stall=0.0, rng_seed=1, swap_rows=False):
    dut = TokenHead(D, PR, C, n_in=NI, n_out=NO)
    rng = np.random.default_rng(rng_seed)
    rows = PR * (2 if cfg is not None else 1)
    nm, ns = norm
    elems = [(s, b, e) for s in range(len(r)) for b in range(rows) for e in range(D)]
    beats = []
    for _step in range(len(r)):
        for _prompt in range(PR):
            for j in range(C // NO):
                for k in range(D // NI):
                    cols = range(j * NO, (j + 1) * NO)
                    ww = [int(w[k * NI + kk, n]) for n in cols for kk in range(NI)]
                    if swap_rows:               # the weights of input k meet the row's element k + 1
                        ww = [int(w[(k * NI + kk + 1) % D, n]) for n in cols for kk in range(NI)]
                    beats.append((ww, [int(logit[0][n]) for n in cols], [int(logit[1][n]) for n in cols]))
    toks, zs = [], []

    async def bench(ctx):
        ctx.set(dut.eps, eps)
        ctx.set(dut.gain, quant.cfg_gain(cfg) if cfg is not None else 0)
        ctx.set(dut.guided, int(cfg is not None))
        for p in range(PR):
            ctx.set(dut.seed.valid, 1)
            ctx.set(dut.seed.p.prompt, p)
            ctx.set(dut.seed.p.state, quant.sampler_state(SEED, p))
            await ctx.tick()
        ctx.set(dut.seed.valid, 0)
        ie = iw = cycles = 0
        while len(toks) < len(r) * PR:
            send_i = ie < len(elems) and rng.random() >= stall
            if send_i:
                s, b, e = elems[ie]
                ctx.set(dut.i.p.data.r, int(r[s, b, e]))
                ctx.set(dut.i.p.data.mult, int(nm[e]))
                ctx.set(dut.i.p.data.shift, int(ns[e]))
                ctx.set(dut.i.p.last, int(e == D - 1))
            ctx.set(dut.i.valid, int(send_i))
            send_w = iw < len(beats) and rng.random() >= stall
            if send_w:
                ww, lm, ls = beats[iw]
                ctx.set(dut.w.p.w, ww)
                ctx.set(dut.w.p.mult, lm)
                ctx.set(dut.w.p.shift, ls)
            ctx.set(dut.w.valid, int(send_w))
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            ie += send_i and ctx.get(dut.i.ready)
            iw += send_w and ctx.get(dut.w.ready)
            if ready and ctx.get(dut.o.valid):
                toks.append((ctx.get(dut.o.p.data.prompt), ctx.get(dut.o.p.data.token)))
            if ctx.get(dut.z.valid):
                zs.append(tuple(ctx.get(getattr(dut.z.p.data, f)) for f in ("prompt", "index", "z")))
            await ctx.tick()
            cycles += 1
            assert cycles < 100 * (len(elems) + len(beats)) + 500, "the head stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return toks, zs


def check(toks, zs, want):
    assert len(toks) == len(want) * PR, f"{len(want) * PR} tokens expected, {len(toks)} out"
    assert len(zs) == len(want) * PR * C
    for s, per_prompt in enumerate(want):
        for p, (tok, z) in enumerate(per_prompt):
            k = s * PR + p
            assert toks[k] == (p, tok), f"step {s}, prompt {p}: RTL {toks[k]}, golden token {tok}"
            for n in range(C):
                assert zs[k * C + n] == (p, n, z[n]), (f"step {s}, prompt {p}, token {n}: {zs[k * C + n]}, "
                                                       f"golden z {z[n]}")


@pytest.mark.parametrize("cfg, stall", [(1.5, 0.0), (1.5, 0.4), (None, 0.3)])
def test_tokens_are_the_golden_models(cfg, stall):
    r, norm, w, logit = case(3)
    toks, zs = run(r, norm, w, logit, cfg=cfg, stall=stall)
    check(toks, zs, golden(r, norm, w, logit, cfg, 7))


def test_the_check_fails_on_weights_that_meet_the_wrong_element():
    r, norm, w, logit = case(2)
    toks, zs = run(r, norm, w, logit, cfg=1.5, swap_rows=True)
    with pytest.raises(AssertionError, match="step 0, prompt 0"):
        check(toks, zs, golden(r, norm, w, logit, 1.5, 7))


def test_bad_parameters():
    for kw, name in (({"d_model": 18}, "n_in"), ({"codebook": 10}, "n_out"), ({"prompts": 0}, "prompts")):
        with pytest.raises(ValueError, match=name):
            TokenHead(**{"d_model": D, "prompts": PR, "codebook": C, "n_in": NI, "n_out": NO, **kw})
