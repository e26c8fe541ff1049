"""The critical paths of a placed, unrouted design: a static timing estimate from nextpnr's own files.

Usage::

    python -m hw.flow.placed_timing PLACED_JSON SDF [--top N] [--distinct] [--period NS [NS ...]]
                                    [--json OUT] [--force]
    python -m hw.flow.placed_timing ROUTED_JSON SDF --routed     # the SDF's routed delays (a check)

``nextpnr-ecp5 --no-route`` prints an Fmax estimate after placement but no critical path, and its
``--report`` has none either. This tool finds the paths from what that run can write:
``--write placed.json`` (the netlist, each cell's site in its ``NEXTPNR_BEL`` attribute, for
example ``X10/Y20/SLICEA.K1``) and ``--sdf placed.sdf`` (cell delays, setup checks and the
driver-pin to sink-pin arcs of every net).

The delay model is nextpnr-ecp5's own:

- cell delays, clock-to-output delays and setup times are the SDF's ``IOPATH`` and ``SETUPHOLD``
  entries (the maximum of the ``min:typ:max`` triples, as nextpnr's timing analyser uses);
- each arc of an unrouted net costs :func:`predict_delay`, ``Arch::predictDelay`` of
  nextpnr-ecp5 0.11 (``ecp5/arch.cc``): ``u * (6 + max(dx-5, 0) + max(dy-5, 0) + 2 *
  (min(dx, 5) + min(dy, 5)))`` picoseconds with ``u = 80 - 9 * speed index`` (80 ps for speed
  grade 6), zero for a carry ``FCO -> FCI``, for the wide-mux inputs ``FXA``/``FXB``, for
  ``F -> DI`` and for the direct LUT-to-LUT and flip-flop-to-LUT connections inside a tile;
  nets on the global clock network (``ECP5_IS_GLOBAL``) cost nothing.

A path starts at a clock-to-output arc (``TRELLIS_FF`` ``CLK -> Q``, ``DP16KD`` ``CLKA``/``CLKB``
``-> DO*``, a registered ``MULT18X18D`` ``CLK0 -> P*``) and ends at a setup check. The analysis
follows nextpnr's (``common/kernel/timing.cc``): the longest arrival per launch clock, the setup
time added at the endpoint, Fmax ``1 / delay`` for a clock with itself (``1 / (2 delay)`` from one
edge to the other). With ``--routed`` the SDF's own interconnect delays are used instead of the
estimate: on a routed design that reproduces the Fmax and the critical path nextpnr prints,
which is how the analysis is checked. On a placed design nextpnr writes the same prediction into
the SDF, so the estimate is checked arc by arc against it (the ``cross-check`` line).

It prints the estimated Fmax of each clock, the ``--top`` worst endpoints (``--distinct``: the
worst endpoint of each of the worst signals) each with its whole path (cell pins, delay of each
step, logic and routing, the Manhattan distance in tiles of each routed hop) and, for each
``--period``, the failing endpoints grouped by the RTL signal they belong to (the cell name
without the ``_TRELLIS_FF_Q...``, ``_LUT4_Z...``, ``$...`` suffixes that synthesis and packing
add), with the kinds of pin that fail (``DI``/``M`` data, ``CE``, ``LSR``) and the signals the
paths start from, and by block, so that one sees which signals own the slow endpoints.
``--json OUT`` writes the same as JSON. The SDF is read line by line: the whole board top
(97 thousand cells, a 94 MB SDF and a 156 MB netlist) takes about 10 s and 0.8 GB.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import sys
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DELAY_UNIT_PS", "TimingError", "parse_bel", "predict_delay", "signal_name", "read_sdf",
           "read_placement", "analyse", "format_report", "placed_paths", "main"]

#: ``80 - 9 * ArchArgs::speed`` of nextpnr-ecp5 (``SPEED_6 = 0``, ``SPEED_7 = 1``, ``SPEED_8 = 2``):
#: picoseconds per unit of :func:`predict_delay`, by the ``--speed`` given to nextpnr.
DELAY_UNIT_PS = {"6": 80, "7": 71, "8": 62}
#: Clock inputs of the cells nextpnr-ecp5 times (``TMG_CLOCK_INPUT`` in ``Arch::getPortTimingClass``):
#: an ``IOPATH`` from one of them is a clock-to-output arc, the start of a path.
CLOCK_PINS = frozenset({"CLK", "CLKA", "CLKB", "CLK0", "CLK1", "CLK2", "CLK3", "WCK", "ECLK", "SCLK",
                        "DQSI"})
#: ``Arch::lc_idx_shift``: a logic bel's ``z`` is ``(index in tile << 2) | kind``.
_LC_IDX_SHIFT = 2
_LOGIC_KIND = {"K": 0, "FF": 1, "RAMW": 2}       # BEL_COMB, BEL_FF, BEL_RAMW
_BEL = re.compile(r"X(\d+)/Y(\d+)/(.*)$")
_SLICE_BEL = re.compile(r"SLICE([A-D])\.(K|FF|RAMW)([01]?)$")
_UNESCAPE = re.compile(r"\\(.)")
#: Where synthesis and packing start appending to a signal's name.
_SUFFIX = re.compile(r"_(?:TRELLIS_FF|TRELLIS_COMB|TRELLIS_RAMW|TRELLIS_DPR16X4|DPR16X4|LUT4|CCU2C|"
                     r"PFUMX|L6MUX21|MULT18X18D|DP16KD|ALU54B)(?:_|$)|\$")
_PIN_DIGITS = re.compile(r"\d+$")
_NUMBERED = re.compile(r"\$\d+(?:_|$)")
_NEG = -math.inf


class TimingError(Exception):
    """Bad input, reported as one line naming the file and what is wrong."""


# ----------------------------------------------------------------------------------------------
# The delay model


def parse_bel(bel):
    """The ``(x, y, z)`` location of a nextpnr-ecp5 bel name.

    Parameters
    ----------
    bel : str
        The ``NEXTPNR_BEL`` attribute, for example ``"X10/Y20/SLICEB.K1"``.

    Returns
    -------
    tuple of int
        ``(x, y, z)``. For the logic bels of a tile (``SLICEx.K0/K1``, ``SLICEx.FF0/FF1``,
        ``SLICEx.RAMW``) ``z`` is nextpnr's ``(2 * slice + k) << 2 | kind``; other bels get
        ``z = 0`` (the delay model only looks at the ``z`` of logic bels).

    Raises
    ------
    ValueError
        If ``bel`` is not of the ``X<x>/Y<y>/<name>`` form.
    """
    m = _BEL.match(bel)
    if not m:
        raise ValueError(f"not a nextpnr-ecp5 bel name: {bel!r}")
    x, y, name = int(m[1]), int(m[2]), m[3]
    s = _SLICE_BEL.match(name)
    if not s:
        return x, y, 0
    index = 2 * "ABCD".index(s[1]) + int(s[3] or 0)
    return x, y, (index << _LC_IDX_SHIFT) | _LOGIC_KIND[s[2]]


def predict_delay(src, src_pin, dst, dst_pin, unit=DELAY_UNIT_PS["6"]):
    """nextpnr-ecp5's estimate of an unrouted arc, in picoseconds (``Arch::predictDelay``, 0.11).

    Parameters
    ----------
    src, dst : tuple of int
        ``(x, y, z)`` of the driving and the sink bel (:func:`parse_bel`).
    src_pin, dst_pin : str
        The driving and the sink pin (cell pins and bel pins have the same names on the ECP5).
    unit : int
        Picoseconds per unit: ``80 - 9 * speed index`` (:data:`DELAY_UNIT_PS`).

    Returns
    -------
    int
        ``unit * (6 + max(dx - 5, 0) + max(dy - 5, 0) + 2 * (min(dx, 5) + min(dy, 5)))``, or 0 for
        the arcs nextpnr treats as free: ``FCO -> FCI`` (carry chain), any arc into ``FXA``/``FXB``,
        ``F -> DI``, and in one tile a flip-flop's ``Q`` into the LUT of the same index or a LUT's
        ``F`` into ``A``-``D`` when the LUT's index is neither 1 nor 6.
    """
    if (src_pin == "FCO" and dst_pin == "FCI") or dst_pin in ("FXA", "FXB") \
            or (src_pin == "F" and dst_pin == "DI"):
        return 0
    if src[0] == dst[0] and src[1] == dst[1] and dst_pin in ("A", "B", "C", "D"):
        if src_pin == "Q" and (dst[2] >> _LC_IDX_SHIFT) == (src[2] >> _LC_IDX_SHIFT):
            return 0
        if src_pin == "F" and (src[2] >> _LC_IDX_SHIFT) not in (1, 6):
            return 0
    dx, dy = abs(src[0] - dst[0]), abs(src[1] - dst[1])
    return unit * (6 + max(dx - 5, 0) + max(dy - 5, 0) + 2 * (min(dx, 5) + min(dy, 5)))


def signal_name(cell):
    """The RTL signal a packed cell belongs to: its name up to the first suffix synthesis added.

    Parameters
    ----------
    cell : str
        A cell name such as ``"harness.dut.tas.level_TRELLIS_FF_Q_3"`` or
        ``"harness.dut.busy_LUT4_B_1_Z_PFUMX_ALUT"``.

    Returns
    -------
    str
        ``"harness.dut.tas.level"``, ``"harness.dut.busy"``. Amaranth's anonymous signals keep
        their name and number (``"core.$signal$57_TRELLIS_FF_Q"`` is ``"core.$signal$57"``); a
        cell with no name of its own (``"$nextpnr_CCU2C_186$CCU2_COMB1"``) keeps its first ``$``
        part without the trailing number (``"$nextpnr_CCU2C"``).
    """
    if cell.startswith("$"):
        return re.sub(r"_?\d+$", "", "$" + cell[1:].split("$", 1)[0]) or cell
    for m in _SUFFIX.finditer(cell, 1):
        i = m.start()
        if cell[i] == "$":
            if cell[i - 1] == ".":
                continue            # an anonymous Amaranth signal: "core.$signal", "core.$like"
            if _NUMBERED.match(cell, i) and cell.rfind("$", 0, i) > cell.rfind(".", 0, i):
                continue            # and its number: "core.$signal$57"
        return cell[:i]
    return cell


def _block(signal):
    """The hierarchy a signal is in: its name without the last dotted part."""
    return signal.rsplit(".", 1)[0] if "." in signal else "(top)"


# ----------------------------------------------------------------------------------------------
# The SDF


@dataclass
class Sdf:
    """The timing graph of an SDF written by nextpnr: pins, arcs and checks, by dense pin index.

    Attributes
    ----------
    cell_names, cell_types : list of str
        Per cell (index): its instance name (unescaped) and its ``CELLTYPE``.
    pin_names : list of str
        Per pin name index: the port name.
    node_cell, node_pin : array
        Per node (a cell pin): its cell index and pin name index.
    nodes : dict
        ``cell index * 4096 + pin index`` -> node.
    ic_from, ic_to, ic_delay : array
        Interconnect arcs: driving node, sink node, the SDF's delay in picoseconds.
    io_from, io_to, io_delay : array
        ``IOPATH`` arcs (combinational and clock-to-output).
    ck_data, ck_clock, ck_edge, ck_setup : array
        Setup checks: data node, clock node, clock edge (1 rising, 0 falling), setup time in ps.
    """
    path: str = ""
    cell_names: list = field(default_factory=list)
    cell_types: list = field(default_factory=list)
    cells: dict = field(default_factory=dict)
    pin_names: list = field(default_factory=list)
    pins: dict = field(default_factory=dict)
    nodes: dict = field(default_factory=dict)
    node_cell: array = field(default_factory=lambda: array("l"))
    node_pin: array = field(default_factory=lambda: array("l"))
    ic_from: array = field(default_factory=lambda: array("l"))
    ic_to: array = field(default_factory=lambda: array("l"))
    ic_delay: array = field(default_factory=lambda: array("d"))
    io_from: array = field(default_factory=lambda: array("l"))
    io_to: array = field(default_factory=lambda: array("l"))
    io_delay: array = field(default_factory=lambda: array("d"))
    ck_data: array = field(default_factory=lambda: array("l"))
    ck_clock: array = field(default_factory=lambda: array("l"))
    ck_edge: array = field(default_factory=lambda: array("b"))
    ck_setup: array = field(default_factory=lambda: array("d"))

    def cell(self, name, kind=None):
        """Index of cell ``name`` (unescaped), added if new."""
        i = self.cells.get(name)
        if i is None:
            i = self.cells[name] = len(self.cell_names)
            self.cell_names.append(name)
            self.cell_types.append(kind)
        elif kind is not None:
            self.cell_types[i] = kind
        return i

    def node(self, cell, pin):
        """Node of pin ``pin`` of cell index ``cell``, added if new."""
        p = self.pins.get(pin)
        if p is None:
            p = self.pins[pin] = len(self.pin_names)
            self.pin_names.append(pin)
            if p >= 4096:
                raise TimingError(f"{self.path}: more than 4096 distinct port names")
        key = cell * 4096 + p
        n = self.nodes.get(key)
        if n is None:
            n = self.nodes[key] = len(self.node_cell)
            self.node_cell.append(cell)
            self.node_pin.append(p)
        return n

    def node_name(self, n):
        """``cell.PIN`` of node ``n``, as nextpnr prints it."""
        return f"{self.cell_names[self.node_cell[n]]}.{self.pin_names[self.node_pin[n]]}"


def _unescape(name):
    return _UNESCAPE.sub(r"\1", name) if "\\" in name else name


def _max_delay(*triples):
    """The largest ``max`` of SDF ``(min:typ:max)`` triples, in the SDF's unit (ps)."""
    best = 0.0
    for t in triples:
        v = t.strip("()").rsplit(":", 1)[-1]
        if v:
            best = max(best, float(v))
    return best


