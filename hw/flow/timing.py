"""Fmax of each block of the accelerator, placed and routed alone on the ECP5-85F: a timing loop of minutes.

Usage::

    python -m hw.flow.timing [BLOCK ...] [--mhz 180] [--jobs N] [--accel CFG.json] [--list]
    python -m hw.flow.timing --check BLOCK ...        # fail if a block's Fmax fell > 5 % below the record
    python -m hw.flow.timing --record BLOCK ...       # write the measured figures into the record
    python -m hw.flow.timing --from-report build/timing/report.json [--markdown] [--record]
    python -m hw.flow.timing --chip [--mhz F] [--placer static|heap]   # the whole board top, placed only

Each block is built by the board flow (:mod:`hw.flow.synth`: yosys ``synth_ecp5``, nextpnr-ecp5, the
same options as the whole chip) inside :class:`hw.flow.synth_harness.SynthHarness` with
``register_outputs``: every input comes from a flop of the harness's stimulus chain and every output
goes into a flop of its own, so each path nextpnr reports starts and ends at a register and the
harness is never the limit. The PLL is set to ``--mhz`` (default :data:`TARGET_MHZ`, the figure each
block must reach so that the whole chip still closes after congestion).

It prints, per block, Fmax, the critical path (from which signal to which, logic and routing
nanoseconds) and the hard blocks and fabric it uses, and writes ``build/timing/report.json``.
``docs/timing.md`` carries the table. :data:`RECORD` holds the last recorded Fmax of every block;
``--check`` (which ``tests/hw/flow/test_timing.py`` runs in CI on the cheapest blocks) fails when a block
falls more than :data:`TOLERANCE` below it. nextpnr is deterministic for one netlist and seed, so
a change in the figure means a change in the design or the tools.

``--chip`` places the whole board top (:func:`hw.flow.synth.make_board_top`) without routing and
prints nextpnr's placement estimate of Fmax for each clock, with the resources: the whole-chip
loop of minutes where a route takes an hour or does not converge (:func:`run_chip`). Its
bitstream is of an unrouted design and is deleted.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from amaranth.lib import data

from hw.flow.synth import (
    DEFAULT_BOARD_FILE,
    REPO_ROOT,
    HarnessTop,
    SynthError,
    build_and_parse,
    compute_pll,
    load_board,
    make_platform,
    with_tool_env,
    write_report,
)

__all__ = ["BLOCKS", "STEP_BLOCKS", "TARGET_MHZ", "TOLERANCE", "RECORD", "make_block", "run_block",
           "run_blocks", "run_chip", "check_against_record", "main"]

#: The Fmax every block must reach alone (the whole chip loses 20-30 % to congestion).
TARGET_MHZ = 180.0
#: Routed Fmax over nextpnr's placement estimate, measured on board tops placed and then routed in
#: one run (docs/timing.md): the tiny one (86.39 -> 116.78 MHz), the mid-size one (48.55 ->
#: 69.82), the floorplanned default one (60.23 -> 88.66), the first that met 100 MHz (68.46 ->
#: 103.73), the one before the bit-serial TAS (72.92 -> 101.56), the first bit-serial one (66.70 ->
#: 97.41) and the shipped one (69.94 -> 104.87). ``--chip`` scales its estimate by their range to
#: predict the routed figure.
ROUTED_OVER_ESTIMATE = {"tiny": 116.78 / 86.39, "mid-size": 69.82 / 48.55, "default": 88.66 / 60.23,
                        "default, first at 100 MHz": 103.73 / 68.46,
                        "default, before the bit-serial TAS": 101.56 / 72.92,
                        "default, bit-serial TAS, output registered": 97.41 / 66.70,
                        "default, shipped": 104.87 / 69.94}
#: How far below its recorded Fmax a block may fall before ``--check`` fails.
TOLERANCE = 0.05
#: The recorded Fmax of each block (``python -m hw.flow.timing --record ...`` writes it).
RECORD = REPO_ROOT / "constraints" / "timing_record.json"
DEFAULT_BUILD_DIR = REPO_ROOT / "build" / "timing"


def _weights(cfg):
    from hw.accel.weight_store import WeightStore
    return WeightStore(cfg)


def _mv(cfg):
    from hw.lib.mv_unit import MvUnit
    from sw.spec.quant import sum_bits
    return MvUnit(cfg.mv_in, cfg.mv_out, max(cfg.gu_sum_bits, sum_bits(cfg.chunk_width)))


def _mv_core(cfg):
    from hw.accel.mv_core import MvCore
    from hw.accel.weight_store import WeightStore
    from hw.lib.widths import index_bits
    return MvCore(cfg, w_latency=WeightStore.latency,
                  tag_bits=index_bits(cfg.batch))


def _row_out(cfg):
    from hw.accel.row_out import RowOut
    from hw.lib.widths import index_bits
    return RowOut(cfg, cores=2, tag_bits=index_bits(cfg.batch))


def _dispatcher(cfg):
    from hw.accel.dispatcher import Dispatcher
    from hw.lib.widths import index_bits
    return Dispatcher(layers=cfg.layers, chunks=cfg.chunks, cores=cfg.cores, tag_bits=index_bits(cfg.batch))


def _tas_group(cfg):
    from hw.accel.accelerator import FRAME_BITS
    from hw.accel.tas_group import TasGroup
    return TasGroup(cfg.d_model, cfg.layers, cfg.tokens_per_frame, cfg.batch, lanes=cfg.tas_lanes,
                    frame_bits=FRAME_BITS)


def _cache(cfg):
    from hw.accel.replay_cache import ReplayCache
    return ReplayCache(cfg.d_model, cfg.layers, cfg.tokens_per_frame, cfg.batch)


def _rob(cfg):
    from amaranth import signed

    from hw.accel.accelerator import ROB_SELECT_BYTES
    from hw.lib.reorder_buffer import ReorderBuffer
    layout = data.StructLayout({"y": data.ArrayLayout(signed(8), cfg.d_model), "replay": 1})
    return ReorderBuffer(layout, max(2, cfg.batch), select_bits=8 * ROB_SELECT_BYTES)


def _uart(cfg):
    from hw.accel.accelerator import COUNTER_BITS
    from hw.board.core import READS, WRITES, _accel_streams, counter_names, info_bytes
    from hw.board.uart_bridge import UartBridge
    streams = _accel_streams(cfg)
    return UartBridge({n: streams[n] for n in WRITES}, {n: streams[n] for n in READS},
                      status_bits=len(counter_names(cfg)) * COUNTER_BITS, info=info_bytes(cfg),
                      timeout=1 << 20)


#: Block name -> (what it is, factory from an :class:`sw.config.AccelConfig`). In data-flow order.
BLOCKS = {
    "mv": ("matrix-vector unit: mv_in x mv_out MULT18X18D, registered adder trees, accumulators", _mv),
    "mv_core": ("MLP core: pass scheduler, x and h registers, MV unit, gate/up requantiser, SiLU, "
                "gated product, row accumulators (weights from the harness)", _mv_core),
    "row_out": ("output stage: chunk counts, the cores' accumulators added, requantiser lanes", _row_out),
    "dispatcher": ("DRS dispatcher, with the cores' inputs as its outputs", _dispatcher),
    "tas_group": ("front end: TAS of a group's rows in parallel, fabric products", _tas_group),
    "cache": ("replay cache", _cache),
    "rob": ("reorder buffer (in-order output)", _rob),
    "uart": ("UART command bridge (board I/O)", _uart),
}


def _step_dims():
    from sw.config import SHIPPED_MODEL
    return SHIPPED_MODEL["d_model"], SHIPPED_MODEL["d_model"] // SHIPPED_MODEL["n_heads"]


def _sampler(cfg):
    from hw.step.sampler import Sampler
    return Sampler(2, 512)


def _rmsnorm(cfg):
    from hw.step.rmsnorm import RmsNorm
    return RmsNorm(_step_dims()[0])


def _rope(cfg):
    from hw.step.rope import Rope
    return Rope(_step_dims()[1])


def _softmax_av(cfg):
    from hw.step.softmax_av import SoftmaxAv
    return SoftmaxAv(_step_dims()[1], 1024)


def _residual(cfg):
    from hw.step.residual import Residual
    return Residual()


def _qk_score(cfg):
    from hw.step.qk_score import QkScore
    return QkScore(_step_dims()[1])


def _attention_head(cfg):
    from hw.step.attention_head import AttentionHead
    return AttentionHead(_step_dims()[1], 1024)


def _projection(cfg):
    from hw.step.projection import Projection
    return Projection(cfg.mv_in, cfg.mv_out, requant=True)


#: The whole decode step's blocks (``hw/step``, ``docs/decoder.md``): built when named
#: (``python -m hw.flow.timing sampler``), not in the default run, which is the accelerator's.
STEP_BLOCKS = {
    "sampler": ("step: CFG and argmax(p / e) over 512 image tokens, 2 prompts", _sampler),
    "rmsnorm": ("step: RMSNorm of a 96-element row, the integer reciprocal square root", _rmsnorm),
    "rope": ("step: RoPE of a 24-element head a cycle", _rope),
    "softmax_av": ("step: one head's softmax, p.v and o / E, up to 1,024 positions", _softmax_av),
    "qk_score": ("step: a head's score q . k a position a cycle, on the MLP's MAC unit", _qk_score),
    "attention_head": ("step: one head's scores into its softmax, up to 1,024 positions", _attention_head),
    "projection": ("step: q/k/v projection on an mv_in x mv_out MAC unit with its requantiser lanes",
                   _projection),
    "residual": ("step: the residual add, an int32 accumulator requantised into 32 bits a cycle", _residual),
}


def make_block(name, cfg=None):
    """The component of block ``name`` (of :data:`BLOCKS` or :data:`STEP_BLOCKS`) for ``cfg``
    (default: the project's configuration)."""
    from sw.config import DEFAULT_ACCEL
    table = {**BLOCKS, **STEP_BLOCKS}
    if name not in table:
        raise SynthError(f"unknown block {name!r}; choose from {', '.join(table)}")
    return table[name][1](cfg or DEFAULT_ACCEL)


_SUMMARY_RE = re.compile(r"([0-9.]+) ns logic, ([0-9.]+) ns routing")


@with_tool_env
def run_block(name, *, mhz=TARGET_MHZ, cfg=None, build_dir=DEFAULT_BUILD_DIR, board_file=DEFAULT_BOARD_FILE):
    """Place and route block ``name`` alone at ``mhz``; return its row of the report."""
    board = load_board(board_file)
    platform = make_platform(board)
    pll = compute_pll(board["clock"]["frequency_mhz"], mhz)
    top = HarnessTop(make_block(name, cfg), board, pll, register_outputs=True)
    out = Path(build_dir) / name
    out.mkdir(parents=True, exist_ok=True)
    parsed, seconds, log_path = build_and_parse(platform, top, "top", out)
    signals = [s.removeprefix("harness.") for s in parsed.get("critical_path_signals", [])]
    summary = _SUMMARY_RE.search(" ".join(parsed.get("critical_path", [])))
    return {
        "block": name,
        "fmax_mhz": parsed["fmax_mhz"],
        "target_mhz": pll.fout_mhz,
        "met": parsed["timing_met"],          # nextpnr's PASS/FAIL at the PLL clock
        "path_from": signals[0] if signals else None,
        "path_to": signals[-1] if signals else None,
        "path_through": signals,
        "logic_ns": float(summary[1]) if summary else None,
        "routing_ns": float(summary[2]) if summary else None,
        "dsp": parsed["dsp_used"], "ebr": parsed["ebr_used"], "lut4": parsed["lut4"],
        "ff": parsed["ff"], "harness_ff_max": top.harness.register_bits,
        "seconds": round(seconds, 1),
        "log": str(log_path),
    }


@with_tool_env
def run_chip(*, mhz=None, cfg=None, build_dir=DEFAULT_BUILD_DIR, board_file=DEFAULT_BOARD_FILE,
             placer="static", floorplan=True, seed=None):
    """Synthesise the whole board top for ``cfg`` and place it without routing, at a ``mhz`` PLL
    (default: the board file's ``target_mhz``, the clock ``nox -s synth`` builds for); return
    nextpnr's placement estimate of Fmax per clock and the resources.

    At the board's clock the placement is the one the board flow routes: the same netlist, options
    and seed, and nextpnr is deterministic, so the estimate is that of the bitstream's own build.
    nextpnr's placer is timing-driven towards the PLL clock, so another ``mhz`` places differently,
    and so does another ``seed`` (nextpnr's ``--seed``; default: nextpnr's own, as the board flow).

    The estimate uses nextpnr's delay model for unrouted nets, so it is a prediction of the routed
    figure (``docs/timing.md`` compares the two), not a measurement. ecppack still writes a
    bitstream of the unrouted design; it is deleted, so that nothing loadable is left."""
    from hw.flow.synth import board_overrides, make_board_top
    from sw.config import DEFAULT_ACCEL

    if placer not in ("static", "heap", "sa"):
        raise SynthError(f"--placer must be static, heap or sa, not {placer!r}")
    board = load_board(board_file)
    platform = make_platform(board)
    pll = compute_pll(board["clock"]["frequency_mhz"], board["target_mhz"] if mhz is None else mhz)
    design = cfg or DEFAULT_ACCEL
    top = make_board_top(design, board, pll)
    out = Path(build_dir) / "chip"
    out.mkdir(parents=True, exist_ok=True)
    base, plan = board_overrides(design, board, floorplan=floorplan)
    opts = base["nextpnr_opts"].replace("--placer static", f"--placer {placer}")
    if seed is not None:
        opts += f" --seed {int(seed)}"
    # The placed netlist and its SDF (paths relative to the build directory: nextpnr runs in a
    # WASI sandbox there) give the critical paths of the placement (hw.flow.placed_timing).
    overrides = {**base,
                 "nextpnr_opts": f"{opts} --no-route --write placed.json --sdf placed.sdf"}
    parsed, seconds, log_path = build_and_parse(platform, top, "top", out, overrides=overrides)
    for suffix in ("bit", "svf", "config"):
        (out / f"top.{suffix}").unlink(missing_ok=True)
    if plan:
        from hw.flow.floorplan import FloorplanError, check_placed
        try:
            check_placed(out / "placed.json", plan)
        except FloorplanError as e:
            raise SynthError(str(e)) from None
    from hw.flow.placed_timing import placed_paths

    paths = placed_paths(out / "placed.json", out / "placed.sdf", period_ns=1e3 / pll.fout_mhz)
    return {
        "block": "chip", "placed_only": True, "placer": placer, "seed": seed, "accel": design.to_dict(),
        "floorplan_cells": len(plan) if plan else 0,
        "clock": parsed["clock"], "fmax_estimate_mhz": parsed["fmax_mhz"], "clocks": parsed["clocks"],
        "target_mhz": pll.fout_mhz, "met_estimate": parsed.get("timing_met"),
        "dsp": parsed["dsp_used"], "ebr": parsed["ebr_used"], "lut4": parsed["lut4"], "ff": parsed["ff"],
        "comb": parsed["comb"], "comb_total": parsed["comb_total"],
        "predicted_routed_mhz": predicted_routed(parsed["fmax_mhz"]),
        "seconds": round(seconds, 1), "log": str(log_path), **paths,
    }


def predicted_routed(estimate_mhz):
    """The routed Fmax that a placement estimate predicts: ``[low, high]`` MHz, the estimate scaled
    by the lowest and highest of :data:`ROUTED_OVER_ESTIMATE`."""
    ratios = ROUTED_OVER_ESTIMATE.values()
    return [round(estimate_mhz * min(ratios), 2), round(estimate_mhz * max(ratios), 2)]


def _predicted_line(mhz):
    lo, hi = min(ROUTED_OVER_ESTIMATE.values()), max(ROUTED_OVER_ESTIMATE.values())
    return (f"  predicted routed Fmax: {mhz[0]:.1f}-{mhz[1]:.1f} MHz (the estimate x {lo:.2f}-{hi:.2f}, "
            f"routed over estimate on the board tops routed so far; docs/timing.md)")


def format_chip(row):
    """The ``--chip`` result in a few lines."""
    def net(name):
        return name.removeprefix("$glbnet$")

    clocks = ", ".join(f"{net(name)} {mhz:.2f} MHz" for name, mhz in row["clocks"].items())
    return "\n".join([
        f"whole board top, placed ({row['placer']} placer) and not routed, "
        f"PLL at {row['target_mhz']:.3f} MHz:",
        f"  placement estimate: {row['fmax_estimate_mhz']:.2f} MHz for {net(row['clock'])}"
        f" ({'meets' if row['met_estimate'] else 'misses'} the PLL clock); every clock: {clocks}",
        *([_predicted_line(row["predicted_routed_mhz"])] if row.get("predicted_routed_mhz") else []),
        f"  MULT18X18D {row['dsp']}, DP16KD {row['ebr']}, LUT4 {row['lut4']:,}, FF {row['ff']:,}, "
        f"TRELLIS_COMB {row['comb']:,} / {row['comb_total']:,}",
        f"  floorplan: {row['floorplan_cells']} multipliers and block RAMs placed by hw.flow.floorplan"
        if row.get("floorplan_cells") else "  floorplan: none (everything left to the placer)",
        f"  yosys + nextpnr placement + ecppack: {row['seconds'] / 60:.1f} min; log {row['log']}",
        *(["  worst placed paths (one per end signal; all paths and the failing endpoints by signal in "
           f"{row['paths_report']}):"] if row.get("worst_paths") else []),
        *(f"    {p['ns']:.2f} ns  {p['from']} -> {p['to']}" for p in row.get("worst_paths", [])),
    ])


def _run_one(args):
    name, kwargs = args
    try:
        return run_block(name, **kwargs)
    except SynthError as e:
        return {"block": name, "error": str(e)}


def run_blocks(names, *, jobs=1, progress=None, **kwargs):
    """:func:`run_block` for each of ``names``, ``jobs`` at a time; rows in the order of ``names``."""
    rows = {}
    work = [(name, kwargs) for name in names]
    if jobs <= 1:
        results = map(_run_one, work)
        pool = None
    else:
        pool = ProcessPoolExecutor(max_workers=jobs)
        results = pool.map(_run_one, work)
    try:
        for row in results:
            rows[row["block"]] = row
            if progress:
                progress(row)
    finally:
        if pool:
            pool.shutdown()
    return [rows[name] for name in names]


def format_rows(rows):
    """The report as an aligned table, one block per line."""
    head = ("block", "Fmax MHz", "target", "DSP", "EBR", "LUT4", "FF", "logic/route ns", "s",
            "critical path")
    lines = [head]
    for r in rows:
        if "error" in r:
            lines.append((r["block"], "error", "", "", "", "", "", "", "", r["error"]))
            continue
        path = f"{r['path_from']} -> {r['path_to']}" if r["path_from"] else ""
        split = (f"{r['logic_ns']:.2f}/{r['routing_ns']:.2f}" if r["logic_ns"] is not None else "")
        lines.append((r["block"], f"{r['fmax_mhz']:.1f}", ("PASS " if r["met"] else "FAIL ")
                      + f"{r['target_mhz']:.0f}", str(r["dsp"]), str(r["ebr"]), str(r["lut4"]),
                      str(r["ff"]), split, f"{r['seconds']:.0f}", path))
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in lines)


