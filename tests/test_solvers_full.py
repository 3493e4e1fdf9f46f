"""The exact full-problem path of the dual solver (budro.solvers._dual_full) on embedding costs.

Every result must be the full problem's optimum (HiGHS, and the dense path of the same solver, to
1e-9 relative), round after round as the losses drift and the lists carried between rounds go
stale; certificate failures must rescan; a budget stop must report a gap that bounds the distance
to the full optimum.  Instances have tied (integer) losses and duplicated points.
"""

from __future__ import annotations

import pickle
from types import SimpleNamespace
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro.exceptions import ConvergenceWarning, ValidationError
from budro.solvers import _dual_full, _dual_plan, _sparse_kernels
from budro.solvers._dual_plan import _upper_hulls
from budro.solvers.dual import DualSolver
from budro.solvers.lp import LPSolver
from budro.testing import check_solver
from budro.transport import EmbeddingCost, TransportProblem

from test_solvers_exact import make_instance

RTOL = 1e-9
KERNELS = ["numpy"] + (["numba"] if _sparse_kernels.available() else [])


class FullPathSolver(DualSolver):
    """DualSolver with every embedding cost on the full path (small problems otherwise take the
    complete-list path of budro.solvers._dual_lists)."""

    def _solve(self, problem, *, eta0=None):
        if isinstance(problem.cost, EmbeddingCost):
            return _dual_full.solve(self, problem, eta0=eta0)
        return super()._solve(problem, eta0=eta0)


def dense(problem):
    return DualSolver(full_min_n=None, max_dense_n=None).solve(problem)


def _plain_state(n, K, labels, ptr, flat, C):
    """The list fields of a full-path state (packed lists given by ``ptr``) in a plain namespace,
    as _commit reads and writes them."""
    return SimpleNamespace(n=n, K=K, labels=labels, lo=ptr[:-1].copy(), hi=ptr[1:].copy(), slot=np.diff(ptr),
                           end=int(ptr[-1]), packed=True, flat=flat, C=C, X=np.zeros((n, 2, 2)),
                           mask=np.zeros(n, dtype=np.int64), mu=np.zeros(n), anchor_of=np.zeros(n, dtype=np.int64))


def _listed(state):
    """(flat, C) of every listed pair, column by column."""
    return _dual_full._packed(state)[1:]


def _assert_lists(st, expected):
    """Each column's list in the pool is ``expected[j]`` (flat, C); the columns' slots lie within
    the used pool, disjoint, each holding its list."""
    for j, (flat, C) in expected.items():
        np.testing.assert_array_equal(st.flat[st.lo[j]:st.hi[j]], flat)
        np.testing.assert_array_equal(st.C[st.lo[j]:st.hi[j]], C)
    assert (st.hi - st.lo <= st.slot).all() and (st.lo >= 0).all() and (st.lo + st.slot <= st.end).all()
    assert st.end <= st.flat.size == st.C.size
    order = np.argsort(st.lo, kind="stable")
    assert (st.lo[order][1:] >= (st.lo + st.slot)[order][:-1]).all()  # disjoint slots
    ptr, flat, C = _dual_full._packed(st)
    for j, (f, c) in expected.items():
        np.testing.assert_array_equal(flat[ptr[j]:ptr[j + 1]], f)
        np.testing.assert_array_equal(C[ptr[j]:ptr[j + 1]], c)


def assert_optimal(res, ref, problem):
    scale = max(1.0, abs(ref.objective))
    assert abs(res.objective - ref.objective) <= RTOL * scale, (res.objective, ref.objective)
    assert abs(res.dual_objective - ref.objective) <= RTOL * scale
    assert res.transport_cost <= problem.eps * (1 + 1e-12) + 1e-14
    assert res.converged and res.info["uncertified_columns"] == 0
    np.testing.assert_allclose(res.weights.sum(axis=0), problem.label_shares, atol=1e-12)


@pytest.mark.parametrize("kernel", KERNELS)
def test_equal_to_highs_and_dense_over_drifting_rounds(kernel):
    rng = np.random.default_rng(0)
    losses, labels, Z = make_instance(rng, 36, 2, n_distinct=12)
    cost = EmbeddingCost(Z, cache_bytes=0)
    solver = FullPathSolver(kernel=kernel)
    mean_cost = float(cost.column_block(0, 36).mean())
    for t in range(8):
        losses = losses + rng.integers(-1, 2, size=losses.shape) * 0.25  # ties stay exact
        eps = [0.0, 0.1, 0.3, 0.8][t % 4] * mean_cost
        problem = TransportProblem(losses, labels, cost, eps)
        res = solver.solve(problem)
        lp = LPSolver().solve(problem)
        assert_optimal(res, lp, problem)
        assert_optimal(res, dense(problem), problem)


def _drifting(seed: int, n: int, f0: bool = False):
    """A fit-like sequence: labels, an embedding cost with duplicated points, and the losses of
    round t (``losses(t)``: a start drifting by 0.004 t along a random direction; ``f0``: the
    start takes two losses per label, as a fit's first model (a shallow tree) gives few values;
    with one loss per label staying put would be optimal, certified without a scan)."""
    rng = np.random.default_rng(seed)
    _, labels, Z = make_instance(rng, n, 2, integer=False, d=4)
    Z[10:30] = Z[0]  # duplicates
    direction = rng.normal(size=(n, 2))
    if f0:
        base = np.tile(np.logaddexp(0.0, [0.3, -0.3]), (n, 1))
        base[Z[:, 0] > 0.0] += [0.02, -0.02]  # the tree's two leaves
    else:
        base = np.logaddexp(0.0, rng.normal(size=(n, 2)))
    return labels, EmbeddingCost(Z, cache_bytes=0), lambda t: base + 0.004 * t * direction


@pytest.mark.parametrize("kernel", KERNELS)
def test_smooth_drift_keeps_lists_and_stays_exact(kernel):
    """Losses drifting like a boosting fit's: later rounds rescan few columns, each result exact."""
    n = 400
    labels, cost, losses = _drifting(1, n)
    solver = FullPathSolver(kernel=kernel)
    rescans = []
    for t in range(10):
        problem = TransportProblem(losses(t), labels, cost, 0.4)
        res = solver.solve(problem)
        assert_optimal(res, dense(problem), problem)
        rescans.append(res.info["rescanned_columns"])
    assert rescans[0] == n  # the cold solve scans every column once
    assert res.info["full_passes"] < 0.5 and sum(rescans[1:]) < 2 * n
    assert solver._full_state.anchors  # the warm state is on the solver


@pytest.mark.parametrize("kernel", KERNELS)
def test_first_solve_of_a_fit_keeps_lists_for_the_drift_ahead_and_stays_exact(kernel):
    """After DualSolver.prepare (a fit's rounds follow) the first solve's drift allowance is
    _COLD_SPREADS loss spreads instead of the minimum (Adult's exact-full fit: round 1 then
    rescans half the columns instead of all), and every round is exact all the same."""
    n = 300
    labels, cost, losses = _drifting(5, n, f0=True)
    rescans = {}
    for ahead in (False, True):
        solver = FullPathSolver(kernel=kernel)
        if ahead:
            solver.prepare(n, sparse=False)
        rescans[ahead] = []
        for t in range(4):
            problem = TransportProblem(losses(t), labels, cost, 0.4)
            res = solver.solve(problem)
            assert_optimal(res, dense(problem), problem)
            if t == 0:
                spread = float(np.ptp(problem.losses))
                assert res.info["delta"] == pytest.approx(
                    _dual_full._COLD_SPREADS * spread if ahead else _dual_full._DELTA_MIN * spread)
            rescans[ahead].append(res.info["rescanned_columns"])
    assert rescans[True][0] == rescans[False][0] == n  # the cold solve scans every column once


@pytest.mark.parametrize("kernel", KERNELS)
def test_small_member_cap_shrinks_the_allowance_and_stays_exact(kernel, monkeypatch):
    """Past _KMAX members a column's drift allowance (and hull margin) is divided by 4, 16, 64:
    shorter-lived certificates, more rescans, the same optimum."""
    monkeypatch.setattr(_dual_full, "_KMAX", 3)
    rng = np.random.default_rng(11)
    n = 200
    _, labels, Z = make_instance(rng, n, 2, integer=False, d=2)
    cost = EmbeddingCost(Z, cache_bytes=0)
    base = 0.7 + 0.05 * rng.random((n, 2))  # nearly tied losses: many members
    direction = rng.normal(size=(n, 2))
    solver = FullPathSolver(kernel=kernel)
    for t in range(5):
        problem = TransportProblem(base + 0.003 * t * direction, labels, cost, 0.3)
        assert_optimal(solver.solve(problem), dense(problem), problem)
    mus = solver._full_state.mu
    assert np.unique(np.round(mus[mus > 0], 12)).size >= 2  # several allowance levels were used


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), steps=st.lists(st.floats(-0.3, 0.3), min_size=2, max_size=5),
       frac=st.sampled_from([0.0, 0.05, 0.3, 1.0]))
