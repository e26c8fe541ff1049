"""cocotb tests of the whole accelerator (through its AXI-Stream adapter) on a decode trace. Driven by
``test_accelerator.py``; configuration in the environment:

``FASTCAR_ACCEL``    accelerator config as JSON (must match the Verilog that was built)
``FASTCAR_TRACE``    decode trace directory
``FASTCAR_GROUPS``   ``full``, ``first:N`` or ``first:N:F`` (every group whose in-frame position
                     is < N, in frames < F: all layers, and self-contained because a position only
                     ever replays its own earlier outputs)
``FASTCAR_SEED``     seed of the idle/backpressure generators
``FASTCAR_STALL``    probability of an idle cycle on the inputs and of backpressure on the output
``FASTCAR_MODES``    comma-separated runs: ``drs``, ``chunk_rr`` (chunk round-robin), ``static``,
                     ``dense`` (tau = +inf, no replay; DRS)
``FASTCAR_REPORT``   JSON file to write the measured cycles into
``FASTCAR_LOG_EVERY`` a progress line every N groups (default 256)

The testbench has no Python that runs on every clock cycle unless the run asks for random stalls
(docs/verification.md, "Simulation speed"):

- ``m_axis_y``: cocotbext-axi ``AxiStreamSink`` at frame level, one list element per beat
  (``byte_size`` = the bus width); it sleeps while ``tvalid`` is low.
- ``s_axis_x``: an ``AxiStreamMonitor`` the same way, whose frames are the scoreboard's rows in.
- ``s_axis_x`` and ``s_axis_cfg`` with stalls: cocotbext-axi ``AxiStreamSource`` with pause generators
  (:func:`tb.stalls.random_pauses`), at frame level. Without stalls: :class:`BeatDriver` drives the
  signals directly, one beat at a time, and sleeps until ``tready`` (the source model polls every
  cycle while it holds a beat, which would cost more than the simulator itself).
- Per-group cycles: the DUT's ``group_cycles`` counter, read once per output frame after its ``tlast``.
"""

import json
import os
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Edge, Event, FallingEdge, ReadOnly, RisingEdge, Timer, with_timeout
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamMonitor, AxiStreamSink, AxiStreamSource

from hw.board.host import group_frames, trace_layers
from sw.config import AccelConfig
from sw.golden import quant
from sw.perf.cycles import trace_cycles
from sw.trace.corners import REQUANT_CLASSES, group_rules
from sw.trace.decode import load_decode_trace, select_groups
from tb.cache import cached_array, cached_config_words
from tb.runner import design_key
from tb.stalls import random_pauses

CLOCK_NS = 10
#: Progress line every this many groups (``FASTCAR_LOG_EVERY``).
LOG_EVERY = max(1, int(os.environ.get("FASTCAR_LOG_EVERY", "256")))


class BeatDriver:
    """Drives an AXI4-Stream input signal by signal, for runs without idle cycles.

    Like cocotbext-axi's source, it decides at each rising edge whether the beat was taken (by
    ``tready`` before the edge) and writes the next beat right after it; unlike the source, it
    never polls: ``tready`` is followed by a value-change trigger (it changes a few times per group
    on ``x`` and never on the always-ready configuration stream), and while it is low the driver
    sleeps. Between beats of back-to-back frames ``tvalid`` stays high. The cost is one Python
    wake-up and one write per beat, and none per idle cycle.
    """

    def __init__(self, bus, clock, on_frame=None):
        self.bus, self.clock, self.on_frame = bus, clock, on_frame
        self.has_tlast = hasattr(bus, "tlast")
        bus.tvalid.value = 0
        if self.has_tlast:
            bus.tlast.value = 0

    async def _follow_tready(self):
        while True:
            await Edge(self.bus.tready)
            self.ready = bool(self.bus.tready.value)
            if self.ready and self._wake is not None:
                self._wake.set()

    async def send(self, frames):
        """Send ``frames`` (lists of beat values; ``tlast`` on the last beat of each) back to back."""
        bus, edge = self.bus, RisingEdge(self.clock)
        await edge
        # tready as it is after the last change: at a rising edge, its value before that edge.
        self.ready, self._wake = bool(bus.tready.value), None
        follower = cocotb.start_soon(self._follow_tready())
        try:
            bus.tvalid.value = 1
            for n, beats in enumerate(frames):
                last = len(beats) - 1
                for i, value in enumerate(beats):
                    bus.tdata.value = value
                    if self.has_tlast and i in (0, last):
                        bus.tlast.value = int(i == last)
                    while True:
                        if not self.ready:
                            self._wake = Event()
                            await self._wake.wait()       # tready rose after some edge
                            self._wake = None
                        await edge
                        if self.ready:                    # it was high before this edge: taken
                            break
                if self.on_frame:
                    self.on_frame(n)
            bus.tvalid.value = 0
            if self.has_tlast:
                bus.tlast.value = 0
        finally:
            follower.cancel()


