"""Compiled kernels (numba) for the sparse path of :class:`~budro.solvers.dual.DualSolver`.

The numpy path prunes a neighbour-list cost in several vectorised passes over the (n, m) lists
(dominance scans, a chord scan, then hull passes over the survivors, then a second exact hull and
a sort of every hull edge for the breakpoint guess), about 30 ms per round on Adult (n = 36177,
m = 32).  The kernel below does the same per column in one pass over its list, in float64, and
picks the breakpoint guess by a bucketed selection instead of a sort.

It computes exactly what the numpy path's documentation promises (the two are checked against
each other and against HiGHS in the tests): per column j, over its listed pairs in increasing
cost,

1. dominance: position r is kept iff ``R_r + tau >= max(R_0 .. R_{r-1})``;
2. runs of equal cost; a run member more than ``tau`` below the run's largest loss is dropped;
3. the tau-hull, built with a stack in cost order: a run is popped when it lies more than
   ``tau`` below the chord between the run under it and the next run (two points of the column
   certify that it never comes within ``tau`` of the column maximum; first and last run kept);
   the members of the surviving runs within ``tau`` of their run's largest loss are the
   candidates.  The numpy path drops runs in simultaneous passes instead; both keep only pairs
   that are certified never to tie, so they evaluate ``g`` identically;
4. the exact hull of those runs (the same stack with ``tau = 0``) gives the column's edges, with
   breakpoints ``e_k = max(dR_k / dC_k, 0)`` where the argmax cost drops by ``dC_k``.

numba is optional (``pip install budro[fast]``); without it the numpy path runs.  Compilation
is cached on disk (``cache=True``) and happens on first use.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["available", "sparse_candidates", "select_breakpoint", "evaluate"]


@functools.cache
def available() -> bool:
    """Whether numba can be imported (checked once)."""
    try:
        import numba  # noqa: F401
    except Exception:  # ImportError, or a numba that fails against this numpy
        return False
    return True


def _kernels():
    """The compiled functions' module (imports numba)."""
    from budro.solvers import _sparse_numba

    return _sparse_numba


def sparse_candidates(rows: np.ndarray, C: np.ndarray, flat: np.ndarray, losses_flat: np.ndarray, tau: float,
                      threads: int | None = 1):
    """Run the candidate kernel on neighbour lists in increasing cost per column.

    Returns ``(rows, cols, R, C, n_dominance, edges_e, edges_dc, last_cost, starts)``: the
    candidate pairs grouped by column in increasing cost, the number kept by dominance, the exact
    hulls' edges, each column's largest hull cost and where each column starts.  ``threads``: the
    kernel's threads (None: numba's default, every core).
    """
    import numba

    kernel = _kernels().candidates

    n, m = rows.shape
    cap = n * m
    out_rows = np.empty(cap, dtype=np.intp)
    out_cols = np.empty(cap, dtype=np.intp)
    out_R = np.empty(cap)
    out_C = np.empty(cap)
    edge_e = np.empty(max(n * (m - 1), 1))
    edge_dc = np.empty(max(n * (m - 1), 1))
    last_cost = np.empty(n)
    before = numba.get_num_threads()
    use = before if threads is None else max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))
    chunks = max(1, min(n, 4 * use))
    bounds = np.linspace(0, n, chunks + 1).round().astype(np.int64)
    counts = np.zeros((chunks, 3), dtype=np.int64)
    col_count = np.empty(n, dtype=np.int64)
    numba.set_num_threads(use)
    try:
        kernel(bounds, rows, C, flat, losses_flat, float(tau), out_rows, out_cols, out_R, out_C, edge_e, edge_dc,
               last_cost, col_count, counts)
    finally:
        numba.set_num_threads(before)
    starts = np.zeros(n, dtype=np.intp)
    np.cumsum(col_count[:-1], out=starts[1:])
    pairs = [slice(bounds[c] * m, bounds[c] * m + counts[c, 0]) for c in range(chunks)]
    edges = [slice(bounds[c] * (m - 1), bounds[c] * (m - 1) + counts[c, 2]) for c in range(chunks)]
    return (np.concatenate([out_rows[s] for s in pairs]), np.concatenate([out_cols[s] for s in pairs]),
            np.concatenate([out_R[s] for s in pairs]), np.concatenate([out_C[s] for s in pairs]),
            int(counts[:, 1].sum()), np.concatenate([edge_e[s] for s in edges]),
            np.concatenate([edge_dc[s] for s in edges]), last_cost, starts)


def select_breakpoint(e: np.ndarray, dc: np.ndarray, need: float) -> float:
    """``min{t in e : sum(dc[e <= t]) >= need}`` (``max(e)`` if never), in O(len(e))."""
    if e.size == 0:
        return 0.0
    return float(_kernels().select(np.ascontiguousarray(e), np.ascontiguousarray(dc), float(need), 1024))


def evaluate(starts: np.ndarray, rows: np.ndarray, R: np.ndarray, C: np.ndarray, eta: float, tie_rtol: float,
             scale: float) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sum of the column maxima of ``R - eta C`` over candidate pairs grouped by column, and each
    column's cheapest / most expensive argmax row and their costs."""
    n = starts.size
    lo = np.empty(n, dtype=np.intp)
    hi = np.empty(n, dtype=np.intp)
    c_lo = np.empty(n)
    c_hi = np.empty(n)
    total = _kernels().evaluate(starts, rows, R, C, float(eta), float(tie_rtol), float(scale), lo, hi, c_lo, c_hi)
    return float(total), lo, hi, c_lo, c_hi