def test_any_drift_sequence_gives_the_dense_optimum(seed, steps, frac):
    rng = np.random.default_rng(seed)
    n = 40
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=15)
    cost = EmbeddingCost(Z, cache_bytes=0)
    eps = frac * float(cost.column_block(0, n).mean())
    solver = FullPathSolver()
    for s in steps:
        losses = losses + s * rng.integers(0, 3, size=losses.shape)
        problem = TransportProblem(losses, labels, cost, eps)
        assert_optimal(solver.solve(problem), dense(problem), problem)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_floor_follows_rising_eta_and_falls_back_when_eta_drops(kernel):
    """The compiled list kernel of a warm solve is exact from a floor under the last eta* (the
    budget shrinking here, so eta* rises as in a fit); a solve whose eta* falls below its floor
    (the budget raised) runs the kernel again without one and the next _FLOOR_REST solves use
    none.  Every result is the dense optimum."""
    n = 300
    labels, cost, losses = _drifting(3, n)
    solver = FullPathSolver(kernel=kernel)
    mean_cost = float(cost.column_block(0, n).mean())
    eps = [0.3 * mean_cost * 0.8**t for t in range(6)] + [0.6 * mean_cost] + [0.5 * mean_cost] * 3
    floors, below, etas = [], [], []
    for t, e in enumerate(eps):
        problem = TransportProblem(losses(t), labels, cost, e)
        res = solver.solve(problem)
        assert_optimal(res, dense(problem), problem)
        floors.append(res.info["floor"])
        below.append(res.info["below_floor"])
        etas.append(res.eta)
    if kernel == "numpy":
        assert floors == [0.0] * len(eps) and not any(below)
        return
    assert all(np.diff(etas[:6]) > 0)
    assert floors[:2] == [0.0, 0.0] and all(f > 0.0 for f in floors[2:7])  # two certified eta* needed
    assert floors[5] == pytest.approx(_dual_plan.EtaFloor.SHARE * etas[3]) and not any(below[:6])
    assert etas[6] < floors[6] and below[6]  # the budget raised: eta* under the floor, the fallback
    assert floors[7:] == [0.0] * 3  # no floor for the next solves


def _complete_lists(losses, labels, cost):
    """Every column's complete list in increasing cost (flat index into the losses, cost, ptr)."""
    n, K = losses.shape
    C = cost.column_block(0, n)
    order = np.argsort(C, axis=0, kind="stable")
    flat = order.T * K + labels[:, None]
    return flat.reshape(-1), np.take_along_axis(C, order, axis=0).T.reshape(-1), np.arange(n + 1) * n


def _argmax_sets(out, n, eta):
    """Each column's largest candidate value at ``eta`` and its argmax rows, from the list
    kernel's output."""
    rows, cols, R, C = out[:4]
    value = R - eta * C
    best = np.full(n, -np.inf)
    np.maximum.at(best, cols, value)
    at = value == best[cols]
    return best, {(int(c), int(r)) for c, r in zip(cols[at], rows[at])}


def _kernel_instance(seed, integer, share, rising, K):
    """48 points with ties and duplicates, their complete lists, a floor scaled by ``share``, and
    ``run(floor, ceiling)``: the list kernel's output on them (copies)."""
    rng = np.random.default_rng(seed)
    n = 48
    losses, labels, Z = make_instance(rng, n, K, integer=integer, n_distinct=16)
    cost = EmbeddingCost(Z, cache_bytes=0)
    if rising:  # losses that rise along the columns' lists: far costs carry the larger losses
        losses = losses + 0.25 * (Z**2).sum(axis=1, keepdims=True)
    flat, C, ptr = _complete_lists(losses, labels, cost)
    lf = losses.reshape(-1)

    def run(floor, ceiling=np.inf):
        out = _sparse_kernels.sparse_candidates(labels, K, C, flat, lf, 1e-9, np.ones(n), threads=1, ptr=ptr,
                                                width=n, floor=floor, ceiling=ceiling)
        return tuple(np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in out)

    return n, run, share * float(np.ptp(losses) + 1.0) / float(C.mean() + 1.0)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), integer=st.booleans(), share=st.sampled_from([0.05, 0.3, 1.0, 3.0]),
       rising=st.booleans(), K=st.sampled_from([2, 3]))
def test_list_kernel_with_a_floor_keeps_every_argmax_above_it(seed, integer, share, rising, K):
    """The list kernel with a floor keeps, at every eta >= floor, each column's largest value and
    all its argmax rows (exact ties included: integer losses and costs, duplicated points), and
    the hull edges above the floor; it keeps no more pairs than the kernel without one where the
    losses rise with the cost (as along a fit's lists)."""
    n, run, floor = _kernel_instance(seed, integer, share, rising, K)
    outs = {f: run(f) for f in (0.0, floor)}
    e0 = outs[0.0][5]
    probes = [floor, floor * (1 + 1e-12), 1.5 * floor, 4.0 * floor] + sorted(set(e0[e0 >= floor].tolist()))[:20]
    for eta in probes:
        b0, s0 = _argmax_sets(outs[0.0], n, eta)
        b1, s1 = _argmax_sets(outs[floor], n, eta)
        np.testing.assert_array_equal(b1, b0)
        assert s1 == s0, eta
    # the edges above the floor: the same breakpoints with the same cost drops
    above = {f: sorted(zip(outs[f][5][outs[f][5] > floor].tolist(), outs[f][6][outs[f][5] > floor].tolist()))
             for f in outs}
    assert above[floor] == above[0.0]
    if rising:
        assert outs[floor][4] <= outs[0.0][4]  # kept by dominance


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), integer=st.booleans(), share=st.sampled_from([0.05, 0.3, 1.0, 3.0]),
       width=st.sampled_from([0.0, 1e-12, 0.02, 0.5, 4.0]), rising=st.booleans(), K=st.sampled_from([2, 3]))
def test_list_kernel_with_a_window_keeps_every_argmax_inside_it(seed, integer, share, width, rising, K):
    """The list kernel with a floor and a ceiling keeps, at every eta in [floor, ceiling], each
    column's largest value and all its argmax rows (exact ties included: integer losses and
    costs, duplicated points), each column's largest hull cost and the hull edges inside the
    window, and no more pairs than with the floor alone."""
    n, run, floor = _kernel_instance(seed, integer, share, rising, K)
    ceiling = floor * (1.0 + width)
    outs = {c: run(floor, c) for c in (np.inf, ceiling)}
    e0 = outs[np.inf][5]
    inside = sorted(set(e0[(e0 >= floor) & (e0 <= ceiling)].tolist()))[:20]
    for eta in [floor, floor * (1 + 1e-13), 0.5 * (floor + ceiling), ceiling * (1 - 1e-13), ceiling] + inside:
        if not floor <= eta <= ceiling:
            continue
        b0, s0 = _argmax_sets(outs[np.inf], n, eta)
        b1, s1 = _argmax_sets(outs[ceiling], n, eta)
        np.testing.assert_array_equal(b1, b0)
        assert s1 == s0, eta
    np.testing.assert_array_equal(outs[ceiling][7], outs[np.inf][7])  # each column's largest hull cost
    # the edges inside the window: the same breakpoints with the same cost drops
    within = {c: sorted(zip(outs[c][5][(outs[c][5] >= floor) & (outs[c][5] <= ceiling)].tolist(),
                            outs[c][6][(outs[c][5] >= floor) & (outs[c][5] <= ceiling)].tolist())) for c in outs}
    assert within[ceiling] == within[np.inf]
    assert outs[ceiling][0].size <= outs[np.inf][0].size and outs[ceiling][4] <= outs[np.inf][4]


