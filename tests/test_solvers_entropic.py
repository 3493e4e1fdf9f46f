"""The entropic solvers: ``entropic`` (root find on eta) and ``entropic-sgd`` (Algorithm 7).

The reference is the exact LP (HiGHS, through the conformance kit's ``reference_optimum``, which
also restricts it to the listed pairs of a sparse cost).  Instances have integer losses (ties)
and duplicated points (off-diagonal zero costs).
"""

from __future__ import annotations

import math
import subprocess
import sys
import tracemalloc
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import budro.registry
from budro.exceptions import ConvergenceWarning, ValidationError
from budro.plugin_types import REQUIRED, SolverPlugin
from budro.solvers.dual import DualSolver
from budro.solvers._convergence import convergence_message
from budro.solvers.entropic import EntropicSGDSolver, EntropicSolver, _ColumnSoftmax
from budro.testing._solvers import reference_bounds
from budro.transport import DenseCost, EmbeddingCost, NeighborCost, TransportProblem

from test_solvers_exact import ColumnSpy


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    with threadpool_limits(1):
        yield


def make_instance(rng, n, K, *, n_distinct=None, integer=True, d=2):
    n_distinct = n if n_distinct is None else max(1, min(n, n_distinct))
    if integer:
        base = rng.integers(-3, 4, size=(n_distinct, d)).astype(float)
        losses = rng.integers(0, 4, size=(n, K)).astype(float)
    else:
        base = rng.normal(size=(n_distinct, d))
        losses = np.logaddexp(0.0, 2.0 * rng.normal(size=(n, K)))
    Z = base[rng.integers(0, n_distinct, size=n)]
    return losses, rng.integers(0, K, size=n), Z


def check_feasible(problem, res, *, atol=1e-12):
    w = res.weights
    assert w.shape == (problem.n, problem.n_labels)
    assert np.all(w >= 0)
    assert abs(w.sum() - 1.0) <= atol
    np.testing.assert_allclose(w.sum(axis=0), problem.label_shares, rtol=0, atol=atol)
    assert abs(np.sum(w * problem.losses) - res.objective) <= 1e-12 * max(1.0, abs(res.objective))
    assert res.transport_cost <= problem.eps, (res.transport_cost, problem.eps)
    if res.plan is not None:
        plan = res.plan.toarray()
        np.testing.assert_allclose(plan.sum(axis=0), 1.0 / problem.n, rtol=0, atol=atol)


def reference_optimum(problem):
    """The LP optimum from below (HiGHS may overshoot the budget by 1e-10 eps, worth eta * 1e-10 eps)."""
    return reference_bounds(problem)[0]


def check_guarantee(solver, problem, res, lp_value):
    """Objective within the stated bound of the LP, and a valid certificate."""
    gap = lp_value - res.objective
    assert gap <= solver.objective_tolerance(problem), (gap, solver.objective_tolerance(problem))
    assert res.dual_objective >= lp_value - 1e-9 * max(1.0, abs(lp_value))  # g(eta) bounds the LP
    assert res.info["gap_bound"] >= gap - 1e-9
    return gap


# ---------------------------------------------------------------------------- against the LP


@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
@pytest.mark.parametrize("K", [2, 3])
def test_within_gamma_log_n_of_the_lp(factory, K):
    rng = np.random.default_rng(100 + K)
    solver = factory()
    gaps = []
    for n, integer in ((8, True), (17, False), (30, True), (45, False)):
        losses, labels, Z = make_instance(rng, n, K, n_distinct=(2 * n) // 3, integer=integer)
        cost = EmbeddingCost(Z)
        C = cost.column_block(0, n)
        for eps in (0.0, 0.02 * C.mean(), 0.3 * C.mean(), 2.0 * C.max() + 1.0):
            problem = TransportProblem(losses, labels, cost, eps)
            res = solver.solve(problem)
            check_feasible(problem, res)
            gaps.append(check_guarantee(solver, problem, res, reference_optimum(problem)) / solver.loss_scale(problem))
            assert res.converged
    if factory is EntropicSolver:
        # The a-priori bound is gamma log n = 1e-3 * spread * log n (up to 3.8e-3 spread here);
        # at the root the gaps are far smaller.  (SGD plans are accepted up to the bound.)
        assert max(gaps) < 1e-4


def test_gap_shrinks_with_gamma():
    rng = np.random.default_rng(5)
    n = 40
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=25, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.2 * cost.column_block(0, n).mean())
    lp = reference_optimum(problem)
    gaps = []
    for gamma_rel in (1e-1, 1e-2, 1e-3, 1e-4):
        solver = EntropicSolver(gamma_rel=gamma_rel)
        res = solver.solve(problem)
        check_feasible(problem, res)
        gaps.append(check_guarantee(solver, problem, res, lp))
        assert res.info["gamma"] == pytest.approx(gamma_rel * (losses.max() - losses.min()))
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] < 1e-3 * gaps[0]


