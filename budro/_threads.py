"""How many threads budro's work uses: the cores this process may actually run on.

``os.cpu_count()`` counts the machine's cores, not the ones a process gets: a CPU affinity mask
(``taskset``, ``docker --cpuset-cpus``, a batch scheduler) or a CPU quota of the process's cgroup
(``docker --cpus``, Kubernetes CPU limits) gives it fewer, and a thread pool sized to the
machine then has threads waiting for each other at every barrier.  :func:`available_cores` is the
one place budro asks:

- the affinity mask (``os.sched_getaffinity``; ``os.cpu_count()`` where that does not exist);
- the cgroup's CPU quota, rounded up: cgroup v2 ``cpu.max`` (``"quota period"``, or ``"max"``),
  cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1: none), read for the process's
  own cgroup (``/proc/self/cgroup``) and each of its parents, the smallest limit winning;
- the environment variable ``BUDRO_NUM_THREADS``, when set, replaces both (a positive integer).

:func:`default_threads` is what the built-in backends use for their thread count when the user
gives none (``nthread``, ``num_threads``, ``thread_count``), and :func:`limit_threads` bounds the
OpenMP and BLAS thread pools (with threadpoolctl) while budro's own code runs (fair-metric
fitting, the neighbour search, the transport solves).

``GOMP_SPINCOUNT``: ``import budro`` sets it to :data:`GOMP_SPINCOUNT_DEFAULT` (3000) unless
``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is already set.  An OpenMP thread that finished a
parallel region keeps spinning on its core before it sleeps (libgomp: 300 000 spins, about 3 ms),
and budro alternates a booster round (OpenMP) with its own transport solve (numpy, numba): on a
busy machine the spinning threads take the cores the next step and the other processes need; not
spinning at all (``OMP_WAIT_POLICY=PASSIVE``) makes every parallel region wake its threads, which
on an idle machine slowed LightGBM's large trees 8x.  A short spin was within 1.41x of the best
setting on a loaded machine and the best or tied on an idle one (docs/threads.md).  A runtime reads
the variable once, when it starts, so it only applies to boosters imported after budro.  It is
libgomp's (GCC's OpenMP, used by the XGBoost and LightGBM wheels on Linux); other runtimes ignore it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from pathlib import Path
from typing import Iterator

from budro.exceptions import ConfigError

__all__ = ["available_cores", "busy_cores", "default_threads", "limit_threads", "pool_limits", "GOMP_SPINCOUNT_DEFAULT",
           "ENV_THREADS"]

#: Environment variable that fixes the thread count budro uses (overrides affinity and cgroups).
ENV_THREADS = "BUDRO_NUM_THREADS"
#: The ``GOMP_SPINCOUNT`` budro sets at import when neither it nor ``OMP_WAIT_POLICY`` is set.
GOMP_SPINCOUNT_DEFAULT = "3000"

# Where the kernel describes the process's cgroups, the runnable tasks of the machine and this
# process's own threads (module attributes so tests can point them at files of their own).
_PROC_CGROUP = "/proc/self/cgroup"
_CGROUP_ROOT = "/sys/fs/cgroup"
_PROC_STAT = "/proc/stat"
_PROC_TASKS = "/proc/self/task"


def _affinity_cores() -> int:
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(1, len(getaffinity(0)))
        except OSError:  # pragma: no cover - platforms that list it but refuse
            pass
    return max(1, os.cpu_count() or 1)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_dirs() -> list[tuple[str, Path]]:
    """``(version, directory)`` of the process's cgroup and its parents, innermost first, for
    the cgroup v2 hierarchy and the v1 ``cpu`` controller."""
    text = _read(Path(_PROC_CGROUP))
    if not text:
        return []
    root = Path(_CGROUP_ROOT)
    out: list[tuple[str, Path]] = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel_parts = [p for p in rel.strip().split("/") if p]
        if controllers == "":  # cgroup v2 (unified): /sys/fs/cgroup/<path>
            bases = [("v2", root)]
        elif "cpu" in controllers.split(","):  # cgroup v1: /sys/fs/cgroup/<controllers>/<path>
            bases = [("v1", root / controllers), ("v1", root / "cpu"), ("v1", root / "cpu,cpuacct")]
        else:
            continue
        for version, base in bases:
            for depth in range(len(rel_parts), -1, -1):
                d = base.joinpath(*rel_parts[:depth])
                if (version, d) not in out:
                    out.append((version, d))
    return out


def _quota(version: str, d: Path) -> float | None:
    """The CPU quota of one cgroup directory in cores, None when unlimited or unreadable."""
    if version == "v2":
        text = _read(d / "cpu.max")
        if not text:
            return None
        fields = text.split()
        if len(fields) < 1 or fields[0] == "max":
            return None
        period = fields[1] if len(fields) > 1 else "100000"
    else:
        quota_text, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if quota_text is None or period is None:
            return None
        fields = [quota_text]
    try:
        quota, per = int(fields[0]), int(period)
    except ValueError:
        return None
    if quota <= 0 or per <= 0:  # -1: no quota
        return None
    return quota / per


def _cgroup_cores() -> int | None:
    """The smallest CPU quota of the process's cgroups, rounded up to whole cores (None: none)."""
    quotas = [q for q in (_quota(v, d) for v, d in _cgroup_dirs()) if q is not None]
    if not quotas:
        return None
    return max(1, math.ceil(min(quotas)))


