"""Memory and disk budgets: refuse, up front and in one line, arguments the machine cannot hold.

Every user command that sizes its work from its arguments (frames, rows, groups) estimates the
memory and disk those need *before* allocating anything, and raises :class:`BudgetError` naming
the argument, the estimate, what it is made of and the limit, instead of being killed by the
kernel half-way through (and writing nothing). The estimates count the big arrays only: they are
lower bounds, so a refusal is always right, and an acceptance leaves room for the rest.

The limits are what the machine has now: ``MemAvailable`` of ``/proc/meminfo`` (or the physical
memory where that file does not exist) and the free space of the output's file system.
The environment variable ``BUDGET_MEMORY_LIMIT`` (:data:`MEMORY_LIMIT_ENV`; bytes, or a number with
``K``, ``M``, ``G``) sets a lower memory limit, for tests and shared machines.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

#: Share of the available memory an estimate may take: the rest is for the interpreter, torch,
#: the arrays the estimate does not count, and everything else running.
MEMORY_SHARE = 0.8
#: The environment variable of a lower memory limit than the machine's.
MEMORY_LIMIT_ENV = "BUDGET_MEMORY_LIMIT"


class BudgetError(ValueError):
    """Arguments whose work would not fit the machine's memory or disk."""


def parse_size(text: str) -> int:
    """``"2G"`` -> 2 * 2**30; plain numbers are bytes."""
    t = str(text).strip().upper().removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise BudgetError(f"{MEMORY_LIMIT_ENV}: not a size: {text!r}") from None


def available_memory() -> int:
    """Bytes of memory this process may plan to use (see the module docstring)."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except OSError:
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            avail = 1 << 62
    limit = os.environ.get(MEMORY_LIMIT_ENV)
    return min(avail, parse_size(limit)) if limit else avail


def free_disk(path) -> int:
    """Free bytes on the file system that ``path`` (or its nearest existing parent) is on."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def check(arg: str, memory: dict[str, int] | None = None, *, disk: dict[str, int] | None = None,
          out=None) -> None:
    """Refuse when the parts of ``memory`` (name -> bytes) exceed :data:`MEMORY_SHARE` of the
    available memory, or the parts of ``disk`` the free space at ``out``; ``arg`` names the
    argument(s) that set the size, e.g. ``"--frames 100000"``."""
    def parts(d):
        return ", ".join(f"{k} {human(v)}" for k, v in sorted(d.items(), key=lambda kv: -kv[1]))

    if memory:
        need, avail = sum(memory.values()), available_memory()
        if need > MEMORY_SHARE * avail:
            raise BudgetError(f"{arg}: needs about {human(need)} of memory ({parts(memory)}), more than "
                              f"{MEMORY_SHARE:.0%} of the {human(avail)} available; nothing was written")
    if disk and out is not None:
        need, free = sum(disk.values()), free_disk(out)
        if need > free:
            raise BudgetError(f"{arg}: writes about {human(need)} ({parts(disk)}) to {out}, which has "
                              f"{human(free)} free; nothing was written")


def decode_memory(config, *, batch: int, frames: int, prompt_len: int,
                  float_bytes: int = 8) -> dict[str, int]:
    """The big arrays of a decode of ``frames`` frames after a prompt (``config``: the
    ``ModelConfig``): the KV cache, the RoPE tables and the per-token decode statistics."""
    positions = prompt_len + frames * config.tokens_per_frame
    tokens = config.n_layers * frames * config.tokens_per_frame * batch
    kv = 2 * config.n_layers * batch * config.n_kv_heads * positions * config.head_dim
    return {"KV cache": kv * float_bytes,
            "RoPE tables": 2 * positions * config.head_dim * float_bytes,
            "decode statistics": tokens * (1 + 1 + 4)}


def decode_trace_bytes(*, groups: int, batch: int, d_model: int, n_heads: int, head_dim: int) -> int:
    """Bytes of a decode trace's per-group tensors (x, q, k_prev, y int8; tas int64; replay)."""
    return groups * (batch * (2 * d_model + 2 * n_heads * head_dim + 8 + 1) + 3 * 2)


def recorder_bytes(*, groups: int, batch: int, d_model: int, n_heads: int, head_dim: int,
                   float_bytes: int = 8) -> int:
    """What the exporter's recorder holds per group until the trace is written: the float x, q,
    k_prev and MLP output of every row."""
    return groups * batch * (2 * d_model + 2 * n_heads * head_dim) * float_bytes


def sim_memory(trace_dir, *, groups: int, batch: int, row_bytes: int, processes: int) -> dict[str, int]:
    """What the RTL regression holds for a trace selection: in each simulator process the whole
    trace (loaded from its files) and, per selected row, its packed input beat as a Python integer
    and its expected output (about ``3 * row_bytes + 200`` bytes); ``processes`` run at once."""
    files = sum(f.stat().st_size for f in Path(trace_dir).glob("*.npy"))
    return {f"{processes} simulator processes x the trace's arrays": processes * files,
            f"{processes} x the selection's packed rows": processes * groups * batch * (3 * row_bytes + 200)}


def check_decode_trace(mc, layout, out, *, batch: int, frames: int, float_bytes: int = 8) -> None:
    """Refuse (:class:`sw.BudgetError`, one line) a decode trace whose rollout or files would
    not fit this machine's memory or the disk at ``out``, before anything is allocated."""
    groups = frames * mc.tokens_per_frame * mc.n_layers
    dims = {"groups": groups, "batch": batch, "d_model": mc.d_model, "n_heads": mc.n_heads,
            "head_dim": mc.head_dim}
    trace = decode_trace_bytes(**dims)
    memory = {**decode_memory(mc, batch=batch, frames=frames, prompt_len=layout.prompt_len,
                                     float_bytes=float_bytes),
              "recorded rollout": recorder_bytes(**dims, float_bytes=float_bytes),
              "trace arrays": trace}
    check(f"--frames {frames} ({batch} rows, {groups:,} groups)", memory, disk={"trace": trace},
                 out=out)