def test_absolute_gamma_overrides_gamma_rel():
    rng = np.random.default_rng(6)
    losses, labels, Z = make_instance(rng, 12, 2)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.5)
    res = EntropicSolver(gamma=0.05, gamma_rel=0.5).solve(problem)
    assert res.info["gamma"] == 0.05
    assert EntropicSolver(gamma=0.05).objective_tolerance(problem) == pytest.approx(0.05 * math.log(12) + 1e-9 * 3, rel=1e-6)


def test_objective_grows_and_eta_falls_with_the_budget():
    rng = np.random.default_rng(7)
    n = 30
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=20, integer=False)
    cost = EmbeddingCost(Z)
    C = cost.column_block(0, n)
    results = [EntropicSolver().solve(TransportProblem(losses, labels, cost, f * C.mean()))
               for f in (0.01, 0.05, 0.2, 0.5, 1.0)]
    objectives = [r.objective for r in results]
    etas = [r.eta for r in results]
    assert objectives == sorted(objectives)
    assert etas == sorted(etas, reverse=True)


# ---------------------------------------------------------------------------- numerics


def test_tiny_gamma_and_large_losses_do_not_overflow():
    rng = np.random.default_rng(8)
    n = 40
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=30, integer=False)
    losses = 1e3 * losses  # (R - eta C) / gamma reaches ~2e4 before the column max is subtracted
    cost = EmbeddingCost(10.0 * Z)
    for solver in (EntropicSolver(gamma_rel=5e-5), EntropicSGDSolver(gamma_rel=5e-5)):
        for eps in (1e-3, 0.1 * cost.column_block(0, n).mean()):
            problem = TransportProblem(losses, labels, cost, eps)
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # overflow, invalid value, divide by zero
                res = solver.solve(problem)
            check_feasible(problem, res)
            check_guarantee(solver, problem, res, reference_optimum(problem))


def test_near_duplicates_need_a_huge_eta():
    # Pairs at distance 1e-5 cost 1e-10: a budget of 3e-12 is met only at eta ~ 1e13.
    z = np.array([0.0, 1e-5, 1.0, 1.0 + 1e-5, 3.0, 3.0 + 2e-5, 7.0])
    C = (z[:, None] - z[None, :]) ** 2
    losses = np.array([[0.1, 2.0], [1.5, 0.2], [0.3, 1.1], [1.7, 0.4], [0.0, 2.5], [2.2, 0.1], [1.0, 1.0]])
    labels = np.array([0, 1, 0, 1, 0, 1, 1])
    for eps in (3e-12, 1e-4):
        problem = TransportProblem(losses, labels, DenseCost(C), eps)
        for solver in (EntropicSolver(), EntropicSolver(gamma_rel=5e-5), EntropicSGDSolver()):
            res = solver.solve(problem)
            check_feasible(problem, res)
            check_guarantee(solver, problem, res, reference_optimum(problem))
            if eps == 3e-12:
                assert res.eta > 1e10


def test_vanishing_gamma_mixes_across_the_bracket():
    # With gamma ~ 1e-12 of the loss spread the expected cost jumps between adjacent floats of
    # eta; the plans at both ends of the final bracket are mixed so that the budget binds.
    z = np.array([0.0, 1e-5, 1.0, 1.0 + 1e-5, 3.0, 3.0 + 2e-5, 7.0])
    C = (z[:, None] - z[None, :]) ** 2
    losses = 1e3 * np.array([[0.1, 2.0], [1.5, 0.2], [0.3, 1.1], [1.7, 0.4], [0.0, 2.5], [2.2, 0.1], [1.0, 1.0]])
    problem = TransportProblem(losses, np.array([0, 1, 0, 1, 0, 1, 1]), DenseCost(C), 1.0)
    solver = EntropicSolver(gamma=1e-8)
    res = solver.solve(problem)
    check_feasible(problem, res)
    assert res.info["partner_share"] > 0.0
    assert res.transport_cost == pytest.approx(1.0, rel=1e-9)
    check_guarantee(solver, problem, res, reference_optimum(problem))


