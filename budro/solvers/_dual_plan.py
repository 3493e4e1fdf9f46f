"""Shared pieces of :class:`~budro.solvers.dual.DualSolver`'s dense and sparse paths.

The dual function's evaluation record (:class:`_DualPoint`), the candidate pairs both paths
evaluate ``g`` on (:class:`_Candidates`), the evaluation of ``g`` on candidates, the hulls'
breakpoints, and the exact primal recovery (switching columns from their cheapest to their most
expensive argmax row until the budget binds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from budro.solvers import _sparse_kernels
from budro.transport import TransportProblem, TransportResult


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
    #: Each column's multiplicity (None: every column counts once): columns of a reduced
    #: problem stand for several identical columns (budro.solvers._dual_lists).
    weights: np.ndarray | None = None
    #: For a reduced problem, what maps its evaluation back to the problem's own columns
    #: (:meth:`budro.solvers._dual_lists.Reduction.expand`, bound to this round's losses).
    expand: Any = None
    #: ``(e, dc, top)`` where the compiled kernel made the candidates: the exact hulls' breakpoints
    #: and cost drops (times the weights), in column order, and each column's largest hull cost --
    #: what :func:`breakpoint_eta` computes from the candidates otherwise.  Views into the
    #: kernel's workspace: valid until the next solve on the same layout.
    edges: tuple | None = None
    #: The candidates (and edges) are exact for eta >= floor only (0: for every eta >= 0); g
    #: must not be evaluated on them below it.
    floor: float = 0.0
    #: ... and for eta <= ceiling only (inf: for every eta); g must not be evaluated above it.
    ceiling: float = math.inf
    #: Where the compiled evaluations take their output arrays (the list layout's
    #: :class:`~budro.solvers._sparse_kernels.SolveScratch`; None: fresh arrays).
    scratch: Any = None


class BelowFloor(Exception):
    """g was to be evaluated below the floor its candidates are exact from (``_Candidates.floor``):
    the minimiser lies there, and the candidates must be made again without a floor."""


class AboveCeiling(Exception):
    """g was to be evaluated above the ceiling its candidates are exact to
    (``_Candidates.ceiling``): the minimiser lies there, and the candidates must be made again
    without a ceiling."""


class EtaFloor:
    """The eta from which a warm solve's candidates are made exact (the compiled list kernel's
    ``floor``, which keeps far fewer pairs): ``SHARE`` of the smaller of the last two certified
    eta*, which rise from round to round in a fit (by 0.4-32 % at Adult); none before two, and
    none for ``REST`` solves after one whose eta* fell below its floor (a solve that finds eta*
    below the floor makes its candidates again without one).

    Where a solve has a floor it may also take a :meth:`ceiling`, the eta up to which its
    candidates are made exact (the sparse path's compiled kernel): the last eta* times its last
    rise (at least 1) times ``1 + room``, the room adapted between ``ROOM_MIN`` and ``ROOM_MAX``
    (times 4 after a solve whose eta* lay above its ceiling, which makes its candidates again with
    the floor alone; times 0.9 after one inside).  Over Adult's 200 rounds (m = 32) eta* never
    rose past the ceiling, and the window leaves one pair in about three columns of four."""

    SHARE = 0.98
    REST = 8
    ROOM_MIN, ROOM_START, ROOM_MAX = 0.02, 0.05, 1.0

    def __init__(self):
        self.etas: list[float] = []
        self.rest = 0
        self.room = self.ROOM_START
        self.given = math.inf  # the ceiling handed to the solve under way (inf: none)

    def next(self) -> float:
        """The floor of the next solve (0: none)."""
        self.given = math.inf
        if self.rest > 0:
            self.rest -= 1
            return 0.0
        return self.SHARE * min(self.etas) if len(self.etas) == 2 else 0.0

    def ceiling(self) -> float:
        """The ceiling of the solve that :meth:`next` just gave a floor > 0 (inf: none)."""
        if len(self.etas) < 2 or self.rest > 0 or min(self.etas) <= 0.0:
            return math.inf
        before, last = self.etas
        self.given = last * max(1.0, last / before) * (1.0 + self.room)
        return self.given

    def above(self) -> None:
        """A solve's eta* lay above its ceiling."""
        self.room = min(4.0 * self.room, self.ROOM_MAX)
        self.given = math.inf

    def certified(self, eta: float) -> None:
        """A solve found and certified eta*."""
        if self.given < math.inf:  # inside its ceiling
            self.room = max(0.9 * self.room, self.ROOM_MIN)
            self.given = math.inf
        self.etas = (self.etas + [float(eta)])[-2:]

    def missed(self) -> None:
        """A solve's eta* lay below its floor."""
        self.rest = self.REST
        self.given = math.inf

    def resting(self) -> bool:
        """Whether the solves after a miss are still going without a floor."""
        return self.rest > 0


# Position of a point relative to the minimiser of g.
_OPTIMAL, _BELOW, _ABOVE = "optimal", "below", "above"


def position(point: _DualPoint, eps: float) -> str:
    """Where ``point`` lies relative to the minimisers of g, from its subgradient interval."""
    if point.mean_lo > eps:
        return _BELOW  # g'+(eta) < 0: the minimiser is to the right
    if point.eta == 0.0 or point.mean_hi >= eps:
        return _OPTIMAL  # 0 in [g'-(eta), g'+(eta)] (only g'+ matters at eta = 0)
    return _ABOVE  # g'-(eta) > 0: the minimiser is to the left


def label_max(losses: np.ndarray) -> np.ndarray:
    """``losses.max(axis=0)`` of an (n, K) array (the largest loss under each label), column by
    column: numpy reduces a narrow C-ordered array along its rows element by element (two
    columns: 21 us at n = 800, 109 us at 4222, 0.93 ms at 36 177, against 1.7-27 us for the K
    strided column maxima; the same values)."""
    return np.array([losses[:, k].max() for k in range(losses.shape[1])]) if losses.shape[0] else losses.max(axis=0)


def tie_margin(solver, problem: TransportProblem) -> float:
    """A margin above every column's tie tolerance (room for rounding included).

    Every tie tolerance ``tie_rtol * (scale + |vmax_j|)`` is at most ``2 * tie_rtol * scale``
    (``vmax_j`` lies between ``R_jj`` and ``max R``); twice that leaves room for rounding.
    """
    return 4.0 * solver.tie_rtol * problem.max_abs_loss


def breakpoint_eta(problem: TransportProblem, cand: _Candidates) -> float:
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
    ncols = cand.starts.size
    # The candidates keep pairs within tau below a column's hull (they may tie at eta*); the
    # breakpoints are those of the exact hull, so those pairs are dropped here (tau = 0):
    # with them the transitions would be summed out of order and the guess could miss eta*
    # by a hair, leaving the cutting plane a dozen evaluations to do.
    _, cols, R, C = _upper_hulls(cand.rows, cand.cols, cand.R, cand.C, 0.0, ncols)
    last = np.empty(cols.size, dtype=bool)
    last[-1] = True
    np.not_equal(cols[1:], cols[:-1], out=last[:-1])
    w = cand.weights
    top = float(C[last].sum()) if w is None else float(C[last] @ w)
    need = top - n * eps  # mean cost at eta = 0+ exceeds eps by need / n
    inner = ~last[:-1]
    dC = (C[1:] - C[:-1])[inner]
    if need <= 0.0 or dC.size == 0:
        return 0.0
    dR = (R[1:] - R[:-1])[inner]
    useful = dC > 0.0
    e = np.maximum(dR[useful] / dC[useful], 0.0)
    dC = dC[useful]
    if w is not None:
        dC = dC * w[cols[:-1][inner][useful]]
    order = np.argsort(e)
    reach = np.cumsum(dC[order])
    k = min(int(np.searchsorted(reach, need, side="left")), order.size - 1)
    return float(e[order[k]])


def evaluate_candidates(solver, problem: TransportProblem, cand: _Candidates, eta: float) -> _DualPoint:
    """``g`` (:func:`budro.solvers._dual_dense.evaluate`) restricted to the candidate pairs (same
    values, O(len(cand.rows))); the point is in the problem's own columns (a reduced problem's
    evaluation is expanded by ``cand.expand``)."""
    n = problem.n
    ncols = cand.starts.size
    scale = problem.max_abs_loss
    if cand.compiled:
        w = np.ones(ncols) if cand.weights is None else cand.weights
        total, lo, hi, c_lo, c_hi = _sparse_kernels.evaluate(cand.starts, cand.rows, cand.R, cand.C, eta,
                                                             solver.tie_rtol, scale, w, threads=solver.kernel_threads,
                                                             scratch=cand.scratch)
    else:
        V = cand.R - cand.C * eta
        vmax = np.maximum.reduceat(V, cand.starts)
        # The argmax sets, as a list grouped by column (every column has at least its maximum),
        # so that the rest works on about n entries instead of all candidate pairs.
        tied = np.flatnonzero(V >= (vmax - solver.tie_rtol * (scale + np.abs(vmax)))[cand.cols])
        t_cols, t_C, t_rows = cand.cols[tied], cand.C[tied], cand.rows[tied]
        t_starts = np.flatnonzero(np.concatenate(([True], t_cols[1:] != t_cols[:-1])))
        c_lo = np.minimum.reduceat(t_C, t_starts)
        c_hi = np.maximum.reduceat(t_C, t_starts)
        beyond = np.iinfo(np.intp).max
        t_rows = t_rows.astype(np.intp, copy=False)  # lists may hold int32 rows (budro.solvers._dual_full)
        lo = np.minimum.reduceat(np.where(t_C == c_lo[t_cols], t_rows, beyond), t_starts)
        hi = np.minimum.reduceat(np.where(t_C == c_hi[t_cols], t_rows, beyond), t_starts)
        total = float(vmax.sum()) if cand.weights is None else float(vmax @ cand.weights)
    if cand.expand is not None:
        lo, hi, c_lo, c_hi = cand.expand(lo, hi, c_lo, c_hi)
    return _DualPoint(eta=float(eta), value=problem.eps * eta + total / n, lo=lo, hi=hi, c_lo=c_lo, c_hi=c_hi)


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
    if starts.size == size:  # no two pairs of a column at one cost: every pair its own run
        run_of, r_R, r_cols, r_C = None, R, cols, C
    else:
        run_of = np.cumsum(run_start) - 1
        r_R = np.maximum.reduceat(R, starts)  # each run at its largest loss
        r_cols, r_C = cols.take(starts), C.take(starts)
        member = R >= r_R.take(run_of) - tau
        if not member.all():
            rows, cols, R, C, run_of = rows[member], cols[member], R[member], C[member], run_of[member]
    # The hull over runs, pass by pass, only in the columns with three runs or more (the first
    # and last run of a column stay); after the first pass only the columns that lost a run are
    # looked at again.  `ids` are the runs examined, whole columns, in order.
    col_start = np.empty(starts.size, dtype=bool)
    col_start[0] = True
    np.not_equal(r_cols[1:], r_cols[:-1], out=col_start[1:])
    interior = ~col_start
    interior[:-1] &= ~col_start[1:]
    interior[-1] = False
    if not interior.any():
        return rows, cols, R, C
    alive = np.ones(starts.size, dtype=bool)
    dirty = np.zeros(ncols, dtype=bool)
    dirty[r_cols[interior]] = True
    ids = np.flatnonzero(dirty.take(r_cols))
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
    keep = alive if run_of is None else alive[run_of]
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


def result_from_switch(problem: TransportProblem, cheap: tuple[np.ndarray, np.ndarray],
                       dear: tuple[np.ndarray, np.ndarray], switch: bool, *, compiled: bool,
                       scratch=None, **kwargs) -> tuple[TransportResult, int | None, int]:
    """:func:`_switch_entries` (with the entries' costs ``cheap[1]``, ``dear[1]``) and then
    :func:`_result_from_entries`: ``(result, split column, columns switched)``.  ``compiled``:
    both in one pass of a compiled kernel (``_sparse_numba.switch_plan``), with the same
    arithmetic in the same order, so the same plan, weights, objective and cost to the last bit
    (``tests/test_solvers_lists.py``); about 0.2 ms less per solve at n = 800 to 4222.  The kernel
    writes the entries' rows and the products the two sums add (into ``scratch``, a
    :class:`~budro.solvers._sparse_kernels.SolveScratch` kept by the caller, where given); the
    columns and values of the entries are laid out only when the plan is read."""
    if not compiled:
        rows, cols, vals, entry_costs, split, n_switched = _switch_entries(problem, cheap[0], dear[0], switch,
                                                                          costs=(cheap[1], dear[1]))
        return _result_from_entries(problem, rows, cols, vals, entry_costs, **kwargs), split, n_switched
    n = problem.n
    deficit = n * problem.eps - float(np.sum(cheap[1])) if switch else 0.0
    rows, prod_loss, prod_cost, weights, split, n_switched, split_vals = _sparse_kernels.switch_plan(
        cheap[0], dear[0], cheap[1], dear[1], deficit, switch, problem.labels, problem.losses, scratch=scratch)
    # np.sum(vals * entry_losses) and np.sum(vals * entry_costs), of the same products
    objective = float(np.sum(prod_loss))
    transport_cost = float(np.sum(prod_cost))
    # the plan as a sparse array only when read (a fit reads the weights): from the kernel's
    # fresh rows, never written again
    result = lazy_plan_result(_switched_plan, (rows, n, split, split_vals), weights=weights, objective=objective,
                              transport_cost=transport_cost, **kwargs)
    return result, split, n_switched


class LazyPlanResult(TransportResult):
    """A :class:`~budro.transport.TransportResult` whose ``plan`` is built on first access (by a
    module-level function of arrays the result owns), then kept.  Otherwise the same type: every
    field, ``dataclasses.replace`` (which reads the plan), pickling (before the access it carries
    the function and its arrays)."""

    @property
    def plan(self):
        source = self.__dict__.get("_plan_source")
        if source is not None:
            build, args = source
            self.__dict__["_plan"] = build(*args)
            del self.__dict__["_plan_source"]
        return self.__dict__.get("_plan")

    @plan.setter
    def plan(self, value):  # the dataclass's __init__ (and replace) set the field through this
        self.__dict__.pop("_plan_source", None)
        self.__dict__["_plan"] = value


def lazy_plan_result(build, args: tuple, **fields) -> LazyPlanResult:
    """A result whose plan is ``build(*args)``, computed when first read."""
    result = LazyPlanResult(plan=None, **fields)
    result.__dict__["_plan_source"] = (build, args)
    return result


def _switched_plan(rows: np.ndarray, n: int, split: int | None, split_vals: tuple[float, float]) -> sp.csc_array:
    cols, vals = _sparse_kernels.switched_entries(rows, n, split, split_vals)
    return plan_csc(rows, cols, vals, n, recovery=True)


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
    flat = rows * K + problem.labels.take(cols)  # (take: cheaper than fancy indexing at these sizes)
    weights = np.bincount(flat, weights=vals, minlength=n * K).reshape(n, K)
    objective = float(np.sum(vals * problem.losses.reshape(-1).take(flat)))
    transport_cost = float(np.sum(vals * entry_costs)) if vals.size else 0.0
    # the plan as a sparse array only when read (a fit reads the weights)
    return lazy_plan_result(plan_csc, (rows, cols, vals, n), weights=weights, objective=objective,
                            transport_cost=transport_cost, **kwargs)


def plan_csc(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n: int, *, recovery: bool = False) -> sp.csc_array:
    """The (n, n) plan of coordinate lists as a CSC array (canonical: rows sorted in each column,
    no duplicates given).  The recovery's lists -- one entry per column in column order, and at
    most one more entry of a split column appended -- are laid out directly (O(n), no sort: at
    n = 36177 11 us instead of 0.49 ms for scipy's coordinate conversion); ``recovery``: the
    lists are known to have that form (else it is checked); any other lists go through scipy's
    conversion."""
    m = cols.size
    if not recovery:
        recovery = (m in (n, n + 1) and rows.size == m and vals.size == m
                    and (n == 0 or (cols[0] == 0 and cols[n - 1] == n - 1))
                    and (n < 2 or bool(np.all(cols[1:n] > cols[:n - 1]))))  # cols[:n] is arange(n)
    if not recovery:
        return sp.csc_array((vals, (rows, cols)), shape=(n, n))
    index_dtype = np.int32 if n < np.iinfo(np.int32).max else np.int64
    indptr = np.arange(n + 1, dtype=index_dtype)
    if m == n:
        return sp.csc_array((np.array(vals, dtype=np.float64), rows.astype(index_dtype), indptr), shape=(n, n))
    k = int(cols[n])
    at = k + 1 if rows[n] > rows[k] else k  # keep the column's rows sorted
    indices = np.empty(m, dtype=index_dtype)
    data = np.empty(m)
    indices[:at], indices[at], indices[at + 1:] = rows[:at], rows[n], rows[at:n]
    data[:at], data[at], data[at + 1:] = vals[:at], vals[n], vals[at:n]
    indptr[k + 1:] += 1
    return sp.csc_array((data, indices, indptr), shape=(n, n))


#: Warm start: relative steps s of the first probes eta0 * (1 + s) (or eta0 / (1 + s)).
WARM_STEPS = (1.0 / 16.0, 0.25, 1.0, 4.0)
#: Geometric factor by which the upper end of the bracket is grown.
GROWTH = 4.0
#: Past this eta the products eta * C can no longer be formed safely.
ETA_CEILING = 1e250


def bracket(probe, budget_left, eta0: float | None):
    """Bracket the dual's minimiser: ``(found, a, b)`` with ``found`` an optimal point, or
    ``g'+(a) < 0 < g'-(b)`` (either end None when ``budget_left()`` ran out first).

    ``probe(eta) -> (point, where)`` evaluates g (``where`` one of "optimal", "below",
    "above").  A warm start eta0 (last round's eta*, which moves little from round to round)
    is bracketed tightly first: eta0 * (1 + s) or eta0 / (1 + s) for s = 1/16, 1/4, 1, 4, so
    that the cutting plane starts on a short bracket with few breakpoints of g inside; a cold
    start brackets 0 and 1, 4, 16, ...  Shared by :class:`~budro.solvers.dual.DualSolver` and
    the distributed search of :mod:`budro.dask`.
    """
    found = a = b = None
    grow_from = 1.0
    if eta0 is not None and eta0 > 0.0:
        point, where = probe(eta0)
        if where == _OPTIMAL:
            found = point
        elif where == _BELOW:
            a = point
            for s in WARM_STEPS:
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
            grow_from = eta0 * (1.0 + WARM_STEPS[-1]) * GROWTH
        else:
            b = point
            for eta in [eta0 / (1.0 + s) for s in WARM_STEPS] + [0.0]:
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
    while found is None and b is None and budget_left() and eta <= ETA_CEILING:
        point, where = probe(eta)
        if where == _OPTIMAL:
            found = point
        elif where == _BELOW:
            a = point
            eta *= GROWTH
        else:
            b = point
    return found, a, b


def cutting_plane(probe, budget_left, a, b, meet, narrow=None):
    """Kelley's cutting plane on a bracket ``g'+(a) < 0 < g'-(b)`` (from :func:`bracket`):
    ``(found, a, b, stalled)``, ``found`` an optimal point or None (``budget_left()`` ran out, or
    ``stalled``: the next point is not strictly inside the bracket, which then cannot shrink any
    more in floating point).

    The supporting line of g at a has slope ``eps - mean c_lo(a) < 0``, the one at b ``eps - mean
    c_hi(b) > 0``; ``meet(a, b)`` gives the eta where they cross (``eps * eta`` is common to both,
    so where ``mean(R - eta C)`` of the rows lo(a) and of the rows hi(b) agree), the next point.
    ``narrow(a, b)``, optional, is called before each step (the caller may restrict its
    candidates to the bracket).  Shared by :class:`~budro.solvers.dual.DualSolver`, the exact full
    path and the distributed search of :mod:`budro.dask`."""
    stalled = False
    while a is not None and b is not None and budget_left():
        if narrow is not None:
            narrow(a, b)
        t = meet(a, b)
        if not (a.eta < t < b.eta):
            stalled = True
            break
        point, where = probe(t)
        if where == _OPTIMAL:
            return point, a, b, False
        if where == _BELOW:
            a = point
        else:
            b = point
    return None, a, b, stalled


def lines_meet(problem: TransportProblem):
    """:func:`cutting_plane`'s ``meet`` for points evaluated on ``problem`` (their argmax rows
    ``lo``, ``hi`` and costs ``c_lo``, ``c_hi`` per column): every column difference is >= 0
    (argmax costs fall as eta grows), so the sums do not cancel."""
    losses, labels = problem.losses, problem.labels

    def meet(a, b) -> float:
        dr = losses[a.lo, labels] - losses[b.hi, labels]
        den = float((a.c_lo - b.c_hi).mean())
        return float(dr.mean()) / den if den > 0.0 else float("nan")

    return meet
