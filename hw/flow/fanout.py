"""The highest-fan-out nets of a synthesised netlist, and which cell pins they drive.

Usage::

    python -m hw.flow.fanout build/synth/ulx3s_85f/top.json [--top 15] [--module top]

Reads the JSON netlist that Yosys writes for nextpnr (``top.json`` in the synthesis build
directory) and lists the nets with the most sink pins, each with its shortest name and the cell
pins it drives (for example ``TRELLIS_FF.LSR``: a reset or ``TRELLIS_FF.CE``: a clock enable). A
net that reaches tens of thousands of flip-flops without a global buffer is a routing and timing
problem on its own; this is how to find one before waiting for the router.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

__all__ = ["high_fanout", "main"]


def high_fanout(netlist: dict, top: int = 15, module: str = "top") -> list[dict]:
    """``[{"net", "fanout", "pins": {cell_type.port: count}}]`` for the ``top`` nets with the most
    input pins of cells in ``module`` of a Yosys JSON netlist (constants are not nets)."""
    try:
        mod = netlist["modules"][module]
        cells, netnames = mod["cells"], mod["netnames"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a Yosys JSON netlist with module {module!r}: missing {e}") from None
    fan = collections.Counter()
    pins = collections.defaultdict(collections.Counter)
    for cell in cells.values():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port) != "input":
                continue
            kind = f"{cell['type']}.{re.sub(r'[0-9]+$', '', port)}"
            for b in bits:
                if isinstance(b, int):
                    fan[b] += 1
                    pins[b][kind] += 1
    names: dict[int, str] = {}
    for name, net in netnames.items():
        for b in net["bits"]:
            if isinstance(b, int) and (b not in names or len(name) < len(names[b])):
                names[b] = name
    return [{"net": names.get(b, f"<bit {b}>"), "fanout": n, "pins": dict(pins[b].most_common())}
            for b, n in fan.most_common(top)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hw.flow.fanout", description=__doc__.split("\n\n")[0])
    ap.add_argument("netlist", help="Yosys JSON netlist (top.json in the synthesis build directory)")
    ap.add_argument("--top", type=int, default=15, help="how many nets to list")
    ap.add_argument("--module", default="top")
    args = ap.parse_args(argv)
    path = Path(args.netlist)
    try:
        netlist = json.loads(path.read_text())
        rows = high_fanout(netlist, args.top, args.module)
    except (OSError, json.JSONDecodeError, ValueError) as e:
        print(f"hw.flow.fanout: {path}: {e}", file=sys.stderr)
        return 1
    print(f"{'fan-out':>8}  net  (sink pins)")
    for r in rows:
        kinds = ", ".join(f"{k} {v}" for k, v in list(r["pins"].items())[:3])
        print(f"{r['fanout']:>8}  {r['net']}  ({kinds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
