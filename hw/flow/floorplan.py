"""Where the datapath's multipliers and weight banks sit on the die: a floorplan generated from the
configuration and given to nextpnr as ``BEL`` attributes.

The ECP5-85F has its 156 ``MULT18X18D`` in three rows (Y 10, 34 and 58) and its 208 ``DP16KD`` in
four (Y 22, 46, 70 and 82), each row 13 groups of 4 sites along X (:data:`DSP_ROWS`,
:data:`EBR_ROWS`, :data:`MULT_SITES`, :data:`EBR_SITES`). Left to itself the placer scatters each
core's multipliers over all three DSP rows and each weight lane's banks over the whole die, and the
read data of the weight store (both ports of every bank, to both cores) crosses the chip
(``python -m hw.flow.congestion`` names it at the hottest tile). The floorplan:

* **multipliers** (:func:`mult_sites`): a weight lane (two int8 weights of one output, read from one
  18-bit word) feeds two multipliers per core, which sit side by side. Core 0's lanes fill the DSP
  row at Y 34 from the left, core 1's the row at Y 58, lane for lane at the same X, so that the
  lanes of one output (its adder tree) are neighbours. Lanes that do not fit in a row go, for both
  cores, to the row at Y 10 from the right; the other multipliers of the design (the requantisers)
  are left to the placer in what is free.
* **weight banks** (:func:`bank_sites`): each of a lane's banks goes to the block-RAM site that
  minimises the wire to the four multipliers it feeds (the Manhattan distance summed over them),
  all banks at once (a minimum-cost assignment, :func:`assign`). The block-RAM row at Y 46 lies
  between the two cores' DSP rows; the rest spill over to Y 22 and 70, and the lanes on Y 10 take
  Y 22. The blocks of the two tables both cores read (gate/up requantisation, SiLU) join the
  assignment, drawn to the middle between the cores. What is left (the replay cache) is the
  placer's.

The result is a yosys script (:func:`yosys_script`) that the board flow runs after synthesis: for
each cell one ``select -assert-count 1`` (so that a renamed cell fails the build, naming it) and one
``setattr -set BEL``. :func:`check_placed` reads the placed netlist back and checks that every
constrained cell is where the floorplan put it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hw.accel.weight_store import bank_count, weight_position
from sw.config import AccelConfig

__all__ = ["DSP_ROWS", "EBR_ROWS", "MULT_SITES", "EBR_SITES", "FloorplanError", "assign", "bank_sites",
           "check_placed", "floorplan", "mult_sites", "yosys_script"]

#: Rows (Y) of the LFE5U-85F's MULT18X18D and DP16KD sites.
DSP_ROWS = (10, 34, 58)
EBR_ROWS = (22, 46, 70, 82)
#: X of each group of four sites (the same in every row; the gap at 64-69 is the centre spine).
GROUP_X = (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114)
#: Sites of one row, left to right: (X, BEL suffix).
MULT_SITES = tuple((x + dx, f"MULT18_{k}") for x in GROUP_X for dx, k in ((0, 0), (1, 1), (4, 4), (5, 5)))
EBR_SITES = tuple((x + 2 * k, f"EBR{k}") for x in GROUP_X for k in range(4))

#: The home DSP row of each core's multipliers, and the row both cores' remaining lanes share.
HOME_ROWS = (34, 58)
SPILL_ROW = 10

#: Weight of a shared table's distance to each core against a bank's to each of its multipliers.
TABLE_WEIGHT = 8

#: Netlist names of the constrained cells (the hierarchy of hw.board.top.BoardTop after yosys).
MULT_CELL = "core.accel.mlp.core_{p}.mv.mul_{n}_{k}.dsp"
BANK_CELL = "core.accel.mlp.store.ram_l{lane}_b{bank}.ebr"
TABLE_CELL = "core.accel.mlp.{table}.ram_{b}.ebr"


class FloorplanError(ValueError):
    """The configuration does not fit the floorplan's rows, or a placed cell is not where it was put."""