# ---------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
def test_zero_budget_uses_only_zero_cost_pairs(factory):
    rng = np.random.default_rng(9)
    n = 20
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=8)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.0)
    res = factory().solve(problem)
    check_feasible(problem, res)
    assert res.eta == math.inf and res.transport_cost == 0.0
    plan = res.plan.toarray()
    C = problem.cost.column_block(0, n)
    assert np.all(plan[C > 0] == 0.0)
    # Distinct points: nothing moves at all.
    distinct = TransportProblem(losses, labels, EmbeddingCost(rng.normal(size=(n, 3))), 0.0)
    np.testing.assert_array_equal(factory().solve(distinct).weights, distinct.empirical_weights())


def test_budget_above_every_cost_gives_eta_zero_in_one_pass():
    rng = np.random.default_rng(10)
    n = 25
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=10)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 2.0 * cost.max() + 1.0)
    res = EntropicSolver(plan_max_entries=0).solve(problem)
    assert res.eta == 0.0 and res.n_iter == 1 and res.converged
    check_guarantee(EntropicSolver(), problem, res, reference_optimum(problem))
    with_plan = EntropicSolver().solve(problem)  # small n: a second pass assembles the plan
    assert with_plan.n_iter == 2 and with_plan.plan is not None


@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
def test_single_point_and_constant_losses(factory):
    one = TransportProblem(np.array([[0.3, 1.2]]), np.array([1]), DenseCost(np.zeros((1, 1))), 0.5)
    res = factory().solve(one)
    np.testing.assert_array_equal(res.weights, [[0.0, 1.0]])
    assert res.objective == 1.2 and res.transport_cost == 0.0
    rng = np.random.default_rng(11)
    flat = TransportProblem(np.ones((10, 2)), rng.integers(0, 2, 10), EmbeddingCost(rng.normal(size=(10, 2))), 0.1)
    res = factory().solve(flat)
    check_feasible(flat, res)
    assert res.objective == pytest.approx(1.0, abs=1e-14)


def test_identical_points_spread_over_the_best_rows():
    rng = np.random.default_rng(12)
    n = 12
    losses = rng.integers(0, 5, size=(n, 2)).astype(float)
    labels = rng.integers(0, 2, size=n)
    problem = TransportProblem(losses, labels, EmbeddingCost(np.ones((n, 3))), 0.0)
    solver = EntropicSolver()
    res = solver.solve(problem)
    expected = np.mean(losses.max(axis=0)[labels])  # every point moves to its label's worst row
    assert expected - solver.objective_tolerance(problem) <= res.objective <= expected + 1e-12


# ---------------------------------------------------------------------------- costs in blocks, sparse costs


@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
def test_blocked_cost_matches_dense_cost(factory):
    rng = np.random.default_rng(13)
    n = 90
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=50, integer=True, d=3)
    C = EmbeddingCost(Z).column_block(0, n)
    eps = 0.1 * C.mean()
    dense = factory().solve(TransportProblem(losses, labels, DenseCost(C), eps))
    spy = ColumnSpy(EmbeddingCost(Z, cache_bytes=0), limit=7)
    blocked = factory(block_bytes=8 * n * 7).solve(TransportProblem(losses, labels, spy, eps))
    assert max(spy.widths) <= 7
    assert blocked.objective == pytest.approx(dense.objective, rel=1e-12)
    assert blocked.eta == pytest.approx(dense.eta, rel=1e-9)
    np.testing.assert_allclose(blocked.weights, dense.weights, rtol=0, atol=1e-13)


