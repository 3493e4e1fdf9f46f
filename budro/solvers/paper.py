"""The paper's adversary, for reproduction: ``paper`` (alias ``paper-sgd``).  NOT exact, and the
budget may be exceeded.

The paper's code found the adversary's plan differently on each data set; the two argmax routes
are this solver's two modes (``eta_search``).  On COMPAS the paper used the entropic
regularisation instead: that is budro's ``entropic`` solver (``experiments/compas-paper-adversary.toml``).

``eta_search = "sgd"`` (the default): Adult, Algorithm 2 of the paper with the hyperparameters of its
Appendix B.4 and the UMich-FATML/BuDRO code ``scripts/dual_sgd.py`` / ``tf_xgboost_log.py``
(``boost_dual_sgd``), reproduced step by step:

1. **eta by minibatch SGD on the dual** ``g(eta) = eps * eta + (1/n) sum_j max_i (R_ij - eta C_ij)``:
   every round starts afresh at ``eta_init = 0.1`` (the code calls ``dual(..., init=0.1,
   newSoln=True)`` each round: no warm start) with zero momentum; each of ``n_steps = 100`` steps
   samples ``batch_size = 200`` columns uniformly with replacement and takes the heavy-ball step of
   ``tf.keras.optimizers.SGD(learning_rate=1e-4, momentum=0.9)`` on the minibatch objective::

       v <- momentum * v - learning_rate * (eps - c_batch),      eta <- max(0, eta + v)

   where ``eps - c_batch`` is the minibatch subgradient (``c_batch``: mean cost of the sampled
   columns' argmax rows).  The projection ``max(0, .)`` is Algorithm 2's (the paper's code has
   none; a negative eta would reward moving far).  The reported eta is the last iterate.
2. **The plan read off the argmax at that eta** (Algorithm 2, steps 8-11): every column j sends its
   whole mass ``1/n`` to one row of ``argmax_i R_ij - eta C_ij``.  Nothing makes this plan meet the
   budget: its cost is whatever the argmax rows cost at that eta, above or below ``eps``
   (``info["budget_ratio"] = transport_cost / eps``, reported every round).

``eta_search = "bisection"``: German credit, the paper's Algorithm ``alg:pidual`` ("Find Pi using the
dual formulation", Appendix C.3: "a bisection method ... a small fixed number (about 30) of subgradient computations in every
boosting step", no SGD) and its code ``german/german_fair_age.py --dual`` ->
``tf_xgboost_log.boost_dual`` -> ``scripts/tf_dual.py`` ``find_wts``:

1. **eta by bisection on the sign of the dual's subgradient** ``eps - (1/n) sum_j C_{i_j j}``
   (``i_j`` an argmax row of column j) over the full problem, on the bracket ``[0, 15]`` (the
   German script's ``lowg=0.0, highg=15.0``); each step halves the bracket and keeps the half whose
   ends have subgradients of opposite signs, ``n_bisections = 30`` steps (bracket width 15 / 2^30,
   about 1.4e-8; the paper's code ran scipy's ``brentq`` on the same step function, which also ends
   on the breakpoint of g).  A probe whose subgradient interval contains 0 is the exact minimiser
   and ends the search.  The reported eta is the midpoint of the final bracket, within
   ``info["eta_tolerance"]`` (half its width) of the minimiser eta*.
2. **The plan read off the argmax at that eta**, one row per column, as above.  At an eta that is not
   exactly eta*, only one side of eta*'s breakpoint is seen: just below it every column whose
   argmax changes at eta* still goes to its farther row (over budget), just above it to its nearer
   row (under budget), so the budget used is about ``eps - g'-(eta*)`` or ``eps - g'+(eta*)``.  The
   paper's code then split one column between two tied rows when float32 rounding made them tie
   (``find_wts``'s ``split``, a correction of at most one column's mass 1/n); budro evaluates in
   float64 and does not: the plan is exactly the argmax plan of ``alg:pidual`` and its "randomly
   select" heuristic.

Bracket: when the subgradient at the upper end is still negative (eta* above it), the upper end
is grown by 4x until it is not (``info["bracket_grown"]``); when the lower end is not below eta*,
the search starts at 0, and ``eta = 0`` when the cheapest argmax plan at 0 is within budget.  The
paper's ``brentq`` would have stopped with an error in both cases (no sign change in the bracket).

Tie rule (both modes): among the argmax rows of a column (values within ``tie_rtol`` of the
maximum, as in :class:`~budro.solvers.dual.DualSolver`), the **cheapest** one, and among equally
cheap ones the smallest row index.  The paper's appendix C says "randomly select", its code takes
``tf.argmax`` (the first maximiser) or the first tied entry.  At an eta reached by SGD or by
bisection, rows tied in value almost surely tie in cost too (two lines ``R_i - eta C_i`` with
different slopes meet at a single eta), so the rule changes which of several equally cheap, equally
lossy rows receives the mass but not the plan's cost or objective; ties of different cost happen
only at breakpoints of ``g``, where the cheapest row keeps the overshoot as small as the argmax
plan allows.

Evaluation: the SGD's minibatch columns only (:func:`budro.solvers.sgd.run_sgd`, shared with
``dual-sgd``); each bisection probe and the final argmax through a
:class:`~budro.solvers.dual.DualSolver` instance's full evaluation (column blocks of a dense or
embedding cost) or, for a sparse :class:`~budro.transport.NeighborCost`, through its neighbour
lists (the paper's own O(n m) speed-up of Section 3).

How it differs from ``dual-sgd`` and ``dual``: those build an exactly feasible, certified plan
(``dual`` at the exact eta*); ``paper`` keeps the paper's eta search and the paper's argmax plan,
budget overshoot included.  Use it to reproduce the paper, not to train.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from budro.exceptions import ValidationError
from budro.solvers import _dual_plan, _sizing
from budro.solvers.base import Solver
from budro.solvers.dual import _ABOVE, _BELOW, _OPTIMAL, DualSolver, _DualPoint, _result_from_entries
from budro.solvers.sgd import _Batches, _check_int, _check_real, _replace, run_sgd
from budro.transport import DEFAULT_BLOCK_BYTES, DenseCost, EmbeddingCost, TransportProblem, TransportResult

__all__ = ["PaperSolver", "PaperSGDSolver"]

#: The eta searches (``eta_search``): the paper's Adult and German routes.
ETA_SEARCHES = ("sgd", "bisection")
#: The German script's bracket for eta (``german_fair_age.py``: ``lowg=0.0, highg=15.0``).
PAPER_BRACKET = (0.0, 15.0)
#: Factor by which the bracket's upper end grows while eta* lies above it.
_GROWTH = 4.0
#: Largest upper end tried.
_ETA_CEILING = 1e250


class PaperSolver(Solver):
    """The paper's adversary as its code ran it: eta by its dual SGD (Algorithm 2, Adult) or by
    bisection on the dual's subgradient (``alg:pidual``, German credit), the plan read off the argmax
    at that eta.  **Not exact; the budget may be exceeded** (see :mod:`budro.solvers.paper`).

    Parameters
    ----------
    eta_search : {"sgd", "bisection"}, default "sgd"
        How eta is found: ``"sgd"``, the paper's dual SGD (Adult; the parameters ``batch_size`` to
        ``random_state`` apply), or ``"bisection"``, the paper's bisection on the full problem
        (German credit; ``bracket`` and ``n_bisections`` apply).
    batch_size : int, default 200
        Columns per SGD step (the paper's Adult setting, Appendix B.4).
    n_steps : int, default 100
        SGD steps per round (Appendix B.4: "a number of SGD iterations (set to 100)").
    learning_rate : float, default 1e-4
        SGD learning rate on eta (Appendix B.4), > 0.
    momentum : float, default 0.9
        Heavy-ball momentum in [0, 1) (Appendix B.4; tf.keras SGD, reset every round).
    eta_init : float, default 0.1
        Where the SGD starts every round (Appendix B.4: "an initial guess of the dual variable
        (set to 0.1)"), > 0.
    warm_start : bool, default False
        SGD only: start from ``eta0`` (last round's eta, which BuDRO passes) instead of
        ``eta_init``.  The paper's code restarts at ``eta_init`` every round, hence False.  The
        bisection always starts from ``bracket`` (as the paper's code did); True is refused there.
    random_state : int, numpy Generator or None, default 0
        The SGD's column sampling.  An integer seeds a generator made at the first solve and
        consumed by the following ones, so that every round draws new minibatches (as the paper's
        code did with numpy's global generator); the same seed repeats the same sequence of rounds.
        A Generator is consumed as given; None draws fresh entropy.
    bracket : pair of floats, default (0.0, 15.0)
        Bisection only: the initial bracket ``[low, high]`` for eta, ``0 <= low < high`` (the German
        script's ``lowg=0.0, highg=15.0``).  Grown past ``high`` or extended down to 0 when eta*
        lies outside it (``info["bracket_grown"]``).
    n_bisections : int, default 30
        Bisection only: halvings of the bracket, each one subgradient evaluation over the full
        problem (the paper: "a small fixed number (about 30)"); fewer when a probe lands on the
        exact minimiser.  >= 0.
    tie_rtol : float, default 1e-12
        Relative tie tolerance of the argmax (as :class:`~budro.solvers.dual.DualSolver`).
    block_bytes : int, default ``budro.transport.DEFAULT_BLOCK_BYTES``
        Memory of one block of cost columns in a full argmax pass.
    max_dense_n : int or None, default 20000
        Largest n accepted on the full (dense) problem, refused past it with the estimated time and
        memory (measured for the SGD mode: one full argmax pass per round; the bisection makes
        about ``n_bisections + 3`` such passes); None: no limit.

    Notes
    -----
    ``eta`` is the SGD's last iterate or the bisection's final midpoint, ``dual_objective =
    g(eta)`` (an upper bound on the LP optimum at ``eps``, whatever eta is), ``n_iter`` the SGD
    steps plus the argmax pass, or the full evaluations of the bisection (bracket ends, probes, the
    argmax pass).  ``info`` holds ``eta_search``, ``budget_ratio`` (``transport_cost / eps``; NaN at
    ``eps = 0``), ``over_budget`` (``transport_cost`` above ``eps`` beyond rounding), ``tie_rule``
    and ``gap = g(eta) - objective`` (negative when the plan is over budget and beats the optimum
    at ``eps``); the SGD adds ``eta_start``, ``warm_started``, ``sgd_steps``; the bisection adds
    ``bracket`` (the final ``[a, b]``: the subgradient is negative at ``a`` and positive at ``b``,
    so every minimiser lies strictly inside), ``eta_tolerance`` (half its width; 0 when a probe was
    the exact minimiser, ``exact_hit``), ``evaluations`` and ``bracket_grown``.  With ``eps = 0``
    (plain boosting) nothing may move: the exact ``dual`` answers (``info["delegated"]``).

    Declared tolerances (what :func:`budro.testing.check_solver` holds it to) are a-priori bounds
    that any argmax plan meets and nothing tighter: :meth:`budget_tolerance` is the largest
    allowed cost minus ``eps`` (a column moves at most as far as its farthest allowed row) and
    :meth:`objective_tolerance` is ``mean_j (max_i R_ij - R_jj)`` (the argmax plan never loses
    loss against moving nothing, and the optimum gains at most that).
    """

    name = "paper"
    guarantee = (
        "NOT exact and NOT always feasible: the plan puts each column's mass 1/n on one argmax row of "
        "R_ij - eta C_ij at the paper's eta (its dual SGD, Algorithm 2, or its bisection, Algorithm alg:pidual), so "
        "column marginals are exact but transport_cost may exceed eps (info['budget_ratio'] = "
        "transport_cost / eps, per round); the objective is at least the empirical loss and at most the LP "
        "optimum at budget transport_cost."
    )
    exact = False

    def __init__(
        self,
        eta_search: str = "sgd",
        batch_size: int = 200,
        n_steps: int = 100,
        learning_rate: float = 1e-4,
        momentum: float = 0.9,
        eta_init: float = 0.1,
        warm_start: bool = False,
        random_state: Any = 0,
        bracket: Any = PAPER_BRACKET,
        n_bisections: int = 30,
        tie_rtol: float = 1e-12,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_dense_n: int | None = _sizing.DEFAULT_MAX_DENSE_N["paper-sgd"],
    ):
        owner = type(self).__name__
        if not isinstance(eta_search, str) or eta_search not in ETA_SEARCHES:
            raise ValidationError(f"{owner}: eta_search must be one of {', '.join(map(repr, ETA_SEARCHES))} "
                                  f"(the paper's dual SGD on Adult, its bisection on German credit), got {eta_search!r}")
        self.eta_search = eta_search
        self.batch_size = _check_int("batch_size", batch_size, 1, owner)
        self.n_steps = _check_int("n_steps", n_steps, 0, owner)
        self.learning_rate = _check_real("learning_rate", learning_rate, 0.0, 1e6, owner, low_open=True)
        self.momentum = _check_real("momentum", momentum, 0.0, 1.0 - 1e-12, owner, low_open=False)
        self.eta_init = _check_real("eta_init", eta_init, 0.0, 1e250, owner, low_open=True)
        if not isinstance(warm_start, (bool, np.bool_)):
            raise ValidationError(f"{owner}: warm_start must be True or False, got {warm_start!r}")
        if warm_start and eta_search == "bisection":
            raise ValidationError(f"{owner}: warm_start=True applies to eta_search='sgd' only; the paper's bisection "
                                  f"starts from its bracket every round")
        self.warm_start = bool(warm_start)
        if isinstance(random_state, bool) or not (
            random_state is None or isinstance(random_state, (numbers.Integral, np.random.Generator))
        ):
            raise ValidationError(f"{owner}: random_state must be an integer, a numpy Generator or None, got {random_state!r}")
        self.random_state = random_state
        self.bracket = _check_bracket(bracket, owner)
        self.n_bisections = _check_int("n_bisections", n_bisections, 0, owner)
        # Every argmax pass goes through the exact solver's evaluation (and its sparse cache).
        self._dual = DualSolver(tie_rtol=tie_rtol, block_bytes=block_bytes, max_dense_n=None)
        self.tie_rtol, self.block_bytes = self._dual.tie_rtol, self._dual.block_bytes
        self.max_dense_n = _sizing.check_max_dense_n(max_dense_n, owner)
        self._generator: np.random.Generator | None = None

    def __repr__(self) -> str:
        if self.eta_search == "bisection":
            return f"PaperSolver(eta_search='bisection', bracket={self.bracket!r}, n_bisections={self.n_bisections})"
        return (
            f"PaperSolver(eta_search='sgd', batch_size={self.batch_size}, n_steps={self.n_steps}, "
            f"learning_rate={self.learning_rate:g}, momentum={self.momentum:g}, eta_init={self.eta_init:g}, "
            f"warm_start={self.warm_start}, random_state={self.random_state!r})"
        )

    def check_size(self, n: int, *, sparse: bool = False, held: bool = False) -> None:
        """Refuse (ValidationError) a full problem of n points past ``max_dense_n``, with the estimate."""
        if not sparse:  # the measured constants are filed under the SGD mode's name (budro.solvers._sizing)
            _sizing.refuse_dense(_SizingView("paper-sgd", self.max_dense_n, self.block_bytes), n, held=held)

    # ------------------------------------------------------------------ declared tolerances

    def budget_tolerance(self, problem: TransportProblem) -> float:
        """A priori: ``max(0, largest allowed cost - eps)`` plus rounding.  Any plan, the argmax
        plan included, costs at most the largest allowed cost; nothing tighter holds."""
        top = _largest_cost(problem.cost)
        return max(0.0, top - problem.eps) + 1e-9 * max(problem.eps, top, 1e-12) + 1e-12

    def objective_tolerance(self, problem: TransportProblem) -> float:
        """A priori: ``mean_j (max_i R_ij - R_jj)`` over the allowed rows i, plus rounding.  The
        argmax plan at any eta >= 0 gains at least 0 over moving nothing (``C_jj = 0``), and the LP
        optimum at most that."""
        best = _best_allowed_losses(problem)
        own = problem.losses[np.arange(problem.n), problem.labels]
        return float(np.mean(best - own)) + 1e-9 * max(1.0, problem.max_abs_loss)

    # ------------------------------------------------------------------ solve

    def _rng(self) -> np.random.Generator:
        if isinstance(self.random_state, np.random.Generator):
            return self.random_state
        if self._generator is None:
            self._generator = np.random.default_rng(self.random_state)
        return self._generator

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        sparse = bool(getattr(problem.cost, "is_sparse", False)) and hasattr(problem.cost, "neighbors")
        self.check_size(problem.n, sparse=sparse, held=bool(problem.cost.is_dense))
        n, eps = problem.n, problem.eps
        if eps == 0.0:  # plain boosting: nothing may move (the paper never ran eps = 0)
            res = self._dual._solve(problem, eta0=None)
            info = dict(res.info, delegated=True, budget_ratio=math.nan, over_budget=False, eta_search=self.eta_search,
                        tie_rule="cheapest")
            return _replace(res, solver=self.name, info=info)
        evaluate = _Evaluator(self, problem, sparse)
        point, n_iter, info = _SEARCHES[self.eta_search](self, problem, evaluate, eta0)
        rows, cols, vals = point.lo, np.arange(n), np.full(n, 1.0 / n)
        meta = dict(eta=point.eta, dual_objective=point.value, n_iter=n_iter, converged=True, solver=self.name)
        info = dict(info, eta_search=self.eta_search, tie_rule="cheapest", delegated=False)
        if sparse:  # the listed costs are exactly what cost.entries returns
            result = _result_from_entries(problem, rows, cols, vals, point.c_lo, **meta, info=info)
        else:
            plan = sp.csr_array((vals, (rows, cols)), shape=(n, n))
            result = TransportResult.from_plan(problem, plan, **meta, info=info)
        result.info["budget_ratio"] = result.transport_cost / eps
        result.info["over_budget"] = bool(result.transport_cost > eps + 1e-9 * eps + 1e-12)
        result.info["gap"] = point.value - result.objective
        return result

    def _search_sgd(self, problem: TransportProblem, evaluate: "_Evaluator", eta0: float | None):
        """Algorithm 2's eta (the paper's dual SGD), then one argmax pass at it."""
        warm = self.warm_start and eta0 is not None and eta0 > 0.0
        start = float(eta0) if warm else self.eta_init
        rule = _PaperMomentum(start, self.learning_rate, self.momentum)
        steps = run_sgd(problem, _Batches(problem, self._dual), self._rng(), rule,
                        n_steps=self.n_steps, batch_size=self.batch_size)
        point = evaluate(rule.reported())
        return point, steps + 1, {"eta_start": start, "warm_started": warm, "sgd_steps": steps}

    def _search_bisection(self, problem: TransportProblem, evaluate: "_Evaluator", eta0: float | None):
        """``alg:pidual``'s eta (bisection on the sign of the subgradient, ``n_bisections`` halvings of
        the bracket), then the argmax pass at the final midpoint."""
        eps = problem.eps
        low, high = self.bracket
        grown = False
        info = {"bracket_grown": False, "exact_hit": False}

        def done(point: _DualPoint, a: float, b: float, tolerance: float, exact: bool):
            info.update(bracket=(a, b), eta_tolerance=tolerance, exact_hit=exact, bracket_grown=grown,
                        evaluations=evaluate.count)
            return point, evaluate.count, info

        # 1. The bracket: a with g'+(a) < 0 (eta* to its right), b with g'-(b) > 0 (eta* to its left);
        #    a probe whose subgradient interval holds 0 is a minimiser and ends the search.
        point = evaluate(low)
        where = DualSolver._position(point, eps)
        if where == _ABOVE:  # eta* < low (low > 0): the paper's root finder would have failed
            grown, high, low = True, low, 0.0
            point = evaluate(0.0)
            where = DualSolver._position(point, eps)
        else:
            if where == _BELOW:
                point = evaluate(high)
                where = DualSolver._position(point, eps)
            while where == _BELOW:  # eta* above the bracket
                if high * _GROWTH > _ETA_CEILING:
                    raise ValidationError(f"{type(self).__name__}: no eta up to {high:g} brings the argmax plan "
                                          f"within eps = {eps:g}: the costs or the budget are degenerate")
                grown, low, high = True, high, high * _GROWTH
                point = evaluate(high)
                where = DualSolver._position(point, eps)
        if where == _OPTIMAL:  # at eta = 0 this means g'+(0) >= 0: eta* = 0, the budget does not bind
            return done(point, point.eta, point.eta, 0.0, True)
        # 2. Bisection: a fixed number of halvings, stopping on a probe that is exactly optimal.
        a, b = low, high
        for _ in range(self.n_bisections):
            mid = 0.5 * (a + b)
            if not a < mid < b:  # the bracket is at rounding level
                break
            point = evaluate(mid)
            where = DualSolver._position(point, eps)
            if where == _OPTIMAL:
                return done(point, mid, mid, 0.0, True)
            if where == _BELOW:
                a = mid
            else:
                b = mid
        # 3. The plan at the final midpoint: eta* lies in (a, b), within half the width of it.
        return done(evaluate(0.5 * (a + b)), a, b, 0.5 * (b - a), False)

    def argmax_point(self, problem: TransportProblem, eta: float):
        """``g(eta)`` and every column's cheapest argmax row (``lo``, cost ``c_lo``) at ``eta``:
        the full problem through :meth:`DualSolver._evaluate` (column blocks), a sparse cost through
        its neighbour lists."""
        if bool(getattr(problem.cost, "is_sparse", False)) and hasattr(problem.cost, "neighbors"):
            cand, _ = self._dual._sparse_candidates(problem)
            return self._dual._evaluate_candidates(problem, cand, eta)
        return self._dual._evaluate(problem, eta)


class _Evaluator:
    """``g`` and every column's cheapest argmax row at one eta, counted: the full problem through
    :meth:`DualSolver._evaluate` (column blocks), a sparse cost through its neighbour lists
    (candidates gathered once per solve)."""

    def __init__(self, solver: PaperSolver, problem: TransportProblem, sparse: bool):
        self.solver, self.problem, self.count = solver, problem, 0
        self.candidates = solver._dual._sparse_candidates(problem)[0] if sparse else None

    def __call__(self, eta: float) -> _DualPoint:
        self.count += 1
        if self.candidates is not None:
            return self.solver._dual._evaluate_candidates(self.problem, self.candidates, float(eta))
        return self.solver._dual._evaluate(self.problem, float(eta))


#: eta_search -> the search (each returns the argmax point at its eta, n_iter and info).
_SEARCHES = {"sgd": PaperSolver._search_sgd, "bisection": PaperSolver._search_bisection}

@dataclass(frozen=True)
class _SizingView:
    """What :func:`budro.solvers._sizing.refuse_dense` reads of a solver, under the sizing table's name."""

    name: str
    max_dense_n: int | None
    block_bytes: int


#: The former name (``paper-sgd``), kept for imports.
PaperSGDSolver = PaperSolver


def _check_bracket(bracket: Any, owner: str) -> tuple[float, float]:
    ok = isinstance(bracket, (tuple, list)) and len(bracket) == 2 and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v)) for v in bracket)
    if ok:
        low, high = float(bracket[0]), float(bracket[1])
        ok = 0.0 <= low < high
    if not ok:
        raise ValidationError(f"{owner}: bracket must be two finite numbers [low, high] with 0 <= low < high "
                              f"(the paper's German script: [0.0, 15.0]), got {bracket!r}")
    return low, high


class _PaperMomentum:
    """Algorithm 2's step as the paper's code took it (``tf.keras.optimizers.SGD`` with momentum,
    fresh each round) on the minibatch subgradient ``eps - c_batch``, projected on eta >= 0;
    reports the last iterate."""

    def __init__(self, eta: float, learning_rate: float, momentum: float):
        self.eta, self.learning_rate, self.momentum = float(eta), learning_rate, momentum
        self.v = 0.0

    def update(self, t: int, eps: float, c_batch: float) -> bool:
        self.v = self.momentum * self.v - self.learning_rate * (eps - c_batch)
        self.eta = max(0.0, self.eta + self.v)
        return False

    def reported(self) -> float:
        return self.eta


def _largest_cost(cost) -> float:
    """An upper bound on every allowed (finite) cost, O(n p) or O(n m) where the cost allows."""
    if getattr(cost, "is_sparse", False) and hasattr(cost, "neighbor_costs"):
        listed = np.asarray(cost.neighbor_costs, dtype=np.float64)
        finite = listed[np.isfinite(listed)]
        return float(finite.max()) if finite.size else 0.0
    if isinstance(cost, DenseCost):
        return float(np.max(cost.C))
    if isinstance(cost, EmbeddingCost):
        # ||z_i - z_k|| <= 2 max_l ||z_l - c|| for any centre c (here the mean); with slack for
        # the rounding of the blocked formula |z_i|^2 + |z_k|^2 - 2 z_i.z_k.
        radius = float(np.sqrt(np.max(np.sum((cost.Z - cost.Z.mean(axis=0)) ** 2, axis=1))))
        top = 4.0 * radius * radius
        return top * (1.0 + 1e-9) + 1e-9 * float(np.max(np.einsum("ij,ij->i", cost.Z, cost.Z)))
    top = 0.0
    for _, _, block in cost.iter_blocks():
        finite = block[np.isfinite(block)]
        if finite.size:
            top = max(top, float(finite.max()))
    return top


def _best_allowed_losses(problem: TransportProblem) -> np.ndarray:
    """``max_i R_ij`` over the rows column j may move to (all rows, or its neighbour list)."""
    cost = problem.cost
    if getattr(cost, "is_sparse", False) and hasattr(cost, "neighbors"):
        rows = np.asarray(cost.neighbors)
        return problem.losses[rows, problem.labels[:, None]].max(axis=1)
    return _dual_plan.label_max(problem.losses)[problem.labels]
