"""Bit flips in saved models: every damaged file either loads and predicts exactly what the original
predicts, or is refused with budro's ModelFileError; never a crash, never changed numbers.

Each damaged file is loaded and used in a child process, so that a crash inside a booster library
(a segmentation fault) shows as the child's death by a signal instead of killing the test run.  One
child reads many files in turn and prints one line per file; if it dies, the file it was reading is
run again alone to confirm the culprit, and the rest go on in a new child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from budro import BuDROClassifier
from budro.persist import save_model

REPO = Path(__file__).resolve().parents[1]

#: Statuses a file may end with; anything else fails the test.
ACCEPTED = {"same", "refused"}

_WORKER = r"""
import sys, warnings
import numpy as np
import budro.exceptions
from budro.persist import load_model

ModelFileError = getattr(budro.exceptions, "ModelFileError", budro.exceptions.ValidationError)

warnings.simplefilter("ignore")
folder = sys.argv[1]
import os
if os.path.exists(folder + "/X.parquet"):
    import pandas as pd
    X = pd.read_parquet(folder + "/X.parquet")
else:
    X = np.load(folder + "/X.npy", allow_pickle=False)
proba = np.load(folder + "/proba.npy", allow_pickle=False)
labels = np.load(folder + "/labels.npy", allow_pickle=False)
for path in sys.argv[2:]:
    try:
        model = load_model(path)
        p = model.predict_proba(X)
        same = np.array_equal(p, proba) and np.array_equal(model.predict(X).astype(str), labels)
        status = "same" if same else "CHANGED"
    except ModelFileError as exc:
        status = "refused" if path in str(exc) else "refused-without-the-file-name"
    except BaseException as exc:
        status = "error:" + type(exc).__name__ + ":" + str(exc).replace("\n", " ")[:200]
    print(path + "\t" + status, flush=True)
"""


def _run(folder: Path, paths: list[str], worker: str) -> tuple[dict[str, str], int]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", worker, str(folder), *paths], capture_output=True, text=True,
                          env=env, timeout=600)
    seen = {}
    for line in proc.stdout.splitlines():
        path, _, status = line.partition("\t")
        seen[path] = status
    if proc.returncode != 0 and not seen and len(paths) > 1:
        raise AssertionError(f"the worker failed before reading any file (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return seen, proc.returncode


def check_files(folder: Path, paths: list[str], worker: str = _WORKER) -> dict[str, str]:
    """Status of every file: 'same', 'refused', 'CHANGED', 'error:...', or 'crash (exit N)'."""
    results: dict[str, str] = {}
    pending = list(paths)
    while pending:
        seen, rc = _run(folder, pending, worker)
        results.update(seen)
        pending = [p for p in pending if p not in results]
        if rc != 0 and pending:
            culprit = pending.pop(0)
            alone, rc_alone = _run(folder, [culprit], worker)
            results[culprit] = alone.get(culprit) or f"crash (exit {rc_alone})"
            if culprit in alone:  # only crashed after others: still a crash
                results[culprit] = f"crash after other files (batch exit {rc}); alone: {alone[culprit]}"
    return results


def _flip_positions(path: Path, n: int, rng: np.random.Generator) -> list[int]:
    """Bit positions: most uniform over the file, a share in the zip's headers and central directory."""
    size = path.stat().st_size
    if not zipfile.is_zipfile(path):  # (budro's model files before the archive format)
        return [int(b) for b in rng.integers(0, 8 * size, n)]
    with zipfile.ZipFile(path) as zf:
        starts = [info.header_offset for info in zf.infolist()]
        central = zf.start_dir
    structural = [o for s in starts for o in range(s, min(s + 60, size))] + list(range(central, size))
    n_struct = n // 4
    bytes_at = list(rng.integers(0, size, n - n_struct)) + list(rng.choice(structural, n_struct))
    return [int(b) * 8 + int(rng.integers(0, 8)) for b in bytes_at]