def test_blocked_solve_never_allocates_an_n_by_n_array():
    rng = np.random.default_rng(14)
    n = 600
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=300, integer=False, d=4)
    cost = EmbeddingCost(Z, cache_bytes=0)
    problem = TransportProblem(losses, labels, cost, 0.5)
    solver = EntropicSolver(block_bytes=8 * n * 8, plan_max_entries=0)  # 8 columns per block
    tracemalloc.start()
    try:
        res = solver.solve(problem)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * n * n / 4, f"peak {peak} bytes for n = {n}"
    assert res.plan is None
    check_feasible(problem, res)


class NoColumns(NeighborCost):
    """A neighbour cost whose dense columns must never be asked for (O(n m) only)."""

    def column_block(self, start, stop):
        raise AssertionError("a sparse solve asked for a dense column block")


@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
def test_sparse_neighbor_cost_against_the_restricted_lp(factory):
    rng = np.random.default_rng(15)
    for n, m in ((20, 3), (40, 6)):
        losses, labels, Z = make_instance(rng, n, 2, n_distinct=(3 * n) // 4, integer=False)
        base = NeighborCost(Z, m)
        cost = NoColumns.from_lists(base.neighbors, base.neighbor_costs)
        for eps in (0.0, 0.05 * base.neighbor_costs.mean(), 0.5 * base.neighbor_costs.mean()):
            problem = TransportProblem(losses, labels, cost, eps)
            solver = factory()
            res = solver.solve(problem)
            check_feasible(problem, res)
            lp = reference_optimum(problem)  # the LP over the listed pairs
            gap = check_guarantee(solver, problem, res, lp)
            # The bound is gamma log m, not gamma log n.
            assert solver.objective_tolerance(problem) < solver.gamma_for(problem) * math.log(n)
            assert gap <= solver.gamma_for(problem) * math.log(m) + 1e-9
            plan = res.plan.toarray()
            allowed = np.zeros((n, n), dtype=bool)
            allowed[base.neighbors, np.arange(n)[:, None]] = True
            assert np.all(plan[~allowed] == 0.0)


def test_plan_is_dropped_for_large_problems():
    rng = np.random.default_rng(16)
    losses, labels, Z = make_instance(rng, 30, 2)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.5)
    kept = EntropicSolver().solve(problem)
    dropped = EntropicSolver(plan_max_entries=899).solve(problem)
    assert kept.plan is not None and kept.plan.shape == (30, 30)
    assert dropped.plan is None
    np.testing.assert_array_equal(kept.weights, dropped.weights)


# ---------------------------------------------------------------------------- warm starts, limits


def test_warm_start_needs_few_passes():
    rng = np.random.default_rng(17)
    n = 60
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=40, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.05 * cost.column_block(0, n).mean())
    cold = EntropicSolver().solve(problem)
    assert cold.eta > 0 and cold.converged
    hot = EntropicSolver().solve(problem, eta0=cold.eta)
    assert hot.n_iter <= 2 and hot.n_iter < cold.n_iter
    for factor in (1e-3, 0.8, 1.25, 1e3):
        res = EntropicSolver().solve(problem, eta0=factor * cold.eta)
        check_feasible(problem, res)
        assert res.converged
        assert res.objective == pytest.approx(cold.objective, abs=EntropicSolver().objective_tolerance(problem))
        assert res.eta == pytest.approx(cold.eta, rel=1e-6)


