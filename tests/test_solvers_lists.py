"""The full problem on complete lists with duplicates collapsed (budro.solvers._dual_lists).

Identical embeddings are one row at their largest loss, identical (embedding, label) columns one
column with a multiplicity; every column's list holds every distinct row.  Checked against
HiGHS (``lp``) and against the column-block path of the same solver on instances made of
duplicated points and tied losses, with both pruning kernels.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro.solvers import _dual_lists, _sparse_kernels
from budro.solvers.dual import DualSolver
from budro.solvers.lp import LPSolver
from budro.transport import DenseCost, EmbeddingCost, TransportProblem

from test_solvers_exact import assert_same_optimum, check_exact_plan, make_instance

KERNELS = ["numpy"] + (["numba"] if _sparse_kernels.available() else [])


RTOL = 1e-9


def solve_blocks(problem, **params):
    """The column-block path (cutting plane) of the same solver."""
    saved = _dual_lists._MAX_PAIRS
    _dual_lists._MAX_PAIRS = 0
    try:
        return DualSolver(**params).solve(problem)
    finally:
        _dual_lists._MAX_PAIRS = saved


@st.composite
def duplicate_heavy_problems(draw):
    n = draw(st.integers(1, 40))
    K = draw(st.sampled_from([2, 3]))
    n_distinct = draw(st.integers(1, max(1, n // 2)))  # every point has copies on average
    seed = draw(st.integers(0, 2**32 - 1))
    integer = draw(st.booleans())  # integer losses: exact ties in R - eta C everywhere
    rng = np.random.default_rng(seed)
    losses, labels, Z = make_instance(rng, n, K, n_distinct=n_distinct, integer=integer, d=draw(st.integers(1, 3)))
    if draw(st.booleans()):  # copies share their losses too (tied within a group)
        _, first, inverse = np.unique(Z, axis=0, return_index=True, return_inverse=True)
        losses = losses[first][inverse.reshape(-1)]
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


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=duplicate_heavy_problems(), kernel=st.sampled_from(KERNELS))
def test_property_collapsed_lists_equal_lp_and_the_block_path(problem, kernel):
    res = DualSolver(kernel=kernel).solve(problem)
    assert res.info["reduced"] is not None  # the complete-list path was taken
    groups, classes = res.info["reduced"]
    assert groups == len(np.unique(problem.cost.Z, axis=0)) and classes <= problem.n
    check_exact_plan(problem, res)  # feasible, budget met, n + 1 nonzeros, one split column, certified
    lp = LPSolver().solve(problem)
    assert_same_optimum(res, lp)
    blocks = solve_blocks(problem)
    scale = max(1.0, abs(blocks.objective))
    assert abs(res.objective - blocks.objective) <= RTOL * scale
    # Both etas minimise g: the dual value there is the same.
    assert abs(res.dual_objective - blocks.dual_objective) <= RTOL * scale
    assert res.transport_cost <= problem.eps * (1 + 1e-12) + 1e-15


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("share", [1.0, 0.3, 0.05], ids=["distinct", "30pc-distinct", "5pc-distinct"])
def test_same_plan_as_the_block_path_on_continuous_losses(kernel, share):
    # Continuous losses: the optimum is unique, so eta, objective and weights must all agree.
    rng = np.random.default_rng(31)
    n = 240
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=int(share * n), integer=False, d=3)
    cost = EmbeddingCost(Z)
    for eps in (0.01, 0.1, 0.5):
        problem = TransportProblem(losses, labels, cost, eps * float(cost.column_block(0, n).mean()))
        res = DualSolver(kernel=kernel).solve(problem)
        ref = solve_blocks(problem)
        assert res.info["reduced"][0] == len(np.unique(Z, axis=0))
        assert res.n_iter == 1  # read off the breakpoints and certified by one evaluation
        assert res.objective == pytest.approx(ref.objective, rel=1e-12)
        assert res.eta == pytest.approx(ref.eta, rel=1e-9)
        np.testing.assert_allclose(res.weights, ref.weights, rtol=0, atol=1e-12)
        assert res.transport_cost == pytest.approx(ref.transport_cost, rel=1e-9)
        check_exact_plan(problem, res)


def test_dense_matrix_takes_complete_lists_without_collapsing():
    rng = np.random.default_rng(32)
    n = 90
    losses, labels, Z = make_instance(rng, n, 3, n_distinct=30, integer=True)
    C = EmbeddingCost(Z).column_block(0, n)
    for eps in (0.0, 0.05 * C.mean(), 0.5 * C.mean()):
        problem = TransportProblem(losses, labels, DenseCost(C), eps)
        res = DualSolver().solve(problem)
        assert res.info["reduced"] == (n, n)  # a matrix has no embedding to compare
        check_exact_plan(problem, res)
        assert_same_optimum(res, LPSolver().solve(problem))


def test_collapsed_rows_are_represented_by_their_worst_copy():
    # Four copies of one point (different losses) and one far point: at eps = 0 mass moves only
    # between the copies, each column to the copy with the largest loss under its label.
    Z = np.array([[0.0], [0.0], [0.0], [0.0], [5.0]])
    losses = np.array([[1.0, 0.0], [3.0, 0.5], [2.0, 4.0], [3.0, 1.0], [9.0, 9.0]])
    labels = np.array([0, 0, 1, 1, 0])
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.0)
    res = DualSolver().solve(problem)
    assert res.info["reduced"] == (2, 3)  # 2 distinct points; columns (p0, y0), (p0, y1), (p1, y0)
    # label 0: copies 1 and 3 tie at 3.0, the smaller row (1) is taken; label 1: copy 2 (4.0).
    expected = np.zeros((5, 2))
    expected[1, 0] = 2 / 5
    expected[2, 1] = 2 / 5
    expected[4, 0] = 1 / 5
    np.testing.assert_array_equal(res.weights, expected)
    assert res.objective == pytest.approx((2 * 3.0 + 2 * 4.0 + 9.0) / 5)
    check_exact_plan(problem, res)


def test_reduction_is_cached_per_cost_object_and_labels():
    rng = np.random.default_rng(33)
    n = 60
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=20, integer=False)
    cost = EmbeddingCost(Z)
    solver = DualSolver()
    solver.solve(TransportProblem(losses, labels, cost, 0.1))
    red = solver._reduction_cache
    assert red is not None and red.n_groups == len(np.unique(Z, axis=0))
    solver.solve(TransportProblem(losses * 1.5, labels, cost, 0.1))
    assert solver._reduction_cache is red  # same cost and labels: lists kept between rounds
    solver.solve(TransportProblem(losses, 1 - labels, cost, 0.1))
    assert solver._reduction_cache is not red
    res = solver.solve(TransportProblem(losses, labels, EmbeddingCost(Z), 0.1))  # another cost object
    assert_same_optimum(res, LPSolver().solve(TransportProblem(losses, labels, cost, 0.1)))


def test_too_many_distinct_pairs_go_through_column_blocks(monkeypatch):
    rng = np.random.default_rng(34)
    n = 50
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=40, integer=False)
    cost = EmbeddingCost(Z)
    problem = TransportProblem(losses, labels, cost, 0.05 * float(cost.column_block(0, n).mean()))
    lists = DualSolver().solve(problem)
    monkeypatch.setattr("budro.solvers._dual_lists._MAX_PAIRS", 100)
    blocks = DualSolver().solve(problem)
    assert lists.info["reduced"] is not None and blocks.info["reduced"] is None
    assert blocks.info["full_evaluations"] >= 1 and lists.info["full_evaluations"] == 0
    assert lists.objective == pytest.approx(blocks.objective, rel=1e-12)


def test_distinct_points_groups_identical_embeddings_in_order_of_first_row():
    Z = np.array([[1.0, 2.0], [0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [3.0, 3.0]])
    first, group = EmbeddingCost(Z).distinct_points()
    np.testing.assert_array_equal(first, [0, 1, 4])
    np.testing.assert_array_equal(group, [0, 1, 0, 1, 2])


def test_collapsed_solve_never_builds_the_n_by_n_matrix():
    # COMPAS-like: many rows, few distinct points; the held cost's matrix stays unbuilt and the
    # plan's costs (from the groups' costs) agree with the matrix built afterwards.
    rng = np.random.default_rng(35)
    n = 2000
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=40, integer=False, d=3)
    cost = EmbeddingCost(Z)
    assert cost.is_dense  # small enough to be held
    problem = TransportProblem(losses, labels, cost, 0.05)
    res = DualSolver().solve(problem)
    assert cost._full is None
    plan = res.plan.tocoo()
    assert res.transport_cost == pytest.approx(float(plan.data @ cost.entries(plan.row, plan.col)), rel=1e-12)
    assert cost._full is not None  # entries built it on demand
    np.testing.assert_allclose(cost.costs_among(np.arange(0, n, 7)), cost.column_block(0, n)[::7, ::7],
                               rtol=0, atol=1e-12)
    small = TransportProblem(losses[:300], labels[:300], EmbeddingCost(Z[:300]), 0.05)
    assert_same_optimum(DualSolver().solve(small), LPSolver().solve(small))


@pytest.mark.skipif(not _sparse_kernels.available(), reason="the compiled recovery needs numba (pip install 'budro[fast]')")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 30), K=st.integers(1, 3), data=st.data())
def test_compiled_recovery_equals_the_numpy_recovery_bit_for_bit(n, K, data):
    """``result_from_switch(compiled=True)`` (one numba pass) against ``_switch_entries`` +
    ``_result_from_entries``: the same entries, plan, weights, objective, cost, split column and
    switched count, to the last bit, with tied and equal rows, zero and negative cost increases,
    budgets below, at and above every switch, and no switch at all."""
    from budro.solvers._dual_plan import result_from_switch

    ints = st.integers(0, n - 1)
    rows_cheap = np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), dtype=np.intp)
    rows_dear = np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), dtype=np.intp)
    small = st.sampled_from([0.0, 0.25, 0.5, 1.0, 1e-17, 0.1, 2.0 / 3.0])
    cost_cheap = np.array(data.draw(st.lists(small, min_size=n, max_size=n)))
    cost_dear = np.array(data.draw(st.lists(small, min_size=n, max_size=n)))
    losses = np.array(data.draw(st.lists(st.floats(0.0, 5.0), min_size=n * K, max_size=n * K))).reshape(n, K)
    labels = np.array(data.draw(st.lists(st.integers(0, K - 1), min_size=n, max_size=n)), dtype=np.intp)
    eps = data.draw(st.sampled_from([0.0, 1e-3, 0.1, 0.3, 0.5, 1.0]))
    switch = data.draw(st.booleans())
    problem = TransportProblem(losses, labels, DenseCost(np.zeros((n, n))), eps)
    a, split_a, moved_a = result_from_switch(problem, (rows_cheap, cost_cheap), (rows_dear, cost_dear), switch,
                                             compiled=False, solver="dual")
    b, split_b, moved_b = result_from_switch(problem, (rows_cheap, cost_cheap), (rows_dear, cost_dear), switch,
                                             compiled=True, solver="dual")
    assert (split_a, moved_a) == (split_b, moved_b)
    assert a.objective == b.objective and a.transport_cost == b.transport_cost
    np.testing.assert_array_equal(a.weights, b.weights)
    pa, pb = a.plan.tocsc(), b.plan.tocsc()
    pa.sort_indices()
    np.testing.assert_array_equal(pa.indptr, pb.indptr)
    np.testing.assert_array_equal(pa.indices, pb.indices)
    np.testing.assert_array_equal(pa.data, pb.data)


def test_recovery_scratch_hands_out_again_only_arrays_nothing_else_holds():
    """The recycled arrays of the compiled recovery (a result's weights and plan rows): an array
    still held anywhere -- by a name, an attribute, a list, a view of it, a memoryview -- is never
    handed out again; once dropped, it is."""
    scratch = _sparse_kernels.SolveScratch()
    if scratch._free_count is None:  # pragma: no cover - not CPython: every array fresh
        pytest.skip("no reference counts on this interpreter")
    a = scratch.recycled((5, 2), np.float64)
    first = id(a)
    assert scratch.recycled((5, 2), np.float64) is not a  # held by a name
    del a
    b = scratch.recycled((5, 2), np.float64)
    assert id(b) == first  # dropped: handed out again
    for hold in (lambda x: x[1:], lambda x: x.reshape(-1), lambda x: memoryview(x), lambda x: [x],
                 lambda x: types.SimpleNamespace(x=x)):
        held = hold(b)
        del b
        b = scratch.recycled((5, 2), np.float64)
        assert id(b) != first, hold
        del held, b
        b = scratch.recycled((5, 2), np.float64)
        assert id(b) == first
    assert scratch.recycled((5, 3), np.float64).shape == (5, 3)  # another shape: another array
    assert scratch.recycled((5, 2), np.intp).dtype == np.intp


@pytest.mark.skipif(not _sparse_kernels.available(), reason="the compiled recovery needs numba (pip install 'budro[fast]')")
@pytest.mark.parametrize("renumbered", [False, True])
def test_a_kept_result_is_not_overwritten_by_later_solves(renumbered, monkeypatch):
    """A result's weights and plan (read after later solves on the same solver, whose recovery,
    evaluations and renumbering gathers recycle the arrays nothing holds) stay what a fresh solver
    gives for its problem; ``renumbered``: solved on the points renumbered by locality (the
    weights numbered back into recycled arrays too)."""
    from budro.solvers import _dual_sparse
    from budro.transport import NeighborCost

    monkeypatch.setattr(_dual_sparse, "LOCALITY_MIN_N", 100 if renumbered else 10**9)

    rng = np.random.default_rng(5)
    n, K, m = 300, 2, 8
    Z = rng.normal(size=(n, 3))
    cost = NeighborCost(Z, m)
    labels = rng.integers(0, K, size=n)
    problems = [TransportProblem(rng.exponential(size=(n, K)), labels, cost, 0.05) for _ in range(9)]
    solver = DualSolver(kernel="numba")
    kept, seen = {}, []
    for t, problem in enumerate(problems):
        result = solver.solve(problem)
        seen.append(id(result.weights))
        if t % 3 == 0:  # every third result held while the later solves run; the others dropped
            kept[t] = result
        del result
    assert len(set(seen)) < len(seen)  # dropped results' arrays were handed out again
    assert (solver._locality_cache is not None) == renumbered
    for t, result in kept.items():
        problem = problems[t]
        fresh = DualSolver(kernel="numba").solve(problem)
        np.testing.assert_array_equal(result.weights, fresh.weights)
        assert (result.plan != fresh.plan).nnz == 0
        assert result.objective == fresh.objective and result.transport_cost == fresh.transport_cost


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 12), st.integers(1, 4), st.integers(0, 2**31))
def test_stable_row_argsort_is_numpys_stable_argsort(rows, cols, values, seed):
    """The complete lists' order: numpy's stable argsort, exactly, ties (few distinct values) included."""
    a = np.random.default_rng(seed).integers(0, values, size=(rows, cols)).astype(float) / 3.0
    order, s = _dual_lists.stable_row_argsort(a)
    want = np.argsort(a, axis=1, kind="stable")
    np.testing.assert_array_equal(order, want)
    np.testing.assert_array_equal(s, np.take_along_axis(a, want, axis=1))


# --- numpy passes from a floor (budro.solvers._dual_sparse.floored_candidates, WarmHeads) -------


def _layout_of(problem, solver=None):
    solver = DualSolver(kernel="numpy") if solver is None else solver
    red = _dual_lists.reduction(solver, problem)
    return red, red.layout


def _evaluations_agree(problem, solver, full, floored, etas):
    """g restricted to ``floored`` equals g on ``full`` (every pair that can ever tie) at each eta:
    value, argmax rows lo / hi and their costs, bit for bit."""
    from budro.solvers import _dual_plan

    for eta in etas:
        a = _dual_plan.evaluate_candidates(solver, problem, full, eta)
        b = _dual_plan.evaluate_candidates(solver, problem, floored, eta)
        assert a.value == b.value
        for field in ("lo", "hi", "c_lo", "c_hi"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 40), K=st.sampled_from([2, 3]), integer=st.booleans(), shared=st.booleans(),
       near_ties=st.booleans(), seed=st.integers(0, 2**32 - 1),
       floor_share=st.sampled_from([1e-3, 0.05, 0.3, 1.0, 3.0, "breakpoint"]), drift=st.sampled_from([0.0, 1e-6, 1e-3, 0.1]),
       rounds=st.integers(1, 8), jump=st.integers(0, 8))
def test_property_numpy_candidates_from_a_floor_evaluate_as_the_whole_lists_above_it(
        n, K, integer, shared, near_ties, seed, floor_share, drift, rounds, jump):
    """At any eta >= floor (the floor itself, the whole lists' hull breakpoints above it, random
    values, a large one) g on the numpy candidates made from the floor -- the heads, dominance at
    the floor and hulls, with heads carried over drifting rounds (WarmHeads' certificate), a
    round whose losses jump and floors that rise, stay or fall -- has the value and the argmax
    rows of g on the whole lists' candidates, with exact ties (integer losses, copies sharing
    losses), near ties (within the tie tolerance), duplicated points and K = 2, 3."""
    from budro.solvers._dual_plan import breakpoint_eta
    from budro.solvers._dual_sparse import _floored_whole_lists, floored_candidates

    rng = np.random.default_rng(seed)
    losses, labels, Z = make_instance(rng, n, K, n_distinct=max(1, n // 2), integer=integer, d=2)
    if shared:
        _, first, inverse = np.unique(Z, axis=0, return_index=True, return_inverse=True)
        losses = losses[first][inverse.reshape(-1)]
    cost = EmbeddingCost(Z)
    solver = DualSolver(kernel="numpy")
    eps = 0.1 * float(cost.column_block(0, n).mean())
    floor = None
    for t in range(rounds):
        if t:  # a later round: losses moved (by at most drift, or far), the floor rose, stayed or fell
            step = 1e3 * drift + 0.5 if t == jump else drift
            losses = losses + rng.uniform(-step, step, size=losses.shape)
            floor *= float(rng.choice([1.0, 1.0 + rng.random(), 0.5]))
        if near_ties:  # values apart by less than the tie tolerance (but not equal)
            losses = losses + rng.uniform(-1e-13, 1e-13, size=losses.shape) * np.abs(losses).max()
        problem = TransportProblem(losses, labels, cost, eps)
        red, layout = _layout_of(problem, solver)
        top, rep = red.reduce(problem.losses)
        tau = _dual_plan_tau(solver, problem)
        whole, _ = _dual_sparse_list(solver, layout, top, problem, tau, 0.0)
        # the slopes between consecutive candidates of a column: the hulls' breakpoints among them
        same = whole.cols[1:] == whole.cols[:-1]
        dC = np.diff(whole.C)[same]
        V_slopes = np.unique(np.diff(whole.R)[same][dC > 0] / dC[dC > 0])
        V_slopes = V_slopes[V_slopes > 0]
        if floor is None:
            if floor_share == "breakpoint" and V_slopes.size:  # entries tie at the floor itself
                floor = float(rng.choice(V_slopes))
            else:
                spread = float(np.ptp(top)) + 1.0
                floor = (0.3 if floor_share == "breakpoint" else floor_share) * spread / max(float(layout.C.max()), 1e-12)
        floored, _ = floored_candidates(layout, top, tau, floor)
        assert floored.floor == floor and floored.rows.size <= whole.rows.size
        whole_e = [breakpoint_eta(problem, whole)]
        etas = [floor, floor * (1 + 1e-12), 10 * floor + 1.0, *rng.uniform(floor, 4 * floor + 1, 5),
                *[e for e in whole_e + list(V_slopes) if e >= floor and np.isfinite(e)]]
        whole = dataclasses.replace(whole, expand=red.expander(rep))
        floored = dataclasses.replace(floored, expand=red.expander(rep))
        _evaluations_agree(problem, solver, whole, floored, etas)
        # the same without heads (the path taken where they would hold most of the lists)
        room = tau + 2.0**-50 * (float(np.abs(top).max()) + floor * layout.max_cost)
        unheaded, _ = _floored_whole_lists(layout, top.reshape(-1), tau, room, floor)
        _evaluations_agree(problem, solver, whole, dataclasses.replace(unheaded, expand=red.expander(rep)), etas)


def _dual_plan_tau(solver, problem):
    from budro.solvers._dual_plan import tie_margin

    return tie_margin(solver, problem)


def _dual_sparse_list(solver, layout, top, problem, tau, floor):
    from budro.solvers._dual_sparse import list_candidates

    return list_candidates(solver, layout, top, problem.n, problem.eps, tau, floor, compiled=False)


def test_numpy_lists_from_a_floor_in_a_fit_like_sequence_equal_fresh_solves_and_highs():
    """A warm numpy solver over rounds of slowly drifting losses with the budget shrinking (eta*
    rising, as in a fit), then raised (eta* below the floor: the fallback): candidates from a
    floor in most rounds, the heads carried in most of those, and every round's result that of a
    fresh solver (which has no floor), of the compiled kernel where numba is installed, and of
    HiGHS."""
    rng = np.random.default_rng(61)
    n = 160
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=110, integer=False, d=2)
    losses = losses + 0.3 * (Z**2).sum(axis=1, keepdims=True)
    cost = EmbeddingCost(Z)
    mean = float(cost.column_block(0, n).mean())
    warm = DualSolver(kernel="numpy")
    floors, below = [], []
    for t in range(30):
        eps = mean * (0.04 * 0.97**t if t < 26 else 0.3)  # (a tight budget, as German's: short heads)
        losses = losses + rng.uniform(-1e-4, 1e-4, size=losses.shape)
        problem = TransportProblem(losses, labels, cost, eps)
        res = warm.solve(problem)
        ref = DualSolver(kernel="numpy").solve(problem)
        assert res.eta == ref.eta and res.objective == ref.objective
        np.testing.assert_array_equal(res.weights, ref.weights)
        assert (res.plan != ref.plan).nnz == 0
        if _sparse_kernels.available():
            compiled = DualSolver(kernel="numba").solve(problem)
            assert compiled.eta == res.eta and compiled.objective == pytest.approx(res.objective, rel=1e-13)
            np.testing.assert_array_equal(compiled.weights, res.weights)
        if t % 5 == 0:
            assert_same_optimum(res, LPSolver().solve(problem))
        floors.append(res.info["floor"])
        below.append(res.info["below_floor"])
    heads = warm._reduction_cache.layout.heads
    assert sum(f > 0 for f in floors) >= 20 and heads.warm_rounds >= 10 and heads.anchors >= 2
    assert any(below[26:])  # the raised budget put eta* below the floor: made again without one


def test_whole_list_buffers_are_kept_up_to_their_limit_and_change_no_result(monkeypatch):
    """The whole lists' passes (a fit's first rounds, the floor far below eta*) reuse two buffers
    kept on the layout up to WHOLE_BUFFERS_MAX entries, and take fresh ones beyond it: the same
    results either way, round after round, as a fresh solver's."""
    from budro.solvers import _dual_sparse

    rng = np.random.default_rng(63)
    n = 90
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=60, integer=False, d=2)
    cost = EmbeddingCost(Z)
    eps = 0.05 * float(cost.column_block(0, n).mean())
    results = {}
    passes = []
    whole = _dual_sparse._floored_whole_lists
    monkeypatch.setattr(_dual_sparse, "_floored_whole_lists", lambda *a, **k: passes.append(1) or whole(*a, **k))
    for limit in (n * n, n * n - 1):  # kept (German's lists), fresh each pass
        monkeypatch.setattr(_dual_sparse, "WHOLE_BUFFERS_MAX", limit)
        passes.clear()
        solver, out = DualSolver(kernel="numpy"), []
        L = losses
        for t in range(6):
            L = L + rng.uniform(-1e-3, 1e-3, size=L.shape) if t else L
            problem = TransportProblem(L, labels, cost, eps)
            res = solver.solve(problem)
            ref = DualSolver(kernel="numpy").solve(problem)
            assert res.eta == ref.eta and res.objective == ref.objective
            np.testing.assert_array_equal(res.weights, ref.weights)
            out.append((res.eta, res.weights))
        assert len(passes) >= 2  # the first rounds read the whole lists
        layout = solver._reduction_cache.layout
        first, again = layout.whole_buffers(), layout.whole_buffers()
        assert (first[0] is again[0]) == (limit >= layout.rows.size)
        results[limit] = out
        rng = np.random.default_rng(63)
        losses, labels, Z = make_instance(rng, n, 2, n_distinct=60, integer=False, d=2)
    for (e1, w1), (e2, w2) in zip(results[n * n], results[n * n - 1]):
        assert e1 == e2
        np.testing.assert_array_equal(w1, w2)


