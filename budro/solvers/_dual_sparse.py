"""The sparse path of :class:`~budro.solvers.dual.DualSolver`: a neighbour-list cost
(:class:`~budro.transport.NeighborCost`) pruned exactly to the pairs that can ever tie, in
O(n m) and never building a column (numpy passes, or the compiled kernel of
:mod:`budro.solvers._sparse_kernels`)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from budro.solvers import _sparse_kernels
from budro.solvers._dual_plan import _Candidates, _upper_hulls, tie_margin
from budro.transport import TransportProblem


@dataclass(frozen=True, eq=False)
class _SparseLayout:
    """A sparse cost's lists, in increasing cost per column, for one labelling (see
    :meth:`DualSolver._sparse_layout`); ``neighbors``/``neighbor_costs`` are the cost's own arrays,
    kept to recognise the same cost object in later rounds."""

    neighbors: np.ndarray
    neighbor_costs: np.ndarray
    labels: np.ndarray
    K: int
    rows: np.ndarray  # (n, m) listed rows of column j, by increasing cost
    C: np.ndarray  # (n, m) their costs
    flat: np.ndarray  # (n, m) rows * K + labels[j]: R[rows, j] = losses.ravel()[flat] (int32 where it fits)
    #: Each column's multiplicity (None: every column once); see budro.solvers._dual_lists.
    weights: np.ndarray | None = None

    @functools.cached_property
    def ones(self) -> np.ndarray:
        """The columns' multiplicities as the compiled kernels take them (ones if unweighted)."""
        return np.ones(self.rows.shape[0]) if self.weights is None else self.weights

    @functools.cached_property
    def workspace(self) -> "_sparse_kernels.Workspace":
        """The compiled kernel's output buffers, reused every round."""
        return _sparse_kernels.Workspace(*self.rows.shape)

    # The numpy path's position-major copies, built on first use (the compiled kernel does not
    # need them: 12 bytes per listed pair).
    @functools.cached_property
    def flat_t(self) -> np.ndarray:
        """(m, n) ``flat``, list position major (fast scans over positions)."""
        return np.ascontiguousarray(self.flat.T)

    @functools.cached_property
    def C_t32(self) -> np.ndarray:
        """(m, n) costs in float32, list position major (the pruning scans)."""
        return np.ascontiguousarray(self.C.T, dtype=np.float32)


def sparse_layout(solver, problem: TransportProblem) -> "_SparseLayout":
    """The neighbour lists in cost order with flat indices into ``losses`` (cached per cost
    object and labels: the graph is fixed for a whole fit, only the losses change)."""
    cost, labels, K = problem.cost, problem.labels, problem.n_labels
    nb, nc = cost.neighbors, cost.neighbor_costs
    cached = solver._layout_cache
    if (
        cached is not None
        and cached.neighbors is nb
        and cached.neighbor_costs is nc
        and cached.K == K
        and np.array_equal(cached.labels, labels)
    ):
        return cached
    nb = np.asarray(nb, dtype=np.intp)
    nc = np.asarray(nc, dtype=np.float64)
    if nc.shape[1] > 1 and np.any(nc[:, 1:] < nc[:, :-1]):
        order = np.argsort(nc, axis=1, kind="stable")
        rows, C = np.take_along_axis(nb, order, axis=1), np.take_along_axis(nc, order, axis=1)
    else:
        rows, C = nb, nc
    flat = flat_index(rows, labels, K)
    layout = _SparseLayout(
        neighbors=cost.neighbors, neighbor_costs=cost.neighbor_costs, labels=labels.copy(), K=K,
        rows=np.ascontiguousarray(rows), C=np.ascontiguousarray(C), flat=np.ascontiguousarray(flat),
    )
    solver._layout_cache = layout
    return layout


def flat_index(rows: np.ndarray, labels: np.ndarray, K: int) -> np.ndarray:
    """``rows * K + labels[j]`` per list entry: where ``R[rows, j]`` lies in ``losses.ravel()``
    (int32 when it fits: the compiled kernel streams through it every round)."""
    dtype = np.int32 if rows.size and (int(rows.max()) + 1) * K <= np.iinfo(np.int32).max else np.intp
    flat = rows.astype(dtype) * dtype(K)
    flat += labels.astype(dtype)[:, None]
    return np.ascontiguousarray(flat)


def sparse_candidates(solver, problem: TransportProblem) -> tuple[_Candidates, int]:
    """The listed pairs of a sparse cost that can ever be (near-)argmax pairs, O(n m).

    Two exact prunings, each dropping only pairs that lie more than ``tau`` (twice the largest
    tie tolerance) below the column maximum at *every* ``eta >= 0``, so that evaluating ``g``
    on the kept pairs gives exactly what a pass over the whole restricted problem (all listed
    pairs, unlisted ones at cost +inf) gives -- values, argmax sets, ``lo`` and ``hi``:

    1. dominance, in increasing cost: row r of column j is dropped if
       ``R_r < max(R_0..R_{r-1}) - tau`` (an earlier, no more expensive row beats it by more
       than tau at every eta).  With losses in no particular order along a list this keeps
       about ``log m`` pairs per column (plus exact ties);
    2. upper hull: a kept pair strictly more than ``tau`` below the chord between its two
       kept neighbours in the same column is dropped (repeated until none is), leaving each
       column's upper concave hull of the points ``(C_ij, R_ij)`` (about 3 pairs on Adult).

    Returns the candidates (by column, in increasing cost within a column) and the number of
    pairs kept by step 1.
    """
    layout = sparse_layout(solver, problem)
    return list_candidates(solver, layout, problem.losses, problem.n, problem.eps, tie_margin(solver, problem))


