"""The exact full-problem path of :class:`~budro.solvers.dual.DualSolver` on an
:class:`~budro.transport.EmbeddingCost` (``C_ij = |z_i - z_j|^2``) of any size: no n x n array
and, in a fit, no n x n work per round.

*Lists and their certificates.*  Each column j keeps a short list of rows, in increasing cost,
with the losses they had when the column was last *scanned* (its anchor) and bounds on what was
left out.  A scan of column j (one pass over all n rows: a GEMM block of dot products, then a
compiled or numpy pass) at the anchor's losses ``A`` and around a reference ``eta_a`` keeps

1. the *members*: rows that come within ``delta`` of the column maximum somewhere in
   ``[E_lo, E_hi]`` (a grid ``E`` around ``eta_a``; tested on each grid interval with the value
   at its left end against the maximum at its right end), the own row always;
2. of those, the ones on the column's upper hull of the points ``(C_ij, A_i)`` with margin
   ``mu``: a member more than ``mu`` below the chord of two others (or dominated by a cheaper one
   by more than ``mu``) lies at least ``mu`` below the column maximum at every ``eta >= 0``.  The
   groups of rows such pruned pairs belong to are recorded (a bit mask per column);
3. for the rows left out in step 1, per group of rows g and grid point q the largest value
   ``X[j, g, q] = max (A_i - E_q C_ij)`` (with the costs rounded down by the error bound of the
   scan's arithmetic: the scan may run in float32, the kept pairs' costs are recomputed exactly
   in float64).  ``eta -> max_i (A_i - eta C_ij)`` is convex, so between two grid points the
   chord of X bounds it, and past the last point its last value does.

*The certificate.*  At a later round with losses ``L`` and a candidate ``eta``, let ``Dup[g]``
be the largest rise ``L_i - A_i`` over the rows of group g, and ``Ddown_j`` the largest fall over
the rows on column j's list.  No left-out row can reach ``chord_X(eta) + Dup`` and no hull-pruned
row can come closer than ``mu - Dup[g] - Ddown_j`` to the list's maximum.  Column j is
*certified* when both stay more than the tie margin ``tau`` below the list's maximum at ``eta``:
then its column maximum and its argmax set (within the tie tolerance) over all n rows are those
of its list.

*A solve.*  The restricted problem (the lists, with this round's losses) is solved exactly by
the sparse path's machinery (the compiled list kernel or numpy hulls, the breakpoint read-off,
:func:`budro.solvers._dual_plan.evaluate_candidates`, a cutting plane should the read-off not be
certified): ``g_K <= g`` everywhere and ``eta_K`` minimises ``g_K``.  If every column is certified
at ``eta_K`` then ``g(eta_K) = g_K(eta_K) = min g_K <= min g``: ``eta_K`` minimises ``g``, and the
restricted plan (:func:`budro.solvers._dual_plan._switch_entries`) is optimal for the full problem,
with the same argmax sets a dense pass would find.  Columns that fail are rescanned at ``eta_K``
(in blocks) and the restricted problem is solved again; after repeated failures the grid widens,
and in the end a failing column keeps its whole hull (``delta = inf``), whose certificate holds
at any eta in the round it was made, so a solve always ends certified unless a budget stops it.
A cold solve (no state) first estimates ``eta*`` on a sample of columns scanned over a wide
geometric grid, then scans every column around it.

*Budgets.*  ``max_seconds`` (seconds) and ``max_pairs`` (pairs kept on the lists) stop the
rescans; the result is then the restricted plan (feasible), ``converged=False``, and
``dual_objective`` is a certified upper bound on the *full* optimum (weak duality: every
uncertified column counted at ``max(its list maximum, its excluded bound, its pruned bound)``), so
``info["gap"]`` bounds the distance to the full optimum.  A never-scanned column is bounded by the
largest loss under its label.  :meth:`~budro.solvers.base.Solver.solve` warns
(:class:`~budro.exceptions.ConvergenceWarning`) with the gap reached.

*Warm state.*  The lists, bounds and anchors live on the solver (``_full_state``), keyed by the
cost object and the labels (rebuilt when either changes), never pickled.  The lists hold each pair's
flat index (row * K + the column's label) and exact cost only, in a pool: each column's list in a
slot of its own, where a rescanned list is written if it fits, else past the pool's end, the
lists packed anew only when the room runs out or the gaps grow large (:func:`_commit`); a pair's
loss at its column's anchor is read from the anchor's copy of the losses (n x K, a row of
``anchor_losses``, indexed by the anchor's id; ids are reused), which also measures the drift.
At most ``_MAX_ANCHORS`` are kept (the columns of the oldest are rescanned with the next failing
ones).  Rows are grouped for the
bounds by the level of their losses (:func:`_level_groups`: _GROUPS quantiles of
``L[:, 0] - L[:, -1]``, made anew every _REGROUP_ROUNDS rounds; an anchor keeps the grouping it
was scanned with; for two labels a monotone function of the model's margin): the left-out
rows that come near a column's maximum have high losses under its label, and their rise is that of
their level, not the largest rise of all rows.

*Exact evaluation at a given eta.*  :func:`evaluate` (``DualSolver._evaluate`` on this path)
returns ``g(eta)`` and the argmax extremes of the full problem from the certified lists,
rescanning (around ``eta``) the columns whose certificate fails there: exact, and cheap wherever
the lists already certify ``eta``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from budro.solvers import _dual_plan, _sparse_kernels
from budro.solvers._dual_plan import (
    _BELOW,
    _OPTIMAL,
    _Candidates,
    _DualPoint,
    _upper_hulls,
    result_from_switch,
    tie_margin,
)
from budro.solvers._sparse_kernels import compiled
from budro.transport import ZERO_RTOL, EmbeddingCost, TransportProblem, TransportResult, distance_error_factor

__all__ = ["applies", "evaluate", "solve"]

#: Groups of rows for the excluded-value bounds (quantiles of the loss level, :func:`_level_groups`).
#: Adult's exact-full fit, all 179 rounds replayed: median 756 columns rescanned per round with 16
#: level groups against 1506 with the 8 dyadic groups of the last round's drift used before.
_GROUPS = 16
#: Rounds between two groupings of the rows: a new grouping sorts the rows and orders the scan's
#: embedding anew (14 ms a round at Adult), while the levels move little from round to round.
#: Adult's exact-full fit replayed (with _HORIZON = 4): median 232-262 ms per round with 4 or 8
#: against 278 ms with 1, the same g(eta*) in every round.
_REGROUP_ROUNDS = 4
#: Grid of a scan around eta_a, relative: 1 - w, 1, 1 + w, max(_FAR, 1 + 3 w) (_Q points); members
#: are tested on [1 - w, 1 + w].  Below the grid the anchor's largest loss per group bounds X, past
#: it X at the far point.  eta* rises through a fit (Adult: 0.5-3 % a round), and most columns
#: that fail their certificate late in the fit fail past the far point (rounds 41 / 71 / 120 of
#: Adult's exact-full fit: 267 / 233 / 197 of 268 / 233 / 206 failing the left-out bound, eta at
#: 1.8-2.8 eta_a), where the chord to a far point bounds the values and a flat X does not.
#: Replayed (2026-11-27): _FAR 1.5 / 3 / 5 / 8: median 836 / 771 / 524 / 570 columns rescanned a
#: round, CPU per round mean 785 / 731 / 689-702 / 642 ms.
_Q = 4
_FAR = 8.0
_WARM_W = 0.05
_COLD_W = 0.2
_MAX_W = 0.9
#: Rounds of eta's rise the members' window covers.
_TREND_ROUNDS = 4
#: Drift allowance of the lists: delta = max(_DELTA_MIN * loss spread, _HORIZON * 2 * drift rate).
#: Adult's exact-full fit replayed (rounds 1-178, 2026-11-27): horizons 8 / 6 / 4 / 3 / 2 kept 3.32 /
#: 2.33 / 1.50 / 1.13 / 0.74 million pairs at the end and rescanned a median 756 / 768 / 875 / 876 /
#: 1224 columns a round; median 313 / 278 / 261 / 312 ms a round for 8 / 4 / 3 / 2 (the restricted
#: solve and the commit read every pair; a rescan reads every row).
_DELTA_MIN = 0.01
_HORIZON = 4
#: The first solve of a fit (no drift seen yet): the drift allowance in loss spreads (Adult's
#: exact-full fit, rounds 0-11 replayed: 18.2-18.7 s with 4, 8 or 16 against 20.4-21.9 s with the
#: minimum, round 1 rescanning 17180 columns instead of all 36177).
_COLD_SPREADS = 8.0
#: Most members per column at a scan: past it the drift allowance is divided by 4, 16, 64.
_KMAX = 1024
#: Room per column in a compiled scan's output (finite allowance, whole hulls): a list keeps at
#: most its members, and a finite allowance makes at most _KMAX of them unless even delta / 64
#: makes more; longer lists (rare) are scanned again alone with room for the longest.  (A room
#: of 64 had warm rescans at Adult scan half their columns twice: lists of 100-300 pairs.)
_LIST_CAP = (_KMAX + 1, 1024)
#: Columns of the cold sample that estimates eta* (at most).  Its estimate only places the first
#: scan's window ([0.8, 1.2] eta_ref, _COLD_W): Adult's losses at rounds 1-178, n = 20000 and
#: 36177 (12 cold solves, 2026-11-27): 128 columns gave 0.91-1.03 eta*, 256 gave 1.00-1.06, and
#: every solve was certified after its one pass either way; the sample's scan 101 against 190 ms
#: (n = 20000, medians of 6 interleaved cold solves).
_SAMPLE = 128
#: Anchors kept alive at once (at most _ANCHOR_BYTES of their losses, at least 8).
_MAX_ANCHORS = 64
_ANCHOR_BYTES = 256 << 20
#: Attempts (restricted solve, rescan of failing columns) before a failing column keeps its hull.
_ESCALATE = 3
#: Dot products per scan block, in bytes (float32 by default).
_BLOCK_BYTES = 64 << 20
#: Where _BLOCK_BYTES holds fewer than _MIN_BLOCK_COLS columns (large n), the compiled scan's block
#: grows to that many, up to _WIDE_BLOCK_BYTES: a block of few columns against all n rows is a
#: skinny GEMM that runs at a fraction of BLAS's speed (n = 10^6, p = 35, 2048 columns, two threads:
#: its GEMMs 9.2-9.5 s in blocks of 16 columns, 4.2 s in blocks of 64).
_MIN_BLOCK_COLS = 64
_WIDE_BLOCK_BYTES = 256 << 20
#: Rows from which the compiled scan reads columns four at a time in row chunks
#: (``_full_numba._tile_members``: n-long arrays per column outgrow the caches; the same lists and
#: bounds).  One thread, a column of 10^6 rows: 5.1-5.4 against 8.4-10.3 ms; 300000: 1.50-1.74
#: against 1.77-1.97 ms; 100000: 0.52-0.65 against 0.54-0.58 ms; 36177: 0.25 against 0.14-0.20 ms.
_TILE_MIN_N = 200_000
#: Rows per unit of the compiled scan's test for rows that cannot be members (:func:`_units`), and
#: the test: a unit whose largest loss under a column's label is _SKIP allowances below the
#: column's own loss holds no member of it (a pair's slack is at most its loss minus the own
#: value, costs being >= 0), and the scan passes over it, bounding it by that loss (0: never).
_UNIT = 256
_SKIP = 2.0
#: Cutting-plane steps on the restricted problem, should the breakpoint read-off miss.
_MAX_CUTS = 200


def reaches(solver, n: int) -> bool:
    """Whether n points reach the solver's ``full_min_n`` (``"auto"``: FULL_MIN_N_COMPILED with
    the compiled kernels, FULL_MIN_N_NUMPY in numpy; numba is only looked for in between)."""
    from budro.solvers import _sizing

    limit = getattr(solver, "full_min_n", None)
    if limit is None:
        return False
    if limit == "auto":
        if n < _sizing.FULL_MIN_N_COMPILED:
            return False
        return n >= _sizing.FULL_MIN_N_NUMPY or compiled(solver)
    return n >= limit


def applies(solver, problem: TransportProblem) -> bool:
    """Whether ``problem`` takes this path: an embedding cost (not sparse, not few distinct
    points) with n at least ``solver.full_min_n`` (:func:`reaches`)."""
    cost = problem.cost
    if not isinstance(cost, EmbeddingCost) or not reaches(solver, problem.n):
        return False
    if getattr(cost, "is_sparse", False):
        return False
    from budro.solvers import _dual_lists

    return _dual_lists.reduction(solver, problem) is None


# ---------------------------------------------------------------------------------------- state


@dataclass(eq=False)
class _Anchor:
    """A scan's grid and row groups; the losses it was made at are row ``id`` of the state's
    ``anchor_losses`` (:func:`_register`), in natural row order."""

    E: np.ndarray
    mu: float
    gid: np.ndarray  # each row's group at the anchor (the state's gid then; never written to)
    order: np.ndarray
    starts: np.ndarray  # starts of the non-empty groups in `order`
    groups: np.ndarray  # their group ids
    top: np.ndarray  # (G, K) largest loss per group at the anchor (NONE for empty groups)
    _drift: tuple | None = None

    def up(self, losses: np.ndarray, A: np.ndarray, G: int, stamp: int) -> np.ndarray:
        """(G, K): the largest rise of a loss since the anchor (whose losses are ``A``, n x K), per
        group (-inf for empty groups), by numpy (the compiled certificate computes every stale
        anchor's at once: :func:`_rises`, the same values)."""
        kept = self.kept_rise(stamp, losses)
        if kept is not None:
            return kept
        out = np.full((G, losses.shape[1]), -np.inf)
        out[self.groups] = np.maximum.reduceat((losses - A)[self.order], self.starts, axis=0)
        self._drift = (stamp, out, losses)
        return out

    def kept_rise(self, stamp: int, losses: np.ndarray) -> np.ndarray | None:
        """The rises last computed, if for these losses in this call (``stamp``), else None."""
        if self._drift is not None and self._drift[0] == stamp and self._drift[2] is losses:
            return self._drift[1]
        return None


@dataclass(eq=False)
class _FullState:
    cost: EmbeddingCost
    labels: np.ndarray
    K: int
    Zc: np.ndarray  # centred embedding, float32 (the scan's GEMM) or float64
    sqc: np.ndarray
    kappa: float  # error of a scanned cost: kappa * (sqc_max + sqc_j)
    #: The lists live in a pool (``flat``, ``C``): column j's is ``flat[lo[j]:hi[j]]`` (the pairs'
    #: flat indices row * K + the column's label) and ``C[lo[j]:hi[j]]`` (their exact costs), in a
    #: slot of ``slot[j]`` entries from ``lo[j]``; the pool is used up to ``end``.  See _commit.
    lo: np.ndarray
    hi: np.ndarray
    slot: np.ndarray
    end: int
    flat: np.ndarray
    C: np.ndarray
    anchor_of: np.ndarray
    mask: np.ndarray
    mu: np.ndarray  # each column's hull margin
    X: np.ndarray  # (n, G, Q)
    #: Row a: the losses (flattened, natural row order) of the anchor with id a (ids are reused).
    anchor_losses: np.ndarray | None = None
    anchors: dict = field(default_factory=dict)
    gid: np.ndarray | None = None
    previous: np.ndarray | None = None
    rate: float = 0.0
    stamp: int = 0
    scanned: int = 0  # columns scanned in all (for full passes)
    rounds: int = 0
    grouped: int = -(1 << 30)  # the round the row groups were last made at
    order: tuple | None = None
    perm: tuple | None = None
    last_failures: tuple = (0, 0)
    etas: list = field(default_factory=list)
    losses_t: tuple | None = None
    #: The compiled scan's block of dot products, reused from block to block (or None).
    dots: np.ndarray | None = None
    #: Whether the lists are packed: in column order from the pool's start, no room between them.
    packed: bool = True
    #: The certificate's per-column falls (stamp, losses, values) and the columns committed since
    #: they were computed (a bool mask).
    down: tuple | None = None
    down_stale: np.ndarray | None = None
    #: The compiled list kernel's output of the last restricted solve (:class:`_KernelOutput`),
    #: and the columns whose lists were replaced since (a bool mask), or None.
    kernel_output: "_KernelOutput | None" = None
    dirty: np.ndarray | None = None
    #: The columns ordered by anchor (a stable argsort of anchor_of, kept up to date by each
    #: commit), or None until first asked for.
    by_anchor: np.ndarray | None = None
    #: The compiled certificate's last verdict: (stamp, losses, eta, tau, ok_x, ok_h, upper).
    verdict: tuple | None = None
    #: The eta from which this solve's list kernel is exact (0: every eta), and what chooses it.
    floor: float = 0.0
    floors: _dual_plan.EtaFloor = field(default_factory=_dual_plan.EtaFloor)

    @property
    def n(self) -> int:
        return self.sqc.size

    @property
    def lens(self) -> np.ndarray:
        return self.hi - self.lo

    @property
    def live(self) -> int:
        """The pairs on the lists."""
        return int(self.lens.sum())

    @property
    def width(self) -> int:
        return int(self.lens.max()) if self.n else 0


def _state(solver, problem: TransportProblem) -> _FullState:
    cost, labels, K, n = problem.cost, problem.labels, problem.n_labels, problem.n
    st = getattr(solver, "_full_state", None)
    if st is not None and st.cost is cost and st.K == K and np.array_equal(st.labels, labels):
        return st
    Z = cost.Z
    Zc = Z - Z.mean(axis=0)
    dtype = np.float32 if getattr(solver, "full_float32", True) else np.float64
    unit = 2.0**-24 if dtype == np.float32 else 2.0**-53
    Zs = np.ascontiguousarray(Zc, dtype=dtype)
    sqc = np.einsum("ij,ij->i", Zc, Zc)
    p = Z.shape[1]
    # |computed - exact| of sqc_i + sqc_j - 2 <zc_i, zc_j> (inputs rounded to `dtype`, a dot of p
    # terms), plus the difference from the cost's own formula on the uncentred Z (float64) and
    # its zero-snapping: a generous multiple of the rounding unit times (|zc_i|^2 + |zc_j|^2).
    kappa = distance_error_factor(p, float(cost._sq.max()), float(sqc.max()), unit)
    # A never-scanned column: its own row, bounded by the largest loss of each group (below).
    index = _index_dtype(n, K)
    flat = _flat(np.arange(n), labels, K).astype(index)
    st = _FullState(
        cost=cost, labels=labels.copy(), K=K, Zc=Zs, sqc=sqc, kappa=float(kappa),
        lo=np.arange(n, dtype=np.int64), hi=np.arange(1, n + 1, dtype=np.int64), slot=np.ones(n, dtype=np.int64),
        end=n, flat=flat, C=np.zeros(n), anchor_of=np.zeros(n, dtype=np.int64),
        mask=np.zeros(n, dtype=np.int64), mu=np.zeros(n), X=np.empty((n, _GROUPS, _Q)),
    )
    st.gid = np.zeros(n, dtype=np.int8)
    anc = _new_anchor(st, problem.losses, np.arange(_Q, dtype=np.float64), 0.0)
    st.anchor_of[:] = _register(st, anc, problem.losses)
    top = _dual_plan.label_max(problem.losses)  # every row in group 0: the largest loss per label
    st.X.fill(_NONE)
    st.X[:, 0, :] = top[labels][:, None]
    solver._full_state = st
    return st


_NONE = -1e300


def _index_dtype(n: int, K: int):
    """The lists' flat-index type: int32 where ``n K`` fits (4 bytes less per listed pair, in
    memory and in every pass over the lists), else int64."""
    return np.int32 if n * K < np.iinfo(np.int32).max else np.int64


def _flat(rows: np.ndarray, col_labels: np.ndarray, K: int) -> np.ndarray:
    return (np.asarray(rows, dtype=np.int64) * K + col_labels).astype(np.int64)


def _new_anchor(st: _FullState, losses: np.ndarray, E: np.ndarray, mu: float) -> _Anchor:
    gid, order, seg, _ = _group_order(st)
    groups = np.flatnonzero(seg[1:] > seg[:-1])  # the non-empty groups, and where they start
    starts = seg[groups]
    top = np.full((_GROUPS, losses.shape[1]), _NONE)
    top[groups] = np.maximum.reduceat(losses[order], starts, axis=0)
    return _Anchor(E=np.asarray(E, dtype=np.float64), mu=float(mu), gid=gid, order=order, starts=starts,
                   groups=groups, top=top)


def _register(st: _FullState, anc: _Anchor, losses: np.ndarray) -> int:
    """Keep ``anc`` alive under the smallest free id, its losses in that row of
    ``st.anchor_losses`` (which grows by 8 rows when full); returns the id."""
    width = losses.size
    table = st.anchor_losses
    if table is None or table.shape[1] != width:
        table = st.anchor_losses = np.empty((8, width))
    free = np.ones(table.shape[0], dtype=bool)
    free[[a for a in st.anchors if a < free.size]] = False
    if not free.any():
        grown = np.empty((table.shape[0] + 8, width))
        grown[:table.shape[0]] = table
        table = st.anchor_losses = grown
        free = np.zeros(table.shape[0], dtype=bool)
        free[-8:] = True
    a = int(np.argmax(free))
    table[a] = losses.reshape(-1)
    st.anchors[a] = anc
    return a


def _observe(st: _FullState, losses: np.ndarray) -> None:
    """A new round's losses: the drift rate, and the row groups for new anchors."""
    if st.previous is not None and st.previous.shape == losses.shape:
        moved = np.abs(losses - st.previous).max(axis=1)
        top = float(moved.max()) if moved.size else 0.0
        if top > 0.0:
            st.rate = max(st.rate, top)
    if st.previous is None or not np.array_equal(st.previous, losses):
        st.rounds += 1
        if st.rounds - st.grouped >= _REGROUP_ROUNDS:
            st.gid = _level_groups(losses)
            st.grouped = st.rounds
    st.previous = losses.copy()
    st.stamp += 1


def _level_groups(losses: np.ndarray) -> np.ndarray:
    """_GROUPS groups of rows of (nearly) equal size by the rank of ``L[:, 0] - L[:, -1]`` (ties by
    row).  A column's left-out rows are bounded per group by their largest value at the scan plus
    the group's largest rise since; where the losses drift nearly uniformly (Adult), the rows of
    one level rise alike, so a column's near-maximal rows (its label's high losses) are not charged
    the rise of rows at other levels.  Any grouping gives a valid certificate; this one a tight one.
    (At Adult's round 100, of 400 columns whose certificate failed, the left-out bound computed
    exactly at eta would have passed for 98 with the drift groups used before, for all 400 with 16
    level groups.)"""
    score = losses[:, 0] - losses[:, -1]
    rank = np.empty(score.size, dtype=np.int64)
    rank[np.argsort(score, kind="stable")] = np.arange(score.size)
    return ((rank * _GROUPS) // max(score.size, 1)).astype(np.int8)


# ---------------------------------------------------------------------------------------- scans


def _grid(eta_ref: float, w: float, scale_eta: float, w_up: float | None = None) -> tuple[np.ndarray, int, int]:
    """The scan's grid around eta_ref: members on [eta_ref (1 - w), eta_ref (1 + w_up)] (two
    intervals, geometric middle), X also at the far point; (E, q_lo, q_hi)."""
    if eta_ref > 0.0:
        up = w if w_up is None else max(w, w_up)
        lo, hi = 1.0 - w, 1.0 + up
        return eta_ref * np.array([lo, math.sqrt(lo * hi), hi, max(_FAR, 1.0 + 3.0 * up)]), 0, 2
    h = w * scale_eta
    return h * np.array([0.0, 1.0, 2.0, 6.0]), 0, 2


def _scan_numpy(st, losses, cols, D, E, q_lo, q_hi, delta, mu):
    """numpy twin of ``_full_numba.scan`` (same members, bounds, masks; no capacity)."""
    n = st.n
    labels = st.labels
    b = cols.size
    G, Q = st.X.shape[1], E.size
    sqc = st.sqc
    err = (st.kappa * (float(sqc.max()) + sqc[cols]))[:, None]
    Cm = sqc[None, :] + sqc[cols][:, None] - 2.0 * D.astype(np.float64)
    Cu = Cm + err
    Cl = np.maximum(Cm - err, 0.0)
    Lb = losses.T[labels[cols]]  # (b, n)
    own = losses[cols, labels[cols]]
    tb = np.arange(b)
    v = {q: np.maximum((Lb - E[q] * Cu).max(axis=1), own) for q in range(q_lo, q_hi + 1)}
    slack = np.full((b, n), -np.inf)
    for q in range(q_lo, q_hi):
        np.maximum(slack, Lb - E[q] * Cl - v[q + 1][:, None], out=slack)
    # the allowance: delta, or delta / 4, / 16, / 64 where delta makes more than kmax members
    d = np.full(b, delta)
    if fast_grid(E, q_lo, q_hi):
        levels = delta / np.array([1.0, 4.0, 16.0, 64.0])
        counts = (slack[:, :, None] >= -levels).sum(axis=1)  # (b, 4)
        ok = counts <= _KMAX
        d = np.where(ok.any(axis=1), levels[np.argmax(ok, axis=1)], levels[-1])
    member = slack >= -d[:, None]
    member[tb, cols] = True
    mus = np.minimum(mu, d)
    X = np.full((b, G, Q), _NONE)
    gid = st.gid
    for q in range(Q):
        V = np.where(member, -np.inf, Lb - E[q] * Cl)
        for g in range(G):
            in_g = gid == g
            if in_g.any():
                X[:, g, q] = np.maximum(V[:, in_g].max(axis=1), _NONE)
    t, i = np.nonzero(member)
    j = cols[t]
    Cx = st.cost.entries(i, j)
    R = Lb[t, i]
    order = np.lexsort((i, Cx, t))
    t, i, Cx, R = t[order], i[order], Cx[order], R[order]
    ids = np.arange(t.size)
    kept_ids, kt, kR, kC = _hulls_per_column(ids, t, R, Cx, mus, b)
    pruned = np.ones(t.size, dtype=bool)
    pruned[kept_ids] = False
    masks = np.zeros(b, dtype=np.int64)
    np.bitwise_or.at(masks, t[pruned], np.left_shift(np.int64(1), gid[i[pruned]].astype(np.int64)))
    counts = np.bincount(kt, minlength=b)
    return i[kept_ids], kC, kR, counts, X, masks, mus


def _group_order(st: _FullState):
    """(gid, the rows in group order (stable), the groups' starts in it, its inverse), cached per
    grouping."""
    cached = st.order
    if cached is not None and cached[0] is st.gid:
        return cached
    gid = st.gid
    order = np.argsort(gid, kind="stable").astype(np.int64)
    seg = np.searchsorted(gid[order], np.arange(_GROUPS + 1)).astype(np.int64)
    inv = np.empty_like(order)
    inv[order] = np.arange(order.size)
    st.order = (gid, order, seg, inv)
    return st.order


def _units(seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The compiled scan's units of rows: each group's rows (in group order, between ``seg[g]``
    and ``seg[g + 1]``) cut into pieces of ``_UNIT`` rows.  ``(ustart, gunit)``: unit u is rows
    ``ustart[u]:ustart[u + 1]``, group g's units are ``gunit[g]:gunit[g + 1]``."""
    starts = [np.arange(lo, hi, _UNIT) for lo, hi in zip(seg[:-1], seg[1:])]
    gunit = np.concatenate(([0], np.cumsum([a.size for a in starts]))).astype(np.int64)
    ustart = np.concatenate(starts + [seg[-1:]]).astype(np.int64)
    return ustart, gunit


def _permutation(st: _FullState):
    """The compiled scan's embedding and squared norms with the rows in group order
    (:func:`_group_order`), cached per grouping: ``(gid, Zp, sqc_p)``."""
    cached = st.perm
    if cached is not None and cached[0] is st.gid:
        return cached
    gid, order = _group_order(st)[:2]
    st.perm = (gid, np.ascontiguousarray(st.Zc[order]), st.sqc[order])
    return st.perm


def fast_grid(E, q_lo, q_hi) -> bool:
    """The standard scan grid (the compiled kernel's fast path, with the adaptive allowance)."""
    return E.size == _Q and q_lo == 0 and q_hi == 2


def _hulls_per_column(ids, cols, R, C, mus, ncols):
    """:func:`_upper_hulls` with each column's own margin (columns grouped by margin)."""
    out = [], [], [], []
    for m in np.unique(mus):
        sel = mus[cols] == m
        part = _upper_hulls(ids[sel], cols[sel], R[sel], C[sel], float(m), ncols)
        for acc, arr in zip(out, part):
            acc.append(arr)
    ids, cols, R, C = (np.concatenate(a) for a in out)
    order = np.argsort(ids, kind="stable")  # back to column, cost order
    return ids[order], cols[order], R[order], C[order]


def _dots(A: np.ndarray, Zp: np.ndarray, out: np.ndarray, threads: int) -> None:
    """``out = A @ Zp.T``: with ``threads`` > 1, as that many single-threaded GEMMs on slices of
    rows of A, run by a thread pool (numpy releases the GIL in matmul).  The solve keeps BLAS on
    one thread (:func:`_one_blas_thread`: OpenBLAS's own pool spins after each call), so this is
    how the GEMM still uses the cores; each row's products are the same single-threaded GEMM's."""
    b = A.shape[0]
    if threads <= 1 or b < 2 * threads:
        np.matmul(A, Zp.T, out=out)
        return
    bounds = np.linspace(0, b, threads + 1).round().astype(int)
    pool = _gemm_pool(threads)
    futures = [pool.submit(np.matmul, A[lo:hi], Zp.T, out=out[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()


_POOLS: dict = {}


def _gemm_pool(threads: int):
    """A pool of ``threads`` threads for :func:`_dots`, one per process (keyed by its id: a
    forked child inherits the parent's pool object but none of its threads)."""
    import os

    key = (os.getpid(), threads)
    pool = _POOLS.get(key)
    if pool is None:
        from concurrent.futures import ThreadPoolExecutor

        pool = _POOLS[key] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="budro-gemm")
    return pool


def _scan_block(solver, st, losses, cols, E, q_lo, q_hi, delta, mu, *, bounds: bool = True):
    """Scan the columns ``cols``: (rows, C, R, counts, X, masks), lists grouped by column.
    ``bounds=False``: the lists alone (the compiled scan leaves the left-out bounds out: X has no
    groups)."""
    if not compiled(solver):
        D = st.Zc[cols] @ st.Zc.T  # (b, n) dot products of the centred points
        return _scan_numpy(st, losses, cols, D, E, q_lo, q_hi, delta, mu)
    from budro.solvers import _full_numba

    _, order, seg, inv = _group_order(st)
    Zp, sqc_p = _permutation(st)[1:]
    b = cols.size
    # (b, n) dot products, rows in group order, in a buffer kept on the state: a fresh block of
    # up to _BLOCK_BYTES each time costs its page faults again (10.4 instead of 13-15 ms a block
    # of 433 columns at Adult)
    dots = st.dots
    if dots is None or dots.shape[0] < b or dots.shape[1] != Zp.shape[0] or dots.dtype != Zp.dtype:
        dots = st.dots = np.empty((b, Zp.shape[0]), dtype=Zp.dtype)
    D = dots[:b]
    use = _sparse_kernels.kernel_threads(solver.kernel_threads, None)  # each column scans n >= full_min_n rows
    _dots(st.Zc[cols], Zp, D, use)
    fast = fast_grid(E, q_lo, q_hi)
    # without the bounds, the generic kernel gets no group segments (the standard grid's finds
    # its members by them: it always computes its bounds)
    bounds = bounds or fast
    Q, G = E.size, st.X.shape[1] if bounds else 0
    seg_x = seg if bounds else seg[:1]
    cached = st.losses_t
    if cached is None or cached[0] is not losses or cached[1] is not order:  # once per rescan, not per block
        LT = np.ascontiguousarray(losses.T)
        LTp = np.ascontiguousarray(LT[:, order])
        ustart, gunit = _units(seg)
        # each unit's largest loss per label: a unit below a column's own loss by _SKIP allowances
        # holds no member of it, and the scan passes over it
        UM = np.maximum.reduceat(LTp, ustart[:-1], axis=1) if ustart.size > 1 else np.empty((LT.shape[0], 0))
        st.losses_t = cached = (losses, order, LT, LTp, ustart, gunit, np.ascontiguousarray(UM))
    LT, LTp, ustart, gunit, UM = cached[2:]
    X = np.empty((b, G, Q))
    masks = np.zeros(b, dtype=np.int64)
    mus = np.empty(b)
    counts = np.zeros(b, dtype=np.int64)
    cap = _LIST_CAP[0] if math.isfinite(delta) else _LIST_CAP[1]
    # a wide block (small n): its outputs within a block's bytes too (longer lists: scanned again)
    cap = min(cap, max(64, _BLOCK_BYTES // (24 * b)))
    cols64 = cols.astype(np.int64)

    def run(sel, D_sel, X_sel, masks_sel, mus_sel, counts_sel, cap_sel):
        m = sel.size
        out = (np.empty(m * cap_sel, dtype=np.int64), np.empty(m * cap_sel), np.empty(m * cap_sel))
        with _sparse_kernels.parallel_threads(use):
            _full_numba.scan(sel, inv[sel], D_sel, sqc_p, st.kappa, float(st.sqc.max()), st.cost.Z, st.cost._sq,
                             ZERO_RTOL, LTp, LT, st.labels, E, q_lo, q_hi, float(delta), float(mu), _KMAX,
                             st.gid, order, seg_x, fast, st.n >= _TILE_MIN_N, X_sel, masks_sel, mus_sel, *out,
                             counts_sel, cap_sel, max(1, min(m, 4 * use)), _SKIP, ustart, gunit, UM)
        return out

    out_rows, out_C, out_R = run(cols64, D, X, masks, mus, counts, cap)
    size = _full_numba.compact(counts, cap, out_rows, out_C, out_R)  # a list over cap: counts < 0, none taken
    # copies: views would keep each block's b * cap arrays (their touched pages) alive
    out_rows, out_C, out_R = out_rows[:size].copy(), out_C[:size].copy(), out_R[:size].copy()
    over = np.flatnonzero(counts < 0)
    if over.size == 0:
        return out_rows, out_C, out_R, counts, X, masks, mus
    # Lists longer than cap (a few columns of a block): only those columns are scanned again, with
    # room for the longest (each column's scan depends on its own data alone, so this gives what
    # a rerun of the whole block would), and their lists are merged in by column.
    cap2 = int(-counts[over].min())
    X2, masks2, mus2, counts2 = X[over], masks[over], mus[over], np.zeros(over.size, dtype=np.int64)
    rows2, C2, R2 = run(cols64[over], np.ascontiguousarray(D[over]), X2, masks2, mus2, counts2, cap2)
    assert counts2.min() >= 0
    X[over], masks[over], mus[over], counts[over] = X2, masks2, mus2, counts2
    size2 = _full_numba.compact(counts2, cap2, rows2, C2, R2)
    kept = np.ones(b, dtype=bool)
    kept[over] = False
    first = np.repeat(np.flatnonzero(kept), counts[kept])
    by_col = np.argsort(np.concatenate((first, np.repeat(over, counts2))), kind="stable")
    return (np.concatenate((out_rows, rows2[:size2]))[by_col], np.concatenate((out_C, C2[:size2]))[by_col],
            np.concatenate((out_R, R2[:size2]))[by_col], counts, X, masks, mus)


#: Room a compiled commit leaves in the pool when it packs the lists (a share of their pairs), and
#: the room between lists (slots longer than their lists, slots left behind) it lets build up
#: before packing them again.  Adult's exact-full fit replayed: the pool packed every few rounds
#: instead of every list moved at every commit (the lists after the first rescanned column: 28-44
#: ms a round in rounds 15-90, 2026-11-27).
_POOL_ROOM = 0.5
_POOL_SLACK = 0.5


def _commit(st: _FullState, cols, rows, C, counts, X, masks, mus, anchor_id, *, threads: int = 0) -> None:
    """Replace the lists of ``cols`` (sorted) by the scanned ones.

    ``threads`` > 0 (compiled): a scanned list is written in its column's slot where it fits,
    else past the pool's end (the column's slot moves there), on that many threads; only when
    the pool has no room for them, or the room between lists would exceed ``_POOL_SLACK`` of the
    pairs, are all lists packed into a new pool (``_full_numba.merge_lists``, in column order,
    with ``_POOL_ROOM`` to grow).  A commit so writes the scanned pairs alone, not every list
    (rescanned columns are spread over all columns, and packed lists would all move).
    ``threads`` = 0: numpy's concatenation into packed arrays of the exact size."""
    counts = np.asarray(counts, dtype=np.int64)
    if threads > 0:
        _commit_pool(st, cols, rows, C, counts, threads)
    else:
        ptr, flat, C_ = _concatenate_lists(st, cols, rows, C, counts)
        st.lo, st.hi, st.slot = ptr[:-1].copy(), ptr[1:].copy(), np.diff(ptr)
        st.flat, st.C, st.end, st.packed = flat, C_, int(ptr[-1]), True
    st.X[cols] = X
    st.mask[cols] = masks
    st.mu[cols] = mus
    st.anchor_of[cols] = anchor_id
    st.by_anchor = _by_anchor_after(getattr(st, "by_anchor", None), st.anchor_of, cols, anchor_id)
    for name in ("dirty", "down_stale"):  # (tests commit into plain namespaces)
        mask = getattr(st, name, None)
        if mask is not None:
            mask[cols] = True


def _commit_pool(st: _FullState, cols, rows, C, counts, threads: int) -> None:
    """:func:`_commit`'s compiled lists: in place, past the pool's end, or packed anew."""
    from budro.solvers import _full_numba

    n = st.n
    lens = st.hi - st.lo
    live = int(lens.sum()) - int(lens[cols].sum()) + int(counts.sum())
    grow = counts > st.slot[cols]
    need = int(counts[grow].sum())
    off = _ptr(counts)
    new = (np.ascontiguousarray(rows, dtype=np.int64), np.asarray(C, dtype=np.float64),
           st.labels.astype(st.flat.dtype, copy=False), st.flat.dtype.type(st.K))
    end = st.end + need
    if end <= st.flat.size and end - live <= _POOL_SLACK * live:
        dest = st.lo[cols]  # (a copy: fancy indexing)
        if need:
            dest[grow] = st.end + np.concatenate(([0], np.cumsum(counts[grow])[:-1]))
            st.slot[cols[grow]] = counts[grow]
        with _sparse_kernels.parallel_threads(threads):
            _full_numba.place_lists(np.asarray(cols, dtype=np.int64), dest, off, *new, st.flat, st.C,
                                    max(1, min(len(cols), 4 * threads)))
        st.packed = st.packed and need == 0 and np.array_equal(counts, lens[cols])
        st.lo[cols] = dest
        st.hi[cols] = dest + counts
        st.end = end
        return
    new_lens = lens
    new_lens[cols] = counts
    ptr = _ptr(new_lens)
    size = int(ptr[-1])
    replaced = np.full(n, -1, dtype=np.int64)
    replaced[cols] = np.arange(len(cols))
    room = size + int(_POOL_ROOM * size) + 1024
    pool = (np.empty(room, dtype=st.flat.dtype), np.empty(room))
    with _sparse_kernels.parallel_threads(threads):
        _full_numba.merge_lists(st.lo, st.hi, ptr, replaced, off, st.flat, st.C, *new, *pool,
                                max(1, min(n, 4 * threads)))
    st.flat, st.C = pool
    st.lo, st.hi, st.slot, st.end, st.packed = ptr[:-1].copy(), ptr[1:].copy(), new_lens, size, True


def _packed(st: _FullState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ptr, flat, C): the lists packed in column order (views of the pool where it is packed,
    else a gather)."""
    lens = st.hi - st.lo
    ptr = _ptr(lens)
    if st.packed:
        return ptr, st.flat[:ptr[-1]], st.C[:ptr[-1]]
    take = np.repeat(st.lo - ptr[:-1], lens) + np.arange(int(ptr[-1]))
    return ptr, st.flat[take], st.C[take]


def _concatenate_lists(st: _FullState, cols, rows, C, counts) -> tuple:
    """:func:`_commit`'s new (ptr, flat, C) by numpy: the old runs and the scanned lists
    concatenated, piece by piece (contiguous copies: a gather and scatter of every kept entry
    cost several times more at millions of pairs)."""
    n = st.n
    old_ptr, old_flat, old_C = _packed(st)
    new_counts = np.diff(old_ptr)
    new_counts[cols] = counts
    ptr = _ptr(new_counts)
    # old runs of kept columns: before the first replaced column, between two, after the last
    run_lo = old_ptr[np.concatenate(([0], np.asarray(cols) + 1))]
    run_hi = old_ptr[np.concatenate((cols, [n]))]
    off = _ptr(counts)
    scanned = ((np.asarray(rows, dtype=np.int64) * st.K
                + np.repeat(st.labels[cols], counts).astype(np.int64)).astype(old_flat.dtype, copy=False),
               np.asarray(C, dtype=np.float64))
    out = [ptr]
    for old, new in zip((old_flat, old_C), scanned):
        if len(cols) == n:  # every column rescanned: the scanned lists are the lists
            out.append(np.array(new, dtype=old.dtype))  # a copy: the scan's arrays are not ours
            continue
        pieces = []
        for i in range(len(cols)):
            pieces.append(old[run_lo[i]:run_hi[i]])
            pieces.append(new[off[i]:off[i + 1]])
        pieces.append(old[run_lo[-1]:run_hi[-1]])
        out.append(np.concatenate(pieces).astype(old.dtype, copy=False))
    return tuple(out)


class _Stop(Exception):
    pass


def _rescan(solver, st: _FullState, problem: TransportProblem, cols: np.ndarray, eta_ref: float, w: float,
            delta: float, budget: "_Budget", *, scale_eta: float) -> int:
    """Scan ``cols`` around ``eta_ref`` as a new anchor; returns how many were scanned (fewer
    when a budget stopped it; ``budget.stopped`` then says which)."""
    cols = np.unique(cols)
    if cols.size == 0:
        return 0
    losses = problem.losses
    # Too many anchors alive: the columns of the oldest ones are scanned with these.
    held = st.anchor_of[_by_anchor(st)]  # sorted: its distinct values without another sort
    used = set(held[np.flatnonzero(np.diff(held, prepend=held[:1] - 1))].tolist())
    live = [a for a in st.anchors if a in used]  # oldest first
    for a in list(st.anchors):
        if a not in used:
            del st.anchors[a]
    while len(live) >= max(8, min(_MAX_ANCHORS, _ANCHOR_BYTES // max(losses.nbytes, 1))):
        oldest = live.pop(0)
        cols = np.union1d(cols, np.flatnonzero(st.anchor_of == oldest))
    E, q_lo, q_hi = _grid(eta_ref, w, scale_eta, _trend(st, w))
    mu = delta if math.isfinite(delta) else _mu_fallback(losses)
    anc = _new_anchor(st, losses, E, mu)
    # the compiled scan holds one (b, n) block of dot products; numpy's pass a dozen of float64
    per_col = st.Zc.dtype.itemsize * st.n if compiled(solver) else 96 * st.n
    fits = _BLOCK_BYTES // max(per_col, 1)
    if compiled(solver) and fits < _MIN_BLOCK_COLS:
        fits = max(fits, min(_MIN_BLOCK_COLS, _WIDE_BLOCK_BYTES // max(per_col, 1)))
    width = int(max(16, min(cols.size, fits)))
    parts = []
    done = 0
    pairs = st.live
    for start in range(0, cols.size, width):
        if budget.expired():
            budget.stopped = "max_seconds"
            break
        block = cols[start:start + width]
        out = _scan_block(solver, st, losses, block, E, q_lo, q_hi, delta, mu)
        added = int(out[3].sum()) - int((st.hi[block] - st.lo[block]).sum())
        if budget.max_pairs is not None and pairs + added > budget.max_pairs:
            budget.stopped = "max_pairs"
            break
        pairs += added
        parts.append((block, out))
        done += block.size
    if not parts:
        return 0
    anchor_id = _register(st, anc, losses)
    blocks = np.concatenate([p[0] for p in parts])
    rows = np.concatenate([p[1][0] for p in parts])
    C = np.concatenate([p[1][1] for p in parts])
    counts = np.concatenate([p[1][3] for p in parts])
    X = np.concatenate([p[1][4] for p in parts])
    masks = np.concatenate([p[1][5] for p in parts])
    mus = np.concatenate([p[1][6] for p in parts])
    _commit(st, blocks, rows, C, counts, X, masks, mus, anchor_id,
            threads=_sparse_kernels.kernel_threads(solver.kernel_threads, None) if compiled(solver) else 0)
    st.scanned += done
    return done


def _trend(st: _FullState, w: float) -> float:
    """How far up the window reaches: eta's largest relative rise per round over the last few
    rounds, times _TREND_ROUNDS (eta* rises round after round in a fit)."""
    h = st.etas[-4:]
    if len(h) < 2 or h[0] <= 0.0:
        return w
    rise = max(b / a - 1.0 for a, b in zip(h[:-1], h[1:]) if a > 0.0)
    return float(min(_MAX_W, max(w, _TREND_ROUNDS * rise)))


def _mu_fallback(losses: np.ndarray) -> float:
    return _DELTA_MIN * max(float(np.ptp(losses)), 1e-12)


@dataclass
class _Budget:
    deadline: float | None
    max_pairs: int | None
    stopped: str | None = None

    def expired(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


# ---------------------------------------------------------------------------------------- certificate


def _certify(solver, st: _FullState, problem: TransportProblem, point: _DualPoint):
    """(certified columns, upper bound of each column's full maximum at point.eta)."""
    losses, labels = problem.losses, problem.labels
    eta = point.eta
    scale = problem.max_abs_loss
    tau = tie_margin(solver, problem)
    v = losses[point.lo, labels] - eta * point.c_lo  # a pair's value: <= the list maximum
    v_top = v + 2.0 * solver.tie_rtol * (scale + np.abs(v))  # >= the list maximum
    room = tau + 1e-12 * (scale + np.abs(v))
    losses_flat = losses.reshape(-1)
    order = _by_anchor(st)
    n, G = st.n, st.X.shape[1]
    B = np.empty(n)
    P = np.full(n, -np.inf)
    mu = st.mu
    if compiled(solver):
        from budro.solvers import _full_numba

        use = _sparse_kernels.kernel_threads(solver.kernel_threads, n)
        # The falls matter only where hull-pruned rows were recorded (a mask; elsewhere P is
        # -inf and the fall is never read: 5 % of Adult's columns, 3-14 % of the pairs) and do
        # not depend on eta: within a call (the same losses, st.stamp) only the columns committed
        # since the last certificate are computed again
        pruned = st.mask[order] != 0
        cached = st.down
        stale = st.down_stale  # the columns committed since the last certificate (None: all)
        if cached is not None and cached[0] == st.stamp and cached[1] is losses:
            down = cached[2]
            cols = order[stale[order] & pruned]
        else:
            down, cols = np.full(n, -np.inf), order[pruned]
        if cols.size:
            # gathers from the anchor's losses and this round's, pair by pair, where the columns'
            # pairs are fewer than a pass over each of their anchors' losses would read
            pairs = int((st.hi[cols] - st.lo[cols]).sum())
            direct = pairs < np.unique(st.anchor_of[cols]).size * losses_flat.size
            with _sparse_kernels.parallel_threads(use):
                _full_numba.list_down(st.lo, st.hi, st.flat, cols, st.anchor_of, st.anchor_losses, losses_flat, down,
                                      max(1, min(cols.size, 4 * use)), direct)
        st.down = (st.stamp, losses, down)
        st.down_stale = np.zeros(n, dtype=bool)
        # A later certificate of the same call at the same eta (after a rescan, which left eta*
        # where it was in 148 of Adult's 149 rounds past the 30th): a column not committed since
        # has the same list, anchor, bounds, falls and list maximum, so the same verdict; only
        # the committed ones are certified again (that certificate 2.2 -> 1.4 ms at Adult)
        prev = getattr(st, "verdict", None)
        sub = None
        if (prev is not None and stale is not None and prev[0] == st.stamp and prev[1] is losses
                and prev[2] == eta and prev[3] == tau):
            sub = np.flatnonzero(stale)
        # every anchor's grid, largest losses and rises as tables indexed by anchor id
        slots, Q, K = st.anchor_losses.shape[0], st.X.shape[2], losses.shape[1]
        E, top, up = np.zeros((slots, Q)), np.zeros((slots, G, K)), np.zeros((slots, G, K))
        _rises(st, losses, G, use)
        for a, anc in st.anchors.items():
            E[a], top[a], up[a] = anc.E, anc.top, anc.kept_rise(st.stamp, losses)
        with _sparse_kernels.parallel_threads(use):
            _full_numba.certify_bounds(float(eta), np.arange(n) if sub is None else sub, st.anchor_of, labels, E,
                                       top, up, st.X, st.mask, B, P)
        if sub is None:
            ok_x, ok_h, upper = _verdict_parts(v, v_top, room, B, P, down, mu)
        else:
            ok_x, ok_h, upper = prev[4].copy(), prev[5].copy(), prev[6].copy()
            ok_x[sub], ok_h[sub], upper[sub] = _verdict_parts(v[sub], v_top[sub], room[sub], B[sub], P[sub],
                                                              down[sub], mu[sub])
        st.verdict = (st.stamp, losses, eta, tau, ok_x, ok_h, upper)
        return _verdict_of(st, ok_x, ok_h, upper.copy())
    st.verdict = None
    ptr, flat, _ = _packed(st)
    Ra = st.anchor_losses[np.repeat(st.anchor_of, np.diff(ptr)), flat]  # the pairs' anchor losses
    down = np.maximum.reduceat(Ra - losses_flat[flat], ptr[:-1])
    ids, starts = np.unique(st.anchor_of[order], return_index=True)
    ends = np.append(starts[1:], n)
    for a, s0, s1 in zip(ids, starts, ends):
        anc = st.anchors[int(a)]
        cols = order[s0:s1]
        up = anc.up(losses, st.anchor_losses[int(a)].reshape(losses.shape), G, st.stamp)  # (G, K)
        E = anc.E
        q = int(np.searchsorted(E, eta, side="right")) - 1
        Xa = st.X[cols]
        if q < 0:  # below the grid: the largest loss of each group bounds every value
            bound = anc.top[:, labels[cols]].T
        elif q >= E.size - 1:
            bound = Xa[:, :, -1]
        else:
            lam = (eta - E[q]) / (E[q + 1] - E[q])
            bound = Xa[:, :, q] + lam * (Xa[:, :, q + 1] - Xa[:, :, q])
        upc = up[:, labels[cols]].T  # (m, G)
        B[cols] = (bound + np.where(np.isfinite(upc), upc, 0.0)).max(axis=1)
        m = st.mask[cols]
        if np.any(m):
            bits = (m[:, None] >> np.arange(G)[None, :]) & 1
            P[cols] = np.where(bits.astype(bool), upc, -np.inf).max(axis=1)
    return _verdict(st, v, v_top, room, B, P, down, mu)


def _by_anchor(st: _FullState) -> np.ndarray:
    """The columns in order of their anchors' ids (a stable argsort of ``anchor_of``), kept from
    call to call and brought up to date by each commit (:func:`_by_anchor_after`): 2.4 ms a sort
    at Adult, twice a round."""
    if st.by_anchor is None:
        st.by_anchor = np.argsort(st.anchor_of, kind="stable")
    return st.by_anchor


def _by_anchor_after(order: np.ndarray | None, anchor_of: np.ndarray, cols, anchor_id: int) -> np.ndarray | None:
    """``order`` (a stable argsort of the anchors before a commit, or None) after the commit gave
    the columns ``cols`` the anchor ``anchor_id`` (``anchor_of`` already updated): the same array
    a stable argsort of ``anchor_of`` gives, in O(n) (the others keep their order; the block of
    ``anchor_id`` becomes its columns in increasing order)."""
    if order is None:
        return None
    cols = np.asarray(cols, dtype=np.intp)
    moved = np.zeros(anchor_of.size, dtype=bool)
    moved[cols] = True
    keep = order[~moved[order]]
    held = anchor_of[keep]  # increasing
    lo, hi = np.searchsorted(held, anchor_id, side="left"), np.searchsorted(held, anchor_id, side="right")
    return np.concatenate((keep[:lo], np.sort(np.concatenate((keep[lo:hi], cols))), keep[hi:]))


def _rises(st: _FullState, losses: np.ndarray, G: int, threads: int) -> None:
    """Every live anchor's largest loss rise per group (:meth:`_Anchor.up`, kept on the anchor
    for this call's losses) by one compiled pass per anchor, the anchors in parallel on
    ``threads`` threads."""
    from budro.solvers import _full_numba

    stale = [(a, anc) for a, anc in st.anchors.items() if anc.kept_rise(st.stamp, losses) is None]
    if not stale:
        return
    ids = np.array([a for a, _ in stale], dtype=np.int64)
    gids = np.stack([anc.gid for _, anc in stale])
    out = np.empty((ids.size, G, losses.shape[1]))
    with _sparse_kernels.parallel_threads(threads):
        _full_numba.group_rises(np.ascontiguousarray(losses, dtype=np.float64), ids, gids, st.anchor_losses, out)
    for x, (_, anc) in enumerate(stale):
        anc._drift = (st.stamp, out[x], losses)


def _verdict(st: _FullState, v, v_top, room, B, P, down, mu):
    """:func:`_certify`'s result from the bounds of the left-out rows (B) and of the hull-pruned
    rows' rise (P) and the lists' fall (down)."""
    return _verdict_of(st, *_verdict_parts(v, v_top, room, B, P, down, mu))


def _verdict_parts(v, v_top, room, B, P, down, mu):
    """(left-out bound certified, hull margin certified, upper bound of the column maximum) per
    column."""
    ok_x = B <= v - room
    pruned_gap = P + down - mu  # pruned rows come at most this close to (above, if > 0) the maximum
    ok_h = pruned_gap <= -room
    upper = np.maximum(v_top, np.maximum(B, v_top + pruned_gap))
    return ok_x, ok_h, upper


def _verdict_of(st: _FullState, ok_x, ok_h, upper):
    st.last_failures = (int(np.count_nonzero(~ok_x)), int(np.count_nonzero(~ok_h)))
    return ok_x & ok_h, upper


# ---------------------------------------------------------------------------------------- restricted solve


@dataclass(eq=False)
class _KernelOutput:
    """The compiled list kernel's output over all columns for one round's losses and tie margin:
    candidate pairs grouped by column (``starts``, ``counts``), hull edges in column order
    (``edge_counts``), each column's largest hull cost."""

    losses: np.ndarray
    tau: float
    floor: float  # exact for eta >= floor (0: every eta)
    rows: np.ndarray
    cols: np.ndarray
    R: np.ndarray
    C: np.ndarray
    starts: np.ndarray
    counts: np.ndarray
    edge_e: np.ndarray
    edge_dc: np.ndarray
    edge_counts: np.ndarray
    last_cost: np.ndarray


#: A restricted solve after a rescan runs the list kernel on the rescanned columns only (and
#: splices their output into the last one) while they are at most this share of the columns.
_SPLICE_SHARE = 0.25


def _run_kernel(solver, st: _FullState, problem: TransportProblem, cols: np.ndarray | None,
                tau: float) -> _KernelOutput:
    """The list kernel on the lists of ``cols`` (sorted; None: every column), its outputs copied;
    with ``cols``, columns numbered in the order of ``cols``; exact for eta >= ``st.floor``."""
    K = problem.n_labels
    losses_flat = np.ascontiguousarray(problem.losses).reshape(-1)
    if cols is None:
        n, lo, hi, labels = st.n, st.lo, st.hi, st.labels
    else:  # the lists where they lie in the pool: no copy
        n, lo, hi, labels = cols.size, st.lo[cols], st.hi[cols], st.labels[cols]
    lens = hi - lo
    width = int(lens.max()) if n else 0
    # A fresh workspace each time (its outputs are copied below): np.empty only maps pages, and
    # a kept one would stay resident wherever a round once wrote (the early rounds' nearly tied
    # losses write millions of candidates: ~0.5 GB kept for the rest of an Adult fit).
    ws = _sparse_kernels.Workspace(n, max(int(lens.sum()), 1))
    rows, lcols, R, Cc, _, edge_e, edge_dc, last_cost, starts = _sparse_kernels.sparse_candidates(
        labels, K, st.C, st.flat, losses_flat, tau, np.ones(n), threads=solver.kernel_threads, workspace=ws,
        width=width, spans=(lo, hi), floor=st.floor)
    return _KernelOutput(losses=problem.losses, tau=tau, floor=st.floor, rows=rows.copy(), cols=lcols.copy(),
                         R=R.copy(), C=Cc.copy(), starts=starts.copy(), counts=ws.col_count[:n].copy(),
                         edge_e=edge_e.copy(), edge_dc=edge_dc.copy(), edge_counts=ws.edge_count[:n].copy(),
                         last_cost=last_cost[:n].copy())


def _splice_output(solver, last: _KernelOutput, part: _KernelOutput, cols: np.ndarray) -> _KernelOutput:
    """``last`` with the runs of ``cols`` (pairs and hull edges) replaced by ``part``'s (columns in
    the order of ``cols``): one compiled pass per array over the columns, on the kernel threads."""
    from budro.solvers import _full_numba

    n = last.counts.size
    replaced = np.full(n, -1, dtype=np.int64)
    replaced[cols] = np.arange(cols.size)
    counts, edge_counts, last_cost = last.counts.copy(), last.edge_counts.copy(), last.last_cost.copy()
    counts[cols], edge_counts[cols], last_cost[cols] = part.counts, part.edge_counts, part.last_cost
    ptr, edge_ptr = _ptr(counts), _ptr(edge_counts)
    use = _sparse_kernels.kernel_threads(solver.kernel_threads, n)
    chunks = max(1, min(n, 4 * use))
    # (the runs' starts and counts in last, in part, and where the runs go) of each layout
    pairs = (last.starts, last.counts, part.starts, part.counts, ptr)
    edges = (_ptr(last.edge_counts), last.edge_counts, _ptr(part.edge_counts), part.edge_counts, edge_ptr)
    out = {}
    with _sparse_kernels.parallel_threads(use):
        for name, layout in (("rows", pairs), ("R", pairs), ("C", pairs), ("edge_e", edges), ("edge_dc", edges)):
            o_st, o_ct, p_st, p_ct, out_ptr = layout
            old = getattr(last, name)
            out[name] = np.empty(int(out_ptr[-1]), dtype=old.dtype)
            _full_numba.splice_runs(old, o_st, o_ct, getattr(part, name), p_st, p_ct, replaced, out_ptr, out[name],
                                    chunks)
    return _KernelOutput(losses=last.losses, tau=last.tau, floor=last.floor, cols=np.repeat(np.arange(n), counts),
                         starts=ptr[:-1].astype(np.intp, copy=False), counts=counts, edge_counts=edge_counts,
                         last_cost=last_cost, **out)


def _ptr(counts: np.ndarray) -> np.ndarray:
    """Where each of the runs of ``counts`` starts when they follow each other from 0, and (last
    entry) where the last ends."""
    ptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr


def _candidates(solver, st: _FullState, problem: TransportProblem) -> _Candidates:
    """The lists' pairs that can tie at some eta (the sparse path's pruning), with the minimiser
    of g_K read off the hulls.  After a rescan in the same round (the same losses), the compiled
    kernel runs on the rescanned columns only and their output is spliced into the last one: the
    kernel's output for a column depends on that column's list alone, so this is the output of a
    pass over every column, to the bit (the same arrays in the same order)."""
    n = problem.n
    tau = tie_margin(solver, problem)
    if compiled(solver):
        last = st.kernel_output
        dirty = st.dirty
        same_round = (last is not None and dirty is not None and last.losses is problem.losses and last.tau == tau
                      and last.floor == st.floor)
        cols = np.flatnonzero(dirty) if same_round else None
        if same_round and cols.size == 0:  # nothing rescanned since (a budget stopped it): the same output
            out = last
        elif same_round and cols.size <= _SPLICE_SHARE * n:
            out = _splice_output(solver, last, _run_kernel(solver, st, problem, cols, tau), cols)
        else:
            out = _run_kernel(solver, st, problem, None, tau)
        st.kernel_output = out
        st.dirty = np.zeros(n, dtype=bool)
        eta = _edges_eta(out.edge_e, out.edge_dc, out.last_cost, problem.eps)
        return _Candidates(rows=out.rows, cols=out.cols, starts=out.starts, R=out.R, C=out.C, breakpoint_eta=eta,
                           compiled=True, floor=out.floor)
    losses_flat = np.ascontiguousarray(problem.losses).reshape(-1)
    ptr, flat, C = _packed(st)
    cols = np.repeat(np.arange(n), np.diff(ptr))
    rows, cols, R, C = _upper_hulls(flat // st.K, cols, losses_flat[flat], C, tau, n)
    starts = np.searchsorted(cols, np.arange(n))
    cand = _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C)
    return _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C,
                       breakpoint_eta=_dual_plan.breakpoint_eta(problem, cand))


def _edges_eta(edge_e: np.ndarray, edge_dc: np.ndarray, last_cost: np.ndarray, eps: float) -> float:
    """The minimiser of g read off the list kernel's hull edges (``_dual_plan.breakpoint_eta``'s
    rule): 0 if the columns' largest hull costs are within the budget, else the first edge at
    which the summed cost drops reach the excess."""
    need = float(last_cost.sum()) - last_cost.size * eps
    return 0.0 if need <= 0.0 else _sparse_kernels.select_breakpoint(edge_e, edge_dc, need)


def _minimise(solver, problem: TransportProblem, cand: _Candidates):
    """Minimise g on the candidates: the breakpoint read-off, certified by one evaluation, else a
    Kelley cutting plane (as :class:`DualSolver`'s).  Returns (found, a, b, evaluations).

    Candidates exact for eta >= ``cand.floor`` > 0 only are evaluated there only: where the
    read-off or the evaluation at the floor puts the minimiser below it, ``BelowFloor`` is
    raised (the caller runs the kernel again without a floor).  Above the floor they give g and
    its argmax sets exactly, so a point found there is the minimiser of g on the lists (g is
    convex: 0 in its subdifferential at that point)."""
    eps = problem.eps
    evals = 0
    floor = cand.floor
    if floor > 0.0 and not cand.breakpoint_eta >= floor:
        raise _dual_plan.BelowFloor

    def probe(eta):
        nonlocal evals
        evals += 1
        p = _dual_plan.evaluate_candidates(solver, problem, cand, eta)
        return p, _dual_plan.position(p, eps)

    p, where = probe(cand.breakpoint_eta)
    if where == _OPTIMAL:
        return p, None, None, evals
    a = b = None
    if where == _BELOW:
        a = p
        eta = max(p.eta * 2.0, 1e-12)
        while evals < _MAX_CUTS:
            p, where = probe(eta)
            if where == _OPTIMAL:
                return p, None, None, evals
            if where == _BELOW:
                a, eta = p, eta * 4.0
            else:
                b = p
                break
    else:
        b = p
        p, where = probe(floor)
        if where == _OPTIMAL:
            return p, None, None, evals
        if where != _BELOW:  # (floor > 0: at 0, g never lies below its minimiser)
            raise _dual_plan.BelowFloor
        a = p
    found, a, b, _ = _dual_plan.cutting_plane(probe, lambda: evals < _MAX_CUTS, a, b, _dual_plan.lines_meet(problem))
    return (found, None, None, evals) if found is not None else (None, a, b, evals)


# ---------------------------------------------------------------------------------------- entry points


def _settings(solver, st: _FullState, problem: TransportProblem):
    spread = max(float(np.ptp(problem.losses)), 1e-12)
    delta = max(_DELTA_MIN * spread, _HORIZON * 2.0 * st.rate)
    if st.rate == 0.0 and getattr(solver, "_rounds_ahead", False):
        # No drift seen yet, and a fit's rounds follow (DualSolver.prepare): lists for a drift
        # allowance of _COLD_SPREADS loss spreads, not the minimum, whose lists the next round's
        # drift fails everywhere (Adult's exact-full fit: round 1 rescanned all 36177 columns)
        delta = max(delta, _COLD_SPREADS * spread)
    # eta's natural unit (for a grid when the reference eta is 0): loss spread per mean cost
    mean_cost = max(2.0 * float(st.sqc.mean()), 1e-300)
    return delta, spread / mean_cost


def _cold_eta(solver, st: _FullState, problem: TransportProblem, budget: _Budget, scale_eta: float) -> float:
    """eta* of the problem restricted to a sample of columns (their whole hulls over a wide
    geometric grid), the reference of the first full scan."""
    n = problem.n
    s = min(n, _SAMPLE)
    rng = np.random.default_rng(0)
    cols = np.sort(rng.choice(n, size=s, replace=False))
    E = scale_eta * np.concatenate(([0.0], np.geomspace(1e-3, 1e3, 13)))
    parts = []
    width = int(max(16, min(s, _BLOCK_BYTES // max(st.Zc.dtype.itemsize * n, 1))))
    for start in range(0, s, width):
        block = cols[start:start + width]
        rows, C, R, counts, *_ = _scan_block_grid(solver, st, problem.losses, block, E)
        parts.append((rows, C, R, counts))
    rows = np.concatenate([p[0] for p in parts])
    C = np.concatenate([p[1] for p in parts])
    counts = np.concatenate([p[3] for p in parts])
    # g on the sample: eps * eta + mean_j max (R - eta C): minimised over the hulls' breakpoints
    if compiled(solver):
        # by the list kernel (its exact hulls' edges), as a restricted solve reads them off: at
        # the first rounds of a fit (nearly tied losses) the sample's lists are nearly all hull,
        # 400 000 pairs and more, which numpy's pass-by-pass hulls took 0.6-1.1 s to go through
        K = problem.n_labels
        labels = problem.labels[cols]
        ptr = _ptr(counts)
        flat = rows.astype(np.int64) * K + np.repeat(labels, counts)
        out = _sparse_kernels.sparse_candidates(
            labels, K, C, flat, np.ascontiguousarray(problem.losses).reshape(-1), 0.0, np.ones(s),
            threads=solver.kernel_threads, ptr=ptr, width=int(counts.max()))
        return _edges_eta(out[5], out[6], out[7][:s], problem.eps)
    loc = np.repeat(np.arange(s), counts)
    R = np.concatenate([p[2] for p in parts])
    rows, loc, R, C = _upper_hulls(rows, loc, R, C, 0.0, s)
    sub = SimpleNamespace(n=s, eps=problem.eps)  # all the read-off reads of a problem
    cand = _Candidates(rows=rows, cols=loc, starts=np.searchsorted(loc, np.arange(s)), R=R, C=C)
    return _dual_plan.breakpoint_eta(sub, cand)


def _scan_block_grid(solver, st, losses, cols, E):
    """Members over the whole grid ``E[1:]`` with no drift allowance and no hull margin (the
    lists alone: the cold sample's, which no certificate reads)."""
    return _scan_block(solver, st, losses, cols, E, 1, E.size - 1, 0.0, 0.0, bounds=False)


def _ensure_scanned(solver, st, problem, budget, scale_eta):
    """A cold state: estimate eta* on a sample, then scan every column around it."""
    if st.scanned > 0:
        return None
    eta_ref = _cold_eta(solver, st, problem, budget, scale_eta)
    delta, _ = _settings(solver, st, problem)
    _rescan(solver, st, problem, np.arange(problem.n), eta_ref, _COLD_W, delta, budget, scale_eta=scale_eta)
    return eta_ref


def _one_blas_thread():
    """BLAS on one thread for a solve on this path: its only BLAS call is the scan blocks' GEMM,
    and OpenBLAS's idle worker spins for a while after each one (about 0.1 s by default), taking
    a core from the compiled scan that follows it (a cold solve at n = 20000 on Adult, two
    cores: 2.05 s wall / 3.8 s CPU with two BLAS threads, 1.44-1.71 s / 2.4-2.7 s with one)."""
    from budro._threads import pool_limits

    return pool_limits(1, "blas")


def solve(solver, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
    """The full problem's exact optimum (see the module docstring)."""
    with _one_blas_thread():
        return _solve(solver, problem, eta0=eta0)


def _stay_put(solver, problem: TransportProblem, own: np.ndarray, t0: float, c0: float) -> TransportResult:
    """The optimum where every point's own loss ``own`` is the largest under its label (constant
    losses, say): g(0) = mean_j max_i L(i, y_j) is then the objective of the plan that moves
    nothing (cost 0), so by weak duality that plan is optimal and eta* = 0, certified without a
    scan.  The lists would hold every row of every column there (all tied at the maximum): at
    Adult's size the first solve stopped at max_pairs after 27 s."""
    n = problem.n
    stay = (np.arange(n), np.zeros(n))
    share = np.full(n, 1.0 / n)
    g0 = float(np.sum(share * own))  # the plan's objective, summed as result_from_switch sums it
    info = _info(t0, c0, staying_put=True)
    return _result(solver, problem, stay, stay, False, eta=0.0, dual_value=g0, n_iter=0, converged=True,
                   info=info)


def _info(t0: float, c0: float, **fields) -> dict:
    """A full-path result's ``info``: the keys every solve reports (as for a solve that scanned
    nothing), then ``fields``, then the wall and CPU seconds since ``t0`` / ``c0``."""
    info = {
        "full": True, "certified": True, "stalled": False, "budget_stop": None, "uncertified_columns": 0,
        "rescanned_columns": 0, "rescans": [], "failures": [], "list_pairs": 0, "candidate_pairs": 0,
        "full_passes": 0.0, "cold_eta": None, "anchors": 0, "delta": None,
    }
    info.update(fields)
    info.update(seconds=time.perf_counter() - t0, cpu_seconds=time.process_time() - c0, full_evaluations=0,
                sparse=False)
    return info


def _result(solver, problem: TransportProblem, cheap, dear, switch: bool, *, eta: float, dual_value: float,
            n_iter: int, converged: bool, info: dict) -> TransportResult:
    """The plan read off the argmax extremes (:func:`result_from_switch`), its split column and
    switches and the gap to ``dual_value`` added to ``info``."""
    result, split_column, n_switched = result_from_switch(
        problem, cheap, dear, switch, compiled=compiled(solver), eta=eta, dual_objective=dual_value,
        n_iter=n_iter, converged=converged, solver=solver.name, info=info)
    info.update(split_column=split_column, n_switched=n_switched)
    result.info["gap"] = dual_value - result.objective
    return result


def _solve(solver, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
    t0, c0 = time.perf_counter(), time.process_time()
    own = problem.losses[np.arange(problem.n), problem.labels]  # each point's loss under its own label
    if np.array_equal(own, _dual_plan.label_max(problem.losses)[problem.labels]):
        return _stay_put(solver, problem, own, t0, c0)
    limit = getattr(solver, "max_seconds", None)
    budget = _Budget(None if limit is None else t0 + float(limit), getattr(solver, "max_pairs", None))
    st = _state(solver, problem)
    _observe(st, problem.losses)
    delta, scale_eta = _settings(solver, st, problem)
    scanned0 = st.scanned
    cold_eta = _ensure_scanned(solver, st, problem, budget, scale_eta)
    n = problem.n
    rescanned = []
    failures = []
    attempts = 0
    evals = 0
    st.floor = floor = st.floors.next() if compiled(solver) else 0.0
    while True:
        cand = _candidates(solver, st, problem)
        try:
            found, a, b, k = _minimise(solver, problem, cand)
        except _dual_plan.BelowFloor:  # eta* fell below the floor: the kernel again, exact everywhere
            st.floor = 0.0
            st.floors.missed()
            continue
        evals += k
        point = found if found is not None else (a if (b is None or (a is not None and a.value <= b.value)) else b)
        ok, upper = _certify(solver, st, problem, point)
        failing = np.flatnonzero(~ok)
        failures.append(st.last_failures)
        if failing.size == 0 or budget.stopped is not None or budget.expired():
            if failing.size and budget.stopped is None:
                budget.stopped = "max_seconds"
            break
        attempts += 1
        w = min(_MAX_W, _WARM_W * 3.0 ** (attempts - 1))
        d = delta if attempts <= _ESCALATE else math.inf
        done = _rescan(solver, st, problem, failing, point.eta, w, d, budget, scale_eta=scale_eta)
        rescanned.append(int(done))
    certified = failing.size == 0
    st.kernel_output = st.dirty = None  # within a round only (early rounds' outputs are large)
    if certified and found is not None:
        st.etas = (st.etas + [float(point.eta)])[-8:]
        st.floors.certified(point.eta)
    eps = problem.eps
    if found is not None:
        cheap, dear, switch = (found.lo, found.c_lo), (found.hi, found.c_hi), found.eta > 0.0
    elif a is not None and b is not None:
        cheap, dear, switch = (b.hi, b.c_hi), (a.lo, a.c_lo), True
    elif a is not None:
        cheap, dear, switch = (np.arange(n), np.zeros(n)), (a.lo, a.c_lo), True
    else:
        cheap, dear, switch = (b.hi, b.c_hi), (b.hi, b.c_hi), False
    dual_value = point.value if certified else eps * point.eta + float(upper.mean())
    info = _info(
        t0, c0,
        certified=certified and found is not None,
        stalled=found is None,
        budget_stop=None if certified else budget.stopped,
        uncertified_columns=int(failing.size),
        rescanned_columns=int(st.scanned - scanned0),
        rescans=rescanned,
        failures=failures,  # per attempt: (columns failing the excluded bound, the hull margin)
        floor=floor,  # the kernel's floor (0: none), and whether eta* fell below it
        below_floor=bool(floor > 0.0 and st.floor == 0.0),
        list_pairs=st.live,
        candidate_pairs=int(cand.rows.size),
        full_passes=(st.scanned - scanned0) / n,
        cold_eta=cold_eta,
        anchors=len(st.anchors),
        delta=delta,
    )
    return _result(solver, problem, cheap, dear, switch, eta=point.eta, dual_value=dual_value, n_iter=evals,
                   converged=bool(certified and found is not None), info=info)


def evaluate(solver, problem: TransportProblem, eta: float) -> _DualPoint:
    """``g(eta)`` of the full problem with each column's cheapest and most expensive argmax row,
    from the certified lists (columns whose certificate fails at ``eta`` are rescanned around it)."""
    with _one_blas_thread():
        return _evaluate(solver, problem, eta)


def _evaluate(solver, problem: TransportProblem, eta: float) -> _DualPoint:
    budget = _Budget(None, None)
    st = _state(solver, problem)
    _observe(st, problem.losses)
    delta, scale_eta = _settings(solver, st, problem)
    attempts = 0
    while True:
        n = problem.n
        ptr, flat, C = _packed(st)
        cols = np.repeat(np.arange(n), np.diff(ptr))
        cand = _Candidates(rows=flat // st.K, cols=cols, starts=ptr[:-1].copy(),
                           R=problem.losses.reshape(-1)[flat], C=C, compiled=compiled(solver))
        point = _dual_plan.evaluate_candidates(solver, problem, cand, float(eta))
        ok, _ = _certify(solver, st, problem, point)
        failing = np.flatnonzero(~ok)
        if failing.size == 0:
            return point
        attempts += 1
        w = min(_MAX_W, _WARM_W * 3.0 ** (attempts - 1))
        d = delta if attempts <= _ESCALATE else math.inf
        _rescan(solver, st, problem, failing, float(eta), w, d, budget, scale_eta=scale_eta)
