"""The resource budget of a synthesised design, block by block: block RAM, DSP, LUT4 and flip-flops.

Usage::

    python -m hw.flow.budget build/synth/ulx3s_85f/top.json [--depth 2] [--expand BLOCK ...] [--markdown]

Reads the JSON netlist that Yosys writes for nextpnr (``top.json`` in the synthesis build
directory) and counts each block's cells: ``DP16KD`` block RAMs, ``MULT18X18D`` multipliers,
LUT4s and ``TRELLIS_FF`` flip-flops, with the distributed RAMs (``TRELLIS_DPR16X4``) among
them. A block is a cell's RTL signal (:func:`hw.flow.placed_timing.signal_name`, which Yosys's
``autoname`` gives every cell) cut to its first ``depth`` levels of hierarchy, so
``accel.core_0.rq_gu.pe`` counts for ``accel.core_0`` at depth 2, and ``--expand`` splits a
block into its children where one level is too coarse and the next too fine. Cells without a
hierarchical name (Yosys's own ``$...`` cells) count for ``(unnamed)``.

LUT4s are counted as nextpnr counts them before packing ("Total LUT4s"): one per ``LUT4``, two
per ``CCU2C`` carry cell and six per distributed RAM (a ``TRELLIS_DPR16X4`` takes four LUTs as
RAM and two for its write port). On the shipped board top the totals equal nextpnr's own
(``docs/timing.md``: 207 DP16KD, 152 MULT18X18D, 45,390 LUT4, 50,201 FF), so a cell type this
count missed would show as a difference.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from hw.flow.placed_timing import signal_name

__all__ = ["COLUMNS", "LUTS_PER_CELL", "block_of", "budget", "format_budget", "main"]

#: The columns of a budget row: what each counts.
COLUMNS = ("DP16KD", "MULT18X18D", "LUT4", "FF", "DPRAM")
#: LUT4s per cell type, as nextpnr-ecp5 counts them before packing.
LUTS_PER_CELL = {"LUT4": 1, "CCU2C": 2, "TRELLIS_DPR16X4": 6}


def block_of(cell, depth, expand=()):
    """The block a cell belongs to: its RTL signal's first ``depth`` levels of hierarchy, and one
    level more inside each block named in ``expand``.

    Parameters
    ----------
    cell : str
        A cell name from the netlist (``"accel.core_0.rq_gu.pe_TRELLIS_FF_Q_3"``).
    depth : int
        Levels of hierarchy to keep (``>= 1``).
    expand : collection of str
        Blocks to split into their children (``{"accel"}`` at depth 1 gives ``"accel.core_0"``).

    Returns
    -------
    str
        ``"accel.core_0"`` at depth 2. A signal with fewer levels than ``depth`` keeps its
        hierarchy without the signal's own name (``"bridge"`` for ``"bridge.state"``, ``"(top)"``
        for a signal of the top module); a cell without a name of its own is ``"(unnamed)"``.
    """
    signal = signal_name(cell)
    if signal.startswith("$"):
        return "(unnamed)"
    parts = signal.split(".")[:-1]
    n = min(depth, len(parts))
    while n < len(parts) and ".".join(parts[:n]) in expand:
        n += 1
    return ".".join(parts[:n]) or "(top)"


def budget(netlist, *, depth=2, expand=(), module="top"):
    """Count a Yosys JSON netlist's cells by block.

    Parameters
    ----------
    netlist : dict
        A netlist as ``write_json`` writes it (``{"modules": {module: {"cells": ...}}}``).
    depth : int
        Levels of hierarchy that make a block (:func:`block_of`).
    expand : collection of str
        Blocks split into their children (:func:`block_of`).
    module : str
        The top module.

    Returns
    -------
    dict
        ``blocks``: one row per block, ``{"block", "DP16KD", "MULT18X18D", "LUT4", "FF",
        "DPRAM"}``, the largest users of block RAM, then DSP, then LUT4 first; ``total``: the same
        counts over the whole netlist, which are the sums of the rows.

    Raises
    ------
    ValueError
        If the netlist has no such module or its cells have no types, or ``depth < 1``.
    """
    if depth < 1:
        raise ValueError(f"depth must be at least 1, not {depth}")
    try:
        cells = netlist["modules"][module]["cells"]
        types = {name: cell["type"] for name, cell in cells.items()}
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a Yosys JSON netlist with module {module!r}: missing {e}") from None
    rows = collections.defaultdict(collections.Counter)
    for name, kind in types.items():
        row = rows[block_of(name, depth, expand)]
        if kind in ("DP16KD", "MULT18X18D"):
            row[kind] += 1
        elif kind == "TRELLIS_FF":
            row["FF"] += 1
        if kind in LUTS_PER_CELL:
            row["LUT4"] += LUTS_PER_CELL[kind]
        if kind == "TRELLIS_DPR16X4":
            row["DPRAM"] += 1
    table = [{"block": block, **{c: row[c] for c in COLUMNS}} for block, row in rows.items()]
    table = [r for r in table if any(r[c] for c in COLUMNS)]
    table.sort(key=lambda r: (-r["DP16KD"], -r["MULT18X18D"], -r["LUT4"], r["block"]))
    total = {c: sum(r[c] for r in table) for c in COLUMNS}
    return {"depth": depth, "expand": sorted(expand), "blocks": table, "total": total}


def format_budget(result, *, markdown=False):
    """The budget as a table: a row per block and the total."""
    rows = [*result["blocks"], {"block": "total", **result["total"]}]
    if markdown:
        out = ["| block | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
        out += ["| " + " | ".join([f"`{r['block']}`" if r["block"] != "total" else "**total**",
                                   *(f"{r[c]:,}" for c in COLUMNS)]) + " |" for r in rows]
        return "\n".join(out)
    width = max(len(r["block"]) for r in rows)
    out = [f"{'block':<{width}}  " + "  ".join(f"{c:>10}" for c in COLUMNS)]
    out += [f"{r['block']:<{width}}  " + "  ".join(f"{r[c]:>10,}" for c in COLUMNS) for r in rows]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hw.flow.budget", description=__doc__.split("\n\n")[0])
    ap.add_argument("netlist", help="Yosys JSON netlist (top.json in the synthesis build directory)")
    ap.add_argument("--depth", type=int, default=2, help="levels of hierarchy that make a block (default 2)")
    ap.add_argument("--expand", nargs="+", default=(), metavar="BLOCK",
                    help="blocks to split into their children (for example core.accel core.accel.mlp)")
    ap.add_argument("--module", default="top")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args = ap.parse_args(argv)
    path = Path(args.netlist)
    try:
        result = budget(json.loads(path.read_text()), depth=args.depth, expand=set(args.expand),
                        module=args.module)
    except OSError as e:
        print(f"hw.flow.budget: {path}: cannot read: {e.strerror}", file=sys.stderr)
        return 1
    except json.JSONDecodeError as e:
        print(f"hw.flow.budget: {path}: not JSON: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        print(f"hw.flow.budget: {path}: {e}", file=sys.stderr)
        return 1
    try:
        print(format_budget(result, markdown=args.markdown))
    except BrokenPipeError:          # the table piped into head
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
