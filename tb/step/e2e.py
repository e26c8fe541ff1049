"""``nox -s step -- --e2e [--e2e-mode MODE] [--chunk 32] [--jobs 2 | --scheduler ADDRESS] [--hours H]``:
a whole video's RTL cycles and SDRAM bytes in each mode (dense, sparse attention, FastCar, both, and
the default operating point, ``default``), measured in chunks of steps that run side by side and can
be spread over several sittings.

Measured chunks are committed under ``golden/e2e/<mode>/`` (``--save`` copies every measured chunk
there, so that a video measured over several sittings keeps what each one measured), so that
``--report-only`` rebuilds the table on a fresh clone; a chunk in ``--out`` is used before a committed
one. Each chunk names the SHA-256 of the trace's ``manifest.json`` it ran on, and a chunk of another
trace (another model or operating point) is refused by name. ``--spot N``
measures N committed chunks again, picked at random (``--spot-seed``), and compares them cycle for
cycle and byte for byte; it exits 1 on any difference. ``report.json``'s ``default_speedup`` is the
default operating point's whole video against dense's, the best dense design.

Every chunk's result is kept under ``build/step/e2e/<mode>/`` (one JSON file per chunk, written whole
or not at all); a rerun measures only the chunks still missing, and ``--hours`` stops starting new
chunks after that long. The chunks are jobs of :mod:`sw.jobs`, started the longest first: ``--jobs``
processes on this machine, or the workers of a running Dask scheduler (``--scheduler
tcp://HOST:PORT``; workers started in a checkout at the same path, with the traces exported). Each
simulation runs in a build directory that no other running one uses: ``--build-tag`` and the
worker's name (``cal``, ``cal1``, ... on this machine). When every chunk of a mode is there,
``report.json`` and ``report.md`` get that mode's whole video: the sum of the steps' cycles and
bytes, beside the fitted cycle model (:mod:`sw.perf.rtl_step`) over the same steps, and its speed-up
against dense; ``cycles.png`` plots every measured step.

A chunk that measures steps ``[A, A + n)`` runs steps ``A - 1`` to ``A + n`` and keeps the middle
``n``: a run's first step starts from an idle pipeline and its last one prefetches nothing for a next
one. The steps between are the same, to the cycle and the byte, as the same steps of one run from
step 0 (dense at 2.8 bytes a cycle: steps 41-48 of a run from step 40 against the first 85 steps).
The first chunk starts at step 0 and the last one ends at the video's last step, as the whole run does.
A chunk of FastCar's modes starts with the replay cache a run from step 0 would have: the testbench
writes it from the trace into the cache's block RAMs before the run (the bench config's ``preload``,
through the memories the step's builds make public), since the cache is on chip and holds the frame
before.
"""

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

from sw.config import BenchConfig

REPO = Path(__file__).resolve().parents[2]
CHUNKED_MODES = ("dense", "sparse", "fastcar", "fastcar+sparse", "default")
#: Measured chunks kept with the repository: ``COMMITTED / mode / NNNN.json``.
COMMITTED = REPO / "golden" / "e2e"


def trace_sha(trace: Path) -> str:
    """SHA-256 of a full-step trace's ``manifest.json`` (it holds every tensor's own SHA-256)."""
    import hashlib

    return hashlib.sha256((Path(trace) / "manifest.json").read_bytes()).hexdigest()


class Chunk(NamedTuple):
    """Steps ``a`` to ``a + n - 1`` of the ``S`` steps of ``mode``'s video."""

    mode: str
    S: int
    a: int
    n: int


@dataclass(frozen=True)
class ChunkJob:
    """One chunk to measure, as a job of :mod:`sw.jobs`: the chunk, the full-step trace it runs on and
    that trace's :func:`trace_sha` (which the chunk's file records)."""

    mode: str
    S: int
    a: int
    n: int
    trace: str
    sha: str


def chunks(S: int, n: int) -> list[tuple[int, int]]:
    """The chunks ``(A, n)`` that cover steps ``0 .. S - 1``, ``n`` steps each (the last one shorter)."""
    if S < 1 or n < 1:
        raise ValueError(f"{S} steps in chunks of {n}")
    return [(a, min(n, S - a)) for a in range(0, S, n)]