def read_sdf(path):
    """Read an SDF written by ``nextpnr-ecp5 --sdf`` into an :class:`Sdf`, line by line.

    Parameters
    ----------
    path : str or Path
        The SDF file (``TIMESCALE 1ps``, one ``INTERCONNECT``, ``IOPATH`` or ``SETUPHOLD`` per
        line, as nextpnr writes it; names escaped with a backslash before ``$ \\ [ ] :``).

    Returns
    -------
    Sdf

    Raises
    ------
    TimingError
        If the file cannot be read or is not such an SDF.
    """
    sdf = Sdf(path=str(path))
    cell = None
    kind = None
    seen_header = False
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                s = line.lstrip()
                if s.startswith("(INTERCONNECT "):
                    t = s.split()
                    if len(t) < 5:
                        raise TimingError(f"{path}:{lineno}: malformed INTERCONNECT")
                    dc, _, dp = t[1].rpartition("/")
                    sc, _, sp = t[2].rpartition("/")
                    d = sdf.node(sdf.cell(_unescape(dc)), _unescape(dp))
                    u = sdf.node(sdf.cell(_unescape(sc)), _unescape(sp))
                    sdf.ic_from.append(d)
                    sdf.ic_to.append(u)
                    sdf.ic_delay.append(_max_delay(t[3], t[4]))
                elif s.startswith("(IOPATH "):
                    t = s.split()
                    if cell is None or len(t) < 5:
                        raise TimingError(f"{path}:{lineno}: IOPATH outside a cell")
                    sdf.io_from.append(sdf.node(cell, _unescape(t[1])))
                    sdf.io_to.append(sdf.node(cell, _unescape(t[2])))
                    sdf.io_delay.append(_max_delay(t[3], t[4]))
                elif s.startswith("(SETUPHOLD "):
                    # (SETUPHOLD (posedge DI) (posedge CLK) (setup triple) (hold triple))
                    t = s.replace("(", " ").replace(")", " ").split()
                    if cell is None or len(t) < 7:
                        raise TimingError(f"{path}:{lineno}: SETUPHOLD outside a cell")
                    if t[1] != "posedge":       # nextpnr writes each check for both data edges
                        continue
                    sdf.ck_data.append(sdf.node(cell, _unescape(t[2])))
                    sdf.ck_clock.append(sdf.node(cell, _unescape(t[4])))
                    sdf.ck_edge.append(1 if t[3] == "posedge" else 0)
                    sdf.ck_setup.append(float(t[5].rsplit(":", 1)[-1] or 0))
                elif s.startswith("(CELLTYPE "):
                    kind = s[len("(CELLTYPE "):].strip().rstrip(")").strip('"')
                elif s.startswith("(INSTANCE"):
                    name = _unescape(s[len("(INSTANCE"):].strip().rstrip(")").strip())
                    cell = sdf.cell(name, kind) if name else None
                elif s.startswith("(TIMESCALE"):
                    if "1ps" not in s.replace(" ", ""):
                        raise TimingError(f"{path}:{lineno}: TIMESCALE is not 1ps")
                elif s.startswith("(DELAYFILE"):
                    seen_header = True
    except OSError as e:
        raise TimingError(f"{path}: cannot read: {e.strerror}") from None
    if not seen_header or not sdf.ic_from:
        raise TimingError(f"{path}: not an SDF with INTERCONNECT entries (write it with nextpnr-ecp5 --sdf)")
    return sdf


