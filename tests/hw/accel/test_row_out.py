"""RowOut, the output stage: no block-RAM read without its output register (docs/timing.md), its
start-to-valid latency is the one the cycle model uses (``RowOut.latency``), and each row is the
requantised sum of the cores' parts, counting a core only where it wrote."""

import numpy as np
from amaranth.hdl import Fragment
from amaranth.sim import Simulator

from hw.accel.row_out import RowOut
from sw.config import DEFAULT_ACCEL, AccelConfig
from sw.spec import quant
from tests.fragments import Ecp5Stub, instances, sync_read_memories

SMALL = AccelConfig(d_model=16, d_ff=64, layers=2, tokens_per_frame=2, batch=4, cores=2,
                    chunks=4, tas_lanes=4, mv_in=4, mv_out=4)


def test_row_out_has_no_block_ram_read_without_register():
    frag = Fragment.get(RowOut(DEFAULT_ACCEL, cores=2, tag_bits=2), Ecp5Stub())
    assert sync_read_memories(frag) == [], "a memory with a synchronous read (NOREG block RAM)"
    assert [i for i in instances(frag) if i.type == "DP16KD"] == []


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
