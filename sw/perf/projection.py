"""Real units, a projection to VILA-U-7B sizes and an energy model, from measured cycles.

Usage::

    python -m sw.perf.projection [--bench build/bench/report.json | --no-bench] [--bench-trace DIR ...]
                            [--synth build/synth/ulx3s_85f/report.json] [--assume-mhz MHZ]
                            [--trace golden/fastcar] [--fpga-mhz 300]
                            [--out build/projection] [--force]

Three parts, each labelled in the output by where its numbers come from:

1. **Real units** for the shipped model on the ECP5 accelerator: the RTL's cycle counts
   (``build/bench/report.json``, measured by ``nox -s bench``) and the cycle model on the whole
   shipped trace, turned into milliseconds per frame and per 8-frame video and into GOPS, at the
   clock the bitstream runs at (``pll_mhz`` of the synthesis report when timing is met; a report
   that misses timing gives its ``fmax_mhz``, labelled as a clock no bitstream runs at) or at a
   clock given with ``--assume-mhz``, which is then reported as assumed. MAC units are
   ``cfg.mac_units``.
2. **Projection** of the same architecture to VILA-U-7B (32 layers, d 4096, d_ff 11008, 256
   tokens per frame, 8 frames, CFG batch 2) on an AMD Alveo U280, with the MLP weights streamed
   from HBM (:func:`projected_accel`). The compute time of a group is the RTL-checked schedule of
   :mod:`sw.perf.cycles` at the larger geometry; the weight time is
   bytes over bandwidth; a group takes the larger of the two.
   Replay removes weight traffic only from groups in which every row replays, so the fraction of
   such groups is measured on the decode traces for B = 1, 2 and 4 rows and, for larger B,
   modelled with rows that replay independently (labelled as such).
3. An **energy model** (not a measurement) from the 45 nm per-operation energies of Horowitz,
   ISSCC 2014, for both.

Writes ``report.json``, ``report.md`` and ``all_replay.png`` to ``--out`` (atomically; an
existing report is replaced only with ``--force``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from functools import lru_cache
from itertools import combinations
from pathlib import Path

import numpy as np

from sw.config import DEFAULT_ACCEL, AccelConfig, ConfigError
from sw.jsonio import read_json
from sw.perf.cycles import group_cycles

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BENCH = REPO / "build" / "bench" / "report.json"
DEFAULT_SYNTH = REPO / "build" / "synth" / "ulx3s_85f" / "report.json"
DEFAULT_TRACE = REPO / "golden" / "fastcar"
DEFAULT_OUT = REPO / "build" / "projection"

__all__ = [
    "ProjectionError", "Clock", "clock_from_synth", "assumed_clock", "real_units", "bench_point_units",
    "trace_units", "load_bench", "cfg_pairs", "row_subsets", "all_replay_fraction",
    "independent_all_replay", "Fpga", "ALVEO_U280", "VILA_U_7B", "PROJECTED_MV", "projected_accel",
    "geometry", "compute_cycles", "accel_summary", "mlp_weight_bytes", "group_time", "masks_time",
    "binomial_masks", "HOROWITZ_45NM_PJ", "group_energy_pj", "main",
]


class ProjectionError(ValueError):
    """Bad input, reported as one line that names the file and the field."""


# ---------------------------------------------------------------------------------------------
# Clock
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clock:
    """A clock frequency and where it comes from.

    Parameters
    ----------
    mhz : float
        Frequency in MHz.
    measured : bool
        True when the figure is nextpnr's achieved Fmax, False when it was assumed.
    source : str
        One line saying which file and field, or that it was assumed.
    """

    mhz: float
    measured: bool
    source: str


def _read_json(path: Path, what: str) -> dict:
    """The JSON object in ``path``, or a :class:`ProjectionError` naming the file."""
    return read_json(path, ProjectionError, what)


def _positive(value, path, field: str, kind=(int, float)) -> float:
    """``value`` if it is a positive number of type ``kind``; else a one-line error naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, kind) or not value > 0 or not math.isfinite(value):
        raise ProjectionError(f"{path}: field '{field}': expected a positive number, got {value!r}")
    return value


def clock_from_synth(path, cfg: AccelConfig = DEFAULT_ACCEL) -> Clock:
    """The measured Fmax in a synthesis report (``hw/flow/synth.py``'s ``report.json``).

    Parameters
    ----------
    path : path-like
        The report.
    cfg : AccelConfig
        The configuration whose cycles will be converted; a report of the whole accelerator for
        another configuration is refused.

    Returns
    -------
    Clock
        When timing is met, the PLL clock the bitstream runs at (``pll_mhz``), not the higher
        Fmax; otherwise ``fmax_mhz``, labelled as a clock no built bitstream runs at. The source
        line says which design it was measured on.
    """
    rep = _read_json(path, "synthesis report")
    if "fmax_mhz" not in rep:
        raise ProjectionError(f"{path}: field 'fmax_mhz' is missing (no routed design); "
                              f"pass --assume-mhz MHZ to use an assumed clock")
    mhz = float(_positive(rep["fmax_mhz"], path, "fmax_mhz"))
    if isinstance(rep.get("accel"), dict):
        if rep["accel"] != cfg.to_dict():
            raise ProjectionError(f"{path}: field 'accel' is another configuration than the one "
                                  f"benchmarked ({cfg.to_dict()}); pass --assume-mhz or a matching report")
        design = "the whole accelerator"
    else:
        raise ProjectionError(f"{path}: field 'accel' is missing: cannot tell which design the Fmax "
                              f"belongs to")
    met = rep.get("timing_met")
    if met and "pll_mhz" in rep:
        pll = float(_positive(rep["pll_mhz"], path, "pll_mhz"))
        return Clock(pll, True, f"measured: the bitstream's PLL clock, {path} field 'pll_mhz', of {design} "
                                f"(timing met; nextpnr Fmax {mhz:.2f} MHz)")
    timing = "" if met is None else (" (timing met)" if met else
                                     f" (timing not met at the {rep.get('constraint_mhz')} MHz constraint:"
                                     f" no bitstream built runs at this clock)")
    return Clock(mhz, True, f"measured: nextpnr Fmax, {path} field 'fmax_mhz', of {design}{timing}")


def assumed_clock(mhz: float) -> Clock:
    """A clock given on the command line: reported as assumed, never as measured."""
    _positive(mhz, "--assume-mhz", "MHz")
    return Clock(float(mhz), False, f"assumed: {mhz:g} MHz given with --assume-mhz (not measured)")


# ---------------------------------------------------------------------------------------------
# Real units for the shipped model
# ---------------------------------------------------------------------------------------------

def mlp_macs(cfg: AccelConfig, rows: int) -> int:
    """Multiply-accumulates of ``rows`` computed MLP rows (gate, up and down projections)."""
    return rows * 3 * cfg.d_model * cfg.d_ff