def test_iteration_limit_still_returns_a_feasible_certified_plan():
    rng = np.random.default_rng(18)
    n = 50
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=30, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.05 * cost.column_block(0, n).mean())
    lp = reference_optimum(problem)
    for max_iter in (1, 2, 3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = EntropicSolver(max_iter=max_iter).solve(problem)
        # a warning exactly when the solve stopped short, naming the limit
        assert [str(w.message) for w in caught if w.category is ConvergenceWarning] == (
            [] if res.converged else [convergence_message(EntropicSolver(max_iter=max_iter), res)])
        if not res.converged:
            assert f"max_iter={max_iter}" in convergence_message(EntropicSolver(max_iter=max_iter), res)
        check_feasible(problem, res)
        assert res.dual_objective >= lp - 1e-9
        assert res.info["gap_bound"] >= lp - res.objective - 1e-9


# ---------------------------------------------------------------------------- entropic-sgd


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_sgd_is_deterministic_for_an_integer_seed_and_varies_with_it():
    rng = np.random.default_rng(19)
    n = 300
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=200, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
    a = EntropicSGDSolver(batch_size=32, n_steps=20, polish=False, random_state=1).solve(problem)
    b = EntropicSGDSolver(batch_size=32, n_steps=20, polish=False, random_state=1).solve(problem)
    c = EntropicSGDSolver(batch_size=32, n_steps=20, polish=False, random_state=2).solve(problem)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.info["eta_sgd"] == b.info["eta_sgd"] != c.info["eta_sgd"]
    gen = np.random.default_rng(3)
    solver = EntropicSGDSolver(batch_size=32, n_steps=5, polish=False, random_state=gen)
    assert solver.solve(problem).info["eta_sgd"] != solver.solve(problem).info["eta_sgd"]  # a Generator is consumed


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_sgd_approaches_the_root():
    rng = np.random.default_rng(20)
    n = 400
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=300, integer=False, d=3)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
    exact = EntropicSolver().solve(problem)
    res = EntropicSGDSolver(batch_size=64, n_steps=60, polish=False).solve(problem)
    assert res.info["eta_sgd"] == pytest.approx(exact.eta, rel=0.1)
    assert res.n_iter == 60 + 1  # the steps and one full pass for the plan
    # Warm-started next to the root, a few steps keep it there.
    warm = EntropicSGDSolver(batch_size=64, n_steps=10, polish=False).solve(problem, eta0=1.05 * exact.eta)
    assert warm.info["eta_sgd"] == pytest.approx(exact.eta, rel=0.1)


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_sgd_plan_over_budget_is_mixed_with_the_identity():
    rng = np.random.default_rng(21)
    n = 40
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=25, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
    solver = EntropicSGDSolver(n_steps=0, polish=False)  # eta = 0: the plan Pi(0) is far over budget
    res = solver.solve(problem)
    assert res.eta == 0.0 and 0.0 < res.info["identity_share"] < 1.0
    check_feasible(problem, res)
    assert res.transport_cost == pytest.approx(problem.eps, rel=1e-12)  # the mix binds the budget
    lp = reference_optimum(problem)
    assert res.info["gap_bound"] >= lp - res.objective - 1e-12
    assert solver.objective_tolerance(problem) == math.inf  # no a-priori bound without polishing
    plan = res.plan.toarray()
    np.testing.assert_allclose(plan.sum(axis=0), 1.0 / n, rtol=0, atol=1e-15)


def test_sgd_polishes_when_its_certificate_is_too_weak():
    rng = np.random.default_rng(22)
    n = 40
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=25, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
    solver = EntropicSGDSolver(n_steps=0)
    res = solver.solve(problem)
    assert res.info["polished"] and res.info["sgd_gap_bound"] > res.info["a_priori_bound"]
    assert res.converged
    check_feasible(problem, res)
    check_guarantee(solver, problem, res, reference_optimum(problem))
    exact = EntropicSolver().solve(problem)
    assert res.eta == pytest.approx(exact.eta, rel=1e-6)


# ---------------------------------------------------------------------------- array API


NAMESPACES = ["numpy", "array_api_strict", "torch"]


def _namespace_or_skip(name):
    pytest.importorskip("array_api_compat")
    module = pytest.importorskip(name)
    if name == "torch":
        module.set_num_threads(1)
    return name


def _costs_for_namespaces(rng):
    n = 36
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=24, integer=False)
    C = EmbeddingCost(Z).column_block(0, n)
    return losses, labels, {
        "dense": DenseCost(C),
        "embedding": EmbeddingCost(Z, cache_bytes=0),
        "sparse": NeighborCost(Z, 5),
    }