def fuzz(tmp_path: Path, clf: BuDROClassifier, X: np.ndarray, n_flips: int, seed: int, tag: str) -> dict[str, str]:
    folder = tmp_path / tag
    folder.mkdir()
    original = save_model(clf, folder / "original.budro")
    if isinstance(X, np.ndarray):
        np.save(folder / "X.npy", X)
    else:
        X.to_parquet(folder / "X.parquet")
    np.save(folder / "proba.npy", clf.predict_proba(X))
    np.save(folder / "labels.npy", clf.predict(X).astype(str))
    data = original.read_bytes()
    rng = np.random.default_rng(seed)
    paths = []
    for i, bit in enumerate(_flip_positions(original, n_flips, rng)):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        path = folder / f"flip-{i:04d}-bit{bit}.budro"
        path.write_bytes(bytes(damaged))
        paths.append(str(path))
    results = check_files(folder, [str(original)] + paths)
    if results[str(original)] != "same":  # the undamaged file: show why in this process
        from budro.persist import load_model

        load_model(original).predict_proba(X)
        raise AssertionError(f"the undamaged model file: {results[str(original)]}")
    print(f"\n{tag}: {original.stat().st_size} bytes, {n_flips} flips:", json.loads(_report(results))["counts"])
    return results


def _model(backend: str, n_classes: int, params: dict, n_steps: int = 3, table: bool = False):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(150, 4))
    score = X[:, 0] + 0.5 * X[:, 2] + 0.3 * rng.normal(size=150)
    y = np.asarray(["low", "mid", "high"][:n_classes])[np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))]
    data = X
    if table:
        pd = pytest.importorskip("pandas")
        data = pd.DataFrame({"a": X[:, 0], "b": np.where(X[:, 1] > 0, "u", "v"), "c": X[:, 2], "d": X[:, 3]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # budget diagnostics of this tiny model
        clf = BuDROClassifier(backend=backend, backend_params=params, n_steps=n_steps, eps=0.05, random_state=0,
                              protected=["b"] if table else [1]).fit(data, y)
    return clf, data


def _report(results: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for status in results.values():
        counts[status.split(":")[0]] = counts.get(status.split(":")[0], 0) + 1
    bad = {Path(p).name: s for p, s in results.items() if s not in ACCEPTED}
    return json.dumps({"counts": counts, "bad": bad}, indent=1)


def test_single_bit_flips_never_crash_or_change_predictions(tmp_path):
    clf, X = _model("xgboost", 2, {"nthread": 1, "max_depth": 2})
    results = fuzz(tmp_path, clf, X, n_flips=100, seed=20260512, tag="xgb")
    assert len(results) == 101
    assert set(results.values()) <= ACCEPTED, _report(results)
    assert "refused" in results.values()


def test_the_harness_sees_crashes_and_changed_numbers(tmp_path):
    """The checker itself: a file that kills its reader, and one whose numbers differ, are reported."""
    clf, X = _model("xgboost", 2, {"nthread": 1, "max_depth": 2})
    folder = tmp_path / "h"
    folder.mkdir()
    np.save(folder / "X.npy", X)
    np.save(folder / "proba.npy", clf.predict_proba(X) + 1e-12)  # every honest load now differs
    np.save(folder / "labels.npy", clf.predict(X).astype(str))
    good = str(save_model(clf, folder / "good.budro"))
    (folder / "junk.budro").write_bytes(b"junk")
    assert check_files(folder, [good, str(folder / "junk.budro")]) == {good: "CHANGED", str(folder / "junk.budro"): "refused"}
    # a reader that dies (SIGABRT, as a crash in a library would) on one file
    crash = str(folder / "crash.budro")
    Path(crash).write_bytes(b"x")
    dying = _WORKER.replace("for path in sys.argv[2:]:",
                            "for path in sys.argv[2:]:\n    if path.endswith('crash.budro'): import os; os.abort()")
    results = check_files(folder, [good, crash, str(folder / "junk.budro")], worker=dying)
    assert results[crash].startswith("crash (exit ") and results[good] == "CHANGED" and results[str(folder / "junk.budro")] == "refused"


@pytest.mark.slow
@pytest.mark.parametrize("backend, n_classes, params, table, n_flips", [
    ("xgboost", 2, {"nthread": 1, "max_depth": 3}, False, 300),
    ("xgboost", 3, {"nthread": 1, "max_depth": 2}, True, 200),
    ("lightgbm", 3, {"num_threads": 1, "num_leaves": 6}, False, 250),
    ("catboost", 2, {"thread_count": 1, "depth": 3}, True, 250),
])
def test_many_bit_flips_on_every_backend(tmp_path, backend, n_classes, params, table, n_flips):
    """1000 flips in all over the four models."""
    clf, X = _model(backend, n_classes, params, n_steps=5, table=table)
    results = fuzz(tmp_path, clf, X, n_flips=n_flips, seed=7 + n_flips, tag=backend)
    assert set(results.values()) <= ACCEPTED, _report(results)