# ----------------------------------------------------------------------------------------------
# The placed netlist


@dataclass
class Placement:
    """What the analysis needs of a netlist nextpnr wrote (``--write``).

    Attributes
    ----------
    loc : dict
        Cell name -> ``(x, y, z)`` (:func:`parse_bel`) of every placed cell.
    global_drivers : set
        ``(cell, port)`` driving a net on the global clock network (``ECP5_IS_GLOBAL``): such arcs
        cost nothing, as in nextpnr.
    speed : str or None
        nextpnr's ``arch.speed`` setting (``"6"``, ``"7"``, ``"8"``).
    routed : bool
        True if nextpnr's ``route`` setting says the design is routed.
    cells, netnames : dict
        The netlist's cells and nets (for the net names of a path and the cells' parameters).
    """
    loc: dict
    global_drivers: set
    speed: str | None
    routed: bool
    cells: dict
    netnames: dict
    _bit_name: dict | None = None

    def net_name(self, cell, port):
        """The shortest public name of the net on ``cell``'s ``port`` (or ``None``)."""
        try:
            bit = self.cells[cell]["connections"][port][0]
        except (KeyError, IndexError, TypeError):
            return None
        if self._bit_name is None:
            names = {}
            for name, net in self.netnames.items():
                rank = (net.get("hide_name", 0), len(name))
                for b in net.get("bits", ()):
                    if isinstance(b, int) and (b not in names or rank < names[b][0]):
                        names[b] = (rank, name)
            self._bit_name = {b: n for b, (_, n) in names.items()}
        return self._bit_name.get(bit)


