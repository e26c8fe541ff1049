"""Long jobs on Dask distributed: one runner for the frontier, the whole-video RTL measurement and the
mutation check.

:func:`run_jobs` calls ``fn(job)`` for every job of a mapping ``{key: job}`` and returns ``{key:
result}`` in the mapping's order, whatever order the jobs finished in, so that a run gives the same
results as a serial one. The jobs run

- on a :class:`distributed.LocalCluster` on this machine: one process per worker, one thread each,
  on the loopback address, no dashboard (``workers``, default one per core);
- on an existing Dask scheduler (``scheduler="tcp://HOST:PORT"``), on whatever workers joined it
  (``dask scheduler`` on one machine, ``dask worker tcp://HOST:PORT --nthreads 1`` on each, started
  in a checkout of the same project at the same path, with the same environment);
- or here, one after another in this process, with ``workers=1`` and no scheduler.

Jobs start in the mapping's order (put the longest first), never more at once than the workers
have threads. With a ``store`` directory every result is written there as soon as it arrives,
``store/<key>.pkl`` (or ``.json``), whole or not at all; a key already in the store is not run
again, so a stopped run resumes where it stopped. A failing job stops the run: no further job
starts, the ones running finish and are stored, then :class:`JobError` names the failed job's key.

This module imports nothing of the project but :mod:`sw.atomic`; ``distributed`` is imported only
when a cluster is used.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sw.atomic import atomic_file

__all__ = ["JobError", "SchedulerError", "StoreError", "JobRunner", "run_jobs", "worker_slot", "store_path"]

#: Suffix of a stored result per ``store_format``.
STORE_SUFFIX = {"pickle": ".pkl", "json": ".json"}


class JobError(RuntimeError):
    """A job failed (its exception is the ``__cause__``) or its result could not be stored.

    Attributes
    ----------
    key : str
        The job's key.
    """

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


class SchedulerError(ConnectionError):
    """The Dask scheduler cannot be reached (one line naming its address)."""


class StoreError(ValueError):
    """A store file that cannot be read, or a key that cannot name one."""


# --------------------------------------------------------------------------------------------------
# On the workers


_INITIALISED: set[str] = set()
_INIT_LOCK = threading.Lock()
_SLOTS: set[int] = set()
_SLOTS_LOCK = threading.Lock()


def _init_once(init: Callable[[], Any]) -> None:
    """Call ``init`` once in this process (the first job of each worker process calls it)."""
    name = f"{getattr(init, '__module__', '')}.{getattr(init, '__qualname__', repr(init))}"
    with _INIT_LOCK:
        if name not in _INITIALISED:
            init()
            _INITIALISED.add(name)


class _Task:
    """``fn(job)`` after ``worker_init`` has run in this process (picklable when ``fn`` is)."""

    def __init__(self, fn: Callable[[Any], Any], worker_init: Callable[[], Any] | None):
        self.fn, self.worker_init = fn, worker_init

    def __call__(self, job):
        if self.worker_init is not None:
            _init_once(self.worker_init)
        return self.fn(job)


def _worker_name() -> str:
    """The Dask worker's name, made safe for a file name; ``"0"`` outside a Dask worker."""
    try:
        from distributed import get_worker

        name = str(get_worker().name)
    except (ImportError, ValueError):
        return "0"
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "0"


@contextlib.contextmanager
def worker_slot() -> Iterator[str]:
    """A name that no other job running at the same time has, for a job's own scratch or build
    directory.

    The name is the Dask worker's name (on a :class:`distributed.LocalCluster` its index: ``"0"``,
    ``"1"``, ...), and ``"0"`` for the jobs :func:`run_jobs` runs in this process; a worker running
    several jobs at once (more than one thread) gives its second ``"<name>-1"``, and so on. Names of
    workers are unique on a scheduler, so two running jobs never get the same name; a job that
    finishes frees its name for the next.

    Yields
    ------
    str
        The name, made of letters, digits, ``_``, ``.`` and ``-``.
    """
    with _SLOTS_LOCK:
        k = next(i for i in itertools.count() if i not in _SLOTS)
        _SLOTS.add(k)
    try:
        name = _worker_name()
        yield name if k == 0 else f"{name}-{k}"
    finally:
        with _SLOTS_LOCK:
            _SLOTS.discard(k)