@pytest.mark.parametrize("kernel", KERNELS)
def test_failed_certificates_are_rescanned(kernel):
    """A jump in the losses breaks the excluded bounds (X) of some columns and the hull margin of
    others: exactly those are rescanned and the result is exact."""
    rng = np.random.default_rng(2)
    n = 300
    losses, labels, Z = make_instance(rng, n, 2, integer=False, d=3)
    cost = EmbeddingCost(Z, cache_bytes=0)
    solver = FullPathSolver(kernel=kernel)
    p0 = TransportProblem(losses, labels, cost, 0.3)
    solver.solve(p0)
    state = solver._full_state
    ok, _ = _dual_full._certify(solver, state, p0, _dual_full.evaluate(solver, p0, solver.solve(p0).eta))
    assert ok.all()
    # raise the losses of a few rows that no list holds, far enough to beat everything
    listed = np.zeros(n, dtype=bool)
    listed[_listed(state)[0] // state.K] = True
    lifted = np.flatnonzero(~listed)[:3]
    assert lifted.size
    jumped = losses.copy()
    jumped[lifted] += 5.0
    p1 = TransportProblem(jumped, labels, cost, 0.3)
    point = _dual_full._minimise(solver, p1, _dual_full._candidates(solver, state, p1))[0]
    ok, upper = _dual_full._certify(solver, state, p1, point)
    assert not ok.all()
    assert np.all(upper[~ok] >= jumped[lifted].max() - 1e-9 - point.eta * 100)  # bounds see the jump
    res = solver.solve(p1)
    assert res.info["rescanned_columns"] >= int((~ok).sum())
    assert_optimal(res, dense(p1), p1)
    # lower the losses of listed hull rows: pruned pairs may now compete (hull certificate)
    solver = FullPathSolver(kernel=kernel)
    solver.solve(p0)
    state = solver._full_state
    assert np.any(state.mask != 0)  # some columns hold hull-pruned pairs
    fallen = losses.copy()
    flat, C = _listed(state)
    fallen[(flat // state.K)[C > 0][:50]] -= 3.0
    p2 = TransportProblem(fallen, labels, cost, 0.3)
    point = _dual_full._minimise(solver, p2, _dual_full._candidates(solver, state, p2))[0]
    _dual_full._certify(solver, state, p2, point)
    assert state.last_failures[1] > 0  # the hull margin no longer certifies some columns
    assert_optimal(solver.solve(p2), dense(p2), p2)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
def test_numba_and_numpy_scans_agree():
    rng = np.random.default_rng(3)
    n = 200
    losses, labels, Z = make_instance(rng, n, 2, integer=False, d=3)  # no exact ties at a membership threshold
    Z[:20] = Z[20:40]
    cost = EmbeddingCost(Z, cache_bytes=0)
    problem = TransportProblem(losses, labels, cost, 0.2)
    outs = []
    for k in ("numba", "numpy"):
        solver = FullPathSolver(kernel=k)
        st_ = _dual_full._state(solver, problem)
        st_.gid = (np.arange(n) % 3).astype(np.int8)
        E, q_lo, q_hi = _dual_full._grid(0.7, 0.2, 1.0)
        cols = np.arange(0, n, 3)
        outs.append(_dual_full._scan_block(solver, st_, losses, cols, E, q_lo, q_hi, 0.5, 0.5))
    (r1, C1, R1, n1, X1, m1, mu1), (r2, C2, R2, n2, X2, m2, mu2) = outs
    np.testing.assert_array_equal(mu1, mu2)  # the same drift allowance per column
    # the same members, the same excluded bounds (the kernel's vectorised arithmetic may differ
    # in the last bit)
    np.testing.assert_allclose(X1, X2, rtol=1e-13, atol=1e-13)
    # The lists may differ in pairs pruned by the margin (the kernel's stack and numpy's passes
    # drop different ones, each certified), never in the exact hull (tau = 0) of each column.
    hulls = []
    for rows, C, R, counts in ((r1, C1, R1, n1), (r2, C2, R2, n2)):
        loc = np.repeat(np.arange(counts.size), counts)
        _, hc, hR, hC = _upper_hulls(rows, loc, R, C, 0.0, counts.size)
        hulls.append(np.unique(np.column_stack([hc, hC, hR]), axis=0))
    assert hulls[0].shape == hulls[1].shape
    np.testing.assert_allclose(hulls[0], hulls[1], rtol=1e-12, atol=1e-12)  # costs: last bits of a dot


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
@pytest.mark.parametrize("points, integer", [(6, False), (9, True), (14, False)])
def test_numba_and_numpy_scans_agree_on_any_grid(points, integer):
    """The compiled scan of a grid other than the standard one (its maxima and member tests four
    grid points per pass, the last pass padded where fewer are left) keeps the members numpy's
    scan keeps: the excluded bounds, each group's maximum over its rows that are not members,
    equal numpy's at every grid point (continuous losses: another member set would change them)."""
    rng = np.random.default_rng(points)
    n = 300
    losses, labels, Z = make_instance(rng, n, 2, integer=integer, d=3)
    Z[:30] = Z[30:60]
    problem = TransportProblem(losses, labels, EmbeddingCost(Z, cache_bytes=0), 0.2)
    E = 0.5 * np.concatenate(([0.0], np.geomspace(1e-2, 1e2, points - 1)))
    cols = np.arange(0, n, 5)
    X = []
    for k in ("numba", "numpy"):
        solver = FullPathSolver(kernel=k)
        st_ = _dual_full._state(solver, problem)
        st_.gid = (np.arange(n) % 7).astype(np.int8)
        X.append(_dual_full._scan_block(solver, st_, losses, cols, E, 1, points - 1, 0.01, 0.01)[4])
    assert (X[1][:, :7] > _dual_full._NONE).mean() > 0.9  # most of the 7 groups have rows left out
    np.testing.assert_allclose(X[0], X[1], rtol=1e-13, atol=1e-13)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
@pytest.mark.parametrize("seed, integer", [(0, False), (1, True)])
def test_scan_passing_over_units_keeps_the_lists_and_bounds_the_rest(seed, integer, monkeypatch):
    """The compiled scan passes over units of rows whose largest loss is _SKIP allowances below
    the column's own loss (none can be a member): the same members, lists, masks and allowances
    as the scan that reads every row (_SKIP = 0), and excluded bounds that are upper bounds of
    its bounds (a passed-over unit counts at its largest loss), the same where no unit of the
    group was passed over.  Tied (integer) losses and duplicated points; units of 16 rows so
    that a group has several; a member cap that shrinks some allowances."""
    monkeypatch.setattr(_dual_full, "_UNIT", 16)
    rng = np.random.default_rng(seed)
    n = 600
    losses, labels, Z = make_instance(rng, n, 2, integer=integer, d=3)
    losses = losses * 3.0  # a spread of losses far wider than the allowance
    Z[:60] = Z[60:120]
    cost = EmbeddingCost(Z, cache_bytes=0)
    problem = TransportProblem(losses, labels, cost, 0.2)
    delta = 0.05
    monkeypatch.setattr(_dual_full, "_KMAX", 1)
    cols = np.arange(0, n, 7)
    outs = []
    for skip in (0.0, 2.0):
        monkeypatch.setattr(_dual_full, "_SKIP", skip)
        solver = FullPathSolver(kernel="numba")
        st_ = _dual_full._state(solver, problem)
        st_.gid = _dual_full._level_groups(losses)
        E, q_lo, q_hi = _dual_full._grid(0.7, 0.2, 1.0)
        outs.append(_dual_full._scan_block(solver, st_, losses, cols, E, q_lo, q_hi, delta, delta))
    # the units passed over, from the kernel's own inputs
    ustart, gunit, UM = st_.losses_t[4:]
    own = losses[cols, labels[cols]]
    skipped = UM[labels[cols]] < (own - 2.0 * delta)[:, None]  # (columns, units)
    ugroup = np.repeat(np.arange(gunit.size - 1), np.diff(gunit))
    assert skipped.mean() > 0.1  # the case exercises the pass-over
    (r1, C1, R1, n1, X1, m1, mu1), (r2, C2, R2, n2, X2, m2, mu2) = outs
    for x, y in ((r1, r2), (C1, C2), (R1, R2), (n1, n2), (m1, m2), (mu1, mu2)):
        np.testing.assert_array_equal(x, y)
    assert (mu1 < delta).any()  # the cap shrank some allowances
    assert (X2 >= X1).all()  # bounds of the bounds
    touched = np.zeros(X1.shape[:2], dtype=bool)  # (column, group) with a unit passed over
    for t in range(cols.size):
        touched[t, np.unique(ugroup[skipped[t]])] = True
    np.testing.assert_array_equal(X2[~touched], X1[~touched])
    assert (X2[touched] > X1[touched] + 1e-9).any()
    group_top = np.full((_dual_full._GROUPS, 2), -np.inf)
    np.maximum.at(group_top, st_.gid, losses)
    assert (X2 <= group_top[:, labels[cols]].T[:, :, None]).all()  # never above the group's largest loss


def test_budget_stop_reports_a_gap_that_bounds_the_full_optimum():
    rng = np.random.default_rng(4)
    n = 250
    losses, labels, Z = make_instance(rng, n, 2, integer=False, d=3)
    cost = EmbeddingCost(Z, cache_bytes=0)
    problem = TransportProblem(losses, labels, cost, 0.3)
    optimum = dense(problem).objective
    for solver in (FullPathSolver(max_seconds=1e-9), FullPathSolver(max_pairs=n + 5)):
        with pytest.warns(ConvergenceWarning, match="stopped at its budget max_(seconds|pairs)=.*below the optimum.*"
                                                    "raise max_(seconds|pairs)"):
            res = solver.solve(problem)
        assert not res.converged and res.info["budget_stop"] in ("max_seconds", "max_pairs")
        assert res.info["uncertified_columns"] > 0
        assert res.transport_cost <= problem.eps * (1 + 1e-12)
        assert res.objective <= optimum + 1e-12
        assert res.dual_objective >= optimum - 1e-12  # a certified upper bound on the FULL optimum
        assert res.gap >= optimum - res.objective - 1e-12
    # a budget that lets the rescans finish gives the exact optimum
    res = FullPathSolver(max_seconds=60.0, max_pairs=10**7).solve(problem)
    assert abs(res.objective - optimum) <= RTOL * max(1.0, optimum) and res.converged


def test_partial_budget_after_a_warm_round():
    """Stopped in a warm round: the gap still bounds the full optimum."""
    rng = np.random.default_rng(5)
    n = 300
    losses, labels, Z = make_instance(rng, n, 2, integer=False, d=3)
    cost = EmbeddingCost(Z, cache_bytes=0)
    solver = FullPathSolver()
    solver.solve(TransportProblem(losses, labels, cost, 0.3))
    solver.max_pairs = solver._full_state.live  # no room to rescan anything
    jumped = losses + rng.normal(size=losses.shape)
    problem = TransportProblem(jumped, labels, cost, 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = solver.solve(problem)
    optimum = dense(problem).objective
    assert res.objective <= optimum + 1e-12 <= res.dual_objective + 2e-12
    if not res.converged:
        assert res.info["budget_stop"] == "max_pairs"


def test_eps_zero_and_all_identical():
    rng = np.random.default_rng(6)
    losses, labels, Z = make_instance(rng, 50, 2, n_distinct=8)
    for Zx in (Z, np.zeros_like(Z)):
        problem = TransportProblem(losses, labels, EmbeddingCost(Zx, cache_bytes=0), 0.0)
        assert_optimal(FullPathSolver().solve(problem), dense(problem), problem)


def test_evaluate_is_exact_at_any_eta():
    rng = np.random.default_rng(7)
    n = 120
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=50)
    cost = EmbeddingCost(Z, cache_bytes=0)
    problem = TransportProblem(losses, labels, cost, 0.2)
    solver = FullPathSolver()
    from budro.solvers import _dual_dense

    for eta in (0.0, 0.05, 0.37, 1.0, 4.0, 50.0):
        got = _dual_full.evaluate(solver, problem, eta)
        ref = _dual_dense.evaluate(solver, problem, eta)
        assert abs(got.value - ref.value) <= 1e-12 * max(1.0, abs(ref.value))
        np.testing.assert_allclose(got.c_lo, ref.c_lo, atol=1e-12)
        np.testing.assert_allclose(got.c_hi, ref.c_hi, atol=1e-12)


def test_dispatch_and_no_refusal_past_max_dense_n():
    """From full_min_n on an embedding cost takes the full path, which max_dense_n never refuses."""
    rng = np.random.default_rng(8)
    n = 1200  # distinct points: too many for the complete-list path
    Z = rng.normal(size=(n, 3))
    labels = rng.integers(0, 2, size=n)
    losses = np.logaddexp(0.0, rng.normal(size=(n, 2)))
    problem = TransportProblem(losses, labels, EmbeddingCost(Z, cache_bytes=0), 0.3)
    with pytest.raises(ValidationError, match="max_dense_n"):
        DualSolver(max_dense_n=1000, full_min_n=None).solve(problem)
    res = DualSolver(max_dense_n=1000, full_min_n=1000).solve(problem)
    assert res.info.get("full") is True
    assert_optimal(res, dense(problem), problem)
    assert DualSolver(full_min_n=None, max_dense_n=None).solve(problem).info.get("full") is None


def test_state_is_reset_and_not_pickled():
    rng = np.random.default_rng(9)
    losses, labels, Z = make_instance(rng, 60, 2, n_distinct=20)
    cost = EmbeddingCost(Z, cache_bytes=0)
    solver = FullPathSolver()
    solver.solve(TransportProblem(losses, labels, cost, 0.2))
    first = solver._full_state
    assert pickle.loads(pickle.dumps(solver))._full_state is None
    other = 1 - labels
    problem = TransportProblem(losses, other, cost, 0.2)
    res = solver.solve(problem)
    assert solver._full_state is not first and res.info["rescanned_columns"] == 60
    assert_optimal(res, dense(problem), problem)
    cost2 = EmbeddingCost(Z * 2.0, cache_bytes=0)
    problem = TransportProblem(losses, other, cost2, 0.2)
    assert_optimal(solver.solve(problem), dense(problem), problem)
    assert solver._full_state.cost is cost2


@pytest.mark.parametrize("value, name", [(0, "full_min_n"), (True, "full_min_n"), ("fast", "full_min_n"),
                                         (-1, "max_pairs"), (0.5, "max_pairs")])
def test_bad_parameters_name_themselves(value, name):
    with pytest.raises(ValidationError, match=name):
        DualSolver(**{name: value})
    with pytest.raises(ValidationError, match="max_seconds"):
        DualSolver(max_seconds=0)


def test_solver_kit_on_the_full_path():
    check_solver(FullPathSolver(), rng=np.random.default_rng(0), n_instances=4, costs=["embedding"],
                 capabilities=["exact", "warm-start"])


@pytest.mark.parametrize("index", [np.intp, np.int32])
@pytest.mark.parametrize("threads", [0, 1, 2], ids=["numpy", "compiled-1", "compiled-2"])
@pytest.mark.parametrize("share", [0.0, 0.05, 0.5, 1.0])
def test_commit_replaces_exactly_the_rescanned_lists(share, threads, index):
    """_commit against a reference built column by column: the rescanned columns get their new
    lists, every other column keeps its old one (order, rows, costs); by numpy's concatenation and
    by the compiled merge on one or two threads."""
    if threads and not _sparse_kernels.available():
        pytest.skip("numba is not installed (pip install 'budro[fast]')")
    from types import SimpleNamespace

    from budro.solvers import _dual_full

    rng = np.random.default_rng(int(share * 100))
    n, K = 300, 3
    counts = rng.integers(1, 7, n)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    labels = rng.integers(0, K, n)
    rows = rng.integers(0, n, int(ptr[-1])).astype(index)
    st = _plain_state(n, K, labels, ptr, (rows * K + np.repeat(labels, counts)).astype(index), rng.random(rows.size))
    cols = np.sort(rng.choice(n, int(share * n), replace=False))
    new_counts = rng.integers(1, 9, cols.size)
    total = int(new_counts.sum())
    new_rows, new_C = rng.integers(0, n, total).astype(np.intp), rng.random(total)
    expected = {j: (rows[ptr[j]:ptr[j + 1]], st.C[ptr[j]:ptr[j + 1]]) for j in range(n)}
    off = np.concatenate(([0], np.cumsum(new_counts)))
    for i, j in enumerate(cols):
        expected[j] = (new_rows[off[i]:off[i + 1]], new_C[off[i]:off[i + 1]])
    _dual_full._commit(st, cols, new_rows, new_C, new_counts, np.ones((cols.size, 2, 2)),
                       np.ones(cols.size, dtype=np.int64), np.ones(cols.size), 7, threads=threads)
    _assert_lists(st, {j: (expected[j][0] * K + labels[j], expected[j][1]) for j in range(n)})
    assert (st.anchor_of[cols] == 7).all() and (np.delete(st.anchor_of, cols) == 0).all()
    assert st.flat.dtype == rows.dtype
    if cols.size:
        new_rows[:] = -1  # the state does not share the scan's arrays
        assert (_listed(st)[0] >= 0).all()


@pytest.mark.parametrize("threads", [0, 2], ids=["numpy", "compiled"])
def test_commits_in_a_row_keep_every_list(threads):
    """Twenty-five commits in a row (lists growing, shrinking, columns at both ends, none and all
    rescanned): after each, every column's list equals a reference kept column by column.  The
    compiled commit writes a list in its slot where it fits, else past the pool's end, and packs
    the pool anew only when it runs out of room or the room between lists grows too large: this
    checks all three, the pool's bookkeeping (slots disjoint, each holding its list) and that
    most commits write in the pool they found."""
    from types import SimpleNamespace

    from budro.solvers import _dual_full

    if threads and not _sparse_kernels.available():
        pytest.skip("numba is not installed (pip install 'budro[fast]')")
    rng = np.random.default_rng(31)
    n, K = 200, 2
    labels = rng.integers(0, K, n)
    ref = {j: (np.array([j]), np.zeros(1)) for j in range(n)}
    st = _plain_state(n, K, labels, np.arange(n + 1, dtype=np.int64), (np.arange(n) * K + labels).astype(np.int32),
                      np.zeros(n))
    in_place = tail = 0
    for step in range(25):
        kind = step % 5
        share = [0.02, 0.3, 1.0, 0.0, 0.6][kind]
        cols = np.sort(rng.choice(n, int(share * n), replace=False))
        if kind == 0:
            cols = np.union1d(cols, [0, n - 1]).astype(np.int64)
        high = 3 if step > 15 else 40  # long lists first, then short ones: moves towards the start
        new_counts = rng.integers(1, high, cols.size)
        total = int(new_counts.sum())
        new_rows, new_C = rng.integers(0, n, total), rng.random(total)
        off = np.concatenate(([0], np.cumsum(new_counts)))
        for i, j in enumerate(cols):
            ref[j] = (new_rows[off[i]:off[i + 1]].copy(), new_C[off[i]:off[i + 1]].copy())
        before, end = st.flat, st.end
        _dual_full._commit(st, cols, new_rows, new_C, new_counts, np.ones((cols.size, 2, 2)),
                           np.ones(cols.size, dtype=np.int64), np.ones(cols.size), step, threads=threads)
        in_place += st.flat is before
        tail += st.flat is before and st.end > end
        _assert_lists(st, {j: (ref[j][0] * K + labels[j], ref[j][1]) for j in range(n)})
        assert st.flat.dtype == np.int32
    if threads:
        assert in_place > 10 and tail > 0
    else:  # numpy: packed arrays of the exact size after every commit
        assert in_place == 0 and st.packed and st.end == st.flat.size == int((st.hi - st.lo).sum())


@pytest.mark.parametrize("seed, integer, n_distinct", [(0, False, None), (1, True, 150), (2, True, None)])
def test_cold_sample_estimate_is_the_same_by_the_list_kernel_and_numpy(seed, integer, n_distinct):
    """The cold solve's estimate of eta* (the minimiser of g on a sample of columns) read off by
    the compiled list kernel equals numpy's breakpoint read-off of the same hulls, to rounding:
    tied integer losses (lists nearly all hull, as at a fit's first rounds), duplicated points;
    and the compiled sample scan without the left-out bounds keeps the same lists."""
    rng = np.random.default_rng(seed)
    n = 400
    losses, labels, Z = make_instance(rng, n, 2, integer=integer, n_distinct=n_distinct, d=3)
    Z[:40] = Z[40:80]
    problem = TransportProblem(losses, labels, EmbeddingCost(Z, cache_bytes=0), 0.05)
    etas = []
    for kernel in KERNELS:
        solver = FullPathSolver(kernel=kernel)
        st_ = _dual_full._state(solver, problem)
        _dual_full._observe(st_, problem.losses)
        _, scale_eta = _dual_full._settings(solver, st_, problem)
        etas.append(_dual_full._cold_eta(solver, st_, problem, _dual_full._Budget(None, None), scale_eta))
        if kernel == "numba":
            E = scale_eta * np.concatenate(([0.0], np.geomspace(1e-3, 1e3, 13)))
            cols = np.arange(0, n, 7)
            with_x = _dual_full._scan_block(solver, st_, problem.losses, cols, E, 1, E.size - 1, 0.0, 0.0)
            lists = _dual_full._scan_block_grid(solver, st_, problem.losses, cols, E)
            for i in (0, 1, 2, 3, 5, 6):  # rows, C, R, counts, masks, margins
                np.testing.assert_array_equal(with_x[i], lists[i])
            assert lists[4].shape == (cols.size, 0, E.size)  # no bounds computed
    assert etas[0] > 0.0
    np.testing.assert_allclose(etas, etas[0], rtol=1e-12)
    assert len(etas) == len(KERNELS)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="the output room is the compiled scan's")
@pytest.mark.parametrize("cap", [(1, 1), (2, 3), (5, 2)])
def test_lists_longer_than_the_scan_room_are_rescanned_alone_with_the_same_result(cap, monkeypatch):
    """Columns whose lists overflow the compiled scan's room are scanned again on their own and
    merged in by column: the block's lists, bounds, masks and margins equal a scan with ample
    room, entry for entry (ties, duplicated points)."""
    rng = np.random.default_rng(11)
    n = 240
    losses, labels, Z = make_instance(rng, n, 2, n_distinct=150, d=3)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z, cache_bytes=0), 0.3)
    outs = []
    for room in ((n, n), cap):
        monkeypatch.setattr(_dual_full, "_LIST_CAP", room)
        solver = FullPathSolver(kernel="numba")
        st_ = _dual_full._state(solver, problem)
        for w, delta in ((0.2, 0.5), (0.9, np.inf)):
            E, q_lo, q_hi = _dual_full._grid(0.7, w, 1.0)
            cols = np.arange(1, n, 2)
            outs.append(_dual_full._scan_block(solver, st_, losses, cols, E, q_lo, q_hi, delta, 0.5))
    half = len(outs) // 2
    for ample, small in zip(outs[:half], outs[half:]):
        assert int(small[3].max()) > max(cap)  # some lists did overflow the small room
        for a, b in zip(ample, small):
            np.testing.assert_array_equal(a, b)
    # and whole solves agree with the dense optimum under the small room
    solver = FullPathSolver(kernel="numba")
    assert_optimal(solver.solve(problem), dense(problem), problem)