def format_markdown(rows):
    """The report as the Markdown table of ``docs/timing.md``."""
    out = ["| block | Fmax (MHz) | at 180 MHz | critical path (from -> to) | logic / routing (ns) "
           "| MULT18X18D | DP16KD | LUT4 | FF | minutes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['block']} | error: {r['error']} |||||||||")
            continue
        path = f"`{r['path_from']}` -> `{r['path_to']}`" if r["path_from"] else ""
        out.append(f"| {r['block']} | {r['fmax_mhz']:.1f} | {'met' if r['met'] else 'not met'} | {path} "
                   f"| {r['logic_ns']:.2f} / {r['routing_ns']:.2f} | {r['dsp']} | {r['ebr']} | {r['lut4']:,} "
                   f"| {r['ff']:,} | {r['seconds'] / 60:.1f} |")
    return "\n".join(out)


def rows_from_reports(paths, names):
    """The rows of earlier runs' ``report.json`` files (later files win), for ``names`` or all."""
    rows = {}
    for path in paths:
        try:
            report = json.loads(Path(path).read_text())
            for row in report["blocks"]:
                rows[row["block"]] = row
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SynthError(f"{path}: field 'blocks': not a timing report ({e})") from None
    names = names or [n for n in BLOCKS if n in rows]
    missing = [n for n in names if n not in rows]
    if missing:
        raise SynthError(f"{paths[-1]}: field 'blocks': no row for block {missing[0]!r}")
    return [rows[n] for n in names]


