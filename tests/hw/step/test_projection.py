"""The projection block against sw.spec.quant.matmul_int and requantize: random rows and weights, the
extreme products and the rounding's ties, runs of one beat and of many, idle cycles and output
backpressure; the comparison shown to fail on a wrong rounding."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.step.projection import Projection
from sw.spec import quant


def case(seed, rows, d_in, d_out):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, size=(rows, d_in))
    w = rng.integers(-128, 128, size=(d_in, d_out))
    x[0], w[:, 0], w[:, 1] = -128, -128, 127                   # the largest and most negative sums
    mult = rng.integers(1, 1 << quant.MULT_BITS, size=d_out)
    shift = rng.integers(10, 24, size=d_out)
    w[:, 2], w[0, 2], x[1:, 0] = 0, 1, [1, 5, -3]               # column 2: x[r, 0] / 2, ties
    mult[2], shift[2] = 1, 1
    return x, w, mult, shift


def beats(x, w, mult, shift, ni, no):
    """The runs of each row, as the block takes them: output block by block, ``d_in / ni`` beats each."""
    d_in, d_out = w.shape
    for r in range(len(x)):
        for ob in range(d_out // no):
            for j in range(d_in // ni):
                blk = w[j * ni:(j + 1) * ni, ob * no:(ob + 1) * no]      # [k, n]
                yield {"x": x[r, j * ni:(j + 1) * ni], "w": blk.T.reshape(-1),
                       "mult": mult[ob * no:(ob + 1) * no], "shift": shift[ob * no:(ob + 1) * no],
                       "end": ob == d_out // no - 1, "last": j == d_in // ni - 1}


def run(x, w, mult, shift, *, ni, no, requant, stall=0.0, seed=0):
    dut = Projection(ni, no, requant=requant)
    rng = np.random.default_rng(seed)
    todo = list(beats(x, w, mult, shift, ni, no))
    n_blocks = sum(b["last"] for b in todo)
    outs = []
    cycles = [0]

    async def bench(ctx):
        k = 0
        while k < len(todo) or len(outs) < n_blocks:
            send = k < len(todo) and rng.random() >= stall
            ctx.set(dut.i.valid, int(send))
            if send:
                b = todo[k]
                for name in ("x", "w", "mult", "shift"):
                    for j, v in enumerate(b[name]):
                        ctx.set(getattr(dut.i.p.data, name)[j], int(v))
                ctx.set(dut.i.p.data.end, int(b["end"]))
                ctx.set(dut.i.p.last, int(b["last"]))
            ready = rng.random() >= stall
            ctx.set(dut.o.ready, int(ready))
            await ctx.delay(1e-9)
            if send and ctx.get(dut.i.ready):
                k += 1
            if ready and ctx.get(dut.o.valid):
                outs.append(([ctx.get(dut.o.p.data.y[n]) for n in range(no)], ctx.get(dut.o.p.last)))
            await ctx.tick()
            cycles[0] += 1
            assert cycles[0] < 20 * len(todo) + 200, "the block stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    y = np.array([o[0] for o in outs]).reshape(len(x), -1)
    lasts = [o[1] for o in outs]
    return y, lasts, cycles[0], dut.latency, len(todo)


@pytest.mark.parametrize("ni, no, requant, stall", [(8, 8, True, 0.0), (8, 4, True, 0.4), (32, 2, False, 0.0),
                                                    (4, 8, False, 0.3)])
def test_projection_is_the_spec(ni, no, requant, stall):
    x, w, mult, shift = case(ni + no, 4, 32, 16)
    y, lasts, cycles, latency, n_beats = run(x, w, mult, shift, ni=ni, no=no, requant=requant, stall=stall,
                                             seed=no)
    acc = quant.matmul_int(x, w)
    want = quant.requantize(acc, mult, shift) if requant else acc
    bad = np.argwhere(y != want)
    assert bad.size == 0, (f"row {bad[0][0]}, output {bad[0][1]}: RTL {y[tuple(bad[0])]}, "
                           f"spec {want[tuple(bad[0])]}")
    per_row = 16 // no
    assert lasts == [int(b % per_row == per_row - 1) for b in range(len(lasts))]
    assert acc[0, 0] == 32 * 2**14
    if stall == 0.0:
        assert cycles <= n_beats + latency + 1, f"{cycles} cycles for {n_beats} beats"
    if requant:
        # The comparison can fail: ties rounded up instead of to even differ.
        up = np.clip(np.floor(acc[:, 2] * mult[2] / 2**shift[2] + 0.5), -128, 127)
        assert (up != y[:, 2]).any()
    else:
        assert (quant.matmul_int(x[:, :-1], w[:-1]) != y).any()


def test_bad_parameters():
    for kw, name in (({"n_in": 0}, "n_in"), ({"n_out": 2.0}, "n_out"), ({"queue_depth": 0}, "queue_depth")):
        with pytest.raises(ValueError, match=name):
            Projection(**kw)