def run_spec(a: int, n: int, S: int) -> tuple[str, int, int]:
    """The ``steps`` of the run that measures chunk ``(a, n)`` of ``S`` steps, and the index range of
    the run's steps that the chunk keeps: one step before it (unless it starts the video) and one after
    (unless it ends it)."""
    lo, hi = max(a - 1, 0), min(a + n + 1, S)
    return f"from:{lo}:{hi - lo}", a - lo, a - lo + n


def longest_first(todo: list[Chunk]) -> list[Chunk]:
    """The chunks in order of the fitted cycle model's cycles, the most first (the jobs share one
    queue, so that the last chunks to finish are short ones)."""
    from sw.perf import rtl_step
    from sw.trace.full_step import load_full_step
    from tb.step.calibrate import trace_dir

    coef, cost, traces = rtl_step.CALIBRATED["coefficients"], {}, {}
    for c in todo:
        if c.mode not in traces:
            tr = load_full_step(trace_dir(c.mode), verify=False)
            traces[c.mode] = (tr.manifest, tr.t["replay"])
        x = rtl_step.features(*traces[c.mode], list(range(c.a, c.a + c.n)))
        cost[(c.mode, c.a)] = float(rtl_step.predict(x, coef).sum())
    return sorted(todo, key=lambda c: -cost[(c.mode, c.a)])


def chunk_file(out: Path, mode: str, a: int) -> Path:
    return out / mode / f"{a:04d}.json"


def simulate_chunk(job: ChunkJob, bench: BenchConfig, variant: str) -> dict:
    """The RTL's record (the whole step's ``out``) of the chunk ``job``'s run, configured by ``bench``
    (its ``steps``: :func:`run_spec`; ``sdram`` and ``preload``), on the build directory ``variant``."""
    import tempfile

    from tb.step.runner import run_decode_step

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "rtl.json"
        run_decode_step(Path(job.trace), "verilator", f"e2e-{job.mode}-{job.a}", taps=False, variant=variant,
                        bench=replace(bench, out=raw))
        return json.loads(raw.read_text())


def build_variant(build_tag: str, slot: str) -> str:
    """The build directory of the job in ``slot`` (:func:`sw.jobs.worker_slot`): ``TAG`` for the first
    worker (``0``), ``TAG1``, ``TAG2``, ... for the next."""
    return build_tag + ("" if slot == "0" else slot)


def measure_chunk(chunk: ChunkJob, *, sdram: float, build_tag: str, simulate=None) -> dict:
    """One chunk's result, the content of its chunk file; ``simulate`` :func:`simulate_chunk` or a
    stand-in with its arguments. It runs on a build directory that no other chunk running at the same
    time uses (:func:`build_variant`)."""
    from sw.jobs import worker_slot

    mode, S, a, n = chunk.mode, chunk.S, chunk.a, chunk.n
    spec, i, j = run_spec(a, n, S)
    t0 = time.monotonic()
    bench = BenchConfig(steps=spec, sdram=sdram, preload=mode.startswith("fastcar") and a > 0)
    with worker_slot() as slot:
        rtl = (simulate or simulate_chunk)(chunk, bench, build_variant(build_tag, slot))
    keep = {"mode": mode, "trace_sha256": chunk.sha,
            "steps": rtl["steps"][i:j], "cycles": rtl["cycles"][i:j],
            "step_bytes": rtl["step_bytes"][i:j], "run": spec, "sdram_bytes_per_cycle": sdram,
            "data_width": rtl["data_width"], "mv": rtl["mv"],
            "seconds": round(time.monotonic() - t0, 1)}
    if keep["steps"] != list(range(a, a + n)):
        raise RuntimeError(f"{mode} run {spec}: the RTL ran steps {rtl['steps']}, not {a}..{a + n - 1} and "
                           "one either side")
    return keep