# --------------------------------------------------------------------------------------------------
# The store


def store_path(store: Path, key: str, store_format: str = "pickle") -> Path:
    """The file that holds ``key``'s result in ``store``: ``store/<key>.pkl`` (``.json``).

    Parameters
    ----------
    store : Path
        The store directory.
    key : str
        The job's key; ``/`` in it names sub-directories (``"dense/0032"``).
    store_format : {"pickle", "json"}
        How results are stored.

    Raises
    ------
    StoreError
        When the key cannot name a file under ``store`` (empty, absolute, ``.``, ``..`` or an empty
        part).
    """
    if store_format not in STORE_SUFFIX:
        raise StoreError(f"store format {store_format!r}: expected one of {sorted(STORE_SUFFIX)}")
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
        raise StoreError(f"job key {key!r} cannot name a file in the store {store}")
    return Path(store).joinpath(*parts[:-1], parts[-1] + STORE_SUFFIX[store_format])


def _load(path: Path, store_format: str):
    try:
        if store_format == "json":
            return json.loads(path.read_text())
        return pickle.loads(path.read_bytes())
    except Exception as e:
        raise StoreError(f"{path}: cannot read a stored result ({type(e).__name__}: {e}); "
                         "remove it to run its job again") from None


def _save(path: Path, key: str, result, store_format: str) -> None:
    try:
        data = (json.dumps(result) + "\n").encode() if store_format == "json" else \
            pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise JobError(key, f"job {key!r}: its result cannot be stored as {store_format} "
                            f"({type(e).__name__}: {e})") from e
    with atomic_file(path) as tmp:
        Path(tmp).write_bytes(data)


# --------------------------------------------------------------------------------------------------
# The runner


