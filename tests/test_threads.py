"""budro._threads: the cores a process may use (affinity, cgroup v1/v2 quotas, BUDRO_NUM_THREADS),
the thread pools bounded while budro's own code runs, and the backends' default thread counts."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from budro import _threads
from budro.exceptions import ConfigError


@pytest.fixture
def fake_cgroups(tmp_path, monkeypatch):
    """Point budro._threads at a fake /proc/self/cgroup and /sys/fs/cgroup under tmp_path; fix
    the affinity mask at 8 cores; clear BUDRO_NUM_THREADS."""
    root = tmp_path / "sys_fs_cgroup"
    root.mkdir()
    proc = tmp_path / "proc_self_cgroup"
    monkeypatch.setattr(_threads, "_PROC_CGROUP", str(proc))
    monkeypatch.setattr(_threads, "_CGROUP_ROOT", str(root))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.delenv(_threads.ENV_THREADS, raising=False)

    def write(rel: str, text: str) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return proc, write


def test_no_cgroup_files_uses_the_affinity_mask(fake_cgroups):
    proc, _ = fake_cgroups
    assert _threads.available_cores() == 8  # no /proc/self/cgroup at all
    proc.write_text("0::/user.slice\n")
    assert _threads.available_cores() == 8  # a cgroup without cpu.max


def test_affinity_mask_smaller_than_the_machine(fake_cgroups, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 5, 6})
    assert _threads.available_cores() == 3


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("max 100000", 8), ("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1), ("1600000 100000", 8),
     ("garbage", 8), ("", 8)],
)
def test_cgroup_v2_cpu_max(fake_cgroups, cpu_max, expected):
    proc, write = fake_cgroups
    proc.write_text("0::/kubepods/pod1/ctr\n")
    write("kubepods/pod1/ctr/cpu.max", cpu_max + "\n")
    assert _threads.available_cores() == expected


def test_cgroup_v2_parent_limit_applies(fake_cgroups):
    """A quota on a parent cgroup limits the child; the smallest along the path wins."""
    proc, write = fake_cgroups
    proc.write_text("0::/a/b\n")
    write("a/b/cpu.max", "max 100000\n")
    write("a/cpu.max", "300000 100000\n")
    write("cpu.max", "500000 100000\n")
    assert _threads.available_cores() == 3


def test_cgroup_v2_namespace_root(fake_cgroups):
    """Inside a container with its own cgroup namespace the path is '/': the root's cpu.max."""
    proc, write = fake_cgroups
    proc.write_text("0::/\n")
    write("cpu.max", "250000 100000\n")
    assert _threads.available_cores() == 3


@pytest.mark.parametrize(("quota", "period", "expected"), [("-1", "100000", 8), ("100000", "100000", 1),
                                                            ("400000", "100000", 4), ("250000", "100000", 3)])
def test_cgroup_v1_cfs_quota(fake_cgroups, quota, period, expected):
    proc, write = fake_cgroups
    proc.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n")
    write("cpu,cpuacct/docker/abc/cpu.cfs_quota_us", quota + "\n")
    write("cpu,cpuacct/docker/abc/cpu.cfs_period_us", period + "\n")
    assert _threads.available_cores() == expected


def test_cgroup_v1_container_sees_its_cgroup_at_the_mount_root(fake_cgroups):
    """Docker on cgroup v1: /proc/self/cgroup names /docker/<id>, but the container's own cgroup
    is mounted at /sys/fs/cgroup/cpu itself (the path below it does not exist)."""
    proc, write = fake_cgroups
    proc.write_text("3:cpu:/docker/0123\n")
    write("cpu/cpu.cfs_quota_us", "200000\n")
    write("cpu/cpu.cfs_period_us", "100000\n")
    assert _threads.available_cores() == 2


def test_environment_variable_overrides(fake_cgroups, monkeypatch):
    proc, write = fake_cgroups
    proc.write_text("0::/\n")
    write("cpu.max", "100000 100000\n")
    monkeypatch.setenv(_threads.ENV_THREADS, "5")
    assert _threads.available_cores() == 5
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv(_threads.ENV_THREADS, bad)
        with pytest.raises(ConfigError, match="BUDRO_NUM_THREADS"):
            _threads.available_cores()


def test_default_threads_scale_with_the_rows(fake_cgroups):
    assert _threads.default_threads() == 8
    assert _threads.default_threads(800) == 1  # German: one thread
    assert _threads.default_threads(36_177) == 3  # Adult
    assert _threads.default_threads(10**6) == 8  # capped by the cores


def test_on_this_machine_within_the_affinity_mask():
    n = _threads.available_cores()
    assert 1 <= n <= len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else n >= 1


def test_limit_threads_bounds_blas_and_restores():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    np.ones((4, 4)) @ np.ones((4, 4))  # BLAS loaded
    before = {p["filepath"]: p["num_threads"] for p in threadpoolctl.threadpool_info()}
    with _threads.limit_threads(1) as limit:
        assert limit == 1
        assert all(p["num_threads"] == 1 for p in threadpoolctl.threadpool_info())
    after = {p["filepath"]: p["num_threads"] for p in threadpoolctl.threadpool_info()}
    assert after == before


