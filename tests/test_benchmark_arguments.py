"""The benchmarks refuse bad sizes up front, naming the argument, before any measurement starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SOLVERS = Path(__file__).resolve().parents[1] / "benchmarks" / "solvers.py"


@pytest.mark.parametrize("args, named", [
    (["large", "--large-n", "0"], "--large-n"),
    (["large", "--large-n", "100000,10"], "--large-n"),
    (["full", "--syn-n", "10"], "--syn-n"),
    (["full", "--big-n", "x"], "--big-n"),
])
def test_bad_sizes_are_refused_before_any_run(args, named):
    proc = subprocess.run([sys.executable, str(SOLVERS), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert f"argument {named}: expected a number of rows >= 4000" in last
    assert proc.stdout == ""  # nothing measured


def test_sizes_parse_and_zero_skips(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(SOLVERS.parent))  # the script imports its sibling _report
    spec = importlib.util.spec_from_file_location("_budro_bench_solvers", SOLVERS)
    solvers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solvers)
    assert solvers._rows_list("4000,100000,") == [4000, 100000]
    assert solvers._rows(skip=True)("0") == 0
    with pytest.raises(Exception, match="or 0 \\(skip\\)"):
        solvers._rows(skip=True)("-5")
    with pytest.raises(Exception, match="got '0'"):
        solvers._rows()("0")


TRAINING = SOLVERS.parent / "training.py"


@pytest.mark.parametrize("args, message", [
    (["--processes", "0"], "--processes must be an integer >= 1, got 0"),
    (["--later-fits", "-1"], "--later-fits must be an integer >= 0, got -1"),
])
def test_training_refuses_bad_repeat_counts_before_any_run(args, message):
    proc = subprocess.run([sys.executable, str(TRAINING), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr.strip().splitlines()[-1]
    assert "running" not in proc.stderr and proc.stdout == ""  # nothing measured


def _training(monkeypatch):
    import importlib.util

    monkeypatch.syspath_prepend(str(TRAINING.parent))
    spec = importlib.util.spec_from_file_location("_budro_bench_training", TRAINING)
    training = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(training)
    return training


def test_training_reports_the_median_process_and_pools_the_later_pairs(monkeypatch):
    training = _training(monkeypatch)

    def run(ratio, later):
        return {"kind": "paper", "ratio": ratio, "second": {"pairs": [{"ratio": q, "budro_round_ms": q} for q in later]}}

    runs = [run(9.0, [8.0, 12.0]), {"kind": "paper", "error": "killed"}, run(11.0, [9.5]), run(7.0, [10.0, 7.5])]
    out = training._median_of_processes(runs)
    assert out["ratio"] == 9.0 and out["processes"] == 3 and out["process_range"] == (7.0, 11.0)
    assert out["process_errors"] == ["killed"]
    assert out["second"]["fits"] == 5 and out["second"]["ratio"] == 9.5  # the median of 7.5 8 9.5 10 12
    assert out["second"]["ratio_range"] == (7.5, 12.0)
    assert "median of 3 processes, range 7.0-11.0; 1 more failed: killed" in training._spread(out, ".1f")
    whole = training._median_of_processes([{"kind": "whole", "fit_ratio": r} for r in (4.2, 3.6, 4.5)])
    assert whole["fit_ratio"] == 4.2 and training._range_cell(whole, ".1f") == " (3.6-4.5)"
    tree = {"kind": "tree", "rows": []}
    assert training._median_of_processes([tree]) is tree  # run once, as it was


@pytest.mark.parametrize("value", ["0", "-1", "two"])
@pytest.mark.parametrize(("script", "option", "noun"), [("solve_phases.py", "--fits", "fits"),
                                                       ("lightgbm_leaves.py", "--repeats", "repeats")])
def test_fit_counts_are_refused_before_any_fit(script, option, noun, value):
    proc = subprocess.run([sys.executable, str(SOLVERS.parent / script), option, value], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert f"argument {option}: expected a number of {noun} >= 1, got '{value}'" in proc.stderr.strip().splitlines()[-1]
    assert proc.stdout == ""  # nothing measured


def test_capped_note_reports_the_plain_fit_under_the_same_leaf_cap():
    """The Adult LightGBM target line names the ratio to plain LightGBM under BuDRO's leaf cap
    (and whether its trees are the plain fit's), beside the target's own ratio."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("training_for_note", SOLVERS.parent / "training.py")
    training = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(training)
    r = {"capped_ratio": 1.82, "leaf_cap": 2048, "backend": "lightgbm", "backend_params": {"num_leaves": 16384},
         "plain_capped_same_trees": True, "plain_capped_s": 2.2, "rounds": 200,
         "second": {"capped_ratio_median": 1.84, "capped_ratio_range": (1.8, 1.9)}}
    note = training._capped_note(r)
    assert "leaf cap of 2048 (num_leaves 16384" in note and "the same trees as the plain fit's" in note
    assert "the ratio is 1.82, later fits 1.84 (range 1.80-1.90)" in note and "11.00 ms per round" in note
    assert "NOT the plain fit's trees" in training._capped_note({**r, "plain_capped_same_trees": False})
    assert training._capped_note({"ratio": 0.7}) == ""