def read_placement(path):
    """Read the cells' locations and the global nets of a netlist written by nextpnr ``--write``.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    Placement

    Raises
    ------
    TimingError
        If the file is not JSON, has no top module, or no cell has a ``NEXTPNR_BEL``.
    """
    try:
        with open(path, "rb") as f:
            netlist = json.load(f)
    except OSError as e:
        raise TimingError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise TimingError(f"{path}: not JSON: {e}") from None
    try:
        mods = netlist["modules"]
        tops = [m for m in mods.values() if m.get("attributes", {}).get("top")]
        top = tops[0] if len(tops) == 1 else mods["top"]
        cells, netnames = top["cells"], top.get("netnames", {})
    except (KeyError, TypeError, AttributeError):
        raise TimingError(f"{path}: field 'modules': not a nextpnr JSON netlist with one top "
                          f"module") from None
    loc = {}
    for name, cell in cells.items():
        bel = cell.get("attributes", {}).get("NEXTPNR_BEL")
        if bel:
            try:
                loc[name] = parse_bel(bel)
            except ValueError as e:
                raise TimingError(f"{path}: cell {name!r} field 'NEXTPNR_BEL': {e}") from None
    if not loc:
        raise TimingError(f"{path}: field 'NEXTPNR_BEL': no placed cells (write it with nextpnr --write "
                          f"after placement)")
    global_bits = set()
    for net in netnames.values():
        flag = str(net.get("attributes", {}).get("ECP5_IS_GLOBAL", "0")).strip()
        if flag and int(flag, 2 if set(flag) <= {"0", "1"} else 10):
            global_bits.update(b for b in net.get("bits", ()) if isinstance(b, int))
    global_drivers = set()
    if global_bits:
        for name, cell in cells.items():
            dirs = cell.get("port_directions", {})
            for port, bits in cell.get("connections", {}).items():
                if dirs.get(port) == "output" and any(b in global_bits for b in bits):
                    global_drivers.add((name, port))
    settings = top.get("settings", {})
    routed = str(settings.get("route", "0")).strip("0 ") != ""
    return Placement(loc, global_drivers, settings.get("arch.speed"), routed, cells, netnames)


# ----------------------------------------------------------------------------------------------
# The analysis


@dataclass
class Analysis:
    """The result of :func:`analyse`; :func:`build_report` turns it into a report."""
    sdf: Sdf
    placement: Placement
    routed: bool
    unit: int
    route_delay: array            # per node: delay of the arc into it (inputs), ps
    driver: array                 # per node: the node driving it, -1 if none
    domains: list                 # [(clock source node, edge)]
    arrival: dict                 # launch domain -> array of arrival times (ps), -inf if none
    pred: dict                    # launch domain -> array of predecessor nodes
    clk2q: dict                   # start node -> {clock node: delay}
    endpoints: list               # [(delay ps, data node, clock node, setup, launch, capture)]
    loop_nodes: int
    crosscheck: tuple             # (arcs where the SDF equals the estimate, arcs compared)
    seconds: dict


