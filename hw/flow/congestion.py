"""Where a placed design asks for more wires than the fabric has: a routing-demand map.

Usage::

    python -m hw.flow.congestion build/synth/ulx3s_85f [--placer static|heap] [--force]
    python -m hw.flow.congestion --placed PLACED.json            # a placement you already have
    python -m hw.flow.congestion --placed PLACED.json --at 40/80  # and the nets at another tile
    python -m hw.flow.congestion --overuse h_congestion_by_net_5.csv   # router2's overuse by net

The first form places the Yosys netlist of a synthesis build directory (``top.json`` and
``top.lpf``, which ``nox -s synth`` leaves there even when routing fails) with nextpnr-ecp5
``--no-route`` and writes ``placed.json`` beside it (minutes for the default accelerator); the
second reads a placed netlist. Both print how the logic is spread over the die (cells per band
of 10 columns), a RUDY estimate (rectangular uniform wire density: each net's half-perimeter
spread evenly over its bounding box) and, at the tile of highest demand, which nets make it
(grouped by name, with every number in a name written ``#``), the mean demand of every region of
10 x 10 tiles with the logic cells of the hottest region by block, the nets at each ``--at`` tile,
and write ``congestion.png`` (the demand map) and ``congestion.json``.

This is how the default accelerator's routing failure was explained: nextpnr's default
analytic placer put the logic in the left 70 % of the die while the DSP and block-RAM rows,
92 % and 96 % used, span all of it, so long wires ran along the DSP rows.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

__all__ = ["rudy", "band_counts", "tile_demand", "region_means", "blocks_in", "overuse_by_group", "main", "CongestionError"]

BAND = 10                 # columns per band in the spread table
LOGIC = ("TRELLIS_COMB", "TRELLIS_FF", "TRELLIS_RAMW")
HARD = ("MULT18X18D", "DP16KD")
_BEL = re.compile(r"X(\d+)/Y(\d+)/")


class CongestionError(Exception):
    """Bad input, reported as one line naming the file and the field."""


def _top_module(netlist: dict, source: str) -> dict:
    try:
        mods = netlist["modules"]
    except (KeyError, TypeError):
        raise CongestionError(f"{source}: field 'modules': not a nextpnr JSON netlist") from None
    tops = [m for m in mods.values() if m.get("attributes", {}).get("top")]
    if len(tops) != 1:
        raise CongestionError(f"{source}: field 'modules': expected one top module, found {len(tops)}")
    return tops[0]


def placed_cells(netlist: dict, source: str = "netlist") -> list[tuple[str, str, int, int, dict]]:
    """``[(name, type, x, y, connections)]`` of every placed cell (``NEXTPNR_BEL`` attribute)."""
    top = _top_module(netlist, source)
    out = []
    for name, cell in top.get("cells", {}).items():
        bel = cell.get("attributes", {}).get("NEXTPNR_BEL")
        if not bel:
            continue
        m = _BEL.match(bel)
        if not m:
            raise CongestionError(f"{source}: cell {name!r} field 'NEXTPNR_BEL': "
                                  f"unexpected location {bel!r}")
        out.append((name, cell["type"], int(m[1]), int(m[2]), cell.get("connections", {})))
    if not out:
        raise CongestionError(f"{source}: field 'NEXTPNR_BEL': no placed cells "
                              f"(is this a netlist nextpnr wrote after placement?)")
    return out


def band_counts(cells, band: int = BAND) -> dict[str, list[int]]:
    """Placed cells of each type per band of ``band`` columns, left to right."""
    width = max(x for _, _, x, _, _ in cells) // band + 1
    counts = collections.defaultdict(lambda: [0] * width)
    for _, kind, x, _, _ in cells:
        counts[kind][x // band] += 1
    return dict(counts)


def _net_boxes(cells, max_fanout: int):
    """``(bit, (x0, x1, y0, y1), density)`` of each net with pins at 2 to ``max_fanout`` places:
    its bounding box and its RUDY density ``(w + h) / (w * h)``."""
    pins = collections.defaultdict(set)
    for _, _, x, y, conns in cells:
        for bits in conns.values():
            for b in bits:
                if isinstance(b, int):
                    pins[b].add((x, y))
    for bit, where in pins.items():
        if len(where) < 2 or len(where) > max_fanout:
            continue
        xs = [p[0] for p in where]
        ys = [p[1] for p in where]
        x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
        w, h = x1 - x0 + 1, y1 - y0 + 1
        yield bit, (x0, x1, y0, y1), (w + h) / (w * h)


def rudy(cells, max_fanout: int = 2000):
    """RUDY demand per tile as a list of rows ``grid[y][x]``; nets above ``max_fanout`` sinks
    (clocks and resets on global networks) are left out.

    Each net with pins at more than one place adds ``(w + h) / (w * h)`` to every tile of its
    ``w x h`` bounding box: its half-perimeter wire length spread evenly over the box.
    """
    width = max(x for _, _, x, _, _ in cells) + 1
    height = max(y for _, _, _, y, _ in cells) + 1
    grid = [[0.0] * width for _ in range(height)]
    for _, (x0, x1, y0, y1), density in _net_boxes(cells, max_fanout):
        for y in range(y0, y1 + 1):
            row = grid[y]
            for x in range(x0, x1 + 1):
                row[x] += density
    return grid


def _net_names(top: dict) -> dict[int, str]:
    """The shortest name of each net bit in the module's ``netnames``."""
    names = {}
    for name, net in top.get("netnames", {}).items():
        for b in net.get("bits", []):
            if isinstance(b, int) and (b not in names or len(name) < len(names[b])):
                names[b] = name
    return names


