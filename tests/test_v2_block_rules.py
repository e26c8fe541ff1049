"""The v2 core and output stage keep the timing rules of docs/timing.md by construction: every
block-RAM read goes through the DP16KD output register (no memory that Yosys would map with
``NOREG``), the other memories are distributed RAM read asynchronously into a register; and
RowOut's start-to-valid latency is the one the cycle model uses (``RowOut.latency``), with the
cores' parts added and requantised."""

import dataclasses

import numpy as np
import pytest
from amaranth.hdl import Const, Fragment, Signal
from amaranth.hdl._mem import MemoryInstance
from amaranth.sim import Simulator

from hw.accel.mv_core import MvCore
from hw.accel.requant_lane import MUX2_INIT, shift_right
from hw.accel.row_out import RowOut
from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.golden import quant
from tests.fragments import Ecp5Stub, instances

V2 = DEFAULT_ACCEL
SMALL = AccelConfig(d_model=16, d_ff=64, layers=2, tokens_per_frame=2, batch=4, cores=2,
                    chunks=4, tas_lanes=4, mv_in=4, mv_out=4)


def memories(frag, path=()):
    """``(path, memory)`` of every memory in ``frag`` and its subfragments."""
    if isinstance(frag, MemoryInstance):
        yield path, frag
    for sub, name, *_ in getattr(frag, "subfragments", []):
        yield from memories(sub, (*path, name))


def sync_read_memories(frag):
    return [path for path, mem in memories(frag) if any(p._domain != "comb" for p in mem._read_ports)]


def test_core_tables_are_block_ram_with_output_register():
    frag = Fragment.get(MvCore(V2, w_latency=4, tag_bits=2), Ecp5Stub())
    ebr = [i for i in instances(frag) if i.type == "DP16KD"]
    # Gate/up table: 2 * 4 * 256 = 2,048 entries of 22 bits (3 blocks of 2048 x 9); SiLU: 1,024 x 8.
    assert len(ebr) == 4, f"{len(ebr)} DP16KD"
    assert all(i.parameters["REGMODE_B"] == "OUTREG" for i in ebr)
    assert sync_read_memories(frag) == [], "a memory with a synchronous read (NOREG block RAM)"


def test_row_out_has_no_block_ram_read_without_register():
    frag = Fragment.get(RowOut(V2, cores=2, tag_bits=2), Ecp5Stub())
    assert sync_read_memories(frag) == [], "a memory with a synchronous read (NOREG block RAM)"
    assert [i for i in instances(frag) if i.type == "DP16KD"] == []


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
@pytest.mark.parametrize("cfg, kwargs, match", [
    (V2, {"w_latency": 2, "tag_bits": 2}, "w_latency must be an integer >= 3, not 2"),
    (dataclasses.replace(SMALL, d_model=4, d_ff=16, chunks=4), {"w_latency": 4, "tag_bits": 2},
     r"a D pass must last at least 3 cycles \(.*\), not 1"),
])
def test_core_bad_parameters(cfg, kwargs, match):
    with pytest.raises(ValueError, match=match):
        MvCore(cfg, **kwargs)