def _env_threads() -> int | None:
    value = os.environ.get(ENV_THREADS)
    if value is None or value.strip() == "":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"environment variable {ENV_THREADS} must be a positive integer (threads), got {value!r}")
    return n


#: (time.monotonic() of the reading, cgroup quota in cores or None) for available_cores(max_age=...).
_QUOTA_READ: tuple[float, int | None] | None = None


def available_cores(max_age: float = 0.0) -> int:
    """The number of CPU cores this process may use (at least 1).

    ``BUDRO_NUM_THREADS`` when set; otherwise the smaller of the affinity mask's size and the
    cgroup CPU quota (v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``, rounded up), whichever exist.
    ``max_age`` > 0: the quota as read at most that many seconds ago (reading the cgroup files
    takes about 0.1 ms, too much for every solve of a fit); the environment variable and the
    affinity mask are read every time.
    """
    global _QUOTA_READ
    env = _env_threads()
    if env is not None:
        return env
    cores = _affinity_cores()
    now = time.monotonic()
    if max_age > 0.0 and _QUOTA_READ is not None and now - _QUOTA_READ[0] <= max_age:
        quota = _QUOTA_READ[1]
    else:
        quota = _cgroup_cores()
        _QUOTA_READ = (now, quota)
    return min(cores, quota) if quota is not None else cores


#: A booster gets one thread per this many training rows (at least 1, at most :func:`available_cores`).
ROWS_PER_THREAD = 10_000

#: Snapshots of the runnable tasks that :func:`busy_cores` takes (the fewest counts: a process
#: that keeps a core busy is runnable in every one, a short-lived one in few), and the pause
#: between two.
BUSY_SAMPLES = 3
BUSY_INTERVAL = 0.0005


def _runnable_elsewhere() -> int | None:
    """Runnable tasks of other processes now: the machine's (``procs_running`` of /proc/stat)
    minus this process's own running threads (state R in /proc/self/task/*/stat); None where
    the files are not there (not Linux)."""
    text = _read(Path(_PROC_STAT))
    if text is None:
        return None
    running = None
    for line in text.splitlines():
        if line.startswith("procs_running "):
            try:
                running = int(line.split()[1])
            except (IndexError, ValueError):
                return None
            break
    if running is None:
        return None
    own = 0
    try:
        tasks = os.listdir(_PROC_TASKS)
    except OSError:
        tasks = []
    for tid in tasks:
        stat = _read(Path(_PROC_TASKS) / tid / "stat")
        # "pid (comm) S ...": the state follows the command's closing parenthesis
        if stat is not None:
            state = stat.rfind(")") + 2
            own += stat[state:state + 1] == "R"
    return max(0, running - max(own, 1))


