"""Time and memory of one solve on the full (dense, n x n) transport problem, estimated before
it starts, and the size past which a solver refuses it (``max_dense_n``).

A solve on the full problem reads all ``n^2`` costs once per pass over the columns (several
passes per solve), so its time is ``seconds_per_entry * n^2``.  The constants below are orders of
magnitude (they depend on the machine, p, the losses and eps), in nanoseconds per cost entry per
cold round (the first round of a fit; warm-started rounds take about half):

============== ====================== ==========================
solver         cost held in memory    cost computed in blocks
============== ====================== ==========================
dual           30                     250
dual-sgd       150                    150 (plus the polish)
entropic       200                    500
entropic-sgd   400                    400
============== ====================== ==========================

Sources: ``python -m budro.solvers._sizing 1500 3000`` on the development machine (2 shared
cores, numpy 2; random embedding with p = 40, binary labels, eps = 0.05) gave, held / blocked:
dual 23-32 / 67-232, dual-sgd 79-153 / 89-138, entropic 205-216 / 183-494, entropic-sgd 187-375 /
143-287 ns; per-entry times grow with n as blocks leave the cache, and the large-n figures are
docs/solvers-benchmark.md's dense ``dual`` on Adult's uncached cost (12-18 s at n = 8000, 259-389 s
at n = 36177: 200-300 ns) and the issue's report of ``entropic`` taking over 10 minutes per round at
n = 40000 (over 375 ns).  Run the command on your machine to see its own figures.

Memory: the cost matrix itself when the cost object holds it (``8 n^2`` bytes, e.g. a
:class:`~budro.transport.DenseCost`), plus a few blocks of ``block_bytes``.  The LP is costed
separately (:func:`lp_estimate`).

The default ``max_dense_n`` keeps a round under about 2 minutes by these constants: 20 000 for
``dual`` and ``dual-sgd`` (~100 s per cold round on a blocked cost), 10 000 for ``entropic`` and
``entropic-sgd`` (~50 s / ~40 s).  Past it the solver raises a
:class:`~budro.exceptions.ValidationError` that names the sparse alternative; ``max_dense_n=None``
(or any larger value) lets it run anyway.

Not refused: ``dual`` on an :class:`~budro.transport.EmbeddingCost` with n >= ``full_min_n``
(default :data:`DEFAULT_FULL_MIN_N`: 1000 with the compiled kernels, 4000 in numpy) takes the
exact full path (:mod:`budro.solvers._dual_full`), which never forms an n x n array: its first
solve scans every column once (one pass over the n^2 pairs; times in docs/solvers-benchmark.md,
``benchmarks/solvers.py full``), later rounds of a fit rescan only the columns whose certificate
fails, and its memory is bounded by the solver's ``max_pairs``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from budro.exceptions import ValidationError

__all__ = ["DenseEstimate", "check_max_dense_n", "check_optional_int", "dense_estimate", "lp_estimate",
           "refuse_dense"]

#: Seconds per cost entry per (cold) round: solver name -> (cost held in memory, computed in blocks).
SECONDS_PER_ENTRY: dict[str, tuple[float, float]] = {
    "dual": (30e-9, 250e-9),
    "dual-sgd": (150e-9, 150e-9),
    "entropic": (200e-9, 500e-9),
    "entropic-sgd": (400e-9, 400e-9),
    # paper-sgd: its SGD plus one argmax pass; 150/165 ns at n = 1500 (held/blocked), 114/75 at 3000
    # (the measurement below, paper-sgd added on the same problems).
    "paper-sgd": (150e-9, 165e-9),
}
#: From which n ``dual`` solves an EmbeddingCost on its exact full path (see the module docstring):
#: ``"auto"`` is FULL_MIN_N_COMPILED points with the compiled kernels and FULL_MIN_N_NUMPY with
#: numpy.  A raw table of 1100 / 1500 / 3000 rows with a subspace metric, 100 rounds (2026-11-28,
#: session script, the same predictions on every path): the full path with the compiled kernels
#: 0.64 / 0.64 / 0.85 s against 3.1 / 5.8 / 26.9 s on column blocks; in numpy 11.4 / 22.1 s at
#: 1500 / 3000 (column blocks there: no faster path below 4000).  Below about 1000 points the
#: complete lists (budro.solvers._dual_lists) take every problem anyway.
DEFAULT_FULL_MIN_N = "auto"
FULL_MIN_N_COMPILED = 1000
FULL_MIN_N_NUMPY = 4000
#: Working blocks a solve keeps alive at once (in units of ``block_bytes``).
WORKING_BLOCKS = 4
#: Default ``max_dense_n`` by solver name.
DEFAULT_MAX_DENSE_N = {"dual": 20_000, "dual-sgd": 20_000, "entropic": 10_000, "entropic-sgd": 10_000,
                       "paper-sgd": 20_000}


@dataclass(frozen=True)
class DenseEstimate:
    """Estimated cost of one round on the full problem."""

    solver: str
    n: int
    seconds: float
    bytes: int

    def describe(self) -> str:
        return f"~{_duration(self.seconds)} and ~{_size(self.bytes)} per round"


def dense_estimate(solver: str, n: int, *, held: bool, block_bytes: int) -> DenseEstimate:
    """Time and memory of one cold round of ``solver`` on the full problem with n points
    (``held``: the cost object holds the n x n matrix)."""
    per_entry = SECONDS_PER_ENTRY.get(solver, SECONDS_PER_ENTRY["entropic"])[0 if held else 1]
    memory = (8 * n * n if held else 0) + WORKING_BLOCKS * int(block_bytes)
    return DenseEstimate(solver, int(n), per_entry * n * n, memory)


def lp_estimate(n: int) -> DenseEstimate:
    """HiGHS on the n^2-variable LP: 1.3 s at n = 300 and 118 s / 0.76 GB at n = 800 (measured,
    docs/solvers.md), i.e. time ~ n^4.6 and ~1.2 KB per variable."""
    return DenseEstimate("lp", int(n), 1.3 * (n / 300.0) ** 4.6, int(1200 * n * n))


def check_max_dense_n(value: Any, owner: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValidationError(f"{owner}: max_dense_n must be None (no limit) or an integer >= 1, got {value!r}")
    return int(value)


def check_optional_int(value: Any, owner: str, name: str, minimum: int, *, words: tuple[str, ...] = ()):
    """None, one of ``words``, or an integer >= ``minimum`` (ValidationError naming ``name``
    otherwise)."""
    if value is None or (isinstance(value, str) and value in words):
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        expected = "".join(f"{w!r}, " for w in words) + f"None or an integer >= {minimum}"
        raise ValidationError(f"{owner}: {name} must be {expected}, got {value!r}")
    return int(value)


def refuse_dense(solver: Any, n: int, *, held: bool = False) -> None:
    """Raise a :class:`~budro.exceptions.ValidationError` when ``n`` exceeds ``solver.max_dense_n``,
    before anything of size n^2 is allocated; the message gives the estimate and what fits."""
    limit = getattr(solver, "max_dense_n", None)
    if limit is None or n <= limit:
        return
    name = solver.name
    est = dense_estimate(name, n, held=held, block_bytes=getattr(solver, "block_bytes", 32 << 20))
    if name == "dual":
        instead = ("use n_neighbors=32 (the sparse adversary: each point moves only to its 32 nearest neighbours, O(n m) "
                   "per round), or give the cost as an EmbeddingCost (n_neighbors='exact'), which 'dual' solves exactly "
                   "without an n x n pass per round from full_min_n points on")
    else:
        dual = dense_estimate("dual", n, held=held, block_bytes=getattr(solver, "block_bytes", 32 << 20))
        instead = (f"use solver 'dual' with n_neighbors=32 (the sparse adversary, O(n m) per round), or solver "
                   f"'dual' on the full problem ({dual.describe()})")
    raise ValidationError(
        f"n = {n}: solver {name!r} on the full (n x n) transport problem needs {est.describe()} (estimated from "
        f"measured constants, see budro.solvers._sizing); {instead}, or raise the solver parameter max_dense_n "
        f"(now {limit}; None for no limit) to run it anyway"
    )


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale or unit == "MiB":
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    return f"{math.ceil(nbytes)} B"  # pragma: no cover


def _measure(sizes: list[int]) -> None:  # pragma: no cover - a measurement, run by hand
    """Print nanoseconds per cost entry of one cold and one warm solve of each dense solver."""
    import time

    import numpy as np

    from budro.solvers.dual import DualSolver
    from budro.solvers.entropic import EntropicSGDSolver, EntropicSolver
    from budro.solvers.paper import PaperSGDSolver
    from budro.solvers.sgd import DualSGDSolver
    from budro.transport import EmbeddingCost, TransportProblem

    rng = np.random.default_rng(0)
    for n in sizes:
        p = 40
        Z = rng.normal(size=(n, p)) / math.sqrt(p)
        margin = Z @ rng.normal(size=p)
        losses = np.column_stack([np.logaddexp(0, margin), np.logaddexp(0, -margin)])
        labels = (rng.random(n) < 1 / (1 + np.exp(-margin))).astype(int)
        for held in (True, False):
            problem = TransportProblem(losses, labels, EmbeddingCost(Z, cache_bytes=(1 << 62) if held else 0), 0.05)
            for solver in (DualSolver(max_dense_n=None), DualSGDSolver(max_dense_n=None),
                           EntropicSolver(max_dense_n=None), EntropicSGDSolver(max_dense_n=None),
                           PaperSGDSolver(max_dense_n=None)):
                t0 = time.perf_counter()
                first = solver.solve(problem)
                t1 = time.perf_counter()
                solver.solve(problem, eta0=first.eta * 1.05 if math.isfinite(first.eta) else None)
                t2 = time.perf_counter()
                print(f"n={n:6d} {'held   ' if held else 'blocked'} {solver.name:13s} cold {(t1 - t0) / n / n * 1e9:6.0f} ns"
                      f"  warm {(t2 - t1) / n / n * 1e9:6.0f} ns per entry", flush=True)


if __name__ == "__main__":  # pragma: no cover
    import sys

    _measure([int(a) for a in sys.argv[1:]] or [2000])