@pytest.mark.parametrize("kernel", KERNELS)
def test_anchor_ids_are_reused_and_keep_their_losses(kernel, monkeypatch):
    """Anchors live under reused ids, their losses rows of one table: over many drifting rounds
    with a small anchor limit (_MAX_ANCHORS: the oldest anchors' columns are rescanned), every
    live anchor's row holds the losses it was made at, every column points to a live anchor,
    the table stays within the limit plus its growth step, and every round is exact."""
    monkeypatch.setattr(_dual_full, "_MAX_ANCHORS", 8)
    made = {}
    registered = []
    register = _dual_full._register

    def recording(st_, anc, losses):
        a = register(st_, anc, losses)
        made[a] = losses.copy()
        registered.append(a)
        return a

    monkeypatch.setattr(_dual_full, "_register", recording)
    n = 240
    labels, cost, losses = _drifting(7, n)
    solver = FullPathSolver(kernel=kernel)
    for t in range(14):
        problem = TransportProblem(losses(3 * t), labels, cost, 0.4)  # fast drift: many rescans
        assert_optimal(solver.solve(problem), dense(problem), problem)
    st_ = solver._full_state
    assert len(registered) > len(set(registered))  # ids were reused
    live = set(np.unique(st_.anchor_of).tolist())
    assert live <= set(st_.anchors)
    for a in live:
        np.testing.assert_array_equal(st_.anchor_losses[a], made[a].reshape(-1))
    assert st_.anchor_losses.shape[0] <= 8 + 8
    assert len(st_.anchors) <= 9