def _check_address(address: str) -> None:
    """A scheduler address Dask can connect to (``tcp://HOST:PORT``), or one line saying why not
    (before a client is made: one made for a malformed address fails noisily as it is collected)."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(address)
        get_backend(scheme)
        if scheme in ("tcp", "tls", "ws", "wss"):
            parse_host_port(location)
    except (ValueError, TypeError) as e:
        raise SchedulerError(f"cannot reach the Dask scheduler at {address}: {e} "
                             "(expected tcp://HOST:PORT)") from None


class JobRunner:
    """Where :meth:`run` runs jobs: a local cluster, an existing scheduler, or this process.

    Use it as a context manager, which starts the cluster (or connects to the scheduler) on entry
    and closes it on exit; several :meth:`run` calls inside share the workers (and whatever the
    workers keep loaded between jobs).

    Parameters
    ----------
    scheduler : str, optional
        Address of a running Dask scheduler, ``"tcp://HOST:PORT"``; ``workers`` is then ignored
        (the workers that joined the scheduler run the jobs).
    workers : int, optional
        Worker processes of the local cluster (default :func:`os.cpu_count`). ``1`` runs the jobs
        here, one after another, without a cluster.
    connect_timeout : float
        Seconds to wait for ``scheduler`` to answer.

    Raises
    ------
    SchedulerError
        On entry, when ``scheduler`` cannot be reached.
    ValueError
        When ``workers`` is below 1.
    """

    def __init__(self, *, scheduler: str | None = None, workers: int | None = None,
                 connect_timeout: float = 10.0):
        if workers is not None and workers < 1:
            raise ValueError(f"workers must be at least 1, not {workers}")
        self.scheduler = scheduler
        self.workers = workers or os.cpu_count() or 1
        self.connect_timeout = connect_timeout
        self.client = None
        self._cluster = None

    @property
    def serial(self) -> bool:
        """The jobs run in this process, one after another."""
        return self.scheduler is None and self.workers == 1

    def __enter__(self) -> JobRunner:
        if self.serial:
            return self
        from distributed import Client, LocalCluster

        if self.scheduler is not None:
            _check_address(self.scheduler)
            try:
                self.client = Client(self.scheduler, timeout=self.connect_timeout, set_as_default=False)
            except (OSError, TimeoutError, ValueError, TypeError) as e:
                reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
                raise SchedulerError(f"cannot reach the Dask scheduler at {self.scheduler}: "
                                     f"{reason}") from None
        else:
            self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                         host="127.0.0.1", dashboard_address=None, memory_limit=0)
            try:
                self.client = Client(self._cluster, set_as_default=False)
            except BaseException:
                self._cluster.close()
                raise
        return self

    def __exit__(self, *exc) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def _capacity(self) -> int:
        """Jobs the workers can run at once (their threads); waits for a first worker."""
        n = sum(self.client.nthreads().values())
        if n == 0:
            print(f"waiting for a worker to join the Dask scheduler at {self.scheduler}", file=sys.stderr)
            self.client.wait_for_workers(1)
            n = sum(self.client.nthreads().values())
        return max(n, 1)

    def run(self, fn: Callable[[Any], Any], jobs: Mapping[str, Any], *, store: Path | None = None,
            store_format: str = "pickle", progress: bool = True, desc: str = "",
            worker_init: Callable[[], Any] | None = None, deadline: float | None = None,
            on_result: Callable[[str, Any], None] | None = None) -> dict[str, Any]:
        """``{key: fn(job)}`` for every job of ``jobs``, in the order of ``jobs``.

        Parameters
        ----------
        fn : callable
            ``fn(job) -> result``; on a cluster it and the jobs are pickled (cloudpickle) and the
            results come back pickled.
        jobs : mapping of str to object
            The jobs by key, started in this order.
        store : Path, optional
            Directory of results by key (:func:`store_path`): each result is written as it arrives,
            and a key already there is read back instead of run.
        store_format : {"pickle", "json"}
            How the store holds a result (``"json"``: ``json.dumps(result)`` and a newline).
        progress : bool
            Show a progress bar (tqdm, on stderr).
        desc : str
            The progress bar's label.
        worker_init : callable, optional
            Called once in each process before its first job (e.g. one thread for torch).
        deadline : float, optional
            ``time.time()`` after which no job starts; those not started are left out of the
            result.
        on_result : callable, optional
            ``on_result(key, result)`` here, as each result arrives (after it is stored).

        Returns
        -------
        dict
            ``{key: result}`` in the order of ``jobs`` (stored results included).

        Raises
        ------
        JobError
            When a job fails (after the jobs already running have finished and been stored), naming
            its key; the job's exception is the cause.
        StoreError
            When a stored result cannot be read, or a key cannot name a store file.
        """
        keys = list(jobs)
        for k in keys:
            if not isinstance(k, str):
                raise TypeError(f"job keys must be str, not {type(k).__name__} ({k!r})")
        paths = {k: store_path(Path(store), k, store_format) for k in keys} if store is not None else {}
        have = {k: _load(p, store_format) for k, p in paths.items() if p.exists()}
        todo = [k for k in keys if k not in have]
        task = _Task(fn, worker_init)
        from tqdm import tqdm

        bar = tqdm(total=len(keys), initial=len(have), desc=desc or None, unit="job", disable=not progress)
        done: dict[str, Any] = {}

        def finish(key, result):
            if key in paths:
                _save(paths[key], key, result, store_format)
            done[key] = result
            bar.update()
            if on_result is not None:
                on_result(key, result)

        try:
            if self.serial:
                for key in todo:
                    if deadline is not None and time.time() > deadline:
                        break
                    try:
                        result = task(jobs[key])
                    except Exception as e:
                        raise JobError(key, f"job {key!r} failed: {type(e).__name__}: {e}") from e
                    finish(key, result)
            else:
                self._run_on_cluster(task, jobs, todo, deadline, finish, desc)
        finally:
            bar.close()
        return {k: have[k] if k in have else done[k] for k in keys if k in have or k in done}

    def _run_on_cluster(self, task, jobs, todo, deadline, finish, desc) -> None:
        from distributed import as_completed

        if self.client is None:
            raise RuntimeError("JobRunner.run on a cluster needs `with JobRunner(...) as runner:`")
        pending = iter(todo)
        running: dict = {}
        queue = as_completed(loop=self.client.loop)
        failed: tuple | None = None
        tag = re.sub(r"[^A-Za-z0-9_.-]+", "-", desc or getattr(task.fn, "__name__", "job"))

        def submit():
            limit = self._capacity()
            while failed is None and len(running) < limit and (deadline is None or time.time() <= deadline):
                key = next(pending, None)
                if key is None:
                    return
                fut = self.client.submit(task, jobs[key], pure=False,
                                         key=f"{tag}-{key}-{uuid.uuid4().hex[:8]}")
                running[fut] = key
                queue.add(fut)

        try:
            submit()
            for fut in queue:
                key = running.pop(fut)
                if fut.status == "finished":
                    try:
                        finish(key, fut.result())
                    except JobError as e:           # its result cannot be stored
                        failed = failed or (e, e.__cause__)
                elif failed is None:
                    exc = fut.exception() if fut.status == "error" else None
                    if exc is not None:
                        exc = exc.with_traceback(fut.traceback())
                    why = f"{type(exc).__name__}: {exc}" if exc is not None else f"its task was {fut.status}"
                    failed = (JobError(key, f"job {key!r} failed: {why}"), exc)
                fut.release()
                if failed is None:
                    submit()
        except BaseException:
            self.client.cancel(list(running))
            raise
        if failed is not None:
            err, cause = failed
            raise err from cause


def run_jobs(fn: Callable[[Any], Any], jobs: Mapping[str, Any], *, scheduler: str | None = None,
             workers: int | None = None, store: Path | None = None, store_format: str = "pickle",
             progress: bool = True, desc: str = "", worker_init: Callable[[], Any] | None = None,
             deadline: float | None = None, on_result: Callable[[str, Any], None] | None = None,
             connect_timeout: float = 10.0) -> dict[str, Any]:
    """``{key: fn(job)}`` for every job of ``jobs``, on a local cluster, an existing Dask scheduler or
    here: :class:`JobRunner` and :meth:`JobRunner.run` in one call.

    Parameters
    ----------
    fn : callable
        ``fn(job) -> result``.
    jobs : mapping of str to object
        The jobs by key, started in this order.
    scheduler : str, optional
        Address of a running Dask scheduler (``"tcp://HOST:PORT"``); default: a local cluster.
    workers : int, optional
        Processes of the local cluster (default one per core; ``1``: here, one after another).
    store, store_format, progress, desc, worker_init, deadline, on_result
        As for :meth:`JobRunner.run`.
    connect_timeout : float
        Seconds to wait for ``scheduler`` to answer.

    Returns
    -------
    dict
        ``{key: result}`` in the order of ``jobs``.

    Raises
    ------
    JobError
        A job failed; its key is named, the results that finished are stored.
    SchedulerError
        ``scheduler`` cannot be reached.
    StoreError
        A stored result cannot be read, or a key cannot name a store file.

    Examples
    --------
    >>> run_jobs(abs, {"a": -1, "b": 2}, workers=1, progress=False)
    {'a': 1, 'b': 2}
    """
    with JobRunner(scheduler=scheduler, workers=workers, connect_timeout=connect_timeout) as runner:
        return runner.run(fn, jobs, store=store, store_format=store_format, progress=progress, desc=desc,
                          worker_init=worker_init, deadline=deadline, on_result=on_result)
