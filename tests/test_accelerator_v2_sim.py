"""The v2 accelerator in amaranth.sim on every group of a small configuration's decode trace
(tb/board/small_trace.py): every output byte and replay bit, rows in order, in every schedule."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hw.accel.accelerator_v2 import AcceleratorV2
from hw.board.host import row_beats, trace_layers, unpack_y
from hw.board.host_v2 import config_words_v2
from sw.trace.decode import load_decode_trace
from tests.test_accelerator_sim import configure, send_group


@pytest.mark.parametrize("mode", ["drs", "chunk_rr", "static"])
def test_every_group_of_a_small_trace_v2(tmp_path, mode):
    from tb.board.small_trace import SMALL_ACCEL, write_small_trace

    tr = load_decode_trace(write_small_trace(tmp_path / "trace"))
    cfg = SMALL_ACCEL
    assert cfg.datapath == 2
    groups = list(range(len(tr.group_layer)))
    assert 0 < tr.replay.sum() < tr.replay.size, "the trace must both replay and compute"
    words = config_words_v2(cfg, trace_layers(tr), static=mode == "static", chunk_rr=mode == "chunk_rr")
    dut = AcceleratorV2(cfg)
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    got = []
    B, d = tr.dims["batch"], tr.dims["d_model"]

    async def host(ctx):
        await configure(ctx, dut, words)
        for g in groups:
            await send_group(ctx, dut, row_beats(cfg, tr, g))

    async def sink(ctx):
        ctx.set(dut.y.ready, 1)
        for _ in range(len(groups) * B):
            y, replay, row, last = await ctx.tick().sample(
                dut.y.p.data.as_value(), dut.y.p.user.replay, dut.y.p.user.row,
                dut.y.p.last).until(dut.y.valid)
            got.append((unpack_y(y, d), int(replay), int(row), int(last)))

    sim.add_testbench(host)
    sim.add_testbench(sink)
    sim.run_until(1e-8 * (len(words) + len(groups) * 1500))
    assert len(got) == len(groups) * B, f"{len(got)} rows out for {len(groups) * B} in"
    for k, (y, replay, row, last) in enumerate(got):
        g, b = groups[k // B], k % B
        where = (f"group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                 f"index {tr.group_index[g]}), row {b}")
        assert row == b and last == (b == B - 1), f"{where}: out of order (row {row}, last {last})"
        assert replay == tr.replay[g, b], f"{where}: replay bit {replay}, trace {tr.replay[g, b]}"
        bad = np.flatnonzero(y != tr.y[g, b])
        assert bad.size == 0, f"{where}, element {bad[0]}: RTL {y[bad[0]]}, trace {tr.y[g, b][bad[0]]}"