def real_units(cfg: AccelConfig, cycles: float, clock: Clock, *, frames: int, computed_rows: int,
               dense_rows: int, videos: int) -> dict:
    """Latency and throughput of one batch of videos from its cycle count.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator; ``cfg.mac_units`` is the number of MAC units (one ``mv_in x mv_out`` unit
        per core).
    cycles : float
        Cycles of the whole batch (all frames, all layers).
    clock : Clock
        The clock the cycles run at.
    frames : int
        Frames per video.
    computed_rows : int
        MLP rows actually computed (MACs done = ``computed_rows * 3 * d_model * d_ff``).
    dense_rows : int
        Rows a dense decoder computes for the same batch (for the dense-equivalent GOPS).
    videos : int
        Videos the batch generates together (two CFG rows per video).

    Returns
    -------
    dict
        ``ms_per_frame`` (batch latency / frames), ``ms_per_video`` (latency of the batch, which
        every video in it waits for), ``ms_per_video_amortised`` (latency / videos), peak and
        achieved GOPS (2 operations per MAC), dense-equivalent GOPS and MAC utilisation.
    """
    seconds = cycles / (clock.mhz * 1e6)
    peak = 2 * cfg.mac_units * clock.mhz * 1e6 / 1e9
    achieved = 2 * mlp_macs(cfg, computed_rows) / seconds / 1e9
    return {"cycles": float(cycles), "clock_mhz": clock.mhz, "ms_per_frame": seconds / frames * 1e3,
            "ms_per_video": seconds * 1e3, "ms_per_video_amortised": seconds / videos * 1e3,
            "peak_gops": peak, "achieved_gops": achieved,
            "dense_equivalent_gops": 2 * mlp_macs(cfg, dense_rows) / seconds / 1e9,
            "mac_utilization": achieved / peak}


_POINT_FIELDS = {"tau": (int, float), "groups": int, "rows": int, "replay_ratio": (int, float),
                 "cycles_dense": int, "cycles_fastcar": int, "cycles_static": int}


def load_bench(path, cfg: AccelConfig = DEFAULT_ACCEL) -> tuple[list[dict], str]:
    """The points of a ``tb.bench`` report, checked field by field, and a note on its configuration.

    Returns
    -------
    points : list of dict
        The report's points.
    note : str
        Which configuration the cycles were measured on: the report's ``accel`` when it has one
        (it must equal ``cfg``), else a warning that the report does not say.

    Raises
    ------
    ProjectionError
        One line naming the file and the first bad field, e.g. ``points[1].cycles_fastcar``.
    """
    rep = _read_json(path, "bench report")
    if "accel" in rep and rep["accel"] != cfg.to_dict():
        raise ProjectionError(f"{path}: field 'accel': the cycles were measured on another configuration "
                              f"than the current one ({cfg.to_dict()}); rerun the bench")
    note = (f"{path}: measured on the current configuration" if "accel" in rep else
            f"{path} does not record its configuration (written before the bench did); its cycles are "
            f"taken as those of the current configuration, which may have changed since")
    points = rep.get("points")
    if not isinstance(points, list) or not points:
        raise ProjectionError(f"{path}: field 'points': expected a non-empty list, got {points!r}")
    for i, p in enumerate(points):
        if not isinstance(p, dict):
            raise ProjectionError(f"{path}: field 'points[{i}]': expected an object, got {p!r}")
        for name, kind in _POINT_FIELDS.items():
            if name not in p:
                raise ProjectionError(f"{path}: field 'points[{i}].{name}' is missing")
            v = p[name]
            ok = not isinstance(v, bool) and isinstance(v, kind) and math.isfinite(v)
            if name == "replay_ratio":
                ok = ok and 0 <= v <= 1
            elif name != "tau":
                ok = ok and v > 0
            if not ok:
                raise ProjectionError(f"{path}: field 'points[{i}].{name}': unexpected value {v!r}")
    return points, note