def _assert_same_solve(factory, name, problem, ref, res, label):
    """``res`` (namespace ``name``) against NumPy's ``ref``.  ``entropic`` agrees to rounding on
    every namespace.  ``entropic-sgd``'s SGD iterate is a long chain of float steps, so where a
    namespace sums in another order than NumPy (torch, cupy) its eta differs early (1e-9 to 1e-4
    relative, measured) and the polishing root find stops elsewhere inside its tolerance ``tol``:
    there both results must be certified and agree to a small multiple of ``tol``."""
    bitwise = name in ("numpy", "array_api_strict")  # array_api_strict computes with NumPy
    if factory is EntropicSolver or bitwise:
        atol, rel, eta_rel = (1e-13, 1e-12, 1e-9) if bitwise else (1e-12, 1e-12, 1e-9)
    else:
        atol = rel = eta_rel = 100 * factory().tol
        bound = factory().objective_tolerance(problem)
        assert ref.info["gap_bound"] <= bound and res.info["gap_bound"] <= bound, label
    np.testing.assert_allclose(res.weights, ref.weights, rtol=0, atol=atol, err_msg=label)
    assert res.objective == pytest.approx(ref.objective, rel=rel), label
    assert res.eta == pytest.approx(ref.eta, rel=eta_rel), label
    np.testing.assert_allclose(res.plan.toarray(), ref.plan.toarray(), rtol=0, atol=atol, err_msg=label)


@pytest.mark.parametrize("name", NAMESPACES)
@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
def test_same_result_on_every_array_namespace(name, factory):
    _namespace_or_skip(name)
    losses, labels, costs = _costs_for_namespaces(np.random.default_rng(23))
    for kind, cost in costs.items():
        problem = TransportProblem(losses, labels, cost, 0.15 * float(np.mean(cost.neighbor_costs if kind == "sparse" else cost.column_block(0, cost.n))))
        ref = factory(block_bytes=8 * 36 * 10).solve(problem)
        res = factory(array_namespace=name, block_bytes=8 * 36 * 10).solve(problem)
        assert res.info["namespace"].endswith(name) or name == "numpy"
        assert isinstance(res.weights, np.ndarray) and res.weights.dtype == np.float64
        check_feasible(problem, res)
        _assert_same_solve(factory, name, problem, ref, res, kind)


def test_torch_with_an_explicit_device():
    _namespace_or_skip("torch")
    losses, labels, costs = _costs_for_namespaces(np.random.default_rng(24))
    problem = TransportProblem(losses, labels, costs["dense"], 0.5)
    ref = EntropicSolver().solve(problem)
    res = EntropicSolver(array_namespace="torch", device="cpu").solve(problem)
    assert res.objective == pytest.approx(ref.objective, rel=1e-12)


def _cuda_namespace_or_skip(name):
    """``(namespace name, device)`` for an array library on a CUDA device, or a skip saying why."""
    pytest.importorskip("array_api_compat")
    module = pytest.importorskip(name, reason=f"{name} is not installed")
    if name == "torch":
        if not module.cuda.is_available():
            pytest.skip("torch sees no CUDA device (a CPU build, or no GPU on this machine)")
        return name, "cuda"
    try:
        if module.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("cupy found no CUDA device")
    except Exception as exc:  # no driver
        pytest.skip(f"cupy cannot reach a CUDA device: {exc}")
    return name, None


@pytest.mark.parametrize("name", ["torch", "cupy"])
@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver], ids=["entropic", "entropic-sgd"])
def test_same_result_on_a_cuda_device(name, factory):
    """The solve on a GPU (torch on device "cuda", cupy) equals NumPy's on every cost layout, to
    rounding for ``entropic`` and to the root tolerance for ``entropic-sgd`` (_assert_same_solve)."""
    name, device = _cuda_namespace_or_skip(name)
    losses, labels, costs = _costs_for_namespaces(np.random.default_rng(25))
    for kind, cost in costs.items():
        problem = TransportProblem(losses, labels, cost, 0.15 * float(np.mean(cost.neighbor_costs if kind == "sparse" else cost.column_block(0, cost.n))))
        ref = factory(block_bytes=8 * 36 * 10).solve(problem)
        res = factory(array_namespace=name, device=device, block_bytes=8 * 36 * 10).solve(problem)
        assert res.info["namespace"].endswith(name), res.info["namespace"]
        assert isinstance(res.weights, np.ndarray) and res.weights.dtype == np.float64
        check_feasible(problem, res)
        _assert_same_solve(factory, name, problem, ref, res, kind)