def measure(todo, *, sdram: float, out: Path, build_tag: str, jobs: int, scheduler: str | None = None,
            deadline: float | None = None) -> dict:
    """Measure the chunks of ``todo`` (:class:`Chunk`), started in that order, each into its chunk
    file (:func:`chunk_file`, written whole as it finishes), ``jobs`` at a time on this machine or on
    the workers of the Dask scheduler at ``scheduler`` (:mod:`sw.jobs`); no chunk starts after
    ``deadline`` (``time.time()``). Returns the results by ``MODE/NNNN``."""
    import functools

    from tqdm import tqdm

    from sw.jobs import run_jobs, store_path
    from tb.step.calibrate import trace_dir

    todo = [Chunk(*c) for c in todo]
    shas = {mode: trace_sha(trace_dir(mode)) for mode in dict.fromkeys(c.mode for c in todo)}
    work = {}
    for c in todo:
        key = f"{c.mode}/{c.a:04d}"
        assert store_path(out, key, "json") == chunk_file(out, c.mode, c.a)
        work[key] = ChunkJob(*c, trace=str(trace_dir(c.mode)), sha=shas[c.mode])

    def show(key, keep):
        steps = keep["steps"]
        tqdm.write(f"{keep['mode']} steps {steps[0]}-{steps[-1]}: {sum(keep['cycles']):,} cycles, "
                   f"{keep['seconds']:.0f} s", file=sys.stderr)

    fn = functools.partial(measure_chunk, sdram=sdram, build_tag=build_tag, simulate=simulate_chunk)
    return run_jobs(fn, work, scheduler=scheduler, workers=jobs, store=out, store_format="json",
                    desc="chunks", deadline=deadline, on_result=show)


def load_chunk(path: Path, mode: str, a: int, n: int, sdram: float, sha: str | None = None) -> dict | None:
    """A chunk file's result, or ``None`` when it is missing; one naming the file and field when it
    does not belong to this measurement (``sha``: the trace's :func:`trace_sha`, checked when the
    chunk names one)."""
    if not path.exists():
        return None
    try:
        c = json.loads(path.read_text())
    except ValueError as e:
        raise SystemExit(f"{path}: not JSON ({e}); remove it to measure the chunk again") from None
    for field, want in (("mode", mode), ("steps", list(range(a, a + n))), ("sdram_bytes_per_cycle", sdram)):
        if c.get(field) != want:
            raise SystemExit(f"{path}: {field} is {c.get(field)!r}, expected {want!r} (another chunk size or "
                             f"bandwidth: remove build/step/e2e/{mode} or pass the same --chunk and --sdram)")
    for field in ("cycles", "step_bytes"):
        if len(c.get(field, [])) != n:
            raise SystemExit(f"{path}: {field} has {len(c.get(field, []))} steps, expected {n}")
    if sha is not None and c.get("trace_sha256", sha) != sha:
        raise SystemExit(f"{path}: trace_sha256 is {c['trace_sha256'][:12]}..., but the {mode} trace is "
                         f"{sha[:12]}... (another model or operating point): measure the chunk again")
    return c


def find_chunk(out: Path, mode: str, a: int, n: int, sdram: float, sha: str | None = None) -> dict | None:
    """The chunk from ``out``, else the committed one (:data:`COMMITTED`), else ``None``."""
    for root in (out, COMMITTED):
        c = load_chunk(chunk_file(root, mode, a), mode, a, n, sdram, sha)
        if c is not None:
            return c
    return None


