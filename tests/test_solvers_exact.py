"""The exact transport solvers: ``dual`` (cutting plane + exact recovery) against ``lp`` (HiGHS).

Instances are built to be hard for a dual method: integer losses and duplicated points give
many exact ties in ``R - eta C`` and off-diagonal zero costs, and budgets range from 0 to
above the largest cost.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro.exceptions import ConvergenceWarning, ValidationError
from budro.plugin_types import REQUIRED, SolverPlugin
from budro.solvers.dual import DualSolver
from budro.solvers.lp import LPSolver
from budro.transport import Cost, DenseCost, EmbeddingCost, TransportProblem

RTOL = 1e-9


# ---------------------------------------------------------------------------- helpers


def make_instance(rng, n, K, *, n_distinct=None, integer=True, d=2):
    """Losses, labels and embedding with duplicated points (off-diagonal zero costs)."""
    n_distinct = n if n_distinct is None else max(1, min(n, n_distinct))
    if integer:
        base = rng.integers(-3, 4, size=(n_distinct, d)).astype(float)
        losses = rng.integers(0, 4, size=(n, K)).astype(float)
    else:
        base = rng.normal(size=(n_distinct, d))
        losses = np.logaddexp(0.0, rng.normal(size=(n, K)))
    Z = base[rng.integers(0, n_distinct, size=n)]
    labels = rng.integers(0, K, size=n)
    return losses, labels, Z


def budgets(C):
    """eps = 0, a few fractions of the mean cost, and above the largest cost."""
    mean = float(C.mean())
    return [0.0, 0.02 * mean, 0.25 * mean, 0.8 * mean, 1.5 * float(C.max()) + 1.0]


def check_feasible(problem, res):
    """Non-negative weights with the right marginals, consistent objective, budget met."""
    n = problem.n
    w = res.weights
    assert w.shape == (n, problem.n_labels)
    assert np.all(w >= 0)
    assert abs(w.sum() - 1.0) <= 1e-12
    np.testing.assert_allclose(w.sum(axis=0), problem.label_shares, rtol=0, atol=1e-12)
    scale = max(1.0, abs(res.objective))
    assert abs(float(np.sum(w * problem.losses)) - res.objective) <= 1e-12 * scale
    assert res.transport_cost <= problem.eps * (1 + 1e-12) + 1e-15, (res.transport_cost, problem.eps)
    plan = res.plan.toarray()
    assert np.all(plan >= 0)
    np.testing.assert_allclose(plan.sum(axis=0), np.full(n, 1.0 / n), rtol=0, atol=1e-14)


def check_exact_plan(problem, res):
    """The dual solver's plan: at most n + 1 nonzeros, at most one split column, g(eta) = objective."""
    check_feasible(problem, res)
    n = problem.n
    assert res.plan.nnz <= n + 1
    per_column = np.diff(res.plan.tocsc().indptr)
    assert np.all(per_column >= 1) and np.sum(per_column == 2) <= 1 and per_column.max() <= 2
    assert res.eta >= 0
    assert abs(res.dual_objective - res.objective) <= RTOL * max(1.0, abs(res.objective))
    assert res.converged and res.info["certified"]  # stopped on the optimal breakpoint


def assert_same_optimum(dual_res, lp_res):
    ref = lp_res.objective
    assert abs(dual_res.objective - ref) <= RTOL * max(1.0, abs(ref)), (dual_res.objective, ref)


def paper_heuristic(problem, C, iters=30):
    """Appendix C.3 as published: bisection on eta with one (first-index) argmax per column."""
    R = problem.column_losses()
    n, eps = problem.n, problem.eps
    cols = np.arange(n)

    def rows_at(eta):
        return np.argmax(R - eta * C, axis=0)

    lo, hi = 0.0, 1.0
    while np.mean(C[rows_at(hi), cols]) > eps and hi < 1e12:
        hi *= 2.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if np.mean(C[rows_at(mid), cols]) > eps:
            lo = mid
        else:
            hi = mid
    rows = rows_at(0.5 * (lo + hi))
    return float(np.mean(C[rows, cols])), float(np.mean(R[rows, cols]))


@pytest.fixture
def block_path(monkeypatch):
    """Dense costs through column blocks and the cutting plane (small problems would otherwise
    take the complete-list path of budro.solvers._dual_lists)."""
    monkeypatch.setattr("budro.solvers._dual_lists._MAX_PAIRS", 0)