class TB:
    """Clock, reset and bus models around ``accelerator_axis``."""

    def __init__(self, dut, cfg: AccelConfig):
        self.dut, self.cfg = dut, cfg
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.bus = {p: AxiStreamBus.from_prefix(dut, p) for p in ("s_axis_cfg", "s_axis_x", "m_axis_y")}
        width = {p: len(b.tdata) for p, b in self.bus.items()}
        # One list element per beat: the models never split a wide beat into byte lanes.
        self.y_sink = AxiStreamSink(self.bus["m_axis_y"], dut.clk, dut.rst, byte_size=width["m_axis_y"])
        self.x_mon = AxiStreamMonitor(self.bus["s_axis_x"], dut.clk, dut.rst, byte_size=width["s_axis_x"])
        # The inputs idle until a driver takes them (Icarus starts every signal at X, and the
        # accelerator's s_axis_x.tready depends on the row field of tdata).
        for p in ("s_axis_cfg", "s_axis_x"):
            self.bus[p].tvalid.value = 0
            self.bus[p].tdata.value = 0
        self.cfg_src = self.x_src = None
        self.stall = 0.0
        self.width = width
        for h in (self.y_sink, self.x_mon):
            h.log.setLevel("WARNING")

    def set_stalls(self, seed, p):
        """Random idle cycles on both inputs and backpressure on the output with probability ``p``
        (cocotbext-axi sources and pause generators); ``p = 0``: the direct drivers."""
        self.stall = p
        if p:
            if self.cfg_src is None:
                self.cfg_src = AxiStreamSource(self.bus["s_axis_cfg"], self.dut.clk, self.dut.rst,
                                               byte_size=self.width["s_axis_cfg"])
                self.x_src = AxiStreamSource(self.bus["s_axis_x"], self.dut.clk, self.dut.rst,
                                             byte_size=self.width["s_axis_x"])
                for h in (self.cfg_src, self.x_src):
                    h.log.setLevel("WARNING")
            for k, src in enumerate((self.cfg_src, self.x_src)):
                src.set_pause_generator(random_pauses(seed + k, p))
            self.y_sink.set_pause_generator(random_pauses(seed + 7, p))
        else:
            if self.cfg_src is not None:
                raise RuntimeError("a testbench with stalls cannot switch to the direct drivers")
            self.y_sink.set_pause_generator(None)

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def send(self, stream: str, frames, on_frame=None):
        """``frames`` (lists of beat values) on ``cfg`` or ``x``, through whichever driver is set
        (``on_frame(n)``: called when frame ``n`` has been taken, without stalls only)."""
        if self.stall:
            src = self.cfg_src if stream == "cfg" else self.x_src
            for beats in frames:
                await src.send(AxiStreamFrame(list(beats)))
            await src.wait()
        else:
            await BeatDriver(self.bus[f"s_axis_{stream}"], self.dut.clk, on_frame).send(frames)

    async def drop_inputs(self):
        """The host side of a reset: whatever was queued for the interrupted run is dropped."""
        if self.stall:
            self.x_src.clear()
            self.cfg_src.clear()
        else:
            await FallingEdge(self.dut.clk)
            for p in ("s_axis_cfg", "s_axis_x"):
                self.bus[p].tvalid.value = 0
        self.y_sink.clear()

    async def configure(self, words):
        await self.send("cfg", [words])
        if self.stall:
            # The configuration stream is idle from here on; its pause generator would only cost a
            # Python wake-up per cycle.
            self.cfg_src.set_pause_generator(None)
        await ClockCycles(self.dut.clk, 4)


def beat_user(frame, beat):
    return frame.tuser if isinstance(frame.tuser, int) else frame.tuser[beat]


