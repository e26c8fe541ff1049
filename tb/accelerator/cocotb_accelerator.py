"""cocotb tests of the whole accelerator (through its AXI-Stream adapter) on a decode trace. Driven by
``test_accelerator.py`` (``tb/accelerator/runner.py``); configuration in one
:class:`sw.config.BenchConfig` (:func:`tb.runner.bench_config`), these fields:

``accel``      the accelerator (must match the Verilog that was built)
``trace``      decode trace directory
``groups``     ``full``, ``first:N`` or ``first:N:F`` (every group whose in-frame position is < N, in
               frames < F: all layers, and self-contained because a position only ever replays its
               own earlier outputs), or ``cover:N``
``seed``       seed of the idle/backpressure generators
``stall``      probability of an idle cycle on the inputs and of backpressure on the output
``x_stall``    probability of an idle cycle on ``x`` alone (default: ``stall``): near 1, the rows
               arrive far slower than the engine computes, as over the board's UART
``modes``      the runs, one after the other in this simulator: ``drs``, ``chunk_rr`` (chunk
               round-robin), ``static``, ``dense`` (tau = +inf, no replay; DRS), or ``mixed`` (a
               seeded random schedule for every group, the control word written between groups).
               The first run sends every configuration word through the stream; the later ones only
               the control word (the weights and tables stay).
``report``     JSON file to write the measured cycles into
``log_every``  a progress line every N groups
``resets``     ``reset_mid_frame``'s resets; ``cycles``: ``raw_model``'s cycles

The testbench has no Python that runs on every clock cycle unless the run asks for random stalls
(docs/verification.md, "Simulation speed"):

- ``m_axis_y``: cocotbext-axi ``AxiStreamSink`` at frame level, one list element per beat
  (``byte_size`` = the bus width); it sleeps while ``tvalid`` is low.
- ``s_axis_x``: the driver counts the beats it saw taken; they are the scoreboard's rows in.
- ``s_axis_cfg`` with stalls: cocotbext-axi ``AxiStreamSource`` with a pause generator
  (:func:`tb.stalls.random_pauses`), at frame level; ``m_axis_y``'s sink has one too.
- ``s_axis_x``, and ``s_axis_cfg`` without stalls: :class:`BeatDriver` drives the signals directly,
  one beat at a time, and sleeps until ``tready`` (the source model polls every cycle while it
  holds a beat, which would cost more than the simulator itself); with stalls, idle cycles before
  each beat (:func:`x_gaps`).
- Per-group cycles: the DUT's ``group_cycles`` counter, read once per output frame after its ``tlast``.
- Coverage: the DUT is built with its coverage counters (``hw.accel.accelerator.coverage_events``),
  read at the start and the end of each run; the report gives each run's counts.

With stalls, the input ``x`` also pauses now and then before a row for a length that lines the
cores' passes up (:func:`x_gaps`), so that both finish a pass in the same cycle.
"""

import functools
import json
import time

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, Edge, Event, FallingEdge, ReadOnly, RisingEdge, Timer
from cocotb.utils import get_sim_time
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

from hw.accel.accelerator import coverage_events, same_row_finish_possible, schedule_counters
from hw.accel.layouts import out_user_layout
from hw.board.host import ctrl_word, group_frames, trace_layers, unpack_y
from sw.config import AccelConfig
from sw.perf.cycles import trace_cycles
from sw.spec import quant
from sw.trace.corners import REQUANT_CLASSES, group_rules
from sw.trace.decode import load_decode_trace, select_groups
from tb.cache import cached_array, cached_config_words
from tb.runner import bench_config, design_key
from tb.stalls import random_pauses

CLOCK_NS = 10
#: The schedules a control word selects.
SCHEDULES = ("drs", "chunk_rr", "static")
#: Share of the groups of a stall run with one long pause before a row (:func:`x_gaps`).
ALIGN_P = 1 / 2


