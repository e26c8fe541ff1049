"""Golden trace directories: writing, loading, validating, comparing.

A trace directory holds ``manifest.json`` and one ``.npy`` file per tensor (format described in
``golden/README.md``). Everything a testbench or user feeds in is validated here, so that a bad
file gives one :class:`TraceError` that names the file and the field.

Run ``python -m sw.trace DIR`` to validate a directory from the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sw.atomic import atomic_dir
from sw.config import ConfigError, TileConfig
from sw.golden import quant
from sw.trace.format import FORMAT, MANIFEST, VERSION, TraceError, load_tensor, read_manifest, trace_kind

#: tensor name -> (dtype, shape in terms of B, K, N)
GEMM_TENSORS = {
    "x": ("int8", ("B", "K")),
    "w": ("int8", ("K", "N")),
    "mult": ("uint16", ("N",)),
    "shift": ("uint8", ("N",)),
    "y": ("int8", ("B", "N")),
}


@dataclass
class GemmTrace:
    """One GEMM-tile trace: ``y = gemm_int8(x, w, mult, shift)`` on geometry ``tile``."""

    path: Path
    tile: TileConfig
    x: np.ndarray
    w: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    y: np.ndarray
    source: str = ""

    @property
    def batch(self) -> int:
        return self.x.shape[0]


def write_gemm_trace(out, tile: TileConfig, *, x, w, mult, shift, y, source: str = "",
                     force: bool = False) -> Path:
    """Write a GEMM trace directory atomically (temporary directory, then rename)."""
    out = Path(out)
    tensors = {"x": x, "w": w, "mult": mult, "shift": shift, "y": y}
    for name, (dtype, _) in GEMM_TENSORS.items():
        tensors[name] = np.ascontiguousarray(np.asarray(tensors[name]).astype(dtype, casting="unsafe"))
    _check_gemm(out, tile, tensors)
    if out.exists() and not force:
        raise TraceError(f"{out}: already exists; pass --force to overwrite")
    with atomic_dir(out, force=True) as tmp:
        manifest = {
            "format": FORMAT, "version": VERSION, "kind": "gemm_tile", "source": source,
            "tile": tile.to_dict(),
            "tensors": {n: {"file": f"{n}.npy", "dtype": str(a.dtype), "shape": list(a.shape)}
                        for n, a in tensors.items()},
        }
        for name, arr in tensors.items():
            np.save(tmp / f"{name}.npy", arr, allow_pickle=False)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def _check_gemm(where: Path, tile: TileConfig, tensors: dict):
    dims = {"B": tensors["x"].shape[0] if tensors["x"].ndim == 2 else None,
            "K": tile.k_dim, "N": tile.n_dim}
    for name, (dtype, shape) in GEMM_TENSORS.items():
        arr = tensors[name]
        f = where / f"{name}.npy"
        if str(arr.dtype) != dtype:
            raise TraceError(f"{f}: field '{name}' has dtype {arr.dtype}, expected {dtype}")
        want = tuple(dims[s] for s in shape)
        if arr.shape != want:
            pretty = ", ".join(f"{s}={dims[s]}" for s in shape)
            raise TraceError(f"{f}: field '{name}' has shape {arr.shape}, expected {want} ({pretty})")
    if dims["B"] is None or dims["B"] < 1:
        raise TraceError(f"{where / 'x.npy'}: field 'x' needs at least one row")
    if tensors["shift"].size and int(tensors["shift"].max()) > quant.SHIFT_MAX:
        raise TraceError(f"{where / 'shift.npy'}: field 'shift' has {int(tensors['shift'].max())}, "
                         f"above the spec's maximum {quant.SHIFT_MAX}")


def load_trace(d, tile: TileConfig | None = None) -> GemmTrace:
    """Load and validate a trace directory. If ``tile`` is given, the trace must match it."""
    d = Path(d)
    man = read_manifest(d)
    mpath = d / MANIFEST
    if man.get("kind") != "gemm_tile":
        raise TraceError(f"{mpath}: field 'kind' is {man.get('kind')!r}; supported: 'gemm_tile'")
    try:
        ttile = TileConfig.from_dict(man.get("tile"), source=f"{mpath}: field 'tile'")
    except ConfigError as e:
        raise TraceError(str(e)) from None
    if tile is not None and ttile != tile:
        raise TraceError(f"{mpath}: field 'tile' is {ttile.to_dict()}, but the design is built for "
                         f"{tile.to_dict()}")
    tensors = {}
    for name in GEMM_TENSORS:
        arr = load_tensor(d, man, name)
        ent = man["tensors"][name]
        f = d / ent["file"]
        if ent.get("dtype") != str(arr.dtype):
            raise TraceError(f"{f}: field '{name}' has dtype {arr.dtype}, manifest says {ent.get('dtype')}")
        if list(arr.shape) != ent.get("shape"):
            raise TraceError(f"{f}: field '{name}' has shape {list(arr.shape)}, "
                             f"manifest says {ent.get('shape')}")
        tensors[name] = arr
    _check_gemm(d, ttile, tensors)
    return GemmTrace(path=d, tile=ttile, source=str(man.get("source", "")), **tensors)


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


def check_golden(trace: GemmTrace) -> str | None:
    """Recompute ``y`` with the golden model; ``None`` if the stored ``y`` agrees."""
    model = quant.gemm_int8(trace.x, trace.w, trace.mult, trace.shift)
    msg = first_mismatch(model, trace.y, "y")
    return None if msg is None else f"{trace.path / 'y.npy'}: golden model disagrees with stored {msg}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sw.trace",
                                 description="Validate a FastCar-HW trace directory.")
    ap.add_argument("trace", type=Path, help="trace directory (holds manifest.json)")
    ap.add_argument("--sim-groups", default=None, metavar="SPEC",
                    help="also refuse a simulation of these groups ('full' or 'first:N') that would not "
                         "fit in memory with --processes simulators at once (what nox -s sim runs first)")
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 1,
                    help="simulator processes at once (default: the number of CPUs, as pytest -n auto)")
    args = ap.parse_args(argv)
    try:
        if trace_kind(args.trace) == "fastcar_full_step":
            from sw.trace.full_step import check_full_step, load_full_step

            ft = load_full_step(args.trace)
            msg = check_full_step(ft)
            summary = (f"fastcar_full_step, {ft.manifest['dims']['steps']} steps x "
                       f"{ft.manifest['dims']['layers']} layers x {ft.manifest['dims']['batch']} rows")
        elif trace_kind(args.trace) == "fastcar_decode":
            from sw.trace.decode import check_decode_trace, load_decode_trace, select_groups

            dt = load_decode_trace(args.trace)
            if args.sim_groups is not None:
                from sw import budget

                try:
                    sel = select_groups(dt, args.sim_groups)
                except ValueError as e:
                    raise TraceError(f"--groups: {e}") from None
                d = dt.dims
                row_bytes = d["d_model"] + 2 * d["n_heads"] * d["head_dim"] + 16
                budget.check(f"--groups {args.sim_groups} ({len(sel):,} groups of {args.trace})",
                             budget.sim_memory(args.trace, groups=len(sel), batch=d["batch"],
                                               row_bytes=row_bytes, processes=args.processes))
            msg = check_decode_trace(dt)
            summary = (f"fastcar_decode, {dt.dims['groups']} groups x {dt.dims['batch']} rows, "
                       f"replay ratio {dt.manifest['replay_ratio']:.3f}")
        else:
            tr = load_trace(args.trace)
            msg = check_golden(tr)
            summary = f"gemm_tile {tr.tile.to_dict()}, {tr.batch} rows"
    except (TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if msg:
        print(f"error: {msg}", file=sys.stderr)
        return 1
    print(f"{args.trace}: ok, {summary}")
    return 0


if __name__ == "__main__":
    # Run the imported module's main: as __main__ this file's TraceError would be a second class,
    # and errors raised by sw.trace.decode (which imports sw.trace.store) would escape as tracebacks.
    from sw.trace.store import main as _main

    sys.exit(_main())
