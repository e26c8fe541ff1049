"""Content-addressed cache of values that are slow to compute and the same in every run.

The accelerator's configuration stream (about 20,000 words for the shipped model) is packed through
Amaranth's layouts, which takes seconds; every simulation of the same weights in the same mode needs
the same words. They are stored once under ``build/tb/cache/``, named by a hash of everything they
are computed from, and written atomically so that parallel pytest workers can share the directory.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from sw.atomic import atomic_file

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / "build" / "tb" / "cache"

__all__ = ["content_key", "cached_config_words", "cached_array"]


def content_key(*parts) -> str:
    """SHA-256 of ``parts``: numpy arrays by dtype, shape and bytes, dicts by sorted key, anything
    else by ``repr``."""
    h = hashlib.sha256()

    def add(p):
        if isinstance(p, np.ndarray):
            h.update(f"nd {p.dtype.str} {p.shape}".encode())
            h.update(np.ascontiguousarray(p).tobytes())
        elif isinstance(p, dict):
            h.update(b"{")
            for k in sorted(p):
                add(k)
                add(p[k])
            h.update(b"}")
        elif isinstance(p, (list, tuple)):
            h.update(b"[")
            for v in p:
                add(v)
            h.update(b"]")
        else:
            h.update(repr(p).encode())
        h.update(b";")

    for p in parts:
        add(p)
    return h.hexdigest()


def cached_config_words(cfg, layers: list[dict], *, cache_dir: Path = CACHE, **kwargs) -> list[int]:
    """:func:`hw.board.host.config_words` of ``cfg`` and ``layers`` (and ``kwargs``), from the cache when the
    same inputs were packed before. The key also covers the gateware's sources, which define the
    word layout."""
    from hw.board.host import config_words
    from tb.runner import design_key

    key = content_key(cfg.to_dict(), [{k: np.asarray(v) for k, v in ly.items()} for ly in layers], kwargs,
                      design_key())[:24]
    path = Path(cache_dir) / f"config-words-{key}.json"
    if path.exists():
        try:
            return [int(w, 16) for w in json.loads(path.read_text())]
        except (ValueError, TypeError):
            pass   # a damaged cache file is recomputed and replaced
    words = config_words(cfg, layers, **kwargs)
    with atomic_file(path) as tmp:
        Path(tmp).write_text(json.dumps([format(w, "x") for w in words]))
    return words


def cached_array(name: str, parts, compute, *, cache_dir: Path = CACHE) -> np.ndarray:
    """``compute()`` (a numpy array), stored under ``name`` and the content hash of ``parts``."""
    path = Path(cache_dir) / f"{name}-{content_key(*parts)[:24]}.npy"
    if path.exists():
        try:
            return np.load(path)
        except (ValueError, OSError):
            pass   # a damaged cache file is recomputed and replaced
    value = np.asarray(compute())
    with atomic_file(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, value)
    return value