class BeatDriver:
    """Drives an AXI4-Stream input signal by signal, for runs without idle cycles.

    Like cocotbext-axi's source, it decides at each rising edge whether the beat was taken (by
    ``tready`` before the edge) and writes the next beat right after it; unlike the source, it
    never polls: ``tready`` is followed by a value-change trigger (it changes a few times per group
    on ``x`` and never on the always-ready configuration stream), and while it is low the driver
    sleeps. Between beats of back-to-back frames ``tvalid`` stays high. The cost is one Python
    wake-up and one write per beat, and none per idle cycle.
    """

    def __init__(self, bus, clock, on_frame=None, taken=None):
        self.bus, self.clock, self.on_frame, self.taken = bus, clock, on_frame, taken
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

    async def send(self, frames, gaps=None):
        """Send ``frames`` (lists of beat values; ``tlast`` on the last beat of each) back to back;
        ``gaps(n, i)``: idle cycles (``tvalid`` low) before beat ``i`` of frame ``n``."""
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
                    idle = gaps(n, i) if gaps else 0
                    if idle:
                        bus.tvalid.value = 0
                        await ClockCycles(self.clock, idle)     # resumes just after a rising edge
                        bus.tvalid.value = 1
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
                    if self.taken is not None:
                        self.taken[0] += 1
                if self.on_frame:
                    self.on_frame(n)
            bus.tvalid.value = 0
            if self.has_tlast:
                bus.tlast.value = 0
        finally:
            follower.cancel()


class FrameReader:
    """Takes ``m_axis_y`` without backpressure, for runs without stalls: ``tready`` is held high once,
    the reader sleeps until ``tvalid`` rises and then reads one beat per rising edge while ``tvalid``
    is high, a frame per ``tlast``. The same ``recv``/``count``/``clear`` as cocotbext-axi's sink,
    without its write of ``tready`` in every active cycle (each write makes the simulator evaluate
    the design again)."""

    def __init__(self, bus, clock):
        from collections import deque
        from types import SimpleNamespace

        self.bus, self.clock = bus, clock
        self._frame = SimpleNamespace
        self.queue, self.event, self.beats, self.users = deque(), Event(), [], []
        bus.tready.value = 1
        cocotb.start_soon(self._run())

    async def _run(self):
        edge, rise = RisingEdge(self.clock), RisingEdge(self.bus.tvalid)
        bus = self.bus
        while True:
            await edge
            if bus.tvalid.value:                    # its value before this edge: a beat taken
                self.beats.append(int(bus.tdata.value))
                self.users.append(int(bus.tuser.value))
                if bus.tlast.value:
                    self.queue.append(self._frame(tdata=self.beats, tuser=self.users))
                    self.beats, self.users = [], []
                    self.event.set()
            else:
                await rise

    async def recv(self):
        while not self.queue:
            self.event.clear()
            await self.event.wait()
        return self.queue.popleft()

    def count(self) -> int:
        return len(self.queue)

    def clear(self):
        self.queue.clear()
        self.beats, self.users = [], []

    def set_pause_generator(self, gen):
        if gen is not None:
            raise RuntimeError("FrameReader takes every beat: backpressure needs the AxiStreamSink")


