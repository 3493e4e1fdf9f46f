"""``paper`` (alias ``paper-sgd``): the paper's adversary for reproduction (its dual SGD, or its
bisection on the dual's subgradient, then one argmax row per column at that eta).  Not exact: the
budget may be exceeded, and is reported per round."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import budro.registry
from budro.config import parse_config
from budro.exceptions import ValidationError
from budro.experiment import budget_used, run_experiment
from budro.solvers.dual import DualSolver
from budro.solvers.paper import PaperSGDSolver, PaperSolver
from budro.testing import check_solver
from budro.transport import DenseCost, EmbeddingCost, NeighborCost, TransportProblem

from test_solver_sgd import make_problem as _sgd_problem

TIE_RTOL = 1e-12


def make_problem(rng, n, K=2, *, integer=True, frac=0.1, **kwargs):
    """test_solver_sgd's problems, by default with integer losses and coordinates and duplicated
    points: many exact ties in R - eta C."""
    return _sgd_problem(rng, n, K, integer=integer, frac=frac, **kwargs)


def full_costs(problem):
    """C (n x n) with +inf on the pairs a sparse cost does not list, computed here, not by budro."""
    n = problem.n
    if problem.cost.is_sparse:
        C = np.full((n, n), np.inf)
        nb, nc = np.asarray(problem.cost.neighbors), np.asarray(problem.cost.neighbor_costs)
        C[nb, np.arange(n)[:, None]] = nc  # neighbors[j] are the rows column j may move to
        return C
    return np.concatenate([block for _, _, block in problem.cost.iter_blocks()], axis=1)


def argmax_rows(problem, eta):
    """Each column's cheapest argmax row of R - eta C (smallest index among equal costs), in numpy."""
    R = problem.losses[:, problem.labels]  # R[i, j] = losses[i, y_j]
    C = full_costs(problem)
    with np.errstate(invalid="ignore"):
        V = np.where(np.isinf(C), -np.inf, R - eta * C)
    vmax = V.max(axis=0)
    scale = float(np.abs(problem.losses).max())
    ties = V >= vmax - TIE_RTOL * (scale + np.abs(vmax))
    cheapest = np.where(ties, C, np.inf).min(axis=0)
    pick = ties & (C == cheapest)
    return pick.argmax(axis=0), C  # argmax of a boolean column: its first True row


def check_argmax_plan(problem, res):
    n = problem.n
    rows, C = argmax_rows(problem, res.eta)
    plan = res.plan.tocsc()
    plan.sort_indices()
    # One row per column, mass 1/n, and that row is the cheapest argmax row at the returned eta.
    assert plan.nnz == n and np.all(np.diff(plan.indptr) == 1)
    np.testing.assert_allclose(plan.data, 1.0 / n, rtol=0, atol=0)
    np.testing.assert_array_equal(plan.indices, rows)
    # Marginals: weights are the plan's, label shares exact.
    W = np.zeros((n, problem.n_labels))
    np.add.at(W, (rows, problem.labels), 1.0 / n)
    np.testing.assert_allclose(res.weights, W, rtol=0, atol=1e-15)
    np.testing.assert_allclose(res.weights.sum(axis=0), problem.label_shares, rtol=0, atol=1e-12)
    cost = float(C[rows, np.arange(n)].mean())
    objective = float(problem.losses[rows, problem.labels].mean())
    assert res.transport_cost == pytest.approx(cost, rel=1e-12, abs=1e-15)
    assert res.objective == pytest.approx(objective, rel=1e-12)
    assert res.info["budget_ratio"] == pytest.approx(cost / problem.eps, rel=1e-12)
    assert res.info["over_budget"] == (cost > problem.eps * (1 + 1e-9) + 1e-12)
    return cost


# ---------------------------------------------------------------------------------- the plan