def test_pool_limits_keeps_its_controller_until_the_modules_change(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    np.ones((4, 4)) @ np.ones((4, 4))  # BLAS loaded
    blas = {p["filepath"]: p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"}
    with _threads.pool_limits(1, "blas"):
        inside = threadpoolctl.threadpool_info()
        assert all(p["num_threads"] == 1 for p in inside if p["user_api"] == "blas")
        with _threads.pool_limits(1, "blas"):  # nested: restores what the outer one set
            pass
        assert all(p["num_threads"] == 1 for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas")
    assert {p["filepath"]: p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"} == blas
    first = _threads._CONTROLLER
    with _threads.pool_limits(1, "blas"):
        pass
    assert _threads._CONTROLLER is first  # kept: no new library lookup
    monkeypatch.setitem(sys.modules, "budro_test_new_module", object())  # an import may load a library
    with _threads.pool_limits(1, "blas"):
        pass
    assert _threads._CONTROLLER is not first and _threads._CONTROLLER[0][1] == len(sys.modules)


def test_import_budro_shortens_the_openmp_spin_unless_the_user_chose():
    code = "import os, budro; print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))"
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}

    def run(**extra):
        out = subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                             check=True)
        return out.stdout.split()

    assert run() == [_threads.GOMP_SPINCOUNT_DEFAULT, "None"]
    assert run(GOMP_SPINCOUNT="100000") == ["100000", "None"]
    assert run(OMP_WAIT_POLICY="ACTIVE") == ["None", "ACTIVE"]  # a chosen policy is left alone
    assert run(OMP_WAIT_POLICY="PASSIVE") == ["None", "PASSIVE"]


def _library_threads(backend) -> int:
    import json

    name = type(backend).__name__
    if name == "XGBoostBackend":
        return int(json.loads(backend.model.save_config())["learner"]["generic_param"]["nthread"])
    if name == "LightGBMBackend":
        return int(backend.model.params["num_threads"])
    return int(backend.model.get_params()["thread_count"])


@pytest.mark.parametrize(("backend", "alias"), [("xgboost", "n_jobs"), ("lightgbm", "nthread"), ("catboost", "thread_count")])
def test_backends_default_to_available_cores_unless_given(backend, alias, monkeypatch):
    """Without a thread parameter a backend trains with available_cores() threads (here fixed by
    BUDRO_NUM_THREADS), not the library's every-core default; a given value (any alias) wins."""
    import budro.registry as registry

    X = np.random.default_rng(0).normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(float)
    monkeypatch.setattr(_threads, "ROWS_PER_THREAD", 10)  # 40 rows: up to 4 threads
    monkeypatch.setenv(_threads.ENV_THREADS, "3")
    b = registry.create("backend", backend)
    b.start(X, y, 2)
    assert _library_threads(b) == 3
    monkeypatch.setenv(_threads.ENV_THREADS, "1")
    b.start(X, y, 2)  # read at every start, not frozen at construction
    assert _library_threads(b) == 1
    monkeypatch.setenv(_threads.ENV_THREADS, "8")
    monkeypatch.setattr(_threads, "ROWS_PER_THREAD", 20)
    b.start(X, y, 2)  # 40 rows: 2 threads, not 8
    assert _library_threads(b) == 2
    given = registry.create("backend", backend, **{alias: 2})
    given.start(X, y, 2)
    assert _library_threads(given) == 2
    assert given.params.get(type(given).THREAD_PARAM) == 2


def test_fit_bounds_blas_pools_to_available_cores(monkeypatch):
    """Inside a fit (fair metric, neighbour graph, every solve) the BLAS/OpenMP pools are bounded
    to available_cores(); outside they are as the user left them."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from budro import BuDROClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 3))
    y = (X[:, 1] + 0.3 * rng.normal(size=80) > 0).astype(int)
    seen = []

    def record(info):
        seen.append(max(p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"))

    monkeypatch.setenv(_threads.ENV_THREADS, "1")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        clf = BuDROClassifier(protected=[0], fair_metric_params={"fit_linear_models": False}, n_steps=2,
                              backend_params={"max_depth": 2, "nthread": 1}, n_neighbors=5, callbacks=[record],
                              random_state=0)
        clf.fit(X, y)
        after = max(p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas")
    assert seen and all(n == 1 for n in seen)
    assert after == 2


def test_max_age_reuses_a_recent_quota_reading(fake_cgroups, monkeypatch):
    """available_cores(max_age=...) reuses the cgroup quota read within max_age seconds (a solve
    asks every round); max_age=0 (the default) reads the files every time; the environment
    variable and the affinity mask are never cached."""
    proc, write = fake_cgroups
    proc.write_text("0::/\n")
    write("cpu.max", "200000 100000\n")
    monkeypatch.setattr(_threads, "_QUOTA_READ", None)
    assert _threads.available_cores(max_age=60.0) == 2
    write("cpu.max", "300000 100000\n")
    assert _threads.available_cores(max_age=60.0) == 2  # the reading of a moment ago
    assert _threads.available_cores() == 3  # read again
    assert _threads.available_cores(max_age=60.0) == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert _threads.available_cores(max_age=60.0) == 1  # the affinity mask is read every time
    monkeypatch.setenv(_threads.ENV_THREADS, "5")
    assert _threads.available_cores(max_age=60.0) == 5
    assert _threads.default_threads(10**6, max_age=60.0) == 5


@pytest.fixture
def fake_tasks(tmp_path, monkeypatch):
    """Point busy_cores at a fake /proc/stat (procs_running) and /proc/self/task (this process's
    threads and their states)."""
    stat = tmp_path / "stat"
    tasks = tmp_path / "task"
    tasks.mkdir()
    monkeypatch.setattr(_threads, "_PROC_STAT", str(stat))
    monkeypatch.setattr(_threads, "_PROC_TASKS", str(tasks))
    monkeypatch.setattr(_threads, "BUSY_INTERVAL", 0.0)

    def write(running: int, own_states: str) -> None:
        stat.write_text(f"cpu  1 2 3 4\nctxt 99\nprocs_running {running}\nprocs_blocked 0\n")
        for old in tasks.iterdir():
            (old / "stat").unlink()
            old.rmdir()
        for i, state in enumerate(own_states):
            (tasks / str(100 + i)).mkdir()
            (tasks / str(100 + i) / "stat").write_text(f"{100 + i} (python (budro) x) {state} 1 2 3 4\n")

    return write


def test_busy_cores_counts_other_processes_runnable_tasks(fake_tasks):
    fake_tasks(3, "RSS")  # 3 runnable on the machine, one of them this process's thread
    assert _threads.busy_cores() == 2
    fake_tasks(4, "RRS")  # this process runs two threads (a kernel preload beside the fit)
    assert _threads.busy_cores() == 2
    fake_tasks(1, "R")
    assert _threads.busy_cores() == 0


def test_busy_cores_takes_the_fewest_of_its_snapshots(fake_tasks, monkeypatch):
    counts = iter([3, 1, 2])
    monkeypatch.setattr(_threads, "_runnable_elsewhere", lambda: next(counts))
    assert _threads.busy_cores() == 1  # a short-lived process shows in some snapshots only


def test_busy_cores_without_the_files_is_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(_threads, "_PROC_STAT", str(tmp_path / "missing"))
    assert _threads.busy_cores() == 0
    (tmp_path / "stat").write_text("cpu 1 2\n")  # no procs_running line
    monkeypatch.setattr(_threads, "_PROC_STAT", str(tmp_path / "stat"))
    assert _threads.busy_cores() == 0


def test_default_threads_leave_busy_cores_out_only_when_asked(fake_cgroups, fake_tasks, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    fake_tasks(7, "R")  # six other processes keep six of the eight cores busy
    assert _threads.default_threads(10**6) == 8
    assert _threads.default_threads(10**6, yield_busy=True) == 2
    assert _threads.default_threads(36_177, yield_busy=True) == 2  # 3 by the rows, 2 free
    fake_tasks(20, "R")  # more runnable tasks than cores: still one thread
    assert _threads.default_threads(10**6, yield_busy=True) == 1
    fake_tasks(1, "R")
    assert _threads.default_threads(10**6, yield_busy=True) == 8
    assert _threads.default_threads(800, yield_busy=True) == 1
    monkeypatch.setenv(_threads.ENV_THREADS, "5")  # the user's count: nothing left out
    fake_tasks(7, "R")
    assert _threads.default_threads(10**6, yield_busy=True) == 5


def test_lightgbm_default_threads_yield_to_busy_cores(monkeypatch):
    """LightGBM's default leaves out the cores other processes keep busy when training starts;
    XGBoost's does not (its thread count can change its sums)."""
    from budro.backends.lightgbm import LightGBMBackend
    from budro.backends.xgboost import XGBoostBackend

    monkeypatch.delenv(_threads.ENV_THREADS, raising=False)
    monkeypatch.setattr(_threads, "available_cores", lambda max_age=0.0: 2)
    monkeypatch.setattr(_threads, "busy_cores", lambda: 1)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    X = np.random.default_rng(0).normal(size=(40_000, 3))
    y = (X[:, 0] > 0).astype(float)
    lgb_backend = LightGBMBackend(num_leaves=4)
    lgb_backend.start(X, y, 2)
    assert _library_threads(lgb_backend) == 1
    xgb_backend = XGBoostBackend(max_depth=2)
    xgb_backend.start(X, y, 2)
    assert _library_threads(xgb_backend) == 2
    monkeypatch.setattr(_threads, "busy_cores", lambda: 0)
    lgb_backend.start(X, y, 2)
    assert _library_threads(lgb_backend) == 2