def bel(x: int, y: int, suffix: str) -> str:
    return f"X{x}/Y{y}/{suffix}"


def mult_sites(cfg: AccelConfig) -> dict[tuple[int, int, int], tuple[int, int, str]]:
    """``(core, n, k) -> (x, y, bel suffix)`` of every matrix-vector multiplier."""
    if cfg.cores > len(HOME_ROWS):
        raise FloorplanError(f"the floorplan has home DSP rows for {len(HOME_ROWS)} cores, not {cfg.cores}")
    lanes = cfg.mv_in * cfg.mv_out // 2
    pairs_per_row = len(MULT_SITES) // 2
    home = min(lanes, pairs_per_row)
    spill = lanes - home
    if spill * cfg.cores > pairs_per_row:
        raise FloorplanError(f"{lanes} weight lanes per core need {spill * cfg.cores} multiplier pairs "
                             f"on the DSP row at Y {SPILL_ROW}, which has {pairs_per_row}")
    out = {}
    for p in range(cfg.cores):
        for n in range(cfg.mv_out):
            for k in range(cfg.mv_in):
                lane, half = weight_position(n, k, cfg.mv_in)
                if lane < home:
                    y, pair = HOME_ROWS[p], lane
                else:   # both cores' spilled lanes side by side, from the right end of the row
                    y, pair = SPILL_ROW, pairs_per_row - 1 - ((lane - home) * cfg.cores + p)
                x, suffix = MULT_SITES[2 * pair + half]
                out[p, n, k] = (x, y, suffix)
    return out


def assign(cost: np.ndarray) -> np.ndarray:
    """Minimum-cost assignment of each row of ``cost`` (``n x m``, ``n <= m``) to a distinct column:
    the column of each row. The shortest augmenting path method (Jonker-Volgenant's form of the
    Hungarian algorithm), exact, ``O(n^2 m)``; deterministic (ties go to the lowest column)."""
    cost = np.asarray(cost, dtype=float)
    n, m = cost.shape
    if n > m:
        raise FloorplanError(f"{n} cells for {m} sites")
    u, v = np.zeros(n + 1), np.zeros(m + 1)
    owner = np.zeros(m + 1, dtype=int)          # owner[j]: row (1-based) holding column j; 0: free
    way = np.zeros(m + 1, dtype=int)
    for i in range(1, n + 1):
        owner[0], j0 = i, 0
        minv = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            free = ~used[1:]
            cur = cost[i0 - 1] - u[i0] - v[1:]
            better = free & (cur < minv[1:])
            minv[1:][better] = cur[better]
            way[1:][better] = j0
            cand = np.where(free, minv[1:], np.inf)
            j1 = int(np.argmin(cand)) + 1
            delta = cand[j1 - 1]
            u[owner[used]] += delta
            v[used] -= delta
            minv[1:][free] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    col = np.zeros(n, dtype=int)
    for j in range(1, m + 1):
        if owner[j]:
            col[owner[j] - 1] = j - 1
    return col


def table_blocks(cfg: AccelConfig) -> dict[str, int]:
    """DP16KD of each table the two cores share (:func:`hw.accel.mlp_engine.shared_tables`), by
    netlist name: the gate/up requantisation table and the SiLU table."""
    from hw.accel.mlp_engine import shared_tables
    from hw.lib.shared_table import table_blocks as blocks

    return {name: blocks(width, depth) for name, (width, depth) in shared_tables(cfg).items()}


