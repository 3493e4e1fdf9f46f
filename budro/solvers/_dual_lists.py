"""The full (dense) problem of :class:`~budro.solvers.dual.DualSolver` on few distinct points:
duplicates collapsed exactly, then every column's complete list in cost order, pruned by the
sparse path's kernel.

*Collapsing.*  Rows with identical fair embeddings (``EmbeddingCost.distinct_points``) cost the
same to every column, so in ``max_i (R_ij - eta C_ij)`` only the largest loss of each such group
(per label) can be the maximum: the group enters as one row with that loss, represented by its
smallest row index attaining it.  Columns with the same embedding and label see the same costs
and losses: they are one column counted with its multiplicity.  The reduced dual

    g(eta) = eps * eta + (1/n) sum_c w_c max_u (Lmax[u, y_c] - eta D[u, u_c])

is ``g`` itself (the same value, the same argmax costs ``c_lo``, ``c_hi`` per column), so its
minimiser is ``eta*`` and the recovery runs on the problem's own n columns (expanded back), which
keeps "at most one split column".  On COMPAS 4222 rows have 236 distinct embeddings and 385
distinct (embedding, label) columns.

*Complete lists.*  Column c's list is every distinct row in increasing cost; the lists are fixed
for the cost object and labels (cached), only the losses change between rounds.  The pruning
(dominance, hulls) and the breakpoint read-off are those of the sparse path, exact on these lists
because nothing is left out.  Used while (distinct rows) x (distinct columns) is at most
``_MAX_PAIRS`` (n = 800 German: 640 000 pairs); larger problems go through column blocks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from budro.solvers import _dual_sparse, _sparse_kernels
from budro.solvers._dual_plan import _Candidates, tie_margin
from budro.solvers._dual_sparse import _SparseLayout, flat_index, list_candidates
from budro.transport import Cost, DenseCost, EmbeddingCost, TransportProblem

#: Largest (distinct rows) x (distinct columns) solved on complete lists (about 20 bytes per pair
#: for the lists, 48 for the kernel's reused output buffers: ~70 MB at the limit).
_MAX_PAIRS = 1 << 20


@dataclass(frozen=True, eq=False)
class Reduction:
    """A dense cost's problem with duplicates collapsed, as complete lists (see the module)."""

    cost: Cost  # the cost object it was built for (identity is the cache key)
    labels: np.ndarray  # the labels it was built for (a copy)
    K: int
    #: The first row of each group (its rows have identical embeddings).
    first: np.ndarray
    #: Rows sorted by group, then index; where each group starts in that order; None when every
    #: row is its own group.
    order: np.ndarray | None
    group_starts: np.ndarray | None
    group_sorted: np.ndarray | None  # the group of each row in that order
    #: Each column's reduced column (None: the reduced columns are the columns themselves).
    col_class: np.ndarray | None
    #: The reduced problem's lists (rows are group ids; ``weights``: multiplicities or None).
    layout: _SparseLayout | None
    #: Each row's group, and the costs between groups (``D[u, v]``: from group u to group v).
    group: np.ndarray
    D: np.ndarray | None

    def plan_costs(self, rows: np.ndarray) -> np.ndarray:
        """``C[rows[j], j]`` for every column j, from the groups' costs (exactly the values the
        reduced problem was solved with, so the budget binds for the costs reported)."""
        return self.D[self.group[rows], self.group]

    @property
    def n_groups(self) -> int:
        return int(self.first.size)

    @property
    def n_classes(self) -> int:
        return 0 if self.layout is None else int(self.layout.rows.shape[0])

    def reduce(self, losses: np.ndarray, compiled: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The groups' largest loss per label (U, K) and the smallest row attaining it (None:
        every row is its own group); ``compiled``: in one pass of a compiled kernel (the same)."""
        if self.order is None:
            return losses, None
        if compiled:
            return _sparse_kernels.group_top(losses, self.order, self.group_starts)
        ordered = losses.take(self.order, axis=0)  # (take: a third of fancy indexing's time here)
        top = np.maximum.reduceat(ordered, self.group_starts, axis=0)
        at = np.where(ordered == top.take(self.group_sorted, axis=0), self.order[:, None], losses.shape[0])
        return top, np.minimum.reduceat(at, self.group_starts, axis=0)

    def expander(self, rep: np.ndarray | None):
        """Maps a reduced evaluation (group ids and costs per reduced column) to the problem's
        columns: rows are the groups' representatives under each column's label."""
        labels = self.layout.labels
        col_class = self.col_class

        def expand(lo, hi, c_lo, c_hi):
            if rep is not None:
                lo, hi = rep[lo, labels], rep[hi, labels]
            if col_class is not None:
                lo, hi, c_lo, c_hi = lo[col_class], hi[col_class], c_lo[col_class], c_hi[col_class]
            return lo, hi, c_lo, c_hi

        return expand


def reduction(solver, problem: TransportProblem) -> Reduction | None:
    """The complete-list form of a dense problem, cached per cost object and labels; None when
    the cost is not a ``DenseCost`` or ``EmbeddingCost`` or the lists would be too large."""
    cost, labels, K = problem.cost, problem.labels, problem.n_labels
    if not isinstance(cost, (DenseCost, EmbeddingCost)):
        return None
    cached = getattr(solver, "_reduction_cache", None)
    if cached is not None and cached.cost is cost and cached.K == K and np.array_equal(cached.labels, labels):
        return cached if cached.layout is not None else None
    n = problem.n
    if isinstance(cost, EmbeddingCost):
        first, group = cost.distinct_points()
    else:  # a matrix: no embedding to compare, every row its own group
        first, group = np.arange(n), np.arange(n)
    U = int(first.size)
    keys, col_class = np.unique(group * K + labels, return_inverse=True)
    col_class = col_class.reshape(-1)
    n_cls = int(keys.size)
    layout = D = None
    if U * n_cls <= _MAX_PAIRS:
        class_group, class_label = keys // K, (keys % K).astype(np.intp)
        if isinstance(cost, EmbeddingCost):  # never builds the n x n matrix
            D = cost.costs_among(first)
        else:
            D = np.ascontiguousarray(cost.C[np.ix_(first, first)])
        lists = D.T.take(class_group, axis=0)  # (classes, groups): row u of class c (one copy)
        order, C = stable_row_argsort(lists)
        rows = order.astype(np.intp, copy=False)  # (argsort's: contiguous, no copy)
        weights = np.bincount(col_class, minlength=n_cls).astype(np.float64)
        layout = _SparseLayout(neighbors=None, neighbor_costs=None, labels=class_label, K=K, rows=rows, C=C,
                               flat=flat_index(rows, class_label, K),
                               weights=None if np.all(weights == 1.0) else weights)
    identity_rows = U == n
    row_order = None if identity_rows else np.argsort(group, kind="stable")
    starts = None if identity_rows else np.flatnonzero(np.diff(group[row_order], prepend=-1))
    identity_cols = n_cls == n and np.array_equal(col_class, np.arange(n))
    red = Reduction(cost=cost, labels=labels.copy(), K=K, first=first, order=row_order, group_starts=starts,
                    group_sorted=None if identity_rows else group[row_order],
                    col_class=None if identity_cols else col_class, layout=layout, group=group, D=D)
    solver._reduction_cache = red
    return red if layout is not None else None


def stable_row_argsort(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.argsort(a, axis=1, kind="stable")`` and the sorted rows, by numpy's faster unstable
    sort (on German's 800 x 800 lists less than half the stable sort's time), with the rows that
    hold equal values sorted again stably (only there can the two orders differ)."""
    order = np.argsort(a, axis=1)
    s = np.take_along_axis(a, order, axis=1)
    if a.shape[1] > 1:
        tied = np.flatnonzero((s[:, 1:] == s[:, :-1]).any(axis=1))
        if tied.size:
            order[tied] = np.argsort(a[tied], axis=1, kind="stable")
            s[tied] = np.take_along_axis(a[tied], order[tied], axis=1)
    return order, np.ascontiguousarray(s)


