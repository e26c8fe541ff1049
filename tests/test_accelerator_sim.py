"""The whole accelerator in amaranth.sim on the first positions of the shipped decode trace: every
output byte and replay bit, rows in order, counters consistent. (The full trace runs in cocotb on
Verilator: tb/accelerator.)"""

from pathlib import Path

import numpy as np
from amaranth.sim import Simulator

from hw.accelerator import Accelerator
from hw.host import config_words, row_beats, trace_layers, unpack_y
from sw.config import DEFAULT_ACCEL
from sw.decode_trace import load_decode_trace

REPO = Path(__file__).resolve().parent.parent


def test_first_positions_of_shipped_trace():
    tr = load_decode_trace(REPO / "golden" / "fastcar")
    cfg = DEFAULT_ACCEL
    groups = [g for g in range(len(tr.group_layer)) if tr.group_index[g] < 1 and tr.group_frame[g] < 3]
    words = config_words(cfg, trace_layers(tr))
    dut = Accelerator(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    B, d = tr.dims["batch"], tr.dims["d_model"]

    async def host(ctx):
        for w in words:
            ctx.set(dut.cfg.valid, 1)
            ctx.set(dut.cfg.p.data.as_value(), w)
            await ctx.tick()
        ctx.set(dut.cfg.valid, 0)
        for g in groups:
            for bits, last in row_beats(cfg, tr, g):
                ctx.set(dut.x.valid, 1)
                ctx.set(dut.x.p.data.as_value(), bits)
                ctx.set(dut.x.p.last, last)
                await ctx.tick().until(dut.x.ready)
            ctx.set(dut.x.valid, 0)

    async def sink(ctx):
        ctx.set(dut.y.ready, 1)
        for _ in range(len(groups) * B):
            y, replay, row, last = await ctx.tick().sample(
                dut.y.p.data.as_value(), dut.y.p.user.replay, dut.y.p.user.row,
                dut.y.p.last).until(dut.y.valid)
            got.append((unpack_y(y, d), int(replay), int(row), int(last)))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    sim.run_until(1e-8 * (len(words) + len(groups) * 2500))
    assert len(got) == len(groups) * B, f"{len(got)} rows out for {len(groups) * B} in"
    for k, (y, replay, row, last) in enumerate(got):
        g, b = groups[k // B], k % B
        where = (f"group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                 f"index {tr.group_index[g]}), row {b}")
        assert row == b and last == (b == B - 1), f"{where}: out of order (row {row}, last {last})"
        assert replay == tr.replay[g, b], f"{where}: replay bit {replay}, trace {tr.replay[g, b]}"
        bad = np.flatnonzero(y != tr.y[g, b])
        assert bad.size == 0, f"{where}, element {bad[0]}: RTL {y[bad[0]]}, trace {tr.y[g, b][bad[0]]}"
