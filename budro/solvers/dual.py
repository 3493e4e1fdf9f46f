"""Exact transport solver through the one-dimensional dual (paper, Appendix C.3).

The transport LP (paper, eq. (4))::

    maximise   sum_ij Pi_ij R_ij      over Pi >= 0 (n x n)
    subject to Pi^T 1 = 1/n,  <C, Pi> <= eps,          R_ij = losses[i, labels[j]]

is the LP relaxation of a multiple-choice knapsack with a single budget row.  Its Lagrangian dual
is a convex, piecewise linear function of one variable::

    g(eta) = eps * eta + (1/n) sum_j max_i (R_ij - eta * C_ij),        eta >= 0.

:class:`DualSolver` finds a minimiser ``eta*`` *exactly* (it stops on the optimal breakpoint,
certified by the subgradient interval of ``g`` containing 0) with a one-dimensional Kelley cutting
plane, and then builds an optimal plan from the argmax rows at ``eta*``: every column goes to its
cheapest argmax row, and columns are switched to their most expensive argmax row until the
budget binds, the last one fractionally.  The plan's objective equals ``g(eta*)`` (strong duality),
so it is an optimum of the LP, not the paper's heuristic that may exceed the budget.

Costs are read column block by column block; no n x n array is formed unless the cost object
already holds one.  Infinite costs (unlisted pairs of a sparse cost such as
:class:`~budro.transport.NeighborCost`) are forbidden moves, at ``eta = 0`` too.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from budro.exceptions import ValidationError
from budro.solvers import _sizing, _sparse_kernels
from budro.solvers.base import Solver
from budro.transport import DEFAULT_BLOCK_BYTES, DenseCost, EmbeddingCost, TransportProblem, TransportResult

__all__ = ["DualSolver"]

#: Ways of pruning a sparse cost's lists (see DualSolver's ``kernel``).
_KERNELS = ("auto", "numba", "numpy")
#: Geometric factor by which the upper end of the bracket is grown (and a warm start shrunk).
_GROWTH = 4.0
#: Past this eta the products eta * C can no longer be formed safely.
_ETA_CEILING = 1e250


@dataclass(frozen=True, eq=False)
class _DualPoint:
    """``g`` and its argmax structure at one ``eta`` (arrays are per column j)."""

    eta: float
    value: float  # g(eta)
    lo: np.ndarray  # cheapest argmax row of each column
    hi: np.ndarray  # most expensive argmax row of each column
    c_lo: np.ndarray  # C[lo_j, j]
    c_hi: np.ndarray  # C[hi_j, j]

    @property
    def mean_lo(self) -> float:
        """``eps - g'+(eta)``: the budget used by the cheapest argmax plan."""
        return float(self.c_lo.mean())

    @property
    def mean_hi(self) -> float:
        """``eps - g'-(eta)``: the budget used by the most expensive argmax plan."""
        return float(self.c_hi.mean())


@dataclass(frozen=True, eq=False)
class _Candidates:
    """The pairs (i, j) that can be (near-)argmax pairs for some eta in a bracket [a, b].

    Stored by column (``starts[j]`` is the first entry of column j, every column non-empty) with
    their losses and costs, so that ``g`` restricted to them is evaluated in O(len(rows)).
    """

    rows: np.ndarray
    cols: np.ndarray
    starts: np.ndarray
    R: np.ndarray
    C: np.ndarray
    #: The minimiser of g read off the exact hulls' breakpoints, where the compiled kernel
    #: computed it along with the candidates (see :meth:`DualSolver._breakpoint_eta`).
    breakpoint_eta: float | None = None
    #: Made by the compiled kernel: g is evaluated on them by the compiled kernel too.
    compiled: bool = False


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
    flat: np.ndarray  # (n, m) rows * K + labels[j]: R[rows, j] = losses.ravel()[flat]

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


# Position of a point relative to the minimiser of g.
_OPTIMAL, _BELOW, _ABOVE = "optimal", "below", "above"