@pytest.mark.parametrize("kind", ["dense", "embedding", "sparse"])
def test_the_plan_is_the_cheapest_argmax_plan_at_the_returned_eta(kind):
    rng = np.random.default_rng(1)
    over = under = 0
    for i in range(6):
        problem = make_problem(rng, 24 + 4 * i, kind=kind, n_distinct=10, integer=i % 3 != 2, frac=0.05)
        # A large learning rate, so that eta actually moves on these tiny problems.
        res = PaperSGDSolver(batch_size=8, n_steps=15, learning_rate=0.3, random_state=i).solve(problem)
        assert res.solver == "paper" and res.eta >= 0.0
        cost = check_argmax_plan(problem, res)
        over += cost > problem.eps * (1 + 1e-9)
        under += cost < problem.eps * (1 - 1e-9)
        assert res.info["gap"] == pytest.approx(res.dual_objective - res.objective, abs=1e-12)
    assert over >= 1  # the heuristic does break the budget on these instances


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 25), kind=st.sampled_from(["dense", "sparse"]),
       eta_init=st.floats(1e-3, 30.0), frac=st.floats(0.0, 1.0))
def test_property_any_eta_gives_the_argmax_plan(seed, n, kind, eta_init, frac):
    rng = np.random.default_rng(seed)
    problem = make_problem(rng, n, kind=kind, n_distinct=max(1, n // 2), m=min(n, 4), frac=frac)
    if problem.eps == 0.0:
        return
    res = PaperSGDSolver(n_steps=0, eta_init=eta_init).solve(problem)
    assert res.eta == eta_init
    check_argmax_plan(problem, res)
    # The argmax plan never loses loss against moving nothing, and the dual value at any eta
    # bounds the loss reachable within its own cost: g(eta) + eta (cost - eps) = objective.
    own = problem.losses[np.arange(n), problem.labels].mean()
    assert res.objective >= own - 1e-12
    assert res.dual_objective + eta_init * (res.transport_cost - problem.eps) == pytest.approx(res.objective, abs=1e-9)


def test_hand_example_with_a_tie_at_a_breakpoint():
    # Points on a line at 0, 1, 3: C = [[0, 1, 9], [1, 0, 4], [9, 4, 0]]; all labels 0, losses 0, 1, 3.
    # At eta = 0.5, V = R - eta C:
    #   column 0: [0, 0.5, -1.5]  -> row 1 (cost 1)
    #   column 1: [-0.5, 1, 1]    -> rows 1 (cost 0) and 2 (cost 4) tie: the cheapest, row 1
    #   column 2: [-4.5, -1, 3]   -> row 2 (cost 0)
    # Plan rows (1, 1, 2): cost 1/3, objective (1 + 1 + 3)/3 = 5/3; with eps = 0.1, 10/3 of the budget.
    Z = np.array([[0.0], [1.0], [3.0]])
    losses = np.array([[0.0, 5.0], [1.0, 5.0], [3.0, 5.0]])
    for cost in (DenseCost(EmbeddingCost(Z).column_block(0, 3)), EmbeddingCost(Z, cache_bytes=0), NeighborCost(Z, 3)):
        problem = TransportProblem(losses, np.zeros(3, dtype=int), cost, 0.1)
        res = PaperSGDSolver(n_steps=0, eta_init=0.5).solve(problem)
        assert res.eta == 0.5
        np.testing.assert_array_equal(res.plan.tocsc().indices, [1, 1, 2])
        assert res.transport_cost == pytest.approx(1 / 3) and res.objective == pytest.approx(5 / 3)
        assert res.info["budget_ratio"] == pytest.approx(10 / 3) and res.info["over_budget"]
        np.testing.assert_allclose(res.weights, [[0, 0], [2 / 3, 0], [1 / 3, 0]], atol=1e-15)


def test_sgd_steps_follow_the_papers_recipe_by_hand():
    # The same problem; three steps with one column per step, replayed here with the same generator:
    #   v <- momentum v - lr (eps - C[argmax, j]),  eta <- max(0, eta + v)  (tf.keras SGD, Algorithm 2)
    Z = np.array([[0.0], [1.0], [3.0]])
    losses = np.array([[0.0, 5.0], [1.0, 5.0], [3.0, 5.0]])
    problem = TransportProblem(losses, np.zeros(3, dtype=int), EmbeddingCost(Z), 0.1)
    C = EmbeddingCost(Z).column_block(0, 3)
    lr, mom = 0.05, 0.9
    eta, v = 0.5, 0.0
    draws = np.random.default_rng(7)
    for _ in range(3):
        j = int(draws.integers(0, 3, size=1)[0])
        V = losses[:, 0] - eta * C[:, j]
        tied = np.flatnonzero(V >= V.max() - 1e-12)
        c = C[tied, j].min()  # cheapest argmax row's cost
        v = mom * v - lr * (0.1 - c)
        eta = max(0.0, eta + v)
    res = PaperSGDSolver(batch_size=1, n_steps=3, learning_rate=lr, momentum=mom, eta_init=0.5,
                         random_state=np.random.default_rng(7)).solve(problem)
    assert res.eta == pytest.approx(eta, rel=1e-15) and res.info["sgd_steps"] == 3
    check_argmax_plan(problem, res)


def test_eta_is_projected_at_zero():
    # Far under budget at eta_init: the SGD pushes eta down and stops at 0 (Algorithm 2's max{0, .}).
    Z = np.array([[0.0], [1.0], [3.0]])
    losses = np.array([[0.0, 5.0], [1.0, 5.0], [3.0, 5.0]])
    problem = TransportProblem(losses, np.zeros(3, dtype=int), EmbeddingCost(Z), 100.0)
    res = PaperSGDSolver(batch_size=3, n_steps=5, learning_rate=1.0, eta_init=0.5).solve(problem)
    assert res.eta == 0.0
    check_argmax_plan(problem, res)  # at eta = 0 every column goes to its largest loss, the cheapest such row
    np.testing.assert_array_equal(res.plan.tocsc().indices, [2, 2, 2])


# ---------------------------------------------------------------------------------- bisection (German)


def argmax_cost_range(problem, eta):
    """Mean cost of the cheapest and of the most expensive argmax plan at eta (numpy, not budro):
    ``eps - g'+(eta)`` and ``eps - g'-(eta)``."""
    R = problem.losses[:, problem.labels]
    C = full_costs(problem)
    with np.errstate(invalid="ignore"):
        V = np.where(np.isinf(C), -np.inf, R - eta * C)
    vmax = V.max(axis=0)
    ties = V >= vmax - TIE_RTOL * (float(np.abs(problem.losses).max()) + np.abs(vmax))
    return float(np.where(ties, C, np.inf).min(axis=0).mean()), float(np.where(ties, C, -np.inf).max(axis=0).mean())


def reference_bisection(problem, low, high, steps):
    """The paper's bisection written out here: halve [low, high] on the sign of the subgradient
    (for low = 0 and eta* inside [0, high])."""
    if argmax_cost_range(problem, low)[0] <= problem.eps:
        return low, low, True  # g'+(0) >= 0: eta* = 0
    a, b = low, high
    for _ in range(steps):
        mid = 0.5 * (a + b)
        cheap, dear = argmax_cost_range(problem, mid)
        if cheap > problem.eps:
            a = mid  # even the cheapest argmax plan is over budget: g'+(mid) < 0, eta* to the right
        elif dear < problem.eps:
            b = mid  # even the dearest is under: g'-(mid) > 0, eta* to the left
        else:
            return mid, mid, True
    return a, b, False


def check_bisection(problem, res, *, n_bisections=30):
    """The bisection's eta against budro's exact ``dual`` and the argmax plan at it, independently."""
    cost = check_argmax_plan(problem, res)
    exact = DualSolver().solve(problem)
    a, b = res.info["bracket"]
    if res.info["exact_hit"]:  # a probe was a minimiser: its subgradient interval holds 0
        assert a == b == res.eta and res.info["eta_tolerance"] == 0.0
        cheap, dear = argmax_cost_range(problem, res.eta)
        assert cheap <= problem.eps * (1 + 1e-9) and (res.eta == 0.0 or dear >= problem.eps * (1 - 1e-9))
        assert res.dual_objective == pytest.approx(exact.dual_objective, rel=1e-9, abs=1e-12)
    else:
        # g'+(a) < 0 < g'-(b): every minimiser, the exact dual's eta* included, lies inside (a, b),
        # and the returned eta is the midpoint, within half the width of eta*.
        assert argmax_cost_range(problem, a)[0] > problem.eps and argmax_cost_range(problem, b)[1] < problem.eps
        assert a < exact.eta < b and res.eta == 0.5 * (a + b)
        assert res.info["eta_tolerance"] == 0.5 * (b - a)
        assert abs(res.eta - exact.eta) <= res.info["eta_tolerance"]
        if not res.info["bracket_grown"]:
            lo, hi = 0.0, 15.0  # the default bracket
            assert b - a == pytest.approx((hi - lo) / 2**n_bisections, rel=1e-12)
            assert res.n_iter == res.info["evaluations"] == n_bisections + 3  # two ends, the probes, the plan
    return cost


@pytest.mark.parametrize("kind", ["dense", "embedding", "sparse"])
def test_bisection_brackets_the_exact_eta_and_returns_the_argmax_plan_there(kind):
    rng = np.random.default_rng(11)
    over = under = 0
    for i in range(8):
        problem = make_problem(rng, 20 + 5 * i, kind=kind, n_distinct=9 + i, integer=i % 2 == 0, frac=0.05 + 0.02 * i)
        res = PaperSolver(eta_search="bisection").solve(problem)
        assert res.solver == "paper" and res.info["eta_search"] == "bisection"
        cost = check_bisection(problem, res)
        over += cost > problem.eps * (1 + 1e-9)
        under += cost < problem.eps * (1 - 1e-9)
        # The same halvings written out in numpy end on the same bracket.
        a, b, hit = reference_bisection(problem, 0.0, 15.0, 30)
        if not res.info["bracket_grown"]:
            assert (a, b, hit) == (*res.info["bracket"], res.info["exact_hit"])
    assert over >= 1  # the argmax plan beside eta* does break the budget on these instances


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 25), kind=st.sampled_from(["dense", "sparse"]),
       frac=st.floats(0.001, 2.0), integer=st.booleans(), steps=st.integers(0, 40),
       low=st.floats(0.0, 5.0), width=st.floats(1e-3, 20.0))