def tile_demand(cells, names: dict[int, str], x: int, y: int, max_fanout: int = 2000,
                top: int = 12) -> list[tuple[str, float, int]]:
    """What makes the RUDY demand of tile ``(x, y)``: ``[(group, demand, nets)]``, largest first,
    ``top`` of them. A group is the nets whose names are the same once every run of digits is
    written ``#`` (the bits of one bus, the same net in every lane); ``names`` maps a net bit to
    its name (unnamed bits are grouped as ``net``)."""
    demand, count = collections.Counter(), collections.Counter()
    for bit, (x0, x1, y0, y1), density in _net_boxes(cells, max_fanout):
        if x0 <= x <= x1 and y0 <= y <= y1:
            group = re.sub(r"\d+", "#", names.get(bit, "net"))
            demand[group] += density
            count[group] += 1
    return [(g, round(v, 1), count[g]) for g, v in demand.most_common(top)]


def region_means(grid, size: int = BAND) -> list[list[float]]:
    """The mean demand of every ``size`` x ``size`` region of tiles, row by row from the top."""
    h, w = len(grid), len(grid[0]) if grid else 0
    out = []
    for y0 in range(0, h, size):
        row = []
        for x0 in range(0, w, size):
            vals = [grid[y][x] for y in range(y0, min(y0 + size, h)) for x in range(x0, min(x0 + size, w))]
            row.append(round(sum(vals) / len(vals), 1))
        out.append(row)
    return out


def _block(name: str, depth: int) -> str:
    """The first ``depth`` parts of the hierarchy in a dotted cell or net name (its last part is
    the cell's or net's own name)."""
    return ".".join(name.split(".")[:-1][:depth]) or name


def blocks_in(cells, x0: int, y0: int, x1: int, y1: int, depth: int = 3, top: int = 8):
    """The logic cells placed in ``x0 <= x <= x1``, ``y0 <= y <= y1`` by block: ``[(block, cells)]``,
    largest first, a block being the first ``depth`` parts of the hierarchy in the cell's dotted name
    (the last part is the cell's own name; cells that
    nextpnr made and named ``$nextpnr...`` count as ``(nextpnr)``)."""
    count = collections.Counter()
    for name, kind, x, y, _ in cells:
        if kind in LOGIC and x0 <= x <= x1 and y0 <= y <= y1:
            count["(nextpnr)" if name.startswith("$nextpnr") else _block(name, depth)] += 1
    return count.most_common(top)


