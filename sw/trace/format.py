"""What every trace kind shares: the format name, the manifest, one error type that names the file
and the field, and the checked reading of a manifest and of one tensor. :mod:`sw.trace.store` (GEMM-tile
traces and the command line), :mod:`sw.trace.decode` and :mod:`sw.trace.full_step` build on it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

__all__ = ["FORMAT", "VERSION", "MANIFEST", "TraceError", "read_manifest", "load_tensor", "trace_kind"]

FORMAT = "fastcar-hw-trace"
VERSION = 1
MANIFEST = "manifest.json"


class TraceError(ValueError):
    """A trace directory or file that cannot be used; the message names the file and field."""


def read_manifest(d: Path, version: int | None = VERSION) -> dict:
    """The manifest of trace directory ``d``, checked for the format and (unless ``version`` is None,
    which each kind's own loader then checks) the version."""
    if not d.exists():
        raise TraceError(f"{d}: trace directory does not exist")
    if not d.is_dir():
        raise TraceError(f"{d}: not a directory")
    mpath = d / MANIFEST
    if not mpath.exists():
        raise TraceError(f"{mpath}: missing (a trace directory needs a {MANIFEST})")
    try:
        man = json.loads(mpath.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TraceError(f"{mpath}: not valid JSON ({e})") from None
    if not isinstance(man, dict):
        raise TraceError(f"{mpath}: expected a JSON object")
    if man.get("format") != FORMAT:
        raise TraceError(f"{mpath}: field 'format' is {man.get('format')!r}, expected {FORMAT!r}")
    if version is not None and man.get("version") != version:
        raise TraceError(f"{mpath}: field 'version' is {man.get('version')!r}, this code reads {version}")
    return man


def load_tensor(d: Path, man: dict, name: str, *, sha256: str | None = None) -> np.ndarray:
    """Load tensor ``name`` listed in a trace manifest; one :class:`TraceError` naming the file and
    field for a missing entry, a missing or unreadable file, or (if ``sha256`` is given) a file whose
    checksum differs."""
    mpath = d / MANIFEST
    entries = man.get("tensors")
    if not isinstance(entries, dict):
        raise TraceError(f"{mpath}: field 'tensors' missing or not an object")
    ent = entries.get(name)
    if not isinstance(ent, dict) or "file" not in ent:
        raise TraceError(f"{mpath}: field 'tensors.{name}' missing or has no 'file'")
    f = d / ent["file"]
    if not f.is_file():
        raise TraceError(f"{f}: missing (listed as tensor '{name}' in {MANIFEST})")
    if sha256 is not None and hashlib.sha256(f.read_bytes()).hexdigest() != sha256:
        raise TraceError(f"{f}: SHA-256 does not match the manifest (file changed or corrupt)")
    try:
        return np.load(f, allow_pickle=False)
    except Exception as e:  # numpy raises several types for corrupt files
        raise TraceError(f"{f}: cannot read tensor '{name}' ({type(e).__name__}: {e})") from None


def trace_kind(d) -> str:
    """The ``kind`` field of a trace directory's manifest (validated; each kind's loader checks
    its own version)."""
    return str(read_manifest(Path(d), version=None).get("kind"))
