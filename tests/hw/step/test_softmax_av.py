"""One head's softmax, p . v and normalisation against sw.spec.quant (softmax_av_int, then
attention_out_int): positions from 1 to many, flat and peaked scores, ties, saturation, output
backpressure; the comparison shown to fail on another rule."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.softmax_av import SoftmaxAv
from sw.spec import quant


def heads_for(seed, dh, lengths):
    rng = np.random.default_rng(seed)
    heads = []
    for k, n in enumerate(lengths):
        spread = [0, 30, 3000, 2**20][k % 4]
        scores = rng.integers(-spread, spread + 1, size=n)
        v = rng.integers(-128, 128, size=(n, dh))
        heads.append((scores, v))
    return heads


def run(heads, dh, a_exp, a_mult, a_shift, *, stall=0.0, seed=0):
    dut = SoftmaxAv(dh, 64)
    rng = np.random.default_rng(seed)
    outs, lasts = [], []

    async def bench(ctx):
        ctx.set(dut.a_exp, a_exp)
        ctx.set(dut.a_mult, a_mult)
        ctx.set(dut.a_shift, a_shift)
        beats = [(s[j], v[j], j == len(s) - 1) for s, v in heads for j in range(len(s))]
        total_out = dh * len(heads)
        k = cycles = 0
        while k < len(beats) or len(outs) < total_out:
            send = k < len(beats) and rng.random() >= stall
            if send:
                sc, vv, last = beats[k]
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.p.data.score, int(sc))
                for i in range(dh):
                    ctx.set(dut.i.p.data.v[i], int(vv[i]))
                ctx.set(dut.i.p.last, int(last))
            else:
                ctx.set(dut.i.valid, 0)
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            if send and ctx.get(dut.i.ready):
                k += 1
            if ready and ctx.get(dut.o.valid):
                outs.append(ctx.get(dut.o.p.data.y))
                lasts.append(ctx.get(dut.o.p.last))
            await ctx.tick()
            cycles += 1
            assert cycles < 200 * (len(beats) + total_out) + 1000, "the block stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return outs, lasts


def golden(heads, a_exp, a_mult, a_shift, table=None):
    table = quant.exp2_table() if table is None else table
    out = []
    for s, v in heads:
        o, E = quant.softmax_av_int(s, v, a_exp, table)
        out.append(quant.attention_out_int(o, E, a_mult, a_shift))
    return np.concatenate(out)


@pytest.mark.parametrize("a_mult, a_shift, stall", [(40000, 15, 0.0), (65535, 11, 0.3), (20000, 14, 0.2)])
def test_softmax_av_is_the_spec(a_mult, a_shift, stall):
    dh = 6
    heads = heads_for(a_shift, dh, [1, 5, 17, 40, 3, 64])
    outs, lasts = run(heads, dh, 311, a_mult, a_shift, stall=stall, seed=a_shift)
    want = golden(heads, 311, a_mult, a_shift)
    assert len(outs) == len(want)
    bad = np.flatnonzero(np.array(outs) != want)
    assert bad.size == 0, f"element {bad[0]} (head {bad[0] // dh}): RTL {outs[bad[0]]}, spec {want[bad[0]]}"
    assert lasts == [int((n + 1) % dh == 0) for n in range(len(want))]
    assert (np.abs(want) < 100).mean() > 0.3                          # not all saturated
    # The comparison can fail: the exponent's fraction bits read one place off (a_exp doubled)
    # gives other outputs on these heads.
    assert (golden(heads, 2 * 311, a_mult, a_shift) != np.array(outs)).any()


def test_bad_parameters():
    for kw in ({"head_dim": 0}, {"max_positions": 0}, {"max_positions": 2048}):
        with pytest.raises(ValueError):
            SoftmaxAv(**{"head_dim": 4, "max_positions": 16, **kw})