def report(out: Path, modes, n: int, sdram: float) -> dict:
    """Each mode's measured chunks so far, and its whole video once every chunk is there."""
    import numpy as np

    from sw.perf import rtl_step
    from sw.trace.full_step import load_full_step
    from tb.step.calibrate import trace_dir

    rep = {"command": "nox -s step -- --e2e", "sdram_bytes_per_cycle": sdram, "chunk": n, "modes": {}}
    series = {}
    coef = rtl_step.CALIBRATED["coefficients"]
    for mode in modes:
        if not ((out / mode).is_dir() or (COMMITTED / mode).is_dir()) or \
                not (trace_dir(mode) / "manifest.json").exists():
            continue                                    # nothing measured in this mode yet
        tr = load_full_step(trace_dir(mode), verify=False)
        S = tr.manifest["dims"]["steps"]
        sha = trace_sha(trace_dir(mode))
        parts = [find_chunk(out, mode, a, m, sdram, sha) for a, m in chunks(S, n)]
        have = [c for c in parts if c]
        steps = [s for c in have for s in c["steps"]]
        cycles = np.asarray([x for c in have for x in c["cycles"]], np.float64)
        moved = np.asarray([x for c in have for x in c["step_bytes"]], np.int64).reshape(-1, 2)
        row = {"chunks": f"{len(have)}/{len(parts)}", "steps_measured": len(steps),
               "rtl_cycles": int(cycles.sum()), "read_bytes": int(moved[:, 0].sum()),
               "write_bytes": int(moved[:, 1].sum()),
               "simulation_seconds": round(sum(c["seconds"] for c in have))}
        if steps:
            model = rtl_step.predict(rtl_step.features(tr.manifest, tr.t["replay"], steps), coef)
            exact = rtl_step.step_bytes(tr.manifest, steps, have[0]["data_width"], tuple(have[0]["mv"]))
            row.update(model_cycles=round(float(model.sum())),
                       model_error=float(model.sum() / cycles.sum() - 1),
                       max_step_error=float(np.abs(model / cycles - 1).max()),
                       # every step's error but the video's first (the pipeline's fill), and the last's
                       max_step_error_after_first=float(
                           np.abs((model / cycles - 1)[np.asarray(steps) > 0]).max()),
                       last_step_error=float(model[-1] / cycles[-1] - 1),
                       # A burst counts in the step that issues it (a step's first reads are
                       # prefetched in the step before); the sums, and each step below.
                       formula_read_bytes=int(exact[:, 0].sum()), formula_write_bytes=int(exact[:, 1].sum()))
            # Per step, read and written: a kept step's bursts are the same step's of one run from
            # step 0; the prefetch moves some across a step's end where the next step's first reads
            # change (the prompt's first steps, its last, the video's last).
            moved_sum, exact_sum = moved.sum(1), exact[:, :2].sum(1)
            per = np.abs(moved_sum / exact_sum - 1)
            row.update(max_step_bytes_error=float(per.max()),
                       max_step_bytes_error_step=steps[int(per.argmax())],
                       steps_bytes_exact=int((moved_sum == exact_sum).sum()))
        row["whole_video"] = len(have) == len(parts)
        rep["modes"][mode] = row
        if steps:
            series[mode] = (steps, cycles, model)
    m = rep["modes"]
    if m.get("dense", {}).get("whole_video"):
        rep["speedup_over_dense"] = {k: m["dense"]["rtl_cycles"] / r["rtl_cycles"]
                                     for k, r in m.items() if r["whole_video"]}
        # Dense on the step as built is the best dense design (python -m sw.perf.system_model).
        if m.get("default", {}).get("whole_video"):
            rep["default_speedup"] = rep["speedup_over_dense"]["default"]
    return rep, series