def bench_point_units(cfg: AccelConfig, point: dict, clock: Clock, *, frames: int) -> dict:
    """Real units of one bench point, extrapolated from its subset of groups to the whole video.

    The bench runs positions 0-7 of every frame and layer (``groups`` of the
    ``frames * tokens_per_frame * layers`` groups of the trace); the cycles are scaled by the ratio,
    which assumes the other positions cost the same on average (the cycle model on the whole trace,
    :func:`trace_units`, checks how far off that is).
    """
    full = frames * cfg.tokens_per_frame * cfg.layers
    scale = full / point["groups"]
    rows = point["rows"] * scale
    computed = round(rows * (1 - point["replay_ratio"]))
    videos = max(cfg.batch // 2, 1)
    out = {"tau": point["tau"], "replay_ratio": point["replay_ratio"], "groups_measured": point["groups"],
           "extrapolation": scale}
    for mode, key, comp in (("dense", "cycles_dense", rows), ("fastcar", "cycles_fastcar", computed),
                            ("static", "cycles_static", computed)):
        out[mode] = real_units(cfg, point[key] * scale, clock, frames=frames, computed_rows=int(comp),
                               dense_rows=int(rows), videos=videos)
    out["speedup"] = point["cycles_dense"] / point["cycles_fastcar"]
    return out


def trace_units(cfg: AccelConfig, replay: np.ndarray, clock: Clock, *, frames: int, frame=None) -> dict:
    """Real units of a whole trace from the cycle model (:mod:`sw.perf.cycles`, equal to the RTL on
    every group).

    With ``frame`` (the frame of every group) also ``ms_by_frame``: the latency of each frame.
    """
    from sw.perf.cycles import trace_cycles

    replay = np.asarray(replay)
    rows, computed = replay.size, int((replay == 0).sum())
    videos = max(cfg.batch // 2, 1)
    out = {"replay_ratio": float(replay.mean()), "groups": int(replay.shape[0])}
    for mode, masks, comp in (("dense", np.zeros_like(replay), rows), ("fastcar", replay, computed)):
        per_group = trace_cycles(cfg, masks)
        out[mode] = real_units(cfg, int(per_group.sum()), clock, frames=frames, computed_rows=comp,
                               dense_rows=rows, videos=videos)
        if frame is not None:
            out[mode]["ms_by_frame"] = [float(per_group[frame == t].sum()) / (clock.mhz * 1e3)
                                        for t in range(frames)]
    out["speedup"] = out["dense"]["cycles"] / out["fastcar"]["cycles"]
    return out


# ---------------------------------------------------------------------------------------------
# Groups in which every row replays
# ---------------------------------------------------------------------------------------------

def cfg_pairs(batch: int) -> list[tuple[int, int]]:
    """The (conditional, unconditional) rows of each video: the traces put conditional rows first."""
    return [(b, b + batch // 2) for b in range(batch // 2)]


def row_subsets(batch: int, size: int) -> list[tuple[int, ...]]:
    """Every subset of ``size`` rows of a batch of ``batch`` rows."""
    return list(combinations(range(batch), size))


def all_replay_fraction(replay: np.ndarray, rows) -> float:
    """Fraction of groups in which every row of ``rows`` replays (``replay`` is ``[G, B]``)."""
    return float(np.asarray(replay, bool)[:, list(rows)].all(axis=1).mean())


def independent_all_replay(replay: np.ndarray, layer: np.ndarray, frame: np.ndarray, batch: int) -> float:
    """All-replay fraction for ``batch`` rows that replay independently of each other.

    Each row of a group replays with the replay ratio ``p`` of the group's layer and frame (measured
    on the trace), so a group of ``batch`` rows replays entirely with probability ``p ** batch``.
    This is a model, not a measurement: rows of one prompt are correlated in the traces.
    """
    replay = np.asarray(replay, bool)
    total = 0.0
    keys = np.stack([layer, frame], axis=1)
    for key in np.unique(keys, axis=0):
        sel = (keys == key).all(axis=1)
        total += sel.sum() * replay[sel].mean() ** batch
    return float(total / len(replay))


def replay_vs_batch(replay, layer, frame, batches=(1, 2, 4, 8, 16, 32)) -> dict:
    """All-replay fraction against the batch size: measured row subsets and the independence model."""
    B = replay.shape[1]
    measured = []
    for size in (s for s in batches if s <= B):
        subsets = row_subsets(B, size)
        fr = [all_replay_fraction(replay, s) for s in subsets]
        measured.append({"batch": size, "subsets": "all", "n_subsets": len(subsets),
                         "fraction": float(np.mean(fr)), "min": float(min(fr)), "max": float(max(fr))})
        if size == 2:
            fr = [all_replay_fraction(replay, s) for s in cfg_pairs(B)]
            measured.append({"batch": 2, "subsets": "cfg pairs", "n_subsets": len(fr),
                             "fraction": float(np.mean(fr)), "min": float(min(fr)), "max": float(max(fr))})
    model = [{"batch": b, "fraction": independent_all_replay(replay, layer, frame, b)} for b in batches]
    return {"replay_ratio": float(np.mean(replay)), "measured": measured, "independent": model}


# ---------------------------------------------------------------------------------------------
# Projection to VILA-U-7B on a larger FPGA
# ---------------------------------------------------------------------------------------------

#: VILA-U-7B's decoder (LLaMA-2-7B backbone) and its video setting, as in the paper.
VILA_U_7B = {"layers": 32, "d_model": 4096, "d_ff": 11008, "heads": 32, "tokens_per_frame": 256,
             "frames": 8, "batch": 2, "prompt_len": 64}


@dataclass(frozen=True)
class Fpga:
    """A target device and its published figures.

    Parameters
    ----------
    name, part : str
        Card and device.
    dsp : int
        DSP slices (one int8 MAC each in this model).
    hbm_gb_s, ddr_gb_s : float
        Peak theoretical bandwidth of the HBM and of the DDR4 on the card, GB/s.
    hbm_gib : float
        HBM capacity in GiB.
    clock_mhz : float
        Clock of the projected design. **Assumed**, not measured.
    source : str
        Where the figures come from.
    """

    name: str
    part: str
    dsp: int
    hbm_gb_s: float
    ddr_gb_s: float
    hbm_gib: float
    clock_mhz: float
    source: str


#: AMD Alveo U280 (XCU280). DS963 (Alveo U280 data sheet): 9,024 DSP slices, 8 GB HBM2 at
#: 460 GB/s, 32 GB DDR4 at 38 GB/s; UG1393 ("HBM configuration and use"): 32 pseudo channels of
#: 14.375 GB/s = 460 GB/s peak theoretical. The 300 MHz clock is an assumption (a common kernel
#: clock on this card), not a result of this project.
ALVEO_U280 = Fpga(name="AMD Alveo U280", part="XCU280", dsp=9024, hbm_gb_s=460.0, ddr_gb_s=38.0,
                  hbm_gib=8.0, clock_mhz=300.0,
                  source="AMD DS963 (U280 data sheet): 9,024 DSP, HBM2 8 GB 460 GB/s, DDR4 32 GB 38 GB/s; "
                         "UG1393: 32 x 14.375 GB/s HBM pseudo channels")


#: ``mv_in x mv_out`` of each core of the projected accelerator (:func:`projected_accel`).
PROJECTED_MV = (64, 64)


def projected_accel(batch: int = VILA_U_7B["batch"]) -> AccelConfig:
    """The shipped architecture scaled to VILA-U-7B: 2 cores, 43 chunks of 256 hidden channels.

    As the shipped accelerator, each core is one weight-resident
    :data:`PROJECTED_MV` = 64 x 64 matrix-vector unit, ``2 x 64 x 64 = 8,192`` MAC units, 91 % of
    the U280's 9,024 DSP slices. ``d_model = 4096 = 2**12`` allows only powers of two for
    ``mv_in`` and ``mv_out``, so two cores have 4,096 (45 %) or 8,192 (91 %) MAC units, nothing in
    between. The TAS has no DSP, and the other DSPs at this size are about 136
    (``mv_out`` output requantisers of two DSPs each, four per core for gate/up, SwiGLU product and
    ``h``): 8,328 in all, 92 % (the shipped board top uses 152 of the ECP5's 156, 97 %). The constraints
    hold: ``d_model`` and the chunk width 256 are multiples of 64, a GU run (``d_model / mv_in = 64``
    cycles) is no shorter than the ``mv_out = 64`` outputs its requantiser serialises, a D pass is
    ``(256 / 64) (4096 / 64) = 256 >= 3`` cycles.

    ``layers`` only sizes the replay cache here: the weights are streamed.
    """
    v = VILA_U_7B
    mv_in, mv_out = PROJECTED_MV
    return AccelConfig(d_model=v["d_model"], d_ff=v["d_ff"], layers=v["layers"],
                       tokens_per_frame=v["tokens_per_frame"], batch=batch, cores=2,
                       chunks=43, tas_lanes=64, mv_in=mv_in, mv_out=mv_out)


def geometry(cfg: AccelConfig) -> str:
    """The MAC units of ``cfg``, as a product (for the report's text)."""
    return f"{cfg.cores} cores x one {cfg.mv_in} x {cfg.mv_out} matrix-vector unit"


def compute_cycles(cfg: AccelConfig, mask) -> int:
    """Cycles of one DRS group from the configuration's cycle model (:func:`sw.perf.cycles.group_cycles`).

    Its step limit is raised above the default 2**20 cycles (a dense 7B group of B = 32 rows on
    4,096 MAC units would need more than that): four times the MAC-bound cycles of the group plus
    2**16.
    """
    ideal = mlp_macs(cfg, list(mask).count(0)) // cfg.mac_units
    return group_cycles(cfg, mask, "drs", limit=max(1 << 20, 4 * ideal + (1 << 16)))


def mlp_weight_bytes(cfg: AccelConfig) -> int:
    """int8 MLP weights of one layer: gate, up and down, ``3 * d_model * d_ff`` bytes."""
    return 3 * cfg.d_model * cfg.d_ff


def bytes_per_cycle(fpga: Fpga, clock_mhz: float) -> float:
    """HBM bytes per clock cycle at the peak theoretical bandwidth."""
    return fpga.hbm_gb_s * 1e9 / (clock_mhz * 1e6)


@lru_cache(maxsize=4096)
def _group_time(cfg: AccelConfig, fpga: Fpga, clock_mhz: float, mask: tuple[int, ...]) -> tuple:
    compute = compute_cycles(cfg, mask)
    computed = mask.count(0)
    traffic = (mlp_weight_bytes(cfg) if computed else 0) + len(mask) * cfg.d_model   # + replay cache
    weights = traffic / bytes_per_cycle(fpga, clock_mhz)
    # Double-buffered chunks: one chunk of the shorter side is not overlapped (filling the buffer).
    cycles = max(compute, weights) + (min(compute, weights) / cfg.chunks if computed else 0)
    return cycles, compute, weights, traffic


def group_time(cfg: AccelConfig, fpga: Fpga, clock_mhz: float, mask) -> dict:
    """Cycles of one group with the MLP weights streamed from HBM.

    Parameters
    ----------
    cfg : AccelConfig
        The projected accelerator (:func:`projected_accel`).
    fpga : Fpga
        Bandwidth source.
    clock_mhz : float
        Clock of the design.
    mask : sequence of int
        Replay bit of each row.

    Returns
    -------
    dict
        ``compute`` (the cycle model's schedule), ``weights`` (HBM bytes / bytes per cycle: all
        ``3 d d_ff`` weight bytes whenever at least one row computes, plus ``d`` bytes of replay
        cache per row), ``cycles = max(compute, weights) + min(compute, weights) / chunks`` and
        ``bound`` ("bandwidth" or "compute").

    Notes
    -----
    Fetching a layer's weights once per group assumes chunk-major issue: chunk ``j`` of every
    computed row while chunk ``j``'s weights are in an on-chip double buffer (2 x 3 MB at 7B). The
    RTL's dispatcher hands out a row's chunks one after another; its cycle model,
    whose schedule gives ``compute``, is taken as the compute time of the chunk-major order (the
    same chunks on the same cores). A job is one chunk of one row: each core reads one
    ``mv_in x mv_out`` weight block (4,096 bytes at 64 x 64) from the on-chip buffer per cycle and
    uses it for that row only.
    """
    cycles, compute, weights, traffic = _group_time(cfg, fpga, clock_mhz, tuple(int(m) for m in mask))
    return {"cycles": cycles, "compute": compute, "weights": weights, "bytes": traffic,
            "bound": "bandwidth" if weights > compute else "compute"}


def masks_time(cfg, fpga, clock_mhz, masks, weights=None) -> dict:
    """Mean of :func:`group_time` over ``masks`` (optionally weighted): cycles, bytes, bound share."""
    masks = [tuple(int(v) for v in m) for m in masks]
    w = np.ones(len(masks)) if weights is None else np.asarray(weights, float)
    w = w / w.sum()
    t = [group_time(cfg, fpga, clock_mhz, m) for m in masks]
    return {"cycles": float(sum(wi * ti["cycles"] for wi, ti in zip(w, t, strict=True))),
            "bytes": float(sum(wi * ti["bytes"] for wi, ti in zip(w, t, strict=True))),
            "bandwidth_bound": float(sum(wi for wi, ti in zip(w, t, strict=True)
                                         if ti["bound"] == "bandwidth")),
            "computed_rows": float(sum(wi * m.count(0) for wi, m in zip(w, masks, strict=True))),
            "all_replay": float(sum(wi for wi, m in zip(w, masks, strict=True) if 0 not in m))}


def binomial_masks(batch: int, p: float) -> tuple[list[tuple[int, ...]], list[float]]:
    """Masks with ``k`` replayed rows (replayed rows last) and their binomial probabilities.

    The position of the computed rows changes a group's time by at most the front end's time of
    the group's rows; putting them first is the model's simplification.
    """
    masks, probs = [], []
    for k in range(batch + 1):
        masks.append(tuple([0] * (batch - k) + [1] * k))
        probs.append(math.comb(batch, k) * p ** k * (1 - p) ** (batch - k))
    return masks, probs


def attention_bytes(v: dict, batch: int) -> float:
    """HBM bytes of the attention side per group (not accelerated, not replayed; bandwidth only).

    ``4 d^2`` int8 projection weights (q, k, v, o) plus the int8 KV cache of every row, averaged
    over the video: ``2 d (prompt_len + (frames * N + 1) / 2)`` bytes per row.
    """
    ctx = v["prompt_len"] + (v["frames"] * v["tokens_per_frame"] + 1) / 2
    return 4 * v["d_model"] ** 2 + batch * 2 * v["d_model"] * ctx


def capacity(v: dict, fpga: Fpga, batch: int) -> dict:
    """What must sit in HBM for one batch (bytes), against the card's HBM."""
    L, d = v["layers"], v["d_model"]
    ctx = v["prompt_len"] + v["frames"] * v["tokens_per_frame"]
    need = {"mlp_weights": L * 3 * d * v["d_ff"], "attention_weights": L * 4 * d * d,
            "kv_cache_int8": batch * L * 2 * d * ctx, "replay_cache": L * v["tokens_per_frame"] * batch * d}
    need["total"] = sum(need.values())
    need["hbm"] = int(fpga.hbm_gib * 2 ** 30)
    return need


def layer_masks(replay: np.ndarray, layer: np.ndarray, rows) -> dict[int, np.ndarray]:
    """Per trace layer: the masks of the given row subsets (each subset's groups stacked)."""
    return {int(n): np.concatenate([replay[layer == n][:, list(s)] for s in rows])
            for n in np.unique(layer)}


def project_video(v: dict, fpga: Fpga, clock_mhz: float, masks_by_layer: dict, batch: int) -> dict:
    """Time of one batch of ``batch`` rows (``batch / 2`` videos) at 7B, per layer group and in all,
    on ``projected_accel(batch)``.

    Trace layer ``n`` of ``n_trace`` stands for the 7B layers ``n * L / n_trace`` to
    ``(n + 1) * L / n_trace - 1`` (the same relative depth); within it, the mean group time over
    the trace's masks is taken for every one of the ``frames * N`` decode steps.
    """
    cfg = projected_accel(batch)
    n_trace = len(masks_by_layer)
    per_layer = v["layers"] // n_trace
    steps = v["frames"] * v["tokens_per_frame"]
    hz = clock_mhz * 1e6
    groups, dense_s, fast_s = [], 0.0, 0.0
    for n, masks in sorted(masks_by_layer.items()):
        dense = masks_time(cfg, fpga, clock_mhz, [(0,) * batch])
        fast = masks_time(cfg, fpga, clock_mhz, masks)
        d_s, f_s = dense["cycles"] * steps * per_layer / hz, fast["cycles"] * steps * per_layer / hz
        dense_s, fast_s = dense_s + d_s, fast_s + f_s
        r = float(np.mean(masks))
        groups.append({"layers": f"{n * per_layer}-{(n + 1) * per_layer - 1}", "trace_layer": n,
                       "replay_ratio": r, "all_replay": fast["all_replay"],
                       "dense_s": d_s, "fastcar_s": f_s, "speedup": d_s / f_s,
                       "ideal": 1 / max(1 - r, 1e-9),
                       "dense_bound": group_time(cfg, fpga, clock_mhz, (0,) * batch)["bound"],
                       "fastcar_bandwidth_bound_groups": fast["bandwidth_bound"]})
    r = float(np.mean([g["replay_ratio"] for g in groups]))
    attn_s = attention_bytes(v, batch) / (fpga.hbm_gb_s * 1e9) * steps * v["layers"]
    return {"batch": batch, "videos": batch / 2, "layer_groups": groups,
            "mlp_dense_s": dense_s, "mlp_fastcar_s": fast_s, "mlp_speedup": dense_s / fast_s,
            "replay_ratio": r, "ideal_compute_bound": 1 / (1 - r),
            "attention_s": attn_s, "decoder_dense_s": dense_s + attn_s,
            "decoder_fastcar_s": fast_s + attn_s, "decoder_speedup": (dense_s + attn_s) / (fast_s + attn_s)}


def project_independent(v, fpga, clock_mhz, replay, layer, frame, batch: int) -> dict:
    """:func:`project_video` for ``batch`` rows that replay independently (model, for B > trace rows)."""
    cfg = projected_accel(batch)
    steps, hz = v["frames"] * v["tokens_per_frame"], clock_mhz * 1e6
    layers = np.unique(layer)
    per_layer = v["layers"] // len(layers)
    dense = masks_time(cfg, fpga, clock_mhz, [(0,) * batch])["cycles"]
    fast = 0.0
    for n in layers:
        for t in np.unique(frame):
            sel = (layer == n) & (frame == t)
            masks, probs = binomial_masks(batch, float(np.mean(replay[sel])))
            share = sel.sum() / (layer == n).sum()
            fast += share * masks_time(cfg, fpga, clock_mhz, masks, probs)["cycles"] * per_layer
    dense_s = dense * steps * v["layers"] / hz
    fast_s = fast * steps / hz
    r = float(np.mean(replay))
    return {"batch": batch, "videos": batch / 2, "mlp_dense_s": dense_s, "mlp_fastcar_s": fast_s,
            "mlp_speedup": dense_s / fast_s, "ideal_compute_bound": 1 / (1 - r),
            "dense_bound": group_time(cfg, fpga, clock_mhz, (0,) * batch)["bound"]}


# ---------------------------------------------------------------------------------------------
# Energy model (45 nm per-operation energies; a model, not a measurement)
# ---------------------------------------------------------------------------------------------

#: Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014, 45 nm,
#: 0.9 V, in pJ: 8-bit integer multiply 0.2; 32-bit integer add 0.1; 32-bit integer multiply 3.1;
#: 64-bit read of an 8 KB SRAM 10; 64-bit DRAM access 1,300 to 2,600 (both ends are reported).
HOROWITZ_45NM_PJ = {"int8_mult": 0.2, "int32_add": 0.1, "int32_mult": 3.1, "sram_8kb_read_64bit": 10.0,
                    "dram_64bit_low": 1300.0, "dram_64bit_high": 2600.0}


def _per_byte(pj_per_64bit: float) -> float:
    return pj_per_64bit / 8


def group_energy_pj(cfg: AccelConfig, computed: float, rows: int, *, weights_in_dram: bool,
                    dram_pj_64bit: float = HOROWITZ_45NM_PJ["dram_64bit_low"]) -> dict:
    """Modelled energy of one group, by component, in pJ.

    Parameters
    ----------
    cfg : AccelConfig
        The accelerator.
    computed : float
        Rows of the group that compute (a mean over groups is fine).
    rows : int
        Rows of the group.
    weights_in_dram : bool
        True for the 7B projection: the replay cache lives in DRAM. (The weight stream itself
        depends on whether any row of a group computes; :func:`stream_energy_pj` adds it.)
    dram_pj_64bit : float
        DRAM energy per 64-bit access (Horowitz gives 1,300 to 2,600 pJ).

    Notes
    -----
    Counted: one 8-bit multiply and one 32-bit add per MAC; one on-chip weight byte read per MAC
    (an 8 KB SRAM 64-bit read / 8 per byte); the requantisers as one 32-bit multiply per output
    element (``2 d_ff + d`` per computed row); the 32-bit adds of the chunks' partial sums; the
    TAS dot product (``d`` multiply-adds per row); the replay cache (``d`` bytes per row, read or
    written). Not counted: registers, wires, clocking, control, the host link and static power. On
    an FPGA these dominate, so the result is a lower bound on any real FPGA's energy.

    Weights and partial sums (:class:`hw.accel.mv_core.MvCore`): a job is one chunk of *one* row,
    so each core reads one ``mv_in x mv_out`` weight block from the block-RAM weight store per cycle
    and uses every weight in it for one MAC of that row: one weight byte read per MAC, not one per
    block shared by the group's rows. Each D pass adds its ``d`` partial sums into the row's
    accumulator in the core (``chunks * d`` adds per computed row) and the output stage
    (:class:`hw.accel.row_out.RowOut`) adds the cores' accumulators, ``(cores - 1) * d`` more. The
    ``reducer`` entry counts both.
    """
    e = HOROWITZ_45NM_PJ
    sram_b = _per_byte(e["sram_8kb_read_64bit"])
    d, f = cfg.d_model, cfg.d_ff
    macs = computed * 3 * d * f
    comp = {"mac": macs * (e["int8_mult"] + e["int32_add"]),
            "pe_weight_reads": macs * sram_b,
            "requant": computed * (2 * f + d) * e["int32_mult"],
            "reducer": computed * _partial_sum_adds(cfg) * e["int32_add"],
            "tas": rows * d * (e["int8_mult"] + e["int32_add"]),
            "replay_cache": rows * d * (_per_byte(dram_pj_64bit) if weights_in_dram else sram_b)}
    comp["total"] = sum(comp.values())
    return comp


def _partial_sum_adds(cfg: AccelConfig) -> int:
    """32-bit adds of partial sums per computed row (see :func:`group_energy_pj`)."""
    return cfg.chunks * cfg.d_model + (cfg.cores - 1) * cfg.d_model


def stream_energy_pj(cfg: AccelConfig, groups_with_compute: float, dram_pj_64bit: float) -> float:
    """DRAM read plus on-chip buffer write of the MLP weights for ``groups_with_compute`` groups."""
    per_byte = _per_byte(dram_pj_64bit) + _per_byte(HOROWITZ_45NM_PJ["sram_8kb_read_64bit"])
    return groups_with_compute * mlp_weight_bytes(cfg) * per_byte


def energy_summary(cfg: AccelConfig, groups: float, rows_per_group: int, computed_per_group: float,
                   all_replay: float, *, weights_in_dram: bool, dram_pj_64bit: float) -> dict:
    """Energy of ``groups`` groups (J), with actual and dense-equivalent GOPS/W."""
    g = group_energy_pj(cfg, computed_per_group, rows_per_group, weights_in_dram=weights_in_dram,
                        dram_pj_64bit=dram_pj_64bit)
    comps = {k: v * groups for k, v in g.items() if k != "total"}
    if weights_in_dram:
        comps["weight_stream"] = stream_energy_pj(cfg, groups * (1 - all_replay), dram_pj_64bit)
    total_pj = sum(comps.values())
    ops = 2 * groups * computed_per_group * 3 * cfg.d_model * cfg.d_ff
    dense_ops = 2 * groups * rows_per_group * 3 * cfg.d_model * cfg.d_ff
    return {"joules": total_pj * 1e-12, "components_j": {k: v * 1e-12 for k, v in comps.items()},
            "gops_per_watt": ops / (total_pj * 1e-12) / 1e9,
            "dense_equivalent_gops_per_watt": dense_ops / (total_pj * 1e-12) / 1e9}


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------

def _trace(path):
    from sw.trace.decode import load_decode_trace
    from sw.trace.store import TraceError

    try:
        return load_decode_trace(path)
    except TraceError as e:
        raise ProjectionError(str(e)) from None


def shipped_section(cfg, clock, points, tr) -> dict:
    """Real units for the bench points (RTL, extrapolated) and the whole trace (cycle model)."""
    frames = int(tr.manifest.get("frames", 8))
    return {"config": cfg.to_dict(), "mac_units": cfg.mac_units, "geometry": geometry(cfg), "frames": frames,
            "videos_per_batch": max(cfg.batch // 2, 1),
            "peak_gops": 2 * cfg.mac_units * clock.mhz / 1e3,
            "bench_points": [bench_point_units(cfg, p, clock, frames=frames) for p in points],
            "whole_trace_model": trace_units(cfg, tr.replay, clock, frames=frames, frame=tr.group_frame)}


MEASURED = "measured (row subsets of the trace)"
MEASURED_CFG = "measured (CFG pairs of the trace)"
INDEPENDENT = "model: rows replay independently"


def accel_summary(cfg: AccelConfig, fpga: Fpga, clock_mhz: float) -> dict:
    """The projected accelerator: its configuration, MAC units (``cfg.mac_units``), their share of
    the device's DSP slices and the peak GOPS; a :class:`ProjectionError` if the MACs do not fit."""
    if cfg.mac_units > fpga.dsp:
        raise ProjectionError(f"projected accelerator needs {cfg.mac_units} MAC units, {fpga.name} has "
                              f"{fpga.dsp}")
    return {"accel": cfg.to_dict(), "mac_units": cfg.mac_units, "geometry": geometry(cfg),
            "dsp_fraction": cfg.mac_units / fpga.dsp, "peak_gops": 2 * cfg.mac_units * clock_mhz / 1e3}


def projection_section(fpga, clock_mhz, tr, bench_traces) -> dict:
    """The 7B projection on ``projected_accel(2)``: masks from the trace's CFG pairs,
    B sweep, per bench trace (sorted by tau)."""
    v = VILA_U_7B
    R, L, F = tr.replay.astype(np.uint8), tr.group_layer, tr.group_frame
    cfg = projected_accel(v["batch"])
    summary = accel_summary(cfg, fpga, clock_mhz)
    B = R.shape[1]
    main = project_video(v, fpga, clock_mhz, layer_masks(R, L, cfg_pairs(B)), 2)
    sweep = []
    runs = [(b, row_subsets(B, b), MEASURED) for b in (1, 2, 4) if b <= B]
    if B >= 2 and B % 2 == 0:
        runs.insert(2, (2, cfg_pairs(B), MEASURED_CFG))
    for b, subsets, source in runs:
        p = project_video(v, fpga, clock_mhz, layer_masks(R, L, subsets), b)
        sweep.append({"batch": b, "source": source,
                      **{k: p[k] for k in ("videos", "mlp_dense_s", "mlp_fastcar_s", "mlp_speedup",
                                           "ideal_compute_bound")},
                      "dense_bound": p["layer_groups"][0]["dense_bound"]})
    for b in (1, 2, 4, 8, 16, 32):
        sweep.append({**project_independent(v, fpga, clock_mhz, R, L, F, b),
                      "source": INDEPENDENT})
    per_trace = []
    for path in bench_traces:
        t = _trace(path)
        Rt = t.replay.astype(np.uint8)
        p = project_video(v, fpga, clock_mhz, layer_masks(Rt, t.group_layer, cfg_pairs(Rt.shape[1])), 2)
        per_trace.append({"trace": str(path), "tau": t.manifest["decode"]["tau"][0],
                          "replay_ratio": float(Rt.mean()),
                          "all_replay_cfg_pairs": float(np.mean([all_replay_fraction(Rt, s)
                                                                 for s in cfg_pairs(Rt.shape[1])])),
                          "mlp_speedup": p["mlp_speedup"], "decoder_speedup": p["decoder_speedup"],
                          "ideal_compute_bound": 1 / (1 - float(Rt.mean()))})
    per_trace.sort(key=lambda t: t["tau"])
    group = group_time(cfg, fpga, clock_mhz, (0,) * v["batch"])
    return {"fpga": asdict(fpga), "clock_mhz": clock_mhz,
            "clock_source": f"assumed: {clock_mhz:g} MHz for the projected design (not measured)",
            "model": v, **summary,
            "mlp_weight_bytes_per_layer": mlp_weight_bytes(cfg),
            "hbm_bytes_per_cycle": bytes_per_cycle(fpga, clock_mhz),
            "dense_group": group, "capacity": capacity(v, fpga, v["batch"]),
            "video": main, "batch_sweep": sweep, "bench_traces": per_trace,
            "replay_vs_batch": replay_vs_batch(R, L, F)}


def energy_section(shipped_cfg, tr, proj) -> dict:
    """The energy model for the shipped model's whole trace and for one 7B video."""
    R = tr.replay.astype(np.uint8)
    G, B = R.shape
    comp = float((R == 0).sum(axis=1).mean())
    out = {"constants_pj": HOROWITZ_45NM_PJ,
           "source": "Horowitz, Computing's energy problem (and what we can do about it), ISSCC 2014, 45 nm",
           "label": "model, not a measurement: arithmetic and memory access energy only",
           "shipped": {mode: energy_summary(shipped_cfg, G, B, c, 0.0, weights_in_dram=False,
                                            dram_pj_64bit=HOROWITZ_45NM_PJ["dram_64bit_low"])
                       for mode, c in (("dense", float(B)), ("fastcar", comp))}}
    v, video = VILA_U_7B, proj["video"]
    cfg7 = AccelConfig.from_dict(proj["accel"])          # the projected accelerator, B = 2
    groups = v["frames"] * v["tokens_per_frame"] * v["layers"]
    computed = v["batch"] * (1 - video["replay_ratio"])
    all_rep = float(np.mean([g["all_replay"] for g in video["layer_groups"]]))
    out["projection"] = {}
    for end in ("low", "high"):
        pj = HOROWITZ_45NM_PJ[f"dram_64bit_{end}"]
        out["projection"][f"dram_{end}"] = {
            "dram_pj_per_64bit": pj,
            "dense": energy_summary(cfg7, groups, v["batch"], float(v["batch"]), 0.0, weights_in_dram=True,
                                    dram_pj_64bit=pj),
            "fastcar": energy_summary(cfg7, groups, v["batch"], computed, all_rep, weights_in_dram=True,
                                      dram_pj_64bit=pj)}
    out["paper"] = ("the paper gives no GFLOPs/W figure (its FPGA board, clock, core count and power "
                    "method are not stated), so there is nothing to compare with")
    return out


def pick_clock(synth, assume_mhz, cfg: AccelConfig) -> tuple[Clock, Clock | None]:
    """The clock to convert cycles with, and the measured one if there is a usable report.

    Without ``assume_mhz`` the synthesis report must give ``fmax_mhz`` (any problem is an error).
    With it, the assumed clock is used and a measured Fmax is only reported beside it.
    """
    if assume_mhz is None:
        if synth is None:
            raise ProjectionError("no clock: give --synth REPORT (field 'fmax_mhz') or --assume-mhz MHZ")
        if not Path(synth).exists():
            raise ProjectionError(f"{synth}: no such synthesis report (field 'fmax_mhz' needed); pass "
                                  f"--assume-mhz MHZ to use an assumed clock")
        measured = clock_from_synth(synth, cfg)
        return measured, measured
    try:
        measured = clock_from_synth(synth, cfg) if synth is not None else None
    except ProjectionError:
        measured = None
    return assumed_clock(assume_mhz), measured


def build_report(*, bench, synth, assume_mhz, trace, fpga_mhz, bench_traces_from_report=True,
                 bench_traces=()) -> dict:
    """Everything the CLI writes, as one dict.

    ``bench_traces`` are decode traces for the per-trace 7B table, after those the bench report
    names (with ``bench_traces_from_report``). The shipped sections use
    :data:`sw.config.DEFAULT_ACCEL`, the projection :func:`projected_accel`.
    """
    cfg = DEFAULT_ACCEL
    clock, measured = pick_clock(synth, assume_mhz, cfg)
    points, bench_note = load_bench(bench, cfg) if bench is not None else ([], "no bench report")
    tr = _trace(trace)
    traces = []
    if bench_traces_from_report:
        traces = [p["trace"] for p in sorted(points, key=lambda p: p["tau"])
                  if isinstance(p.get("trace"), str) and Path(p["trace"]).is_dir()]
    for t in bench_traces:
        if not Path(t).is_dir():
            raise ProjectionError(f"{t}: --bench-trace: no such decode trace directory")
        if str(t) not in traces:
            traces.append(str(t))
    proj = projection_section(ALVEO_U280, fpga_mhz, tr, traces)
    return {"sources": {"bench": str(bench) if bench else None, "bench_config": bench_note,
                        "synth": str(synth) if synth else None, "trace": str(trace)},
            "clock": asdict(clock), "measured_clock": asdict(measured) if measured else None,
            "shipped": shipped_section(cfg, clock, points, tr), "projection": proj,
            "energy": energy_section(cfg, tr, proj)}


def _f(x, nd=2):
    return f"{x:,.{nd}f}"


def render_md(rep: dict, command: str) -> str:
    """The report as Markdown tables (every table says which command produced it)."""
    s, p, e = rep["shipped"], rep["projection"], rep["energy"]
    clk = rep["clock"]
    sc = AccelConfig.from_dict(s["config"])
    out = [f"# Performance projection\n\nProduced by `{command}`.\n",
           f"Clock of the shipped accelerator: **{clk['mhz']:g} MHz**, {clk['source']}.\n",
           "## Shipped model on the ECP5 accelerator (real units)\n",
           f"MAC units: {s['mac_units']} ({geometry(sc)}); peak {_f(s['peak_gops'])} GOPS "
           f"(2 operations per MAC). One batch is B = {sc.batch} rows: {s['videos_per_batch']} videos of "
           f"{s['frames']} frames with their CFG rows, generated together.\n"]
    if s["bench_points"]:
        out += ["RTL cycles from the bench report (positions 0-7 of each frame and layer, scaled to all "
                f"{sc.tokens_per_frame} positions by x{s['bench_points'][0]['extrapolation']:g}; "
                f"{rep['sources']['bench_config']}):\n",
                "| tau | replay | dense ms/video | FastCar ms/video | FastCar ms/frame | static ms/video "
                "| speed-up | achieved GOPS | dense-equivalent GOPS | MAC utilisation |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        for b in s["bench_points"]:
            fc = b["fastcar"]
            out.append(f"| {b['tau']} | {b['replay_ratio']:.3f} | {_f(b['dense']['ms_per_video'])} "
                       f"| {_f(fc['ms_per_video'])} | {_f(fc['ms_per_frame'])} "
                       f"| {_f(b['static']['ms_per_video'])} | {b['speedup']:.2f}x "
                       f"| {_f(fc['achieved_gops'])} | {_f(fc['dense_equivalent_gops'])} "
                       f"| {fc['mac_utilization']:.2f} |")
        out.append("")
    w = s["whole_trace_model"]
    agreement = "equal to the RTL's cycle counter on every group of the accelerator regression"
    out += [f"Cycle model on the whole shipped trace (all {w['groups']:,} groups, current configuration; "
            f"{agreement}):\n",
            "| run | cycles | ms/video | ms/frame | achieved GOPS | MAC utilisation |",
            "|---|---|---|---|---|---|"]
    for mode in ("dense", "fastcar"):
        m = w[mode]
        out.append(f"| {mode} | {m['cycles']:,.0f} | {_f(m['ms_per_video'])} | {_f(m['ms_per_frame'])} "
                   f"| {_f(m['achieved_gops'])} | {m['mac_utilization']:.2f} |")
    out.append(f"\nSpeed-up {w['speedup']:.2f}x at replay ratio {w['replay_ratio']:.3f}. Latency of each "
               "frame, FastCar (frame 0 is always computed): "
               + ", ".join(f"{x:.2f}" for x in w["fastcar"]["ms_by_frame"]) + " ms.\n")

    f, v = p["fpga"], p["model"]
    g, pc = p["dense_group"], AccelConfig.from_dict(p["accel"])
    out += ["## Projection: VILA-U-7B on an AMD Alveo U280\n",
            f"Device: {f['name']} ({f['part']}), {f['dsp']:,} DSP slices, HBM2 {f['hbm_gb_s']:g} GB/s "
            f"({f['hbm_gib']:g} GB), DDR4 {f['ddr_gb_s']:g} GB/s; figures from {f['source']}. "
            f"Clock {p['clock_source']}.\n",
            f"Accelerator: {geometry(pc)} = {p['mac_units']:,} MAC units "
            f"({p['dsp_fraction']:.0%} of the DSP slices), peak "
            f"{_f(p['peak_gops'], 0)} GOPS; {pc.chunks} chunks of {pc.chunk_width} hidden channels. "
            f"MLP weights per layer: 3 x {pc.d_model} x {pc.d_ff} = {p['mlp_weight_bytes_per_layer']:,} "
            "bytes (int8), "
            f"streamed from HBM at {p['hbm_bytes_per_cycle']:,.0f} bytes per cycle.\n",
            f"A dense group of B = {v['batch']} rows: compute {g['compute']:,} cycles, weights "
            f"{g['weights']:,.0f} cycles: **{g['bound']}-bound** "
            f"(weights/compute = {g['weights'] / g['compute']:.2f}).\n"]
    c = p["capacity"]
    out += ["HBM capacity for one video (B = 2): " + ", ".join(
        f"{k.replace('_', ' ')} {c[k] / 2**30:.2f} GiB" for k in
        ("mlp_weights", "attention_weights", "kv_cache_int8", "replay_cache", "total"))
        + f" of {c['hbm'] / 2**30:g} GiB.\n"]
    vid = p["video"]
    out += ["Per layer group, B = 2 (one video with its CFG row; the trace's conditional and "
            "unconditional rows of each prompt), masks from the trace's layer at the same relative depth:\n",
            "| 7B layers | trace layer | replay | all rows replay | dense s | FastCar s | speed-up "
            "| ideal 1/(1-r) | dense group | FastCar groups bandwidth-bound |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for lg in vid["layer_groups"]:
        out.append(f"| {lg['layers']} | {lg['trace_layer']} | {lg['replay_ratio']:.3f} "
                   f"| {lg['all_replay']:.3f} | {_f(lg['dense_s'])} | {_f(lg['fastcar_s'])} "
                   f"| {lg['speedup']:.2f}x | {lg['ideal']:.2f}x | {lg['dense_bound']} "
                   f"| {lg['fastcar_bandwidth_bound_groups']:.2f} |")
    out += ["", "| per video (8 frames, B = 2) | dense | FastCar | speed-up |", "|---|---|---|---|",
            f"| MLP stage | {_f(vid['mlp_dense_s'])} s | {_f(vid['mlp_fastcar_s'])} s "
            f"| {vid['mlp_speedup']:.2f}x (compute-bound ideal {vid['ideal_compute_bound']:.2f}x) |",
            f"| attention side, HBM traffic only (not replayed) | {_f(vid['attention_s'])} s "
            f"| {_f(vid['attention_s'])} s | 1 |",
            f"| decoder (MLP + attention traffic) | {_f(vid['decoder_dense_s'])} s | "
            f"{_f(vid['decoder_fastcar_s'])} s | {vid['decoder_speedup']:.2f}x |", ""]
    rb = p["replay_vs_batch"]
    out += ["### Groups in which every row replays, against B\n",
            f"Trace replay ratio {rb['replay_ratio']:.3f}. Measured on row subsets of the trace; the "
            "independence rows are a model (each row replays with its layer's and frame's replay ratio, "
            "independently of the other rows).\n",
            "| B | rows | all-replay fraction (measured) | min | max |", "|---|---|---|---|---|"]
    for m in rb["measured"]:
        out.append(f"| {m['batch']} | {m['subsets']} ({m['n_subsets']}) | {m['fraction']:.3f} "
                   f"| {m['min']:.3f} | {m['max']:.3f} |")
    out += ["", "| B | " + " | ".join(str(m["batch"]) for m in rb["independent"]) + " |",
            "|---" * (len(rb["independent"]) + 1) + "|",
            "| independence model | " + " | ".join(f"{m['fraction']:.3f}" for m in rb["independent"]) + " |",
            "", "Projected MLP speed-up per B (7B, U280):\n",
            "| B | source | dense s per batch | FastCar s per batch | FastCar s per video (B/2 videos) "
            "| speed-up | compute-bound ideal | dense group |",
            "|---|---|---|---|---|---|---|---|"]
    for sw_ in p["batch_sweep"]:
        out.append(f"| {sw_['batch']} | {sw_['source']} | {_f(sw_['mlp_dense_s'])} "
                   f"| {_f(sw_['mlp_fastcar_s'])} | {_f(sw_['mlp_fastcar_s'] / sw_['videos'])} "
                   f"| {sw_['mlp_speedup']:.2f}x | {sw_['ideal_compute_bound']:.2f}x "
                   f"| {sw_['dense_bound']} |")
    if p["bench_traces"]:
        out += ["", "Per bench trace (B = 2, CFG pairs):\n",
                "| tau | replay | all rows replay | MLP speed-up | decoder speed-up | compute-bound ideal |",
                "|---|---|---|---|---|---|"]
        for t in p["bench_traces"]:
            out.append(f"| {t['tau']} | {t['replay_ratio']:.3f} | {t['all_replay_cfg_pairs']:.3f} "
                       f"| {t['mlp_speedup']:.2f}x | {t['decoder_speedup']:.2f}x "
                       f"| {t['ideal_compute_bound']:.2f}x |")
    out += ["", "## Energy (a model, not a measurement)\n",
            f"Per-operation energies from {e['source']} (pJ): "
            + ", ".join(f"{k} {v:g}" for k, v in e["constants_pj"].items())
            + ". Counted: MACs, on-chip weight reads (one byte per MAC), requantisers, partial-sum adds, "
              "TAS, replay cache and (7B) "
              "weight streaming. Not counted: registers, wires, clocking, control, static power; a real "
              "FPGA spends much more.\n",
            "| design | run | energy | GOPS/W (ops done) | dense-equivalent GOPS/W |",
            "|---|---|---|---|---|"]
    for mode in ("dense", "fastcar"):
        m = e["shipped"][mode]
        out.append(f"| shipped model, whole trace (2 videos) | {mode} | {m['joules'] * 1e6:,.1f} uJ "
                   f"| {m['gops_per_watt']:,.0f} | {m['dense_equivalent_gops_per_watt']:,.0f} |")
    for pe in e["projection"].values():
        for mode in ("dense", "fastcar"):
            m = pe[mode]
            out.append(f"| 7B, one video, DRAM {pe['dram_pj_per_64bit']:g} pJ/64 bit | {mode} "
                       f"| {m['joules']:,.0f} J | {m['gops_per_watt']:,.1f} "
                       f"| {m['dense_equivalent_gops_per_watt']:,.1f} |")
    out += ["", f"Paper: {e['paper']}.", ""]
    return "\n".join(out)


def plot(rep: dict, path: Path) -> None:
    """All-replay fraction against B (left) and the projected 7B MLP speed-up against B (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rb, sweep = rep["projection"]["replay_vs_batch"], rep["projection"]["batch_sweep"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    ind = rb["independent"]
    a.plot([m["batch"] for m in ind], [m["fraction"] for m in ind], "s:", label="model: independent rows")
    meas = [m for m in rb["measured"] if m["subsets"] == "all"]
    a.errorbar([m["batch"] for m in meas], [m["fraction"] for m in meas],
               yerr=[[m["fraction"] - m["min"] for m in meas], [m["max"] - m["fraction"] for m in meas]],
               fmt="o-", capsize=3, label="measured (row subsets)")
    a.axhline(rb["replay_ratio"], color="k", lw=0.8, ls="--", label="replay ratio r")
    cfgp = [m for m in rb["measured"] if m["subsets"] == "cfg pairs"]
    a.plot([m["batch"] for m in cfgp], [m["fraction"] for m in cfgp], "D", label="measured (CFG pairs)")
    ticks = [m["batch"] for m in ind]
    a.set_xscale("log", base=2)
    a.set_xticks(ticks, [str(t) for t in ticks])
    a.set_xlabel("rows per group B")
    a.set_ylabel("groups in which every row replays")
    a.legend(fontsize=7)
    for src, style, label in ((MEASURED, "o-", "measured masks"), (INDEPENDENT, "s:", "independent rows")):
        pts = [x for x in sweep if x["source"] == src]
        b.plot([x["batch"] for x in pts], [x["mlp_speedup"] for x in pts], style,
               label=f"7B on U280, {label}")
    b.axhline(sweep[0]["ideal_compute_bound"], color="k", lw=0.8, ls="--",
              label="compute-bound ideal 1/(1-r)")
    b.set_xscale("log", base=2)
    b.set_xticks(ticks, [str(t) for t in ticks])
    b.set_xlabel("rows per group B")
    b.set_ylabel("MLP-stage speed-up over dense")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None) -> int:
    """Command line; returns the exit status."""
    ap = argparse.ArgumentParser(prog="python -m sw.perf.projection", description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", type=Path, default=None,
                    help=f"tb.bench report (default {DEFAULT_BENCH.relative_to(REPO)} if it exists)")
    ap.add_argument("--no-bench", action="store_true",
                    help="read no bench report (e.g. one measured on another configuration): the shipped "
                         "figures come from the cycle model on the whole trace only")
    ap.add_argument("--bench-trace", type=Path, action="append", default=[], metavar="DIR",
                    help="a decode trace for the per-trace 7B table, besides the bench report's (repeatable)")
    ap.add_argument("--synth", type=Path, default=DEFAULT_SYNTH, help="synthesis report with 'fmax_mhz'")
    ap.add_argument("--assume-mhz", type=float, default=None,
                    help="use this clock for the shipped accelerator instead (reported as assumed)")
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="decode trace for the replay masks")
    ap.add_argument("--fpga-mhz", type=float, default=ALVEO_U280.clock_mhz,
                    help="assumed clock of the projected U280 design")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true", help="replace an existing report")
    args = ap.parse_args(argv)
    if args.no_bench and args.bench is not None:
        print("sw.perf.projection: --bench and --no-bench exclude each other", file=sys.stderr)
        return 2
    bench = None if args.no_bench else (
        args.bench if args.bench is not None else (DEFAULT_BENCH if DEFAULT_BENCH.exists() else None))
    if args.out.exists() and not args.force and (not args.out.is_dir() or any(args.out.iterdir())):
        print(f"sw.perf.projection: {args.out}: already exists; pass --force to overwrite", file=sys.stderr)
        return 1
    from sw.atomic import atomic_dir

    try:
        rep = build_report(bench=bench, synth=args.synth, assume_mhz=args.assume_mhz, trace=args.trace,
                           fpga_mhz=args.fpga_mhz, bench_traces=args.bench_trace)
    except (ProjectionError, ConfigError) as e:
        print(f"sw.perf.projection: {e}", file=sys.stderr)
        return 2
    command = "python -m sw.perf.projection " + " ".join(argv if argv is not None else sys.argv[1:])
    rep["command"] = command.strip()
    with atomic_dir(args.out, force=True) as tmp:
        (tmp / "report.json").write_text(json.dumps(rep, indent=1) + "\n")
        (tmp / "report.md").write_text(render_md(rep, rep["command"]))
        plot(rep, tmp / "all_replay.png")
    print(render_md(rep, rep["command"]))
    print(f"wrote {args.out}/report.json, report.md, all_replay.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