def overuse_by_group(path: Path, top: int | None = 12) -> tuple[int, list[tuple[str, int, int]]]:
    """What router2 found overused in one iteration, from the ``_congestion_by_net_N.csv`` that
    ``nextpnr-ecp5 --router router2 --router2-heatmap PREFIX`` writes (lines ``net,overused wires``):
    ``(total, [(group, overused wires, nets)])``, largest first (``top`` of them, None for all),
    nets grouped as in :func:`tile_demand`. A wire that ``k`` nets share counts ``k`` times."""
    total, wires, nets = 0, collections.Counter(), collections.Counter()
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as e:
        raise CongestionError(f"{path}: cannot read: {e.strerror}") from None
    for n, line in enumerate(lines, 1):
        name, sep, count = line.rpartition(",")
        if not sep or not count.strip().isdigit():
            raise CongestionError(f"{path}: line {n}: expected 'net,overused wires', not {line!r}")
        group = re.sub(r"\d+", "#", name)
        wires[group] += int(count)
        nets[group] += 1
        total += int(count)
    return total, [(g, v, nets[g]) for g, v in wires.most_common(top)]


def summarise(cells, grid) -> dict:
    flat = sorted(v for row in grid for v in row)
    hot = max(((v, x, y) for y, row in enumerate(grid) for x, v in enumerate(row)))
    bands = band_counts(cells)
    return {
        "cells_per_band": {k: v for k, v in sorted(bands.items()) if k in LOGIC + HARD},
        "band_columns": BAND,
        "rudy_mean": round(sum(flat) / len(flat), 1),
        "rudy_p99": round(flat[int(0.99 * (len(flat) - 1))], 1),
        "rudy_max": round(hot[0], 1),
        "rudy_max_tile": [hot[1], hot[2]],
    }


def plot(grid, path: Path, title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 7))
    im = ax.imshow(grid, origin="upper", cmap="hot")
    fig.colorbar(im, ax=ax, label="RUDY demand (wire tracks per tile, estimate)")
    ax.set_xlabel("column (X)")
    ax.set_ylabel("row (Y)")
    ax.set_title(title)
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)