def markdown(rep: dict) -> str:
    """``report.md``: one row per mode measured."""
    sp = rep.get("speedup_over_dense", {})
    lines = [f"# The whole video in RTL, measured in chunks (`{rep['command']}`)", "",
             f"Memory at {rep['sdram_bytes_per_cycle']} bytes a cycle, chunks of {rep['chunk']} steps. "
             "A mode's totals are its whole video only when every chunk is in.", "",
             "| mode | chunks | RTL cycles | cycle model | largest step error | bytes read (formula) | "
             "bytes written (formula) | steps' bytes equal to the formula (largest error) | "
             "speed-up against dense | simulation |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, r in rep["modes"].items():
        if not r["steps_measured"]:
            continue
        speedup = f"{sp[mode]:.2f}x" if mode in sp else "not whole yet"
        lines.append(
            f"| {mode} | {r['chunks']} | {r['rtl_cycles']:,} | {r['model_cycles']:,} "
            f"({r['model_error']:+.3%}) | {r['max_step_error']:.1%} | "
            f"{r['read_bytes']:,} ({r['formula_read_bytes']:,}) | "
            f"{r['write_bytes']:,} ({r['formula_write_bytes']:,}) | "
            f"{r.get('steps_bytes_exact', '-')} of {r['steps_measured']} "
            f"({r.get('max_step_bytes_error', float('nan')):.1%} at step "
            f"{r.get('max_step_bytes_error_step', '-')}) | "
            f"{speedup} | {r['simulation_seconds'] / 60:.0f} min |")
    return "\n".join(lines) + "\n"


def plot(series: dict, path: Path) -> None:
    """Each measured step's RTL cycles (dots) and the fitted model's (line), per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for mode, (steps, cycles, model) in series.items():
        dots = ax.plot(steps, cycles, ".", ms=2.5, label=f"{mode}, RTL")[0]
        ax.plot(steps, model, "-", lw=0.8, color=dots.get_color(), alpha=0.7, label=f"{mode}, cycle model")
    ax.set_xlabel("decode step")
    ax.set_ylabel("cycles")
    ax.set_title("A whole video's decode steps in RTL (nox -s step -- --e2e)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)


def save(out: Path, rep: dict, n: int, sdram: float) -> None:
    """Copy every measured chunk from ``out`` to :data:`COMMITTED`, whole videos and parts of one
    alike: each chunk stands alone (its steps, the trace's SHA-256, the memory's bandwidth), so a video
    measured over several machines or sittings is kept as it goes, and a rerun on a fresh clone
    measures only the chunks still missing. A chunk already committed with other cycles or bytes is
    refused (measure it with ``--spot`` to see which is right)."""
    import shutil

    for mode, row in rep["modes"].items():
        if not (out / mode).is_dir():
            continue
        new = 0
        for path in sorted((out / mode).glob("[0-9]*.json")):
            c = json.loads(path.read_text())
            load_chunk(path, mode, c["steps"][0], len(c["steps"]), sdram)     # refuses a foreign chunk
            dst = COMMITTED / mode / path.name
            if dst.exists():
                old = json.loads(dst.read_text())
                if first_difference(old, c) is not None:
                    raise SystemExit(f"{dst}: committed with other cycles or bytes than {path}")
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dst)
            new += 1
        print(f"saved {new} new chunks of {mode} to {COMMITTED / mode} ({row['chunks']} of the video "
              "measured)", file=sys.stderr)


def first_difference(old: dict, new: dict) -> int | None:
    """The first step whose cycles or bytes differ between two measurements of a chunk, or ``None``."""
    if old["steps"] != new["steps"]:
        raise ValueError(f"steps {old['steps'][0]}.. against {new['steps'][0]}..: not the same chunk")
    pairs = zip(old["steps"], old["cycles"], new["cycles"], old["step_bytes"], new["step_bytes"], strict=True)
    return next((s for s, x, y, bx, by in pairs if x != y or bx != by), None)


def spot(args, modes, out: Path) -> int:
    """``--spot N``: measure N committed chunks again (random, ``--spot-seed``) in a scratch
    directory and compare each step's cycles and bytes with the committed ones."""
    import random
    import tempfile

    from sw.trace.full_step import load_full_step
    from tb.step.calibrate import trace_dir

    pool = []
    for mode in modes:
        if not (COMMITTED / mode).is_dir():
            continue
        S = load_full_step(trace_dir(mode), verify=False).manifest["dims"]["steps"]
        sha = trace_sha(trace_dir(mode))
        pool += [Chunk(mode, S, a, n) for a, n in chunks(S, args.chunk)
                 if load_chunk(chunk_file(COMMITTED, mode, a), mode, a, n, args.sdram, sha) is not None]
    if len(pool) < args.spot:
        raise SystemExit(f"--spot {args.spot}: only {len(pool)} committed chunks in {COMMITTED}")
    seed = args.spot_seed if args.spot_seed is not None else random.SystemRandom().randrange(2 ** 32)
    picked = random.Random(seed).sample(pool, args.spot)
    print(f"--spot {args.spot} (--spot-seed {seed}): " + ", ".join(f"{m} steps {a}-{a + n - 1}"
                                                                   for m, _, a, n in picked), file=sys.stderr)
    bad = 0
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.is_dir() else None) as tmp:
        measure(picked, sdram=args.sdram, out=Path(tmp), build_tag=args.build_tag,
                jobs=min(args.jobs, len(picked)), scheduler=args.scheduler)
        for mode, _, a, n in picked:
            old = json.loads(chunk_file(COMMITTED, mode, a).read_text())
            new = json.loads(chunk_file(Path(tmp), mode, a).read_text())
            first = first_difference(old, new)
            bad += first is not None
            print(f"{mode} steps {a}-{a + n - 1}: committed {sum(old['cycles']):,} cycles, measured "
                  f"{sum(new['cycles']):,}: " + ("identical" if first is None else f"DIFFERENT from step {first}"))
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tb.step.e2e", description=__doc__.split("\n\n")[0])
    ap.add_argument("--e2e-mode", dest="modes", action="append", choices=CHUNKED_MODES,
                    help="mode (repeatable; default: all four)")
    ap.add_argument("--chunk", type=int, default=32, help="steps a chunk measures (default 32)")
    ap.add_argument("--sdram", type=float, default=2.8, help="bytes a cycle of the memory (default 2.8)")
    ap.add_argument("--jobs", type=int, default=2, help="simulations side by side (default 2)")
    ap.add_argument("--scheduler", metavar="ADDRESS", default=None,
                    help="run the chunks on the workers of the Dask scheduler at ADDRESS (tcp://HOST:PORT) "
                         "instead of --jobs processes here")
    ap.add_argument("--hours", type=float, default=None, help="start no chunk after this many hours")
    ap.add_argument("--range", default=None, metavar="A:B",
                    help="measure only the chunks that start in steps A to B - 1")
    ap.add_argument("--build-tag", default="cal",
                    help="the jobs' build directories: TAG, TAG1, ... (default cal: the calibration's), one "
                         "per worker (a worker's name after TAG on a scheduler's workers)")
    ap.add_argument("--report-only", action="store_true", help="measure nothing; report the chunks there")
    ap.add_argument("--save", action="store_true",
                    help=f"copy every measured chunk to {COMMITTED.relative_to(REPO)} (to commit them)")
    ap.add_argument("--spot", type=int, default=0, metavar="N",
                    help="measure N committed chunks again, at random, and compare them cycle for cycle")
    ap.add_argument("--spot-seed", type=int, default=None, help="the --spot draw's seed (default: random)")
    ap.add_argument("--out", type=Path, default=REPO / "build" / "step" / "e2e")
    args = ap.parse_args(argv)
    modes = args.modes or list(CHUNKED_MODES)
    out = args.out.resolve()
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}: at least 1")

    from sw.atomic import atomic_file
    from sw.jobs import SchedulerError
    from sw.trace.export import main as export_main
    from sw.trace.full_step import load_full_step
    from tb.step.calibrate import trace_dir
    from tb.step.modes import STEP_MODES

    lo, hi = 0, float("inf")
    if args.range:
        try:
            lo, hi = (int(x) for x in args.range.split(":"))
        except ValueError:
            ap.error(f"--range {args.range}: expected A:B")
    todo = []
    for mode in modes:
        if not (trace_dir(mode) / "manifest.json").exists() and \
                export_main(["--full-step", "--out", str(trace_dir(mode)), "--force", *STEP_MODES[mode]]):
            raise SystemExit(f"the {mode} trace export failed")
        S = load_full_step(trace_dir(mode), verify=False).manifest["dims"]["steps"]
        sha = trace_sha(trace_dir(mode))
        todo += [Chunk(mode, S, a, n) for a, n in chunks(S, args.chunk)
                 if lo <= a < hi and find_chunk(out, mode, a, n, args.sdram, sha) is None]
    if args.spot:
        try:
            return spot(args, modes, out)
        except SchedulerError as e:
            raise SystemExit(f"error: {e}") from None
    if todo and not args.report_only:
        print(f"{len(todo)} chunks to measure", file=sys.stderr)
        deadline = time.time() + args.hours * 3600 if args.hours else None
        try:
            measure(longest_first(todo), sdram=args.sdram, out=out, build_tag=args.build_tag, jobs=args.jobs,
                    scheduler=args.scheduler, deadline=deadline)
        except SchedulerError as e:
            raise SystemExit(f"error: {e}") from None
    rep, series = report(out, CHUNKED_MODES, args.chunk, args.sdram)
    if args.save:
        save(out, rep, args.chunk, args.sdram)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_file(out / "report.json") as f:
        Path(f).write_text(json.dumps(rep, indent=1) + "\n")
    with atomic_file(out / "report.md") as f:
        Path(f).write_text(markdown(rep))
    if series:
        with atomic_file(out / "cycles.png") as f:
            plot(series, Path(f))
    print(json.dumps(rep, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