@pytest.mark.skipif(not _sparse_kernels.available(), reason="the compiled rise needs numba")
@pytest.mark.parametrize("seed", range(5))
def test_compiled_group_rise_equals_numpy(seed):
    """An anchor's largest loss rise per group: the compiled pass, the compiled pass over all
    anchors at once and numpy's reduceat agree exactly (empty groups -inf, ties)."""
    rng = np.random.default_rng(seed)
    n, K, G = 300, 3, 8
    st_ = SimpleNamespace(gid=rng.integers(0, G - 2, n).astype(np.int8), order=None)  # two groups stay empty
    anchor_losses = np.round(rng.random((n, K)), 2)
    anc = _dual_full._new_anchor(st_, anchor_losses, np.array([0.1, 0.2, 0.3, 0.6]), 0.01)
    later = anchor_losses + np.round(rng.normal(scale=0.05, size=(n, K)), 3)
    from budro.solvers import _full_numba

    a = anc.up(later, anchor_losses, G, 1)
    b = np.empty((1, G, K))  # the compiled pass on this anchor alone
    _full_numba.group_rises(later, np.zeros(1, dtype=np.int64), st_.gid[None], anchor_losses.reshape(1, -1), b)
    np.testing.assert_array_equal(a, b[0])
    assert np.isneginf(a[G - 2:]).all()
    # all anchors at once (rows in natural order, anchors in parallel): the same values
    other = np.round(rng.random((n, K)), 2)
    table = np.stack([other.reshape(-1), anchor_losses.reshape(-1), other.reshape(-1)])
    gids = np.stack([rng.integers(0, G, n).astype(np.int8), st_.gid, st_.gid])
    out = np.empty((2, G, K))
    _full_numba.group_rises(later, np.array([1, 2]), gids[1:], table, out)
    np.testing.assert_array_equal(out[0], a)
    other_anchor = _dual_full._new_anchor(st_, other, np.array([0.1, 0.2, 0.3, 0.6]), 0.01)
    np.testing.assert_array_equal(out[1], other_anchor.up(later, other, G, 1))


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("nchunks", [1, 3, 8])
def test_list_down_equals_numpy_on_any_chunking(nchunks, direct):
    """The certificate's per-column largest fall since the column's anchor (each anchor's losses a
    row of a table), compiled in chunks of the columns in any order, by a pass over each anchor's
    losses or pair by pair (``direct``), equals numpy's reduceat entry for entry (lists of any
    lengths, one of them a single pair; five anchors)."""
    from budro.solvers import _full_numba

    rng = np.random.default_rng(nchunks)
    n, K = 50, 2
    counts = rng.integers(1, 9, n)
    counts[7] = 1
    ptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    flat = rng.integers(0, n * K, int(ptr[-1])).astype(np.int32)
    anchor_of = rng.integers(0, 5, n)
    table, losses_flat = rng.random((5, n * K)), rng.random(n * K)
    Ra = table[np.repeat(anchor_of, counts), flat]  # each pair's loss at its column's anchor
    expected = np.maximum.reduceat(Ra - losses_flat[flat], ptr[:-1])
    for cols in (np.arange(n), np.argsort(anchor_of, kind="stable"), rng.permutation(n)):  # any order of the columns
        out = np.full(n, np.nan)
        _full_numba.list_down(ptr[:-1], ptr[1:], flat, cols, anchor_of, table, losses_flat, out, nchunks, direct)
        np.testing.assert_array_equal(out, expected)
    some = np.sort(rng.choice(n, 9, replace=False))  # a subset: only its entries are written
    out = np.full(n, np.nan)
    _full_numba.list_down(ptr[:-1], ptr[1:], flat, some, anchor_of, table, losses_flat, out, nchunks, direct)
    np.testing.assert_array_equal(out[some], expected[some])
    assert np.isnan(np.delete(out, some)).all()


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
def test_certificate_falls_kept_within_a_solve_equal_a_fresh_pass(monkeypatch):
    """A solve's later certificates (the same losses, after rescans) compute the lists' falls
    again only for the columns committed since, and only where hull-pruned rows were recorded
    (elsewhere the fall is never read): after every certificate of drifting rounds with rescans,
    the kept falls of those columns equal numpy's pass over their lists."""
    checked = []
    certify = _dual_full._certify

    def checking(solver, st_, problem, point):
        out = certify(solver, st_, problem, point)
        ptr, flat, _ = _dual_full._packed(st_)
        Ra = st_.anchor_losses[np.repeat(st_.anchor_of, np.diff(ptr)), flat]
        fresh = np.maximum.reduceat(Ra - problem.losses.reshape(-1)[flat], ptr[:-1])
        pruned = st_.mask != 0
        np.testing.assert_array_equal(st_.down[2][pruned], fresh[pruned])
        checked.append((st_.stamp, int(pruned.sum())))
        return out

    monkeypatch.setattr(_dual_full, "_certify", checking)
    n = 300
    labels, cost, losses = _drifting(9, n)
    solver = FullPathSolver(kernel="numba")
    for t in range(6):
        problem = TransportProblem(losses(4 * t), labels, cost, 0.4)
        assert_optimal(solver.solve(problem), dense(problem), problem)
    stamps = [c[0] for c in checked]
    assert len(stamps) > len(set(stamps))  # some solves certified more than once (after rescans)
    assert max(c[1] for c in checked) > 0  # with hull-pruned rows somewhere