def _topological_order(n_nodes, succ):
    """Kahn's order of the nodes; nodes on combinational loops are left out."""
    indeg = array("l", [0]) * n_nodes
    for lst in succ:
        if lst:
            for v, _ in lst:
                indeg[v] += 1
    order = array("l", (i for i in range(n_nodes) if indeg[i] == 0))
    i = 0
    while i < len(order):
        lst = succ[order[i]]
        i += 1
        if lst:
            for v, _ in lst:
                indeg[v] -= 1
                if indeg[v] == 0:
                    order.append(v)
    return order


def analyse(sdf, placement, *, routed=False, speed=None):
    """Static timing of the design in ``sdf`` placed as in ``placement``.

    Parameters
    ----------
    sdf : Sdf
    placement : Placement
    routed : bool
        Use the SDF's interconnect delays (a routed design) instead of :func:`predict_delay`.
    speed : str, optional
        The speed grade for :data:`DELAY_UNIT_PS` (default: the netlist's ``arch.speed``, else 6).

    Returns
    -------
    Analysis
    """
    t0 = time.monotonic()
    speed = str(speed or placement.speed or "6")
    if speed not in DELAY_UNIT_PS:
        raise TimingError(f"speed grade {speed!r}: expected one of {', '.join(DELAY_UNIT_PS)}")
    unit = DELAY_UNIT_PS[speed]
    n = len(sdf.node_cell)
    names, pin_names = sdf.cell_names, sdf.pin_names
    node_cell, node_pin = sdf.node_cell, sdf.node_pin
    loc, glob = placement.loc, placement.global_drivers
    driver = array("l", [-1]) * n
    route_delay = array("d", [0.0]) * n
    succ = [None] * n
    same = compared = 0
    for d, u, sdf_delay in zip(sdf.ic_from, sdf.ic_to, sdf.ic_delay, strict=True):
        dc, uc = names[node_cell[d]], names[node_cell[u]]
        dp, up = pin_names[node_pin[d]], pin_names[node_pin[u]]
        if (dc, dp) in glob:
            est = 0
        else:
            a, b = loc.get(dc), loc.get(uc)
            est = predict_delay(a, dp, b, up, unit) if a is not None and b is not None else 0
        compared += 1
        same += est == sdf_delay
        delay = sdf_delay if routed else float(est)
        driver[u] = d
        route_delay[u] = delay
        if succ[d] is None:
            succ[d] = []
        succ[d].append((u, delay))
    # Clock pins: the static set and every clock of a setup check.
    clock_pins = {sdf.pins[p] for p in CLOCK_PINS if p in sdf.pins}
    clock_pins.update(node_pin[c] for c in sdf.ck_clock)
    edge_of = {}                       # clock node -> edge, from the cell's own setup checks
    for c, e in zip(sdf.ck_clock, sdf.ck_edge, strict=True):
        edge_of[c] = e
    clk2q = collections.defaultdict(dict)
    for f, t, delay in zip(sdf.io_from, sdf.io_to, sdf.io_delay, strict=True):
        if node_pin[f] in clock_pins:
            clk2q[t][f] = delay
        else:
            if succ[f] is None:
                succ[f] = []
            succ[f].append((t, delay))
    t1 = time.monotonic()
    order = _topological_order(n, succ)
    loop_nodes = n - len(order)
    t2 = time.monotonic()

    domain_index = {}
    domains = []

    def domain(clock_node):
        src = driver[clock_node]
        if src < 0:
            return None
        key = (src, edge_of.get(clock_node, _param_edge(placement, names[node_cell[clock_node]],
                                                        pin_names[node_pin[clock_node]])))
        if key not in domain_index:
            domain_index[key] = len(domains)
            domains.append(key)
        return domain_index[key]

    starts = collections.defaultdict(list)          # launch domain -> [(node, clk2q, clock node)]
    for out, arcs in clk2q.items():
        for c, delay in arcs.items():
            dom = domain(c)
            if dom is not None:
                starts[dom].append((out, delay, c))
    arrival, pred = {}, {}
    for dom, points in starts.items():
        arr = array("d", [_NEG]) * n
        prv = array("l", [-1]) * n
        for out, delay, c in points:
            if delay > arr[out]:
                arr[out] = delay
                prv[out] = c
        for u in order:
            a = arr[u]
            if a == _NEG:
                continue
            lst = succ[u]
            if lst:
                for v, d in lst:
                    if a + d > arr[v]:
                        arr[v] = a + d
                        prv[v] = u
        arrival[dom], pred[dom] = arr, prv
    t3 = time.monotonic()
    endpoints = []
    seen = set()
    for data, c, setup in zip(sdf.ck_data, sdf.ck_clock, sdf.ck_setup, strict=True):
        if (data, c) in seen:
            continue
        seen.add((data, c))
        cap = domain(c)
        if cap is None:
            continue
        for dom, arr in arrival.items():
            if arr[data] != _NEG:
                endpoints.append((arr[data] + setup, data, c, setup, dom, cap))
    t4 = time.monotonic()
    return Analysis(sdf, placement, routed, unit, route_delay, driver, domains, arrival, pred, dict(clk2q),
                    endpoints, loop_nodes, (same, compared),
                    {"graph": round(t1 - t0, 1), "order": round(t2 - t1, 1), "propagate": round(t3 - t2, 1),
                     "endpoints": round(t4 - t3, 1)})


def _param_edge(placement, cell, clock_pin):
    """A clock pin's edge from the cell's parameters (``CLKMUX`` = ``INV``), rising if none says so."""
    params = placement.cells.get(cell, {}).get("parameters", {})
    mux = {"CLK": "CLKMUX", "CLKA": "CLKAMUX", "CLKB": "CLKBMUX"}.get(clock_pin, clock_pin + "MUX")
    return 0 if str(params.get(mux, "")).strip() == "INV" else 1


