"""The ``dual`` solver on sparse costs (:class:`NeighborCost`): an O(n m) path that must give exactly
what the dense path and the LP give on the same restricted problem (unlisted pairs at cost +inf).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro.exceptions import ValidationError
from budro.solvers import _sparse_kernels
from budro.solvers.dual import DualSolver
from budro.solvers.lp import LPSolver
from budro.transport import Cost, EmbeddingCost, NeighborCost, TransportProblem, TransportResult

#: The sparse path's two ways of pruning the lists; the compiled one where numba is installed.
KERNELS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')"))]

RTOL = 1e-9


class InfDenseCost(Cost):
    """The restricted problem as a dense matrix: listed pairs at their cost, the others at +inf."""

    is_dense = True

    def __init__(self, sparse: NeighborCost):
        self.n = sparse.n
        self.C = NeighborCost.column_block(sparse, 0, sparse.n)

    def column_block(self, start, stop):
        return self.C[:, start:stop]

    def entries(self, rows, cols):
        return self.C[np.asarray(rows), np.asarray(cols)]


class NoColumns(NeighborCost):
    """A sparse cost that refuses to build inf-filled columns (O(n) each)."""

    def column_block(self, start, stop):
        raise AssertionError("the sparse path must not read columns of a NeighborCost")


def make_sparse(rng, n, m, K=2, *, n_distinct=None, integer=True, shuffle=False):
    """Losses, labels and a random-list NeighborCost with duplicates (zero off-diagonal costs)."""
    n_distinct = n if n_distinct is None else max(1, min(n, n_distinct))
    if integer:
        base = rng.integers(-3, 4, size=(n_distinct, 2)).astype(float)
        losses = rng.integers(0, 4, size=(n, K)).astype(float)
    else:
        base = rng.normal(size=(n_distinct, 2))
        losses = np.logaddexp(0.0, rng.normal(size=(n, K)))
    Z = base[rng.integers(0, n_distinct, size=n)]
    labels = rng.integers(0, K, size=n)
    m = min(m, n)
    others = np.array([rng.permutation(np.delete(np.arange(n), j))[: m - 1] for j in range(n)]).reshape(n, m - 1)
    nb = np.column_stack([np.arange(n), others]).astype(np.intp)
    d = Z[nb] - Z[:, None, :]
    costs = np.einsum("ijk,ijk->ij", d, d)
    costs[:, 0] = 0.0
    if not shuffle:  # sorted as NeighborCost builds them; else in list order (from_lists allows it)
        order = np.argsort(costs[:, 1:], axis=1, kind="stable") + 1
        order = np.column_stack([np.zeros(n, dtype=np.intp), order])
        nb, costs = np.take_along_axis(nb, order, axis=1), np.take_along_axis(costs, order, axis=1)
    return losses, labels, NoColumns.from_lists(nb, costs)


def restricted_budgets(cost):
    listed = cost.neighbor_costs
    mean = float(listed.mean())
    return [0.0, 0.02 * mean, 0.3 * mean, 0.9 * mean, float(listed.max()) + 1.0]


def check_plan(problem, res):
    n = problem.n
    assert np.all(res.weights >= 0)
    np.testing.assert_allclose(res.weights.sum(axis=0), problem.label_shares, rtol=0, atol=1e-12)
    assert res.transport_cost <= problem.eps * (1 + 1e-12) + 1e-15
    plan = res.plan.tocsc()
    np.testing.assert_allclose(plan.sum(axis=0), np.full(n, 1.0 / n), rtol=0, atol=1e-14)
    per_column = np.diff(plan.indptr)
    assert res.plan.nnz <= n + 1 and np.sum(per_column == 2) <= 1
    assert abs(res.dual_objective - res.objective) <= RTOL * max(1.0, abs(res.objective))
    assert res.converged and res.info["certified"]
    # Only listed pairs carry mass.
    listed = np.zeros((n, n), dtype=bool)
    listed[problem.cost.neighbors, np.arange(n)[:, None]] = True
    assert np.all(listed[res.plan.nonzero()])
    # The reported objective, cost and weights are those of the plan.
    dense = res.plan.toarray()
    R = problem.column_losses()
    assert abs(float(np.sum(dense * R)) - res.objective) <= 1e-12 * max(1.0, abs(res.objective))
    assert res.plan.has_canonical_format
    by_label = np.stack([dense[:, problem.labels == k].sum(axis=1) for k in range(problem.n_labels)], axis=1)
    np.testing.assert_allclose(res.weights, by_label, rtol=0, atol=1e-15)
    Cd = NeighborCost.column_block(problem.cost, 0, n)
    moved = np.sum(dense * np.where(dense > 0, Cd, 0.0))
    assert abs(float(moved) - res.transport_cost) <= 1e-12 * max(1.0, problem.eps)


# ---------------------------------------------------------------------------- against LP and dense path


@pytest.mark.parametrize(("integer", "shuffle"), [(True, False), (False, False), (True, True)],
                         ids=["integer-ties", "continuous", "unsorted-lists"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_sparse_dual_matches_lp_and_dense_path(integer, shuffle, kernel):
    rng = np.random.default_rng(31 + integer + 2 * shuffle)
    for n, m in ((6, 2), (15, 4), (30, 6), (50, 12)):
        losses, labels, cost = make_sparse(rng, n, m, K=2 + (n % 2), n_distinct=(2 * n) // 3, integer=integer,
                                           shuffle=shuffle)
        dense_cost = InfDenseCost(cost)
        for eps in restricted_budgets(cost):
            sparse_problem = TransportProblem(losses, labels, cost, eps)
            dense_problem = TransportProblem(losses, labels, dense_cost, eps)
            sparse = DualSolver(kernel=kernel).solve(sparse_problem)
            dense = DualSolver().solve(dense_problem)
            lp = LPSolver().solve(dense_problem)
            assert sparse.info["sparse"] and not dense.info["sparse"]
            check_plan(sparse_problem, sparse)
            ref = lp.objective
            for res in (sparse, dense):
                assert abs(res.objective - ref) <= RTOL * max(1.0, abs(ref)), (res.solver, res.objective, ref)
            assert sparse.n_iter <= 3  # the breakpoints give eta* (nearly always at once)
            if not integer and eps > 0:  # a unique minimiser: the same eta*, and the same plan
                assert sparse.eta == pytest.approx(dense.eta, rel=1e-9, abs=1e-12)
                np.testing.assert_allclose(sparse.weights, dense.weights, rtol=0, atol=1e-12)


@st.composite
def sparse_problems(draw):
    n = draw(st.integers(1, 22))
    m = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # K = 2 and 4: the compiled kernel finds rows by a shift, K = 3 and 5 by a division
    losses, labels, cost = make_sparse(rng, n, m, K=draw(st.sampled_from([2, 3, 4, 5])),
                                       n_distinct=draw(st.integers(1, n)), integer=draw(st.booleans()),
                                       shuffle=draw(st.booleans()))
    listed = cost.neighbor_costs
    eps = draw(st.sampled_from([0.0, 1e-3, 0.05, 0.3, 0.7, 2.0])) * float(listed.mean() + listed.max()) / 2
    return TransportProblem(losses, labels, cost, eps)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=sparse_problems())
def test_property_sparse_equals_lp(problem):
    sparse = DualSolver(kernel="numpy").solve(problem)
    check_plan(problem, sparse)
    lp = LPSolver().solve(TransportProblem(problem.losses, problem.labels, InfDenseCost(problem.cost), problem.eps))
    assert abs(sparse.objective - lp.objective) <= RTOL * max(1.0, abs(lp.objective))


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=sparse_problems())
def test_property_compiled_kernel_gives_the_numpy_result(problem):
    # Same eta*, objective and weights (ties, duplicates, eps = 0 and non-binding budgets included),
    # and the compiled candidates reproduce the full argmax structure at the optimum too.
    a = DualSolver(kernel="numpy").solve(problem)
    b = DualSolver(kernel="numba").solve(problem)
    check_plan(problem, b)
    assert b.eta == pytest.approx(a.eta, rel=1e-12, abs=1e-15)
    assert abs(b.objective - a.objective) <= RTOL * max(1.0, abs(a.objective))
    np.testing.assert_allclose(b.weights.sum(axis=0), a.weights.sum(axis=0), rtol=0, atol=1e-12)
    lp = LPSolver().solve(TransportProblem(problem.losses, problem.labels, InfDenseCost(problem.cost), problem.eps))
    assert abs(b.objective - lp.objective) <= RTOL * max(1.0, abs(lp.objective))


def test_kernel_parameter_is_validated():
    with pytest.raises(ValidationError, match="kernel must be one of 'auto', 'numba', 'numpy'"):
        DualSolver(kernel="fortran")
    assert DualSolver(kernel="numpy").kernel == "numpy"
    with pytest.raises(ValidationError, match="kernel_threads must be an integer >= 1 or None"):
        DualSolver(kernel_threads=0)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
@pytest.mark.parametrize("threads", [1, 2, None])
def test_compiled_kernel_gives_the_same_result_on_any_thread_count(threads):
    import numba

    rng = np.random.default_rng(47)
    losses, labels, cost = make_sparse(rng, 300, 10, K=2, integer=True)
    problem = TransportProblem(losses, labels, cost, 0.2 * float(cost.neighbor_costs.mean()))
    before = numba.get_num_threads()
    ref = DualSolver(kernel="numpy").solve(problem)
    res = DualSolver(kernel="numba", kernel_threads=threads).solve(problem)
    assert numba.get_num_threads() == before  # restored
    assert res.eta == ref.eta and res.objective == pytest.approx(ref.objective, rel=1e-13)
    np.testing.assert_array_equal(res.weights, ref.weights)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_default_kernel_threads_follow_the_columns_and_the_available_cores(monkeypatch):
    """kernel_threads=None (the default): one thread per 10 000 columns, at most the cores the
    process may use (BUDRO_NUM_THREADS included) and numba's pool; every core for the full
    path's scans (columns=None); a count given by the user is kept (capped by numba's pool)."""
    import numba

    import budro._threads as threads

    assert DualSolver().kernel_threads is None
    pool = numba.config.NUMBA_NUM_THREADS
    monkeypatch.setattr(threads, "available_cores", lambda max_age=0.0: 8)
    assert _sparse_kernels.kernel_threads(None, 800) == 1  # German
    assert _sparse_kernels.kernel_threads(None, 4222) == 1  # COMPAS
    assert _sparse_kernels.kernel_threads(None, 36177) == min(3, pool)  # Adult
    assert _sparse_kernels.kernel_threads(None, 10**6) == min(8, pool)
    assert _sparse_kernels.kernel_threads(None, None) == min(8, pool)
    assert _sparse_kernels.kernel_threads(1, 10**6) == 1
    monkeypatch.undo()
    monkeypatch.setenv("BUDRO_NUM_THREADS", "1")
    assert _sparse_kernels.kernel_threads(None, 10**6) == 1
    assert _sparse_kernels.kernel_threads(None, None) == 1


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_default_kernel_threads_reach_the_kernel(monkeypatch):
    """A default solver on 20 000 columns runs the kernel on two threads where two cores are
    available, and gives the result of one thread bit for bit."""
    import numba

    import budro._threads as threads

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba's thread pool has one thread on this machine")
    rng = np.random.default_rng(48)
    losses, labels, cost = make_sparse(rng, 20000, 6, K=2, integer=True)
    problem = TransportProblem(losses, labels, cost, 0.2 * float(cost.neighbor_costs.mean()))
    ref = DualSolver(kernel="numba", kernel_threads=1).solve(problem)
    monkeypatch.setattr(threads, "available_cores", lambda max_age=0.0: 2)
    seen = []
    real = numba.set_num_threads
    monkeypatch.setattr(numba, "set_num_threads", lambda k: (seen.append(k), real(k))[1])
    res = DualSolver(kernel="numba").solve(problem)
    assert 2 in seen
    assert res.eta == ref.eta and res.objective == ref.objective
    np.testing.assert_array_equal(res.weights, ref.weights)


@pytest.mark.parametrize(("integer", "offset"), [(True, 0.0), (False, 0.0), (False, 1e4), (True, -3e5)],
                         ids=["integer-ties", "continuous", "large-losses", "large-negative-integer"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_pruned_pairs_reproduce_the_full_evaluation(integer, offset, kernel):
    # The pairs kept by dominance and hull pruning give exactly the argmax structure of a pass
    # over every listed pair (unlisted at +inf), at any eta, 0 and the breakpoints included.
    # Large offsets stress the float32 margins of the pruning scans (differences far below
    # float32 resolution must still be told apart, or kept).
    rng = np.random.default_rng(41 + integer)
    n, m = 120, 16
    losses, labels, cost = make_sparse(rng, n, m, K=2, n_distinct=50, integer=integer)
    losses = losses * (1e-3 if offset and not integer else 1.0) + offset
    dense_cost = InfDenseCost(cost)
    solver = DualSolver(kernel=kernel)
    sp_problem = TransportProblem(losses, labels, cost, 0.5)
    de_problem = TransportProblem(losses, labels, dense_cost, 0.5)
    cand, n_dominance = solver._sparse_candidates(sp_problem)
    assert cand.rows.size < n_dominance <= n * m
    if offset == 0.0:
        assert n_dominance < n * m  # the (float32) dominance scan bites too
    assert np.all(np.diff(cand.starts) >= 1)
    kinks = []
    for j in range(n):
        sl = slice(cand.starts[j], cand.starts[j + 1] if j + 1 < n else cand.rows.size)
        R, C = cand.R[sl], cand.C[sl]
        pos = np.diff(C) > 0
        kinks.extend((np.diff(R)[pos] / np.diff(C)[pos]).tolist())
    etas = [0.0, *rng.uniform(0, 3, 15), *rng.choice(np.abs(kinks), 15)]
    for eta in etas:
        full = solver._evaluate(de_problem, eta)
        part = solver._evaluate_candidates(sp_problem, cand, eta)
        for field in ("lo", "hi", "c_lo", "c_hi"):
            np.testing.assert_array_equal(getattr(part, field), getattr(full, field), err_msg=f"{field} at {eta}")
        assert part.value == pytest.approx(full.value, rel=1e-13, abs=1e-13)


@pytest.mark.parametrize("kernel", KERNELS)
def test_breakpoints_give_the_optimum_in_one_evaluation(kernel):
    rng = np.random.default_rng(43)
    n, m = 400, 12
    losses, labels, cost = make_sparse(rng, n, m, K=2, integer=False)
    for frac in (0.01, 0.1, 0.5):
        problem = TransportProblem(losses, labels, cost, frac * float(cost.neighbor_costs.mean()))
        res = DualSolver(kernel=kernel).solve(problem)
        assert res.n_iter == 1 and res.info["certified"] and res.eta > 0
        check_plan(problem, res)
        assert res.info["split_column"] is not None


def test_sparse_path_is_linear_in_n_m():
    # n = 20000 points, m = 8: the dense path would touch n^2 = 4e8 entries (3.2 GB of float64).
    rng = np.random.default_rng(44)
    n, m = 20000, 8
    Z = rng.normal(size=(n, 3))
    nb = np.column_stack([np.arange(n), rng.integers(0, n, size=(n, m - 1))])
    d = Z[nb] - Z[:, None, :]
    costs = np.einsum("ijk,ijk->ij", d, d)
    cost = NoColumns.from_lists(nb, costs)
    losses = np.logaddexp(0.0, rng.normal(size=(n, 2)))
    labels = rng.integers(0, 2, size=n)
    problem = TransportProblem(losses, labels, cost, 0.2)
    tracemalloc.start()
    try:
        res = DualSolver().solve(problem)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 60 * 8 * n * m, f"peak {peak / 2**20:.1f} MiB"
    assert res.info["certified"] and res.transport_cost <= problem.eps * (1 + 1e-12)
    assert abs(res.dual_objective - res.objective) <= RTOL * max(1.0, res.objective)


def test_layout_is_reused_across_rounds_and_rebuilt_for_new_labels_or_costs():
    rng = np.random.default_rng(45)
    n, m = 60, 6
    losses, labels, cost = make_sparse(rng, n, m, K=2, integer=False)
    solver = DualSolver()
    first = solver.solve(TransportProblem(losses, labels, cost, 0.3))
    layout = solver._layout_cache
    again = solver.solve(TransportProblem(losses * 1.1, labels, cost, 0.3))  # next round
    assert solver._layout_cache is layout
    assert again.objective == pytest.approx(DualSolver().solve(TransportProblem(losses * 1.1, labels, cost, 0.3)).objective)
    flipped = 1 - labels
    res = solver.solve(TransportProblem(losses, flipped, cost, 0.3))
    assert solver._layout_cache is not layout
    assert res.objective == pytest.approx(DualSolver().solve(TransportProblem(losses, flipped, cost, 0.3)).objective, rel=1e-12)
    _, _, other = make_sparse(rng, n, m, K=2, integer=False)
    res = solver.solve(TransportProblem(losses, labels, other, 0.3))
    assert res.objective == pytest.approx(DualSolver().solve(TransportProblem(losses, labels, other, 0.3)).objective, rel=1e-12)
    assert first.objective != res.objective
    import pickle

    assert pickle.loads(pickle.dumps(solver))._layout_cache is None  # scratch is not persisted


def test_neighbor_cost_from_embedding_matches_lp():
    rng = np.random.default_rng(46)
    n = 40
    Z = rng.integers(-2, 3, size=(n, 2)).astype(float)  # many exact duplicates
    losses = rng.integers(0, 4, size=(n, 2)).astype(float)
    labels = rng.integers(0, 2, size=n)
    cost = NeighborCost(Z, m=7)
    for eps in (0.0, 0.1, 0.5, 2.0):
        problem = TransportProblem(losses, labels, cost, eps)
        res = DualSolver().solve(problem)
        check_plan(problem, res)
        lp = LPSolver().solve(problem)
        assert abs(res.objective - lp.objective) <= RTOL * max(1.0, lp.objective)


def test_full_neighbor_lists_equal_the_dense_problem():
    # m = n: the restricted problem is the full one.
    rng = np.random.default_rng(47)
    n = 35
    Z = rng.normal(size=(n, 3))
    losses = np.logaddexp(0.0, rng.normal(size=(n, 2)))
    labels = rng.integers(0, 2, size=n)
    sparse, full = NeighborCost(Z, m=n), EmbeddingCost(Z)
    for eps in (0.05, 0.5):
        a = DualSolver().solve(TransportProblem(losses, labels, sparse, eps))
        b = DualSolver().solve(TransportProblem(losses, labels, full, eps))
        assert a.objective == pytest.approx(b.objective, rel=1e-12)
        assert a.eta == pytest.approx(b.eta, rel=1e-9)


def test_infinite_costs_in_a_generic_dense_cost_are_forbidden_at_eta_zero():
    # Not only NeighborCost: any cost object holding +inf forbids those pairs, also at eta = 0.
    rng = np.random.default_rng(48)
    losses, labels, cost = make_sparse(rng, 25, 4, K=2, n_distinct=15, integer=True)
    dense = InfDenseCost(cost)
    problem = TransportProblem(losses, labels, dense, float(cost.neighbor_costs.max()) + 1.0)  # eta* = 0
    res = DualSolver().solve(problem)
    assert res.eta == 0.0 and np.isfinite(res.transport_cost)
    assert res.objective == pytest.approx(LPSolver().solve(problem).objective, abs=1e-12)


# ---------------------------------------------------------------------------- renumbering by locality


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=sparse_problems(),
       kernel=st.sampled_from(["numpy", "numba"] if _sparse_kernels.available() else ["numpy"]))
def test_property_renumbered_solve_is_the_same_problem(problem, kernel):
    """From LOCALITY_MIN_N points the lists are solved renumbered (reverse Cuthill-McKee) and the
    plan numbered back: against the LP and the solve in the given numbering (ties, duplicates,
    eps = 0 included): the same objective, eta and certificate, a valid plan on listed pairs."""
    from unittest import mock

    from budro.solvers import _dual_sparse

    plain = DualSolver(kernel=kernel).solve(problem)
    with mock.patch.object(_dual_sparse, "LOCALITY_MIN_N", 1):
        solver = DualSolver(kernel=kernel)
        renumbered = solver.solve(problem)
    assert renumbered.info["renumbered"] and "renumbered" not in plain.info
    assert solver._locality_cache.cost.renumbered
    check_plan(problem, renumbered)
    assert abs(renumbered.objective - plain.objective) <= RTOL * max(1.0, abs(plain.objective))
    assert renumbered.eta == pytest.approx(plain.eta, rel=1e-9, abs=1e-12)
    lp = LPSolver().solve(TransportProblem(problem.losses, problem.labels, InfDenseCost(problem.cost), problem.eps))
    assert abs(renumbered.objective - lp.objective) <= RTOL * max(1.0, abs(lp.objective))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 7, 5000])
def test_renumbering_gather_equals_take(n, threads):
    """The rows gathered for a renumbered solve (the losses in, the weights back): the compiled
    gather on the kernel threads (from GATHER_PARALLEL_MIN rows; lowered here) and np.take give
    ``a[idx]`` exactly; below the threshold np.take, whatever the kernel."""
    from unittest import mock

    from budro.solvers import _dual_sparse

    rng = np.random.default_rng(n)
    a, idx = rng.normal(size=(n, 3)), rng.permutation(n)
    for kernel in ["numpy", "numba"] if _sparse_kernels.available() else ["numpy"]:
        solver = DualSolver(kernel=kernel, kernel_threads=threads)
        np.testing.assert_array_equal(_dual_sparse._rows(solver, a, idx), a[idx])
        with mock.patch.object(_dual_sparse, "GATHER_PARALLEL_MIN", 1):
            np.testing.assert_array_equal(_dual_sparse._rows(solver, a, idx), a[idx])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), m=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_locality_order_is_a_permutation_of_any_lists(n, m, seed):
    """The renumbering follows each point's own list (the graph as given, not symmetrised): still
    a permutation of every point, with inv its inverse, on lists that are not mutual, hold the
    point itself or repeat a point, and graphs of several components."""
    from budro.solvers._dual_sparse import locality_order

    rng = np.random.default_rng(seed)
    nb = rng.integers(0, max(1, n // 2), size=(n, m))  # the second half of the points is listed by nobody
    nb[:, 0] = np.arange(n)  # each point lists itself
    perm, inv = locality_order(nb)
    np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    np.testing.assert_array_equal(perm[inv], np.arange(n))


def test_renumbered_plan_is_numbered_back_when_read():
    """A renumbered solve's plan is numbered back on first access only, then kept: the same plan
    as numbered back at once (the inner plan mapped by the permutation), a TransportResult in
    every other way (dataclasses.replace, pickling before and after the access)."""
    import dataclasses
    import pickle
    from unittest import mock

    from budro.solvers import _dual_sparse

    rng = np.random.default_rng(12)
    losses, labels, cost = make_sparse(rng, 400, 6, K=2, integer=True)
    problem = TransportProblem(losses, labels, cost, 0.3 * float(cost.neighbor_costs.mean()))
    with mock.patch.object(_dual_sparse, "LOCALITY_MIN_N", 1):
        solver = DualSolver()
        res = solver.solve(problem)
    assert isinstance(res, TransportResult) and "_plan_source" in res.__dict__
    _, (inner, perm, inv, n) = res.__dict__["_plan_source"]
    assert "_plan_source" in inner.__dict__  # the inner plan is not built either
    expected = np.zeros((n, n))
    coo = inner.plan.tocoo()
    expected[perm[coo.row], perm[coo.col]] = coo.data
    copied = pickle.loads(pickle.dumps(res))  # before the access: carries the inner result
    plan = res.plan
    assert "_plan_source" not in res.__dict__ and res.plan is plan  # built once
    np.testing.assert_array_equal(plan.toarray(), expected)
    check_plan(problem, res)
    np.testing.assert_array_equal(copied.plan.toarray(), expected)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(res)).plan.toarray(), expected)
    replaced = dataclasses.replace(res, converged=False)
    assert not replaced.converged and replaced.plan is plan and replaced.objective == res.objective
    replaced = dataclasses.replace(res, plan=None)
    assert replaced.plan is None


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_compiled_plan_is_built_when_read_and_equals_the_numpy_kernels():
    """Either recovery's plan is built on first read only (a fit reads the weights), and the
    compiled one is the numpy one to the last bit."""
    rng = np.random.default_rng(13)
    losses, labels, cost = make_sparse(rng, 300, 7, K=2, integer=False)
    problem = TransportProblem(losses, labels, cost, 0.2 * float(cost.neighbor_costs.mean()))
    res = DualSolver(kernel="numba").solve(problem)
    ref = DualSolver(kernel="numpy").solve(problem)
    assert "_plan_source" in res.__dict__ and "_plan_source" in ref.__dict__
    np.testing.assert_array_equal(res.plan.toarray(), ref.plan.toarray())
    assert "_plan_source" not in res.__dict__ and "_plan_source" not in ref.__dict__
    np.testing.assert_array_equal(res.weights, ref.weights)


def test_renumbering_is_made_once_per_cost_and_keeps_the_warm_lists():
    """Rounds on one cost reuse the renumbered cost (and so the layout and its warm lists); a
    new cost object is renumbered again."""
    from unittest import mock

    from budro.solvers import _dual_sparse

    rng = np.random.default_rng(5)
    Z = rng.normal(size=(3000, 3))
    cost = NeighborCost(Z, 8)
    labels = rng.integers(0, 2, 3000)
    base = rng.normal(size=(3000, 2))
    with mock.patch.object(_dual_sparse, "LOCALITY_MIN_N", 1000):
        solver, plain_solver = DualSolver(), DualSolver()
        for t in range(6):
            problem = TransportProblem(np.logaddexp(0.0, base + 0.002 * t), labels, cost, 0.05)
            a, b = solver.solve(problem), plain_solver.solve(TransportProblem(problem.losses, labels,
                                                                             NeighborCost.from_lists(cost.neighbors, cost.neighbor_costs), 0.05))
            assert a.info["renumbered"] and a.objective == pytest.approx(b.objective, rel=1e-12)
            check_plan(problem, a)
            if t == 0:
                first = solver._locality_cache
            assert solver._locality_cache is first and solver._layout_cache.neighbors is first.cost.neighbors
        other = NeighborCost.from_lists(cost.neighbors.copy(), cost.neighbor_costs.copy())
        solver.solve(TransportProblem(problem.losses, labels, other, 0.05))
        assert solver._locality_cache is not first


# ---------------------------------------------------------------------------- preload (prepare)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_prepare_preloads_in_the_background_and_changes_no_result(monkeypatch):
    """DualSolver.prepare starts one background thread for a sparse fit (none for dense or full
    problems, or with the numpy kernel); the first solve waits for it; results equal a solver
    that was never prepared, bit for bit; the solver pickles without the thread."""
    import pickle
    import threading

    calls = []
    real = _sparse_kernels.preload
    gate = threading.Event()

    def slow_preload(threads, columns):
        calls.append(_sparse_kernels.kernel_threads(threads, columns))
        gate.wait(5)
        real(threads, columns)

    monkeypatch.setattr(_sparse_kernels, "preload", slow_preload)
    for bad in ("1000", -5, None, 2.5, True):
        with pytest.raises(ValidationError, match="prepare: n must be the number of points"):
            DualSolver().prepare(bad, sparse=True)
    DualSolver().prepare(1000, sparse=False)
    DualSolver(kernel="numpy").prepare(1000, sparse=True)
    assert calls == []
    solver = DualSolver()
    solver.prepare(1000, sparse=True)
    thread = solver._preload_thread
    assert thread.is_alive() and thread.daemon
    assert "_preload_thread" not in pickle.loads(pickle.dumps(solver)).__dict__
    rng = np.random.default_rng(49)
    losses, labels, cost = make_sparse(rng, 300, 8, K=2, integer=True)
    problem = TransportProblem(losses, labels, cost, 0.2 * float(cost.neighbor_costs.mean()))
    threading.Timer(0.2, gate.set).start()
    res = solver.solve(problem)
    assert not thread.is_alive() and "_preload_thread" not in solver.__dict__  # waited for, then forgotten
    assert calls == [1]  # 1000 columns: one thread
    ref = DualSolver().solve(problem)
    assert res.eta == ref.eta and res.objective == ref.objective
    np.testing.assert_array_equal(res.weights, ref.weights)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_preload_loads_the_kernels_a_sparse_solve_uses():
    """After preload, a sparse solve in a fresh process compiles or loads no kernel itself: every
    kernel it calls already has its compiled signature."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from budro.solvers import _sparse_kernels, _sparse_numba as k\n"
        "_sparse_kernels.preload(2, 25000)\n"
        "before = {name: len(getattr(k, name).signatures) for name in dir(k) if hasattr(getattr(k, name), 'signatures')}\n"
        "from budro.solvers.dual import DualSolver\n"
        "from budro.transport import NeighborCost, TransportProblem\n"
        "rng = np.random.default_rng(1)\n"
        "n, m = 25000, 6\n"
        "Z = rng.normal(size=(n, 3))\n"
        "cost = NeighborCost(Z, m)\n"
        "s = DualSolver()\n"
        "L = rng.random((n, 2)); y = rng.integers(0, 2, n)\n"
        "r = s.solve(TransportProblem(L, y, cost, 0.1))\n"
        "s.solve(TransportProblem(L + 0.01 * rng.random((n, 2)), y, cost, 0.1), eta0=r.eta)\n"
        "after = {name: len(getattr(k, name).signatures) for name in before}\n"
        "new = {name for name in before if after[name] > before[name]}\n"
        "assert not new, new\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_a_forked_child_solves_on_one_thread_after_a_parallel_parent():
    """numba's OpenMP layer terminates a forked child that starts a parallel region once the
    parent has used it: after a parallel solve, a fork's solves run the kernel on one thread
    (same result), even where the parent asked for two."""
    import multiprocessing
    import os
    import subprocess
    import sys

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    code = (
        "import multiprocessing as mp, numpy as np\n"
        "from budro.solvers import _sparse_kernels\n"
        "from budro.solvers.dual import DualSolver\n"
        "from budro.transport import NeighborCost, TransportProblem\n"
        "rng = np.random.default_rng(0); n = 3000\n"
        "cost = NeighborCost(rng.normal(size=(n, 3)), 6)\n"
        "p = TransportProblem(rng.random((n, 2)), rng.integers(0, 2, n), cost, 0.1)\n"
        "def solve():\n"
        "    return DualSolver(kernel='numba', kernel_threads=2).solve(p).objective, _sparse_kernels.kernel_threads(2, n)\n"
        "a, used = solve()\n"
        "assert _sparse_kernels._PARALLEL_PID is not None or used == 1\n"
        "with mp.get_context('fork').Pool(1) as pool:\n"
        "    b, child_threads = pool.apply_async(solve).get(timeout=60)\n"
        "assert b == a and child_threads == 1, (a, b, child_threads)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NUMBA_NUM_THREADS": "2"})
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: pip install -e '.[fast]'")
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(256, 900), integer=st.booleans())
def test_compiled_evaluation_is_the_same_on_two_threads(seed, n, integer):
    """g on candidate pairs by the parallel kernel (columns in chunks, the columns' terms summed
    in column order afterwards) equals the one-thread kernel's to the bit: the sum, and each
    column's argmax extremes (ties: integer losses and costs, equal costs on several rows)."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, n)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    size = int(counts.sum())
    rows = rng.integers(0, n, size)
    if integer:
        R, C = rng.integers(0, 4, size).astype(float), rng.integers(0, 3, size).astype(float)
    else:
        R, C = rng.random(size), rng.random(size)
    w = rng.integers(1, 3, n).astype(float)
    one = _sparse_kernels.evaluate(starts, rows, R, C, 0.7, 1e-12, 1.0, w, threads=1)
    two = _sparse_kernels.evaluate(starts, rows, R, C, 0.7, 1e-12, 1.0, w, threads=2)
    assert one[0] == two[0]
    for a, b in zip(one[1:], two[1:]):
        np.testing.assert_array_equal(a, b)


def test_renumbered_labels_follow_labels_that_change_between_solves():
    """The renumbered labels are reused while the labels stay equal, and follow them when they
    change (in place too): each solve equals a fresh solver's."""
    from unittest import mock

    from budro.solvers import _dual_sparse

    rng = np.random.default_rng(8)
    n = 60
    Z = rng.normal(size=(n, 2))
    cost = NeighborCost(Z, 6)
    labels = rng.integers(0, 2, n)
    losses = rng.random((n, 2))
    with mock.patch.object(_dual_sparse, "LOCALITY_MIN_N", 1):
        solver = DualSolver()
        for step in range(4):
            if step == 2:
                labels[:10] = 1 - labels[:10]  # in place: the same array object
            if step == 3:
                labels = labels.copy()
                labels[20:30] = 1 - labels[20:30]
            problem = TransportProblem(losses, labels, cost, 0.1)
            got, fresh = solver.solve(problem), DualSolver().solve(problem)
            assert got.info["renumbered"]
            assert got.objective == pytest.approx(fresh.objective, rel=1e-12)
            np.testing.assert_allclose(got.weights, fresh.weights, atol=1e-12)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: pip install -e '.[fast]'")
def test_renumbering_row_gather_on_two_threads_equals_take():
    """The renumbered solve's row gathers (losses in, weights out) on the kernel threads equal
    np.take; on one thread they are np.take."""
    from budro.solvers._dual_sparse import _rows

    rng = np.random.default_rng(9)
    a = rng.normal(size=(5000, 3))
    idx = rng.permutation(5000)
    for threads in (1, 2):
        np.testing.assert_array_equal(_rows(DualSolver(kernel_threads=threads), a, idx), np.take(a, idx, axis=0))
