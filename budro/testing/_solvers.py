"""The transport-solver conformance kit: :func:`check_solver`.

A solver (built-in or third-party) passes when, on every generated instance, its result is a
feasible reweighting with a consistent objective that is as good as the solver's own stated
guarantee (:meth:`~budro.solvers.Solver.objective_tolerance`) against an independent reference:
the transport LP solved by HiGHS over the allowed pairs (all n^2 pairs, or the listed pairs of a
sparse :class:`~budro.transport.NeighborCost`).  Optimality is always checked: the default
tolerance is exact (1e-9 relative), an inexact solver states a finite one, and a solver stating
an infinite tolerance fails.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from budro.solvers.base import Solver
from budro.transport import Cost, DenseCost, EmbeddingCost, NeighborCost, TransportProblem, TransportResult

__all__ = ["check_solver", "reference_optimum", "reference_bounds", "COST_KINDS"]

#: The cost representations the kit can generate.
COST_KINDS = ("dense", "embedding", "sparse")

#: Budgets of the random instances, as fractions of the mean allowed cost (0 included).
_EPS_FRACTIONS = (0.0, 0.02, 0.25, 0.8)
#: Sizes of the random instances (cycled).
_SIZES = (7, 12, 20, 30)
#: Rounding allowance for sums of n * K weights (absolute, per unit of mass).
_MASS_ATOL = 1e-12
#: Accuracy asked of (and allowed to) the HiGHS reference, relative to max(1, max |losses|).
_REFERENCE_RTOL = 1e-9
#: HiGHS may exceed the (scaled) budget row by 1e-10 * eps, which is worth eta * 1e-10 * eps of
#: objective (a lot when eta is huge); the lower reference is solved at eps * (1 - this).
_BUDGET_SHRINK = 1e-9


@dataclass(frozen=True)
class _Instance:
    label: str
    problem: TransportProblem
    kind: str
    expect_empirical: bool = False  # eps = 0 without duplicates: the plan must move nothing


def check_solver(
    solver: Solver,
    *,
    rng: Any = None,
    n_instances: int = 8,
    costs: Iterable[str] | None = None,
    capabilities: Iterable[str] | None = None,
    edge_cases: bool = True,
    determinism: bool = True,
    warm_start: bool = True,
    problems: Iterable[TransportProblem] = (),
) -> list[dict]:
    """Check that ``solver`` honours the transport-solver contract; raise AssertionError if not.

    On ``n_instances`` random instances per cost kind (n from 7 to 30, K = 2 and 3, integer
    losses with many ties, duplicated embedding rows so that off-diagonal costs are zero, budgets
    from 0 to 0.8 of the mean cost) and on edge cases (eps = 0 with distinct points, eps above the
    largest cost, all points identical, a single label present, K = 3, n = 1), it checks:

    * ``weights``: shape (n, K), finite, non-negative, summing to 1, with label marginals
      ``sum_i weights[i, k]`` equal to the share of label k;
    * ``objective == sum(weights * losses)`` and ``transport_cost <= eps +
      solver.budget_tolerance(problem)``;
    * ``objective_tolerance(problem)`` is finite and >= 0 (at most ``1e-9 * max(1, max |losses|)``
      for a solver declaring the ``"exact"`` capability): every solver is compared with the LP;
    * ``objective >= LP optimum - solver.objective_tolerance(problem)`` and ``objective <=`` the
      LP optimum at the relaxed budget ``eps + budget_tolerance`` (a solver cannot beat the
      optimum); a finite ``dual_objective`` must bound the LP optimum from above; ``eta`` is
      NaN or >= 0 (the LP optimum is bracketed by :func:`reference_bounds`, robust to
      HiGHS's own tolerances);
    * the plan, when returned: non-negative, column sums 1/n, supported on allowed pairs, and
      consistent with ``weights``, ``objective`` and ``transport_cost``;
    * eps = 0 with distinct points: the weights are the empirical distribution;
    * the problem's arrays are not modified;
    * determinism: two deep copies of the solver give identical results on the same input
      (seed stochastic solvers with an integer);
    * warm start: solving again with ``eta0 = result.eta`` passes the same checks.

    The reference LP is solved here with scipy's HiGHS over the allowed pairs (n^2 variables, or
    n m for a sparse :class:`~budro.transport.NeighborCost`, i.e. the LP restricted to the listed
    pairs), independently of budro's ``lp`` solver.

    Parameters
    ----------
    solver : budro.solvers.Solver
        The solver instance to check.
    rng : None, int or numpy.random.Generator
        Seed of the generated instances (None means 0: the kit is reproducible).
    n_instances : int, default 8
        Random instances per cost kind.
    costs : iterable of {"dense", "embedding", "sparse"}, optional
        Cost representations: :class:`~budro.transport.DenseCost`, an uncached
        :class:`~budro.transport.EmbeddingCost` (columns in blocks only), and a sparse
        :class:`~budro.transport.NeighborCost`.  Default: from the capabilities, "dense" and
        "embedding" for ``"dense-cost"``, "sparse" for ``"sparse-cost"``.
    capabilities : iterable of str, optional
        The solver's declared capabilities (:data:`budro.plugin_types.SOLVER_CAPABILITIES`).
        Default: its registry record's (:func:`budro.registry.capabilities_of`), or
        ``{"dense-cost"}`` for a solver class that is not registered.
    edge_cases, determinism, warm_start : bool, default True
        Run those checks.
    problems : iterable of TransportProblem, optional
        Further instances to check (e.g. drawn by hypothesis, or from an author's own data);
        keep them small (n up to about 60), the reference LP has one variable per allowed pair.

    Returns
    -------
    list of dict
        One record per solved instance: ``instance``, ``cost``, ``n``, ``K``, ``eps``,
        ``objective``, ``reference`` (the LP optimum, bracketed from below), ``gap``
        (``reference - objective``) and ``tolerance``.

    Passing does not prove optimality on other inputs: the instances are small (n <= 30 here,
    about 60 for your own ``problems``), so blocked, large-n and numerically hard paths are
    exercised only as far as these sizes reach them.

    Raises
    ------
    AssertionError
        On the first failure, naming the property, the instance and the numbers.
    """
    if not isinstance(solver, Solver):
        raise TypeError(f"check_solver expects a budro Solver instance, got {type(solver).__name__}")
    if capabilities is None:
        from budro import registry

        caps = registry.capabilities_of("solver", solver)
    else:
        from budro.plugin_types import check_capabilities

        caps = check_capabilities("solver", capabilities)
    if costs is None:
        costs = (("dense", "embedding") if "dense-cost" in caps or "sparse-cost" not in caps else ()) + (
            ("sparse",) if "sparse-cost" in caps else ())
    costs = tuple(costs)
    unknown = [c for c in costs if c not in COST_KINDS]
    if unknown or not costs:
        raise ValueError(f"check_solver: costs must be a non-empty subset of {COST_KINDS}, got {costs!r}")
    if isinstance(n_instances, bool) or not isinstance(n_instances, int) or n_instances < 0:
        raise ValueError(f"check_solver: n_instances must be an integer >= 0, got {n_instances!r}")
    gen = np.random.default_rng(0 if rng is None else rng)
    report: list[dict] = []
    for i, problem in enumerate(problems):
        if not isinstance(problem, TransportProblem):
            raise TypeError(f"check_solver: problems must hold TransportProblem instances, got {type(problem).__name__}")
        kind = "sparse" if problem.cost.is_sparse else ("dense" if problem.cost.is_dense else "embedding")
        inst = _Instance(f"given-{i} ({problem!r})", problem, kind)
        report.append(_check_instance(solver, inst, caps, determinism=determinism, warm_start=warm_start))
    for kind in costs:
        for inst in _random_instances(gen, n_instances, kind):
            report.append(_check_instance(solver, inst, caps, determinism=determinism, warm_start=warm_start))
        if edge_cases:
            for inst in _edge_instances(gen, kind):
                report.append(_check_instance(solver, inst, caps, determinism=determinism, warm_start=False))
    return report


# ---------------------------------------------------------------------------------------------
# Instances


def _make_cost(Z: np.ndarray, kind: str, m: int) -> Cost:
    if kind == "dense":
        return DenseCost(EmbeddingCost(Z).column_block(0, Z.shape[0]))
    if kind == "embedding":
        return EmbeddingCost(Z, cache_bytes=0)  # not dense: solvers must read column blocks
    return NeighborCost(Z, m)


def _allowed_costs(cost: Cost) -> np.ndarray:
    """Costs of the allowed pairs (all of them for a dense cost)."""
    if cost.is_sparse:
        return np.asarray(cost.neighbor_costs)
    return np.concatenate([block for _, _, block in cost.iter_blocks()], axis=1)


def _random_instances(gen: np.random.Generator, n_instances: int, kind: str) -> Iterator[_Instance]:
    for i in range(n_instances):
        n = _SIZES[i % len(_SIZES)]
        K = (2, 3)[i % 2]
        integer = i % 3 != 2
        d = 1 + i % 3
        n_distinct = max(1, (2 * n) // 3)
        if integer:
            base = gen.integers(-3, 4, size=(n_distinct, d)).astype(float)
            losses = gen.integers(0, 4, size=(n, K)).astype(float)
        else:
            base = gen.normal(size=(n_distinct, d))
            losses = np.logaddexp(0.0, 2.0 * gen.normal(size=(n, K)))
        Z = base[gen.integers(0, n_distinct, size=n)]
        labels = gen.integers(0, K, size=n)
        m = max(2, min(n, 2 + i % 4))
        cost = _make_cost(Z, kind, m)
        allowed = _allowed_costs(cost)
        frac = _EPS_FRACTIONS[i % len(_EPS_FRACTIONS)]
        eps = frac * float(allowed.mean())
        label = (
            f"random-{i} ({kind}, n={n}, K={K}, eps={frac:g}*mean cost, "
            f"{'integer' if integer else 'continuous'} losses, {n_distinct} distinct points"
            + (f", m={m}" if kind == "sparse" else "")
            + ")"
        )
        yield _Instance(label, TransportProblem(losses, labels, cost, eps), kind)


def _edge_instances(gen: np.random.Generator, kind: str) -> Iterator[_Instance]:
    n, K = 9, 2
    m = 4
    Z = gen.normal(size=(n, 2))  # distinct points
    losses = gen.integers(0, 4, size=(n, K)).astype(float)
    labels = gen.integers(0, K, size=n)
    cost = _make_cost(Z, kind, m)
    yield _Instance(f"edge: eps = 0, distinct points ({kind}, n={n})",
                    TransportProblem(losses, labels, cost, 0.0), kind, expect_empirical=True)
    big = 2.0 * float(_allowed_costs(cost).max()) + 1.0
    yield _Instance(f"edge: eps above the largest cost ({kind}, n={n})",
                    TransportProblem(losses, labels, cost, big), kind)
    same = _make_cost(np.ones((n, 3)), kind, m)
    yield _Instance(f"edge: all points identical ({kind}, n={n})",
                    TransportProblem(losses, labels, same, 0.5), kind)
    K3 = 3
    losses3 = np.logaddexp(0.0, gen.normal(size=(n, K3)))
    cost3 = _make_cost(gen.integers(-2, 3, size=(n, 2)).astype(float), kind, m)
    eps3 = 0.3 * float(_allowed_costs(cost3).mean())
    yield _Instance(f"edge: single label present, K = 3 ({kind}, n={n})",
                    TransportProblem(losses3, np.full(n, 2), cost3, eps3), kind)
    yield _Instance(f"edge: K = 3, all labels ({kind}, n={n})",
                    TransportProblem(losses3, np.arange(n) % K3, cost3, eps3), kind)
    yield _Instance(f"edge: n = 1 ({kind})",
                    TransportProblem(np.array([[0.25, 1.5]]), np.array([1]), _make_cost(np.zeros((1, 2)), kind, 1), 0.5),
                    kind)


# ---------------------------------------------------------------------------------------------
# The reference


def reference_optimum(problem: TransportProblem, eps: float | None = None) -> float:
    """The transport LP's optimum over the allowed pairs, by HiGHS (small problems only).

    Variables are ``Pi_ij`` for the allowed pairs (every pair, or column j's listed neighbours
    for a sparse cost); each column sums to ``1/n`` and ``sum C_ij Pi_ij <= eps`` (default
    ``problem.eps``).  The budget row is scaled by ``1/eps`` (HiGHS's tolerances are absolute),
    and ``eps = 0`` is imposed by fixing every positive-cost pair at 0.
    """
    eps = problem.eps if eps is None else float(eps)
    n = problem.n
    cost = problem.cost
    if cost.is_sparse:
        rows = np.asarray(cost.neighbors)  # rows[j, r]: the r-th row column j may move to
        pair_costs = np.asarray(cost.neighbor_costs, dtype=np.float64)
    else:
        rows = np.broadcast_to(np.arange(n), (n, n))
        pair_costs = np.ascontiguousarray(_allowed_costs(cost).T)  # [j, i] = C[i, j]
    s = rows.shape[1]
    gain = problem.losses[rows, problem.labels[:, None]]  # (n, s)
    c = -gain.ravel()
    costs = pair_costs.ravel()
    A_eq = sp.kron(sp.eye_array(n, format="csr"), sp.csr_array(np.ones((1, s))), format="csr")
    b_eq = np.full(n, 1.0 / n)
    if eps > 0.0:
        # HiGHS refuses coefficients of 1e15 and more: the scaled costs stay below 1e14.
        scale = min(1.0 / eps, 1e14 / max(float(costs.max()), 1e-290))
        A_ub, b_ub, bounds = sp.csr_array(costs.reshape(1, -1) * scale), np.array([eps * scale]), (0, None)
    else:
        A_ub = b_ub = None
        bounds = np.column_stack([np.zeros(costs.size), np.where(costs > 0.0, 0.0, np.inf)])
    res = linprog(c, A_ub=A_ub, b_ub=b_ub, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs",
                  options={"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10})
    if res.status != 0:
        raise RuntimeError(f"reference LP failed (status {res.status}): {res.message}")
    return -float(res.fun)


def reference_bounds(problem: TransportProblem, budget_tolerance: float = 0.0) -> tuple[float, float]:
    """``(lower, upper)`` brackets of the LP optimum that survive HiGHS's tolerances.

    ``lower`` is the LP at budget ``eps * (1 - 1e-9)``: HiGHS's own budget violation (at most
    ``1e-10 eps``) keeps it within the true budget, so ``lower <= optimum`` (should HiGHS fail
    there, the LP at ``eps`` itself is used).  ``upper`` is the LP at
    ``eps + budget_tolerance``, the best any result meeting the budget up to that tolerance can
    reach (its rounding is covered by the kit's ``1e-9`` allowance).
    """
    eps = problem.eps
    lower = None
    if eps > 0.0:
        try:
            lower = reference_optimum(problem, eps * (1.0 - _BUDGET_SHRINK))
        except RuntimeError:  # HiGHS occasionally gives up on a badly scaled budget row
            lower = None
    if lower is None:
        lower = reference_optimum(problem)
    upper = reference_optimum(problem, eps + budget_tolerance) if budget_tolerance > 0.0 else reference_optimum(problem)
    return lower, upper


# ---------------------------------------------------------------------------------------------
# Checks


class _Checker:
    def __init__(self, solver: Solver, inst: _Instance):
        self.solver, self.inst = solver, inst

    def fail(self, prop: str, detail: str) -> None:
        raise AssertionError(
            f"check_solver: {self.solver!r} fails '{prop}' on instance {self.inst.label}: {detail}"
        )

    def require(self, ok: bool, prop: str, detail: str) -> None:
        if not ok:
            self.fail(prop, detail)

    def solve(self, solver: Solver, **kwargs: Any) -> TransportResult:
        try:
            res = solver.solve(self.inst.problem, **kwargs)
        except Exception as exc:
            raise AssertionError(
                f"check_solver: {self.solver!r} fails 'solves without error' on instance {self.inst.label}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self.require(isinstance(res, TransportResult), "returns a TransportResult", f"got {type(res).__name__}")
        return res

    def result(self, res: TransportResult, reference: float, reference_up: float, where: str = "") -> None:
        """Every property of one result (``where`` qualifies the property names)."""
        problem, solver = self.inst.problem, self.solver
        n, K = problem.n, problem.n_labels
        at = f" ({where})" if where else ""
        mass_atol = _MASS_ATOL + n * K * 1e-16
        scale = max(1.0, float(np.abs(problem.losses).max()))
        w = np.asarray(res.weights)
        self.require(w.shape == (n, K), "weights shape" + at, f"weights have shape {w.shape}, expected {(n, K)}")
        self.require(bool(np.all(np.isfinite(w))), "weights finite" + at, "weights contain NaN or inf")
        self.require(float(w.min()) >= -1e-15, "non-negativity" + at, f"smallest weight is {float(w.min()):.3g}")
        total = float(w.sum())
        self.require(abs(total - 1.0) <= mass_atol, "weights sum to 1" + at, f"sum(weights) = {total!r}")
        shares = problem.label_shares
        dev = np.abs(w.sum(axis=0) - shares)
        self.require(float(dev.max()) <= mass_atol, "label marginals" + at,
                     f"sum_i weights[i, k] = {w.sum(axis=0).tolist()}, label shares {shares.tolist()}")
        objective = float(res.objective)
        recomputed = float(np.sum(w * problem.losses))
        self.require(math.isfinite(objective) and abs(recomputed - objective) <= 1e-12 * scale * max(1, n / 100),
                     "objective equals sum(weights * losses)" + at,
                     f"objective {objective!r}, sum(weights * losses) = {recomputed!r}")
        btol = float(solver.budget_tolerance(problem))
        tc = float(res.transport_cost)
        self.require(math.isfinite(tc) and tc >= -1e-15, "transport_cost finite and >= 0" + at, f"transport_cost = {tc!r}")
        self.require(tc <= problem.eps + btol, "budget" + at,
                     f"transport_cost {tc!r} exceeds eps {problem.eps!r} by {tc - problem.eps:.3g} "
                     f"(budget_tolerance {btol:.3g})")
        otol = float(solver.objective_tolerance(problem))
        self.require(objective >= reference - otol, "objective vs LP optimum" + at,
                     f"objective {objective!r} is {reference - objective:.3g} below the LP optimum {reference!r} "
                     f"(objective_tolerance {otol:.3g})")
        upper = reference_up + _REFERENCE_RTOL * scale
        self.require(objective <= upper, "objective cannot beat the LP optimum" + at,
                     f"objective {objective!r} exceeds the LP optimum {reference_up!r} at budget eps + budget_tolerance "
                     f"by {objective - reference_up:.3g}: the weights are not those of a feasible plan")
        dual = float(res.dual_objective)
        self.require(math.isnan(dual) or dual >= reference - _REFERENCE_RTOL * scale, "dual_objective bounds the optimum" + at,
                     f"dual_objective {dual!r} is below the LP optimum {reference!r}")
        eta = float(res.eta)
        self.require(math.isnan(eta) or eta >= 0.0, "eta >= 0 or NaN" + at, f"eta = {eta!r}")
        if self.inst.expect_empirical:
            emp = problem.empirical_weights()
            self.require(float(np.abs(w - emp).max()) <= mass_atol, "eps = 0 without duplicates moves nothing" + at,
                         f"max |weights - empirical| = {float(np.abs(w - emp).max()):.3g}")
        if res.plan is not None:
            self.plan(res, at, mass_atol, scale, btol)

    def plan(self, res: TransportResult, at: str, mass_atol: float, scale: float, btol: float) -> None:
        problem = self.inst.problem
        n = problem.n
        try:
            P = sp.coo_array(res.plan)
        except Exception as exc:  # pragma: no cover - an unusable plan object
            self.fail("plan is a matrix" + at, f"{type(exc).__name__}: {exc}")
        self.require(P.shape == (n, n), "plan shape" + at, f"plan has shape {P.shape}, expected {(n, n)}")
        rows, cols, vals = P.row, P.col, P.data
        self.require(bool(np.all(np.isfinite(vals))) and (vals.size == 0 or float(vals.min()) >= -1e-15),
                     "plan non-negative" + at, "plan has negative or non-finite entries")
        col_sums = np.bincount(cols, weights=vals, minlength=n)
        self.require(float(np.abs(col_sums - 1.0 / n).max()) <= mass_atol, "plan column sums 1/n" + at,
                     f"max |column sum - 1/n| = {float(np.abs(col_sums - 1.0 / n).max()):.3g}")
        pair_costs = problem.cost.entries(rows, cols) if vals.size else np.zeros(0)
        used = vals != 0
        self.require(bool(np.all(np.isfinite(pair_costs[used]))), "plan only on allowed pairs" + at,
                     "the plan moves mass along a pair the cost does not list")
        W = np.zeros((n, problem.n_labels))
        np.add.at(W, (rows, problem.labels[cols]), vals)
        self.require(float(np.abs(W - res.weights).max()) <= mass_atol, "weights match the plan" + at,
                     f"max |weights - plan marginals| = {float(np.abs(W - res.weights).max()):.3g}")
        plan_cost = float(np.sum(vals[used] * pair_costs[used]))
        self.require(abs(plan_cost - res.transport_cost) <= 1e-9 * max(problem.eps, plan_cost) + 1e-12,
                     "transport_cost matches the plan" + at,
                     f"<C, plan> = {plan_cost!r}, transport_cost = {res.transport_cost!r}")
        self.require(plan_cost <= problem.eps + btol, "budget (plan)" + at,
                     f"<C, plan> = {plan_cost!r} exceeds eps {problem.eps!r}")


def _same(a: TransportResult, b: TransportResult) -> bool:
    def eq(x: float, y: float) -> bool:
        return x == y or (math.isnan(x) and math.isnan(y))

    return (
        np.array_equal(np.asarray(a.weights), np.asarray(b.weights))
        and eq(float(a.objective), float(b.objective))
        and eq(float(a.transport_cost), float(b.transport_cost))
        and eq(float(a.eta), float(b.eta))
    )


def _fresh(solver: Solver) -> Solver:
    """A deep copy of ``solver`` in its current state (so a seeded Generator is replayed), or
    ``solver`` itself when it cannot be copied."""
    try:
        return copy.deepcopy(solver)
    except Exception:
        return solver


def _check_instance(solver: Solver, inst: _Instance, caps: frozenset[str], *, determinism: bool,
                    warm_start: bool) -> dict:
    problem = inst.problem
    check = _Checker(solver, inst)
    otol = float(solver.objective_tolerance(problem))
    check.require(math.isfinite(otol) and otol >= 0.0, "finite objective_tolerance",
                  f"objective_tolerance(problem) = {otol!r}; every solver is compared with the LP optimum, so it "
                  f"must state a finite bound (the 'tolerance' attribute, or objective_tolerance for an a-priori bound)")
    if "exact" in caps:
        exact_tol = 1e-9 * max(1.0, float(np.abs(problem.losses).max())) * (1.0 + 1e-12)
        check.require(otol <= exact_tol, "exact solvers state an exact tolerance",
                      f"the solver declares the 'exact' capability but objective_tolerance(problem) = {otol:.3g} "
                      f"exceeds 1e-9 * max(1, max |losses|) = {exact_tol:.3g}")
    losses, labels = problem.losses.copy(), problem.labels.copy()
    reference, reference_up = reference_bounds(problem, float(solver.budget_tolerance(problem)))
    res = check.solve(_fresh(solver))
    check.require(np.array_equal(problem.losses, losses) and np.array_equal(problem.labels, labels),
                  "does not modify the problem", "the problem's losses or labels changed during solve")
    check.result(res, reference, reference_up)
    if determinism:
        again = check.solve(_fresh(solver))
        check.require(_same(res, again), "determinism",
                      f"two solves of the same input differ: objective {res.objective!r} vs {again.objective!r}, "
                      f"eta {res.eta!r} vs {again.eta!r}, max |weights difference| "
                      f"{float(np.abs(np.asarray(res.weights) - np.asarray(again.weights)).max()):.3g}")
    if warm_start and math.isfinite(float(res.eta)) and float(res.eta) > 0.0:
        warm = check.solve(_fresh(solver), eta0=float(res.eta))
        check.result(warm, reference, reference_up, where="warm start from the returned eta")
    return {
        "instance": inst.label,
        "cost": inst.kind,
        "n": problem.n,
        "K": problem.n_labels,
        "eps": problem.eps,
        "objective": float(res.objective),
        "reference": reference,
        "gap": reference - float(res.objective),
        "tolerance": float(solver.objective_tolerance(problem)),
    }