# ----------------------------------------------------------------------------------------------
# The report


def _clock_name(an, dom):
    src, edge = an.domains[dom]
    sdf = an.sdf
    cell, pin = sdf.cell_names[sdf.node_cell[src]], sdf.pin_names[sdf.node_pin[src]]
    return an.placement.net_name(cell, pin) or f"{cell}.{pin}", "posedge" if edge else "negedge"


def _path(an, endpoint):
    """The steps of ``endpoint``'s worst path, from its start to its setup check."""
    delay, data, clock, setup, dom, _ = endpoint
    sdf, arr, prv = an.sdf, an.arrival[dom], an.pred[dom]
    names, pin_names, node_cell, node_pin = sdf.cell_names, sdf.pin_names, sdf.node_cell, sdf.node_pin
    chain = [data]
    while True:
        p = prv[chain[-1]]
        if p < 0:
            raise AssertionError("broken predecessor chain")
        chain.append(p)
        if chain[-2] in an.clk2q and p in an.clk2q[chain[-2]] and arr[chain[-2]] == an.clk2q[chain[-2]][p]:
            break
    chain.reverse()                   # clock pin, start output, ..., data pin
    steps = []
    loc = an.placement.loc

    def where(node):
        xyz = loc.get(names[node_cell[node]])
        return None if xyz is None else [xyz[0], xyz[1]]

    for i in range(1, len(chain)):
        u, v = chain[i - 1], chain[i]
        cell, pin = names[node_cell[v]], pin_names[node_pin[v]]
        step = {"cell": cell, "pin": pin, "at": where(v)}
        if i == 1:
            step.update(type="clk-to-q", delay_ns=arr[v] / 1000, clock_pin=pin_names[node_pin[u]])
        elif an.driver[v] == u:
            a, b = where(u), where(v)
            step.update(type="routing", delay_ns=(arr[v] - arr[u]) / 1000, from_at=a,
                        net=an.placement.net_name(names[node_cell[u]], pin_names[node_pin[u]]),
                        distance=None if a is None or b is None else abs(a[0] - b[0]) + abs(a[1] - b[1]))
        else:
            step.update(type="logic", delay_ns=(arr[v] - arr[u]) / 1000, from_pin=pin_names[node_pin[u]])
        step["total_ns"] = arr[v] / 1000
        steps.append(step)
    steps.append({"type": "setup", "cell": names[node_cell[data]], "pin": pin_names[node_pin[data]],
                  "at": where(data), "delay_ns": setup / 1000, "total_ns": delay / 1000})
    for s in steps:
        s["delay_ns"], s["total_ns"] = round(s["delay_ns"], 4), round(s["total_ns"], 4)
    return steps


def _budget(an, endpoint):
    """The delay that counts against the period: doubled from one clock edge to the other."""
    delay, _, _, _, launch, capture = endpoint
    return delay * 2 if an.domains[launch][1] != an.domains[capture][1] else delay


