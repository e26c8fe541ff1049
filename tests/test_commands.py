"""Every command of the project answers ``--help``: each module under ``sw/``, ``hw/`` and ``tb/``
that runs as ``python -m``, and the script paths the docs name (``python sw/export_trace.py`` ...)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_layout import modules

REPO = Path(__file__).resolve().parent.parent


def _is_command(path: Path) -> bool:
    """A module with an ``if __name__ == "__main__":`` block, or a package's ``__main__.py``."""
    if path.name == "__main__.py":
        return True
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            return True
    return False


def commands() -> list[str]:
    """The ``python -m`` name of every command module (a package's ``__main__`` runs as the package)."""
    return sorted(name.removesuffix(".__main__") for name, path in modules().items()
                  if name != "sw.export_trace" and _is_command(path))  # sw/export_trace.py: a script path


SCRIPTS = ["sw/export_trace.py", "sw/model/generate.py", "sw/model/train.py", "sw/evidence/sweep_tau.py"]
#: The modules behind those script paths: their usage line names the script.
SCRIPT_MODULES = {"sw.trace.export", "sw.model.generate", "sw.model.train", "sw.evidence.sweep_tau"}
#: Modules whose command is their package's (``python -m sw.trace``, ``python -m sw.golden``).
PACKAGE_COMMANDS = {"sw.trace.check": "sw.trace", "sw.golden.calibrate": "sw.golden"}


def test_commands_found():
    found = commands()
    assert {"sw.trace", "sw.golden", "hw.flow.synth", "hw.flow.timing", "hw.board.run",
            "tb.bench"} <= set(found)


@pytest.mark.parametrize("target", [f"-m {m}" for m in commands()] + SCRIPTS)
def test_help(target):
    args = target.split(" ")
    r = subprocess.run([sys.executable, *args, "--help"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("usage:"), f"python {target} --help:\n{r.stderr[-1500:]}"
    if args[0] == "-m" and args[1] not in SCRIPT_MODULES:
        command = f"python -m {PACKAGE_COMMANDS.get(args[1], args[1])}"
        assert r.stdout.startswith(f"usage: {command} "), f"usage without {command!r}: {r.stdout[:80]}"