# ---------------------------------------------------------------------------- against HiGHS


@pytest.mark.parametrize("path", ["lists", "blocks"])
@pytest.mark.parametrize(
    ("K", "integer", "restrict"),
    [(2, True, True), (3, True, True), (2, False, True), (3, False, True), (2, True, False), (3, False, False)],
    ids=["K2-integer", "K3-integer", "K2-continuous", "K3-continuous", "K2-integer-full", "K3-continuous-full"],
)
def test_dual_matches_lp_on_random_instances(K, integer, restrict, path, monkeypatch):
    if path == "blocks":
        monkeypatch.setattr("budro.solvers._dual_lists._MAX_PAIRS", 0)
    if not restrict:  # every evaluation of g on whole blocks, no candidate pairs
        monkeypatch.setattr("budro.solvers._dual_dense._CANDIDATES_PER_COLUMN", 0)
    rng = np.random.default_rng(1000 * K + integer)
    worst = 0.0
    n_evals = []
    for n in (5, 9, 17, 30, 45, 60):
        losses, labels, Z = make_instance(rng, n, K, n_distinct=max(1, (2 * n) // 3), integer=integer)
        cost = EmbeddingCost(Z)
        for eps in budgets(cost.column_block(0, n)):
            problem = TransportProblem(losses, labels, cost, eps)
            lp = LPSolver().solve(problem)
            dual = DualSolver().solve(problem)
            check_feasible(problem, lp)
            check_exact_plan(problem, dual)
            assert_same_optimum(dual, lp)
            worst = max(worst, abs(dual.objective - lp.objective) / max(1.0, abs(lp.objective)))
            n_evals.append(dual.n_iter)
    assert worst <= RTOL
    # A cutting plane lands on the breakpoint in a few steps; bisection to the tie tolerance
    # (about 40 halvings of the bracket) would not.
    assert max(n_evals) <= 25


def test_dual_eta_matches_highs_marginal_when_unique():
    # Continuous data with a binding budget: g has a unique minimiser, so eta is determined.
    rng = np.random.default_rng(7)
    for n in (20, 40):
        losses, labels, Z = make_instance(rng, n, 2, integer=False, d=3)
        cost = EmbeddingCost(Z)
        problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
        lp, dual = LPSolver().solve(problem), DualSolver().solve(problem)
        assert dual.info["split_column"] is not None  # the budget binds inside a column
        assert dual.eta > 0
        assert abs(dual.eta - lp.eta) <= 1e-7 * dual.eta
        assert abs(lp.dual_objective - lp.objective) <= 1e-9


@st.composite
def tie_heavy_problems(draw):
    n = draw(st.integers(1, 24))
    K = draw(st.sampled_from([2, 3]))
    n_distinct = draw(st.integers(1, n))
    seed = draw(st.integers(0, 2**32 - 1))
    integer = draw(st.booleans())
    rng = np.random.default_rng(seed)
    losses, labels, Z = make_instance(rng, n, K, n_distinct=n_distinct, integer=integer, d=draw(st.integers(1, 3)))
    cost = EmbeddingCost(Z)
    C = cost.column_block(0, n)
    mode = draw(st.sampled_from(["zero", "fraction", "above"]))
    if mode == "zero":
        eps = 0.0
    elif mode == "fraction":
        eps = draw(st.sampled_from([1e-3, 0.01, 0.1, 0.3, 0.6, 1.0])) * float(C.mean())
    else:
        eps = float(C.max()) + draw(st.floats(0.0, 10.0))
    return TransportProblem(losses, labels, cost, eps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=tie_heavy_problems())
def test_property_dual_equals_lp(problem):
    lp = LPSolver().solve(problem)
    dual = DualSolver().solve(problem)
    check_exact_plan(problem, dual)
    assert_same_optimum(dual, lp)
    # The dual value bounds every feasible plan (weak duality), HiGHS's included.
    assert lp.objective <= dual.dual_objective + RTOL * max(1.0, abs(dual.dual_objective))


@pytest.mark.parametrize("eps", [0.0, 3e-12, 1e-4])
def test_near_duplicates_with_tiny_costs(eps):
    # Pairs at distance 1e-5 (cost 1e-10) are cheaper than HiGHS's absolute tolerance; neither
    # solver may use them to exceed a zero or tiny budget, and the dual needs a huge eta.
    z = np.array([0.0, 1e-5, 1.0, 1.0 + 1e-5, 3.0, 3.0 + 2e-5, 7.0])
    C = (z[:, None] - z[None, :]) ** 2
    losses = np.array([[0.1, 2.0], [1.5, 0.2], [0.3, 1.1], [1.7, 0.4], [0.0, 2.5], [2.2, 0.1], [1.0, 1.0]])
    labels = np.array([0, 1, 0, 1, 0, 1, 1])
    problem = TransportProblem(losses, labels, DenseCost(C), eps)
    lp, dual = LPSolver().solve(problem), DualSolver().solve(problem)
    check_feasible(problem, lp)
    check_exact_plan(problem, dual)
    assert_same_optimum(dual, lp)
    if eps == 0.0:
        assert lp.transport_cost == 0.0 and dual.transport_cost == 0.0
        np.testing.assert_array_equal(dual.weights, problem.empirical_weights())
    if eps == 3e-12:
        assert dual.eta > 1e6  # the tiny-cost moves are only just worth their price


def test_paper_heuristic_breaks_budget_where_dual_does_not():
    rng = np.random.default_rng(3)
    over = 0
    for _ in range(10):
        n = 40
        losses, labels, Z = make_instance(rng, n, 2, n_distinct=14, integer=True)
        C = EmbeddingCost(Z).column_block(0, n)
        problem = TransportProblem(losses, labels, DenseCost(C), 0.1 * C.mean())
        heuristic_cost, _ = paper_heuristic(problem, C)
        over += heuristic_cost > problem.eps * (1 + 1e-9)
        res = DualSolver().solve(problem)
        check_exact_plan(problem, res)
        assert_same_optimum(res, LPSolver().solve(problem))
    assert over >= 1  # one argmax per column at a bisection eta went over the budget


# ---------------------------------------------------------------------------- edge cases


def test_single_point():
    problem = TransportProblem(np.array([[0.3, 1.2]]), np.array([1]), DenseCost(np.zeros((1, 1))), 0.5)
    for solver in (DualSolver(), LPSolver()):
        res = solver.solve(problem)
        np.testing.assert_allclose(res.weights, [[0.0, 1.0]])
        assert res.objective == pytest.approx(1.2, abs=1e-12)
        assert res.transport_cost == 0.0


def test_identical_points_move_freely_to_the_worst_loss():
    rng = np.random.default_rng(11)
    n = 12
    losses = rng.integers(0, 5, size=(n, 2)).astype(float)
    labels = rng.integers(0, 2, size=n)
    problem = TransportProblem(losses, labels, EmbeddingCost(np.ones((n, 3))), 0.0)
    res = DualSolver().solve(problem)
    check_exact_plan(problem, res)
    # Every point goes to the row with the largest loss for its label, at zero cost.
    expected = np.mean(losses.max(axis=0)[labels])
    assert res.objective == pytest.approx(expected, abs=1e-12)
    assert res.transport_cost == 0.0
    assert res.eta == 0.0


def test_single_label_present():
    rng = np.random.default_rng(12)
    n = 25
    losses, _, Z = make_instance(rng, n, 3, n_distinct=10, integer=False)
    labels = np.full(n, 2)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.3 * cost.column_block(0, n).mean())
    res = DualSolver().solve(problem)
    check_exact_plan(problem, res)
    assert_same_optimum(res, LPSolver().solve(problem))
    assert np.all(res.weights[:, :2] == 0)


def test_zero_budget_without_duplicates_is_the_empirical_distribution():
    rng = np.random.default_rng(13)
    n = 30
    losses, labels, _ = make_instance(rng, n, 2, integer=False)
    Z = rng.normal(size=(n, 4))  # distinct points: only the diagonal costs nothing
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.0)
    res = DualSolver().solve(problem)
    check_exact_plan(problem, res)
    np.testing.assert_array_equal(res.weights, problem.empirical_weights())
    assert res.transport_cost == 0.0


