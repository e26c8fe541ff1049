"""Trace directories: the error every bad file raises, and comparing a result with a trace.

A trace directory holds ``manifest.json`` and one ``.npy`` file per tensor (format described in
``golden/README.md``): a decode trace (:mod:`sw.trace.decode`) or a whole-step trace
(:mod:`sw.trace.full_step`). Everything a testbench or user feeds in is validated there, so that a
bad file gives one :class:`TraceError` that names the file and the field.

``python -m sw.trace DIR`` validates a directory from the command line (:mod:`sw.trace.check`).
"""

from __future__ import annotations

import numpy as np

from sw.trace.format import TraceError

__all__ = ["TraceError", "first_mismatch"]


def first_mismatch(got, want, name: str = "y") -> str | None:
    """``None`` if equal, else a message naming the first differing element and the count."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} differs from expected {want.shape}"
    diff = np.argwhere(got != want)
    if diff.size == 0:
        return None
    idx = tuple(int(i) for i in diff[0])
    where = ", ".join(map(str, idx))
    return (f"{name}[{where}]: got {int(got[idx])}, expected {int(want[idx])} "
            f"({len(diff)} of {want.size} elements differ)")
