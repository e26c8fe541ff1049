"""Cycle model of the accelerator: cycles of one group from the configuration and its replay mask.

The model follows the RTL's schedule (``docs/architecture.md``, "Cycle model"):

- The front end takes one row at a time: ``t_row = d_model / tas_lanes + 5 + pipeline`` cycles
  from taking a row to taking the next (1 take, 1 hand-over, ``d_model / tas_lanes`` TAS steps,
  the TAS pipeline (:func:`hw.accel.tas_unit.pipeline_cycles`: multiplier and adder-tree registers),
  1 decision, 1 output of the decision, 1 cache read or dispatch).
- A computed row is cut into ``chunks`` hidden chunks. Each chunk occupies a core's gate/up tiles
  for ``T = d_model * (d_ff / chunks) / (rows * cols)`` cycles and then its down tile for the same
  ``T``, so a core's two stages overlap from one chunk to the next.
- DRS hands chunk after chunk to whichever core frees first (at most one per cycle); chunk
  round-robin (``chunk_rr``) holds the row the same way but gives chunk ``j`` of every row to core
  ``j mod cores``, waiting for that core; static assignment gives every chunk of row ``b`` to core
  ``b mod cores``, with one holding register per core.
- A chunk's int32 partial sums reach the reducer ``2 T`` after the chunk entered its core (its
  gate/up and down projections) and occupy the reducer for ``d_model / cols`` cycles (one slice
  per cycle); chunks that arrive together wait for each other there.
- After the last partial sums have been added: a fixed ``TAIL`` (requantiser, row assembly,
  reorder buffer, output).

A group in which every row replays costs ``B * t_row + ALL_REPLAYED_TAIL``.
The two constants were measured on the RTL (``tb/accelerator``); ``tests/test_accelerator_sim.py`` and
the accelerator regression check the model against the RTL's cycle counters for every group.
"""

from __future__ import annotations

import numpy as np

from sw.config import AccelConfig


def tas_pipeline_cycles(lanes: int) -> int:
    """The TAS unit's pipeline beyond one step (:func:`hw.accel.tas_unit.pipeline_cycles`: the
    multiplier's 2 registers and one register per adder-tree level over ``lanes`` products)."""
    return 2 + max(0, (lanes - 1).bit_length())

__all__ = ["group_cycles", "trace_cycles", "t_row", "chunk_cycles", "TAIL", "ALL_REPLAYED_TAIL"]

#: Pipeline cycles not covered by ``2 T`` and the reducer's slices: array fill and drain, the
#: gating stage, requantiser, row assembly, reorder buffer and output (measured).
TAIL = 44
#: Cycles after the last row's decision when no row computes (cache read, reorder buffer, output).
ALL_REPLAYED_TAIL = 2


def t_row(cfg: AccelConfig) -> int:
    """Front-end cycles per row."""
    return cfg.d_model // cfg.tas_lanes + 5 + tas_pipeline_cycles(cfg.tas_lanes)


def chunk_cycles(cfg: AccelConfig) -> int:
    """Issue cycles of one chunk in one tile stage."""
    return cfg.gate_tile.cycles(1)


def group_cycles(cfg: AccelConfig, replay, *, static: bool = False, chunk_rr: bool = False) -> int:
    """Cycles of one group (first row taken to last row given) for the replay mask ``replay[B]``:
    DRS, ``static`` or (when not ``static``) chunk round-robin ``chunk_rr``, as the dispatcher's
    ``static`` and ``chunk_rr`` inputs. The v2 datapath (``cfg.datapath == 2``) has its own
    model, :func:`sw.perf.cycles_v2.group_cycles_v2`."""
    if cfg.datapath == 2:
        from sw.perf.cycles_v2 import group_cycles_v2
        return group_cycles_v2(cfg, replay, _schedule(static, chunk_rr))
    replay = [bool(r) for r in replay]
    P, S, T, tr = cfg.cores, cfg.chunks, chunk_cycles(cfg), t_row(cfg)
    if all(replay):
        return len(replay) * tr + ALL_REPLAYED_TAIL
    core_free = [0] * P          # cycle from which core p's gate/up tiles take a chunk
    holder_free = [0] * P        # cycle from which the dispatcher's holding register takes a row
    take = 0                     # cycle the front end takes the current row
    starts = []                  # cycle each chunk entered its core
    for b, rep in enumerate(replay):
        if rep:
            take += tr
            continue
        offer = take + tr - 1                     # the row is offered to the dispatcher
        h = b % P if static else 0
        accept = max(offer, holder_free[h])
        c = accept + 1                            # its first chunk can leave the next cycle
        for j in range(S):
            if static:
                p = b % P
            elif chunk_rr:
                p = j % P
            else:
                p = min(range(P), key=lambda q: (max(c, core_free[q]), q))
            start = max(c, core_free[p])
            core_free[p] = start + T
            c = start + 1
            starts.append(start)
        holder_free[h] = start                    # the last chunk leaves: the register is free
        take = accept + 1
    done = 0                                      # the reducer takes one slice per cycle
    for arrive in sorted(s + 2 * T for s in starts):
        done = max(arrive, done) + cfg.d_model // cfg.cols
    return done + TAIL


def _schedule(static: bool, chunk_rr: bool) -> str:
    return "static" if static else "chunk_rr" if chunk_rr else "drs"


def trace_cycles(cfg: AccelConfig, replay: np.ndarray, *, static: bool = False,
                 chunk_rr: bool = False) -> np.ndarray:
    """Modelled cycles of every group of a ``[G, B]`` replay mask (schedule as :func:`group_cycles`)."""
    if cfg.datapath == 2:
        from sw.perf.cycles_v2 import trace_cycles_v2
        return trace_cycles_v2(cfg, replay, _schedule(static, chunk_rr))
    return np.array([group_cycles(cfg, m, static=static, chunk_rr=chunk_rr) for m in np.asarray(replay)])
