"""Write files and directories so that a failure never leaves half-written output.

Everything the project writes for users (traces, checkpoints, plots, tokenizer files) goes
through these two context managers: the content is written to a temporary sibling, then renamed
into place in one step; on any error the temporary is removed and an existing target is untouched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path


class OutputExistsError(FileExistsError):
    """The target exists and ``force`` was not given."""


@contextlib.contextmanager
def atomic_dir(out, *, force: bool = False, allow_empty: bool = True):
    """Yield a temporary directory that replaces ``out`` when the block succeeds.

    Refuses an existing ``out`` unless ``force`` (an existing *empty* directory is fine when
    ``allow_empty``).
    """
    out = Path(out)
    if out.exists() and not force:
        if not (allow_empty and out.is_dir() and not any(out.iterdir())):
            raise OutputExistsError(f"{out}: already exists and is not empty; pass --force to overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tmp.chmod(0o755)
        yield tmp
        for f in tmp.iterdir():
            if f.is_file():
                f.chmod(0o644)
        if out.exists():
            old = out.with_name(f".{out.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def atomic_file(path):
    """Yield a temporary file path that replaces ``path`` (mode 0644) when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o644)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
