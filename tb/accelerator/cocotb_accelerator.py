"""cocotb tests of the whole accelerator (through its AXI-Stream adapter) on a decode trace, with
cocotbext-axi bus models. Driven by ``test_accelerator.py``; configuration in the environment:

``FASTCAR_ACCEL``    accelerator config as JSON (must match the Verilog that was built)
``FASTCAR_TRACE``    decode trace directory
``FASTCAR_GROUPS``   ``full`` or ``first:N`` (every group whose in-frame position is < N: all
                     layers and frames, and self-contained because a position only ever replays
                     its own earlier outputs)
``FASTCAR_SEED``     seed of the idle/backpressure generators
``FASTCAR_STALL``    probability of an idle cycle on the inputs and of backpressure on the output
``FASTCAR_MODES``    comma-separated runs: ``drs``, ``static``, ``dense`` (tau = +inf, no replay)
``FASTCAR_REPORT``   JSON file to write the measured cycles into
"""

import json
import os

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamMonitor, AxiStreamSink, AxiStreamSource

from hw.host import config_words, group_beats, trace_layers
from sw import quant
from sw.config import AccelConfig
from sw.decode_trace import load_decode_trace, select_groups
from sw.perfmodel import trace_cycles
from tb.stalls import random_pauses


class TB:
    """Clock, reset and cocotbext-axi bus models around ``accelerator_axis``."""

    def __init__(self, dut, cfg: AccelConfig):
        self.dut, self.cfg = dut, cfg
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())

        def bus(prefix):
            return AxiStreamBus.from_prefix(dut, prefix)

        self.cfg_src = AxiStreamSource(bus("s_axis_cfg"), dut.clk, dut.rst)
        self.x_src = AxiStreamSource(bus("s_axis_x"), dut.clk, dut.rst)
        self.y_sink = AxiStreamSink(bus("m_axis_y"), dut.clk, dut.rst)
        self.x_mon = AxiStreamMonitor(bus("s_axis_x"), dut.clk, dut.rst)
        for h in (self.cfg_src, self.x_src, self.y_sink, self.x_mon):
            h.log.setLevel("WARNING")
        self.row_bytes = len(self.x_src.bus.tdata) // 8
        self.y_bytes = len(self.y_sink.bus.tdata) // 8

    def set_stalls(self, seed, p):
        for k, src in enumerate((self.cfg_src, self.x_src)):
            src.set_pause_generator(random_pauses(seed + k, p) if p else None)
        self.y_sink.set_pause_generator(random_pauses(seed + 7, p) if p else None)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def configure(self, words):
        n = len(self.cfg_src.bus.tdata) // 8
        await self.cfg_src.send(AxiStreamFrame(b"".join(w.to_bytes(n, "little") for w in words)))
        await self.cfg_src.wait()
        await ClockCycles(self.dut.clk, 4)


def beat_user(frame, beat, lanes):
    return frame.tuser if isinstance(frame.tuser, int) else frame.tuser[beat * lanes]