def test_budget_above_largest_cost_is_not_binding():
    rng = np.random.default_rng(14)
    n = 20
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=8, integer=True)
    cost = EmbeddingCost(Z)
    C = cost.column_block(0, n)
    problem = TransportProblem(losses, labels, cost, float(C.max()) * 2)
    res = DualSolver().solve(problem)
    check_exact_plan(problem, res)
    assert res.eta == 0.0 and res.n_iter == 1
    assert res.objective == pytest.approx(problem.column_losses().max(axis=0).mean(), abs=1e-12)
    # Ties at eta = 0 are broken towards the cheapest row, so less than the whole budget is used.
    assert res.transport_cost <= problem.eps


def test_warm_start_gives_the_same_answer():
    rng = np.random.default_rng(15)
    n = 50
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=30, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.05 * cost.column_block(0, n).mean())
    cold = DualSolver().solve(problem)
    assert cold.eta > 0
    hot = DualSolver().solve(problem, eta0=cold.eta)
    assert hot.n_iter == 1
    assert hot.objective == pytest.approx(cold.objective, rel=1e-12)
    for eta0 in (cold.eta * 1e-3, cold.eta * 0.9, cold.eta * 1.1, cold.eta * 1e3, float("nan")):
        res = DualSolver().solve(problem, eta0=eta0)
        check_exact_plan(problem, res)
        assert abs(res.objective - cold.objective) <= RTOL * max(1.0, abs(cold.objective))
    # A warm start far above a non-binding budget still finds eta* = 0.
    loose = TransportProblem(losses, labels, cost, 10 * cost.max())
    res = DualSolver().solve(loose, eta0=5.0)
    assert res.eta == 0.0
    check_exact_plan(loose, res)


