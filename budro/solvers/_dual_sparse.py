"""The sparse path of :class:`~budro.solvers.dual.DualSolver`: a neighbour-list cost
(:class:`~budro.transport.NeighborCost`) pruned exactly to the pairs that can ever tie, in
O(n m) and never building a column (numpy passes, or the compiled kernel of
:mod:`budro.solvers._sparse_kernels`)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from budro.solvers import _sparse_kernels
from budro.solvers._dual_plan import EtaFloor as _EtaFloor
from budro.solvers._dual_plan import _Candidates, _upper_hulls, label_max, lazy_plan_result, tie_margin
from budro.solvers._sparse_kernels import compiled
from budro.transport import TransportProblem, TransportResult


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
        n, m = self.rows.shape
        return _sparse_kernels.Workspace(n, n * m)

    @functools.cached_property
    def scratch(self) -> "_sparse_kernels.SolveScratch":
        """The compiled solve's arrays kept from round to round (recovery, evaluations of g)."""
        return _sparse_kernels.SolveScratch()

    @functools.cached_property
    def complete(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """``(ptr, C, flat, m)``: the lists flattened as the compiled kernels take them."""
        n, m = self.rows.shape
        return _sparse_kernels.uniform_ptr(n, m), self.C.reshape(-1), self.flat.reshape(-1), m

    @functools.cached_property
    def breakpoint(self) -> "_sparse_kernels.WarmBreakpoint":
        """The selection of the minimiser of g on the hull edges, started from the last round's."""
        return _sparse_kernels.WarmBreakpoint()

    @functools.cached_property
    def floors(self) -> _EtaFloor:
        """The floor a warm solve's compiled candidates are exact from (see ``_Candidates.floor``)."""
        return _EtaFloor()

    @functools.cached_property
    def warm(self) -> "WarmLists":
        """The pruned lists carried from one round to the next (compiled path)."""
        return WarmLists()

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

    @functools.cached_property
    def heads(self) -> "WarmHeads":
        """The heads of the numpy path's lists carried from one round to the next."""
        return WarmHeads()

    def whole_buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """Two (n, m) float64 buffers for :func:`_floored_whole_lists`, kept from round to round
        for lists of at most :data:`WHOLE_BUFFERS_MAX` entries (larger lists get fresh ones each
        pass rather than hold them for the whole fit: their whole-list rounds are few)."""
        held = self.__dict__.get("_whole_buffers")
        if held is not None:
            return held
        fresh = (np.empty(self.rows.shape), np.empty(self.rows.shape))
        if self.rows.size <= WHOLE_BUFFERS_MAX:
            self.__dict__["_whole_buffers"] = fresh  # (a frozen dataclass: as cached_property stores)
        return fresh

    @functools.cached_property
    def max_cost(self) -> float:
        return float(self.C.max()) if self.C.size else 0.0

    @functools.cached_property
    def prefix_keys(self) -> "_PrefixKeys | None":
        """:func:`floored_candidates`' head search (:class:`_PrefixKeys`); None where a cost is not
        finite or negative (the lists are then scanned whole)."""
        n, m = self.rows.shape
        C = self.C
        if C.size == 0 or not np.isfinite(C).all() or C.min() < 0.0:
            return None
        step = 2.0 ** np.ceil(np.log2(2.0 * float(C.max()) + 2.0))
        shifts = step * np.arange(n)
        flat = self.flat.reshape(-1)  # (int32 where it fits: take reads any integer indices)
        return _PrefixKeys((C + shifts[:, None]).reshape(-1), float(step), shifts, np.arange(n) * m, flat,
                           np.ascontiguousarray(C[:, 0]), np.ascontiguousarray(flat[::m]))


class _PrefixKeys(NamedTuple):
    """The lists of a layout as :func:`floored_candidates` reads them."""

    keys: np.ndarray  # the costs flattened, column j shifted by shifts[j] (one searchsorted finds every head)
    step: float  # a power of two above twice the largest cost
    shifts: np.ndarray  # j * step
    offsets: np.ndarray  # j * m: where each list starts in the flattened arrays
    flat: np.ndarray  # the lists' flat loss indices, flattened (int32 where they fit)
    first_C: np.ndarray  # each list's first (cheapest) cost
    first_flat: np.ndarray  # and its flat loss index


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


#: From this many points a neighbour-list problem is solved with its points renumbered so that
#: neighbours get nearby numbers (reverse Cuthill-McKee on the neighbour graph): the kernels then
#: read the losses of a list from nearby memory instead of anywhere in an array larger than the
#: caches.  ``python benchmarks/solvers.py locality --locality-n 20000,50000,100000,300000,1000000
#: --locality-rounds 12 --locality-data adult`` (compiled kernel, idle machine, 2026-11-26): synthetic
#: with 16 neighbours 1.00x at 2 x 10^4 points, 1.13x at 5 x 10^4, 1.16x at 10^5, 1.39x at 3 x 10^5,
#: 427 -> 292 ms per solve at 10^6 (renumbering 1.35 s once); the real Adult lists (n = 36177,
#: m = 32, every round of the paper's fit) 13.1 -> 11.9 ms, the first solve 28 -> 68 ms.
LOCALITY_MIN_N = 30_000


@dataclass(frozen=True, eq=False)
class _Locality:
    """A neighbour-list cost renumbered by locality: point ``perm[p]`` is number p of ``cost``.
    ``neighbors``/``neighbor_costs`` are the original cost's arrays (to recognise it later)."""

    neighbors: np.ndarray
    neighbor_costs: np.ndarray
    perm: np.ndarray
    inv: np.ndarray  # point i is number inv[i]
    cost: object
    #: (a copy of the last labels given, them renumbered): a fit's labels are the same every round
    labels: list = field(default_factory=lambda: [None, None])
    #: The renumbered losses and the weights numbered back, in arrays recycled from round to round
    scratch: "_sparse_kernels.SolveScratch" = field(default_factory=lambda: _sparse_kernels.SolveScratch())

    def renumbered_labels(self, labels: np.ndarray) -> np.ndarray:
        """``labels[perm]``, reused while the labels are equal to the last ones (a comparison
        instead of a gather at random places: 2 against 14 ms at 10^6 points)."""
        given, out = self.labels
        if given is None or given.shape != labels.shape or not np.array_equal(given, labels):
            given, out = labels.copy(), np.take(labels, self.perm)
            self.labels[:] = [given, out]
        return out


def locality_order(neighbors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(perm, inv)``: reverse Cuthill-McKee on the graph of the lists (point ``perm[p]`` gets
    number p, point i number ``inv[i]``).  The breadth-first search follows each point's own list
    (the graph as given, ``symmetric_mode=True``): symmetrising it first (``A + A^T``) took 2.8 of
    3.4 s at 10^6 points, m = 16, and gave no faster solves (``benchmarks/solvers.py locality``)."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    n, m = neighbors.shape
    graph = csr_matrix((np.ones(neighbors.size, dtype=np.int8), np.asarray(neighbors, dtype=np.int32).reshape(-1),
                        np.arange(0, n * m + 1, m, dtype=np.int64)), shape=(n, n))
    perm = np.asarray(reverse_cuthill_mckee(graph, symmetric_mode=True), dtype=np.intp)
    del graph
    inv = np.empty(n, dtype=np.intp)
    inv[perm] = np.arange(n)
    return perm, inv


def renumbered_lists(neighbors: np.ndarray, neighbor_costs: np.ndarray, perm: np.ndarray, inv: np.ndarray):
    """The lists as a :class:`~budro.transport.NeighborCost` on the points renumbered by
    ``(perm, inv)``, marked ``renumbered`` (not renumbered again)."""
    from budro.transport import NeighborCost

    nb = np.take(inv, np.take(neighbors, perm, axis=0))
    cost = NeighborCost.from_lists(nb, np.take(neighbor_costs, perm, axis=0))
    cost.renumbered = True
    return cost


def locality(solver, cost) -> "_Locality | None":
    """The renumbering of a neighbour-list cost of at least :data:`LOCALITY_MIN_N` points (cached
    on the solver per cost object, like the layout), or None."""
    nb, nc = cost.neighbors, cost.neighbor_costs
    if nb.shape[0] < LOCALITY_MIN_N or getattr(cost, "renumbered", False):
        return None
    cached = getattr(solver, "_locality_cache", None)
    if cached is not None and cached.neighbors is nb and cached.neighbor_costs is nc:
        return cached
    perm, inv = locality_order(nb)
    solver._locality_cache = out = _Locality(neighbors=nb, neighbor_costs=nc, perm=perm, inv=inv,
                                             cost=renumbered_lists(nb, nc, perm, inv))
    return out


def solve_renumbered(solver, problem: TransportProblem, order: "_Locality", eta0) -> "TransportResult":
    """``problem`` solved on its points renumbered by ``order``, the result numbered back: the same
    problem (every value and the certificate unchanged; among tied argmax rows the plan may pick
    another of equal cost)."""
    perm, n = order.perm, problem.n
    # (the checked fields of the problem, renumbered: not checked again)
    inner = TransportProblem._derived(_rows(solver, problem.losses, perm, order.scratch),
                                      order.renumbered_labels(problem.labels), order.cost, problem.eps)
    if "max_abs_loss" in problem.__dict__:  # (the same losses in another order)
        inner.__dict__["max_abs_loss"] = problem.max_abs_loss
    r = solver._solve(inner, eta0=eta0)
    weights = _rows(solver, r.weights, order.inv, order.scratch)
    info = dict(r.info)
    if info.get("split_column") is not None:
        info["split_column"] = int(perm[info["split_column"]])
    info["renumbered"] = True
    fields = dict(weights=weights, objective=r.objective, transport_cost=r.transport_cost, eta=r.eta,
                  dual_objective=r.dual_objective, n_iter=r.n_iter, converged=r.converged, solver=r.solver, info=info)
    # the plan numbered back only when read (a fit reads the weights: at n = 10^6, m = 16 the
    # renumbering was a sixth of a round), from the inner result's (itself built when read)
    return lazy_plan_result(_inner_plan_numbered_back, (r, perm, order.inv, n), **fields)


#: Rows from which :func:`_rows` gathers on the kernel threads (np.take below).  Measured on
#: this project's 2-core machine, (n, 2) rows in a random order: n = 10^5 take 146 us, the
#: compiled gather on two threads 124 us; 36 177 (Adult) 45 against 48 us alone, and inside a fit,
#: whose booster has just had the cores, the threads' wake-up made it 0.24 against 0.1 ms a call.
GATHER_PARALLEL_MIN = 100_000


def _rows(solver, a: np.ndarray, idx: np.ndarray, scratch=None) -> np.ndarray:
    """``a[idx]`` for an (n, K) float64 array: by the compiled gather on the kernel threads from
    :data:`GATHER_PARALLEL_MIN` rows (7.7-9.3 against 13.6-18.8 ms at 10^6 points), else np.take
    (a row gather 8x faster than fancy indexing at that size); there into an array of
    ``scratch`` (a :class:`~budro.solvers._sparse_kernels.SolveScratch`) where given."""
    use = 1 if idx.size < GATHER_PARALLEL_MIN or not compiled(solver) else _sparse_kernels.kernel_threads(
        solver.kernel_threads, idx.size)
    if use == 1 or a.dtype != np.float64 or a.ndim != 2:  # (one thread: no parallel kernel, as in a forked child)
        if scratch is None or a.dtype != np.float64:
            return np.take(a, idx, axis=0)
        # (mode "clip": the indices are a permutation; numpy buffers a checked take's output)
        return np.take(a, idx, axis=0, out=scratch.recycled(a.shape, np.float64), mode="clip")
    out = _sparse_kernels.output_array(scratch, a.shape, np.float64)
    with _sparse_kernels.parallel_threads(use):
        _sparse_kernels._kernels().gather_rows(np.ascontiguousarray(a), idx, out)
    return out


def _inner_plan_numbered_back(inner: TransportResult, perm: np.ndarray, inv: np.ndarray, n: int):
    plan = inner.plan
    return None if plan is None else _plan_numbered_back(plan, perm, inv, n)


def _plan_numbered_back(plan, perm: np.ndarray, inv: np.ndarray, n: int):
    """The inner plan (points numbered ``inv[i]``) on the original points: column p of the inner
    plan is column perm[p], and its rows are renumbered too."""
    import scipy.sparse as sp

    plan = sp.csc_array(plan)
    counts = np.diff(plan.indptr)[inv]  # entries of each original column
    indptr = np.zeros(n + 1, dtype=plan.indptr.dtype)
    np.cumsum(counts, out=indptr[1:])
    first = plan.indptr[:-1][inv]
    if indptr[-1] == n:  # one entry per column (no split column): a gather
        at = first
    else:
        at = np.repeat(first - indptr[:-1], counts) + np.arange(indptr[-1], dtype=first.dtype)
    indices = np.take(perm, plan.indices[at]).astype(plan.indices.dtype, copy=False)
    plan = sp.csc_array((plan.data[at], indices, indptr), shape=(n, n))
    plan.sort_indices()
    return plan


def flat_index(rows: np.ndarray, labels: np.ndarray, K: int) -> np.ndarray:
    """``rows * K + labels[j]`` per list entry: where ``R[rows, j]`` lies in ``losses.ravel()``
    (int32 when it fits: the compiled kernel streams through it every round)."""
    dtype = np.int32 if rows.size and (int(rows.max()) + 1) * K <= np.iinfo(np.int32).max else np.intp
    flat = np.array(rows, dtype=dtype, order="C")  # (a copy: rows * K in place, no second array)
    flat *= dtype(K)
    flat += labels.astype(dtype)[:, None]
    return flat


def sparse_candidates(solver, problem: TransportProblem, floor: float = 0.0,
                      ceiling: float = math.inf) -> tuple[_Candidates, int]:
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
    pairs kept by step 1.  ``floor`` > 0: on the compiled path, candidates exact for eta >= floor
    only (``_Candidates.floor``; step 1 compares the values at floor, far fewer pairs);
    ``ceiling`` < inf, on the compiled path: exact for ``eta <= ceiling`` too
    (``_Candidates.ceiling``; the numpy passes ignore it and return candidates exact above).
    """
    layout = sparse_layout(solver, problem)
    return list_candidates(solver, layout, problem.losses, problem.n, problem.eps, tie_margin(solver, problem), floor,
                           ceiling=ceiling)


def list_candidates(solver, layout: _SparseLayout, losses: np.ndarray, n_total: int, eps: float, tau: float,
                    floor: float = 0.0, *, compiled: bool | None = None,
                    ceiling: float = math.inf) -> tuple[_Candidates, int]:
    """:func:`sparse_candidates` on any lists in increasing cost per column: ``losses`` (rows, K)
    is what ``layout.flat`` indexes, ``n_total`` the number of columns counted with their
    multiplicities ``layout.weights`` (the plan's columns carry mass ``1 / n_total``);
    ``compiled``: by the compiled kernel (None: as the solver's ``kernel`` says); ``ceiling``: on
    the compiled kernel only."""
    if _sparse_kernels.compiled(solver) if compiled is None else compiled:
        return sparse_candidates_compiled(solver, layout, losses, n_total, eps, tau, floor, ceiling)
    if floor > 0.0 and layout.prefix_keys is not None:
        return floored_candidates(layout, losses, tau, floor)
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
    return _hull_candidates(layout, rows, np.repeat(np.arange(n), counts), R, C, tau)


def _hull_candidates(layout: _SparseLayout, rows, cols, R, C, tau: float, floor: float = 0.0) -> tuple[_Candidates, int]:
    """The pairs dominance kept (grouped by column, in cost order) pruned to each column's upper
    hull: the candidates (exact from ``floor``) and how many pairs dominance kept."""
    n = layout.rows.shape[0]
    n_dominance = int(rows.size)
    rows, cols, R, C = _upper_hulls(rows, cols, R, C, tau, n)
    return _Candidates(rows=rows, cols=cols, starts=np.searchsorted(cols, np.arange(n)), R=R, C=C,
                       weights=layout.weights, floor=float(floor)), n_dominance


#: Most list entries whose whole-list passes keep their two buffers on the layout (2 x 16 MiB;
#: German's complete lists: 640 000).
WHOLE_BUFFERS_MAX = 1 << 21


#: The numpy path's trial floor where no eta* is known yet (a fit's first two rounds), relative to
#: the losses' scale over the largest listed cost: far below the first eta* of the fits measured
#: (German 7e-5, COMPAS 2.5e-4, against 6e-9 and 1.2e-8), yet enough to separate tied losses at
#: different costs, which the first rounds' few distinct losses (the first trees' leaves) leave by
#: the hundred per column (German's first round: 254 000 candidates, 130 ms of numpy passes).
TRIAL_FLOOR = 2.0**-20


def trial_floor(layout: _SparseLayout, losses: np.ndarray) -> float:
    """The floor a numpy solve without one tries (:data:`TRIAL_FLOOR`; 0: none)."""
    if layout.prefix_keys is None or layout.max_cost <= 0.0:
        return 0.0
    return TRIAL_FLOOR * float(np.abs(losses).max()) / layout.max_cost


def floored_candidates(layout: _SparseLayout, losses: np.ndarray, tau: float, floor: float) -> tuple[_Candidates, int]:
    """:func:`list_candidates` exact for ``eta >= floor`` only (``floor > 0``), in numpy passes over
    the head of each list instead of the whole lists (German's complete lists: about 60 of 800
    entries per column at the floors of a fit, of which about one is kept).

    With ``V = R - floor C`` and entry 0 the list's first (cheapest) entry:

    1. Head: entry r (``C_r >= C_0``) with ``V_r < V_0 - tau`` stays more than tau below entry 0
       at every ``eta >= floor`` (the gap only grows with eta), which holds for every ``C_r >
       C_0 + (Rmax - R_0 + tau) / floor`` (``Rmax``: the largest loss under the column's label);
       those entries are never read (the bound is taken with 2 tau).  Of the head, the entries
       with ``V_r < V_0 - tau`` are dropped at once.  The heads are carried from round to round
       with a margin (:class:`WarmHeads`).
    2. Dominance at the floor, as the compiled kernel's: entry r is dropped if ``V_r + tau <
       max(V before r)`` (an earlier, no more expensive entry is more than tau above it at the
       floor, hence at every larger eta).  The running maximum runs over all columns at once on
       ``V + j S`` (S a power of two above the values' range, so that a column never sees the one
       before it).
    3. Each column's upper hull (:func:`_upper_hulls`), as on the whole lists.

    Every comparison adds a bound of the rounding of ``V`` and of the shift to tau, so rounding
    only ever keeps more; the kept pairs are a superset of the compiled kernel's (tests:
    ``pytest tests/test_solvers_lists.py -k floor``).
    """
    prefix = layout.prefix_keys
    n, first_C = prefix.offsets.size, prefix.first_C
    losses = np.ascontiguousarray(losses, dtype=np.float64)
    losses_flat = losses.reshape(-1)
    first_R = losses_flat.take(prefix.first_flat)
    first_V = first_R - floor * first_C
    top = label_max(losses)
    # tau and a bound of the rounding of V (|R| <= scale, floor C <= floor max C)
    room = tau + 2.0**-50 * (float(np.abs(losses).max()) + floor * layout.max_cost)
    head = layout.heads.entries(layout, losses_flat, top, first_R, first_C, first_V, tau, room, floor)
    if head is None:  # heads of most of the lists (a low floor): dominance on the whole lists
        return _floored_whole_lists(layout, losses_flat, tau, room, floor)
    V = head.C * -floor
    V += losses_flat.take(head.flat)
    sel = np.flatnonzero(V >= (first_V - room).take(head.cols))
    V, cols, C, lflat = V.take(sel), head.cols.take(sel), head.C.take(sel), head.flat.take(sel)
    # dominance at the floor (step 2), every column's running maximum in one pass
    shift = 2.0 ** np.ceil(np.log2(2.0 * (float(top.max()) - float(first_V.min()) + 2.0 * room) + 1.0))
    W = cols * shift
    W += V
    best = np.maximum.accumulate(W)
    keep = np.empty(W.size, dtype=bool)
    keep[0] = True
    np.greater_equal(W[1:] + (room + 4.0 * float(np.spacing(shift * n))), best[:-1], out=keep[1:])
    keep[1:] |= cols[1:] != cols[:-1]
    kept = np.flatnonzero(keep)
    return _hull_candidates(layout, head.rows.take(sel.take(kept)), cols.take(kept),
                            losses_flat.take(lflat.take(kept)), C.take(kept), tau, floor)


def _floored_whole_lists(layout: _SparseLayout, losses_flat: np.ndarray, tau: float, room: float,
                         floor: float) -> tuple[_Candidates, int]:
    """:func:`floored_candidates`' steps 2 and 3 on the whole lists, as an (n, m) array (the
    running maximum along each list; no head, no shift)."""
    n, m = layout.rows.shape
    flat = layout.prefix_keys.flat
    # (two (n, m) buffers kept on the layout for the rounds that read the whole lists: fresh
    # arrays cost page faults, 4541 of the 31 ms of German's first two such passes in a fit)
    V, best = layout.whole_buffers()
    np.multiply(layout.C, -floor, out=V)
    V += losses_flat.take(flat, out=best.reshape(-1), mode="clip").reshape(n, m)  # (clip: no buffered copy)
    np.maximum.accumulate(V, axis=1, out=best)
    keep = np.empty((n, m), dtype=bool)
    keep[:, 0] = True
    shifted = V[:, 1:]
    shifted += room  # (V is not read again)
    np.greater_equal(shifted, best[:, :-1], out=keep[:, 1:])
    kept = np.flatnonzero(keep)
    return _hull_candidates(layout, layout.rows.reshape(-1).take(kept), kept // m,
                            losses_flat.take(flat.take(kept)), layout.C.reshape(-1).take(kept), tau, floor)


class WarmHeads:
    """The heads of :func:`floored_candidates` made at an anchor round with a margin, and carried
    to later rounds while a certificate shows that they still hold every entry the round's
    filter would keep.

    At the anchor (losses ``A``, floor ``f_a``) the heads keep every entry with ``V_r >= V_0 -
    room - M`` (V at ``A`` and ``f_a``; the head bound taken with M too).  In a later round whose
    losses differ from A by at most d (sup norm) and whose floor f is at least ``f_a``, an entry
    left out has ``V_r(f) < V_0(f) - tau_a - (M - 2 d)`` (its loss and entry 0's moved by at most
    d, and the gap to entry 0 only grows with the floor, as ``C_r >= C_0``), so while ``2 d``
    stays under M less the growth of tau since the anchor (and a bound of the rounding) it is
    more than this round's tau below entry 0: never within a tie tolerance of a column's maximum
    at any eta above the floor, as with fresh heads.  Otherwise the heads
    are made again, with M twice the largest drift per round seen times a horizon of rounds.

    The horizon adapts: a round on carried heads costs little more for a few more entries, a new
    anchor a pass over the lists' heads, so it doubles (up to ``MAX_HORIZON``) while the margin
    keeps at most a quarter more entries than half of it would, and halves (down to 1) where it
    keeps over twice as many (German: the early rounds' low floors, where any margin reaches far
    along the lists).  Where the heads would hold over half of the lists, they are made without
    a margin, and where they still would, not at all (:func:`floored_candidates` then works on
    the whole lists).  The state lives on the layout (the solver's cache, per cost object and
    labels, not pickled).
    """

    #: The first horizon (rounds of the largest drift per round seen that the margin covers).
    HORIZON = 4
    MAX_HORIZON = 64

    def __init__(self):
        self.anchor: np.ndarray | None = None  # the losses the heads were made for (flat copy)
        self.floor = 0.0  # the floor they were made at
        self.margin = 0.0
        self.tau = 0.0  # the tie margin at the anchor
        self.rate = 0.0  # largest drift per round (sup norm) seen between anchors
        self.age = 0  # rounds since the anchor
        self.head: _Head | None = None
        self.horizon = self.HORIZON
        self.anchors = 0  # how many times the heads were made (for tests and profiles)
        self.warm_rounds = 0  # rounds served by carried heads

    def entries(self, layout: _SparseLayout, losses_flat, top, first_R, first_C, first_V, tau: float, room: float,
                floor: float) -> "_Head | None":
        """This round's head entries (in column order, a superset of those with ``V_r >= V_0 -
        room``), as compact copies (cheaper to read every round than the lists they come from);
        None where the heads would hold over half of the lists (nothing is carried then)."""
        if self.anchor is not None and self.anchor.size == losses_flat.size:
            self.age += 1
            drift = float(np.abs(losses_flat - self.anchor).max())
            self.rate = max(self.rate, drift / self.age)
            # (heads made at a much lower floor are valid but longer than they need be)
            # (tau grows with the largest loss: a larger one than the anchor's takes its share of M)
            if (self.floor <= floor <= 2.0 * self.floor
                    and 2.0 * drift + max(0.0, tau - self.tau) + 2.0 * (room - tau) <= self.margin):
                self.warm_rounds += 1
                return self.head
        prefix = layout.prefix_keys
        offsets, flat = prefix.offsets, prefix.flat
        n = offsets.size
        for margin in (2.0 * self.horizon * self.rate, 0.0):
            reach = first_C + (top[layout.labels] - first_R + 2.0 * tau + margin) / floor
            np.minimum(reach, 0.5 * prefix.step, out=reach)  # a whole list at most (the keys stay in their column)
            counts = np.searchsorted(prefix.keys, reach + prefix.shifts, side="right") - offsets
            starts = np.cumsum(counts) - counts
            total = int(starts[-1] + counts[-1])
            if 2 * total <= layout.C.size:
                break
            self.horizon = max(1, self.horizon // 2)
            if margin == 0.0:
                self.anchor = self.head = None
                return None
        idx = np.arange(total) + np.repeat(offsets - starts, counts)
        V = layout.C.reshape(-1).take(idx) * -floor
        V += losses_flat.take(flat.take(idx))
        lowest = np.repeat(first_V - room, counts)
        if margin > 0.0:  # what half the margin would keep sets the next horizon
            half = int(np.count_nonzero(V >= lowest - 0.5 * margin))
        lowest -= margin
        sel = np.flatnonzero(V >= lowest)
        if margin > 0.0:
            if 4 * sel.size <= 5 * half:
                self.horizon = min(self.MAX_HORIZON, 2 * self.horizon)
            elif sel.size > 2 * half:
                self.horizon = max(1, self.horizon // 2)
        idx = idx.take(sel)
        self.head = _Head(cols=np.repeat(np.arange(n), counts).take(sel), C=layout.C.reshape(-1).take(idx),
                          flat=flat.take(idx), rows=layout.rows.reshape(-1).take(idx))
        self.anchor = losses_flat.copy()
        self.floor, self.margin, self.tau, self.age = float(floor), margin, float(tau), 0
        self.anchors += 1
        return self.head


@dataclass(frozen=True)
class _Head:
    """Entries of the lists (in column order): their columns, costs, indices into the flat
    losses and rows."""

    cols: np.ndarray
    C: np.ndarray
    flat: np.ndarray
    rows: np.ndarray


def sparse_candidates_compiled(solver, layout: _SparseLayout, losses: np.ndarray, n_total: int, eps: float,
                               tau: float, floor: float = 0.0, ceiling: float = math.inf) -> tuple[_Candidates, int]:
    """:func:`list_candidates` by the compiled per-column kernel (module
    ``budro.solvers._sparse_kernels``), which also reads the minimiser of g off the exact hulls;
    on the lists of :class:`WarmLists` where its certificate holds (the same output).  The
    candidates are exact for ``floor <= eta <= ceiling``."""
    losses_flat = np.ascontiguousarray(losses, dtype=np.float64).reshape(-1)
    lists = layout.warm.lists(layout, losses_flat, tau)
    rows, cols, R, C, n_dom, edge_e, edge_dc, last_cost, starts = _sparse_kernels.sparse_candidates(
        layout.labels, layout.K, lists[1], lists[2], losses_flat, tau, layout.ones,
        threads=solver.kernel_threads, workspace=layout.workspace, ptr=lists[0], width=lists[3], floor=floor,
        ceiling=ceiling)
    total = float(last_cost.sum()) if layout.weights is None else float(last_cost @ layout.weights)
    need = total - n_total * eps
    eta = 0.0 if need <= 0.0 else layout.breakpoint(edge_e, edge_dc, need)
    return _Candidates(rows=rows, cols=cols, starts=starts, R=R, C=C, breakpoint_eta=eta, compiled=True,
                       weights=layout.weights, edges=(edge_e, edge_dc, last_cost), floor=float(floor),
                       ceiling=float(ceiling), scratch=layout.scratch), n_dom


#: Rounds of drift the first warm lists are pruned for; adapted between 1 and _WARM_MAX_HORIZON.
_WARM_HORIZON = 4
_WARM_MAX_HORIZON = 256
#: Rounds on the complete lists after pruning did not pay (doubled while it keeps not paying).
_WARM_PAUSE = (4, 64)
#: Work of the pruning pass per entry it keeps, in units of the kernel's work per list entry
#: (a kept entry is copied, and the keep-or-drop branch is mispredicted; measured on German).
_WARM_KEEP_COST = 6.0
#: Pruning is done when its estimated work per round is under this share of the complete lists'.
_WARM_PAYS = 0.8
#: Columns of the trial block (an eighth of the columns, from this many columns on).
_WARM_SAMPLE = 64
#: Relative room for rounding in the warm certificate (far above float64's, far below any drift).
_WARM_ROUNDING = 1e-13


class WarmLists:
    """Each column's list pruned for the losses of an anchor round, carried to later rounds while
    a certificate shows that the compiled kernel gives exactly the complete lists' output.

    The kernel keeps entry r of a list (increasing cost) only if ``R_r + tau >= max(R before
    r)`` (dominance), and what it computes from the kept entries does not depend on the others:
    on any sub-list holding the first entry and every entry dominance keeps, it gives the same
    candidates, hull edges and breakpoint, bit for bit (an entry it drops from the sub-list is
    dropped from the complete list too, and the first largest entry before any position is
    itself kept).  At the anchor (losses ``A``) the pruned list keeps every entry with
    ``R_r + margin >= max(R before r)``, ``margin = 2 (tau + Delta)`` for a drift allowance
    Delta, so that every dropped entry lies more than ``s_k = margin`` below an earlier one
    (``max(R before r) - R_r > s_k`` in the columns of label k).  In a later round whose losses
    differ from ``A`` by at most ``d_k`` under label k (every list of a column reads one label),
    each dropped entry lies more than ``s_k - 2 d_k`` below an earlier one, so if
    ``s_k - 2 d_k >= tau`` (with room for rounding) dominance drops it from the complete list as
    well: the pruned lists are used.
    Otherwise the lists are pruned again at this round's losses (one pass over the complete
    lists), with Delta covering ``horizon`` rounds of the largest drift per round seen.

    The horizon is chosen by the work it saves, counted in list entries: a round on pruned lists
    costs their length f (a fraction of the complete lists), a pruning pass ``1 + 6 f``, so a
    horizon H costs about ``(1 + 6 f(H)) / H + f(H)`` per round against 1 for the complete
    lists.  The pruning pass counts what half its margin would keep (twice the margin is taken
    to add at least twice what the second half added), and the next horizon is the best of
    H / 2, H and 2 H.  When none costs under 0.8 (the first rounds, where the losses are nearly
    tied and any allowance keeps most entries), the complete lists are used for a pause of 4
    rounds, doubled while pruning keeps not paying.  On many columns the pass is first tried on
    an eighth of them, so that a pass that would not pay is mostly not made.  The state lives
    on the layout (the solver's cache, per cost object and labels, not pickled).
    """

    def __init__(self):
        self.anchor: np.ndarray | None = None  # the losses the lists were pruned for (flat copy)
        self.previous: np.ndarray | None = None  # last round's losses, while there is no anchor
        self.slack: np.ndarray | None = None  # per label: every dropped entry lies more than this below an earlier one
        self.rate = 0.0  # largest drift per round (sup norm) seen
        self.horizon = _WARM_HORIZON
        self.age = 0  # rounds since the anchor
        self.pause = 0  # rounds left on the complete lists
        self.next_pause = _WARM_PAUSE[0]
        self.ptr = self.C = self.flat = None
        self.size = self.width = 0
        self.anchors = 0  # how many times the lists were pruned (for tests and profiles)
        self.warm_rounds = 0  # rounds served by pruned lists
        self._buffer: np.ndarray | None = None  # what previous or anchor is (_kept)

    def lists(self, layout: _SparseLayout, losses_flat: np.ndarray, tau: float):
        """``(ptr, C, flat, width)`` of the lists to run the kernel on this round."""
        n, m = layout.rows.shape
        total = n * m
        K = layout.K
        kern = _sparse_kernels._kernels()  # (compiled path only: numba is there)
        if self.anchor is None and self.pause > 0:
            # on the complete lists for a while: no drift measured in the pause; the round after
            # it measures its drift against the pause's last round (at Adult, where pruning never
            # pays, the drift and the copy took 0.1-0.15 ms of every solve)
            self.pause -= 1
            self.previous = self._kept(losses_flat) if self.pause == 0 else None
            return layout.complete
        scale = float(kern.abs_max(losses_flat))
        if self.anchor is not None and self.anchor.size == losses_flat.size:
            self.age += 1
            drift = np.empty(K)
            kern.label_drift(losses_flat, self.anchor, K, drift)
            room = tau + _WARM_ROUNDING * (scale + float(drift.max()) + tau)
            # lists that kept most entries are pruned again after their horizon even while valid
            stale = self.age >= self.horizon and 2 * self.size > total
            if not stale and np.all(self.slack - 2.0 * drift > room):
                self.warm_rounds += 1
                return self.ptr, self.C, self.flat, self.width
            self.rate = max(self.rate, float(drift.max()) / self.age)
            self.anchor = None
        elif self.previous is not None and self.previous.size == losses_flat.size:
            drift = np.empty(K)
            kern.label_drift(losses_flat, self.previous, K, drift)
            self.rate = max(self.rate, float(drift.max()))
        else:  # the first round: no drift seen yet
            self.previous = self._kept(losses_flat)
            return layout.complete
        if n >= 8 * _WARM_SAMPLE:  # try the pruning on a block of columns first: does it pay?
            a, b = (n - n // 8) // 2, (n - n // 8) // 2 + n // 8
            size, half = self._prune(layout, losses_flat, tau, scale, columns=(a, b))
            tried = int(layout.complete[0][b] - layout.complete[0][a])
            if self._cost(size / tried, self.horizon) >= _WARM_PAYS:
                self._choose(size, half, tried)
                self.previous = self._kept(losses_flat)
                return layout.complete
        self._choose(*self._prune(layout, losses_flat, tau, scale), total)
        if self.size >= total:  # nothing pruned: the complete lists (no copy to stream through)
            return layout.complete
        return self.ptr, self.C, self.flat, self.width

    def _kept(self, losses_flat: np.ndarray) -> np.ndarray:
        """A copy of the losses in a buffer kept from round to round (a fresh n K copy costs its
        page faults each round); it serves as ``previous`` or ``anchor``, never both at once."""
        buf = self._buffer
        if buf is None or buf.shape != losses_flat.shape:
            buf = self._buffer = np.empty_like(losses_flat)
        np.copyto(buf, losses_flat)
        return buf

    def _choose(self, size: int, half: int, total: int) -> bool:
        """Set the next horizon from what a pruning pass kept (and what half its margin would
        keep) out of ``total`` entries; False (and a pause) when pruning does not pay."""
        H = self.horizon
        # twice the margin keeps at least twice what the second half of this margin added
        double = min(total, size + 2 * (size - half))
        options = [(self._cost(double / total, 2 * H), 2 * H), (self._cost(size / total, H), H)]
        if H > 1:
            options.append((self._cost(half / total, H // 2), H // 2))
        cost, best = min(options)
        if cost >= _WARM_PAYS:  # pruning does not pay yet: the complete lists for a while
            self.pause, self.next_pause = self.next_pause, min(2 * self.next_pause, _WARM_PAUSE[1])
            self.horizon = max(1, H // 2)
            return False
        self.next_pause = _WARM_PAUSE[0]
        self.horizon = min(_WARM_MAX_HORIZON, best)
        return True

    @staticmethod
    def _cost(kept: float, horizon: int) -> float:
        """Work per round (in complete lists) of pruning for ``horizon`` rounds, keeping ``kept``."""
        return (1.0 + _WARM_KEEP_COST * kept) / horizon + kept

    def _prune(self, layout: _SparseLayout, losses_flat: np.ndarray, tau: float, scale: float,
               columns: tuple[int, int] | None = None) -> tuple[int, int]:
        """Prune every list (the new anchor), or only those of ``columns`` (a trial, nothing kept);
        returns the entries kept and those half the margin keeps."""
        n, m = layout.rows.shape
        delta = self.horizon * self.rate
        margin = np.full(layout.K, 2.0 * (tau + delta) + _WARM_ROUNDING * (scale + delta))
        ptr, C, flat, _ = layout.complete
        if columns is not None:
            a, b = columns
            cap = (b - a) * m
            size, _, half = _sparse_kernels.prune(
                ptr[a:b + 1], C, flat, losses_flat, layout.labels[a:b], margin, np.empty(b - a + 1, dtype=np.int64),
                np.empty(cap), np.empty(cap, dtype=flat.dtype))
            return size, half
        if self.ptr is None:
            self.ptr = np.empty(n + 1, dtype=np.int64)
            self.C = np.empty(n * m)
            self.flat = np.empty(n * m, dtype=layout.flat.dtype)
        self.size, self.width, half = _sparse_kernels.prune(
            ptr, C, flat, losses_flat, layout.labels, margin, self.ptr, self.C, self.flat)
        self.slack = margin  # every dropped entry lies more than its margin below an earlier one
        self.anchor = self._kept(losses_flat)
        self.previous = None
        self.age = 0
        self.anchors += 1
        return self.size, half
