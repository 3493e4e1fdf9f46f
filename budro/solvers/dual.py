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

This module holds the solver's parameters and the cutting plane; the paths live beside it:
:mod:`budro.solvers._dual_dense` (``g`` on column blocks, candidate pairs of a bracket),
:mod:`budro.solvers._dual_sparse` (neighbour lists pruned to their hulls) and
:mod:`budro.solvers._dual_plan` (what both share: evaluation records, ``g`` on candidate pairs,
the hulls' breakpoints, the exact recovery).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from budro.exceptions import ValidationError
from budro.solvers import _dual_dense, _dual_full, _dual_lists, _dual_plan, _dual_sparse, _sizing, _sparse_kernels
from budro.solvers._dual_dense import _CANDIDATES_PER_COLUMN  # noqa: F401  (re-exported)
from budro.solvers._dual_plan import (  # noqa: F401  (re-exported: dual-sgd and the tests use them)
    _ABOVE,
    _BELOW,
    _OPTIMAL,
    _Candidates,
    _DualPoint,
    _result_from_entries,
    _switch_entries,
    _switch_until_budget,
    _upper_hulls,
)
from budro.solvers._dual_sparse import _SparseLayout
from budro.solvers.base import Solver
from budro.transport import DEFAULT_BLOCK_BYTES, TransportProblem, TransportResult

__all__ = ["DualSolver"]

#: Ways of pruning a sparse cost's lists (see DualSolver's ``kernel``).
_KERNELS = ("auto", "numba", "numpy")


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
        How the sparse path prunes the neighbour lists (and the complete lists of a dense
        problem with few distinct points): a compiled per-column kernel (``"numba"``, needs the
        optional numba, ``pip install budro[fast]``; 3-4x faster on Adult), vectorised numpy
        passes (``"numpy"``), or numba when it is installed (``"auto"``) -- except on complete
        lists, where ``"auto"`` takes numpy until numba has started in the process: there a
        whole fit's solves cost less than numba's start (0.3-0.5 s; German's 500 rounds solve in
        about 0.4 s in numpy).  Both compute the same candidate pairs up to pairs that can never
        tie, and give the same result.  The dense column-block path does not use it.
    kernel_threads : int or None, default None
        Threads of the compiled kernels.  None: budro chooses from the cores this process may use
        (affinity, cgroup quota, ``BUDRO_NUM_THREADS``; :mod:`budro._threads`) as for a booster,
        one thread per 10 000 columns of neighbour lists (German and COMPAS: one, Adult: two on a
        2-core machine), every available core for the full path's scans.  The booster's threads
        sleep during the solve (``import budro`` shortens libgomp's spin, docs/threads.md), so the
        kernel may use the cores; on Adult (m = 32, XGBoost) two threads took the solve from 9.4
        to 7.4 ms per round (docs/performance.md).  The result does not depend on the count.
        In a process forked from one that ran a parallel kernel the sparse path's kernel runs on
        one thread whatever is set: numba's OpenMP threading layer terminates a forked child
        that starts a parallel region.
    max_dense_n : int or None, default 20000
        Largest n accepted on the full (dense) problem; larger ones are refused before any cost
        is read, with the estimated time and memory per round (about 250 ns per cost entry on a
        blocked cost: ~100 s at n = 20000, ~7 min at n = 40000; see :mod:`budro.solvers._sizing`)
        and the sparse alternative (``n_neighbors``).  None: no limit.  Sparse costs are never
        limited, nor are embedding costs on the full path (``full_min_n``).
    full_min_n : int, "auto" or None, default "auto"
        From this n on, an :class:`~budro.transport.EmbeddingCost` (unless it has few distinct
        points) is solved by the exact full path of :mod:`budro.solvers._dual_full`: per-column
        lists with certificates carried from round to round, columns rescanned only where the
        certificate fails, never an n x n array and, in a fit, no n x n work per round.  None:
        never.  ``"auto"``: 1000 with the compiled kernels (a 1500-row table's 100 rounds: 0.64 s
        against 5.8 s on column blocks), 4000 in numpy (where the full path is no faster below
        it); see :mod:`budro.solvers._sizing`.
    max_seconds : float or None, default None
        Seconds one solve on the full path may spend rescanning columns; when it runs out the
        plan is feasible, ``converged`` is False and ``info["gap"]`` is a certified bound on the
        distance to the full optimum (a ConvergenceWarning names it).  None: no limit.
    max_pairs : int or None, default 2**25
        Most pairs the full path keeps on its lists (about 90 bytes each with the list kernel's
        buffers, ~3 GiB at the default; Adult's 179 rounds keep 3-18 million, so 2**24 stopped
        rounds there short of their certificate); a rescan that would exceed it stops like
        ``max_seconds``.

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
                 kernel: str = "auto", kernel_threads: int | None = None,
                 max_dense_n: int | None = _sizing.DEFAULT_MAX_DENSE_N["dual"],
                 full_min_n: int | str | None = _sizing.DEFAULT_FULL_MIN_N, max_seconds: float | None = None,
                 max_pairs: int | None = 2**25):
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
        self.full_min_n = _sizing.check_optional_int(full_min_n, "DualSolver", "full_min_n", 1, words=("auto",))
        self.max_pairs = _sizing.check_optional_int(max_pairs, "DualSolver", "max_pairs", 1)
        if max_seconds is not None and (isinstance(max_seconds, bool) or not isinstance(max_seconds, numbers.Real)
                                       or not max_seconds > 0):
            raise ValidationError(f"DualSolver: max_seconds must be None or a number of seconds > 0, got {max_seconds!r}")
        self.max_seconds = None if max_seconds is None else float(max_seconds)
        self._full_state = None
        self._layout_cache: _SparseLayout | None = None
        self._locality_cache = None
        self._reduction_cache: _dual_lists.Reduction | None = None

    def prepare(self, n: int, *, sparse: bool) -> None:
        """Load the sparse path's compiled kernels in a background thread while the fit's set-up
        (fair metric, neighbour graph) runs: numba's start and the kernels' load from its cache
        take about 0.3-0.5 s in a fresh process (the parallel kernel's threading layer most of
        it), which the first solve would otherwise wait for.  The thread solves a small synthetic
        problem of the same kind with the same kernels (its own solver; nothing of this one is
        touched), and the first solve waits for it to end.  Nothing is started where the numpy
        kernel runs or for dense and full problems (tried at German and COMPAS, whose set-up is
        0.02-0.09 s, too short to hide it: German's first solve took 621 ms with the preload,
        525 ms without, in two benchmarks/training.py runs a few minutes apart)."""
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValidationError(f"DualSolver.prepare: n must be the number of points (an integer >= 0), got {n!r}")
        # Rounds of a fit follow: the full path's first solve keeps lists for their drift
        # (budro.solvers._dual_full._settings).
        self._rounds_ahead = True
        if not sparse or self.kernel == "numpy" or not _sparse_kernels.installed():
            return
        import threading

        # numba's import (about 0.3-0.5 s of Python) happens in the thread too: the fit's set-up
        # runs meanwhile, mostly in compiled code that releases the GIL
        thread = threading.Thread(target=_sparse_kernels.preload, args=(self.kernel_threads, int(n)),
                                  name="budro-kernel-preload", daemon=True)
        thread.start()
        self._preload_thread = thread

    def _wait_for_preload(self) -> None:
        thread = self.__dict__.pop("_preload_thread", None)
        if thread is not None:
            thread.join()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("_preload_thread", None)
        state["_layout_cache"] = None  # per-fit scratch, rebuilt on demand
        state["_locality_cache"] = None
        state["_reduction_cache"] = None
        state["_full_state"] = None
        return state

    def __repr__(self) -> str:
        return (f"DualSolver(tie_rtol={self.tie_rtol:g}, max_iter={self.max_iter}, block_bytes={self.block_bytes}, "
                f"kernel={self.kernel!r}, kernel_threads={self.kernel_threads}, "
                f"max_dense_n={getattr(self, 'max_dense_n', None)}, full_min_n={getattr(self, 'full_min_n', None)}, "
                f"max_seconds={getattr(self, 'max_seconds', None)}, max_pairs={getattr(self, 'max_pairs', None)})")

    def check_size(self, n: int, *, sparse: bool = False, held: bool = False, embedding: bool = False) -> None:
        """Refuse (ValidationError) a full problem of n points past ``max_dense_n``, with the estimate
        (an embedding cost from ``full_min_n`` on takes the full path, which is never refused)."""
        if embedding and _dual_full.reaches(self, n):
            return
        if not sparse:
            _sizing.refuse_dense(self, n, held=held)

    # ------------------------------------------------------------------ the dual function

    # ------------------------------------------------------------------ the two paths
    # (module functions in budro.solvers._dual_dense / _dual_sparse / _dual_plan; these methods
    # are the names the cutting plane, dual-sgd and the tests use)

    def _block_columns(self, problem: TransportProblem) -> int:
        return _dual_dense.block_columns(self, problem)

    def _evaluate(self, problem: TransportProblem, eta: float) -> _DualPoint:
        """``g(eta)`` with each column's cheapest and most expensive argmax row (block by block, or
        from the full path's certified lists: exact either way)."""
        if _dual_full.applies(self, problem):
            return _dual_full.evaluate(self, problem, eta)
        return _dual_dense.evaluate(self, problem, eta)

    def _candidates(self, problem: TransportProblem, a: _DualPoint, b: _DualPoint) -> _Candidates | None:
        """The pairs that can be near-argmax pairs anywhere in ``[a.eta, b.eta]`` (one pass over C)."""
        return _dual_dense.candidates(self, problem, a, b)

    def _narrow(self, problem: TransportProblem, cand: _Candidates, a: _DualPoint, b: _DualPoint) -> _Candidates:
        """The candidate pairs that can still tie inside ``[a.eta, b.eta]``."""
        return _dual_dense.narrow(self, problem, cand, a, b)

    def _tau(self, problem: TransportProblem) -> float:
        return _dual_plan.tie_margin(self, problem)

    def _sparse_layout(self, problem: TransportProblem) -> _SparseLayout:
        """The neighbour lists in cost order (cached per cost object and labels)."""
        return _dual_sparse.sparse_layout(self, problem)

    def _sparse_candidates(self, problem: TransportProblem, floor: float = 0.0,
                           ceiling: float = math.inf) -> tuple[_Candidates, int]:
        """The listed pairs of a sparse cost that can ever be (near-)argmax pairs, O(n m) (with
        ``floor`` > 0, on the compiled path: that can be for some eta >= floor; with ``ceiling``
        < inf, there too: for some eta <= ceiling)."""
        return _dual_sparse.sparse_candidates(self, problem, floor, ceiling)

    @staticmethod
    def _breakpoint_eta(problem: TransportProblem, cand: _Candidates) -> float:
        return _dual_plan.breakpoint_eta(problem, cand)

    def _evaluate_candidates(self, problem: TransportProblem, cand: _Candidates, eta: float) -> _DualPoint:
        """``g`` restricted to the candidate pairs (same values as a full pass)."""
        return _dual_plan.evaluate_candidates(self, problem, cand, eta)

    @staticmethod
    def _position(point: _DualPoint, eps: float) -> str:
        return _dual_plan.position(point, eps)

    # ------------------------------------------------------------------ solve

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        self._wait_for_preload()
        eps = problem.eps
        n_eval = n_full = 0  # only the bracket ends are kept, not every evaluated point

        # A sparse cost (capability ``is_sparse`` with ``neighbors``/``neighbor_costs``) is never
        # read column by column: its listed pairs that can ever tie are gathered once, O(n m).
        #    The minimiser is then read off the hulls' breakpoints and certified by one evaluation
        #    (the bracketing below, started there, is only a fallback for rounding near ties).
        sparse = bool(getattr(problem.cost, "is_sparse", False)) and hasattr(problem.cost, "neighbors")
        # An embedding cost past full_min_n: the exact full path (lists certified round to round).
        if not sparse and _dual_full.applies(self, problem):
            return _dual_full.solve(self, problem, eta0=eta0)
        if sparse:  # many points: solved renumbered by locality (same problem, cache-friendly)
            order = _dual_sparse.locality(self, problem.cost)
            if order is not None:
                return _dual_sparse.solve_renumbered(self, problem, order, eta0)
        candidates: _Candidates | None = None
        pruned_pairs = None
        # A dense cost on few distinct points (duplicates collapsed) goes the same way, on
        # complete lists (budro.solvers._dual_lists); neither forms n x n, so only the dense
        # column-block path is subject to max_dense_n.
        reduced = None if sparse else _dual_lists.reduction(self, problem)
        if reduced is None:
            self.check_size(problem.n, sparse=sparse, held=bool(problem.cost.is_dense))
        # (complete lists: numpy passes unless numba has started in this process, _dual_lists.compiled)
        use_compiled = _dual_sparse.compiled(self) if reduced is None else _dual_lists.compiled(self)
        # Lists (sparse or reduced): candidates exact from a floor under the last rounds' eta*
        # (far fewer pairs); should eta* lie below it, they are made again without one
        # (_dual_plan.EtaFloor).
        layout = floors = None
        if sparse or reduced is not None:
            layout = _dual_sparse.sparse_layout(self, problem) if sparse else reduced.layout
            floors = layout.floors

        def lists(floor: float, ceiling: float = math.inf) -> tuple[_Candidates, int]:
            if sparse:
                return self._sparse_candidates(problem, floor=floor, ceiling=ceiling)
            return _dual_lists.candidates(self, problem, reduced, floor=floor, compiled=use_compiled)

        ceiling = math.inf
        if sparse or reduced is not None:
            floor = floors.next()
            if floor == 0.0 and not use_compiled and not floors.resting():
                # numpy passes with no eta* known yet: a trial floor far below any eta* measured
                # (_dual_sparse.TRIAL_FLOOR), should eta* lie below it, as any floor
                floor = _dual_sparse.trial_floor(layout, problem.losses)
            if sparse and use_compiled and floor > 0.0:
                # and a ceiling above the last rounds' eta* (the compiled kernel: one pair in most
                # columns); should eta* lie above it, they are made again with the floor alone
                ceiling = floors.ceiling()
            candidates, pruned_pairs = lists(floor, ceiling)
            eta0 = self._breakpoint_eta(problem, candidates)
        initial_pairs = None if candidates is None else int(candidates.rows.size)
        floor = 0.0 if candidates is None else candidates.floor
        ceiling = math.inf if candidates is None else candidates.ceiling

        def probe(eta: float) -> tuple[_DualPoint, str]:
            nonlocal n_eval, n_full
            if candidates is not None and eta < candidates.floor:
                raise _dual_plan.BelowFloor
            if candidates is not None and eta > candidates.ceiling:
                raise _dual_plan.AboveCeiling
            n_eval += 1
            if candidates is not None:
                point = self._evaluate_candidates(problem, candidates, eta)
            else:
                n_full += 1
                point = self._evaluate(problem, eta)
            return point, self._position(point, eps)

        def budget_left() -> bool:
            return n_eval < self.max_iter

        tried_width = math.inf

        def narrow(a: _DualPoint, b: _DualPoint) -> None:
            # Once the bracket is narrow enough, g is evaluated only on the pairs that can matter
            # inside it (tried again each time the bracket has halved since the last try).
            nonlocal candidates, tried_width
            if b.eta - a.eta <= 0.5 * tried_width:
                tried_width = b.eta - a.eta
                if candidates is None:
                    candidates = self._candidates(problem, a, b)
                elif candidates.expand is None:  # a reduced problem's lists are short already
                    candidates = self._narrow(problem, candidates, a, b)

        def search(eta0):
            # 1. Bracket the minimiser (warm start eta0 bracketed tightly first; _dual_plan.bracket).
            found, a, b = _dual_plan.bracket(probe, budget_left, eta0)
            if found is not None:
                return found, a, b, False
            # 2. Kelley cutting plane on [a, b] (_dual_plan.cutting_plane).
            return _dual_plan.cutting_plane(probe, budget_left, a, b, _dual_plan.lines_meet(problem), narrow)

        while True:
            try:
                found, a, b, stalled = search(eta0)
                break
            except _dual_plan.BelowFloor:  # eta* lies below the floor: every candidate again
                floors.missed()
                candidates, pruned_pairs = lists(0.0)
            except _dual_plan.AboveCeiling:  # above the ceiling: the candidates from the floor
                floors.above()
                candidates, pruned_pairs = lists(candidates.floor)
            eta0 = self._breakpoint_eta(problem, candidates)
        if floors is not None and found is not None:
            floors.certified(found.eta)

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
            # No upper bracket within max_iter: moving nothing is always feasible (each point's
            # own cost: 0, or a reduced problem's groups' own cost, the diagonal of its D).
            own = np.arange(n)
            own_cost = np.zeros(n) if reduced is None else reduced.plan_costs(own)
            cheap, dear, switch = (own, own_cost), (a.lo, a.c_lo), True
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
            "reduced": None if reduced is None else (reduced.n_groups, reduced.n_classes),
            "full_evaluations": n_full,
            "floor": floor,  # the candidates were first made exact from this eta (0: every eta)
            "below_floor": floor > 0.0 and candidates.floor == 0.0,
            "ceiling": ceiling,  # ... and to this eta (inf: every eta)
            "above_ceiling": ceiling < math.inf and candidates.ceiling == math.inf and candidates.floor > 0.0,
        }
        if sparse or reduced is not None:
            # The argmax costs are the listed costs (of the neighbour lists, or the groups' costs
            # the reduced problem was solved with), exactly what cost.entries would give: O(n).
            result, split_column, n_switched = _dual_plan.result_from_switch(
                problem, cheap, dear, switch, compiled=use_compiled, scratch=layout.scratch if use_compiled else None,
                **meta, info=info)
        else:
            plan, split_column, n_switched = _switch_until_budget(problem, cheap[0], dear[0], switch)
            result = TransportResult.from_plan(problem, plan, **meta, info=info)
        result.info.update(split_column=split_column, n_switched=n_switched)
        result.info["gap"] = reported.value - result.objective
        return result