def test_warm_start_near_the_optimum_needs_few_evaluations(block_path):
    rng = np.random.default_rng(49)
    n = 300
    Z = rng.normal(size=(n, 4))
    losses = np.logaddexp(0.0, rng.normal(size=(n, 2)))
    labels = rng.integers(0, 2, size=n)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.2)
    cold = DualSolver().solve(problem)
    assert cold.n_iter >= 8
    # Next round: the losses moved a little, eta* moved a little.
    moved = TransportProblem(losses * (1 + 0.01 * rng.normal(size=losses.shape)), labels, cost, 0.2)
    ref = DualSolver().solve(moved)
    warm = DualSolver().solve(moved, eta0=cold.eta)
    assert warm.objective == pytest.approx(ref.objective, rel=1e-12)
    assert warm.n_iter < ref.n_iter
    assert warm.n_iter <= 6


# ---------------------------------------------------------------------------- blocked costs


class ColumnSpy(Cost):
    """A non-dense cost that refuses blocks wider than ``limit`` columns."""

    def __init__(self, inner, limit):
        self.inner, self.limit, self.n = inner, limit, inner.n
        self.widths = []

    def column_block(self, start, stop):
        assert stop - start <= self.limit, f"asked for {stop - start} columns at once"
        self.widths.append(stop - start)
        return self.inner.column_block(start, stop)

    def entries(self, rows, cols):
        return self.inner.entries(rows, cols)


def test_uncached_embedding_cost_matches_dense_cost_exactly(block_path):
    rng = np.random.default_rng(16)
    n = 120
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=50, integer=True, d=3)  # integer Z: exact costs
    C = EmbeddingCost(Z).column_block(0, n)
    for eps in (0.0, 0.05 * C.mean(), 0.4 * C.mean()):
        dense = DualSolver().solve(TransportProblem(losses, labels, DenseCost(C), eps))
        block_bytes = 8 * n * 7  # 7 columns per block
        spy = ColumnSpy(EmbeddingCost(Z, cache_bytes=0), limit=7)
        blocked = DualSolver(block_bytes=block_bytes).solve(TransportProblem(losses, labels, spy, eps))
        assert max(spy.widths) == 7
        assert blocked.objective == dense.objective
        assert blocked.eta == dense.eta
        assert blocked.transport_cost == dense.transport_cost
        np.testing.assert_array_equal(blocked.weights, dense.weights)
        assert blocked.n_iter == dense.n_iter


def test_blocked_solve_never_allocates_an_n_by_n_array(block_path):
    rng = np.random.default_rng(17)
    n = 600
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=300, integer=False, d=4)
    cost = EmbeddingCost(Z, cache_bytes=0)
    assert not cost.is_dense
    problem = TransportProblem(losses, labels, cost, 0.5)
    solver = DualSolver(block_bytes=8 * n * 8)  # 8 columns per block
    tracemalloc.start()
    try:
        res = solver.solve(problem)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * n * n / 4, f"peak {peak} bytes for n = {n}"
    check_exact_plan(problem, res)