def load_record(path=RECORD):
    """``{block: fmax_mhz}`` of the record; a clear error names the file and the field."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
        blocks = record["blocks"]
        return {name: float(entry["fmax_mhz"]) for name, entry in blocks.items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SynthError(f"{path}: field 'blocks.*.fmax_mhz': cannot read the timing record ({e})") from None


def check_against_record(rows, record, tolerance=TOLERANCE):
    """One line per block that fell more than ``tolerance`` below its recorded Fmax, or has none."""
    failures = []
    for r in rows:
        if "error" in r:
            failures.append(f"{r['block']}: {r['error']}")
        elif r["block"] not in record:
            failures.append(f"{r['block']}: no recorded Fmax in {RECORD.name} (run --record)")
        elif r["fmax_mhz"] < (1 - tolerance) * record[r["block"]]:
            failures.append(f"{r['block']}: Fmax {r['fmax_mhz']:.2f} MHz is more than {tolerance:.0%} "
                            f"below the recorded {record[r['block']]:.2f} MHz")
    return failures


def write_record(rows, path=RECORD):
    """Merge the measured rows into the record (atomically)."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        record = {"about": "Fmax of each block alone on the LFE5U-85F (python -m hw.flow.timing --record); "
                           "python -m hw.flow.timing --check fails when one falls more than 5 % below.",
                  "blocks": {}}
    for r in rows:
        if "error" in r:
            raise SynthError(f"{r['block']}: not recorded: {r['error']}")
        record["blocks"][r["block"]] = {k: r[k] for k in ("fmax_mhz", "target_mhz", "dsp", "ebr", "lut4",
                                                           "ff", "path_from", "path_to")}
    write_report(record, path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hw.flow.timing", description=__doc__.split("\n")[0])
    parser.add_argument("blocks", nargs="*", metavar="BLOCK", help=f"blocks to build (default: all): "
                        f"{', '.join(BLOCKS)}")
    parser.add_argument("--mhz", type=float, default=None,
                        help=f"PLL target for every block (default {TARGET_MHZ:g}; with --chip the board's "
                             f"target_mhz, the clock nox -s synth builds for)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="blocks built side by side (default: the CPU count)")
    parser.add_argument("--accel", default=None, help="accelerator config as JSON (default: the project's)")
    parser.add_argument("--build-dir", default=str(DEFAULT_BUILD_DIR))
    parser.add_argument("--list", action="store_true", help="list the blocks and exit")
    parser.add_argument("--chip", action="store_true",
                        help="place the whole board top without routing and print nextpnr's estimate per "
                             "clock, at the board's clock unless --mhz (the placement nox -s synth routes)")
    parser.add_argument("--placer", default="static",
                        help="nextpnr placer of --chip (default: static, as the board flow)")
    parser.add_argument("--seed", type=int, default=None,
                        help="nextpnr --seed of --chip (default: nextpnr's, as the board flow)")
    parser.add_argument("--no-floorplan", action="store_true",
                        help="--chip without hw.flow.floorplan's BEL attributes (all left to the placer)")
    parser.add_argument("--from-report", action="append", metavar="REPORT", default=None,
                        help="build nothing: take the rows of an earlier run's report.json (repeatable; "
                             "later files win)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help=f"exit 1 if a block's Fmax is more than {TOLERANCE:.0%}% below {RECORD.name}")
    mode.add_argument("--record", action="store_true", help=f"write the figures into {RECORD.name}")
    args = parser.parse_args(argv)
    if args.list:
        for name, (what, _) in {**BLOCKS, **STEP_BLOCKS}.items():
            print(f"{name:<11} {what}")
        return 0
    if args.chip:
        if args.blocks or args.from_report or args.check or args.record:
            parser.error("--chip builds the whole board top: no BLOCK, --from-report, --check or --record")
        return _main_chip(args)
    if args.seed is not None:
        parser.error("--seed is an option of --chip (the blocks are placed with nextpnr's seed)")
    args.mhz = TARGET_MHZ if args.mhz is None else args.mhz
    names = args.blocks or list(BLOCKS)
    unknown = [n for n in names if n not in BLOCKS and n not in STEP_BLOCKS]
    if unknown:
        parser.error(f"unknown block {unknown[0]!r}; choose from {', '.join({**BLOCKS, **STEP_BLOCKS})}")
    try:
        cfg = _load_accel(args.accel)
        if args.from_report:
            rows = rows_from_reports(args.from_report, args.blocks)
        else:
            build_dir = Path(args.build_dir)
            build_dir.mkdir(parents=True, exist_ok=True)
            start = time.monotonic()
            print(f"hw.flow.timing: {len(names)} block(s) at {args.mhz:g} MHz, {min(args.jobs, len(names))} "
                  f"at a time, in {build_dir}", file=sys.stderr)

            def progress(row):
                done = (f"{row['fmax_mhz']:.1f} MHz in {row['seconds']:.0f} s" if "error" not in row
                        else f"error: {row['error']}")
                print(f"hw.flow.timing: {row['block']}: {done}", file=sys.stderr)

            rows = run_blocks(names, jobs=min(args.jobs, len(names)), progress=progress, mhz=args.mhz,
                              cfg=cfg, build_dir=build_dir)
            report = {"target_mhz": args.mhz, "blocks": rows, "seconds": round(time.monotonic() - start, 1)}
            write_report(report, build_dir / "report.json")
        print(format_markdown(rows) if args.markdown else format_rows(rows))
        if not args.from_report:
            print(f"report: {build_dir / 'report.json'}")
        if args.record:
            write_record(rows)
            print(f"recorded in {RECORD}")
        if args.check:
            failures = check_against_record(rows, load_record())
            if failures:
                for line in failures:
                    print(f"hw.flow.timing: error: {line}", file=sys.stderr)
                return 1
        errors = [r for r in rows if "error" in r]
        if errors:
            print(f"hw.flow.timing: error: {errors[0]['block']}: {errors[0]['error']}", file=sys.stderr)
            return 1
    except SynthError as e:
        print(f"hw.flow.timing: error: {e}", file=sys.stderr)
        return 1
    return 0


def _load_accel(path):
    """The ``--accel`` configuration (None: the project's); a bad file is one :class:`SynthError`."""
    if not path:
        return None
    from sw.config import AccelConfig, ConfigError
    try:
        return AccelConfig.from_json(path)
    except ConfigError as e:
        raise SynthError(str(e)) from None


def _main_chip(args):
    try:
        cfg = _load_accel(args.accel)
        mhz = load_board(DEFAULT_BOARD_FILE)["target_mhz"] if args.mhz is None else args.mhz
        build_dir = Path(args.build_dir)
        print(f"hw.flow.timing: the whole board top at {mhz:g} MHz, placed only ({args.placer} placer), in "
              f"{build_dir / 'chip'}; yosys and the placer take tens of minutes", file=sys.stderr)
        row = run_chip(mhz=mhz, cfg=cfg, build_dir=build_dir, placer=args.placer,
                       floorplan=not args.no_floorplan, seed=args.seed)
        write_report(row, build_dir / "chip" / "report.json")
        print(format_chip(row))
        print(f"report: {build_dir / 'chip' / 'report.json'}")
    except SynthError as e:
        print(f"hw.flow.timing: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