class TB:
    """Clock, reset and bus models around ``accelerator_axis`` (``backpressure``: a cocotbext-axi
    sink on ``y`` that can withhold ``tready``; else a :class:`FrameReader`)."""

    def __init__(self, dut, cfg: AccelConfig, *, backpressure: bool = True):
        self.dut, self.cfg = dut, cfg
        cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
        self.bus = {p: AxiStreamBus.from_prefix(dut, p) for p in ("s_axis_cfg", "s_axis_x", "m_axis_y")}
        width = {p: len(b.tdata) for p, b in self.bus.items()}
        # One list element per beat: the models never split a wide beat into byte lanes.
        if backpressure:
            self.y_sink = AxiStreamSink(self.bus["m_axis_y"], dut.clk, dut.rst, byte_size=width["m_axis_y"])
            self.y_sink.log.setLevel("WARNING")
        else:
            self.y_sink = FrameReader(self.bus["m_axis_y"], dut.clk)
        # The scoreboard's rows in: the beats the x driver saw taken (tvalid and tready at an edge).
        self.x_taken = [0]
        # The inputs idle until a driver takes them (Icarus starts every signal at X, and the
        # accelerator's s_axis_x.tready depends on the row field of tdata).
        for p in ("s_axis_cfg", "s_axis_x"):
            self.bus[p].tvalid.value = 0
            self.bus[p].tdata.value = 0
        self.cfg_src = None
        self.stall, self.x_gaps = 0.0, None
        self.group_info = {}          # frame -> (replay mask, schedule), for x_gaps
        self.width = width

    def set_stalls(self, seed, p, x_p=None):
        """Random idle cycles on both inputs and backpressure on the output with probability ``p``
        (a cocotbext-axi source and sink with pause generators on ``cfg`` and ``y``; on ``x`` the
        direct driver with the same idle cycles drawn per beat, :func:`x_gaps`); ``p = 0``: the
        direct drivers and no backpressure. ``x_p``: the idle probability on ``x`` alone, when it
        differs from ``p``."""
        self.stall = p
        x_p = p if x_p is None else x_p
        if p:
            if self.cfg_src is None:
                self.cfg_src = AxiStreamSource(self.bus["s_axis_cfg"], self.dut.clk, self.dut.rst,
                                               byte_size=self.width["s_axis_cfg"])
                self.cfg_src.log.setLevel("WARNING")
            self.cfg_src.set_pause_generator(random_pauses(seed, p))
            self.y_sink.set_pause_generator(random_pauses(seed + 7, p))
        else:
            if self.cfg_src is not None:
                raise RuntimeError("a testbench with stalls cannot switch to the direct drivers")
            self.y_sink.set_pause_generator(None)
        self.x_gaps = x_gaps(seed + 1, x_p, self.cfg, self.group_info) if x_p else None

    async def reset(self):
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 5)
        self.dut.rst.value = 0
        await ClockCycles(self.dut.clk, 2)

    async def send(self, stream: str, frames, on_frame=None, first: int = 0):
        """``frames`` (lists of beat values) on ``cfg`` or ``x``, through whichever driver is set
        (``on_frame(n)``: called when frame ``n`` has been taken, without stalls only; ``first``:
        the number of the first of ``frames`` in the run)."""
        if self.stall and stream == "cfg":
            for beats in frames:
                await self.cfg_src.send(AxiStreamFrame(list(beats)))
            await self.cfg_src.wait()
        else:
            gaps = None
            if stream == "x" and self.x_gaps is not None:
                def gaps(n, i):
                    return self.x_gaps(first + n, i)
            taken = self.x_taken if stream == "x" else None
            await BeatDriver(self.bus[f"s_axis_{stream}"], self.dut.clk, on_frame, taken).send(frames, gaps)

    async def drop_inputs(self):
        """The host side of a reset: whatever was queued for the interrupted run is dropped."""
        if self.stall:
            self.cfg_src.clear()
        await FallingEdge(self.dut.clk)
        for p in ("s_axis_cfg", "s_axis_x") if not self.stall else ("s_axis_x",):
            self.bus[p].tvalid.value = 0
        self.y_sink.clear()

    async def configure(self, words):
        await self.send("cfg", [words])
        if self.stall:
            # The configuration stream is idle from here on; its pause generator would only cost a
            # Python wake-up per cycle. Removing it leaves the source paused if the generator's last
            # value was a pause, and a later control word would then never be sent (``--seed 4``
            # hung on the first change of schedule): the pause is cleared too.
            self.cfg_src.set_pause_generator(None)
            self.cfg_src.pause = False
        await ClockCycles(self.dut.clk, 4)


def queue_gaps(cfg: AccelConfig) -> list[int]:
    """Pauses before a group's last row after which its decision leaves the TAS group in the very
    cycle the dispatcher takes row 1's (rows 0 and 1 computed, DRS), while the decision before it
    waits in the output queue: the queue moves up and takes a new decision in one cycle. Found by
    stepping the cycle model (:func:`sw.perf.cycles.group_cycles` with ``arrive``)."""
    from sw.perf.cycles import Latencies, group_cycles

    lat, B = Latencies(cfg), cfg.batch
    if B < 4:
        return []
    out = []
    for gap in range(4 * sum(cfg.mv_blocks_per_chunk)):
        arrive = [*range(B - 1), B - 1 + gap]
        hit = []

        def on_take(t, b, arrive=arrive, hit=hit):
            if b == 1 and arrive[B - 1] + lat.tas == t and arrive[B - 2] + lat.tas < t:
                hit.append(t)

        group_cycles(cfg, [0, 0] + [1] * (B - 2), "drs", lat=lat, arrive=arrive, on_take=on_take)
        if hit:
            out.append(gap)
    return out