@pytest.mark.parametrize("eps", [0.0, 0.05, 0.5, 1e3])
def test_infinite_costs_of_a_sparse_cost_are_forbidden_moves(eps):
    # Unlisted pairs cost +inf; at eta = 0 (a loose budget) they must not be chosen either.
    from budro.transport import NeighborCost

    rng = np.random.default_rng(22)
    n = 30
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=20, integer=True)
    cost = NeighborCost(Z + 0.01 * rng.normal(size=Z.shape), m=4)
    problem = TransportProblem(losses, labels, cost, eps)
    lp, dual = LPSolver().solve(problem), DualSolver().solve(problem)
    check_exact_plan(problem, dual)
    check_feasible(problem, lp)
    assert_same_optimum(dual, lp)
    listed = np.zeros((n, n), dtype=bool)
    listed[cost.neighbors, np.arange(n)[:, None]] = True
    assert np.all(listed[dual.plan.nonzero()])


def _bracket(solver, problem):
    """Two full evaluations with g'+(a) < 0 < g'-(b), found by doubling from eta = 1."""
    a, b = solver._evaluate(problem, 0.0), solver._evaluate(problem, 1.0)
    while b.mean_hi >= problem.eps:
        a, b = b, solver._evaluate(problem, 2.0 * b.eta)
    assert a.mean_lo > problem.eps
    return a, b


@pytest.mark.parametrize("integer", [True, False], ids=["integer-ties", "continuous"])
def test_candidate_pairs_reproduce_the_full_evaluation(integer):
    rng = np.random.default_rng(23)
    n = 150
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=60, integer=integer, d=3)
    cost = EmbeddingCost(Z)
    solver = DualSolver(block_bytes=8 * n * 16)
    unconstrained = solver._evaluate(TransportProblem(losses, labels, cost, 0.0), 0.0)
    problem = TransportProblem(losses, labels, cost, 0.3 * unconstrained.mean_lo)  # binding
    a, b = _bracket(solver, problem)
    cand = solver._candidates(problem, a, b)
    assert cand is not None and cand.rows.size < n * n
    etas = np.concatenate([[a.eta, b.eta], np.linspace(a.eta, b.eta, 23)[1:-1], rng.uniform(a.eta, b.eta, 10)])
    for eta in etas:
        full, part = solver._evaluate(problem, eta), solver._evaluate_candidates(problem, cand, eta)
        for field in ("lo", "hi", "c_lo", "c_hi"):
            np.testing.assert_array_equal(getattr(part, field), getattr(full, field), err_msg=f"{field} at {eta}")
        assert part.value == pytest.approx(full.value, rel=1e-14)


def test_solution_is_the_same_without_candidate_pairs(block_path, monkeypatch):
    rng = np.random.default_rng(24)
    n = 120
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=70, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.1 * cost.column_block(0, n).mean())
    restricted = DualSolver().solve(problem)
    assert restricted.info["candidate_pairs"] is not None
    assert restricted.info["full_evaluations"] < restricted.n_iter
    monkeypatch.setattr("budro.solvers._dual_dense._CANDIDATES_PER_COLUMN", 0)
    full = DualSolver().solve(problem)
    assert full.info["candidate_pairs"] is None and full.info["full_evaluations"] == full.n_iter
    assert full.eta == restricted.eta and full.n_iter == restricted.n_iter
    assert full.objective == pytest.approx(restricted.objective, rel=1e-14)
    np.testing.assert_allclose(full.weights, restricted.weights, rtol=0, atol=1e-15)
    check_exact_plan(problem, full)
    assert_same_optimum(full, LPSolver().solve(problem))


def test_dense_cost_is_processed_in_blocks_too(block_path):
    rng = np.random.default_rng(18)
    n = 80
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=40, integer=False)
    C = EmbeddingCost(Z).column_block(0, n)
    problem = TransportProblem(losses, labels, DenseCost(C), 0.2 * C.mean())
    whole = DualSolver().solve(problem)
    narrow = DualSolver(block_bytes=8 * n * 3).solve(problem)
    assert narrow.objective == pytest.approx(whole.objective, rel=1e-14)
    assert narrow.eta == pytest.approx(whole.eta, rel=1e-14)


# ---------------------------------------------------------------------------- robustness


