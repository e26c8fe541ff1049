"""Cycle model of the accelerator (:class:`hw.accel.accelerator.Accelerator`): the cycles of one
group from the configuration, the replay mask and the schedule.

The model steps the control of the RTL cycle by cycle and moves no data: the TAS engines' fixed
latency, the decisions in row order (a replayed row to the cache, a computed row to the
dispatcher), the dispatcher (DRS, chunk round-robin or row-static), each core's pass scheduler
(:class:`hw.accel.mv_core.MvCore`: GU and D passes of fixed length, one job held ahead, a chunk's D pass
after its ``h`` is complete), the output stage (:class:`hw.accel.row_out.RowOut`) and the reorder
buffer. Every constant below is a pipeline depth of one RTL block, named after it;
``tests/sw/test_cycles.py`` checks each against the block, and the accelerator regression checks
the model against the RTL's cycle counter on every group.
"""

from __future__ import annotations

import numpy as np

from sw.config import AccelConfig

__all__ = ["Latencies", "latencies", "group_cycles", "trace_cycles"]

NONE, GU, DN = 0, 1, 2


class Latencies:
    """Pipeline depths, in cycles, of the RTL blocks the schedule depends on.

    Attributes
    ----------
    tas : int
        :attr:`hw.accel.tas_group.TasGroup.latency`, a row's beat to its decision, plus the
        accelerator's register slice after it (``tas_out``, 1).
    weights : int
        :attr:`hw.accel.weight_store.WeightStore.latency`.
    mv : int
        :attr:`hw.lib.mv_unit.MvUnit.latency` (``3 + ceil(log2(mv_in)) + 1``).
    requant : int
        :attr:`hw.lib.requant_lane.RequantLane.latency`.
    mult : int
        :attr:`hw.lib.mult18.Mult18.latency` (the gated product).
    cache : int
        :attr:`hw.accel.replay_cache.ReplayCache.latency`: a read request to its data on ``o``.
    """

    def __init__(self, cfg: AccelConfig, *, tas: int | None = None):
        steps = 8 * (cfg.d_model // cfg.tas_lanes)
        self.tas = tas if tas is not None else steps + _tas_tree_stages(cfg.tas_lanes) + 3 + 1
        self.weights = 6
        self.mv = 3 + max(0, (cfg.mv_in - 1).bit_length()) + 1
        self.requant = 5
        self.mult = 2
        self.cache = 3
        d_ob = cfg.d_model // cfg.mv_out
        # The last GU issue to its chunk's h complete (visible to the pass scheduler): the issue
        # register, the activation and weight pipeline, the unit, the serialiser (one cycle to load,
        # mv_out values, one to register), the gate/up lane, the product, the h lane, the flag.
        self.h_ready = self.weights + self.mv + 1 + cfg.mv_out + 1 + self.requant + self.mult + self.requant
        # The last D issue to the output stage's count of it (the accumulator write, the done
        # register, the count register).
        self.done = self.weights + self.mv + 3
        # RowOut: start to o.valid (issue d_ob blocks, read, sum, requantise, land).
        self.row_out = 1 + d_ob + 2 + self.requant


def _tas_tree_stages(lanes: int, adds_per_stage: int = 1) -> int:
    """Registered adder stages of a TAS engine (:attr:`hw.accel.tas_group.TasGroup.tree_stages`): the
    paired partial-product rows of one bit plane, the tree over their ``ceil(lanes / 2)`` sums and
    the accumulator, ``adds_per_stage`` adder levels per register."""
    items = (lanes + 1) // 2
    levels = 1 + max(0, (items - 1).bit_length()) + 1
    return -(-levels // adds_per_stage) - 1


def latencies(cfg: AccelConfig) -> Latencies:
    return Latencies(cfg)


class _Core:
    __slots__ = ("nxt", "nxt_at", "kind", "left", "gu", "dq", "hready", "wslot", "dcur_row")

    def __init__(self):
        self.nxt = None          # job (row, chunk) held ahead
        self.nxt_at = 0          # first cycle the held job is visible
        self.kind = NONE
        self.left = 0
        self.gu = None           # (row, chunk, slot) of the running or last GU pass
        self.dq = []             # chunks whose GU is done and whose D pass has not started
        self.hready = [0, 0]     # cycle from which h buffer s is complete (None: being written)
        self.wslot = 0
        self.dcur_row = None


def group_cycles(cfg: AccelConfig, replay, schedule: str = "drs", *, lat: Latencies | None = None,
                 limit: int = 1 << 20, arrive=None, on_take=None, on_finish=None) -> int:
    """Cycles of one group (first row taken to last row given, inclusive) for the replay mask
    ``replay[B]`` (1 = replayed; frame-0 and dense runs compute every row) and ``schedule``
    (``drs``, ``chunk_rr`` or ``static``), with rows offered back to back and the output always
    ready, as the cycle runs of the regression and the bench feed them.

    ``arrive[b]``: the cycle row ``b`` is taken, counted from the first (default ``b``: back to
    back; later rows model idle cycles on the input, as the testbench's stall runs make them);
    ``on_take(t, b)``: called when row ``b``'s decision leaves the TAS group in cycle ``t``;
    ``on_finish(t, rows)``: called when the output stage counts finished D passes in cycle ``t``,
    one entry of ``rows`` per core that finished one (a row twice: two cores finished chunks of
    it together)."""
    if schedule not in ("drs", "chunk_rr", "static"):
        raise ValueError(f"schedule must be drs, chunk_rr or static, not {schedule!r}")
    lat = lat or Latencies(cfg)
    replay = [bool(r) for r in np.asarray(replay).reshape(-1)]
    B, P, S = len(replay), cfg.cores, cfg.chunks
    gu_len, d_len = cfg.mv_blocks_per_chunk
    cores = [_Core() for _ in range(P)]
    arrive = list(range(len(replay))) if arrive is None else [int(a) for a in arrive]
    head, head_from = 0, lat.tas + arrive[0]   # the next decision and the first cycle it is on the TAS output
    holders = [None] * (P if schedule == "static" else 1)   # (row, next chunk)
    done_at = {}                       # cycle -> rows whose count goes up in that cycle
    count = [0] * B
    ro_busy, ro_row, ro_valid_at, ro_valid = False, None, None, False
    cache_out = set()                  # the cycles in which a cache read's data is on cache.o
    rob_in = {}                        # row -> the cycle it entered the reorder buffer
    out_next = 0
    t = 0
    while True:
        if t > limit:
            raise RuntimeError(f"cycle model: group did not finish in {limit} cycles (replay {replay})")
        # Registered state of this cycle.
        finished = done_at.pop(t, ())
        if finished and on_finish is not None:
            on_finish(t, list(finished))
        for row in finished:
            count[row] += 1
        if ro_busy and not ro_valid and t == ro_valid_at:
            ro_valid = True
        wb = ro_valid
        cache_o = t in cache_out
        ro_can_start = not ro_busy and not ro_valid
        # Dispatcher: chunks out to cores whose held job slot is empty (a registered ready).
        ready = [c.nxt is None for c in cores]
        free = [h is None for h in holders]       # a holder takes a row once it is empty (registered)
        sends = _dispatch(holders, schedule, ready, P, S)
        # The head decision: a replayed row reads the cache unless a write-back goes first; a
        # computed row goes to the dispatcher when its holder is free (or freed this cycle).
        took = None
        if head < B and t >= head_from:
            if replay[head]:
                if not wb:
                    took = "read"
            elif free[head % P if schedule == "static" else 0]:
                took = "job"
        # Cores.
        for c in cores:
            _core_cycle(c, t, lat, gu_len, d_len, done_at)
        for p, job in sends:
            cores[p].nxt, cores[p].nxt_at = job, t + 1
        # Output stage: the finished row leaves (write-back and reorder buffer) unless a cache
        # read's data takes the reorder buffer's input this cycle.
        if wb and not cache_o:
            rob_in[ro_row] = t
            ro_valid = ro_busy = False
        if ro_can_start:
            full = [b for b in range(B) if count[b] == S]
            if full:
                ro_busy, ro_row = True, full[0]
                count[ro_row] = 0
                ro_valid_at = t + lat.row_out
        if took is not None and on_take is not None:
            on_take(t, head)
        if took is not None:
            if took == "read":
                cache_out.add(t + lat.cache)
                rob_in[head] = t + lat.cache
            else:
                holders[head % P if schedule == "static" else 0] = (head, 0)
            head += 1
            head_from = max(t + 1, head + lat.tas, (arrive[head] + lat.tas) if head < B else 0)
        # Reorder buffer: the head row leaves the cycle after it entered, one row per cycle.
        if out_next in rob_in and rob_in[out_next] < t:
            if out_next == B - 1:
                return t + 1
            out_next += 1
        t += 1


def _core_cycle(c, t, lat, gu_len, d_len, done_at):
    """One cycle of :class:`hw.accel.mv_core.MvCore`'s pass scheduler."""
    end = c.kind != NONE and c.left == 0
    decide = c.kind == NONE or end
    new_q = c.dq + [c.gu] if (end and c.kind == GU) else list(c.dq)
    if end and c.kind == GU:
        c.hready[c.gu[2]] = t + lat.h_ready
    if end and c.kind == DN:
        done_at.setdefault(t + lat.done, []).append(c.dcur_row)
    start_gu = start_d = False
    if decide:
        h = c.hready[new_q[0][2]] if new_q else None
        oldest_ready = h is not None and t >= h
        has_nxt = c.nxt is not None and t >= c.nxt_at
        if len(new_q) == 2:
            start_d = oldest_ready
        elif len(new_q) == 1:
            start_gu = has_nxt
            start_d = not has_nxt and oldest_ready
        else:
            start_gu = has_nxt
    if start_gu:
        row, chunk = c.nxt
        c.gu = (row, chunk, c.wslot)
        c.hready[c.wslot] = None
        c.wslot ^= 1
        c.nxt = None
        c.kind, c.left, c.dq = GU, gu_len - 1, new_q
    elif start_d:
        c.dcur_row = new_q[0][0]
        c.kind, c.left, c.dq = DN, d_len - 1, new_q[1:]
    else:
        c.dq = new_q
        if end:
            c.kind = NONE
        elif c.kind != NONE:
            c.left -= 1


def _dispatch(holders, schedule, ready, P, S):
    """The chunks handed out this cycle: ``[(core, (row, chunk))]``; advances the holders."""
    sends = []
    if schedule == "static":
        for p, h in enumerate(holders):
            if h is not None and ready[p]:
                sends.append((p, (h[0], h[1])))
                holders[p] = (h[0], h[1] + 1) if h[1] + 1 < S else None
        return sends
    h = holders[0]
    if h is None:
        return sends
    if schedule == "drs":
        target = next((p for p in range(P) if ready[p]), None)
    else:
        target = h[1] % P if ready[h[1] % P] else None
    if target is not None:
        sends.append((target, (h[0], h[1])))
        holders[0] = (h[0], h[1] + 1) if h[1] + 1 < S else None
    return sends


def trace_cycles(cfg: AccelConfig, replay: np.ndarray, schedule: str = "drs") -> np.ndarray:
    """:func:`group_cycles` of every group of ``replay[G, B]`` (groups with the same mask are
    computed once)."""
    replay = np.asarray(replay).astype(int)
    lat = Latencies(cfg)
    memo = {}
    out = np.empty(len(replay), dtype=np.int64)
    for g, mask in enumerate(replay):
        key = tuple(mask)
        if key not in memo:
            memo[key] = group_cycles(cfg, mask, schedule, lat=lat)
        out[g] = memo[key]
    return out


def main(argv=None) -> int:
    """``python -m sw.perf.cycles [--trace DIR]``: the model's cycles per group for typical masks and
    on every group of a trace, in the three schedules and dense."""
    import argparse

    from sw.config import DEFAULT_ACCEL
    from sw.trace.decode import load_decode_trace

    ap = argparse.ArgumentParser(prog="python -m sw.perf.cycles", description=main.__doc__)
    ap.add_argument("--trace", default="golden/fastcar", help="decode trace directory")
    args = ap.parse_args(argv)

    cfg = DEFAULT_ACCEL
    lat = Latencies(cfg)
    print("pipeline depths:", ", ".join(f"{k} {v}" for k, v in vars(lat).items()))
    B = cfg.batch
    print("| computed rows of the group | DRS | chunk round-robin | row-static |\n|---|---|---|---|")
    for n in range(B + 1):
        mask = [0] * n + [1] * (B - n)
        cells = [group_cycles(cfg, mask, s, lat=lat) for s in ("drs", "chunk_rr", "static")]
        print(f"| {n} | " + " | ".join(f"{c:,}" for c in cells) + " |")
    tr = load_decode_trace(args.trace)
    mask = np.asarray(tr.replay)
    runs = {s: int(trace_cycles(cfg, mask, s).sum()) for s in ("drs", "chunk_rr", "static")}
    dense = int(trace_cycles(cfg, np.zeros_like(mask)).sum())
    rows, computed = mask.size, int((mask == 0).sum())
    macs_row = 3 * cfg.d_model * cfg.d_ff
    print(f"{args.trace}: {mask.shape[0]} groups, replay ratio {1 - computed / rows:.3f}")
    print(f"cycles: DRS {runs['drs']:,}, chunk round-robin {runs['chunk_rr']:,}, "
          f"row-static {runs['static']:,}, dense {dense:,}")
    print(f"speed-up {dense / runs['drs']:.3f} (ideal {rows / computed:.3f}, "
          f"{dense / runs['drs'] / (rows / computed):.3f} of it); MAC utilisation "
          f"{computed * macs_row / (cfg.mac_units * runs['drs']):.3f} FastCar, "
          f"{rows * macs_row / (cfg.mac_units * dense):.3f} dense; row-static / DRS "
          f"{runs['static'] / runs['drs']:.3f}, chunk round-robin / DRS {runs['chunk_rr'] / runs['drs']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