@functools.cache
def same_row_gaps(cfg: AccelConfig, mask: tuple, schedule: str) -> tuple:
    """``(row, pause)`` pairs: a pause of ``pause`` idle cycles before ``row`` (the others back to back)
    after which two cores finish D passes of the same row in the same cycle, for the replay ``mask``
    and ``schedule``. Found by stepping the cycle model; empty when a row's chunks split evenly
    over the cores (then it cannot happen: docs/verification.md)."""
    from sw.perf.cycles import Latencies, group_cycles

    if not same_row_finish_possible(cfg) or schedule == "static":
        return ()
    lat, B, out = Latencies(cfg), len(mask), []
    for row in range(1, B):
        for gap in range(3 * sum(cfg.mv_blocks_per_chunk)):
            hit = []
            arrive = [b + (gap if b >= row else 0) for b in range(B)]
            group_cycles(cfg, mask, schedule, lat=lat, arrive=arrive,
                         on_finish=lambda t, rows, hit=hit: hit.append(len(rows) != len(set(rows))))
            if any(hit):
                out.append((row, gap))
    return tuple(out)


def x_gaps(seed: int, p: float, cfg: AccelConfig, groups: dict):
    """Idle cycles before each row on ``x`` in the stall runs, as ``gaps(frame, beat)``: as many as a
    pause with probability ``p`` in every cycle gives, and in a share :data:`ALIGN_P` of the groups
    one long pause (``groups[frame] = (replay mask, schedule)``, set by the run):

    - static schedule, two or more computed rows: before the second computed row, of a length that
      lines the two rows' passes up on two cores (one chunk's GU and D blocks, less 1 or 3; the
      cycle model, stepped with such gaps, finds these), so that both cores finish a pass in the
      same cycle;
    - DRS or chunk round-robin, rows 0 and 1 computed: before the last row, one of
      :func:`queue_gaps`, so that the TAS group's output queue moves up and takes a decision in the
      same cycle;
    - DRS or chunk round-robin where a row's chunks do not split evenly over the cores (the small
      geometry): in half of the other aligned groups, one of :func:`same_row_gaps`, so that two
      cores finish chunks of one row in the same cycle.
    """
    import random

    rng = random.Random(seed)
    period = sum(cfg.mv_blocks_per_chunk)
    align, queue = [period - 3, period - 1], queue_gaps(cfg)
    chosen = {}

    def gaps(n, i):
        if n not in chosen:
            chosen[n] = None
            mask, schedule = groups.get(n, (None, None))
            if mask is not None and rng.random() < ALIGN_P:
                computed = np.flatnonzero(np.asarray(mask) == 0)
                same_row = same_row_gaps(cfg, tuple(int(v) for v in mask), schedule)
                if same_row and rng.random() < 0.5:
                    chosen[n] = rng.choice(same_row)
                elif schedule == "static" and computed.size >= 2:
                    chosen[n] = (int(computed[1]), rng.choice(align))
                elif schedule != "static" and queue and mask[0] == mask[1] == 0:
                    chosen[n] = (len(mask) - 1, rng.choice(queue))
        if chosen[n] is not None and chosen[n][0] == i:
            return chosen[n][1]
        k = 0
        while rng.random() < p:
            k += 1
        return k

    return gaps