def compiled(solver) -> bool:
    """Whether the complete lists are pruned by the compiled kernel: ``kernel="numba"``, or
    ``"auto"`` once numba has started in this process.  Otherwise numpy passes
    (:func:`budro.solvers._dual_sparse.floored_candidates`): on these lists (at most
    ``_MAX_PAIRS`` pairs) a whole fit's solves take less than numba's start (0.3-0.5 s of import
    and target initialisation in a fresh process; German's 500 rounds: numpy solves about 0.4 s
    in all, the compiled ones 0.15 s plus the start).  Both give the same result."""
    return solver.kernel == "numba" or (solver.kernel == "auto" and _sparse_kernels.started()
                                         and _sparse_kernels.available())


def candidates(solver, problem: TransportProblem, red: Reduction, floor: float = 0.0, *,
               compiled: bool) -> tuple[_Candidates, int]:
    """This round's candidate pairs of the reduced problem, with the expansion to the problem's
    columns attached; and the number kept by dominance.  ``floor``: as
    :func:`budro.solvers._dual_sparse.sparse_candidates`'; ``compiled``: by the compiled kernel
    (:func:`compiled`)."""
    top, rep = red.reduce(problem.losses, compiled=compiled)
    cand, n_dom = list_candidates(solver, red.layout, top, problem.n, problem.eps, tie_margin(solver, problem),
                                  floor, compiled=compiled)
    return dataclasses.replace(cand, expand=red.expander(rep)), n_dom