def test_torch_on_cuda_keeps_its_arrays_on_the_device(monkeypatch):
    """With device="cuda" every array the solver makes lives on the GPU: a host tensor would
    mean a silent CPU solve (or a device-mismatch error deep in torch)."""
    _cuda_namespace_or_skip("torch")
    import torch

    seen = []
    real = _ColumnSoftmax._asarray

    def spy(self, a, dtype):
        out = real(self, a, dtype)
        seen.append(out.device.type)
        return out

    monkeypatch.setattr(_ColumnSoftmax, "_asarray", spy)
    losses, labels, costs = _costs_for_namespaces(np.random.default_rng(27))
    problem = TransportProblem(losses, labels, costs["embedding"], 0.3)
    res = EntropicSolver(array_namespace="torch", device="cuda").solve(problem)
    assert seen and set(seen) == {"cuda"}, set(seen)
    assert torch.cuda.max_memory_allocated() > 0
    assert res.converged


def test_numpy_solve_imports_no_other_array_library():
    code = (
        "import sys, numpy as np; from budro.solvers.entropic import EntropicSolver, EntropicSGDSolver; "
        "from budro.transport import TransportProblem, EmbeddingCost; "
        "rng = np.random.default_rng(0); p = TransportProblem(rng.random((8, 2)), rng.integers(0, 2, 8), "
        "EmbeddingCost(rng.normal(size=(8, 2))), 0.1); EntropicSolver().solve(p); EntropicSGDSolver().solve(p); "
        "heavy = [m for m in ('torch', 'cupy', 'jax', 'array_api_strict') if m in sys.modules]; assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unknown_array_namespace_is_refused_by_name():
    rng = np.random.default_rng(26)
    losses, labels, Z = make_instance(rng, 5, 2)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.1)
    with pytest.raises(ValidationError, match="no_such_array_lib"):
        EntropicSolver(array_namespace="no_such_array_lib").solve(problem)


# ---------------------------------------------------------------------------- parameters and registry


@pytest.mark.parametrize(
    ("factory", "kwargs", "name"),
    [
        (EntropicSolver, {"gamma": 0.0}, "gamma"),
        (EntropicSolver, {"gamma": -1.0}, "gamma"),
        (EntropicSolver, {"gamma_rel": float("nan")}, "gamma_rel"),
        (EntropicSolver, {"gamma_rel": "small"}, "gamma_rel"),
        (EntropicSolver, {"tol": 0.0}, "tol"),
        (EntropicSolver, {"max_iter": 0}, "max_iter"),
        (EntropicSolver, {"block_bytes": 0}, "block_bytes"),
        (EntropicSolver, {"plan_max_entries": -1}, "plan_max_entries"),
        (EntropicSolver, {"array_namespace": 3}, "array_namespace"),
        (EntropicSGDSolver, {"batch_size": 0}, "batch_size"),
        (EntropicSGDSolver, {"n_steps": -1}, "n_steps"),
        (EntropicSGDSolver, {"learning_rate": 0.0}, "learning_rate"),
        (EntropicSGDSolver, {"momentum": 1.0}, "momentum"),
        (EntropicSGDSolver, {"random_state": "seed"}, "random_state"),
        (EntropicSGDSolver, {"polish": "yes"}, "polish"),
    ],
)
def test_bad_parameters_are_refused_by_name(factory, kwargs, name):
    with pytest.raises(ValidationError, match=name):
        factory(**kwargs)


@pytest.mark.parametrize("factory", [EntropicSolver, EntropicSGDSolver])
def test_every_constructor_parameter_has_a_default(factory):
    spec = SolverPlugin(name=factory.name, factory=factory)
    assert all(v is not REQUIRED for v in spec.parameters.values())
    factory(**spec.defaults())
    assert not factory.exact and factory.guarantee


def test_registry_names_and_alias():
    assert isinstance(budro.registry.create("solver", "sinkhorn"), EntropicSolver)
    assert isinstance(budro.registry.create("solver", "entropic-sgd", n_steps=5), EntropicSGDSolver)
    assert budro.registry.get("solver", "sinkhorn").name == "entropic"
    assert "sparse-cost" in budro.registry.get("solver", "entropic").spec.capabilities


def test_entropic_agrees_with_the_exact_dual_as_gamma_vanishes():
    rng = np.random.default_rng(27)
    n = 50
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=35, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
    exact = DualSolver().solve(problem)
    res = EntropicSolver(gamma_rel=1e-6).solve(problem)
    assert res.objective == pytest.approx(exact.objective, abs=1e-5)
    assert res.eta == pytest.approx(exact.eta, rel=1e-3)
