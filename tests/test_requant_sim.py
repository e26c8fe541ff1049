"""The RTL requantiser against sw.golden.quant.requantize on the cases that matter: ties, saturation,
shift 0 and the widest shifts, operand extremes."""

import numpy as np
from amaranth.sim import Simulator

from hw.accel.payload import pack
from hw.accel.requant import Requant, load_layout
from sw.golden import quant

LANES = 4


def directed_cases():
    """(acc, mult, shift) triples, including every tie and saturation corner."""
    cases = []
    for shift in (0, 1, 2, 3, 7, 15, 31, 47, 48, 63):
        for acc in (-5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5):
            half = 1 << shift >> 1
            for a in (acc, acc * (1 << shift) + half, acc * (1 << shift) - half):
                if quant.ACC_MIN <= a <= quant.ACC_MAX:
                    cases.append((a, 1, shift))
    # Rounding next to the int8 bounds: x.5 ties at -129.5 ... 128.5 (shift 1), also scaled up.
    for shift in (1, 3, 20):
        for v2 in [*range(-261, -250), *range(250, 261)]:
            cases.append((v2 << (shift - 1), 1, shift))
    for acc in (quant.ACC_MIN, quant.ACC_MAX, -129, -128, 127, 128):
        for mult in (0, 1, quant.MULT_MAX):
            for shift in (0, 8, 40, 63):
                cases.append((acc, mult, shift))
    rng = np.random.default_rng(7)
    for _ in range(400):
        cases.append((int(rng.integers(quant.ACC_MIN, quant.ACC_MAX)),
                      int(rng.integers(0, quant.MULT_MAX + 1)), int(rng.integers(0, 64))))
    while len(cases) % LANES:
        cases.append((0, 0, 0))
    return cases


def run_requant(cases):
    dut = Requant(LANES, len(cases) // LANES)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    groups = [cases[i:i + LANES] for i in range(0, len(cases), LANES)]
    layout = load_layout(LANES, len(groups))

    async def bench(ctx):
        for n, g in enumerate(groups):
            ctx.set(dut.params.valid, 1)
            ctx.set(dut.params.payload.as_value(),
                    pack(layout, {"addr": n, "p": {"mult": [c[1] for c in g], "shift": [c[2] for c in g]}}))
            await ctx.tick()
        ctx.set(dut.params.valid, 0)
        ctx.set(dut.o.ready, 1)
        pending = list(range(len(groups)))
        for _ in range(len(groups) + 10 * Requant.latency):
            if pending:
                n = pending.pop(0)
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.p.sel, n)
                for lane, c in enumerate(groups[n]):
                    ctx.set(dut.i.p.acc[lane], c[0])
            else:
                ctx.set(dut.i.valid, 0)
            await ctx.tick()
            if ctx.get(dut.o.valid):
                got.extend(int(ctx.get(dut.o.p.y[lane])) for lane in range(LANES))

    sim.add_testbench(bench)
    sim.run()
    assert len(got) == len(cases), f"{len(got)} results for {len(cases)} inputs"
    return np.array(got)


def test_requant_matches_spec():
    cases = directed_cases()
    acc, mult, shift = (np.array(v) for v in zip(*cases, strict=True))
    want = quant.requantize(acc, mult, shift)
    got = run_requant(cases)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, (
        f"{bad.size} mismatches; first: acc={acc[bad[0]]} mult={mult[bad[0]]} shift={shift[bad[0]]} "
        f"RTL={got[bad[0]]} spec={want[bad[0]]}")