def build_report(an, *, top=10, periods=(8.0,), distinct=False):
    """The report of an :class:`Analysis` as a JSON-able dict.

    Parameters
    ----------
    an : Analysis
    top : int
        How many of the worst endpoints to give with their whole path.
    periods : sequence of float
        Clock periods (ns) at which to count and group the failing endpoints.
    distinct : bool
        Give the worst endpoint of each of the ``top`` worst signals instead of the ``top`` worst
        endpoints (which are often bits of one register, all behind the same path).

    Returns
    -------
    dict
        ``clocks`` (Fmax of each clock with itself), ``cross_clock`` (worst delay between
        different clocks), ``paths`` (the ``top`` worst endpoints, each with ``steps``), ``failing``
        (per period: the failing endpoints by signal and by block).
    """
    sdf = an.sdf
    names, node_cell = sdf.cell_names, sdf.node_cell
    same_clock = [e for e in an.endpoints if an.domains[e[4]][0] == an.domains[e[5]][0]]
    cross = [e for e in an.endpoints if an.domains[e[4]][0] != an.domains[e[5]][0]]
    # One row per endpoint pin: its worst launch.
    worst = {}
    for e in same_clock:
        key = (e[1], e[5])
        if key not in worst or _budget(an, e) > _budget(an, worst[key]):
            worst[key] = e
    ranked = sorted(worst.values(), key=lambda e: -_budget(an, e))
    clocks = {}
    for e in ranked:
        name, edge = _clock_name(an, e[5])
        c = clocks.setdefault(name, {"endpoints": 0, "worst_ns": _budget(an, e) / 1000,
                                     "fmax_mhz": 1e6 / _budget(an, e), "edges": edge})
        c["endpoints"] += 1
    for c in clocks.values():
        c["worst_ns"], c["fmax_mhz"] = round(c["worst_ns"], 4), round(c["fmax_mhz"], 3)
    cross_rows = {}
    for e in cross:
        key = (_clock_name(an, e[4])[0], _clock_name(an, e[5])[0])
        cross_rows[key] = max(cross_rows.get(key, 0), e[0])
    paths = []
    shown = set()
    for e in ranked:
        if len(paths) >= top:
            break
        if distinct:
            end = signal_name(names[node_cell[e[1]]])
            if end in shown:
                continue
            shown.add(end)
        steps = _path(an, e)
        logic = sum(s["delay_ns"] for s in steps if s["type"] != "routing")
        hops = [s for s in steps if s["type"] == "routing"]
        start = steps[0]
        paths.append({
            "delay_ns": round(e[0] / 1000, 4), "budget_ns": round(_budget(an, e) / 1000, 4),
            "fmax_mhz": round(1e6 / _budget(an, e), 3), "clock": _clock_name(an, e[5])[0],
            "from": signal_name(start["cell"]), "to": signal_name(names[node_cell[e[1]]]),
            "start": f"{start['cell']}.{start['pin']}", "end": f"{names[node_cell[e[1]]]}.{steps[-1]['pin']}",
            "logic_ns": round(logic, 4), "routing_ns": round(sum(s["delay_ns"] for s in hops), 4),
            "hops": len(hops), "distances": [s["distance"] for s in hops], "steps": steps,
        })
    failing = {}
    for period in periods:
        limit = period * 1000
        fails = [e for e in ranked if _budget(an, e) > limit]
        by_signal, by_block = {}, {}
        for e in fails:
            end = signal_name(names[node_cell[e[1]]])
            start = _start_signal(an, e)
            g = by_signal.setdefault(end, {"signal": end, "endpoints": 0, "worst_ns": 0.0,
                                           "starts": collections.Counter(), "pins": collections.Counter()})
            g["endpoints"] += 1
            g["worst_ns"] = max(g["worst_ns"], round(_budget(an, e) / 1000, 4))
            g["starts"][start] += 1
            g["pins"][_PIN_DIGITS.sub("", sdf.pin_names[sdf.node_pin[e[1]]])] += 1
            b = by_block.setdefault(_block(end), {"block": _block(end), "endpoints": 0, "worst_ns": 0.0,
                                                   "signals": set()})
            b["endpoints"] += 1
            b["worst_ns"] = max(b["worst_ns"], round(_budget(an, e) / 1000, 4))
            b["signals"].add(end)
        for g in by_signal.values():
            g["starts"] = dict(g["starts"].most_common(5))
            g["pins"] = dict(g["pins"].most_common())
        for b in by_block.values():
            b["signals"] = len(b["signals"])
        failing[f"{period:g}"] = {
            "period_ns": period, "mhz": round(1000 / period, 3), "endpoints": len(fails),
            "of": len(ranked),
            "by_signal": sorted(by_signal.values(), key=lambda g: (-g["endpoints"], -g["worst_ns"])),
            "by_block": sorted(by_block.values(), key=lambda b: (-b["endpoints"], -b["worst_ns"])),
        }
    same, compared = an.crosscheck
    return {
        "mode": "routed (SDF interconnect delays)" if an.routed else
                f"placed (nextpnr-ecp5 predictDelay, {an.unit} ps a unit)",
        "sdf": sdf.path, "cells": len(names), "arcs": compared, "pins": len(node_cell),
        "loop_pins": an.loop_nodes,
        "crosscheck": {"sdf_equals_estimate": same, "arcs": compared},
        "clocks": clocks,
        "cross_clock": [{"from": a, "to": b, "delay_ns": round(d / 1000, 4)}
                        for (a, b), d in cross_rows.items()],
        "paths": paths, "failing": failing, "seconds": an.seconds,
    }


def _start_signal(an, endpoint):
    """The signal of the start of ``endpoint``'s worst path (walks the predecessor chain)."""
    _, data, _, _, dom, _ = endpoint
    prv, sdf = an.pred[dom], an.sdf
    v, p = data, an.pred[dom][data]
    while p >= 0 and not (v in an.clk2q and p in an.clk2q[v]):
        v, p = p, prv[p]
    return signal_name(sdf.cell_names[sdf.node_cell[v]])


def format_report(report, *, limit=15):
    """The report as text: Fmax per clock, the worst paths step by step, the failing endpoints grouped.

    Parameters
    ----------
    report : dict
        From :func:`build_report`.
    limit : int
        Rows of each grouped table.

    Returns
    -------
    str
    """
    loops = report["loop_pins"]
    out = [f"timing of {report['sdf']}: {report['mode']}",
           f"  {report['cells']:,} cells, {report['pins']:,} pins, {report['arcs']:,} net arcs"
           + (f", {loops:,} pins on combinational loops (left out)" if loops else "")]
    cc = report["crosscheck"]
    out.append(f"  cross-check: the SDF's interconnect delay equals the placement estimate on "
               f"{cc['sdf_equals_estimate']:,} of {cc['arcs']:,} arcs")
    for name, c in report["clocks"].items():
        out.append(f"clock {name}: Fmax {c['fmax_mhz']:.2f} MHz (worst path {c['worst_ns']:.3f} ns, "
                   f"{c['endpoints']:,} endpoints)")
    for row in report["cross_clock"]:
        out.append(f"between clocks {row['from']} -> {row['to']}: worst {row['delay_ns']:.3f} ns")
    for i, p in enumerate(report["paths"], 1):
        dist = ", ".join(str(d) for d in p["distances"])
        out.append("")
        out.append(f"#{i} {p['budget_ns']:.3f} ns ({p['fmax_mhz']:.2f} MHz)  {p['from']} -> {p['to']}")
        out.append(f"   logic {p['logic_ns']:.3f} ns, routing {p['routing_ns']:.3f} ns in {p['hops']} hops; "
                   f"tiles per hop: {dist}")
        for s in p["steps"]:
            at = _at(s["at"])
            if s["type"] == "routing":
                at = f"{_at(s['from_at'])}->{at} {s['distance'] if s['distance'] is not None else '?':>2}"
            out.append(f"   {s['type']:>8} {s['delay_ns']:6.3f} {s['total_ns']:7.3f}  {at:<22} "
                       f"{s['cell']}.{s['pin']}")
    for f in report["failing"].values():
        out.append("")
        out.append(f"endpoints failing at {f['period_ns']:g} ns ({f['mhz']:.1f} MHz): {f['endpoints']:,} of "
                   f"{f['of']:,}")
        if not f["endpoints"]:
            continue
        out.append(f"  by signal (first {limit}):  endpoints  worst ns  signal [endpoint pins]  <- worst "
                   f"start signals")
        for g in f["by_signal"][:limit]:
            starts = ", ".join(f"{s} ({n})" for s, n in list(g["starts"].items())[:3])
            pins = " ".join(f"{p} {n}" for p, n in list(g["pins"].items())[:3])
            out.append(f"    {g['endpoints']:>7,} {g['worst_ns']:8.3f}  {g['signal']} [{pins}]  <- {starts}")
        out.append(f"  by block (first {limit}):  endpoints  worst ns  signals  block")
        for b in f["by_block"][:limit]:
            out.append(f"    {b['endpoints']:>7,} {b['worst_ns']:8.3f} {b['signals']:>8,}  {b['block']}")
    return "\n".join(out)


