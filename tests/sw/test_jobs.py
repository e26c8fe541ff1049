"""The job runner (``sw/jobs.py``) on a Dask scheduler of two worker processes on the loopback address:
the same results as a serial run, a store that resumes a stopped run, a failing job named by its key;
and the frontier, the whole-video RTL chunks and the mutants through it."""

import functools
import json
import os
import pickle
import socket
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from sw import jobs
from sw.jobs import JobError, SchedulerError, StoreError, run_jobs

# The tests share one cluster: on one pytest-xdist worker.
pytestmark = pytest.mark.xdist_group("dask")

#: Times this process ran :func:`_init` (the job runner runs it once per process).
_INITS = 0


@pytest.fixture(scope="module")
def scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                      processes=True) as cluster:
        yield cluster.scheduler_address


def _init():
    global _INITS
    _INITS += 1


def _work(job):
    """A job: a sum of random numbers (its value depends on the order of the additions); it leaves a
    file naming its key, its process and the inits that process ran in ``job["calls"]``."""
    if job.get("calls"):
        Path(job["calls"], f"{job['key']}.{os.getpid()}.{_INITS}.{uuid.uuid4().hex}").touch()
    time.sleep(job.get("sleep", 0.0))
    if job.get("fail"):
        raise ValueError(f"planted failure in {job['key']}")
    x = np.random.default_rng(job["i"]).standard_normal(1000)
    total = 0.0
    for v in x:
        total += float(v)
    if job.get("wrong") and os.getpid() != job["client"]:
        total += 1e-12                       # planted: a worker's result differs from a serial run's
    return {"i": job["i"], "sum": total, "max": float(x.max())}


def _jobs(n, calls=None, **extra):
    return {f"j{i:02d}": {"key": f"j{i:02d}", "i": i, "calls": str(calls) if calls else None, **extra}
            for i in range(n)}


def _calls(calls: Path) -> dict:
    """Per key, the ``(pid, inits)`` of every call that left a file."""
    out = {}
    for f in calls.iterdir():
        key, pid, inits, _ = f.name.split(".")
        out.setdefault(key, []).append((int(pid), int(inits)))
    return out


def differences(got: dict, want: dict) -> list[str]:
    """The keys whose results differ, or are missing or extra, or out of order."""
    bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    return bad or ([] if list(got) == list(want) else ["(order)"])


def test_a_run_through_a_scheduler_equals_a_serial_run(scheduler, tmp_path):
    """The results by key, in the jobs' order though the first finishes last, computed in the
    workers' processes (each ran the worker init once), equal to a serial run's."""
    calls = tmp_path / "calls"
    calls.mkdir()
    work = _jobs(8, calls)
    work["j00"]["sleep"] = 1.0
    got = run_jobs(_work, work, scheduler=scheduler, progress=False, worker_init=_init)
    ran = _calls(calls)
    want = run_jobs(_work, _jobs(8), workers=1, progress=False)
    assert differences(got, want) == [] and list(got) == list(work)
    assert sorted(ran) == sorted(work) and all(len(v) == 1 for v in ran.values())
    pids = {pid for v in ran.values() for pid, _ in v}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert {inits for v in ran.values() for _, inits in v} == {1}


def test_a_planted_wrong_result_is_seen(scheduler):
    """The comparison above fails when a worker's result differs from the serial run's by 1e-12."""
    work = _jobs(6, client=os.getpid())
    work["j03"]["wrong"] = True
    got = run_jobs(_work, work, scheduler=scheduler, progress=False)
    want = run_jobs(_work, work, workers=1, progress=False)
    assert differences(got, want) == ["j03"]
    assert differences(dict(reversed(want.items())), want) == ["(order)"]