@given(st.integers(1, 60), st.integers(1, 6), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_anchor_order_kept_up_to_date_by_commits_is_the_stable_argsort(n, anchors, seed):
    """The columns' order by anchor, updated by each commit in O(n) instead of sorted again: after
    every commit of a random sequence (columns moved to a new anchor, to an existing one, to the
    anchor they had, or none), the same array as a stable argsort of the anchors."""
    rng = np.random.default_rng(seed)
    anchor_of = rng.integers(0, anchors, n).astype(np.int64)
    order = np.argsort(anchor_of, kind="stable")
    for _ in range(8):
        cols = np.unique(rng.choice(n, size=rng.integers(0, n + 1), replace=True))
        anchor_id = int(rng.integers(0, anchors + 2))
        anchor_of[cols] = anchor_id
        order = _dual_full._by_anchor_after(order, anchor_of, cols, anchor_id)
        np.testing.assert_array_equal(order, np.argsort(anchor_of, kind="stable"))
    assert _dual_full._by_anchor_after(None, anchor_of, cols, 0) is None


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
@pytest.mark.parametrize("seed", range(3))
def test_certificate_again_at_the_same_eta_equals_a_fresh_one(monkeypatch, seed):
    """A solve's later certificate at the same eta (after a rescan) certifies again only the
    columns committed since and keeps the others' verdicts: after every certificate of drifting
    rounds with rescans, its verdicts, upper bounds and failure counts equal those of a fresh
    certificate of every column (the kept verdict forgotten), and some solves took the shortcut."""
    shortcuts = []
    certify = _dual_full._certify

    def checking(solver, st_, problem, point):
        prev = st_.verdict
        reused = (prev is not None and st_.down_stale is not None and prev[0] == st_.stamp
                  and prev[1] is problem.losses and prev[2] == point.eta)
        committed = int(st_.down_stale.sum()) if reused else -1
        ok, upper = certify(solver, st_, problem, point)
        failures, kept = st_.last_failures, st_.verdict
        st_.verdict = None  # a fresh certificate of every column (the falls are kept: same call)
        ok2, upper2 = certify(solver, st_, problem, point)
        np.testing.assert_array_equal(ok, ok2)
        np.testing.assert_array_equal(upper, upper2)
        assert failures == st_.last_failures
        st_.verdict = kept
        if reused:
            shortcuts.append(committed)
        return ok, upper

    monkeypatch.setattr(_dual_full, "_certify", checking)
    n = 300
    labels, cost, losses = _drifting(30 + seed, n)
    solver = FullPathSolver(kernel="numba")
    for t in range(8):
        problem = TransportProblem(losses(4 * t), labels, cost, 0.4)
        assert_optimal(solver.solve(problem), dense(problem), problem)
    assert shortcuts and 0 < min(shortcuts) < n  # taken, with some columns committed and not all


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install 'budro[fast]')")
@pytest.mark.parametrize("seed", range(3))
def test_compiled_certificate_equals_numpy(seed):
    """The certificate's bounds by the compiled pass over the columns and by numpy's loop over
    anchors: the same verdicts and upper bounds to the bit, at etas below, inside and past the
    anchors' grids, on a state of many anchors with hull-pruned rows (drifting rounds)."""
    n = 300
    labels, cost, losses = _drifting(20 + seed, n)
    solver = FullPathSolver(kernel="numba")
    for t in range(6):
        problem = TransportProblem(losses(4 * t), labels, cost, 0.4)
        res = solver.solve(problem)
    st_ = solver._full_state
    assert len(st_.anchors) > 2 and np.any(st_.mask != 0)
    later = TransportProblem(losses(30), labels, cost, 0.4)  # drifted on: some columns fail
    numpy_solver = FullPathSolver(kernel="numpy")
    verdicts = []
    for eta in (0.0, 0.5 * res.eta, res.eta, 3.0 * res.eta, 100.0 * res.eta):
        point = _dual_full._dual_plan.evaluate_candidates(
            solver, later, _dual_full._candidates(solver, st_, later), eta)
        for anc in st_.anchors.values():  # each path computes the groups' rises itself
            anc._drift = None
        ok1, up1 = _dual_full._certify(solver, st_, later, point)
        failures1 = st_.last_failures
        for anc in st_.anchors.values():
            anc._drift = None
        ok2, up2 = _dual_full._certify(numpy_solver, st_, later, point)
        np.testing.assert_array_equal(ok1, ok2)
        np.testing.assert_array_equal(up1, up2)
        assert failures1 == st_.last_failures
        verdicts.append(ok1)
    verdicts = np.array(verdicts)
    assert verdicts.any() and not verdicts.all()  # columns certified and columns failing


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_dots_in_slices_are_the_block_gemm(threads):
    """The scan's dot products computed as single-threaded GEMMs on row slices by a thread pool:
    every entry within float32 rounding of the float64 product (the bound the scan's certificate
    allows for any summation order), and the whole block written."""
    from threadpoolctl import threadpool_limits

    from budro.solvers import _dual_full

    rng = np.random.default_rng(threads)
    A = rng.normal(size=(37, 11)).astype(np.float32)
    Zp = rng.normal(size=(500, 11)).astype(np.float32)
    out = np.full((37, 500), np.nan, dtype=np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        _dual_full._dots(A, Zp, out, threads)
    exact = A.astype(np.float64) @ Zp.astype(np.float64).T
    bound = 11 * 2.0**-24 * (np.abs(A).astype(np.float64) @ np.abs(Zp).astype(np.float64).T) + 1e-30
    assert np.isfinite(out).all()
    assert (np.abs(out - exact) <= 2 * bound).all()


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.floats(-1e300, 1e300, allow_nan=False), min_size=1, max_size=200))
def test_fmax_running_maximum_is_the_maximum(values):
    """The vectorised running maximum (LLVM's maxnum) gives max() to the bit."""
    import numba

    from budro.solvers._full_numba import fmax

    @numba.njit
    def running(a):
        m = a[0]
        for i in range(a.size):
            m = fmax(m, a[i])
        return m

    assert running(np.array(values)) == max(values)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), k=st.integers(0, 23), p=st.integers(1, 9), copies=st.booleans())