def place(build_dir: Path, placer: str, force: bool) -> Path:
    """Run nextpnr-ecp5 placement only on ``build_dir/top.json``; return ``placed.json``."""
    from hw.flow import synth
    board = synth.load_board()
    platform = synth.make_platform(board)      # nextpnr's names for the device and package
    name = board["build"]["name"]
    netlist, lpf = build_dir / f"{name}.json", build_dir / f"{name}.lpf"
    for f in (netlist, lpf):
        if not f.is_file():
            raise CongestionError(f"{f}: not found (run nox -s synth first; Yosys writes it "
                                  f"even when routing fails)")
    out = build_dir / "placed.json"
    if out.exists() and not force:
        raise CongestionError(f"{out}: exists; use --force to place again")
    tmp = build_dir / "placed.tmp.json"
    cmd = [synth.YOWASP_TOOLS["NEXTPNR_ECP5"], "--quiet", "--timing-allow-fail",
           platform._nextpnr_device_options[platform.device],
           "--package", platform._nextpnr_package_options[platform.package],
           "--speed", str(platform.speed),
           "--json", str(netlist), "--lpf", str(lpf), "--no-route", "--placer", placer,
           "--log", str(build_dir / "place.log"), "--write", str(tmp)]
    print(f"placing {netlist} with nextpnr-ecp5 --placer {placer} (minutes; log in "
          f"{build_dir / 'place.log'})", file=sys.stderr)
    if subprocess.run(cmd).returncode or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise CongestionError(f"{build_dir / 'place.log'}: nextpnr placement failed")
    tmp.replace(out)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hw.flow.congestion", description=__doc__.split("\n\n")[0])
    ap.add_argument("build_dir", nargs="?", type=Path,
                    help="synthesis build directory with top.json and top.lpf")
    ap.add_argument("--placed", type=Path, help="analyse this placed netlist instead of placing")
    ap.add_argument("--placer", default="static", choices=("static", "heap"),
                    help="nextpnr placer (default: static, what nox -s synth uses)")
    ap.add_argument("--out", type=Path, help="directory for congestion.png/.json "
                                             "(default: beside the placed netlist)")
    ap.add_argument("--force", action="store_true", help="place again over an existing placed.json")
    ap.add_argument("--overuse", type=Path, metavar="CSV",
                    help="instead: what router2 found overused, by net group, from the "
                         "PREFIX_congestion_by_net_N.csv of nextpnr's --router2-heatmap PREFIX")
    ap.add_argument("--at", action="append", default=[], metavar="X/Y",
                    help="also name the nets that make the demand of this tile (repeatable)")
    args = ap.parse_args(argv)
    if args.overuse:
        try:
            total, every = overuse_by_group(args.overuse, top=None)
        except CongestionError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        blocks = collections.Counter()
        for g, v, _ in every:
            blocks[_block(g, 4)] += v
        print(f"{args.overuse}: {total} uses of overused wires; by block: "
              + ", ".join(f"{b} {100 * v / max(total, 1):.1f} %" for b, v in blocks.most_common(6)))
        print("  by net group (uses, share, nets):")
        for g, v, n in every[:12]:
            print(f"  {v:7d} {100 * v / max(total, 1):5.1f} % {n:6d}  {g}")
        return 0
    try:
        if (args.build_dir is None) == (args.placed is None):
            raise CongestionError("give a build directory or --placed FILE (one of them)")
        placed = args.placed or place(args.build_dir, args.placer, args.force)
        try:
            netlist = json.loads(placed.read_text())
        except OSError as e:
            raise CongestionError(f"{placed}: cannot read: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise CongestionError(f"{placed}: not JSON: {e.msg} (line {e.lineno})") from None
        cells = placed_cells(netlist, str(placed))
        top_module = _top_module(netlist, str(placed))
        placer = top_module.get("settings", {}).get("placer", "?")
        at = []
        for text in args.at:
            m = re.fullmatch(r"X?(\d+)/Y?(\d+)", text)
            if not m:
                raise CongestionError(f"--at {text!r}: expected a tile as X/Y, for example 40/80")
            at.append((int(m[1]), int(m[2])))
    except CongestionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    grid = rudy(cells)
    report = summarise(cells, grid) | {"placer": placer}
    names = _net_names(top_module)
    report["rudy_max_tile_nets"] = [
        {"nets": g, "demand": v, "count": n}
        for g, v, n in tile_demand(cells, names, *report["rudy_max_tile"])]
    regions = region_means(grid)
    report["rudy_regions"] = {"size": BAND, "means": regions}
    ry, rx = max(((y, x) for y, row in enumerate(regions) for x, _ in enumerate(row)),
                 key=lambda yx: regions[yx[0]][yx[1]])
    box = (BAND * rx, BAND * ry, BAND * rx + BAND - 1, BAND * ry + BAND - 1)
    report["rudy_max_region"] = {"tiles": list(box), "mean": regions[ry][rx],
                                 "cells_by_block": blocks_in(cells, *box)}
    report["tiles"] = {f"X{x}/Y{y}": [{"nets": g, "demand": v, "count": n}
                                      for g, v, n in tile_demand(cells, names, x, y)] for x, y in at}
    out_dir = args.out or placed.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    plot(grid, out_dir / "congestion.png", f"routing demand (RUDY), nextpnr placer {placer}: {placed.name}")
    tmp = out_dir / "congestion.tmp.json"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(out_dir / "congestion.json")
    print(f"placer {placer}; cells per band of {BAND} columns (left to right):")
    for kind, counts in report["cells_per_band"].items():
        print(f"  {kind:13s} " + " ".join(f"{c:5d}" for c in counts))
    print(f"RUDY demand per tile: mean {report['rudy_mean']}, 99th percentile {report['rudy_p99']}, "
          f"max {report['rudy_max']} at X{report['rudy_max_tile'][0]}/Y{report['rudy_max_tile'][1]}")
    print("  at that tile, by net group (demand, nets):")
    for row in report["rudy_max_tile_nets"]:
        print(f"    {row['demand']:7.1f} {row['count']:6d}  {row['nets']}")
    print(f"mean demand per region of {BAND} x {BAND} tiles (rows from Y 0, columns from X 0):")
    for y, row in enumerate(regions):
        print(f"  Y {BAND * y:3d} " + " ".join(f"{v:5.0f}" for v in row))
    hot = report["rudy_max_region"]
    print(f"  the hottest region, X{hot['tiles'][0]}-{hot['tiles'][2]} Y{hot['tiles'][1]}-{hot['tiles'][3]} "
          f"(mean {hot['mean']}), logic cells by block: "
          + ", ".join(f"{b} {n}" for b, n in hot["cells_by_block"]))
    for tile, rows in report["tiles"].items():
        print(f"  at {tile}, by net group (demand, nets):")
        for row in rows:
            print(f"    {row['demand']:7.1f} {row['count']:6d}  {row['nets']}")
    print(f"wrote {out_dir / 'congestion.png'} and {out_dir / 'congestion.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