async def run_mode(dut, tr, cfg, groups, mode, seed, stall, log, *, reset=True, tb=None):
    """All ``groups`` of the trace in ``mode``; returns cycles per group and the counters.
    ``tb``: bus models to reuse (one set per bus, so that only one sink drives ``tready``)."""
    tb = tb or TB(dut, cfg)
    tb.set_stalls(seed, stall)
    if reset:
        await tb.reset()
    layers = trace_layers(tr)
    await tb.configure(config_words(cfg, layers, static=(mode == "static"),
                                    refresh_every=tr.manifest["decode"].get("refresh_every"),
                                    max_chain=tr.manifest["decode"].get("max_chain")))
    B, d = tr.dims["batch"], tr.dims["d_model"]
    threshold = None if mode != "dense" else quant.THRESHOLD_NEVER
    if mode == "dense":
        want_y = {g: quant.swiglu_int8(tr.x[g], tr.wg[tr.group_layer[g]], tr.wu[tr.group_layer[g]],
                                       tr.wd[tr.group_layer[g]], tr.layer_consts(tr.group_layer[g]))
                  for g in groups}
        want_r = {g: np.zeros(B, dtype=np.uint8) for g in groups}
    else:
        want_y = {g: tr.y[g] for g in groups}
        want_r = {g: tr.replay[g] for g in groups}

    # Scoreboard: rows in (seen by the monitor on the bus) against rows out.
    seen_in = []

    async def count_in():
        while True:
            frame = await tb.x_mon.recv()
            seen_in.append(len(frame.tdata) // tb.row_bytes)
    tasks = [cocotb.start_soon(count_in())]

    cycles = []

    async def watch_counters():
        last = int(dut.groups.value)
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            now = int(dut.groups.value)
            if now != last:
                cycles.append(int(dut.group_cycles.value))
                last = now
    tasks.append(cocotb.start_soon(watch_counters()))

    async def feed():
        for g in groups:
            await tb.x_src.send(AxiStreamFrame(group_beats(cfg, tr, g, tb.row_bytes, threshold=threshold)))
    tasks.append(cocotb.start_soon(feed()))

    rows_out = 0
    for n, g in enumerate(groups):
        frame = await with_timeout(tb.y_sink.recv(), 200_000, "ns")
        data = bytes(frame.tdata)
        assert len(data) == B * tb.y_bytes, (
            f"group {g}: {len(data) // tb.y_bytes} rows in one output frame (tlast), expected {B}")
        for b in range(B):
            y = np.frombuffer(data[b * tb.y_bytes:b * tb.y_bytes + d], dtype=np.int8)
            user = beat_user(frame, b, tb.y_bytes)
            replay, row = user & 1, user >> 1
            where = (f"{mode}: group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                     f"position {tr.group_index[g]}), row {b}")
            assert row == b, f"{where}: row {row} left in place of row {b}"
            assert replay == want_r[g][b], f"{where}: replay bit {replay}, expected {want_r[g][b]}"
            bad = np.flatnonzero(y != want_y[g][b])
            assert bad.size == 0, (f"{where}, element {bad[0]}: RTL {y[bad[0]]}, "
                                   f"expected {want_y[g][b][bad[0]]}")
            rows_out += 1
        if n % 256 == 255:
            log.info("%s: %d of %d groups bit-exact", mode, n + 1, len(groups))
    await ClockCycles(dut.clk, 50)
    for t in tasks:
        t.cancel()
    extra = tb.y_sink.count()
    assert extra == 0, f"{mode}: {extra} output frames beyond the {len(groups)} groups sent"
    assert sum(seen_in) == rows_out == len(groups) * B, (
        f"{mode}: {sum(seen_in)} rows in, {rows_out} out, {len(groups) * B} sent")
    assert len(cycles) == len(groups), f"{mode}: counter saw {len(cycles)} groups of {len(groups)}"
    counters = {name: int(getattr(dut, name).value) for name in
                ("total_cycles", "groups", "rows_replayed", "rows_computed")}
    counters["core_busy"] = [int(getattr(dut, f"core_busy_{p}").value) for p in range(cfg.cores)]
    assert counters["rows_replayed"] == int(sum(want_r[g].sum() for g in groups)), counters
    assert counters["total_cycles"] == sum(cycles), counters
    return list(cycles), counters


@cocotb.test()
async def reset_mid_frame(dut):
    """Reset at a random cycle while groups are in flight, then the whole selection from frame 0:
    bit-exact again. Counters, control registers and every pipeline start clean; the weights, the
    replay cache and the TAS chain counters are memories and keep their contents, which frame 0
    overwrites (it always computes, and writes chain 0)."""
    import random

    cfg = AccelConfig.from_dict(json.loads(os.environ["FASTCAR_ACCEL"]))
    tr = load_decode_trace(os.environ["FASTCAR_TRACE"])
    groups = select_groups(tr, os.environ.get("FASTCAR_GROUPS", "full"))
    seed = int(os.environ.get("FASTCAR_SEED", "1"))
    stall = float(os.environ.get("FASTCAR_STALL", "0"))
    rng = random.Random(seed)
    report = {"groups": groups, "stall": stall, "seed": seed, "resets": []}
    tb = TB(dut, cfg)
    for attempt in range(int(os.environ.get("FASTCAR_RESETS", "3"))):
        tb.set_stalls(seed + attempt, stall)
        await tb.reset()
        layers = trace_layers(tr)
        await tb.configure(config_words(cfg, layers, refresh_every=tr.manifest["decode"].get("refresh_every"),
                                        max_chain=tr.manifest["decode"].get("max_chain")))

        async def feed(src=tb.x_src, row_bytes=tb.row_bytes):
            for g in groups:
                await src.send(AxiStreamFrame(group_beats(cfg, tr, g, row_bytes)))
        task = cocotb.start_soon(feed())
        # Anywhere in the run: the cycle model's length of it (no stalls) bounds the range.
        at = rng.randrange(50, int(trace_cycles(cfg, tr.replay[groups]).sum()))
        await ClockCycles(dut.clk, at)
        taken = int(dut.groups.value)
        dut.rst.value = 1
        await ClockCycles(dut.clk, rng.randrange(1, 4))
        dut.rst.value = 0
        task.cancel()
        # The host side of a reset: what was queued for the interrupted run is dropped.
        tb.x_src.clear()
        tb.y_sink.clear()
        await ClockCycles(dut.clk, 2)
        while not tb.x_mon.empty():       # the scoreboard counts the new run's rows only
            tb.x_mon.recv_nowait()
        assert int(dut.groups.value) == 0 and int(dut.total_cycles.value) == 0, "counters survived the reset"
        dut._log.info("reset at cycle %d of the run (%d groups finished before it)", at, taken)
        cycles, counters = await run_mode(dut, tr, cfg, groups, "drs", seed + attempt, stall, dut._log,
                                          reset=False, tb=tb)
        report["resets"].append({"at_cycle": at, "groups_before": taken, "groups_after": len(cycles)})
    if os.environ.get("FASTCAR_REPORT"):
        with open(os.environ["FASTCAR_REPORT"], "w") as f:
            json.dump(report, f)


@cocotb.test()
async def run_trace(dut):
    cfg = AccelConfig.from_dict(json.loads(os.environ["FASTCAR_ACCEL"]))
    tr = load_decode_trace(os.environ["FASTCAR_TRACE"])
    groups = select_groups(tr, os.environ.get("FASTCAR_GROUPS", "full"))
    seed = int(os.environ.get("FASTCAR_SEED", "1"))
    stall = float(os.environ.get("FASTCAR_STALL", "0"))
    report = {"groups": groups, "stall": stall, "seed": seed, "modes": {}}
    for mode in os.environ.get("FASTCAR_MODES", "drs").split(","):
        cycles, counters = await run_mode(dut, tr, cfg, groups, mode, seed, stall, dut._log)
        report["modes"][mode] = {"cycles": cycles, **counters}
        dut._log.info("%s: %d groups, %d rows bit-exact, %d cycles (stall %.2f)", mode, len(groups),
                      counters["rows_replayed"] + counters["rows_computed"], counters["total_cycles"], stall)
    if os.environ.get("FASTCAR_REPORT"):
        with open(os.environ["FASTCAR_REPORT"], "w") as f:
            json.dump(report, f)