def list_candidates(solver, layout: _SparseLayout, losses: np.ndarray, n_total: int, eps: float, tau: float
                    ) -> tuple[_Candidates, int]:
    """:func:`sparse_candidates` on any lists in increasing cost per column: ``losses`` (rows, K)
    is what ``layout.flat`` indexes, ``n_total`` the number of columns counted with their
    multiplicities ``layout.weights`` (the plan's columns carry mass ``1 / n_total``)."""
    if solver.kernel == "numba" or (solver.kernel == "auto" and _sparse_kernels.available()):
        return sparse_candidates_compiled(solver, layout, losses, n_total, eps, tau)
    n, m = layout.rows.shape
    losses_flat = losses.reshape(-1)
    width = int(max(1, min(n, solver.block_bytes // max(8 * m, 1))))
    scale = float(np.abs(losses).max())
    unit = 2.0**-24 * scale  # float32 rounding of a loss
    losses32 = losses.astype(np.float32).reshape(-1)
    tau_dom = np.float32(tau + 8.0 * unit)
    tau_chord = np.float32(tau + 32.0 * unit)
    parts = []
    for start in range(0, n, width):
        stop = min(n, start + width)
        # Scan the list positions r = 1..m-1 for all columns of the block at once (rows of
        # the (m, width) array are contiguous): keep r iff R_r + tau >= max(R_0..R_{r-1}).
        # The scans run in float32 (half the memory traffic) with margins that cover its
        # rounding (u = 2^-24 relative, |R| <= scale), so that they only ever keep more.
        R = np.take(losses32, layout.flat_t[:, start:stop])
        keep = np.empty(R.shape, dtype=bool)
        keep[0] = True
        best = R[0].copy()
        shifted = np.empty_like(best)
        top = np.zeros(best.shape, dtype=np.intp)  # position of the first largest loss
        for r in range(1, m):
            np.add(R[r], tau_dom, out=shifted)
            np.greater_equal(shifted, best, out=keep[r])
            np.copyto(top, r, where=R[r] > best)
            np.maximum(best, R[r], out=best)
        if m > 2:
            # The chord from the own row (C = 0) to the first largest loss B: a pair of
            # smaller cost than B more than tau below it is below the hull (step 2 early).
            cols_b = np.arange(stop - start)
            Ct = layout.C_t32[:, start:stop]
            C_top = Ct[top, cols_b]
            flat_b = layout.flat_t[:, start:stop]
            R0 = losses_flat[flat_b[0]]
            RB = losses_flat[flat_b[top, cols_b]]
            CB = layout.C[cols_b + start, top]
            with np.errstate(divide="ignore", invalid="ignore"):
                slope = np.where(CB > 0.0, (RB - R0) / CB, 0.0).astype(np.float32)
            R0 = R0.astype(np.float32)
            chord = np.empty_like(best)
            for r in range(1, m):
                np.multiply(Ct[r], slope, out=chord)
                chord += R0
                np.add(R[r], tau_chord, out=shifted)
                np.logical_and(keep[r], (shifted >= chord) | (Ct[r] >= C_top), out=keep[r])
        idx = np.flatnonzero(keep.T) + start * m  # by column, then list position
        parts.append((idx, keep.sum(axis=0)))
    idx = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    counts = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
    rows = layout.rows.reshape(-1)[idx]
    C = layout.C.reshape(-1)[idx]
    R = losses_flat[layout.flat.reshape(-1)[idx]]
    cols = np.repeat(np.arange(n), counts)
    n_dominance = int(rows.size)
    rows, cols, R, C = _upper_hulls(rows, cols, R, C, tau, n)
    starts = np.searchsorted(cols, np.arange(n))
    return _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C, weights=layout.weights), n_dominance


def sparse_candidates_compiled(solver, layout: _SparseLayout, losses: np.ndarray, n_total: int, eps: float,
                               tau: float) -> tuple[_Candidates, int]:
    """:func:`list_candidates` by the compiled per-column kernel (module
    ``budro.solvers._sparse_kernels``), which also reads the minimiser of g off the exact hulls."""
    losses_flat = np.ascontiguousarray(losses, dtype=np.float64).reshape(-1)
    rows, cols, R, C, n_dom, edge_e, edge_dc, last_cost, starts = _sparse_kernels.sparse_candidates(
        layout.labels, layout.K, layout.C, layout.flat, losses_flat, tau, layout.ones,
        threads=solver.kernel_threads, workspace=layout.workspace)
    total = float(last_cost.sum()) if layout.weights is None else float(last_cost @ layout.weights)
    need = total - n_total * eps
    eta = 0.0 if need <= 0.0 else _sparse_kernels.select_breakpoint(edge_e, edge_dc, need)
    return _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C, breakpoint_eta=eta, compiled=True,
                       weights=layout.weights), n_dom