def _at(xy):
    return f"X{xy[0]}/Y{xy[1]}" if xy else "?"


def write_json(report, path, *, force=False):
    """Write ``report`` to ``path`` through a temporary file; refuse to replace a file without ``force``."""
    from sw.atomic import atomic_file

    path = Path(path)
    if path.exists() and not force:
        raise TimingError(f"{path}: exists; use --force to replace it")
    with atomic_file(path) as tmp:
        Path(tmp).write_text(json.dumps(report, indent=2) + "\n")


def placed_paths(placed, sdf, *, period_ns, top=8, routed=False):
    """The worst paths of a placed design (one per end signal) and its failing endpoints grouped
    by signal at ``period_ns`` and at 10 ns, from :func:`analyse` and :func:`build_report`; the full report is
    written beside the netlist as ``paths.json`` and ``paths.txt``. With ``routed`` the SDF's
    routed delays are used instead of the placement estimate."""
    an = analyse(read_sdf(sdf), read_placement(placed), routed=routed)
    periods = sorted({round(period_ns, 3), 10.0})
    report = build_report(an, top=top, periods=periods, distinct=True)
    out = Path(placed).parent
    write_json(report, out / "paths.json", force=True)
    (out / "paths.txt").write_text(format_report(report, limit=40) + "\n")
    worst = [{"from": p["from"], "to": p["to"], "ns": p["delay_ns"], "logic_ns": p["logic_ns"],
              "routing_ns": p["routing_ns"]} for p in report["paths"]]
    return {"paths_estimate_mhz": {c: v["fmax_mhz"] for c, v in report["clocks"].items()},
            "failing_endpoints": {k: v["endpoints"] for k, v in report["failing"].items()},
            "worst_paths": worst, "paths_report": str(out / "paths.txt")}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hw.flow.placed_timing", description=__doc__.split("\n")[0])
    ap.add_argument("placed", type=Path, help="netlist written by nextpnr-ecp5 --write (after placement)")
    ap.add_argument("sdf", type=Path, help="SDF written by the same nextpnr-ecp5 run (--sdf)")
    ap.add_argument("--top", type=int, default=5, help="worst endpoints to show with their path (default 5)")
    ap.add_argument("--period", type=float, nargs="+", default=[8.0], metavar="NS",
                    help="clock periods at which to group the failing endpoints (default 8)")
    ap.add_argument("--routed", action="store_true",
                    help="use the SDF's interconnect delays (a routed design) instead of the "
                         "placement estimate")
    ap.add_argument("--speed", choices=sorted(DELAY_UNIT_PS), default=None,
                    help="speed grade of the estimate (default: the netlist's arch.speed)")
    ap.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the report as JSON")
    ap.add_argument("--force", action="store_true", help="replace an existing --json file")
    ap.add_argument("--distinct", action="store_true",
                    help="show the worst endpoint of each of the --top worst signals, not the --top worst "
                         "endpoints")
    ap.add_argument("--groups", type=int, default=15, help="rows of each grouped table (default 15)")
    args = ap.parse_args(argv)
    try:
        if args.json and args.json.exists() and not args.force:
            raise TimingError(f"{args.json}: exists; use --force to replace it")
        t0 = time.monotonic()
        placement = read_placement(args.placed)
        t1 = time.monotonic()
        sdf = read_sdf(args.sdf)
        t2 = time.monotonic()
        if args.routed and not placement.routed:
            print(f"hw.flow.placed_timing: warning: {args.placed} is not routed; --routed takes the SDF's "
                  f"delays as they are", file=sys.stderr)
        missing = sum(1 for name in sdf.cell_names if name not in placement.loc)
        if missing > len(sdf.cell_names) // 2:
            raise TimingError(f"{args.sdf}: {missing} of {len(sdf.cell_names)} cells are not placed in "
                              f"{args.placed} (not the same nextpnr run?)")
        an = analyse(sdf, placement, routed=args.routed, speed=args.speed)
        an.seconds = {"read_netlist": round(t1 - t0, 1), "read_sdf": round(t2 - t1, 1), **an.seconds}
        report = build_report(an, top=args.top, periods=args.period, distinct=args.distinct)
        report["placed"] = str(args.placed)
        if missing:
            report["unplaced_cells"] = missing
        print(format_report(report, limit=args.groups))
        if args.json:
            write_json(report, args.json, force=args.force)
            print(f"wrote {args.json}")
    except TimingError as e:
        print(f"hw.flow.placed_timing: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