class DualSolver(Solver):
    """Exact transport plan from the one-dimensional dual, found by a Kelley cutting plane.

    Parameters
    ----------
    tie_rtol : float, default 1e-12
        Relative tolerance under which two values of ``R_ij - eta C_ij`` in a column count as tied
        (the tolerance of column j is ``tie_rtol * (max|losses| + |max_i(R_ij - eta C_ij)|)``).
        Must lie in (0, 1e-3]; values between 1e-14 and 1e-8 are exact in float64.  Without a
        tolerance rounding hides the exact ties at ``eta*`` and the optimum is only reached through
        the fallback described below.
    max_iter : int, default 100
        Most evaluations of ``g`` (bracketing included); 1 to 20 are typical.  If the limit is
        hit the returned plan is still feasible, ``converged`` is False and ``info["gap"]`` bounds
        its suboptimality.
    block_bytes : int, default ``budro.transport.DEFAULT_BLOCK_BYTES`` (32 MiB)
        Memory of one block of cost columns; a few temporaries of that size are used per block.
    kernel : {"auto", "numba", "numpy"}, default "auto"
        How the sparse path prunes the neighbour lists: a compiled per-column kernel
        (``"numba"``, needs the optional numba, ``pip install budro[fast]``; 3-4x faster on
        Adult), vectorised numpy passes (``"numpy"``), or numba when it is installed
        (``"auto"``).  Both compute the same candidate pairs up to pairs that can never tie, and
        give the same result.  Dense and embedding costs do not use it.
    kernel_threads : int or None, default 1
        Threads of the compiled kernel (None: numba's default, every core).  One by default: on
        a 2-core machine a second kernel thread competes with the booster's own threads between
        rounds (Adult, XGBoost, 2 threads: 31 ms per BuDRO round with two kernel threads, 24 ms
        with one; docs/performance.md).
    max_dense_n : int or None, default 20000
        Largest n accepted on the full (dense) problem; larger ones are refused before any cost
        is read, with the estimated time and memory per round (about 250 ns per cost entry on a
        blocked cost: ~100 s at n = 20000, ~7 min at n = 40000; see :mod:`budro.solvers._sizing`)
        and the sparse alternative (``n_neighbors``).  None: no limit.  Sparse costs are never
        limited.

    Notes
    -----
    Each evaluation of ``g`` at ``eta`` records, per column j, the argmax set ``A_j`` (with the tie
    tolerance) and its cheapest and most expensive rows ``lo_j``, ``hi_j``.  With ``c_lo`` and
    ``c_hi`` their mean costs, ``g'+(eta) = eps - c_lo`` and ``g'-(eta) = eps - c_hi``, so ``eta``
    is optimal iff ``c_lo <= eps <= c_hi`` (at ``eta = 0``: iff ``c_lo <= eps``).

    The bracket ``[a, b]`` (``g'+(a) < 0 < g'-(b)``) starts at ``a = 0`` and ``b = 1`` grown by 4
    (or around the warm start ``eta0``); the next point is where the supporting lines of ``g`` at
    ``a`` (rows ``lo(a)``) and at ``b`` (rows ``hi(b)``) meet.  As ``g`` has finitely many pieces
    this stops exactly on the optimal breakpoint.  Should the bracket stop shrinking in floating
    point before that (or ``max_iter`` run out), the plan mixes the rows ``hi(b)`` (within budget)
    with ``lo(a)`` (over budget) in the same way, which is feasible and optimal up to the width of
    the bracket; ``info["certified"]`` tells the two cases apart.

    ``eta`` of the result is the optimal dual variable, ``dual_objective = g(eta)``,
    ``n_iter`` the number of evaluations of ``g``; ``info`` holds ``split_column`` (the one
    column split between two rows, or None), ``n_switched``, ``bracket``, ``certified``,
    ``stalled``, ``candidate_pairs``, ``full_evaluations`` and ``gap`` (``dual_objective -
    objective``, a bound on the suboptimality).

    Once the bracket is narrow, one pass over C collects the pairs that can tie anywhere inside
    it (at most 64 per column on average, else the solver keeps evaluating whole blocks); the
    remaining evaluations of ``g`` touch only those pairs and give exactly the same values, and
    they are filtered again each time the bracket halves.  A warm start ``eta0`` is bracketed
    tightly first (``eta0 * (1 +/- s)``, ``s = 1/16, 1/4, 1, 4``).

    A sparse cost (``cost.is_sparse`` with ``neighbors`` and ``neighbor_costs``, e.g.
    :class:`~budro.transport.NeighborCost`) takes an O(n m) path that never builds a column: the
    listed pairs are pruned exactly (dominance, then each column's upper hull; see
    :meth:`_sparse_candidates`), ``eta*`` is read off the hulls' breakpoints
    (:meth:`_breakpoint_eta`) and certified by one evaluation (the cutting plane above takes over
    should it not be), so ``eta0`` is not needed there.  The result is the same as the dense path's
    on the restricted problem (unlisted pairs at +inf).
    """

    name = "dual"
    guarantee = (
        "The plan is an exact optimum of the transport LP (eq. (4)): its objective equals the dual "
        "value g(eta*) up to rounding, it meets the budget, and it has at most n + 1 nonzeros with "
        "at most one column split between two rows."
    )
    exact = True

    def __init__(self, tie_rtol: float = 1e-12, max_iter: int = 100, block_bytes: int = DEFAULT_BLOCK_BYTES,
                 kernel: str = "auto", kernel_threads: int | None = 1,
                 max_dense_n: int | None = _sizing.DEFAULT_MAX_DENSE_N["dual"]):
        if isinstance(tie_rtol, bool) or not isinstance(tie_rtol, numbers.Real):
            raise ValidationError(f"DualSolver: tie_rtol must be a number in (0, 1e-3], got {tie_rtol!r}")
        if not (0.0 < float(tie_rtol) <= 1e-3):
            raise ValidationError(
                f"DualSolver: tie_rtol must be a number in (0, 1e-3] (relative tie tolerance; 1e-12 is the "
                f"default), got {tie_rtol!r}"
            )
        if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
            raise ValidationError(f"DualSolver: max_iter must be an integer >= 1, got {max_iter!r}")
        if isinstance(block_bytes, bool) or not isinstance(block_bytes, numbers.Integral) or block_bytes < 1:
            raise ValidationError(f"DualSolver: block_bytes must be an integer >= 1 (bytes per block), got {block_bytes!r}")
        if kernel not in _KERNELS:
            raise ValidationError(f"DualSolver: kernel must be one of {', '.join(map(repr, _KERNELS))}, got {kernel!r}")
        if kernel == "numba" and not _sparse_kernels.available():
            raise ValidationError(
                "DualSolver: kernel='numba' needs numba, which is not installed (pip install 'budro[fast]'); "
                "use kernel='auto' or 'numpy'"
            )
        self.tie_rtol = float(tie_rtol)
        self.max_iter = int(max_iter)
        self.block_bytes = int(block_bytes)
        if kernel_threads is not None and (isinstance(kernel_threads, bool) or not isinstance(kernel_threads, numbers.Integral)
                                           or kernel_threads < 1):
            raise ValidationError(f"DualSolver: kernel_threads must be an integer >= 1 or None, got {kernel_threads!r}")
        self.kernel = kernel
        self.kernel_threads = None if kernel_threads is None else int(kernel_threads)
        self.max_dense_n = _sizing.check_max_dense_n(max_dense_n, "DualSolver")
        self._layout_cache: _SparseLayout | None = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_layout_cache"] = None  # per-fit scratch, rebuilt on demand
        return state

    def __repr__(self) -> str:
        return (f"DualSolver(tie_rtol={self.tie_rtol:g}, max_iter={self.max_iter}, block_bytes={self.block_bytes}, "
                f"kernel={self.kernel!r}, kernel_threads={self.kernel_threads}, "
                f"max_dense_n={getattr(self, 'max_dense_n', None)})")

    def check_size(self, n: int, *, sparse: bool = False, held: bool = False) -> None:
        """Refuse (ValidationError) a full problem of n points past ``max_dense_n``, with the estimate."""
        if not sparse:
            _sizing.refuse_dense(self, n, held=held)

    # ------------------------------------------------------------------ the dual function

    def _block_columns(self, problem: TransportProblem) -> int:
        """Columns per block: ``block_bytes`` worth of float64 columns, whether or not C is dense."""
        cost, n = problem.cost, problem.n
        if cost.is_dense:
            return int(max(1, min(n, self.block_bytes // max(8 * n, 1))))
        return int(max(1, min(n, cost.block_size(self.block_bytes))))

    def _evaluate(self, problem: TransportProblem, eta: float) -> _DualPoint:
        """``g(eta)`` with each column's cheapest and most expensive argmax row (block by block)."""
        n, eps = problem.n, problem.eps
        cost, losses, labels = problem.cost, problem.losses, problem.labels
        scale = float(np.abs(losses).max())
        lo = np.empty(n, dtype=np.intp)
        hi = np.empty(n, dtype=np.intp)
        c_lo = np.empty(n)
        c_hi = np.empty(n)
        vmax_sum = 0.0
        width = self._block_columns(problem)
        # 0 * inf: unlisted pairs (any cost that may hold +inf) stay out at eta = 0 too.
        forbid = eta == 0.0 and not isinstance(cost, (DenseCost, EmbeddingCost))
        # Flat buffers viewed as C-ordered (n, m) blocks: same layout as the cost blocks, reused.
        v_buf = np.empty(n * width)
        t_buf = np.empty(n * width) if eta != 0.0 else None
        m_buf = np.empty(n * width, dtype=bool)
        for start in range(0, n, width):
            stop = min(n, start + width)
            m = stop - start
            Cb = cost.column_block(start, stop)
            V = v_buf[: n * m].reshape(n, m)
            np.take(losses, labels[start:stop], axis=1, out=V, mode="clip")  # R[:, start:stop]
            if t_buf is not None:
                T = t_buf[: n * m].reshape(n, m)
                np.multiply(Cb, eta, out=T)
                np.subtract(V, T, out=V)
            elif forbid:
                np.copyto(V, -np.inf, where=np.isinf(Cb))
            vmax = V.max(axis=0)
            vmax_sum += float(vmax.sum())
            ties = m_buf[: n * m].reshape(n, m)
            np.greater_equal(V, vmax - self.tie_rtol * (scale + np.abs(vmax)), out=ties)
            # V is free now; the argmax set of every column is non-empty (it holds the max itself).
            sl = slice(start, stop)
            _tie_extremes(Cb, ties, V, lo[sl], hi[sl], c_lo[sl], c_hi[sl])
        value = eps * eta + vmax_sum / n
        return _DualPoint(eta=float(eta), value=value, lo=lo, hi=hi, c_lo=c_lo, c_hi=c_hi)

    def _candidates(self, problem: TransportProblem, a: _DualPoint, b: _DualPoint) -> _Candidates | None:
        """The pairs that can be near-argmax pairs anywhere in ``[a.eta, b.eta]`` (one pass over C).

        For eta in the bracket, ``g_j(eta) >= max(La_j(eta), Lb_j(eta))`` where ``La_j`` is the line
        of row ``lo_j(a)`` and ``Lb_j`` the line of row ``hi_j(b)``.  Row i ties at some eta only if
        ``h(eta) = line_i(eta) - max(La_j, Lb_j)(eta) >= -tol``; h is concave with its kink where the
        two lines cross, so testing h at a, b and that crossing point ``x_j`` is enough.  Evaluating
        ``g`` on these pairs reproduces the full evaluation exactly (same arithmetic per pair), for
        every eta in the bracket and hence in every later, narrower bracket.  Returns None when the
        pairs would be too many to be worth it (e.g. massive exact ties).
        """
        n = problem.n
        cost, losses, labels = problem.cost, problem.losses, problem.labels
        thresholds = self._thresholds(problem, a, b)
        cap = _CANDIDATES_PER_COLUMN * n
        width = self._block_columns(problem)
        v_buf, t_buf = np.empty(n * width), np.empty(n * width)
        keep_buf, hit_buf = np.empty(n * width, dtype=bool), np.empty(n * width, dtype=bool)
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        total = 0
        for start in range(0, n, width):
            stop = min(n, start + width)
            m = stop - start
            Cb = cost.column_block(start, stop)
            V = v_buf[: n * m].reshape(n, m)
            T = t_buf[: n * m].reshape(n, m)
            keep = keep_buf[: n * m].reshape(n, m)
            hit = hit_buf[: n * m].reshape(n, m)
            np.take(losses, labels[start:stop], axis=1, out=V, mode="clip")
            keep.fill(False)
            for eta, thr in thresholds:
                eta_b = eta[start:stop] if isinstance(eta, np.ndarray) else eta
                with np.errstate(invalid="ignore"):  # 0 * inf for forbidden pairs: NaN, never kept
                    np.multiply(Cb, eta_b, out=T)
                np.subtract(V, T, out=T)
                np.greater_equal(T, thr[start:stop], out=hit)
                np.logical_or(keep, hit, out=keep)
            total += int(np.count_nonzero(keep))
            if total > cap * stop / n:  # on course to exceed the cap: give up early
                return None
            rows, cols = np.nonzero(keep)
            order = np.argsort(cols, kind="stable")
            rows, cols = rows[order], cols[order]
            parts.append((rows, cols + start, np.asarray(Cb[rows, cols], dtype=np.float64)))
        rows = np.concatenate([p[0] for p in parts])
        cols = np.concatenate([p[1] for p in parts])
        C = np.concatenate([p[2] for p in parts])
        starts = np.searchsorted(cols, np.arange(n))
        if np.any(np.bincount(cols, minlength=n) == 0):
            return None  # cannot happen (row lo_j(a) always qualifies); stay on the safe side
        return _Candidates(rows=rows, cols=cols, starts=starts, R=losses[rows, labels[cols]], C=C)

    def _tau(self, problem: TransportProblem) -> float:
        """A margin above every column's tie tolerance (room for rounding included).

        Every tie tolerance ``tie_rtol * (scale + |vmax_j|)`` is at most ``2 * tie_rtol * scale``
        (``vmax_j`` lies between ``R_jj`` and ``max R``); twice that leaves room for rounding.
        """
        return 4.0 * self.tie_rtol * float(np.abs(problem.losses).max())

    def _thresholds(self, problem: TransportProblem, a: _DualPoint, b: _DualPoint) -> list:
        """``(eta, threshold_j)`` at ``a.eta``, ``b.eta`` and the crossing points ``x_j`` (see
        :meth:`_candidates`): a pair below all three thresholds never ties inside ``[a, b]``."""
        losses, labels = problem.losses, problem.labels
        tau = self._tau(problem)
        ra, ca = losses[a.lo, labels], a.c_lo
        rb, cb = losses[b.hi, labels], b.c_hi
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(ca > cb, (ra - rb) / (ca - cb), a.eta)
        x = np.clip(np.nan_to_num(x, nan=a.eta), a.eta, b.eta)
        return [(eta, np.maximum(ra - eta * ca, rb - eta * cb) - tau) for eta in (a.eta, b.eta, x)]

    def _narrow(self, problem: TransportProblem, cand: _Candidates, a: _DualPoint, b: _DualPoint) -> _Candidates:
        """The candidate pairs that can still tie inside ``[a.eta, b.eta]`` (same test as
        :meth:`_candidates`, applied to the pairs already held: O(len(cand.rows)))."""
        keep = np.zeros(cand.rows.size, dtype=bool)
        for eta, thr in self._thresholds(problem, a, b):
            eta_p = eta[cand.cols] if isinstance(eta, np.ndarray) else eta
            keep |= cand.R - cand.C * eta_p >= thr[cand.cols]
        if keep.all():
            return cand
        counts = np.bincount(cand.cols[keep], minlength=problem.n)
        if np.any(counts == 0):
            return cand  # cannot happen (row lo_j(a) always qualifies); stay on the safe side
        starts = np.zeros(problem.n, dtype=np.intp)
        np.cumsum(counts[:-1], out=starts[1:])
        return _Candidates(rows=cand.rows[keep], cols=cand.cols[keep], starts=starts, R=cand.R[keep], C=cand.C[keep])

    def _sparse_layout(self, problem: TransportProblem) -> "_SparseLayout":
        """The neighbour lists in cost order with flat indices into ``losses`` (cached per cost
        object and labels: the graph is fixed for a whole fit, only the losses change)."""
        cost, labels, K = problem.cost, problem.labels, problem.n_labels
        nb, nc = cost.neighbors, cost.neighbor_costs
        cached = self._layout_cache
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
        flat = rows * K + labels[:, None]
        layout = _SparseLayout(
            neighbors=cost.neighbors, neighbor_costs=cost.neighbor_costs, labels=labels.copy(), K=K,
            rows=np.ascontiguousarray(rows), C=np.ascontiguousarray(C), flat=np.ascontiguousarray(flat),
        )
        self._layout_cache = layout
        return layout

    def _sparse_candidates(self, problem: TransportProblem) -> tuple[_Candidates, int]:
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
        layout = self._sparse_layout(problem)
        tau = self._tau(problem)
        if self.kernel == "numba" or (self.kernel == "auto" and _sparse_kernels.available()):
            return self._sparse_candidates_compiled(problem, layout, tau)
        n, m = layout.rows.shape
        losses_flat = problem.losses.reshape(-1)
        width = int(max(1, min(n, self.block_bytes // max(8 * m, 1))))
        scale = float(np.abs(problem.losses).max())
        unit = 2.0**-24 * scale  # float32 rounding of a loss
        losses32 = problem.losses.astype(np.float32).reshape(-1)
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
        return _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C), n_dominance

    def _sparse_candidates_compiled(self, problem: TransportProblem, layout: "_SparseLayout", tau: float
                                    ) -> tuple[_Candidates, int]:
        """:meth:`_sparse_candidates` by the compiled per-column kernel (module
        ``budro.solvers._sparse_kernels``), which also reads the breakpoint guess off the exact hulls."""
        n = problem.n
        losses_flat = np.ascontiguousarray(problem.losses, dtype=np.float64).reshape(-1)
        rows, cols, R, C, n_dom, edge_e, edge_dc, last_cost, starts = _sparse_kernels.sparse_candidates(
            layout.rows, layout.C, layout.flat, losses_flat, tau, threads=self.kernel_threads)
        need = float(last_cost.sum()) - n * problem.eps
        eta = 0.0 if need <= 0.0 else _sparse_kernels.select_breakpoint(edge_e, edge_dc, need)
        return _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C, breakpoint_eta=eta, compiled=True), n_dom

    @staticmethod
    def _breakpoint_eta(problem: TransportProblem, cand: _Candidates) -> float:
        """The minimiser of ``g`` from the breakpoints of the hulls (paper's Appendix C.3, the
        "enumerate the corners" route), for candidates that are upper hulls in cost order.

        On a hull ``(C_0, R_0), ..., (C_h, R_h)`` (increasing cost and loss, decreasing slopes)
        the argmax moves from ``h`` down to ``0`` as eta grows, from ``k + 1`` to ``k`` at
        ``e_k = (R_{k+1} - R_k) / (C_{k+1} - C_k)``, where the column's cost drops by
        ``C_{k+1} - C_k``.  Summing the drops in increasing ``e`` gives the mean argmax cost as a
        function of eta; the minimiser is the first ``e`` where it reaches ``eps`` (0 if the
        hull tops are within budget).  The value is a guess to be certified by one evaluation.
        """
        if cand.breakpoint_eta is not None:
            return cand.breakpoint_eta
        n, eps = problem.n, problem.eps
        # The candidates keep pairs within tau below a column's hull (they may tie at eta*); the
        # breakpoints are those of the exact hull, so those pairs are dropped here (tau = 0):
        # with them the transitions would be summed out of order and the guess could miss eta*
        # by a hair, leaving the cutting plane a dozen evaluations to do.
        _, cols, R, C = _upper_hulls(cand.rows, cand.cols, cand.R, cand.C, 0.0, n)
        last = np.empty(cols.size, dtype=bool)
        last[-1] = True
        np.not_equal(cols[1:], cols[:-1], out=last[:-1])
        need = float(C[last].sum()) - n * eps  # mean cost at eta = 0+ exceeds eps by need / n
        inner = ~last[:-1]
        dC = (C[1:] - C[:-1])[inner]
        if need <= 0.0 or dC.size == 0:
            return 0.0
        dR = (R[1:] - R[:-1])[inner]
        useful = dC > 0.0
        e = np.maximum(dR[useful] / dC[useful], 0.0)
        dC = dC[useful]
        order = np.argsort(e)
        reach = np.cumsum(dC[order])
        k = min(int(np.searchsorted(reach, need, side="left")), order.size - 1)
        return float(e[order[k]])

    def _evaluate_candidates(self, problem: TransportProblem, cand: _Candidates, eta: float) -> _DualPoint:
        """:meth:`_evaluate` restricted to the candidate pairs (same values, O(len(cand.rows)))."""
        n = problem.n
        scale = float(np.abs(problem.losses).max())
        if cand.compiled:
            total, lo, hi, c_lo, c_hi = _sparse_kernels.evaluate(cand.starts, cand.rows, cand.R, cand.C, eta,
                                                                 self.tie_rtol, scale)
            return _DualPoint(eta=float(eta), value=problem.eps * eta + total / n, lo=lo, hi=hi, c_lo=c_lo, c_hi=c_hi)
        V = cand.R - cand.C * eta
        vmax = np.maximum.reduceat(V, cand.starts)
        # The argmax sets, as a list grouped by column (every column has at least its maximum),
        # so that the rest works on about n entries instead of all candidate pairs.
        tied = np.flatnonzero(V >= (vmax - self.tie_rtol * (scale + np.abs(vmax)))[cand.cols])
        t_cols, t_C, t_rows = cand.cols[tied], cand.C[tied], cand.rows[tied]
        t_starts = np.flatnonzero(np.concatenate(([True], t_cols[1:] != t_cols[:-1])))
        c_lo = np.minimum.reduceat(t_C, t_starts)
        c_hi = np.maximum.reduceat(t_C, t_starts)
        lo = np.minimum.reduceat(np.where(t_C == c_lo[t_cols], t_rows, n), t_starts)
        hi = np.minimum.reduceat(np.where(t_C == c_hi[t_cols], t_rows, n), t_starts)
        value = problem.eps * eta + float(vmax.sum()) / n
        return _DualPoint(eta=float(eta), value=value, lo=lo, hi=hi, c_lo=c_lo, c_hi=c_hi)

    @staticmethod
    def _position(point: _DualPoint, eps: float) -> str:
        """Where ``point`` lies relative to the minimisers of g, from its subgradient interval."""
        if point.mean_lo > eps:
            return _BELOW  # g'+(eta) < 0: the minimiser is to the right
        if point.eta == 0.0 or point.mean_hi >= eps:
            return _OPTIMAL  # 0 in [g'-(eta), g'+(eta)] (only g'+ matters at eta = 0)
        return _ABOVE  # g'-(eta) > 0: the minimiser is to the left

    # ------------------------------------------------------------------ solve

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        eps = problem.eps
        n_eval = n_full = 0  # only the bracket ends are kept, not every evaluated point

        # A sparse cost (capability ``is_sparse`` with ``neighbors``/``neighbor_costs``) is never
        # read column by column: its listed pairs that can ever tie are gathered once, O(n m).
        #    The minimiser is then read off the hulls' breakpoints and certified by one evaluation
        #    (the bracketing below, started there, is only a fallback for rounding near ties).
        sparse = bool(getattr(problem.cost, "is_sparse", False)) and hasattr(problem.cost, "neighbors")
        self.check_size(problem.n, sparse=sparse, held=bool(problem.cost.is_dense))
        candidates: _Candidates | None = None
        pruned_pairs = None
        if sparse:
            candidates, pruned_pairs = self._sparse_candidates(problem)
            eta0 = self._breakpoint_eta(problem, candidates)
        initial_pairs = None if candidates is None else int(candidates.rows.size)

        def probe(eta: float) -> tuple[_DualPoint, str]:
            nonlocal n_eval, n_full
            n_eval += 1
            if candidates is not None:
                point = self._evaluate_candidates(problem, candidates, eta)
            else:
                n_full += 1
                point = self._evaluate(problem, eta)
            return point, self._position(point, eps)

        def budget_left() -> bool:
            return n_eval < self.max_iter

        found: _DualPoint | None = None
        a: _DualPoint | None = None  # g'+(a) < 0
        b: _DualPoint | None = None  # g'-(b) > 0

        # 1. Bracket the minimiser.  A warm start eta0 (last round's eta*, which moves little from
        #    round to round) is bracketed tightly first: eta0 * (1 + s) or eta0 / (1 + s) for
        #    s = 1/16, 1/4, 1, 4, so that the cutting plane starts on a short bracket with few
        #    breakpoints of g inside; a cold start brackets 0 and 1, 4, 16, ...
        grow_from = 1.0
        if eta0 is not None and eta0 > 0.0:
            point, where = probe(eta0)
            if where == _OPTIMAL:
                found = point
            elif where == _BELOW:
                a = point
                for s in _WARM_STEPS:
                    if not budget_left():
                        break
                    point, where = probe(eta0 * (1.0 + s))
                    if where == _OPTIMAL:
                        found = point
                    elif where == _BELOW:
                        a = point
                        continue
                    else:
                        b = point
                    break
                grow_from = eta0 * (1.0 + _WARM_STEPS[-1]) * _GROWTH
            else:
                b = point
                for eta in [eta0 / (1.0 + s) for s in _WARM_STEPS] + [0.0]:
                    if not budget_left():
                        break
                    point, where = probe(eta)
                    if where == _OPTIMAL:
                        found = point
                    elif where == _BELOW:
                        a = point
                    else:
                        b = point
                        continue
                    break
        else:
            point, where = probe(0.0)
            if where == _OPTIMAL:
                found = point
            else:
                a = point  # at eta = 0 a non-optimal point always lies below the minimiser
        eta = grow_from
        while found is None and b is None and budget_left() and eta <= _ETA_CEILING:
            point, where = probe(eta)
            if where == _OPTIMAL:
                found = point
            elif where == _BELOW:
                a = point
                eta *= _GROWTH
            else:
                b = point

        # 2. Kelley cutting plane on [a, b].  The supporting line at a uses the rows lo(a) (slope
        #    eps - mean c_lo(a) < 0), the one at b the rows hi(b) (slope eps - mean c_hi(b) > 0);
        #    eps * eta is common to both, so they meet where mean(R - eta C) agree.  Every column
        #    difference below is >= 0 (argmax costs fall as eta grows), so the sums do not cancel.
        #    Once the bracket is narrow enough, g is evaluated only on the pairs that can matter
        #    inside it (tried again each time the bracket has halved since the last try).
        stalled = False
        tried_width = math.inf
        while found is None and a is not None and b is not None and budget_left():
            if b.eta - a.eta <= 0.5 * tried_width:
                tried_width = b.eta - a.eta
                if candidates is None:
                    candidates = self._candidates(problem, a, b)
                else:
                    candidates = self._narrow(problem, candidates, a, b)
            dr = problem.losses[a.lo, problem.labels] - problem.losses[b.hi, problem.labels]
            dc = a.c_lo - b.c_hi
            den = float(dc.mean())
            t = float(dr.mean()) / den if den > 0.0 else math.nan
            if not (a.eta < t < b.eta):
                stalled = True  # the bracket cannot shrink any more in floating point
                break
            point, where = probe(t)
            if where == _OPTIMAL:
                found = point
            elif where == _BELOW:
                a = point
            else:
                b = point

        # 3. Primal recovery.  The argmax costs of a sparse cost are its listed costs, exactly what
        #    cost.entries would return, so they are passed on instead of being looked up again.
        n = problem.n
        if found is not None:
            cheap, dear, switch = (found.lo, found.c_lo), (found.hi, found.c_hi), found.eta > 0.0
            reported = found
        elif a is not None and b is not None:
            # The bracket collapsed (or max_iter was hit) without a certificate: mix the rows that
            # define the two supporting lines; both are argmax rows near the minimiser.
            cheap, dear, switch = (b.hi, b.c_hi), (a.lo, a.c_lo), True
            reported = a if a.value <= b.value else b
        elif a is not None:
            # No upper bracket within max_iter: moving nothing is always feasible.
            cheap, dear, switch = (np.arange(n), np.zeros(n)), (a.lo, a.c_lo), True
            reported = a
        else:
            assert b is not None
            cheap, dear, switch = (b.hi, b.c_hi), (b.hi, b.c_hi), False
            reported = b
        meta = dict(eta=reported.eta, dual_objective=reported.value, n_iter=n_eval,
                    converged=found is not None or stalled, solver=self.name)
        info = {
            "bracket": (a.eta if a is not None else math.nan, b.eta if b is not None else math.nan),
            "certified": found is not None,
            "stalled": stalled,
            "candidate_pairs": None if candidates is None else int(candidates.rows.size),
            "dominance_pairs": pruned_pairs,
            "initial_pairs": initial_pairs,
            "sparse": sparse,
            "full_evaluations": n_full,
        }
        if sparse:
            rows, cols, vals, entry_costs, split_column, n_switched = _switch_entries(
                problem, cheap[0], dear[0], switch, costs=(cheap[1], dear[1])
            )
            result = _result_from_entries(problem, rows, cols, vals, entry_costs, **meta, info=info)
        else:
            plan, split_column, n_switched = _switch_until_budget(problem, cheap[0], dear[0], switch)
            result = TransportResult.from_plan(problem, plan, **meta, info=info)
        result.info.update(split_column=split_column, n_switched=n_switched)
        result.info["gap"] = reported.value - result.objective
        return result


def _upper_hulls(rows, cols, R, C, tau, ncols):
    """Drop, column by column, pairs that lie more than ``tau`` below the upper hull of the
    column's points ``(C, R)`` (arrays grouped by column, increasing cost within a column; see
    :meth:`DualSolver._sparse_candidates`).

    Pairs of equal cost form a run; a run member more than ``tau`` below the run's largest loss
    is dropped, and the hull is built on the runs (each at its largest loss), so that duplicated
    points never shield each other.  A run more than ``tau`` below the chord between its kept
    neighbour runs has ``V < max(V_prev, V_next) - tau`` for ``V = R - eta C`` at every eta, so
    none of its pairs is ever within a tie tolerance of the column maximum; dropping all such runs
    at once is therefore safe.  The first run (cost 0: the own row) and the last (largest loss)
    of a column are never dropped.
    """
    size = cols.size
    if size == 0:
        return rows, cols, R, C
    # Runs of equal cost within a column.
    run_start = np.empty(size, dtype=bool)
    run_start[0] = True
    np.not_equal(cols[1:], cols[:-1], out=run_start[1:])
    run_start[1:] |= C[1:] != C[:-1]
    starts = np.flatnonzero(run_start)
    run_of = np.cumsum(run_start) - 1
    r_R = np.maximum.reduceat(R, starts)  # each run at its largest loss
    r_cols, r_C = cols[starts], C[starts]
    member = R >= r_R[run_of] - tau
    if not member.all():
        rows, cols, R, C, run_of = rows[member], cols[member], R[member], C[member], run_of[member]
    # The hull over runs, pass by pass; after the first pass only the columns that lost a run
    # are looked at again.  `ids` are the runs examined, whole columns, in order.
    alive = np.ones(starts.size, dtype=bool)
    ids = np.arange(starts.size)
    while ids.size >= 3:
        c, cc, rr = r_cols[ids], r_C[ids], r_R[ids]
        col_first = np.empty(ids.size, dtype=bool)
        col_first[0] = True
        np.not_equal(c[1:], c[:-1], out=col_first[1:])
        col_last = np.empty(ids.size, dtype=bool)
        col_last[-1] = True
        col_last[:-1] = col_first[1:]
        interior = ~(col_first | col_last)[1:-1]
        dC1 = cc[1:-1] - cc[:-2]
        dC2 = cc[2:] - cc[:-2]
        dR1 = rr[1:-1] - rr[:-2]
        dR2 = rr[2:] - rr[:-2]
        # R_k < R_{k-1} + dR2 * dC1 / dC2 - tau, multiplied by dC2 > 0 (costs increase along runs).
        below = dR1 * dC2 < dR2 * dC1 - tau * dC2
        below &= interior
        gone = ids[1:-1][below]
        if gone.size == 0:
            break
        alive[gone] = False
        dirty = np.zeros(ncols, dtype=bool)
        dirty[r_cols[gone]] = True
        ids = ids[dirty[c] & alive[ids]]
    keep = alive[run_of]
    if keep.all():
        return rows, cols, R, C
    return rows[keep], cols[keep], R[keep], C[keep]


def _switch_until_budget(
    problem: TransportProblem,
    rows_cheap: np.ndarray,
    rows_dear: np.ndarray,
    switch: bool,
    *,
    costs: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[sp.csr_array, int | None, int]:
    """Plan sending column j to ``rows_cheap[j]``, switching columns (in index order) to
    ``rows_dear[j]`` until ``<C, Pi> = eps``, the last one split fractionally.

    Costs are recomputed in float64 with ``cost.entries`` so that the budget binds for the costs
    the result reports, unless ``costs`` (``C[rows_cheap[j], j]``, ``C[rows_dear[j], j]``) gives
    exactly those values already.  Returns the plan, the split column (or None) and how many
    columns moved entirely to ``rows_dear``.
    """
    rows, cols, vals, _, split_column, n_switched = _switch_entries(problem, rows_cheap, rows_dear, switch, costs=costs)
    plan = sp.csr_array((vals, (rows, cols)), shape=(problem.n, problem.n))
    return plan, split_column, n_switched


def _switch_entries(
    problem: TransportProblem,
    rows_cheap: np.ndarray,
    rows_dear: np.ndarray,
    switch: bool,
    *,
    costs: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, int | None, int]:
    """:func:`_switch_until_budget` as coordinate lists ``rows, cols, vals`` plus the cost of
    each entry (None unless ``costs`` was given), the split column and the number switched."""
    n, eps = problem.n, problem.eps
    cols = np.arange(n)
    rows = np.array(rows_cheap, dtype=np.intp, copy=True)
    vals = np.full(n, 1.0 / n)
    entry_costs = None if costs is None else np.array(costs[0], dtype=np.float64, copy=True)
    split_column: int | None = None
    n_switched = 0
    if switch:
        if costs is None:
            cost_cheap = problem.cost.entries(rows_cheap, cols)
            cost_dear = problem.cost.entries(rows_dear, cols)
        else:
            cost_cheap, cost_dear = costs
        deficit = n * eps - float(cost_cheap.sum())  # in units of summed column costs
        delta = np.where(rows_dear != rows_cheap, cost_dear - cost_cheap, 0.0)
        delta[delta < 0] = 0.0
        if deficit > 0.0 and np.any(delta > 0.0):
            reach = np.cumsum(delta)
            k = int(np.searchsorted(reach, deficit, side="left"))
            movers = np.flatnonzero(delta[:k] > 0.0)
            rows[movers] = rows_dear[movers]
            if entry_costs is not None:
                entry_costs[movers] = cost_dear[movers]
            n_switched = movers.size
            if k < n:
                before = float(reach[k - 1]) if k > 0 else 0.0
                theta = min(1.0, max(0.0, (deficit - before) / delta[k]))
                if theta >= 1.0:
                    rows[k] = rows_dear[k]
                    if entry_costs is not None:
                        entry_costs[k] = cost_dear[k]
                    n_switched += 1
                elif theta > 0.0:
                    split_column = k
                    vals[k] = (1.0 - theta) / n
                    rows = np.append(rows, rows_dear[k])
                    cols = np.append(cols, k)
                    vals = np.append(vals, theta / n)
                    if entry_costs is not None:
                        entry_costs = np.append(entry_costs, cost_dear[k])
    return rows, cols, vals, entry_costs, split_column, n_switched


def _result_from_entries(
    problem: TransportProblem, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, entry_costs: np.ndarray,
    **kwargs,
) -> TransportResult:
    """:meth:`TransportResult.from_plan` for a plan given as coordinate lists whose entry costs
    are known (the listed costs of a sparse cost: exactly what ``cost.entries`` returns), in
    O(n) instead of a lookup of every entry in the neighbour lists."""
    n, K = problem.n, problem.n_labels
    keep = vals != 0
    if not keep.all():
        rows, cols, vals, entry_costs = rows[keep], cols[keep], vals[keep], entry_costs[keep]
    labels = problem.labels[cols]
    weights = np.bincount(rows * K + labels, weights=vals, minlength=n * K).reshape(n, K)
    objective = float(np.sum(vals * problem.losses[rows, labels]))
    transport_cost = float(np.sum(vals * entry_costs)) if vals.size else 0.0
    plan = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    return TransportResult(weights=weights, objective=objective, transport_cost=transport_cost, plan=plan, **kwargs)


#: The cutting plane runs on candidate pairs only while there are at most this many per column
#: on average; beyond that (massive exact ties) it keeps evaluating g on whole blocks.
_CANDIDATES_PER_COLUMN = 64

#: Warm start: relative steps s of the first probes eta0 * (1 + s) (or eta0 / (1 + s)).
_WARM_STEPS = (1.0 / 16.0, 0.25, 1.0, 4.0)

#: Above this share of tied entries in a block, the argmax-set extremes are found with dense
#: masked argmin/argmax instead of from the list of tied entries.
_DENSE_TIE_SHARE = 0.125


def _tie_extremes(
    Cb: np.ndarray,
    ties: np.ndarray,
    scratch: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    c_lo: np.ndarray,
    c_hi: np.ndarray,
) -> None:
    """For each column of ``Cb``, the cheapest and the most expensive row among ``ties`` (the
    argmax set), written into ``lo``/``c_lo`` and ``hi``/``c_hi``.  Equal costs go to the smallest
    row index.  ``ties`` and ``scratch`` (C-ordered, shape of ``Cb``) are overwritten.
    """
    n, m = ties.shape
    n_ties = int(np.count_nonzero(ties))
    if n_ties <= _DENSE_TIE_SHARE * n * m:
        rows, cols = np.nonzero(ties)
        costs = Cb[rows, cols]
        c_lo.fill(np.inf)
        np.minimum.at(c_lo, cols, costs)
        c_hi.fill(-np.inf)
        np.maximum.at(c_hi, cols, costs)
        for rows_out, extreme in ((lo, c_lo), (hi, c_hi)):
            hit = costs == extreme[cols]
            rows_out.fill(n)
            np.minimum.at(rows_out, cols[hit], rows[hit])
        return
    np.logical_not(ties, out=ties)  # now marks rows outside the argmax set
    np.copyto(scratch, Cb)
    np.copyto(scratch, np.inf, where=ties)
    ar = np.arange(m)
    lo[:] = scratch.argmin(axis=0)
    c_lo[:] = scratch[lo, ar]
    np.copyto(scratch, -np.inf, where=ties)
    hi[:] = scratch.argmax(axis=0)
    c_hi[:] = scratch[hi, ar]