def bank_sites(cfg: AccelConfig, mults=None) -> dict[tuple, tuple[int, int, str]]:
    """``(lane, bank) -> (x, y, bel suffix)`` of every weight-store DP16KD, and ``(table, block) ->
    ...`` of the blocks of the tables the cores share: each at the site that, over all of them
    together, minimises the summed distance to what it feeds. A bank feeds its lane's multipliers;
    a table block feeds both cores' logic, counted at the middle of each core's DSP row and
    weighted by :data:`TABLE_WEIGHT` (its reads lie on the cores' control paths, so it goes to the
    middle of the die before any bank)."""
    mults = mults or mult_sites(cfg)
    lanes = cfg.mv_in * cfg.mv_out // 2
    banks = bank_count(cfg)
    sites = [(x, y, s) for y in EBR_ROWS for x, s in EBR_SITES]
    users = {lane: [] for lane in range(lanes)}
    for (_p, n, k), (x, y, _) in mults.items():
        users[weight_position(n, k, cfg.mv_in)[0]].append((x, y))
    middle = (GROUP_X[0] + MULT_SITES[-1][0]) // 2
    cores = [(middle, HOME_ROWS[p]) for p in range(cfg.cores)]
    sx = np.array([s[0] for s in sites])
    sy = np.array([s[1] for s in sites])
    rows, cost = [], []
    for lane in range(lanes):
        c = sum(np.abs(sx - x) + np.abs(sy - y) for x, y in users[lane])
        for b in range(banks):
            rows.append((lane, b))
            cost.append(c)
    for name, blocks in table_blocks(cfg).items():
        c = TABLE_WEIGHT * sum(np.abs(sx - x) + np.abs(sy - y) for x, y in cores)
        for b in range(blocks):
            rows.append((name, b))
            cost.append(c)
    if len(rows) > len(sites):
        raise FloorplanError(f"{len(rows)} weight banks and table blocks for {len(sites)} DP16KD sites")
    col = assign(np.array(cost))
    return {key: sites[j] for key, j in zip(rows, col, strict=True)}


def floorplan(cfg: AccelConfig) -> dict[str, str]:
    """Cell name -> BEL of every constrained cell of the board top built for ``cfg``."""
    mults = mult_sites(cfg)
    out = {MULT_CELL.format(p=p, n=n, k=k): bel(x, y, s) for (p, n, k), (x, y, s) in mults.items()}
    for (lane, b), (x, y, s) in bank_sites(cfg, mults).items():
        if isinstance(lane, int):
            out[BANK_CELL.format(lane=lane, bank=b)] = bel(x, y, s)
        else:
            out[TABLE_CELL.format(table=lane, b=b)] = bel(x, y, s)
    return out


def yosys_script(plan: dict[str, str]) -> str:
    """The yosys commands that put ``plan``'s BEL attributes on the synthesised netlist (run after
    ``synth_ecp5``; a cell missing from the netlist stops yosys with its name)."""
    lines = []
    for cell, site in sorted(plan.items()):
        lines.append(f"select -assert-count 1 top/c:{cell}")
        lines.append(f'setattr -set BEL "{site}" top/c:{cell}')
    return "\n".join(lines)


def check_placed(placed, plan: dict[str, str]) -> int:
    """Check that every cell of ``plan`` sits on its BEL in the placed netlist ``placed`` (nextpnr's
    ``--write`` JSON); return how many were checked. Raises :class:`FloorplanError` naming the first
    cell that is missing or elsewhere."""
    placed = Path(placed)
    with placed.open() as f:
        netlist = json.load(f)
    tops = [m for m in netlist["modules"].values() if m.get("attributes", {}).get("top")]
    cells = (tops[0] if tops else next(iter(netlist["modules"].values())))["cells"]
    for cell, site in plan.items():
        if cell not in cells:
            raise FloorplanError(f"{placed}: cell {cell!r} of the floorplan is not in the placed netlist")
        got = cells[cell].get("attributes", {}).get("NEXTPNR_BEL")
        if got != site:
            raise FloorplanError(f"{placed}: cell {cell!r} field 'NEXTPNR_BEL' is {got!r}, "
                                 f"the floorplan put it at {site!r}")
    return len(plan)