def test_exact_costs_four_at_a_time_equal_one_at_a_time(seed, k, p, copies):
    """The members' exact costs computed four rows at a time are those of the one-row formula to
    the bit (each dot product summed in the same order; the own row 0, copies snapped to 0), for
    any count of rows, with the own row and repeated rows among them."""
    from budro.solvers._full_numba import _exact_cost, _exact_costs
    from budro.transport import ZERO_RTOL

    rng = np.random.default_rng(seed)
    n = 12
    Z = rng.normal(size=(n, p)) * 10.0 ** rng.integers(-3, 4)
    if copies:
        Z[1::3] = Z[0]
    sq = np.einsum("ij,ij->i", Z, Z)
    rows = rng.integers(0, n, size=k).astype(np.int64)
    j = int(rng.integers(0, n))
    out = np.full(k, np.nan)
    _exact_costs(Z, sq, rows, k, j, ZERO_RTOL, out)
    expected = np.array([_exact_cost.py_func(Z, sq, int(i), j, ZERO_RTOL) for i in rows])
    np.testing.assert_array_equal(out, expected)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), share=st.sampled_from([0.01, 0.1, 0.24]), threads=st.sampled_from([1, 2]),
       integer=st.booleans())
def test_restricted_solve_after_a_rescan_splices_the_rescanned_columns(seed, share, threads, integer):
    """After a rescan in the same round, the list kernel runs on the rescanned columns only and
    their output is spliced in: the candidates, edges and breakpoint are those of a pass over every
    column, to the bit (with ties: integer losses and copies)."""
    rng = np.random.default_rng(seed)
    n = 400
    losses, labels, Z = make_instance(rng, n, 2, integer=integer, d=3)
    Z[:30] = Z[30:60]
    cost = EmbeddingCost(Z, cache_bytes=0)
    solver = FullPathSolver(kernel="numba", kernel_threads=threads)
    solver.solve(TransportProblem(losses, labels, cost, 0.3))
    st_ = solver._full_state
    p1 = TransportProblem(losses + 0.05 * rng.random(losses.shape), labels, cost, 0.3)
    _dual_full._observe(st_, p1.losses)
    first = _dual_full._candidates(solver, st_, p1)  # a whole pass: the round's first solve
    cols = np.sort(rng.choice(n, size=max(1, int(share * n)), replace=False))
    budget = _dual_full._Budget(None, None)
    assert _dual_full._rescan(solver, st_, p1, cols, max(first.breakpoint_eta, 1e-3), 0.05, 0.01, budget,
                              scale_eta=1.0) >= cols.size
    assert st_.dirty[cols].all()
    calls = []
    run = _dual_full._run_kernel

    def spy(*a):
        calls.append(a[3])
        return run(*a)

    _dual_full._run_kernel = spy
    try:
        spliced = _dual_full._candidates(solver, st_, p1)
    finally:
        _dual_full._run_kernel = run
    assert len(calls) == 1 and np.array_equal(calls[0], cols)  # only the rescanned columns went through the kernel
    out = st_.kernel_output
    st_.kernel_output = None  # a whole pass on the same lists
    whole = _dual_full._candidates(solver, st_, p1)
    for name in ("rows", "cols", "starts", "R", "C"):
        np.testing.assert_array_equal(getattr(spliced, name), getattr(whole, name))
    for name in ("edge_e", "edge_dc", "edge_counts", "last_cost", "counts"):
        np.testing.assert_array_equal(getattr(out, name), getattr(st_.kernel_output, name))
    assert spliced.breakpoint_eta == whole.breakpoint_eta


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
@pytest.mark.parametrize("seed, n, integer", [(0, 37, True), (1, 200, False), (2, 2600, True), (3, 2600, False)])
def test_tiled_scan_equals_the_column_by_column_scan(seed, n, integer, monkeypatch):
    """The compiled scan of large n (columns four at a time, rows in chunks; forced here by
    _TILE_MIN_N) keeps the same members, lists, masks and allowances as the column-by-column
    kernel, and the same excluded bounds (to the last bits of the vectorised arithmetic): tied
    losses, duplicated points, both labels in one tile, chunks across group boundaries, a member
    cap that shrinks the allowance of some columns."""
    from budro.solvers import _full_numba

    rng = np.random.default_rng(seed)
    losses, labels, Z = make_instance(rng, n, 2, integer=integer, d=3)
    Z[: n // 10] = Z[n // 10: 2 * (n // 10)]  # duplicates
    cost = EmbeddingCost(Z, cache_bytes=0)
    problem = TransportProblem(losses, labels, cost, 0.2)
    cols = np.sort(rng.choice(n, size=min(n, 4 * 7 + 3), replace=False))  # not a multiple of the tile
    assert n <= _full_numba._RC or n > 2 * _full_numba._RC
    monkeypatch.setattr(_dual_full, "_KMAX", 2 + n // 50)  # some columns past the cap at delta
    gid = (rng.permutation(n) % 5).astype(np.int8)  # 5 groups, rows of each spread over the chunks
    outs = []
    for tile_min in (10**12, 0):
        monkeypatch.setattr(_dual_full, "_TILE_MIN_N", tile_min)
        solver = FullPathSolver(kernel="numba")
        st_ = _dual_full._state(solver, problem)
        st_.gid = gid
        E, q_lo, q_hi = _dual_full._grid(0.7, 0.2, 1.0)
        outs.append(_dual_full._scan_block(solver, st_, losses, cols, E, q_lo, q_hi, 3.0, 3.0))
    (r1, C1, R1, n1, X1, m1, mu1), (r2, C2, R2, n2, X2, m2, mu2) = outs
    for a, b in ((r1, r2), (C1, C2), (R1, R2), (n1, n2), (m1, m2), (mu1, mu2)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(X1, X2, rtol=1e-13, atol=1e-13)
    assert (mu1 < 3.0).any()  # the cap shrank some allowances


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
def test_tiled_scan_rounds_stay_exact(monkeypatch):
    """A fit-like sequence of rounds with the tiled scan forced: every round the full optimum."""
    monkeypatch.setattr(_dual_full, "_TILE_MIN_N", 0)
    n = 400
    labels, cost, losses = _drifting(5, n)
    solver = FullPathSolver(kernel="numba")
    for t in range(6):
        problem = TransportProblem(losses(t), labels, cost, 0.4)
        assert_optimal(solver.solve(problem), dense(problem), problem)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: nothing to compare")
def test_large_n_scans_blocks_of_at_least_min_block_cols_within_the_wide_budget(monkeypatch):
    """Where the block budget holds few columns (large n), the compiled scan's blocks grow to
    _MIN_BLOCK_COLS columns within _WIDE_BLOCK_BYTES (no skinny GEMMs); the results are those of
    narrow blocks (each column's scan depends on its own data alone)."""
    n = 300
    labels, cost, losses = _drifting(6, n)
    problem = TransportProblem(losses(0), labels, cost, 0.4)
    per_col = 4 * n  # float32 dot products
    seen, results = [], []
    scan_block = _dual_full._scan_block

    def spy(solver, st_, losses_, cols, *args, **kwargs):
        seen[-1].append(cols.size)
        return scan_block(solver, st_, losses_, cols, *args, **kwargs)

    monkeypatch.setattr(_dual_full, "_scan_block", spy)
    monkeypatch.setattr(_dual_full, "_BLOCK_BYTES", 20 * per_col)  # 20 columns a block
    for wide in (0, 40 * per_col):  # no room to widen; room for 40 of the 64 columns wanted
        monkeypatch.setattr(_dual_full, "_WIDE_BLOCK_BYTES", wide)
        seen.append([])
        results.append(FullPathSolver(kernel="numba").solve(problem))
    narrow, widened = seen
    assert max(narrow[1:]) == 20 and max(widened[1:]) == 40  # after the cold sample's blocks
    assert results[0].objective == results[1].objective and results[0].eta == results[1].eta
    np.testing.assert_array_equal(results[0].weights, results[1].weights)


@pytest.mark.parametrize("n, K", [(1, 2), (37, 2), (1000, 2), (500, 3), (50, 1)])
def test_level_groups_are_equal_quantiles_of_the_loss_level(n, K):
    """The certificate's row groups: _GROUPS groups of nearly equal size, ordered by
    L[:, 0] - L[:, -1] (ties broken by row), recomputed when the losses change."""
    rng = np.random.default_rng(n)
    losses = np.round(rng.random((n, K)), 1)  # ties
    gid = _dual_full._level_groups(losses)
    assert gid.shape == (n,) and gid.min() >= 0 and gid.max() < _dual_full._GROUPS
    sizes = np.bincount(gid, minlength=_dual_full._GROUPS)
    assert sizes.max() - sizes[sizes > 0].min() <= 1 and sizes.sum() == n
    score = losses[:, 0] - losses[:, -1]
    order = np.lexsort((np.arange(n), score))
    assert np.all(np.diff(gid[order]) >= 0)  # monotone in the score, ties by row


@pytest.mark.parametrize("every", [1, 3])
def test_row_groups_are_made_every_few_rounds(monkeypatch, every):
    """The rows are grouped anew every _REGROUP_ROUNDS rounds of new losses (not when the same
    losses come again), the groups those rounds' level groups; every solve in between, with
    anchors made on the kept groups, is the exact optimum."""
    monkeypatch.setattr(_dual_full, "_REGROUP_ROUNDS", every)
    n = 300
    labels, cost, losses = _drifting(11, n)
    solver = FullPathSolver(kernel="numba" if _sparse_kernels.available() else "numpy")
    made = []
    for t in range(7):
        problem = TransportProblem(losses(3 * t), labels, cost, 0.4)
        before = getattr(solver, "_full_state", None)
        gid = None if before is None else before.gid
        assert_optimal(solver.solve(problem), dense(problem), problem)
        st_ = solver._full_state
        if st_.gid is not gid:
            made.append(t)
            np.testing.assert_array_equal(st_.gid, _dual_full._level_groups(problem.losses))
        again = st_.gid
        solver.solve(problem)  # the same losses: no new round
        assert st_.gid is again
    assert made == list(range(0, 7, every))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("case", ["constant", "own-loss-largest"])
def test_staying_put_is_certified_without_a_scan(kernel, case):
    """Where every point's own loss is the largest under its label (constant losses: every row of
    every column tied at the maximum, which at Adult's size made the lists hit max_pairs after
    27 s), staying put is optimal with eta* = 0: certified at once, equal to the dense dual and
    HiGHS; a next round with other losses is solved cold and exactly."""
    rng = np.random.default_rng(11)
    n = 300
    Z = np.repeat(rng.normal(size=(n // 3, 2)), 3, axis=0)  # copies: cost-0 ties as well
    labels = rng.integers(0, 2, n)
    if case == "constant":
        losses = np.tile([0.3, 0.9], (n, 1))
    else:
        top = np.array([0.8, 1.1])
        losses = rng.uniform(0.0, 0.7, (n, 2))
        losses[np.arange(n), labels] = top[labels]
    problem = TransportProblem(losses, labels, EmbeddingCost(Z, cache_bytes=0), 0.05)
    solver = FullPathSolver(kernel=kernel)
    res = solver.solve(problem)
    assert res.info["staying_put"] and res.eta == 0.0 and res.info["gap"] == 0.0
    assert_optimal(res, dense(problem), problem)
    lp = LPSolver().solve(problem)
    assert abs(res.objective - lp.objective) <= RTOL * max(1.0, abs(lp.objective))
    nxt = TransportProblem(losses + 0.05 * rng.random((n, 2)), labels, problem.cost, 0.05)
    got = solver.solve(nxt)
    assert "staying_put" not in got.info
    assert_optimal(got, dense(nxt), nxt)


def test_full_min_n_auto_takes_the_full_path_from_1000_points_with_the_compiled_kernels(monkeypatch):
    """``full_min_n="auto"`` (the default): an embedding cost of 1000 points or more whose complete
    lists do not fit takes the full path where the compiled kernels run, from 4000 points in numpy
    (where the full path is no faster than column blocks below that); numba is not looked for
    below 1000 points.  The same optimum either way."""
    from budro.solvers import _dual_full, _dual_lists, _sizing

    assert DualSolver().full_min_n == "auto" and _sizing.DEFAULT_FULL_MIN_N == "auto"
    calls = []
    real = _dual_full.compiled
    monkeypatch.setattr(_dual_full, "compiled", lambda solver: calls.append(1) or real(solver))
    assert not _dual_full.reaches(DualSolver(), 999) and not calls
    assert _dual_full.reaches(DualSolver(), 4000) and not calls
    assert _dual_full.reaches(DualSolver(kernel="numpy"), 1500) is False
    if _sparse_kernels.available():
        assert _dual_full.reaches(DualSolver(kernel="numba"), 1500) is True
    assert _dual_full.reaches(DualSolver(full_min_n=50), 60) and not _dual_full.reaches(DualSolver(full_min_n=None), 10**6)
    rng = np.random.default_rng(71)
    n = 60
    Z = rng.normal(size=(n, 2))
    losses = rng.random((n, 2))
    labels = rng.integers(0, 2, n)
    problem = TransportProblem(losses, labels, EmbeddingCost(Z), 0.1)
    monkeypatch.setattr(_dual_lists, "_MAX_PAIRS", 0)  # complete lists never fit here
    monkeypatch.setattr(_sizing, "FULL_MIN_N_COMPILED", 50)
    monkeypatch.setattr(_sizing, "FULL_MIN_N_NUMPY", 100)
    kernels = ["numpy"] + (["numba"] if _sparse_kernels.available() else [])
    ref = dense(problem)
    for kernel in kernels:
        res = DualSolver(kernel=kernel).solve(problem)
        assert ("uncertified_columns" in res.info) is (kernel == "numba")  # the full path's record
        assert abs(res.objective - ref.objective) <= RTOL * max(1.0, abs(ref.objective))
        assert res.transport_cost <= problem.eps * (1 + 1e-12) + 1e-14