def expected(tr, groups, mode):
    """Per group: the output rows and replay bits the RTL must give in ``mode``. The dense outputs
    (the integer golden model on every row) are cached by content (:func:`tb.cache.cached_array`)."""
    B = tr.dims["batch"]
    if mode == "dense":
        def compute():
            ys = np.zeros((len(groups), B, tr.dims["d_model"]), np.int8)
            for n in sorted({int(tr.group_layer[g]) for g in groups}):
                sel = [i for i, g in enumerate(groups) if tr.group_layer[g] == n]   # a layer's rows at once
                x = tr.x[[groups[i] for i in sel]].reshape(-1, tr.dims["d_model"])
                ys[sel] = quant.swiglu_int8(x, tr.wg[n], tr.wu[n], tr.wd[n], tr.layer_consts(n)).reshape(
                    len(sel), B, -1)
            return ys
        # design_key covers sw/ (the golden model's code): a changed rule never meets old outputs.
        parts = [design_key(), np.asarray(groups), tr.x[groups], tr.group_layer[groups],
                 *(tr.t[k] for k in ("wg", "wu", "wd", "mult_g", "shift_g", "mult_u", "shift_u", "lut",
                                     "mult_h", "shift_h", "mult_d", "shift_d"))]
        ys = cached_array("dense-y", parts, compute)
        return dict(zip(groups, ys, strict=True)), {g: np.zeros(B, dtype=np.uint8) for g in groups}
    return {g: tr.y[g] for g in groups}, {g: tr.replay[g] for g in groups}


