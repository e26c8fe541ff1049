"""Cycle model of the proposed v2 MLP datapath (a design study: nothing here is built or RTL-checked).

v2 replaces v1's two cores of three 4x4 systolic tiles (96 MACs, one reducer memory) with two
weight-resident matrix-vector (MV) units of ``mv_in x mv_out`` MACs each (8 x 8 = 64: eight
activations times eight outputs per cycle). Per core and per hidden chunk ``c`` of ``F = d_ff /
chunks`` channels:

- **GU pass** (gate and up of chunk ``c``): ``(d_model / mv_in) * 2 * (F / mv_out)`` issue cycles
  (96 for the shipped model), output-block by output-block, a gate block then the matching up block;
- **D pass** (down of chunk ``c``): ``(F / mv_in) * (d_model / mv_out)`` issue cycles (48), output
  block by output block, each block's int32 sums added into the core's accumulator of the row
  (int32 accumulation inside the core, no reducer memory).

The D pass of ``c`` needs ``h_c = swiglu(gate_c, up_c)``, ready ``h_latency`` cycles after the
GU pass ends (MV pipeline, gate/up requantiser, SwiGLU stage). Each core interleaves its chunks
``k0, k1, ...`` as ``GU(k0) GU(k1) D(k0) GU(k2) D(k1) ... GU(kn) D(kn-1) D(kn)`` so that the
latency hides behind the next pass (fully while ``h_latency <= D pass``). Passes issue back to
back: the weights are addresses into block RAM, so the pipeline never drains between passes.

A group (one layer of one decode step, ``B`` rows, one group at a time) costs, from its first
row's beat to its last row's output:

- front end: row ``b`` arrives in cycle ``b``; its TAS runs on its own unit (``tas_units = B``:
  all rows at once) in ``d_model / tas_lanes`` steps plus the TAS pipeline; a replayed row leaves
  ``replayed_tail`` cycles after its decision (all-replayed group: ``B - 1 + 1 + 1 + 6 + 6 + 1 + 2
  = 20`` cycles), a computed row's chunks are dispatched one per cycle from ``dispatch`` cycles
  after its decision;
- the cores' passes (three schedules, below);
- the tail: an output block of a row is final when every core that worked on the row has
  finished that block of its last D pass for it (MV pipeline, accumulator write); the cores'
  accumulators are added (``core_sum``), the shared output requantisers (``out_lanes``) take the
  blocks in the order they become final, then ``req_latency`` and ``out_latency`` (row assembly,
  write-back to the replay cache, reorder buffer, output); rows leave in row order, one per cycle.

Schedules: ``row_static`` (every chunk of row ``b`` on core ``b mod P``), ``chunk_rr`` (chunk
``j`` of every row on core ``j mod P``), ``drs`` (each chunk to the core that can start it first;
ties to the lower core). Static schedules queue chunks per core (no head-of-line blocking).

``python -m sw.perf.study_v2 [--mhz F] [--drs-study]`` prints v1 against v2 on the shipped trace
(``docs/architecture.md``, "v2 datapath: design study").
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

__all__ = ["V2Geometry", "DEFAULT_V2", "SCHEDULES", "GroupSchedule", "group_schedule_v2",
           "group_cycles_v2", "trace_cycles_v2", "v1_group_cycles_chunk_rr", "v1_trace_cycles",
           "random_stalls", "resource_estimate"]

SCHEDULES = ("row_static", "chunk_rr", "drs")


def _levels(n: int) -> int:
    """Registered adder-tree levels over ``n`` operands."""
    return max(0, (n - 1).bit_length())


@dataclass(frozen=True)
class V2Geometry:
    """Geometry and pipeline latencies of the v2 datapath; the defaults are the proposal.

    Sizes: ``d_model``, ``d_ff``, ``batch`` (B rows per group) of the shipped model; ``cores`` MV
    units of ``mv_in x mv_out`` MACs; ``chunks`` hidden chunks per row.
    Front end: ``tas_lanes`` products per cycle per TAS unit, ``tas_units`` rows whose TAS runs at
    once (``batch``: all rows of a group in parallel; 1: one unit shared, rows one after another).
    """

    d_model: int = 96
    d_ff: int = 256
    batch: int = 4
    cores: int = 2
    mv_in: int = 8
    mv_out: int = 8
    chunks: int = 8
    tas_lanes: int = 16
    tas_units: int = 4
    #: Front end: the row's beat to its TAS unit (1), the decision register after the TAS pipeline
    #: (1), the cycle from a decision to the first chunk of a computed row entering a core (1),
    #: and from a decision to a replayed row's output (cache read, reorder buffer: v1's measured 2).
    handover: int = 1
    decide: int = 1
    dispatch: int = 1
    replayed_tail: int = 2
    #: MV pipeline: weight address register (1), DP16KD read with its output register (2), the
    #: MULT18X18D's input and output registers (2), ``log2(mv_in)`` adder-tree registers, the
    #: output block's accumulator (1).
    addr_latency: int = 1
    bram_latency: int = 2
    mult_latency: int = 2
    acc_latency: int = 1
    #: Requantiser (v1's ``hw/accel/requant.py``: 6 stages) and SwiGLU stage (v1's ``SwigluGate.PIPELINE``:
    #: table read, two registered products, store = 6); lanes shared by all cores.
    req_latency: int = 6
    swiglu_latency: int = 6
    gu_req_lanes: int = 2
    swiglu_lanes: int = 1
    #: Tail: a D block's sums written into the core's row accumulator (1), the cores' accumulators
    #: added (1), ``out_lanes`` output requantisers, then row assembly and output (2).
    acc_write: int = 1
    core_sum: int = 1
    out_lanes: int = 2
    out_latency: int = 2

    def __post_init__(self):
        for k, v in self.__dict__.items():
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"V2Geometry.{k} must be a non-negative integer, not {v!r}")
        F = self.d_ff // self.chunks if self.chunks else 0
        for name, n, m in (("d_ff", self.d_ff, self.chunks), ("d_model", self.d_model, self.mv_in),
                           ("d_model", self.d_model, self.mv_out), ("chunk width", F, self.mv_in),
                           ("chunk width", F, self.mv_out), ("d_model", self.d_model, self.tas_lanes)):
            if m < 1 or n % m:
                raise ValueError(f"V2Geometry: {name}={n} is not a multiple of {m}")
        if not 1 <= self.tas_units <= self.batch:
            raise ValueError("V2Geometry: tas_units must be 1 .. batch")
        # The model treats the shared stages' contention as the fixed worst case in h_latency; it
        # is only valid while each stage keeps up on average. (The output requantisers are queued
        # explicitly in the tail.)
        for name, need, have in self.stage_load():
            if need > have:
                raise ValueError(f"V2Geometry: {name} needs {need:.2f} values/cycle, has {have} lanes")

    # -- derived sizes ------------------------------------------------------------------------
    @property
    def chunk_width(self) -> int:
        return self.d_ff // self.chunks

    @property
    def macs(self) -> int:
        return self.cores * self.mv_in * self.mv_out

    @property
    def gu_cycles(self) -> int:
        """Issue cycles of one chunk's gate and up projections on one core."""
        return (self.d_model // self.mv_in) * 2 * (self.chunk_width // self.mv_out)

    @property
    def d_cycles(self) -> int:
        """Issue cycles of one chunk's down projection on one core."""
        return (self.chunk_width // self.mv_in) * (self.d_model // self.mv_out)

    @property
    def chunk_cycles(self) -> int:
        return self.gu_cycles + self.d_cycles

    @property
    def row_cycles(self) -> float:
        """Core cycles of one computed row spread over all cores (576 for the proposal)."""
        return self.chunks * self.chunk_cycles / self.cores

    @property
    def tas_pipeline(self) -> int:
        """The TAS unit's pipeline (``sw.perf.cycles.tas_pipeline_cycles``: multiplier + tree)."""
        return self.mult_latency + _levels(self.tas_lanes)

    @property
    def tas_steps(self) -> int:
        return self.d_model // self.tas_lanes

    @property
    def mv_latency(self) -> int:
        """Issue of an MV beat to its output block's sum (9 for the proposal)."""
        return (self.addr_latency + self.bram_latency + self.mult_latency + _levels(self.mv_in)
                + self.acc_latency)

    @property
    def h_serial(self) -> int:
        """Worst-case serialisation of the last gate/up output block: every core's last block at
        once through the narrower of the gate/up requantisers and the SwiGLU stage."""
        n = self.cores * self.mv_out
        return max(math.ceil(n / self.gu_req_lanes), math.ceil(n / self.swiglu_lanes))

    @property
    def h_latency(self) -> int:
        """End of a GU pass to its ``h`` chunk usable by the D pass (37 for the proposal)."""
        return self.mv_latency + self.req_latency + self.h_serial + self.swiglu_latency

    @property
    def d_block_beats(self) -> int:
        """Issue cycles of one D output block (the ``F / mv_in`` input beats of ``mv_out`` sums)."""
        return self.chunk_width // self.mv_in

    @property
    def out_block_cycles(self) -> int:
        return math.ceil(self.mv_out / self.out_lanes)

    @property
    def tail(self) -> int:
        """End of a row's last D pass to its output when nothing queues (23 for the proposal)."""
        return (self.mv_latency + self.acc_write + self.core_sum + self.out_block_cycles
                + self.req_latency + self.out_latency)

    @property
    def front(self) -> int:
        """Beat of row 0 to its decision with parallel TAS (15 for the proposal)."""
        return 1 + self.handover + self.tas_steps + self.tas_pipeline + self.decide

    def stage_load(self):
        """(stage, values per cycle needed at full MV rate, lanes) for the shared stages."""
        per_chunk = self.chunk_cycles
        return [("gate/up requantisers", self.cores * 2 * self.chunk_width / per_chunk, self.gu_req_lanes),
                ("SwiGLU stage", self.cores * self.chunk_width / per_chunk, self.swiglu_lanes)]


DEFAULT_V2 = V2Geometry()


# ---------------------------------------------------------------------------------------------
# The schedule
# ---------------------------------------------------------------------------------------------

@dataclass
class Pass:
    core: int
    row: int
    chunk: int
    kind: str          # "gu" or "d"
    start: int
    end: int
    issue: int         # issue cycles (end - start beyond them: stalls)


@dataclass
class GroupSchedule:
    cycles: int
    macs_done: int
    passes: list = field(default_factory=list)
    row_out: list = field(default_factory=list)     # end cycle of each row's output beat
    assignment: dict = field(default_factory=dict)  # (row, chunk) -> core


def _advance(t: int, n: int, stalls) -> tuple[int, int]:
    """(start, end) of ``n`` issue cycles from ``t`` on a core that cannot issue in the
    ``[s, e)`` intervals of ``stalls`` (sorted, disjoint)."""
    start = None
    for s, e in stalls:
        if e <= t:
            continue
        if s <= t:
            t = e
            continue
        if start is None:
            start = t
        if n == 0 or s >= t + n:
            break
        n -= s - t
        t = e
    return (t if start is None else start), t + n


class _Core:
    """One MV unit: ``GU(new)`` then ``D(previous)`` for each chunk it takes; ``flush`` runs the
    last pending ``D``."""

    def __init__(self, p: int, g: V2Geometry, stalls, passes: list):
        self.p, self.g, self.stalls, self.passes = p, g, stalls or [], passes
        self.free = 0             # first cycle the issue port is free
        self.pending = None       # (row, chunk, d_len, h_ready) whose D pass is still to do

    def _run(self, row, chunk, kind, t, n):
        s, e = _advance(t, n, self.stalls)
        if n:
            self.passes.append(Pass(self.p, row, chunk, kind, s, e, n))
        self.free = e
        return s, e

    def _run_pending(self, at_least=0):
        r, c, dl, hr = self.pending
        self.pending = None
        self._run(r, c, "d", max(self.free, hr, at_least), dl)

    def start_if_given(self, t: int, gu_len: int) -> int:
        """The cycle a chunk handed over at ``t`` would start its GU pass (no side effects)."""
        free = self.free
        if self.pending is not None:
            _, _, dl, hr = self.pending
            if _advance(max(free, hr), dl, self.stalls)[1] <= t:   # pending D fits the idle gap
                free = _advance(max(free, hr), dl, self.stalls)[1]
        return _advance(max(t, free), gu_len, self.stalls)[0]

    def take(self, row, chunk, t, gu_len, d_len):
        if self.pending is not None:
            _, _, dl, hr = self.pending
            if _advance(max(self.free, hr), dl, self.stalls)[1] <= t:
                self._run_pending()
        _, gu_end = self._run(row, chunk, "gu", max(t, self.free), gu_len)
        new = (row, chunk, d_len, gu_end + self.g.h_latency)
        if self.pending is not None:
            self._run_pending()
        self.pending = new

    def flush(self):
        if self.pending is not None:
            self._run_pending()


def _decisions(g: V2Geometry, B: int) -> list[int]:
    """End cycle of each row's replay decision (rows arrive one beat per cycle)."""
    unit_free = [0] * g.tas_units
    out = []
    for b in range(B):
        u = b % g.tas_units
        start = max(b + 1 + g.handover, unit_free[u])
        unit_free[u] = start + g.tas_steps
        out.append(start + g.tas_steps + g.tas_pipeline + g.decide)
    return out


def group_schedule_v2(g: V2Geometry, replay, schedule: str = "drs", *, work=None,
                      stalls=None) -> GroupSchedule:
    """The v2 schedule of one group for the replay mask ``replay[B]``.

    ``work[b][j]`` (default 1) scales chunk ``j`` of row ``b`` (0: skipped, 0.5: half its channels);
    ``stalls[p]`` lists ``(start, end)`` cycles in which core ``p`` cannot issue (backpressure).
    ``schedule`` is one of :data:`SCHEDULES` or ``chunk_rr_global`` (the DRS study's round robin
    whose counter does not restart at each row).
    """
    if schedule not in SCHEDULES + ("chunk_rr_global",):
        raise ValueError(f"schedule {schedule!r}: one of {SCHEDULES}")
    replay = [bool(r) for r in replay]
    B, P, S = len(replay), g.cores, g.chunks
    decided = _decisions(g, B)
    passes: list[Pass] = []
    cores = [_Core(p, g, stalls[p] if stalls else None, passes) for p in range(P)]
    assignment = {}
    macs = 0
    handout = -1
    for b in (b for b in range(B) if not replay[b]):
        avail = decided[b] + g.dispatch
        for j in range(S):
            w = 1.0 if work is None else float(work[b][j])
            gu_len, d_len = math.ceil(g.gu_cycles * w), math.ceil(g.d_cycles * w)
            macs += round(3 * g.d_model * g.chunk_width * w)
            t = max(avail, handout + 1)
            if schedule == "row_static":
                p = b % P
            elif schedule == "chunk_rr":
                p = j % P
            elif schedule == "chunk_rr_global":      # the round-robin counter runs on across rows
                p = len(assignment) % P
            else:
                starts = [c.start_if_given(t, gu_len) for c in cores]
                p = min(range(P), key=lambda q: (starts[q], q))
                t = starts[p]                  # handed over when that core frees
            handout = t
            cores[p].take(b, j, t, gu_len, d_len)
            assignment[(b, j)] = p
    for c in cores:
        c.flush()

    # Tail: output blocks final -> cross-core sum -> shared requantisers -> row order.
    nb = g.d_model // g.mv_out
    blocks = []   # (ready, row, block)
    for b in (b for b in range(B) if not replay[b]):
        last = {}
        for ps in passes:
            if ps.kind == "d" and ps.row == b and ps.end > last.get(ps.core, (-1, 0))[0]:
                last[ps.core] = (ps.end, ps.issue // nb)
        for j in range(nb):
            if last:    # block j of the core's last D pass for the row: its last beat issued
                final = max(e - (nb - 1 - j) * beats for e, beats in last.values())
                blocks.append((final + g.mv_latency + g.acc_write + g.core_sum, b, j))
            else:       # every chunk of the row skipped: the sums are zero
                blocks.append((decided[b] + g.dispatch, b, j))
    t = 0
    row_req_done = {}
    for ready, b, _ in sorted(blocks):
        t = max(t, ready) + g.out_block_cycles
        row_req_done[b] = t
    row_out, prev = [], 0
    for b in range(B):
        ready = (decided[b] + g.replayed_tail if replay[b]
                 else row_req_done[b] + g.req_latency + g.out_latency)
        prev = max(ready, prev + 1)
        row_out.append(prev)
    return GroupSchedule(cycles=row_out[-1], macs_done=macs, passes=passes, row_out=row_out,
                         assignment=assignment)


def group_cycles_v2(g: V2Geometry, replay, schedule: str = "drs", **kw) -> int:
    """Cycles of one group (first row's beat to last row's output) for ``replay[B]``."""
    return group_schedule_v2(g, replay, schedule, **kw).cycles


def trace_cycles_v2(g: V2Geometry, replay, schedule: str = "drs") -> np.ndarray:
    """Modelled cycles of every group of a ``[G, B]`` replay mask (masks are cached)."""
    cache: dict = {}
    out = []
    for m in np.asarray(replay):
        key = tuple(int(x) for x in m)
        if key not in cache:
            cache[key] = group_cycles_v2(g, key, schedule)
        out.append(cache[key])
    return np.array(out, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# v1: chunk round-robin in today's model (``sw.perf.cycles.group_cycles(..., chunk_rr=True)``)
# ---------------------------------------------------------------------------------------------

def v1_group_cycles_chunk_rr(cfg, replay) -> int:
    """``sw.perf.cycles.group_cycles``'s schedule with chunk ``j`` of every row on core ``j mod P``
    (the dispatcher waits for that core): the dispatcher's chunk round-robin mode."""
    from sw.perf.cycles import group_cycles

    return group_cycles(cfg, replay, chunk_rr=True)


def v1_trace_cycles(cfg, replay, schedule: str) -> np.ndarray:
    from sw.perf.cycles import group_cycles

    cache: dict = {}
    out = []
    for m in np.asarray(replay):
        key = tuple(int(x) for x in m)
        if key not in cache:
            if schedule == "chunk_rr":
                cache[key] = v1_group_cycles_chunk_rr(cfg, key)
            else:
                cache[key] = group_cycles(cfg, key, static=(schedule == "row_static"))
        out.append(cache[key])
    return np.array(out, dtype=np.int64)


# ---------------------------------------------------------------------------------------------
# DRS study helpers
# ---------------------------------------------------------------------------------------------

def random_stalls(rng, horizon: int, busy_fraction: float, mean_len: int) -> list[tuple[int, int]]:
    """Disjoint ``[s, e)`` stall intervals covering about ``busy_fraction`` of ``horizon`` cycles,
    lengths uniform in ``1 .. 2 * mean_len - 1``, gaps exponential."""
    if busy_fraction <= 0:
        return []
    mean_gap = mean_len * (1 - busy_fraction) / busy_fraction
    out, t = [], 0
    while t < horizon:
        t += int(rng.exponential(mean_gap)) + 1
        n = int(rng.integers(1, 2 * mean_len))
        out.append((t, t + n))
        t += n
    return out


def _study_total(g, masks, schedule, *, rng_seed=0, skip=0.0, half=0.0, stall=None):
    """Total cycles and MACs over ``masks`` with random chunk work and stalls (same draws for
    every schedule: the generator is re-seeded per call)."""
    rng = np.random.default_rng(rng_seed)
    total = macs = 0
    for m in masks:
        B = len(m)
        u = rng.random((B, g.chunks))
        work = np.where(u < skip, 0.0, np.where(u < skip + half, 0.5, 1.0))
        st = None
        if stall is not None:
            frac, mean_len, which = stall
            horizon = 4 * B * g.chunks * g.chunk_cycles
            st = [random_stalls(rng, horizon, frac, mean_len) if p in which else []
                  for p in range(g.cores)]
        r = group_schedule_v2(g, m, schedule, work=work, stalls=st)
        total += r.cycles
        macs += r.macs_done
    return total, macs


def drs_study(masks, g: V2Geometry = DEFAULT_V2):
    """Regimes in which dynamic scheduling could beat chunk round-robin: list of result dicts."""
    regimes = [
        ("equal chunks, 2 cores, 8 chunks (the proposal)", g, {}),
        ("equal chunks, 2 cores, 16 chunks", replace(g, chunks=16), {}),
        ("25 % of chunks skipped (zero work)", g, {"skip": 0.25}),
        ("50 % of chunks skipped", g, {"skip": 0.5}),
        ("25 % of chunks half work", g, {"half": 0.25}),
        ("50 % of chunks half work", g, {"half": 0.5}),
        ("25 % skipped + 25 % half", g, {"skip": 0.25, "half": 0.25}),
        ("3 cores, 8 chunks (8 mod 3 = 2)", replace(g, cores=3), {}),
        ("3 cores, 16 chunks (16 mod 3 = 1)", replace(g, cores=3, chunks=16), {}),
        ("4 cores, 8 chunks", replace(g, cores=4), {}),
        ("4 cores, 16 chunks", replace(g, cores=4, chunks=16), {}),
        ("core 1 stalled 10 % (mean 50 cycles)", g, {"stall": (0.10, 50, {1})}),
        ("core 1 stalled 25 % (mean 200 cycles)", g, {"stall": (0.25, 200, {1})}),
        ("both cores stalled 10 % (mean 50 cycles)", g, {"stall": (0.10, 50, {0, 1})}),
        ("both cores stalled 25 % (mean 200 cycles)", g, {"stall": (0.25, 200, {0, 1})}),
    ]
    out = []
    for name, geo, kw in regimes:
        row = {"regime": name}
        for s in SCHEDULES + ("chunk_rr_global",):
            row[s], row["macs"] = _study_total(geo, masks, s, **kw)
        row["macs_per_cycle"] = geo.macs
        out.append(row)
    return out


# ---------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------

#: ECP5-85F.
ECP5_DSP, ECP5_DP16KD, ECP5_LUT4 = 156, 208, 83_640


def resource_estimate(g: V2Geometry = DEFAULT_V2, layers: int = 4, tokens: int = 64,
                      parallel_tas_in_luts: bool = True) -> dict:
    """DSP and DP16KD arithmetic for v2 (rough LUT4 in ``docs/architecture.md``)."""
    weights = 3 * g.d_model * g.d_ff * layers
    per_core = g.mv_in * g.mv_out                       # weight bytes per cycle per core
    port_bytes = 2                                      # DP16KD true dual port: 1024 x 18
    lanes = per_core // port_bytes                      # blocks read side by side per cycle
    words = weights // (lanes * port_bytes)             # 18-bit words per lane
    depth = math.ceil(words / 1024)                     # blocks per lane
    cache_bits = g.d_model * 8
    cache_entries = layers * tokens * g.batch
    cache = math.ceil(cache_bits / 18) * math.ceil(cache_entries / 1024)
    bram = {"weights": lanes * depth, "replay cache": cache, "SiLU tables": layers,
            "TAS chain counters": 1}
    dsp = {"MV MACs": g.macs, "gate/up requantisers (2 per lane)": 2 * g.gu_req_lanes,
           "SwiGLU (2 products per lane)": 2 * g.swiglu_lanes,
           "output requantisers (2 per lane)": 2 * g.out_lanes,
           "TAS": 0 if parallel_tas_in_luts else g.tas_lanes * g.tas_units}
    return {"weight_bytes": weights, "bytes_per_cycle_per_core": per_core, "lanes": lanes,
            "words_per_lane": words, "blocks_per_lane": depth,
            "capacity_minimum": math.ceil(weights / 2048),
            "bram": bram, "bram_total": sum(bram.values()), "dsp": dsp, "dsp_total": sum(dsp.values())}


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------

V1_MEASURED_MHZ = 56.76     # v1's routed clock (docs/timing.md)


def _load(path):
    from sw.trace.decode import load_decode_trace

    tr = load_decode_trace(path, verify=False)
    return tr.replay.astype(np.uint8), tr.manifest


def _fmt(n) -> str:
    return f"{n:,}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.perf.study_v2", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", default=str(Path(__file__).resolve().parents[2] / "golden" / "fastcar"))
    ap.add_argument("--mhz", type=float, default=125.0, help="assumed clock for GOPS (default 125)")
    ap.add_argument("--drs-study", action="store_true")
    args = ap.parse_args(argv)

    from sw.config import DEFAULT_ACCEL as cfg

    replay, man = _load(args.trace)
    G, B = replay.shape
    rows, computed = replay.size, int((1 - replay).sum())
    dense = np.zeros_like(replay)
    ideal = rows / computed
    ops_row = 3 * cfg.d_model * cfg.d_ff
    g = DEFAULT_V2
    print(f"trace {args.trace}: {G} groups x B={B}, tau {man.get('decode', {}).get('tau')}, "
          f"replay ratio {replay.mean():.3f}, computed rows {computed} / {rows}, "
          f"groups with no computed row {int(replay.all(axis=1).sum())}")
    print(f"v1: {cfg.macs} MACs, chunk {cfg.gate_tile.cycles(1)} cycles x 2 stages;  "
          f"v2: {g.cores} cores x {g.mv_in}x{g.mv_out} = {g.macs} MACs, GU {g.gu_cycles} + D "
          f"{g.d_cycles} cycles per chunk, {g.row_cycles:.0f} cycles per computed row, "
          f"h latency {g.h_latency}, tail {g.tail}, front {g.front}")
    print(f"GOPS at an ASSUMED clock of {args.mhz:g} MHz for both (v1 routes at "
          f"{V1_MEASURED_MHZ} MHz today); 1 MAC = 2 ops")
    hdr = (f"{'design':4} {'schedule':10} {'cycles FastCar':>15} {'cycles dense':>13} {'speed-up':>9} "
           f"{'ideal':>6} {'/ideal':>7} {'MAC util':>9} {'MAC util dense':>15} {'GOPS':>7} "
           f"{'GOPS dense-eq':>14}")
    print(hdr)
    print("-" * len(hdr))
    results = {}
    for design, macs_units in (("v1", cfg.macs), ("v2", g.macs)):
        for s in SCHEDULES:
            if design == "v1":
                fc, dc = v1_trace_cycles(cfg, replay, s).sum(), v1_trace_cycles(cfg, dense, s).sum()
            else:
                fc, dc = trace_cycles_v2(g, replay, s).sum(), trace_cycles_v2(g, dense, s).sum()
            ops = computed * ops_row
            util, util_d = ops / (macs_units * fc), rows * ops_row / (macs_units * dc)
            sec = fc / (args.mhz * 1e6)
            results[(design, s)] = (int(fc), int(dc))
            print(f"{design:4} {s:10} {_fmt(int(fc)):>15} {_fmt(int(dc)):>13} {dc / fc:9.3f} {ideal:6.3f} "
                  f"{dc / fc / ideal:7.3f} {util:9.3f} {util_d:15.3f} {2 * ops / sec / 1e9:7.2f} "
                  f"{2 * rows * ops_row / sec / 1e9:14.2f}")
    v1c, v2c = results[("v1", "drs")][0], results[("v2", "drs")][0]
    print(f"v2 / v1 cycles (DRS, FastCar): {v2c / v1c:.3f}  (v1 at {V1_MEASURED_MHZ} MHz: "
          f"{2 * computed * ops_row / (v1c / (V1_MEASURED_MHZ * 1e6)) / 1e9:.2f} GOPS)")

    # Where v2's cycles go.
    per = trace_cycles_v2(g, replay, "drs")
    none = replay.all(axis=1)
    comp_cycles = int(per[~none].sum())
    work = computed * g.row_cycles
    print(f"v2 DRS cycles: all-replayed groups {int(none.sum())} x {int(per[none][0]) if none.any() else 0} "
          f"= {_fmt(int(per[none].sum()))} ({per[none].sum() / per.sum():.1%}); computing groups "
          f"{int((~none).sum())}: {_fmt(comp_cycles)} of which MAC work {_fmt(int(work))} and overhead "
          f"{_fmt(int(comp_cycles - work))} ({(comp_cycles - work) / (~none).sum():.1f} per group, "
          f"{(comp_cycles - work) / per.sum():.1%} of cycles)")

    print("\nv2 variants (DRS, FastCar on the trace; dense)")
    variants = [
        ("proposal", g),
        ("TAS time-shared: 1 unit of 16 lanes (fits in DSPs)", replace(g, tas_units=1)),
        ("TAS 2 units", replace(g, tas_units=2)),
        ("SwiGLU path 30 cycles longer (h latency > D pass)",
         replace(g, swiglu_latency=g.swiglu_latency + 30)),
        ("1 output requantiser lane", replace(g, out_lanes=1)),
        ("16 chunks", replace(g, chunks=16)),
        ("4 chunks", replace(g, chunks=4)),
    ]
    for name, v in variants:
        fc, dc = trace_cycles_v2(v, replay, "drs").sum(), trace_cycles_v2(v, dense, "drs").sum()
        allrep = group_cycles_v2(v, [1] * B)
        print(f"  {name:52} FastCar {_fmt(int(fc)):>9}  dense {_fmt(int(dc)):>9}  speed-up/ideal "
              f"{dc / fc / ideal:.3f}  MAC util {computed * ops_row / (v.macs * fc):.3f}  "
              f"all-replayed group {allrep}")

    r = resource_estimate(g)
    print("\nv2 resources (arithmetic; LUT4 in docs/architecture.md)")
    print(f"  weights {_fmt(r['weight_bytes'])} B; {r['bytes_per_cycle_per_core']} B/cycle per core; "
          f"DP16KD 1024x18 port = 2 B -> {r['lanes']} blocks side by side, {_fmt(r['words_per_lane'])} "
          f"words each -> {r['blocks_per_lane']} deep -> {r['bram']['weights']} blocks "
          f"(capacity alone: {r['capacity_minimum']})")
    print("  DP16KD: " + ", ".join(f"{k} {v}" for k, v in r["bram"].items())
          + f" = {r['bram_total']} / {ECP5_DP16KD}")
    print("  MULT18X18D: " + ", ".join(f"{k} {v}" for k, v in r["dsp"].items())
          + f" = {r['dsp_total']} / {ECP5_DSP}")
    r2 = resource_estimate(g, parallel_tas_in_luts=False)
    print(f"  with the parallel TAS in DSPs ({g.tas_units} x {g.tas_lanes}): {r2['dsp_total']} / {ECP5_DSP}; "
          f"time-shared 16-lane TAS: {r['dsp_total'] + g.tas_lanes} / {ECP5_DSP}")
    r3 = resource_estimate(replace(g, cores=3))
    print(f"  3 cores: {r3['dsp_total']} DSPs / {ECP5_DSP}; 3 read ports per weight block (DP16KD has 2)")

    if args.drs_study:
        masks = [tuple(m) for m in replay[~replay.all(axis=1)]]
        print(f"\nDRS study: the {len(masks)} computing groups of the trace (all-replayed groups are "
              "identical for every schedule); random draws seeded, the same for every schedule")
        h = (f"{'regime':46} {'DRS':>10} {'chunk-RR':>10} {'row-static':>11} {'RR/DRS':>7} "
             f"{'static/DRS':>10} {'global-RR/DRS':>13} {'DRS MAC util':>12}")
        print(h)
        print("-" * len(h))
        for row in drs_study(masks, g):
            d, c, s, gl = row["drs"], row["chunk_rr"], row["row_static"], row["chunk_rr_global"]
            print(f"{row['regime']:46} {_fmt(d):>10} {_fmt(c):>10} {_fmt(s):>11} {c / d:7.3f} {s / d:10.3f} "
                  f"{gl / d:13.3f} {row['macs'] / (row['macs_per_cycle'] * d):12.3f}")
        print("(global-RR: chunk k of the group on core k mod P, the counter not restarting per row)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