def _signed(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


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


def read_counters(dut, cfg) -> dict:
    """The DUT's counters now (the coverage and job counters included)."""
    names = ["total_cycles", "groups", "rows_replayed", "rows_computed",
             *(f"core_busy_{p}" for p in range(cfg.cores)), *coverage_events(cfg), *schedule_counters(cfg)]
    return {name: int(getattr(dut, name).value) for name in names}


def expected_jobs(cfg: AccelConfig, plan) -> dict:
    """The job counters (:func:`hw.accel.accelerator.schedule_counters`) that the schedule rule
    gives for ``plan``, ``(replay mask, schedule)`` per group: under static, every chunk of
    computed row ``b`` on core ``b mod cores``; under chunk round-robin, chunk ``j`` of every
    computed row on core ``j mod cores``; DRS groups are not counted."""
    S, P = cfg.chunks, cfg.cores
    out = dict.fromkeys(schedule_counters(cfg), 0)
    for mask, schedule in plan:
        if schedule not in ("static", "chunk_rr"):
            continue
        for b in np.flatnonzero(np.asarray(mask) == 0):
            for j in range(S):
                p = int(b) % P if schedule == "static" else j % P
                out[f"obs_jobs_{p}"] += 1
                out[f"obs_key_sum_{p}"] += int(b) * S + j
    return out


def schedules(mode: str, n: int, seed: int) -> list[str]:
    """The schedule of each of ``n`` groups in ``mode`` (``mixed``: seeded random, changing often)."""
    import random

    if mode == "mixed":
        rng = random.Random(seed)
        return [rng.choice(SCHEDULES) for _ in range(n)]
    return ["drs" if mode == "dense" else mode] * n


async def run_mode(dut, tr, cfg, groups, mode, seed, stall, log, *, reset=True, tb=None, configured=False,
                   x_stall=None):
    """All ``groups`` of the trace in ``mode``; returns cycles per group and the counters.
    ``tb``: bus models to reuse (one set per bus, so that only one sink drives ``tready``);
    ``configured``: the weights and tables are in from an earlier run, only the control word is sent;
    ``x_stall``: the idle probability on ``x`` when it differs from ``stall``."""
    log_every = bench_config().log_every          # a progress line every this many groups
    tb = tb or TB(dut, cfg)
    tb.set_stalls(seed, stall, x_stall)
    if reset:
        await tb.reset()
    cpu0, sim0 = time.process_time(), get_sim_time("ns")
    guard = {"refresh_every": tr.manifest["decode"].get("refresh_every"),
             "max_chain": tr.manifest["decode"].get("max_chain")}
    sched = schedules(mode, len(groups), seed)
    ctrl = {s: ctrl_word(cfg, static=(s == "static"), chunk_rr=(s == "chunk_rr"), **guard) for s in SCHEDULES}
    if configured:
        await tb.configure([ctrl[sched[0]]])
    else:
        await tb.configure(cached_config_words(cfg, trace_layers(tr), static=(sched[0] == "static"),
                                               chunk_rr=(sched[0] == "chunk_rr"), **guard))
    config_cycles = int((get_sim_time("ns") - sim0) // CLOCK_NS)
    config_cpu = time.process_time() - cpu0
    B, d = tr.dims["batch"], tr.dims["d_model"]
    rows = np.arange(B)
    threshold = None if mode != "dense" else quant.THRESHOLD_NEVER
    want_y, want_r = expected(tr, groups, mode)
    frames = group_frames(cfg, tr, groups, threshold=threshold)
    tb.group_info.clear()
    tb.group_info.update({n: (want_r[g], sched[n]) for n, g in enumerate(groups)})
    before = read_counters(dut, cfg)
    first_group = before["groups"]
    lay = out_user_layout(cfg)
    user_at = {name: lay[name].offset for name in ("replay", "row", "tas")}
    row_mask, tas_bits = (1 << lay["row"].width) - 1, lay["tas"].width
    tas_mask = (1 << tas_bits) - 1
    # Model-only stretches: from a group's last row taken to its output frame, the testbench's
    # Python sleeps (but for the few beats of the output); their speed is the simulator's own under
    # this run's activity.
    taken, quiet = {}, [0, 0.0]
    out_done = [Event() for _ in groups]

    def frame_taken(n):
        taken[n] = (get_sim_time("ns"), time.process_time())

    async def feed_mixed():
        """One group at a time; a new schedule's control word once the group before has left."""
        cur = sched[0]
        for n, beats in enumerate(frames):
            if sched[n] != cur:
                await out_done[n - 1].wait()
                await tb.send("cfg", [[ctrl[sched[n]]]])
                cur = sched[n]
            await tb.send("x", [beats], first=n)

    x_taken0 = tb.x_taken[0]
    # The run proper, measured from here: the rows packed and the expected outputs ready.
    wall1, cpu1, sim1 = time.perf_counter(), time.process_time(), get_sim_time("ns")
    feed = cocotb.start_soon(feed_mixed() if mode == "mixed" else tb.send("x", frames, frame_taken))
    progress = [0]

    async def watch():
        """Fails the run when no output frame arrives for 20,000 cycles."""
        while True:
            seen = progress[0]
            await Timer(20_000 * CLOCK_NS, "ns")
            assert progress[0] != seen or seen == len(groups), (
                f"{mode}: no output for 20,000 cycles after {seen} of {len(groups)} groups")

    watchdog = cocotb.start_soon(watch())

    rows_out, cycles = 0, []
    for n, g in enumerate(groups):
        frame = await tb.y_sink.recv()
        progress[0] = n + 1
        if n in taken:
            quiet[0] += get_sim_time("ns") - taken[n][0]
            quiet[1] += time.process_time() - taken[n][1]
        # The group's counters count registered events: they change at the edge after the one
        # that took the tlast beat; read them after it.
        await RisingEdge(dut.clk)
        await ReadOnly()
        done = int(dut.groups.value) - first_group
        assert done == n + 1, f"{mode}: group counter at {done} after output frame {n + 1}"
        cycles.append(int(dut.group_cycles.value))
        assert len(frame.tdata) == B, (
            f"group {g}: {len(frame.tdata)} rows in one output frame (tlast), expected {B}")
        # The host's own unpacking (one rule for the byte order, which the board host uses too).
        y = np.stack([unpack_y(int(v), d) for v in frame.tdata])
        user = np.array([beat_user(frame, b) for b in range(B)], dtype=object)
        u_replay, u_row = (user >> user_at["replay"]) & 1, (user >> user_at["row"]) & row_mask
        u_tas = [_signed((int(u) >> user_at["tas"]) & tas_mask, tas_bits) for u in user]
        if ((u_row != rows).any() or (u_replay != want_r[g]).any() or (y != want_y[g]).any()
                or (np.array(u_tas) != tr.tas[g]).any()):
            # A corner trace names the rules the group exercises (sw/trace/corners.py).
            rules = group_rules(tr.manifest, g)
            decision = [r for r in rules if not r.startswith(REQUANT_CLASSES)]
            requant = [r for r in rules if r.startswith(REQUANT_CLASSES)]
            for b in range(B):          # name the first row and element that differ
                replay, row = u_replay[b], u_row[b]
                where = (f"{mode}: group {g} (layer {tr.group_layer[g]}, frame {tr.group_frame[g]}, "
                         f"position {tr.group_index[g]}, schedule {sched[n]}), row {b}")
                assert row == b, f"{where}: row {row} left in place of row {b}"
                assert u_tas[b] == tr.tas[g][b], f"{where}: TAS {u_tas[b]}, expected {tr.tas[g][b]}"
                assert replay == want_r[g][b], (f"{where}: replay bit {replay}, expected {want_r[g][b]}"
                                                + (f"; the group exercises {', '.join(decision)}"
                                                   if decision else ""))
                bad = np.flatnonzero(y[b] != want_y[g][b])
                assert bad.size == 0, (f"{where}, element {bad[0]}: RTL {y[b][bad[0]]}, "
                                       f"expected {want_y[g][b][bad[0]]}"
                                       + (f"; the group exercises {', '.join(requant)}" if requant else ""))
        rows_out += B
        out_done[n].set()
        if n % log_every == log_every - 1:
            log.info("%s: %d of %d groups bit-exact", mode, n + 1, len(groups))
    await feed
    await ClockCycles(dut.clk, 50)
    extra = tb.y_sink.count()
    assert extra == 0, f"{mode}: {extra} output frames beyond the {len(groups)} groups sent"
    watchdog.cancel()
    rows_in = tb.x_taken[0] - x_taken0
    assert rows_in == rows_out == len(groups) * B, (
        f"{mode}: {rows_in} rows in, {rows_out} out, {len(groups) * B} sent")
    after = read_counters(dut, cfg)
    delta = {k: after[k] - before[k] for k in after}
    counters = {k: delta[k] for k in ("total_cycles", "groups", "rows_replayed", "rows_computed")}
    counters["core_busy"] = [delta[f"core_busy_{p}"] for p in range(cfg.cores)]
    # Cycle counts of this run; a peak is the highest since the reset.
    counters["coverage"] = {k: after[k] if k.endswith("_peak") else delta[k] for k in coverage_events(cfg)}
    refused = counters["coverage"]["cov_result_refused"]
    assert refused == 0, (f"{mode}: {refused} cycles in which a result reached the reorder buffer with its "
                          f"slot full (the accelerator relies on every slot being free)")
    assert counters["rows_replayed"] == int(sum(want_r[g].sum() for g in groups)), counters
    assert counters["total_cycles"] == sum(cycles), counters
    jobs = {k: delta[k] for k in schedule_counters(cfg)}
    want_jobs = expected_jobs(cfg, [(want_r[g], sched[n]) for n, g in enumerate(groups)])
    assert jobs == want_jobs, (f"{mode}: jobs per core under the static and chunk round-robin schedules "
                               f"{jobs}; the schedules' rule gives {want_jobs}")
    counters["rows_checked"] = rows_out
    counters["schedules"] = {s: sched.count(s) for s in SCHEDULES if s in sched}
    # The run without its configuration (reported apart: config_cycles, config_cpu_s) and without
    # packing the rows and reading the expected outputs.
    counters["sim_cycles"] = int((get_sim_time("ns") - sim1) // CLOCK_NS)
    counters["wall_s"] = time.perf_counter() - wall1
    counters["cpu_s"] = time.process_time() - cpu1
    counters["config_cycles"], counters["config_cpu_s"] = config_cycles, config_cpu
    counters["config_words"] = "control word" if configured else "every word"
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

    bench = bench_config()
    cfg: AccelConfig = bench.require("accel")
    tr = load_decode_trace(bench.require("trace"))
    groups = select_groups(tr, bench.groups)
    seed, stall = bench.seed, bench.stall
    rng = random.Random(seed)
    report = {"groups": groups, "stall": stall, "seed": seed, "resets": []}
    tb = TB(dut, cfg, backpressure=stall > 0)
    guard = tr.manifest["decode"]
    words = cached_config_words(cfg, trace_layers(tr), refresh_every=guard.get("refresh_every"),
                                max_chain=guard.get("max_chain"))
    frames = group_frames(cfg, tr, groups)
    for attempt in range(bench.resets):
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
        tb.x_taken[0] = 0                 # the scoreboard counts the new run's rows only
        assert int(dut.groups.value) == 0 and int(dut.total_cycles.value) == 0, "counters survived the reset"
        dut._log.info("reset at cycle %d of the run (%d groups finished before it)", at, taken)
        cycles, counters = await run_mode(dut, tr, cfg, groups, "drs", seed + attempt, stall, dut._log,
                                          reset=False, tb=tb)
        report["resets"].append({"at_cycle": at, "groups_before": taken, "groups_after": len(cycles)})
    if bench.report:
        with open(bench.report, "w") as f:
            json.dump(report, f)


@cocotb.test()
async def raw_model(dut):
    """The simulator alone: the clock and one long timer (``cycles`` cycles), inputs idle and
    no Python in between; what ``python -m tb.simspeed`` compares the testbench with."""
    cocotb.start_soon(Clock(dut.clk, CLOCK_NS, unit="ns").start())
    dut.rst.value = 1
    await ClockCycles(dut.clk, 5)
    dut.rst.value = 0
    bench = bench_config()
    n = bench.cycles
    wall0, cpu0 = time.perf_counter(), time.process_time()
    await Timer(n * CLOCK_NS, unit="ns")
    report = {"sim_cycles": n, "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0}
    with open(bench.require("report"), "w") as f:
        json.dump(report, f)


@cocotb.test()
async def run_trace(dut):
    bench = bench_config()
    cfg: AccelConfig = bench.require("accel")
    tr = load_decode_trace(bench.require("trace"))
    groups = select_groups(tr, bench.groups)
    seed, stall = bench.seed, bench.stall
    x_stall = stall if bench.x_stall is None else bench.x_stall
    report = {"groups": groups, "stall": stall, "x_stall": x_stall, "seed": seed, "modes": {}}
    tb = TB(dut, cfg, backpressure=stall > 0)
    for k, mode in enumerate(bench.modes):
        # One reset and the whole configuration for the first run; the later runs keep both.
        cycles, counters = await run_mode(dut, tr, cfg, groups, mode, seed, stall, dut._log, tb=tb,
                                          reset=(k == 0), configured=(k > 0), x_stall=x_stall)
        report["modes"][mode] = {"cycles": cycles, **counters}
        dut._log.info("%s: %d groups, %d rows bit-exact, %d cycles (stall %.2f), %.0f simulated cycles/s",
                      mode, len(groups), counters["rows_replayed"] + counters["rows_computed"],
                      counters["total_cycles"], stall, counters["sim_cycles"] / counters["wall_s"])
    if bench.report:
        with open(bench.report, "w") as f:
            json.dump(report, f)