def test_row_out_latency_and_sums():
    """Every chunk of row 2 is reported (the last two in the same cycle, one per core); the row's
    ``o.valid`` comes ``1 + RowOut.latency`` cycles after that last ``done`` (the count, then the
    start), with each channel ``requantize(core 0 part + core 1 part)``, and core 1's part counts
    only where ``acc_touched`` says it was written."""
    cfg, P = SMALL, 2
    dut = RowOut(cfg, cores=P, tag_bits=2)
    D, O = cfg.d_model // cfg.mv_out, cfg.mv_out
    rng = np.random.default_rng(4)
    parts = rng.integers(-(1 << 20), 1 << 20, (P, cfg.batch * D, O))
    touched = np.ones((P, cfg.batch * D), dtype=int)
    touched[1, 2 * D + 1] = 0
    mult = rng.integers(1 << 14, 1 << 16, cfg.d_model)
    shift = rng.integers(29, 32, cfg.d_model)       # sums of about 2**21 times 2**15: mostly unsaturated
    layer, row = 1, 2
    seen = {}

    async def bench(ctx):
        ctx.set(dut.o.ready, 1)
        for ch in range(cfg.d_model):
            ctx.set(dut.rq.valid, 1)
            ctx.set(dut.rq.p, {"layer": layer, "ob": ch // O, "n": ch % O,
                               "p": {"mult": int(mult[ch]), "shift": int(shift[ch])}})
            await ctx.tick()
        ctx.set(dut.rq.valid, 0)
        await ctx.tick()
        for k in range(cfg.chunks - 2):
            ctx.set(dut.done[k % P].valid, 1)
            ctx.set(dut.done[k % P].p, {"tag": row, "layer": layer})
            await ctx.tick()
            ctx.set(dut.done[k % P].valid, 0)
            await ctx.tick()
        for p in range(P):                  # the last two chunks together, one on each core
            ctx.set(dut.done[p].valid, 1)
            ctx.set(dut.done[p].p, {"tag": row, "layer": layer})
        await ctx.tick()
        for p in range(P):
            ctx.set(dut.done[p].valid, 0)

    async def cores(ctx):
        # The cores' accumulator read ports: data and touched one cycle after the address.
        async for _, _, addr in ctx.tick().sample(dut.acc_addr):
            for p in range(P):
                ctx.set(dut.acc_data[p], [int(v) for v in parts[p, addr]])
                ctx.set(dut.acc_touched[p], int(touched[p, addr]))

    async def monitor(ctx):
        cycle = 0
        async for _, _, *dones, valid, y, tag in ctx.tick().sample(
                *[dut.done[p].valid for p in range(P)], dut.o.valid, dut.o.p.y, dut.o.p.tag):
            if any(dones):
                seen["last_done"] = cycle
            if valid:
                seen.update(valid=cycle, y=np.array(list(y)), tag=tag)
                return
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.add_process(cores)
    sim.add_process(monitor)
    sim.run_until(1e-8 * 400)
    assert "valid" in seen, "no row left RowOut"
    assert seen["valid"] - seen["last_done"] == 1 + dut.latency, seen
    assert seen["tag"] == row
    blocks = parts[:, row * D:(row + 1) * D] * touched[:, row * D:(row + 1) * D, None]
    want = quant.requantize(blocks.sum(axis=0).reshape(-1), mult, shift)
    np.testing.assert_array_equal(seen["y"], want)


# ---------------------------------------------------------------- the requantiser's shifter

def _lut4(init, a, b, c, d):
    """Yosys's ECP5 LUT4 model: bit ``8 D + 4 C + 2 B + A`` of ``INIT``."""
    return (init >> (8 * d + 4 * c + 2 * b + a)) & 1


def test_mux2_lut_init_is_a_multiplexer():
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                assert _lut4(MUX2_INIT, a, b, c, 0) == (b if c else a), (a, b, c)


def _eval_primitive_shifter(m, x, sh, xv, shv):
    """Evaluate the LUT4 / PFUMX instances of ``shift_right(..., primitive=True)`` bit by bit."""
    drivers = {}
    for inst, _ in m._named_submodules.values():
        drivers[id(inst.ports["Z"][0])] = inst

    def bit(v):
        if isinstance(v, Const):
            return v.value & 1
        if id(v) in drivers:
            inst = drivers[id(v)]
            p = {k: bit(val) for k, (val, d) in inst.ports.items() if d == "i"}
            if inst.type == "LUT4":
                return _lut4(inst.parameters["INIT"].value, p["A"], p["B"], p["C"], p["D"])
            assert inst.type == "PFUMX"
            return p["ALUT"] if p["C0"] else p["BLUT"]
        # A slice (possibly nested) of x or sh.
        start = 0
        while not isinstance(v, Signal):
            start += v.start
            v = v.value
        assert v is x or v is sh, v
        return ((xv if v is x else shv) >> start) & 1

    levels = -(-len(sh) // 2)
    out = 0
    for i in range(len(x)):
        z = m._named_submodules[f"shr_l{levels - 1}_{i}_mux"][0].ports["Z"][0]
        out |= bit(z) << i
    return out - (1 << len(x)) if out >> (len(x) - 1) else out


@pytest.mark.parametrize("width, sh_bits", [(51, 6), (42, 6), (20, 4)])
def test_shifter_instances_shift_right(width, sh_bits):
    from amaranth import Module, signed

    m = Module()
    x, sh = Signal(signed(width), name="x"), Signal(sh_bits, name="sh")
    shift_right(m, x, sh, primitive=True)
    rng = np.random.default_rng(width)
    lo, hi = -(1 << (width - 1)), (1 << (width - 1)) - 1
    for xv in [lo, hi, -1, 0, 1, *rng.integers(lo, hi + 1, 6)]:
        for shv in range(1 << sh_bits):
            got = _eval_primitive_shifter(m, x, sh, int(xv) & ((1 << width) - 1), shv)
            assert got == int(xv) >> shv, f"{int(xv)} >> {shv}: {got}"