def test_property_bisection_brackets_every_minimiser(seed, n, kind, frac, integer, steps, low, width):
    rng = np.random.default_rng(seed)
    problem = make_problem(rng, n, kind=kind, n_distinct=max(1, n // 2), m=min(n, 4), frac=frac, integer=integer)
    if problem.eps == 0.0:  # all points alike: nothing to search (eps = 0 delegates, tested below)
        return
    res = PaperSolver(eta_search="bisection", bracket=(low, low + width), n_bisections=steps).solve(problem)
    check_argmax_plan(problem, res)
    exact = DualSolver().solve(problem)
    a, b = res.info["bracket"]
    if res.info["exact_hit"]:
        assert res.dual_objective == pytest.approx(exact.dual_objective, rel=1e-9, abs=1e-12)
    else:
        assert a < exact.eta < b and abs(res.eta - exact.eta) <= res.info["eta_tolerance"]
        assert res.dual_objective >= exact.dual_objective - 1e-9 * max(1.0, abs(exact.dual_objective))
    assert res.info["budget_ratio"] == pytest.approx(res.transport_cost / problem.eps, rel=1e-12)


def hand_problem(eps):
    # Points on a line at 0, 1, 3, all labels 0, losses 0, 1, 3 (the example above).  The argmax of
    # column 0 moves from row 2 (cost 9) to row 1 (cost 1) at eta = 1/4 and to row 0 at eta = 1;
    # column 1 from row 2 (cost 4) to row 1 at eta = 1/2; column 2 stays.  Mean argmax cost:
    # 13/3 below 1/4, 5/3 up to 1/2, 1/3 up to 1, 0 past 1: with eps = 0.1, eta* = 1.
    Z = np.array([[0.0], [1.0], [3.0]])
    losses = np.array([[0.0, 5.0], [1.0, 5.0], [3.0, 5.0]])
    return TransportProblem(losses, np.zeros(3, dtype=int), EmbeddingCost(Z), eps)


def test_bisection_by_hand():
    problem = hand_problem(0.1)
    # [0, 16]: the probes 8, 4, 2, 1 hit eta* = 1 exactly: the cheapest argmax plan there (column 0
    # ties rows 0 and 1 at value 0 and stays), within budget, after 2 + 4 evaluations.
    res = PaperSolver(eta_search="bisection", bracket=(0.0, 16.0)).solve(problem)
    assert res.eta == 1.0 and res.info["exact_hit"] and res.n_iter == 6
    np.testing.assert_array_equal(res.plan.tocsc().indices, [0, 1, 2])
    assert res.transport_cost == 0.0 and not res.info["over_budget"]
    # [0, 15]: 1 is never a probe; 30 halvings end on a bracket of width 15 / 2^30 around it, and
    # the plan is the argmax plan on the midpoint's side of 1: over budget (1/3 = 10/3 eps) below it.
    res = PaperSolver(eta_search="bisection").solve(problem)
    a, b = res.info["bracket"]
    assert a < 1.0 < b and b - a == 15.0 / 2**30 and res.n_iter == 33 and not res.info["exact_hit"]
    expected = [1, 1, 2] if res.eta < 1.0 else [0, 1, 2]
    np.testing.assert_array_equal(res.plan.tocsc().indices, expected)
    assert res.info["budget_ratio"] == pytest.approx(10 / 3 if res.eta < 1.0 else 0.0)
    # Fewer halvings, a wider bracket: 2 halvings of [0, 15] leave [0, 3.75], midpoint 1.875 > 1.
    res = PaperSolver(eta_search="bisection", n_bisections=2).solve(problem)
    assert res.info["bracket"] == (0.0, 3.75) and res.eta == 1.875 and res.info["eta_tolerance"] == 1.875
    assert res.transport_cost == 0.0 and res.n_iter == 5


def test_bisection_grows_or_lowers_the_bracket_when_eta_star_is_outside():
    problem = hand_problem(0.1)
    up = PaperSolver(eta_search="bisection", bracket=(0.0, 0.5)).solve(problem)  # eta* = 1 above: 0.5 -> 2
    assert up.info["bracket_grown"] and 0.5 <= up.info["bracket"][0] < 1.0 < up.info["bracket"][1] <= 2.0
    assert abs(up.eta - 1.0) <= up.info["eta_tolerance"] < 1e-8
    down = PaperSolver(eta_search="bisection", bracket=(3.0, 5.0)).solve(problem)  # eta* below: [0, 3]
    assert down.info["bracket_grown"] and down.info["bracket"][0] < 1.0 < down.info["bracket"][1] <= 3.0
    assert abs(down.eta - 1.0) <= down.info["eta_tolerance"] < 1e-8
    # A budget that the farthest argmax plan at eta = 0 already meets: eta* = 0, nothing to search.
    free = PaperSolver(eta_search="bisection", bracket=(3.0, 4.0)).solve(hand_problem(5.0))
    assert free.eta == 0.0 and free.info["exact_hit"] and free.n_iter == 2
    np.testing.assert_array_equal(free.plan.tocsc().indices, [2, 2, 2])
    assert free.info["budget_ratio"] == pytest.approx((13 / 3) / 5.0)


# ---------------------------------------------------------------------------------- warm start, seeds


def test_warm_start_is_used_only_when_asked():
    rng = np.random.default_rng(3)
    problem = make_problem(rng, 30, n_distinct=12)
    cold = PaperSGDSolver(n_steps=0)
    assert cold.solve(problem, eta0=2.5).eta == 0.1  # the paper restarts at 0.1 every round
    warm = PaperSGDSolver(n_steps=0, warm_start=True)
    res = warm.solve(problem, eta0=2.5)
    assert res.eta == 2.5 and res.info["warm_started"] and res.info["eta_start"] == 2.5
    check_argmax_plan(problem, res)
    assert warm.solve(problem).eta == 0.1  # no eta0 (first round): eta_init
    # With steps the SGD starts from eta0: the same draws from another start end elsewhere.
    a = PaperSGDSolver(batch_size=5, n_steps=4, learning_rate=0.5, warm_start=True).solve(problem, eta0=2.5)
    b = PaperSGDSolver(batch_size=5, n_steps=4, learning_rate=0.5, warm_start=True).solve(problem, eta0=0.7)
    assert a.info["eta_start"] == 2.5 and b.info["eta_start"] == 0.7 and a.eta != b.eta


def test_an_integer_seed_repeats_and_rounds_draw_new_batches():
    rng = np.random.default_rng(4)
    problem = make_problem(rng, 40, n_distinct=15, integer=False)
    kw = dict(batch_size=4, n_steps=6, learning_rate=0.3)
    first, second = PaperSGDSolver(random_state=5, **kw), PaperSGDSolver(random_state=5, **kw)
    runs = [[s.solve(problem).eta for _ in range(3)] for s in (first, second)]
    assert runs[0] == runs[1]  # the same seed repeats the same rounds
    assert len(set(runs[0])) == 3  # successive rounds sample new minibatches (the paper's code did)
    assert PaperSGDSolver(random_state=6, **kw).solve(problem).eta != runs[0][0]


# ---------------------------------------------------------------------------------- contract


def test_declared_tolerances_hold_against_highs():
    # The kit compares with HiGHS: a-priori tolerances (largest allowed cost, largest gain), the
    # plan's marginals and consistency, and that its objective never beats the LP at its own cost.
    check_solver(PaperSGDSolver(batch_size=6, n_steps=10, learning_rate=0.2), n_instances=4)
    check_solver(PaperSGDSolver(), n_instances=2, edge_cases=False)
    far = PaperSGDSolver(n_steps=0, eta_init=0.01)  # a small eta: columns move far, over budget
    report = check_solver(far, n_instances=4, edge_cases=False)
    assert any(r["gap"] < -1e-9 for r in report)  # over budget, it beats the LP optimum at eps

    class PretendsFeasible(PaperSGDSolver):
        """The same plans with the default (rounding-only) budget tolerance of a feasible solver."""

        def budget_tolerance(self, problem):
            return DualSolver().budget_tolerance(problem)

    with pytest.raises(AssertionError, match="budget"):
        check_solver(PretendsFeasible(n_steps=0, eta_init=0.01), n_instances=4, capabilities={"dense-cost"},
                     edge_cases=False)


def test_tolerances_are_a_priori_bounds():
    rng = np.random.default_rng(8)
    for kind in ("dense", "embedding", "sparse"):
        problem = make_problem(rng, 20, kind=kind, n_distinct=8, integer=False)
        solver = PaperSGDSolver()
        C = full_costs(problem)
        top = float(C[np.isfinite(C)].max())
        assert top - problem.eps <= solver.budget_tolerance(problem) <= 4 * top + 1e-9  # embedding: a diameter bound
        R = problem.losses[:, problem.labels]
        gain = np.where(np.isinf(C), -np.inf, R).max(axis=0) - R[np.arange(20), np.arange(20)]
        assert solver.objective_tolerance(problem) == pytest.approx(gain.mean(), abs=1e-8)


def test_zero_budget_moves_nothing_and_registry():
    rng = np.random.default_rng(9)
    problem = make_problem(rng, 12, frac=0.0, n_distinct=12)
    res = PaperSGDSolver().solve(problem)
    assert res.info["delegated"] and res.transport_cost == 0.0 and math.isnan(res.info["budget_ratio"])
    entry = budro.registry.get("solver", "paper-sgd")  # the former name resolves to "paper"
    assert entry.name == "paper" and "paper-sgd" in entry.spec.aliases
    assert {"dense-cost", "sparse-cost", "warm-start", "stochastic"} <= entry.spec.capabilities
    assert "exact" not in entry.spec.capabilities
    solver = budro.registry.create("solver", "paper-sgd", n_steps=5)
    assert isinstance(solver, PaperSGDSolver) and not solver.exact and "NOT exact" in solver.guarantee
    assert solver.eta_search == "sgd" and PaperSGDSolver is PaperSolver
    bisect = budro.registry.create("solver", "paper", eta_search="bisection", n_bisections=12)
    assert bisect.eta_search == "bisection" and bisect.n_bisections == 12
    res = bisect.solve(problem)  # eps = 0 delegates whatever the mode
    assert res.info["delegated"] and res.info["eta_search"] == "bisection" and res.transport_cost == 0.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"n_steps": -1}, "n_steps"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"momentum": 1.0}, "momentum"),
        ({"eta_init": 0.0}, "eta_init"),
        ({"eta_init": float("inf")}, "eta_init"),
        ({"warm_start": "no"}, "warm_start"),
        ({"random_state": "seed"}, "random_state"),
        ({"tie_rtol": 0.0}, "tie_rtol"),
        ({"max_dense_n": 0}, "max_dense_n"),
        ({"eta_search": "newton"}, "eta_search"),
        ({"eta_search": None}, "eta_search"),
        ({"bracket": (1.0, 1.0)}, "bracket"),
        ({"bracket": (-1.0, 2.0)}, "bracket"),
        ({"bracket": (0.0, float("inf"))}, "bracket"),
        ({"bracket": (0.0, 1.0, 2.0)}, "bracket"),
        ({"bracket": "0,15"}, "bracket"),
        ({"n_bisections": -1}, "n_bisections"),
        ({"eta_search": "bisection", "warm_start": True}, "warm_start"),
    ],
)
def test_bad_parameters_are_refused_by_name(kwargs, name):
    with pytest.raises(ValidationError, match=name):
        PaperSGDSolver(**kwargs)


