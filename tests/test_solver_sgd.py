"""``dual-sgd``: Algorithm 2 (minibatch SGD on the dual) with an exact, always-feasible recovery."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import budro.registry
from budro.exceptions import ValidationError
from budro.solvers import _sparse_kernels
from budro.solvers.dual import DualSolver
from budro.solvers.lp import LPSolver
from budro.solvers.sgd import DualSGDSolver, _Batches
from budro.transport import DenseCost, EmbeddingCost, NeighborCost, TransportProblem

RTOL = 1e-9

_needs_numba = pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")


def make_problem(rng, n, K=2, *, kind="embedding", n_distinct=None, integer=False, frac=0.2, m=6):
    n_distinct = n if n_distinct is None else n_distinct
    if integer:
        base = rng.integers(-3, 4, size=(n_distinct, 2)).astype(float)
        losses = rng.integers(0, 4, size=(n, K)).astype(float)
    else:
        base = rng.normal(size=(n_distinct, 3))
        losses = np.logaddexp(0.0, 2 * rng.normal(size=(n, K)))
    Z = base[rng.integers(0, n_distinct, size=n)]
    labels = rng.integers(0, K, size=n)
    if kind == "dense":
        cost = DenseCost(EmbeddingCost(Z).column_block(0, n))
        mean = float(cost.C.mean())
    elif kind == "embedding":
        cost = EmbeddingCost(Z, cache_bytes=0)
        mean = float(EmbeddingCost(Z).column_block(0, n).mean())
    else:
        cost = NeighborCost(Z, m=m)
        mean = float(cost.neighbor_costs.mean())
    return TransportProblem(losses, labels, cost, frac * mean)


def check_feasible(problem, res):
    n = problem.n
    assert np.all(res.weights >= 0)
    np.testing.assert_allclose(res.weights.sum(axis=0), problem.label_shares, rtol=0, atol=1e-12)
    assert res.transport_cost <= problem.eps * (1 + 1e-12) + 1e-15, (res.transport_cost, problem.eps)
    plan = res.plan.tocsc()
    np.testing.assert_allclose(plan.sum(axis=0), np.full(n, 1.0 / n), rtol=0, atol=1e-14)
    assert plan.nnz <= n + 1
    assert abs(float(np.sum(res.weights * problem.losses)) - res.objective) <= 1e-12 * max(1.0, abs(res.objective))


# ---------------------------------------------------------------------------- the recovery


@pytest.mark.parametrize("kind", ["dense", "embedding", "sparse"])
@pytest.mark.parametrize("integer", [False, True], ids=["continuous", "integer-ties"])
def test_recovery_is_feasible_and_certified_at_any_eta(kind, integer):
    rng = np.random.default_rng(5 + integer)
    solver = DualSGDSolver()
    for n in (12, 30, 45):
        problem = make_problem(rng, n, kind=kind, integer=integer, n_distinct=(2 * n) // 3)
        opt = LPSolver().solve(problem).objective
        exact = DualSolver().solve(problem)
        assert abs(exact.objective - opt) <= RTOL * max(1.0, opt)
        seen = set()
        for eta in (0.0, exact.eta, *(exact.eta * np.array([1e-3, 0.3, 0.8, 0.97, 1.03, 1.5, 4.0, 1e3])), 7.0):
            res = solver._recover(problem, float(eta), n_iter=0)
            check_feasible(problem, res)
            seen.add(res.info["recovery"])
            # Weak duality: g(eta) bounds the optimum, so the certificate bounds the loss.
            assert res.dual_objective >= opt - RTOL * max(1.0, opt)
            assert res.info["gap"] >= opt - res.objective - RTOL * max(1.0, opt)
            assert res.objective <= opt + RTOL * max(1.0, opt)
            if res.info["recovery"] == "stay-or-lo":
                assert res.transport_cost == pytest.approx(problem.eps, rel=1e-12)  # the budget binds
            if eta == exact.eta:
                assert res.info["recovery"] == "exact"
                assert abs(res.objective - opt) <= RTOL * max(1.0, opt)
        if exact.eta > 0:
            assert {"stay-or-lo", "switch-to-hi"} <= seen


def test_below_the_optimum_the_knapsack_beats_uniform_mixing():
    rng = np.random.default_rng(9)
    problem = make_problem(rng, 60, frac=0.05)
    exact = DualSolver().solve(problem)
    eta = 0.5 * exact.eta
    res = DualSGDSolver()._recover(problem, eta, n_iter=0)
    assert res.info["recovery"] == "stay-or-lo"
    point = DualSolver()._evaluate(problem, eta)
    n = problem.n
    own = problem.losses[np.arange(n), problem.labels].mean()
    lo = problem.losses[point.lo, problem.labels].mean()
    theta = problem.eps / point.mean_lo
    uniform = theta * lo + (1 - theta) * own  # mixing the lo plan with the stay-put plan
    assert res.objective >= uniform - 1e-12
    assert res.info["gap"] <= (1 - theta) * (point.value - own) + 1e-12  # the documented bound


def test_above_the_optimum_every_column_takes_its_dearest_argmax():
    rng = np.random.default_rng(10)
    problem = make_problem(rng, 50, frac=0.3)
    exact = DualSolver().solve(problem)
    eta = 2.0 * exact.eta
    res = DualSGDSolver()._recover(problem, eta, n_iter=0)
    point = DualSolver()._evaluate(problem, eta)
    assert res.info["recovery"] == "switch-to-hi"
    assert res.transport_cost == pytest.approx(point.mean_hi, rel=1e-12) and res.transport_cost < problem.eps
    assert res.info["gap"] <= eta * (problem.eps - point.mean_hi) + 1e-12  # the documented bound


# ---------------------------------------------------------------------------- the solver


@pytest.mark.parametrize("kind", ["dense", "embedding", "sparse"])
def test_dual_sgd_is_within_its_tolerance_of_the_lp(kind):
    rng = np.random.default_rng(11)
    for n, frac in ((20, 0.05), (40, 0.3), (60, 0.8)):
        problem = make_problem(rng, n, kind=kind, frac=frac)
        opt = LPSolver().solve(problem).objective
        solver = DualSGDSolver(batch_size=16, n_steps=40)
        res = solver.solve(problem)
        check_feasible(problem, res)
        tol = solver.objective_tolerance(problem)
        assert 0 < tol < 1e-2 * abs(opt)
        assert opt - res.objective <= tol
        assert res.info["gap"] <= solver._gap_budget(problem) + 1e-12


@st.composite
def sgd_cases(draw):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 25))
    kind = draw(st.sampled_from(["dense", "embedding", "sparse"]))
    problem = make_problem(rng, n, K=draw(st.sampled_from([2, 3])), kind=kind, integer=draw(st.booleans()),
                           n_distinct=draw(st.integers(1, n)), frac=draw(st.sampled_from([1e-3, 0.05, 0.3, 1.0, 5.0])),
                           m=draw(st.integers(1, 6)))
    solver = DualSGDSolver(batch_size=draw(st.integers(1, 30)), n_steps=draw(st.integers(0, 30)),
                           learning_rate=draw(st.sampled_from([0.01, 0.1, 1.0, 10.0])),
                           momentum=draw(st.sampled_from([0.0, 0.5, 0.9])), random_state=seed, polish=False)
    eta0 = draw(st.one_of(st.none(), st.floats(0, 1e3)))
    return problem, solver, eta0


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=sgd_cases())
def test_property_unpolished_sgd_is_always_feasible_and_certified(case):
    problem, solver, eta0 = case
    res = solver.solve(problem, eta0=eta0)
    check_feasible(problem, res)
    opt = LPSolver().solve(problem).objective
    assert res.objective <= opt + RTOL * max(1.0, opt)
    assert res.info["gap"] >= opt - res.objective - RTOL * max(1.0, opt)
    assert solver.objective_tolerance(problem) == math.inf


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_the_paper_argmax_plan_breaks_the_budget_where_dual_sgd_does_not():
    rng = np.random.default_rng(12)
    over = 0
    for _ in range(8):
        problem = make_problem(rng, 40, integer=True, n_distinct=14, frac=0.1)
        solver = DualSGDSolver(batch_size=10, n_steps=20, polish=False)
        res = solver.solve(problem)
        check_feasible(problem, res)
        # Algorithm 2, step 10: one (first) argmax row per column at the same eta.
        C = EmbeddingCost(problem.cost.Z).column_block(0, problem.n)
        rows = np.argmax(problem.column_losses() - res.eta * C, axis=0)
        over += C[rows, np.arange(problem.n)].mean() > problem.eps * (1 + 1e-9)
    assert over >= 1


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_seeded_runs_repeat_and_warm_start_is_used():
    rng = np.random.default_rng(13)
    problem = make_problem(rng, 80, frac=0.2)
    a = DualSGDSolver(random_state=3, polish=False).solve(problem)
    b = DualSGDSolver(random_state=3, polish=False).solve(problem)
    c = DualSGDSolver(random_state=4, polish=False).solve(problem)
    assert a.eta == b.eta and a.objective == b.objective
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.eta != c.eta
    gen = np.random.default_rng(0)
    d = DualSGDSolver(random_state=gen, polish=False)
    assert d.solve(problem).eta != d.solve(problem).eta  # a Generator is consumed
    # No steps: eta is the warm start itself; at the optimal eta the plan is exact.
    exact = DualSolver().solve(problem)
    res = DualSGDSolver(n_steps=0, polish=False).solve(problem, eta0=exact.eta)
    assert res.eta == exact.eta and res.info["recovery"] == "exact"
    assert res.objective == pytest.approx(exact.objective, rel=1e-12)
    # A warm start near eta* stays near it (the SGD does not wander off).
    warm = DualSGDSolver(polish=False, batch_size=20, n_steps=30).solve(problem, eta0=exact.eta * 1.05)
    assert abs(math.log(warm.eta / exact.eta)) < 0.3


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_polishing_falls_back_to_the_exact_dual():
    rng = np.random.default_rng(14)
    problem = make_problem(rng, 50, frac=0.2)
    exact = DualSolver().solve(problem)
    res = DualSGDSolver(n_steps=0).solve(problem, eta0=exact.eta * 50)  # far above eta*
    assert res.info["polished"] and res.info["sgd_gap"] > DualSGDSolver()._gap_budget(problem)
    assert res.objective == pytest.approx(exact.objective, rel=1e-12)
    assert res.solver == "dual-sgd"
    raw = DualSGDSolver(n_steps=0, polish=False).solve(problem, eta0=exact.eta * 50)
    assert not raw.info["polished"] and raw.objective < exact.objective - 1e-6


def test_zero_budget_and_loose_budget():
    rng = np.random.default_rng(15)
    problem = make_problem(rng, 30, integer=True, n_distinct=12, frac=0.0)
    res = DualSGDSolver().solve(problem)
    assert res.info["delegated"] and res.transport_cost == 0.0
    assert res.objective == pytest.approx(LPSolver().solve(problem).objective, abs=1e-12)
    loose = TransportProblem(problem.losses, problem.labels, problem.cost, 1e3)
    res = DualSGDSolver(polish=False).solve(loose)
    check_feasible(loose, res)
    assert res.objective == pytest.approx(LPSolver().solve(loose).objective, abs=1e-9)


def test_registered_with_its_parameters():
    spec = budro.registry.get("solver", "dual-sgd").spec
    assert {"sparse-cost", "warm-start", "stochastic"} <= spec.capabilities
    solver = budro.registry.create("solver", "dual-sgd", batch_size=50, random_state=1)
    assert isinstance(solver, DualSGDSolver) and solver.batch_size == 50
    assert not solver.exact and solver.guarantee


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"n_steps": -1}, "n_steps"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": float("inf")}, "learning_rate"),
        ({"momentum": 1.0}, "momentum"),
        ({"random_state": "seed"}, "random_state"),
        ({"random_state": True}, "random_state"),
        ({"gap_rtol": 0.0}, "gap_rtol"),
        ({"polish": "yes"}, "polish"),
        ({"tie_rtol": 0.0}, "tie_rtol"),
    ],
)
def test_bad_parameters_are_refused_by_name(kwargs, name):
    with pytest.raises(ValidationError, match=name):
        DualSGDSolver(**kwargs)


@pytest.mark.filterwarnings("ignore::budro.exceptions.ConvergenceWarning")  # unpolished SGD
def test_a_denormal_warm_start_does_not_break_the_vanishing_test():
    # eta0 * 1e-12 underflows to 0: the floor is compared in log space (was math.log(0): ValueError).
    problem = TransportProblem(np.array([[2.7, 2.0], [0.2, 0.1]]), np.array([1, 0]),
                               DenseCost(EmbeddingCost(np.array([[0.0], [0.5]])).column_block(0, 2)), 1.2e-4)
    res = DualSGDSolver(batch_size=1, n_steps=1, learning_rate=0.01, momentum=0, polish=False).solve(problem, eta0=5e-324)
    check_feasible(problem, res)


@_needs_numba
@pytest.mark.parametrize("integer", [False, True], ids=["continuous", "integer-ties"])
def test_compiled_batch_argmax_costs_equal_the_numpy_formula(integer):
    """The fused compiled pass over an EmbeddingCost gives the cheapest argmax cost of every
    sampled column bit for bit as the numpy formula on the whole (n, batch) matrices, with
    duplicate points and tied losses (integer data), repeated and own columns in the batch."""
    rng = np.random.default_rng(3 + integer)
    for n_distinct in (5, 60):
        problem = make_problem(rng, 60, K=3, n_distinct=n_distinct, integer=integer)
        sampler = _Batches(problem, DualSolver(kernel="numba"))
        assert sampler.compiled
        reference = _Batches(problem, DualSolver(kernel="numpy"))
        assert not reference.compiled
        cols = np.concatenate([rng.integers(0, problem.n, size=40), [0, 0, problem.n - 1]])
        for eta in (1e-3, 0.3, 1.0, 7.0):
            R, C = reference.columns(cols)
            V = R - eta * C
            expected = np.where(V >= V.max(axis=0, keepdims=True), C, np.inf).min(axis=0)
            np.testing.assert_array_equal(reference.argmax_costs(eta, cols), expected)
            got = sampler.argmax_costs(eta, cols)
            np.testing.assert_array_equal(got, expected)
            assert np.all(np.isfinite(got)) and np.all(got >= 0.0)