def test_iteration_limit_still_returns_a_feasible_plan(block_path):
    rng = np.random.default_rng(19)
    n = 60
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=40, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.05 * cost.column_block(0, n).mean())
    best = LPSolver().solve(problem).objective
    full = DualSolver().solve(problem)
    assert full.n_iter > 3
    for max_iter in (1, 2, 3):
        with pytest.warns(ConvergenceWarning, match=f"solver 'dual' stopped before convergence after {max_iter} "
                                                    f"iteration.*max_iter={max_iter}"):
            res = DualSolver(max_iter=max_iter).solve(problem)
        assert res.n_iter == max_iter
        assert not res.converged
        check_feasible(problem, res)
        assert res.objective <= best + 1e-12
        assert res.dual_objective >= best - 1e-12  # g at any eta bounds the optimum
        assert res.info["gap"] >= -1e-12


def test_vanishing_tie_tolerance_falls_back_to_an_exact_mixed_plan():
    # Without a usable tie tolerance the cutting plane can stall next to eta*; the fallback then
    # mixes the rows of both supporting lines, which is still feasible and optimal.
    rng = np.random.default_rng(20)
    stalled = 0
    for _ in range(12):
        n = 30
        losses, labels, Z = make_instance(rng, n, 2, n_distinct=10, integer=False)
        cost = EmbeddingCost(Z)
        problem = TransportProblem(losses, labels, cost, 0.2 * cost.column_block(0, n).mean())
        res = DualSolver(tie_rtol=1e-300).solve(problem)
        stalled += res.info["stalled"]
        check_feasible(problem, res)
        assert_same_optimum(res, LPSolver().solve(problem))
    assert stalled >= 1


# ---------------------------------------------------------------------------- parameters


def test_lp_refuses_large_problems_and_names_the_dual_solver():
    rng = np.random.default_rng(21)
    losses, labels, Z = make_instance(rng, 11, 2)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 1.0)
    with pytest.raises(ValidationError, match=r"n = 11.*max_n = 10.*'dual'"):
        LPSolver(max_n=10).solve(problem)
    LPSolver(max_n=11).solve(problem)


@pytest.mark.parametrize(
    ("factory", "kwargs", "name"),
    [
        (DualSolver, {"tie_rtol": 0.0}, "tie_rtol"),
        (DualSolver, {"tie_rtol": -1e-12}, "tie_rtol"),
        (DualSolver, {"tie_rtol": float("nan")}, "tie_rtol"),
        (DualSolver, {"tie_rtol": "small"}, "tie_rtol"),
        (DualSolver, {"max_iter": 0}, "max_iter"),
        (DualSolver, {"max_iter": 2.5}, "max_iter"),
        (DualSolver, {"block_bytes": 0}, "block_bytes"),
        (LPSolver, {"max_n": 0}, "max_n"),
        (LPSolver, {"max_n": True}, "max_n"),
    ],
)
def test_bad_parameters_are_refused_by_name(factory, kwargs, name):
    with pytest.raises(ValidationError, match=name):
        factory(**kwargs)


@pytest.mark.parametrize("factory", [DualSolver, LPSolver])
def test_every_constructor_parameter_has_a_default(factory):
    spec = SolverPlugin(name=factory.name, factory=factory)
    assert spec.parameters, "the parameter schema is read from the signature"
    assert all(v is not REQUIRED for v in spec.parameters.values())
    factory(**spec.defaults())  # the defaults are accepted
    assert factory.exact and factory.guarantee


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 40), st.data())
def test_plan_csc_equals_scipys_conversion(n, data):
    """The recovery's plan laid out directly (one entry per column, at most one split column
    appended) is the same canonical CSC array as scipy's coordinate conversion; other lists
    fall back to that conversion."""
    from budro.solvers._dual_plan import plan_csc

    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n)), dtype=np.intp)
    cols = np.arange(n)
    vals = np.full(n, 1.0 / n)
    split = data.draw(st.one_of(st.none(), st.integers(0, n - 1)))
    if split is not None and n > 1:
        other = data.draw(st.integers(0, n - 1).filter(lambda r: r != rows[split]))
        theta = data.draw(st.floats(0.01, 0.99))
        vals[split] = (1.0 - theta) / n
        rows, cols, vals = np.append(rows, other), np.append(cols, split), np.append(vals, theta / n)
    if data.draw(st.booleans()):  # any other order: the general path
        perm = np.array(data.draw(st.permutations(range(rows.size))), dtype=np.intp)
        rows, cols, vals = rows[perm], cols[perm], vals[perm]
    got = plan_csc(rows, cols, vals, n)
    want = sp.csc_array((vals, (rows, cols)), shape=(n, n))
    want.sort_indices()
    assert got.shape == (n, n) and got.has_canonical_format
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)
