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