def test_a_stopped_run_resumes_from_its_store(scheduler, tmp_path):
    """A run over a store that holds some keys runs only the others, and returns every result; each
    result is its store file's content; nothing else is left in the store."""
    calls, store = tmp_path / "calls", tmp_path / "store"
    calls.mkdir()
    work = _jobs(7, calls)
    first = run_jobs(_work, dict(list(work.items())[:3]), scheduler=scheduler, store=store, progress=False)
    assert list(first) == ["j00", "j01", "j02"]
    got = run_jobs(_work, work, scheduler=scheduler, store=store, progress=False)
    assert {k: len(v) for k, v in _calls(calls).items()} == dict.fromkeys(work, 1)
    assert differences(got, run_jobs(_work, _jobs(7), workers=1, progress=False)) == []
    assert sorted(p.name for p in store.iterdir()) == [f"{k}.pkl" for k in work]
    for k, r in got.items():
        assert pickle.loads((store / f"{k}.pkl").read_bytes()) == r
    # A result in the store is taken as it is, not run again.
    (store / "j04.pkl").write_bytes(pickle.dumps("planted"))
    assert run_jobs(_work, work, scheduler=scheduler, store=store, progress=False)["j04"] == "planted"
    assert len(list(calls.iterdir())) == len(work)
    (store / "j05.pkl").write_bytes(b"not a pickle")
    with pytest.raises(StoreError, match=r"j05\.pkl: cannot read a stored result.*remove it"):
        run_jobs(_work, work, workers=1, store=store, progress=False)


def test_a_json_store_writes_one_file_per_key_under_its_folders(tmp_path):
    got = run_jobs(_work, {"a/0001": {"i": 1}, "b+c/0002": {"i": 2}}, workers=1, store=tmp_path,
                   store_format="json", progress=False)
    assert (tmp_path / "a" / "0001.json").read_text() == json.dumps(got["a/0001"]) + "\n"
    assert json.loads((tmp_path / "b+c" / "0002.json").read_text()) == got["b+c/0002"]
    for key in ("", "../x", "a//b", "/abs", "a/./b"):
        with pytest.raises(StoreError, match="cannot name a file"):
            run_jobs(_work, {key: {"i": 0}}, workers=1, store=tmp_path, progress=False)


@pytest.mark.parametrize("where", ["scheduler", "serial"])
def test_a_failing_job_is_named_and_the_others_stay_stored(scheduler, tmp_path, where):
    """The failing job's key and exception in one error; every job started before it is stored; a
    rerun without the fault runs only what is not stored."""
    calls, store = tmp_path / "calls", tmp_path / "store"
    calls.mkdir()
    work = _jobs(8, calls)
    work["j05"]["fail"] = True
    kw = {"scheduler": scheduler} if where == "scheduler" else {"workers": 1}
    with pytest.raises(JobError, match=r"^job 'j05' failed: ValueError: planted failure in j05$") as e:
        run_jobs(_work, work, store=store, progress=False, **kw)
    assert e.value.key == "j05" and isinstance(e.value.__cause__, ValueError)
    stored = {p.stem for p in store.iterdir()}
    assert {"j00", "j01", "j02", "j03", "j04"} <= stored and "j05" not in stored   # after: if started
    del work["j05"]["fail"]
    run_jobs(_work, work, store=store, progress=False, **kw)
    ran = {k: len(v) for k, v in _calls(calls).items()}
    assert ran == {k: 1 if k in stored else 2 if k == "j05" else 1 for k in work}


def test_an_unreachable_scheduler_is_named_in_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{s.getsockname()[1]}"         # nothing listens there once closed
    for bad in (address, "nonsense"):
        with pytest.raises(SchedulerError, match=f"cannot reach the Dask scheduler at {bad}: ") as e:
            run_jobs(_work, _jobs(1), scheduler=bad, connect_timeout=1, progress=False)
        assert "\n" not in str(e.value)


