"""Planted bugs: a small textual change to one source file of the repository.

A :class:`Mutation` never touches the working tree. :meth:`Mutation.load` executes the changed
source as a fresh module (for the formal failing-twin tests, which build a block from it), and
:meth:`Mutation.apply` rewrites the file inside a copy of the repository (for ``python -m
tb.mutants``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

__all__ = ["Mutation", "MutationError"]


class MutationError(ValueError):
    """The text to replace is not in the file exactly once (the source changed under the mutant)."""


@dataclass(frozen=True)
class Mutation:
    """Replace ``old`` by ``new`` in ``path`` (relative to the repository root).

    Parameters
    ----------
    path : str
        Source file, e.g. ``"hw/accel/dispatcher.py"``.
    old, new : str
        The exact text (it must occur once) and its replacement.
    """

    path: str
    old: str
    new: str

    def mutated_source(self, root: Path = REPO) -> str:
        text = (root / self.path).read_text()
        n = text.count(self.old)
        if n != 1:
            raise MutationError(f"{self.path}: {self.old!r} occurs {n} times, not once")
        return text.replace(self.old, self.new)

    def load(self):
        """The mutated file executed as a new module (its imports still see the real repository)."""
        src = self.mutated_source()
        tag = hashlib.sha1(f"{self.path}\0{self.old}\0{self.new}".encode()).hexdigest()[:10]
        name = self.path.removesuffix(".py").replace("/", ".") + f"_mutant_{tag}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_loader(name, loader=None)
        module = importlib.util.module_from_spec(spec)
        module.__file__ = str(REPO / self.path)
        code = compile(src, str(REPO / self.path), "exec")
        sys.modules[name] = module
        try:
            exec(code, module.__dict__)
        except BaseException:
            del sys.modules[name]
            raise
        return module

    def apply(self, root: Path) -> str:
        """Write the mutated file into the copy at ``root``; returns the original text."""
        original = (root / self.path).read_text()
        (root / self.path).write_text(self.mutated_source(root))
        return original
