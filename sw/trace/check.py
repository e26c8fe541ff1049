"""``python -m sw.trace DIR``: validate a trace directory, decode or full-step, against the golden
model (:func:`main`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sw.trace.format import TraceError, trace_kind


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
            raise TraceError(f"{args.trace / 'manifest.json'}: field 'kind' is {trace_kind(args.trace)!r}; "
                             f"supported: 'fastcar_decode', 'fastcar_full_step'")
    except (TraceError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if msg:
        print(f"error: {msg}", file=sys.stderr)
        return 1
    print(f"{args.trace}: ok, {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
