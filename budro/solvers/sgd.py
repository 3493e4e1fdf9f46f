"""Dual SGD (paper, Algorithm 2) followed by an exact, feasible primal recovery.

The dual of the transport LP is ``g(eta) = eps * eta + (1/n) sum_j max_i (R_ij - eta * C_ij)``,
an average over columns, so a minibatch of columns gives an unbiased subgradient
``eps - mean_{j in batch} C[i_j(eta), j]`` (``i_j`` an argmax row).  :class:`DualSGDSolver` runs
Algorithm 2 on it (minibatches, decreasing steps, momentum, warm start from last round's eta)
and then, at the eta it reached, builds a plan from the argmax rows that always meets the budget
-- the paper's plan (one argmax per column) does not (see ``docs/solvers.md``).

Recovery at an arbitrary ``eta >= 0`` (one full pass gives, per column, the cheapest and the most
expensive argmax row ``lo_j``, ``hi_j``, their mean costs ``c_lo <= c_hi`` and ``g(eta)``):

* ``c_lo <= eps`` (eta at or above the optimum): start from the rows ``lo`` (cost ``c_lo <=
  eps``) and switch columns to ``hi`` while the budget allows, the last one fractionally.  Every
  switch raises the cost by ``C[hi_j, j] - C[lo_j, j] >= 0``, and switching stops when the cost
  reaches ``min(eps, c_hi)``, so the plan is feasible.  At the optimal eta this *is* the exact
  recovery of :class:`~budro.solvers.dual.DualSolver`, and the plan is optimal.
* ``c_lo > eps`` (eta below the optimum): the rows ``lo`` are over budget.  Start from the plan
  that moves nothing (cost 0: ``C_jj = 0``) and switch columns to ``lo`` while the budget allows,
  the last one fractionally, in decreasing order of gain per unit cost ``(R[lo_j, j] - R_jj) /
  C[lo_j, j]`` (the fractional knapsack over {stay, lo}: at least as good as mixing the two plans
  uniformly).  The cost of all switches together is ``c_lo > eps``, so the budget binds exactly:
  the cost is ``eps``.

In both cases every column keeps mass ``1/n``, so the plan is feasible; it has at most ``n + 1``
nonzeros.  Weak duality gives the certificate ``OPT <= g(eta)``, hence ``gap = g(eta) -
objective >= OPT - objective`` for every result (``info["gap"]``).  A priori,
``gap <= eta * (eps - c_hi)`` in the first case and ``gap <= (1 - eps / c_lo) * (g(eta) - mean_j
R_jj)`` in the second, both 0 at the optimal eta.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp

from budro.exceptions import ValidationError
from budro.solvers import _dual_full, _sizing
from budro.solvers.base import Solver
from budro.solvers.dual import _BELOW, _OPTIMAL, DualSolver, _result_from_entries, _switch_entries
from budro.transport import DEFAULT_BLOCK_BYTES, ZERO_RTOL, EmbeddingCost, TransportProblem, TransportResult

__all__ = ["DualSGDSolver", "run_sgd"]

#: Largest factor by which one step may change eta (steps are taken on log eta).
_MAX_STEP = math.log(4.0)
#: Below this fraction of the starting eta, eta is taken to be 0 (a budget that does not bind).
_ETA_FLOOR = 1e-12


class DualSGDSolver(Solver):
    """Algorithm 2: ``eta`` by minibatch SGD with momentum, then an exact feasible recovery.

    Each step samples ``batch_size`` columns uniformly (with replacement), evaluates the argmax
    row of each at the current ``eta`` (the cheapest one among ties) and takes a step against the
    minibatch subgradient ``eps - c_batch``.  Steps are taken on ``log eta``, which makes them
    scale free (eta is a price in loss per unit of squared distance, unknown in advance)::

        v <- momentum * v + lr_t * (eps - c_batch) / max(eps, c_batch),
        log eta <- log eta - clip(v, -log 4, log 4),        lr_t = learning_rate / sqrt(1 + t),

    and the reported ``eta`` is the geometric mean of the second half of the iterates.  The start
    is ``eta0`` (last round's eta, the warm start) when given, else the natural scale
    ``(max R - min R) / mean C`` of the losses and costs.  An eta that falls below ``1e-12`` of
    its start is set to 0 (the budget does not bind).

    One full pass at that ``eta`` then gives ``g(eta)`` and the argmax structure, and the plan is
    recovered as described in :mod:`budro.solvers.sgd`: always feasible, certified by
    ``info["gap"] = g(eta) - objective`` (>= the distance to the LP optimum).  With
    ``polish=True`` (default), a result whose certificate exceeds :meth:`objective_tolerance` is
    replaced by the exact ``dual`` solve warm-started at the SGD eta, so the objective is always
    within ``objective_tolerance(problem)`` of the optimum.

    Parameters
    ----------
    batch_size : int, default 200
        Columns per step (the paper's Adult setting).
    n_steps : int, default 100
        SGD steps (the paper's Adult setting).
    learning_rate : float, default 0.1
        Step on ``log eta`` at t = 0 for a full-sign subgradient, in (0, 10].
    momentum : float, default 0.9
        Heavy-ball momentum in [0, 1) (the paper's Adult setting).
    random_state : int, numpy Generator or None, default 0
        Seeds the column sampling: an integer gives the same result on every call, a Generator
        is consumed, None draws fresh entropy.
    gap_rtol : float, default 1e-3
        The tolerance of the guarantee, relative to the mean empirical loss
        ``|mean_j losses[j, y_j]|`` (see :meth:`objective_tolerance`).
    polish : bool, default True
        Fall back to the exact dual when the certificate is above the tolerance.  With
        ``polish=False`` the result is feasible and certified, with no a-priori bound
        (``converged`` is False when the certificate is above the tolerance).
    tie_rtol, max_iter, block_bytes
        As for :class:`~budro.solvers.dual.DualSolver` (recovery pass and polishing).
    max_dense_n : int or None, default 20000
        Largest n accepted on the full (dense) problem, refused past it with the estimated time
        and memory per round (see :mod:`budro.solvers._sizing`); None: no limit.

    Notes
    -----
    ``n_iter`` counts SGD steps plus full passes.  ``info`` holds ``eta_sgd``, ``gap`` (the
    certificate of the returned plan), ``sgd_gap`` (of the SGD plan), ``recovery``
    (``"switch-to-hi"``, ``"stay-or-lo"`` or ``"exact"`` when the SGD eta is itself optimal),
    ``polished`` and, when polished, the dual solver's info under ``"dual"``.  With ``eps = 0``
    there is nothing to learn and the exact ``dual`` answers directly (``info["delegated"]``).
    """

    name = "dual-sgd"
    guarantee = (
        "Feasible (column marginals 1/n, <C, Pi> <= eps, at most n + 1 nonzeros) for any eta the SGD "
        "reaches; info['gap'] = g(eta) - objective certifies every result, and with polish=True "
        "(default) the objective is within gap_rtol * |mean empirical loss| of the LP optimum."
    )
    exact = False

    def __init__(
        self,
        batch_size: int = 200,
        n_steps: int = 100,
        learning_rate: float = 0.1,
        momentum: float = 0.9,
        random_state: Any = 0,
        gap_rtol: float = 1e-3,
        polish: bool = True,
        tie_rtol: float = 1e-12,
        max_iter: int = 100,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        max_dense_n: int | None = _sizing.DEFAULT_MAX_DENSE_N["dual-sgd"],
    ):
        owner = type(self).__name__
        self.batch_size = _check_int("batch_size", batch_size, 1, owner)
        self.n_steps = _check_int("n_steps", n_steps, 0, owner)
        self.learning_rate = _check_real("learning_rate", learning_rate, 0.0, 10.0, owner, low_open=True)
        self.momentum = _check_real("momentum", momentum, 0.0, 1.0 - 1e-12, owner, low_open=False)
        if isinstance(random_state, bool) or not (
            random_state is None or isinstance(random_state, (numbers.Integral, np.random.Generator))
        ):
            raise ValidationError(f"{owner}: random_state must be an integer, a numpy Generator or None, got {random_state!r}")
        self.random_state = random_state
        self.gap_rtol = _check_real("gap_rtol", gap_rtol, 0.0, 1.0, owner, low_open=True)
        if not isinstance(polish, (bool, np.bool_)):
            raise ValidationError(f"{owner}: polish must be True or False, got {polish!r}")
        self.polish = bool(polish)
        # The recovery pass and the polishing reuse the exact solver (and its sparse layout cache).
        self._dual = DualSolver(tie_rtol=tie_rtol, max_iter=max_iter, block_bytes=block_bytes, max_dense_n=None)
        self.tie_rtol, self.max_iter, self.block_bytes = self._dual.tie_rtol, self._dual.max_iter, self._dual.block_bytes
        self.max_dense_n = _sizing.check_max_dense_n(max_dense_n, owner)

    def check_size(self, n: int, *, sparse: bool = False, held: bool = False) -> None:
        """Refuse (ValidationError) a full problem of n points past ``max_dense_n``, with the estimate."""
        if not sparse:
            _sizing.refuse_dense(self, n, held=held)

    def __repr__(self) -> str:
        return (
            f"DualSGDSolver(batch_size={self.batch_size}, n_steps={self.n_steps}, learning_rate={self.learning_rate:g}, "
            f"momentum={self.momentum:g}, random_state={self.random_state!r}, gap_rtol={self.gap_rtol:g}, "
            f"polish={self.polish})"
        )

    # ------------------------------------------------------------------ guarantee

    def objective_tolerance(self, problem: TransportProblem) -> float:
        """``gap_rtol * |mean_j losses[j, y_j]|`` plus rounding (``1e-9 * max(1, max |losses|)``)
        with ``polish=True``; no a-priori bound (inf) without polishing."""
        if not self.polish:
            return math.inf
        return self._gap_budget(problem) + 1e-9 * max(1.0, problem.max_abs_loss)

    def _gap_budget(self, problem: TransportProblem) -> float:
        empirical = float(np.mean(problem.losses[np.arange(problem.n), problem.labels]))
        return self.gap_rtol * abs(empirical)

    # ------------------------------------------------------------------ SGD

    def _rng(self) -> np.random.Generator:
        if isinstance(self.random_state, np.random.Generator):
            return self.random_state
        return np.random.default_rng(self.random_state)

    def _sgd(self, problem: TransportProblem, eta0: float | None) -> tuple[float, int]:
        rng = self._rng()
        sampler = _Batches(problem, self._dual)
        if eta0 is not None and eta0 > 0.0:
            eta = float(eta0)
        else:
            eta = sampler.initial_eta(rng, self.batch_size, problem.eps)
        rule = _LogMomentum(eta, self.learning_rate, self.momentum)
        steps = run_sgd(problem, sampler, rng, rule, n_steps=self.n_steps, batch_size=self.batch_size)
        return rule.reported(), steps

    # ------------------------------------------------------------------ solve

    def _solve(self, problem: TransportProblem, *, eta0: float | None = None) -> TransportResult:
        sparse = bool(getattr(problem.cost, "is_sparse", False)) and hasattr(problem.cost, "neighbors")
        self.check_size(problem.n, sparse=sparse, held=bool(problem.cost.is_dense))
        if problem.eps == 0.0:
            res = self._dual._solve(problem, eta0=None)  # the inner solver's own warning is this one's
            info = dict(res.info, delegated=True, eta_sgd=math.nan, sgd_gap=res.info.get("gap"), polished=False,
                        recovery="exact")
            return _replace(res, solver=self.name, info=info)
        eta_sgd, steps = self._sgd(problem, eta0)
        result = self._recover(problem, eta_sgd, n_iter=steps)
        result.info["sgd_gap"] = result.info["gap"]
        if result.info["gap"] <= self._gap_budget(problem):
            return result
        if not self.polish:  # stopped by n_steps with a certificate above the tolerance
            return _replace(result, converged=False)
        exact = self._dual._solve(problem, eta0=eta_sgd if eta_sgd > 0.0 else None)
        info = {
            "eta_sgd": eta_sgd,
            "sgd_gap": result.info["gap"],
            "gap": exact.info["gap"],
            "recovery": "exact",
            "polished": True,
            "delegated": False,
            "dual": exact.info,
        }
        return _replace(exact, solver=self.name, n_iter=steps + 1 + exact.n_iter, info=info)

    def _recover(self, problem: TransportProblem, eta: float, *, n_iter: int) -> TransportResult:
        """The feasible plan at ``eta`` (see the module docstring), with its certificate."""
        dual = self._dual
        n, eps = problem.n, problem.eps
        sparse = bool(getattr(problem.cost, "is_sparse", False)) and hasattr(problem.cost, "neighbors")
        if sparse:
            cand, _ = dual._sparse_candidates(problem)
            point = dual._evaluate_candidates(problem, cand, eta)
        else:
            point = dual._evaluate(problem, eta)
        where = dual._position(point, eps)
        if where == _BELOW:
            recovery = "stay-or-lo"
            own = np.arange(n)
            gain = problem.losses[point.lo, problem.labels] - problem.losses[own, problem.labels]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(point.c_lo > 0.0, gain / point.c_lo, np.inf)
            order = np.argsort(-ratio, kind="stable")  # best gain per unit cost first
            cheap = (own[order], np.zeros(n))
            dear = (point.lo[order], point.c_lo[order])
            rows, cols, vals, entry_costs, split, n_switched = self._switch(problem, cheap, dear, order, sparse)
        else:
            recovery = "exact" if where == _OPTIMAL else "switch-to-hi"
            switch = point.eta > 0.0 or where != _OPTIMAL
            rows, cols, vals, entry_costs, split, n_switched = self._switch(
                problem, (point.lo, point.c_lo), (point.hi, point.c_hi), None, sparse, switch=switch
            )
        meta = dict(eta=float(eta), dual_objective=point.value, n_iter=n_iter + 1, converged=True, solver=self.name)
        info = {"eta_sgd": float(eta), "recovery": recovery, "polished": False, "delegated": False,
                "split_column": split, "n_switched": n_switched, "position": where}
        if entry_costs is not None:
            result = _result_from_entries(problem, rows, cols, vals, entry_costs, **meta, info=info)
        else:
            plan = sp.csr_array((vals, (rows, cols)), shape=(n, n))
            result = TransportResult.from_plan(problem, plan, **meta, info=info)
        result.info["gap"] = point.value - result.objective
        return result

    @staticmethod
    def _switch(problem, cheap, dear, order, sparse, *, switch=True):
        """:func:`~budro.solvers.dual._switch_entries` over the columns in ``order`` (None: index
        order); costs are passed for sparse costs and recomputed with ``cost.entries`` otherwise."""
        n = problem.n
        perm = np.arange(n) if order is None else order
        # Lay the columns out in switching order, then map the column indices back.
        sub = _Permuted(problem, perm)
        costs = (cheap[1], dear[1]) if sparse else None
        rows, cols, vals, entry_costs, split, n_switched = _switch_entries(sub, cheap[0], dear[0], switch, costs=costs)
        cols = perm[cols]
        return rows, cols, vals, entry_costs, (None if split is None else int(perm[split])), n_switched


class _Permuted:
    """The view of a problem that :func:`_switch_entries` needs, with columns taken in ``perm``
    order (``cost.entries`` is asked for the original column indices)."""

    def __init__(self, problem: TransportProblem, perm: np.ndarray):
        self.n, self.eps, self.perm = problem.n, problem.eps, perm
        self.cost = _PermutedCost(problem.cost, perm)


class _PermutedCost:
    def __init__(self, cost, perm):
        self.cost, self.perm = cost, perm

    def entries(self, rows, cols):
        return self.cost.entries(rows, self.perm[np.asarray(cols)])


def run_sgd(problem: TransportProblem, sampler: "_Batches", rng: np.random.Generator, rule: Any, *,
            n_steps: int, batch_size: int) -> int:
    """The minibatch loop of Algorithm 2, shared by ``dual-sgd`` and ``paper-sgd``: each step samples
    ``batch_size`` columns uniformly with replacement, takes the mean cost ``c_batch`` of their
    argmax rows at the rule's current ``eta`` (:meth:`_Batches.argmax_costs`; the minibatch
    subgradient of the dual is ``eps - c_batch``) and lets ``rule`` move eta
    (``rule.update(t, eps, c_batch)``, True to stop early).  Returns the number of steps taken;
    the rule holds the eta to report."""
    for t in range(n_steps):
        cols = rng.integers(0, problem.n, size=batch_size)
        c_batch = float(np.mean(sampler.argmax_costs(rule.eta, cols)))
        if rule.update(t, problem.eps, c_batch):
            return t + 1
    return n_steps


class _LogMomentum:
    """``dual-sgd``'s step rule: momentum steps on ``log eta`` with a scale-free subgradient and
    decreasing steps; reports the geometric mean of the second half of the iterates (0 once eta
    fell below ``_ETA_FLOOR`` of its start: the budget does not bind)."""

    def __init__(self, eta: float, learning_rate: float, momentum: float):
        self.start, self.learning_rate, self.momentum = eta, learning_rate, momentum
        self.log_eta = math.log(eta)
        self.v = 0.0
        self.logs = [self.log_eta]
        self.vanished = False

    @property
    def eta(self) -> float:
        return math.exp(self.log_eta)

    def update(self, t: int, eps: float, c_batch: float) -> bool:
        grad = (eps - c_batch) / max(eps, c_batch)  # in [-1, 1]: a scale-free subgradient
        self.v = self.momentum * self.v + self.learning_rate / math.sqrt(1.0 + t) * grad
        self.log_eta -= min(max(self.v, -_MAX_STEP), _MAX_STEP)
        self.logs.append(self.log_eta)
        # in log space: start * _ETA_FLOOR underflows to 0 for a denormal start (math.log(0) fails)
        self.vanished = self.log_eta < math.log(self.start) + math.log(_ETA_FLOOR)
        return self.vanished

    def reported(self) -> float:
        if self.vanished:
            return 0.0  # eta went to 0: the budget does not bind
        tail = self.logs[len(self.logs) // 2 :]
        return float(math.exp(np.mean(tail)))


class _Batches:
    """Losses and costs of sampled columns, and the costs of their argmax rows (:func:`run_sgd`)."""

    def __init__(self, problem: TransportProblem, dual: DualSolver):
        self.problem = problem
        cost = problem.cost
        self.sparse = bool(getattr(cost, "is_sparse", False)) and hasattr(cost, "neighbors")
        self.Z, self.compiled = None, False
        if self.sparse:
            self.layout = dual._sparse_layout(problem)
            self.axis = 1  # (batch, m)
        else:
            self.axis = 0  # (n, batch)
            self.full = cost.column_block(0, cost.n) if cost.is_dense else None
            self.Z = cost.Z if (self.full is None and isinstance(cost, EmbeddingCost)) else None
            if self.Z is not None:
                self.sq = np.einsum("ij,ij->i", self.Z, self.Z)
                self.compiled = _dual_full.compiled(dual)

    def columns(self, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        p = self.problem
        if self.sparse:
            return p.losses.reshape(-1)[self.layout.flat[cols]], self.layout.C[cols]
        R = p.losses[:, p.labels[cols]]
        if self.full is not None:
            C = self.full[:, cols]
        elif self.Z is not None:
            # The formula and zero-snapping of EmbeddingCost (the batch only steers eta).
            scale = self.sq[:, None] + self.sq[cols][None, :]
            C = scale - 2.0 * (self.Z @ self.Z[cols].T)
            C[C <= ZERO_RTOL * scale] = 0.0
            C[cols, np.arange(cols.size)] = 0.0
        else:
            C = np.column_stack([p.cost.column_block(int(j), int(j) + 1)[:, 0] for j in cols])
        return R, C

    def argmax_costs(self, eta: float, cols: np.ndarray) -> np.ndarray:
        """Cost of the cheapest argmax row of each sampled column at ``eta`` (>= 0; at 0 an
        infinite cost, an unlisted pair, is never an argmax)."""
        if self.compiled and eta > 0.0:
            return self._argmax_costs_compiled(eta, cols)
        R, C = self.columns(cols)
        if eta == 0.0:
            V = np.where(np.isinf(C), -np.inf, R)
        else:
            V = R - eta * C
        vmax = V.max(axis=self.axis, keepdims=True)
        # Cheapest argmax: among the maximisers, the smallest cost.
        return np.where(V >= vmax, C, np.inf).min(axis=self.axis)

    def _argmax_costs_compiled(self, eta: float, cols: np.ndarray) -> np.ndarray:
        """:meth:`argmax_costs` on an :class:`EmbeddingCost` with numba: the same product
        ``Z @ Z[cols].T``, then one fused pass (``_full_numba.batch_argmax_costs``) instead of the
        ``(n, batch)`` cost, loss and value matrices; every entry by the same operations, so the
        same costs bit for bit."""
        from budro.solvers import _full_numba

        p = self.problem
        cols = np.ascontiguousarray(cols, dtype=np.int64)
        G = self.Z @ self.Z[cols].T
        labels = np.ascontiguousarray(p.labels[cols], dtype=np.int64)
        return _full_numba.batch_argmax_costs(G, self.sq, self.sq[cols], cols, p.losses, labels, float(eta), ZERO_RTOL)

    def initial_eta(self, rng: np.random.Generator, size: int, eps: float) -> float:
        """A cold start: the eta at which one fixed minibatch of columns meets the budget (a
        geometric bracket from the natural scale ``(max R - min R) / mean C``, then 24 halvings
        of its log-width); 1.0 when the losses or costs are degenerate."""
        p = self.problem
        cols = rng.integers(0, p.n, size=size)
        R, C = self.columns(cols)
        finite = C[np.isfinite(C)]
        spread = float(p.losses.max() - p.losses.min())
        mean = float(finite[finite > 0].mean()) if np.any(finite > 0) else 0.0
        if not (spread > 0.0 and mean > 0.0):
            return 1.0

        def over(eta: float) -> bool:  # the batch's cheapest argmax plan exceeds the budget
            V = R - eta * C
            vmax = V.max(axis=self.axis, keepdims=True)
            return float(np.where(V >= vmax, C, np.inf).min(axis=self.axis).mean()) > eps

        lo = hi = spread / mean
        for _ in range(40):
            if not over(lo):
                lo /= 4.0
            elif over(hi):
                hi *= 4.0
            else:
                break
        if not over(lo):
            return lo  # the budget does not bind on this batch even at a tiny eta
        for _ in range(24):
            mid = math.sqrt(lo * hi)
            if over(mid):
                lo = mid
            else:
                hi = mid
        return math.sqrt(lo * hi)


def _replace(result: TransportResult, **changes: Any) -> TransportResult:
    return dataclasses.replace(result, **changes)


def _check_int(name: str, value: Any, low: int, owner: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValidationError(f"{owner}: {name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _check_real(name: str, value: Any, low: float, high: float, owner: str, *, low_open: bool) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and v <= high
    if not ok:
        bound = f"{'>' if low_open else '>='} {low:g} and <= {high:g}"
        raise ValidationError(f"{owner}: {name} must be a finite number {bound}, got {value!r}")
    return float(value)