def busy_cores() -> int:
    """Cores that other processes keep busy now: the fewest runnable tasks of other processes in
    :data:`BUSY_SAMPLES` snapshots :data:`BUSY_INTERVAL` s apart (0 where they cannot be read)."""
    counts = []
    for i in range(BUSY_SAMPLES):
        if i:
            time.sleep(BUSY_INTERVAL)
        count = _runnable_elsewhere()
        if count is None:
            return 0
        counts.append(count)
    return min(counts)


def default_threads(n_rows: int | None = None, *, max_age: float = 0.0, yield_busy: bool = False) -> int:
    """The thread count of a booster whose user set none: :func:`available_cores`, and for
    ``n_rows`` training rows at most one thread per :data:`ROWS_PER_THREAD` rows.

    A round on a few thousand rows takes well under a millisecond, less than waking a second
    thread at each of its parallel regions: German (800 rows) fitted fastest on one thread, or
    within 12 % of the fastest, on an idle machine and beside a busy process (docs/threads.md).

    ``yield_busy``: leave out the cores that other processes keep busy now (:func:`busy_cores`,
    out of the machine's ``os.cpu_count()``), at least one: for a library whose many short
    parallel regions wait at every barrier for a thread the scheduler has given another process's
    core (LightGBM: Adult's trees took 102 ms a round on two threads beside one busy process,
    16 ms on one; docs/threads.md)."""
    if n_rows is not None and int(n_rows) < 2 * ROWS_PER_THREAD:
        return 1  # whatever the cores (reading them takes ~0.1 ms: the affinity and cgroup files)
    cores = available_cores(max_age)
    if n_rows is not None:
        cores = int(max(1, min(cores, int(n_rows) // ROWS_PER_THREAD)))
    if yield_busy and cores > 1 and _env_threads() is None:
        free = (os.cpu_count() or cores) - busy_cores()
        cores = max(1, min(cores, free))
    return cores


#: threadpoolctl's controller of the pools loaded in this process, with the key it was made for.
_CONTROLLER: tuple | None = None


def pool_limits(limits: int, user_api: str | None = None):
    """``threadpoolctl.threadpool_limits(limits=..., user_api=...)`` through a controller kept
    between calls: a new one looks up every loaded library (1.2-4.5 ms a call on this machine,
    once per exact full-problem solve before), a kept one takes 0.06 ms.  It is made again in a new
    process and whenever ``sys.modules`` has grown or shrunk since (an import is how a new BLAS or
    OpenMP library gets loaded), so pools loaded since are covered as with a fresh controller."""
    global _CONTROLLER
    key = (os.getpid(), len(sys.modules))
    held = _CONTROLLER
    if held is None or held[0] != key:
        from threadpoolctl import ThreadpoolController

        held = _CONTROLLER = (key, ThreadpoolController())
    return held[1].limit(limits=limits, user_api=user_api)


@contextlib.contextmanager
def limit_threads(n: int | None = None) -> Iterator[int]:
    """Bound the BLAS and OpenMP thread pools loaded in this process to ``n`` threads (default
    :func:`available_cores`) inside the ``with`` block (threadpoolctl), restoring them after.

    Yields the bound.  Pools of libraries first loaded inside the block are not covered.
    """
    limit = available_cores() if n is None else int(n)
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        yield limit
        return
    with pool_limits(limit):
        yield limit


def run_spans(run, n: int, size: int, threads: int) -> None:
    """``run(start, stop)`` over ``[0, n)`` in spans of ``size`` rows, on ``threads`` Python threads
    (for work that releases the GIL: compiled kernels, numpy's ufuncs) or on this one.  An error
    in any span is raised here once every span has ended."""
    spans = [(start, min(n, start + size)) for start in range(0, n, size)]
    if threads > 1 and len(spans) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(min(threads, len(spans))) as pool:
            list(pool.map(lambda span: run(*span), spans))
    else:
        for span in spans:
            run(*span)
