"""Reading a JSON file with one clear error: the one definition for configs, reports and indexes."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["read_json"]


def read_json(path, error: type[Exception] = ValueError, what: str = "JSON", *, obj: bool = True):
    """The JSON in ``path``; ``error`` (one line naming the file) if it is missing, not JSON, or,
    with ``obj``, not a JSON object."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise error(f"{path}: no such {what} file") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}: not valid JSON ({e})") from None
    if obj and not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object, not {type(data).__name__}")
    return data