def test_worker_slots_are_unique_among_running_jobs():
    """Jobs that run at the same time in one process get names of their own; a finished job's name
    is free again."""
    barrier, names = threading.Barrier(3), []

    def job():
        with jobs.worker_slot() as name:
            barrier.wait()
            names.append(name)
            barrier.wait()

    threads = [threading.Thread(target=job) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(names) == ["0", "0-1", "0-2"]
    with jobs.worker_slot() as name:
        assert name == "0"


def test_the_job_runner_imports_nothing_of_the_project_but_atomic():
    from tests.test_layout import import_graph, modules

    assert import_graph(modules())["sw.jobs"] <= {"sw.atomic"}


# --------------------------------------------------------------------------------------------------
# Its users


def test_the_frontier_through_a_scheduler_gives_the_same_entries(scheduler, monkeypatch):
    """The documented contract's run (2 settings x 4 prompts, float path) on the scheduler's workers
    and here: the same frontier, entry for entry."""
    from sw.evidence import frontier
    from sw.model import data

    settings = [frontier.Setting("dense", "dense", None, paths=("float",)),
                frontier.Setting("sparse tas -4", "shipped", "logit", -4.0, sparse=(5, 65), paths=("float",))]
    prompts = [*data.DEFAULT_PROMPTS[:2], *data.heldout_prompts()[:2]]
    monkeypatch.setattr(frontier, "BUDGET_POINTS", 100.0)
    kw = dict(paths=("float",), prompts=prompts, seeds=(0,), heldout_seeds=(), test_seeds=(100,),
              progress=False)
    there = frontier.run(settings, scheduler=scheduler, **kw)
    here = frontier.run(settings, jobs=1, **kw)
    assert [e["name"] for e in there["entries"]] == ["dense", "sparse tas -4", "dense", "sparse tas -4"]
    assert there == here


def _fake_simulate(job, bench, variant):
    """A stand-in for the RTL run of one chunk (``tb.step.e2e.simulate_chunk``): cycles and bytes made
    up from the steps, and a record of the build directory it held and when, under the trace's
    folder."""
    t0 = time.time()
    time.sleep(0.3)
    lo, count = (int(x) for x in bench.steps.split(":")[1:])
    steps = list(range(lo, lo + count))
    runs = Path(job.trace).parent / "runs"
    runs.mkdir(exist_ok=True)
    (runs / f"{job.mode}-{job.a}-{uuid.uuid4().hex}.json").write_text(json.dumps(
        {"variant": variant, "t0": t0, "t1": time.time(), "pid": os.getpid()}))
    return {"steps": steps, "cycles": [1000 + 7 * s + int(bench.preload) for s in steps],
            "step_bytes": [[64 * s, 8 * s] for s in steps], "data_width": 64, "mv": [8, 8]}


def test_e2e_chunks_go_through_the_scheduler(scheduler, tmp_path, monkeypatch):
    """The whole-video measurement's chunks as jobs on the scheduler's workers (the simulation
    replaced by a stand-in): the same chunk files as a serial run, each a chunk the report reads, and
    no two simulations at the same time in one build directory."""
    import tb.step.calibrate
    from tb.step import e2e

    for mode in ("dense", "fastcar"):
        (tmp_path / "traces" / mode).mkdir(parents=True)
        (tmp_path / "traces" / mode / "manifest.json").write_text(json.dumps({"mode": mode}))
    monkeypatch.setattr(tb.step.calibrate, "trace_dir", lambda mode: tmp_path / "traces" / mode)
    monkeypatch.setattr(e2e, "simulate_chunk", _fake_simulate)
    S, n = 10, 4
    todo = [e2e.Chunk(mode, S, a, m) for mode in ("dense", "fastcar") for a, m in e2e.chunks(S, n)]
    got = e2e.measure(todo, sdram=2.8, out=tmp_path / "out", build_tag="cal", jobs=2, scheduler=scheduler)
    assert list(got) == [f"{mode}/{a:04d}" for mode, _, a, _ in todo]
    runs = [json.loads(p.read_text()) for p in (tmp_path / "traces" / "runs").iterdir()]
    assert len(runs) == len(todo) and os.getpid() not in {r["pid"] for r in runs}
    assert {r["variant"] for r in runs} <= {"cal", "cal1"}
    for r in runs:
        for o in runs:
            if r is not o and r["t0"] < o["t1"] and o["t0"] < r["t1"]:
                assert r["variant"] != o["variant"], "two simulations in one build directory at once"
    (tmp_path / "traces" / "runs").rename(tmp_path / "runs-scheduler")
    e2e.measure(todo, sdram=2.8, out=tmp_path / "serial", build_tag="cal", jobs=1)
    runs = [json.loads(p.read_text()) for p in (tmp_path / "traces" / "runs").iterdir()]
    assert {r["variant"] for r in runs} == {"cal"} and {r["pid"] for r in runs} == {os.getpid()}
    for mode, _, a, m in todo:
        there = e2e.chunk_file(tmp_path / "out", mode, a).read_text()
        here = e2e.chunk_file(tmp_path / "serial", mode, a).read_text()
        assert there == json.dumps(json.loads(there)) + "\n"
        c = e2e.load_chunk(e2e.chunk_file(tmp_path / "out", mode, a), mode, a, m, 2.8,
                           e2e.trace_sha(tmp_path / "traces" / mode))
        assert c["cycles"] == [1000 + 7 * s + int(mode == "fastcar" and a > 0) for s in range(a, a + m)]
        assert {**json.loads(there), "seconds": 0} == {**json.loads(here), "seconds": 0}


def test_mutants_run_through_the_scheduler(scheduler, tmp_path):
    """Two planted bugs in a small tree, each in a copy of its own on the scheduler's workers: the
    caught one and the one no test sees; the copies end unchanged."""
    from tb.mutants import Mutant, run_mutant
    from tb.mutation import Mutation

    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "tests").mkdir()
    (src / "pkg" / "__init__.py").write_text("")
    (src / "pkg" / "mod.py").write_text("def one():\n    return 1\n\n\ndef two():\n    return 2\n")
    (src / "tests" / "test_mod.py").write_text("from pkg.mod import one\n\n\ndef test_one():\n"
                                               "    assert one() == 1\n")
    mutants = {"one": Mutant("one", "one returns 2", Mutation("pkg/mod.py", "return 1", "return 2"),
                             ("tests/test_mod.py",)),
               "two": Mutant("two", "two returns 3", Mutation("pkg/mod.py", "return 2", "return 3"),
                             ("tests/test_mod.py",))}
    rows = run_jobs(functools.partial(run_mutant, source=src, timeout=60, logs=tmp_path / "logs"), mutants,
                    scheduler=scheduler, progress=False)
    assert [(r["name"], r["status"]) for r in rows.values()] == [("one", "caught"), ("two", "SURVIVED")]
    assert rows["one"]["caught_by"] == "tests/test_mod.py::test_one"
    copies = sorted(p for p in tmp_path.iterdir() if p.name.startswith("slot-"))
    assert copies and all((c / "pkg" / "mod.py").read_text() == (src / "pkg" / "mod.py").read_text()
                          and not (c / ".mutant").exists() for c in copies)
    assert (tmp_path / "logs" / "one.log").exists()


def test_a_mutation_left_by_a_killed_job_is_undone(tmp_path):
    """A slot's copy whose ``.mutant`` names a file (its job died before restoring it) gets that file
    back from the unchanged copy before the next mutant."""
    from tb.mutants import _slot_copy

    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    copy = _slot_copy(src, "3")
    assert copy == tmp_path / "slot-3" and (copy / "pkg" / "mod.py").read_text() == "x = 1\n"
    (copy / "pkg" / "mod.py").write_text("x = 2\n")
    (copy / ".mutant").write_text("pkg/mod.py")
    assert _slot_copy(src, "3") == copy
    assert (copy / "pkg" / "mod.py").read_text() == "x = 1\n" and not (copy / ".mutant").exists()
    (copy / "pkg" / "mod.py").write_text("x = 2\n")               # without the marker: left as it is
    assert (_slot_copy(src, "3") / "pkg" / "mod.py").read_text() == "x = 2\n"