def test_auto_prunes_complete_lists_in_numpy_until_numba_has_started(monkeypatch):
    """kernel="auto" on complete lists: numpy passes while numba has not started in the process
    (its start would cost more than a small problem's whole fit), the compiled kernel once it
    has; "numba" and "numpy" as asked.  Same result either way."""
    rng = np.random.default_rng(62)
    n = 120
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=80, integer=True)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.5)
    results = {}
    for started in (False, True):
        monkeypatch.setattr(_sparse_kernels, "started", lambda started=started: started)
        assert _dual_lists.compiled(DualSolver()) is (started and _sparse_kernels.available())
        assert _dual_lists.compiled(DualSolver(kernel="numpy")) is False
        results[started] = DualSolver().solve(problem)
    if _sparse_kernels.available():
        assert _dual_lists.compiled(DualSolver(kernel="numba")) is True
    assert results[False].eta == results[True].eta
    np.testing.assert_array_equal(results[False].weights, results[True].weights)
    assert results[False].objective == pytest.approx(results[True].objective, rel=1e-13)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_a_fit_on_complete_lists_is_the_same_with_either_kernel():
    """A BuDRO fit on a full problem with duplicated points (complete lists, floors and carried
    heads in numpy, warm lists in numba): the same weights every round, so the same trees and
    predictions to the bit."""
    from budro import BuDROClassifier

    rng = np.random.default_rng(63)
    n = 300
    X = rng.normal(size=(60, 4))[rng.integers(0, 60, size=n)]
    y = (X[:, 0] + 0.5 * rng.normal(size=n) > 0).astype(int)
    fits = {}
    for kernel in ("numpy", "numba"):
        clf = BuDROClassifier(backend="xgboost", backend_params={"max_depth": 2, "learning_rate": 0.05},
                              n_steps=25, eps=0.05, random_state=0, solver="dual",
                              solver_params={"kernel": kernel}).fit(X, y)
        fits[kernel] = clf
    np.testing.assert_array_equal(fits["numpy"].predict_proba(X), fits["numba"].predict_proba(X))
    layout = fits["numpy"].solver_._reduction_cache.layout
    assert layout.heads.anchors >= 1  # the numpy fit made candidates from a floor