async def run_mode(dut, tr, cfg, groups, mode, seed, stall, log, *, reset=True, tb=None):
    """All ``groups`` of the trace in ``mode``; returns cycles per group and the counters.
    ``tb``: bus models to reuse (one set per bus, so that only one sink drives ``tready``)."""
    tb = tb or TB(dut, cfg)
    tb.set_stalls(seed, stall)
    if reset:
        await tb.reset()
    wall0, cpu0, sim0 = time.perf_counter(), time.process_time(), get_sim_time("ns")
    await tb.configure(cached_config_words(cfg, trace_layers(tr), static=(mode == "static"),
                                           chunk_rr=(mode == "chunk_rr"),
                                           refresh_every=tr.manifest["decode"].get("refresh_every"),
                                           max_chain=tr.manifest["decode"].get("max_chain")))
    config_cycles = int((get_sim_time("ns") - sim0) // CLOCK_NS)
    config_cpu = time.process_time() - cpu0
    B, d = tr.dims["batch"], tr.dims["d_model"]
    y_bytes, rows = tb.width["m_axis_y"] // 8, np.arange(B)
    threshold = None if mode != "dense" else quant.THRESHOLD_NEVER
    want_y, want_r = expected(tr, groups, mode)
    frames = group_frames(cfg, tr, groups, threshold=threshold)
    first_group = int(dut.groups.value)
    # Model-only stretches: from a group's last row taken to its output frame, the testbench's
    # Python sleeps (but for the few beats of the output); their speed is the simulator's own under
    # this run's activity.
    taken, quiet = {}, [0, 0.0]

    def frame_taken(n):
        taken[n] = (get_sim_time("ns"), time.process_time())

    feed = cocotb.start_soon(tb.send("x", frames, frame_taken))

    rows_out, cycles = 0, []
    for n, g in enumerate(groups):
        frame = await with_timeout(tb.y_sink.recv(), 200_000, "ns")
        if n in taken:
            quiet[0] += get_sim_time("ns") - taken[n][0]
            quiet[1] += time.process_time() - taken[n][1]
        # The group's counters change at the edge that took the tlast beat; read them after it.
        await ReadOnly()
        done = int(dut.groups.value) - first_group
        assert done == n + 1, f"{mode}: group counter at {done} after output frame {n + 1}"
        cycles.append(int(dut.group_cycles.value))
        assert len(frame.tdata) == B, (
            f"group {g}: {len(frame.tdata)} rows in one output frame (tlast), expected {B}")
        y = np.frombuffer(b"".join(int(v).to_bytes(y_bytes, "little") for v in frame.tdata),
                          dtype=np.int8).reshape(B, y_bytes)[:, :d]
        user = np.array([beat_user(frame, b) for b in range(B)])
        if (user >> 1 != rows).any() or (user & 1 != want_r[g]).any() or (y != want_y[g]).any():
            # A corner trace names the rules the group exercises (sw/trace/corners.py).
            rules = group_rules(tr.manifest, g)
            decision = [r for r in rules if not r.startswith(REQUANT_CLASSES)]
            requant = [r for r in rules if r.startswith(REQUANT_CLASSES)]
            for b in range(B):          # name the first row and element that differ
                replay, row = user[b] & 1, user[b] >> 1
                where = (f"{mode}: group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                         f"position {tr.group_index[g]}), row {b}")
                assert row == b, f"{where}: row {row} left in place of row {b}"
                assert replay == want_r[g][b], (f"{where}: replay bit {replay}, expected {want_r[g][b]}"
                                                + (f"; the group exercises {', '.join(decision)}"
                                                   if decision else ""))
                bad = np.flatnonzero(y[b] != want_y[g][b])
                assert bad.size == 0, (f"{where}, element {bad[0]}: RTL {y[b][bad[0]]}, "
                                       f"expected {want_y[g][b][bad[0]]}"
                                       + (f"; the group exercises {', '.join(requant)}" if requant else ""))
        rows_out += B
        if n % LOG_EVERY == LOG_EVERY - 1:
            log.info("%s: %d of %d groups bit-exact", mode, n + 1, len(groups))
    await feed
    await ClockCycles(dut.clk, 50)
    extra = tb.y_sink.count()
    assert extra == 0, f"{mode}: {extra} output frames beyond the {len(groups)} groups sent"
    rows_in = 0
    while not tb.x_mon.empty():
        rows_in += len(tb.x_mon.recv_nowait().tdata)
    assert rows_in == rows_out == len(groups) * B, (
        f"{mode}: {rows_in} rows in, {rows_out} out, {len(groups) * B} sent")
    counters = {name: int(getattr(dut, name).value) for name in
                ("total_cycles", "groups", "rows_replayed", "rows_computed")}
    counters["core_busy"] = [int(getattr(dut, f"core_busy_{p}").value) for p in range(cfg.cores)]
    assert counters["rows_replayed"] == int(sum(want_r[g].sum() for g in groups)), counters
    assert counters["total_cycles"] == sum(cycles), counters
    counters["rows_checked"] = rows_out
    counters["sim_cycles"] = int((get_sim_time("ns") - sim0) // CLOCK_NS)
    counters["wall_s"] = time.perf_counter() - wall0
    counters["cpu_s"] = time.process_time() - cpu0
    counters["config_cycles"], counters["config_cpu_s"] = config_cycles, config_cpu
    counters["quiet_cycles"] = int(quiet[0] // CLOCK_NS)
    counters["quiet_cpu_s"] = quiet[1]
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
    guard = tr.manifest["decode"]
    words = cached_config_words(cfg, trace_layers(tr), refresh_every=guard.get("refresh_every"),
                                max_chain=guard.get("max_chain"))
    frames = group_frames(cfg, tr, groups)
    for attempt in range(int(os.environ.get("FASTCAR_RESETS", "3"))):
        tb.set_stalls(seed + attempt, stall)
        await tb.reset()
        await tb.configure(words)
        task = cocotb.start_soon(tb.send("x", frames))
        # Anywhere in the run: the cycle model's length of it (no stalls) bounds the range.
        at = rng.randrange(50, int(trace_cycles(cfg, tr.replay[groups]).sum()))
        await ClockCycles(dut.clk, at)
        taken = int(dut.groups.value)
        dut.rst.value = 1
        await ClockCycles(dut.clk, rng.randrange(1, 4))
        dut.rst.value = 0
        task.cancel()
        await tb.drop_inputs()
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
async def raw_model(dut):
    """The simulator alone: the clock and one long timer (``FASTCAR_CYCLES`` cycles), inputs idle and
    no Python in between; what ``python -m tb.simspeed`` compares the testbench with."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    n = int(os.environ.get("FASTCAR_CYCLES", "200000"))
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await Timer(n * CLOCK_NS, unit="ns")
    report = {"sim_cycles": n, "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0}
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
    tb = TB(dut, cfg)
    for mode in os.environ.get("FASTCAR_MODES", "drs").split(","):
        cycles, counters = await run_mode(dut, tr, cfg, groups, mode, seed, stall, dut._log, tb=tb)
        report["modes"][mode] = {"cycles": cycles, **counters}
        dut._log.info("%s: %d groups, %d rows bit-exact, %d cycles (stall %.2f), %.0f simulated cycles/s",
                      mode, len(groups), counters["rows_replayed"] + counters["rows_computed"],
                      counters["total_cycles"], stall, counters["sim_cycles"] / counters["wall_s"])
    if os.environ.get("FASTCAR_REPORT"):
        with open(os.environ["FASTCAR_REPORT"], "w") as f:
            json.dump(report, f)