def test_full_problem_past_max_dense_n_is_refused_before_any_work():
    rng = np.random.default_rng(10)
    problem = make_problem(rng, 30, n_distinct=10)
    with pytest.raises(ValidationError, match="max_dense_n"):
        PaperSGDSolver(max_dense_n=20).solve(problem)


# ---------------------------------------------------------------------------------- experiments


def _read_csv(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_experiment_reports_the_budget_used_per_split(tmp_path, data_home):
    cfg = parse_config({
        "eps": 1.0, "n_steps": 4, "protected": ["age"], "random_state": 0,
        "data": {"source": "german"},
        "fair_metric": {"name": "sensitive-subspace"},
        "backend": {"name": "xgboost", "weight_scale": "unit", "max_depth": 2, "nthread": 1},
        "experiment": {"splits": 1},
        "methods": {
            "Paper": {"method": "budro", "solver": {"name": "paper-sgd", "learning_rate": 0.05}},
            "Bisection": {"method": "budro", "solver": {"name": "paper", "eta_search": "bisection"}},
            "Exact": {"method": "budro", "solver": "dual"},
            "Baseline": {"method": "gbdt", "n_rounds": 3},
        },
    })
    result = run_experiment(cfg, output=tmp_path, progress=False)
    rows = {r["method"]: r for r in _read_csv(tmp_path / "splits.csv")}
    for label in ("Paper", "Bisection", "Exact"):
        assert {"budget_used_mean", "budget_used_max", "rounds_over_budget"} <= set(rows[label])
        assert 0.0 <= float(rows[label]["budget_used_mean"]) <= float(rows[label]["budget_used_max"])
    assert float(rows["Exact"]["budget_used_max"]) <= 1.0 + 1e-9 and rows["Exact"]["rounds_over_budget"] == "0"
    assert rows["Baseline"]["budget_used_mean"] == ""  # no transport rounds
    summary = {r["method"]: r for r in _read_csv(tmp_path / "summary.csv")}
    assert "budget_used_mean_mean" in summary["Paper"]
    md = (tmp_path / "results.md").read_text()
    assert "Budget used (mean) | Budget used (max) | Rounds over budget |" in md
    assert "budget_used_max" in result.columns


def test_budget_used_from_a_history():
    class Record:
        def __init__(self, cost):
            self.transport_cost = cost

    class Fitted:
        eps_effective_ = 0.5
        history_ = [Record(0.5), Record(0.25), Record(1.0), Record(0.5 * (1 + 1e-12))]

    out = budget_used(Fitted())
    assert out["budget_used_mean"] == pytest.approx((1 + 0.5 + 2 + 1) / 4)
    assert out["budget_used_max"] == 2.0 and out["rounds_over_budget"] == 1  # rounding is not "over"
    assert out["rounds_not_converged"] == 0 and math.isnan(out["largest_round_gap"])  # no gaps recorded
    assert budget_used(object()) == {}
    stopped = Record(0.5)
    stopped.converged, stopped.gap = False, 2.3e-4  # a round an exact solver's budget stopped
    Fitted.history_ = Fitted.history_ + [stopped]
    out = budget_used(Fitted())
    assert out["rounds_not_converged"] == 1 and out["largest_round_gap"] == 2.3e-4