def test_numpy_trial_floor_without_known_eta_falls_back_where_eta_is_zero():
    """With no eta* known yet the numpy path tries a floor far below any eta* measured
    (_dual_sparse.TRIAL_FLOOR); where eta* is 0 (an ample budget) it lies below the trial, the
    candidates are made again without a floor, and the next solves try none: every result equal
    to HiGHS's, the trial's solves to the same solves with every candidate."""
    from budro.solvers import _dual_sparse

    rng = np.random.default_rng(64)
    n = 120
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=90, integer=False, d=2)
    cost = EmbeddingCost(Z)
    C = cost.column_block(0, n)
    tight = TransportProblem(losses, labels, cost, 0.05 * float(C.mean()))
    res = DualSolver(kernel="numpy").solve(tight)  # a trial floor, below eta*: kept
    layout = _dual_lists.reduction(DualSolver(kernel="numpy"), tight).layout
    assert res.eta > 0 and res.info["floor"] == pytest.approx(_dual_sparse.trial_floor(layout, losses))
    assert not res.info["below_floor"]
    assert_same_optimum(res, LPSolver().solve(tight))
    ample = TransportProblem(losses, labels, cost, 2.0 * float(C.max()))
    solver = DualSolver(kernel="numpy")
    first = solver.solve(ample)
    assert first.eta == 0.0 and first.info["floor"] > 0.0 and first.info["below_floor"]
    second = solver.solve(ample)
    assert second.info["floor"] == 0.0  # resting after the miss
    for r in (first, second):
        assert_same_optimum(r, LPSolver().solve(ample))
        np.testing.assert_array_equal(r.weights, second.weights)
