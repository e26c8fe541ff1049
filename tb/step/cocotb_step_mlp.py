"""cocotb test of the MLP with FastCar in the step: the accelerator's gateware with each row's decision
given beside it (``Accelerator(cfg, decisions="row")``: the decision the attention's scores already
took, :class:`hw.step.tas_tap.TasTap`), against a full-step trace: every step and layer of the trace
as one group of the batch's rows, the MLP input ``m`` with the trace's ``tas`` and ``replay``, and
every output ``y`` (computed, or replayed from the cache the earlier frames wrote) and its tuser.

Configuration as ``cocotb_sampler`` (``trace``, ``seed``, ``stall``), with ``accel`` (the
accelerator's config) and ``plant`` = ``S:L:B:N`` (one expected element changed).

Bus models: cocotbext-axi ``AxiStreamSource`` on ``s_axis_cfg`` and ``s_axis_x`` (a frame per
group, idle cycles) and ``AxiStreamSink`` on ``m_axis_y`` (backpressure); the scoreboard counts rows
in against rows out.
"""


import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.accel.layouts import decided_row_in_layout, out_user_layout
from hw.board.host import config_words, unpack_y
from hw.lib.payload import fields, pack, unpack_field
from sw.config import AccelConfig
from sw.trace.full_step import load_full_step
from tb.runner import bench_config
from tb.step.bench import CLOCK_NS, Bench, plant_index, stream_model

MLP_CONSTS = ("mult_g", "shift_g", "mult_u", "shift_u", "lut", "mult_h", "shift_h", "mult_d", "shift_d")


def step_layers(t, layers):
    """Per layer, the MLP's weights and constants of a full-step trace, as ``config_words`` takes them."""
    return [dict(wg=t["wg"][n], wu=t["wu"][n], wd=t["wd"][n], **{k: t[k][n] for k in MLP_CONSTS})
            for n in range(layers)]


def position(s, prompt_len, n):
    """``(frame, in-frame index)`` of step ``s``'s position; the prompt's positions are frame 0's
    first indices (they compute, and frame 0 writes every index of the cache again)."""
    p = s - prompt_len
    return (0, s) if p < 0 else divmod(p, n)


class TB:
    def __init__(self, dut):
        self.dut = dut
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.cfg = stream_model(AxiStreamSource, dut, "s_axis_cfg")
        self.x = stream_model(AxiStreamSource, dut, "s_axis_x", stall_seed=0)
        self.y = stream_model(AxiStreamSink, dut, "m_axis_y", stall_seed=7)

    reset = Bench.reset


@cocotb.test()
async def mlp_trace(dut):
    config = bench_config()
    tr = load_full_step(config.require("trace"), verify=False)
    man, t = tr.manifest, tr.t
    S, L, B, d = (man["dims"][k] for k in ("steps", "layers", "batch", "d_model"))
    N, P0 = man["dims"]["tokens_per_frame"], man["prompt_len"]
    cfg: AccelConfig = config.require("accel")
    want = t["y"].astype(np.int64).copy()
    plant = config.plant
    if plant:
        idx = plant_index(plant)
        want[idx] = want[idx] + 1 if want[idx] < 127 else want[idx] - 1

    tb = TB(dut)
    await tb.reset()
    words = config_words(cfg, step_layers(t, L))
    await tb.cfg.send(AxiStreamFrame(words))
    await tb.cfg.wait()
    await ClockCycles(dut.clk, 4)

    lay = decided_row_in_layout(cfg)
    f_user = fields(out_user_layout(cfg))
    m_, tas, replay = t["m"], t["tas"].astype(np.int64), t["replay"].astype(np.int64)
    groups = [(s, li) for s in range(S) for li in range(L)]

    async def feed():
        for s, li in groups:
            index = position(s, P0, N)[1]
            await tb.x.send(AxiStreamFrame([pack(lay, {
                "x": m_[s, li, b], "tas": int(tas[s, li, b]), "replay": int(replay[s, li, b]),
                "layer": li, "index": index, "row": b}) for b in range(B)]))

    cocotb.start_soon(feed())
    rows_out = replays = 0
    for s, li in groups:
        frame = await tb.y.recv()
        assert len(frame.tdata) == B, (f"step {s}, layer {li}, block mlp: {len(frame.tdata)} rows out, "
                                       f"expected {B}")
        for b, bits in enumerate(frame.tdata):
            user = frame.tuser if isinstance(frame.tuser, int) else frame.tuser[b]
            where = f"step {s}, layer {li}, block mlp, row {b}"
            got_row, got_rep = unpack_field(f_user, user, "row"), unpack_field(f_user, user, "replay")
            assert got_row == b, f"{where}: row {got_row} out in its place"
            assert got_rep == replay[s, li, b], f"{where}: RTL replay {got_rep}, expected {replay[s, li, b]}"
            assert unpack_field(f_user, user, "tas") == tas[s, li, b], f"{where}: the TAS it carries"
            y = unpack_y(int(bits), d).astype(np.int64)
            bad = np.flatnonzero(y != want[s, li, b])
            if bad.size:
                n = int(bad[0])
                raise AssertionError(f"{where}{' (replayed)' if got_rep else ''}, element {n}: RTL {y[n]}, "
                                     f"expected {want[s, li, b, n]}")
            rows_out += 1
            replays += got_rep
    for _ in range(50):
        await RisingEdge(dut.clk)
    assert tb.y.empty(), "more rows out than in"
    assert rows_out == len(groups) * B, f"scoreboard: {len(groups) * B} rows in, {rows_out} out"
    dut._log.info(f"step mlp: {len(groups)} groups, {rows_out} rows bit-exact, {replays} of them replayed")
