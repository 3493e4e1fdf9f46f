"""Lists pruned at one round and carried to the next (budro.solvers._dual_sparse.WarmLists).

The compiled path of the dual solver prunes each column's list (neighbour lists, or the complete
lists of a dense problem with duplicates collapsed) at an anchor round and reuses the pruned
lists while a certificate (how far the losses have moved since, per label) shows that the kernel
gives exactly what it gives on the complete lists.  Every round's result must be *identical* to
a cold solve (a fresh solver), on instances with tied losses and duplicated points, for any
sequence of losses.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro.solvers import _dual_lists, _dual_sparse, _sparse_kernels
from budro.solvers.dual import DualSolver
from budro.transport import EmbeddingCost, NeighborCost, TransportProblem

pytestmark = pytest.mark.skipif(not _sparse_kernels.available(),
                                reason="numba is not installed (pip install 'budro[fast]'): no warm lists")


def neighbor_cost(Z, m):
    return NeighborCost(Z, m, method="exact")


def instance(rng, n, *, n_distinct, integer):
    """Embedding with duplicated points, labels, and a first set of losses."""
    if integer:
        base = rng.integers(-3, 4, size=(n_distinct, 2)).astype(float)
        losses = rng.integers(0, 4, size=(n, 2)).astype(float)
    else:
        base = rng.normal(size=(n_distinct, 2))
        losses = np.logaddexp(0.0, rng.normal(size=(n, 2)))
    Z = base[rng.integers(0, n_distinct, size=n)]
    return Z, rng.integers(0, 2, size=n), losses


def same_result(res, ref):
    assert res.eta == ref.eta
    assert res.objective == ref.objective
    assert res.transport_cost == ref.transport_cost
    assert res.dual_objective == ref.dual_objective
    np.testing.assert_array_equal(res.weights, ref.weights)
    assert (res.plan != ref.plan).nnz == 0
    # the same pairs kept by dominance and as candidates: the kernel saw the same lists' worth
    # (where the warm solve's candidates were exact from a floor under the last rounds' eta*,
    # the cold solve's from 0, they hold fewer pairs: the rest of what the solves report agrees)
    floored = ("floor", "below_floor", "ceiling", "above_ceiling", "dominance_pairs", "initial_pairs", "candidate_pairs")
    if res.info["floor"] != ref.info["floor"]:
        assert ref.info["floor"] == 0.0 and res.info["initial_pairs"] <= ref.info["initial_pairs"]
        assert {k: v for k, v in res.info.items() if k not in floored} == {
            k: v for k, v in ref.info.items() if k not in floored}
        return
    assert res.info == ref.info


def warm_state(solver):
    """The warm lists of whichever layout the solver used (sparse or collapsed dense)."""
    layout = solver._layout_cache
    if layout is None:
        layout = solver._reduction_cache.layout
    return layout.__dict__.get("warm")


def run_rounds(cost, labels, eps, sequence, warm=None, **solver_params):
    """Solve every round with one solver (warm) and with a fresh one each round (cold)."""
    warm = DualSolver(kernel="numba", **solver_params) if warm is None else warm
    eta = None
    for losses in sequence:
        problem = TransportProblem(losses, labels, cost, eps)
        res = warm.solve(problem, eta0=eta)
        ref = DualSolver(kernel="numba", **solver_params).solve(TransportProblem(losses, labels, cost, eps))
        same_result(res, ref)
        eta = res.eta
    return warm


def drifting(rng, losses, rounds, step, *, jump_at=None):
    """Losses that move by at most ``step`` per round (per entry), one large jump at ``jump_at``."""
    out = [losses]
    for t in range(1, rounds):
        move = rng.uniform(-step, step, size=losses.shape)
        if jump_at is not None and t == jump_at:
            move = move * 1e3
        out.append(out[-1] + move)
    return out


@pytest.mark.parametrize("kind", ["neighbors", "collapsed"])
@pytest.mark.parametrize("threads", [1, 2])
def test_warm_lists_are_used_and_every_round_equals_a_cold_solve(kind, threads):
    rng = np.random.default_rng(3)
    n = 600  # from 512 columns on, pruning is tried on an eighth of the columns first
    Z, labels, _ = instance(rng, n, n_distinct=450, integer=False)
    # spread losses that drift slowly (as at the paper's learning rates), then one large jump
    losses = np.column_stack([np.sin(Z @ [1.0, 2.0]), np.cos(Z @ [2.0, -1.0])]) + 1.0
    sequence = drifting(rng, losses, 24, 1e-4, jump_at=15)
    cost = neighbor_cost(Z, 40) if kind == "neighbors" else EmbeddingCost(Z)
    mean_cost = float(cost.neighbor_costs.mean()) if kind == "neighbors" else 0.5
    solver = run_rounds(cost, labels, 0.2 * mean_cost, sequence[:15], kernel_threads=threads)
    state = warm_state(solver)
    assert state is not None and state.warm_rounds >= 8  # the pruned lists served most rounds
    assert state.size < 0.5 * state.C.size  # holding under half the entries
    anchors = state.anchors
    run_rounds(cost, labels, 0.2 * mean_cost, sequence[15:], warm=solver)
    assert warm_state(solver) is state and state.anchors > anchors  # the jump broke the certificate


@pytest.mark.parametrize("kind", ["neighbors", "collapsed"])
def test_candidates_from_a_floor_follow_rising_eta_and_fall_back_when_it_drops(kind):
    """A warm solve makes its candidates exact from a floor under the last two eta* (the budget
    shrinking here, so eta* rises as in a fit): fewer pairs, the cold solve's results bit for
    bit, and the HiGHS optimum; a solve whose eta* falls below its floor (the budget raised)
    makes them again without one, and the next solves use none."""
    from budro.solvers import _dual_plan
    from budro.solvers.lp import LPSolver

    rng = np.random.default_rng(8)
    n = 300
    Z, labels, losses = instance(rng, n, n_distinct=120, integer=True)
    losses = losses + 0.3 * (Z**2).sum(axis=1, keepdims=True)  # losses rising with the distance
    cost = neighbor_cost(Z, 30) if kind == "neighbors" else EmbeddingCost(Z)
    mean_cost = float(cost.neighbor_costs.mean()) if kind == "neighbors" else float(cost.column_block(0, n).mean())
    eps = [0.3 * mean_cost * 0.7**t for t in range(6)] + [0.5 * mean_cost] + [0.4 * mean_cost] * 2
    warm = DualSolver(kernel="numba")
    info, etas = [], []
    for e in eps:
        problem = TransportProblem(losses, labels, cost, e)
        res = warm.solve(problem)
        same_result(res, DualSolver(kernel="numba").solve(problem))
        lp = LPSolver().solve(problem)
        assert abs(res.objective - lp.objective) <= 1e-9 * max(1.0, abs(lp.objective))
        info.append(res.info)
        etas.append(res.eta)
    floors = [i["floor"] for i in info]
    assert all(np.diff(etas[:6]) >= 0) and floors[:2] == [0.0, 0.0]
    assert floors[5] == pytest.approx(_dual_plan.EtaFloor.SHARE * etas[3])
    assert all(f > 0.0 for f in floors[2:7]) and not any(i["below_floor"] for i in info[:6])
    assert etas[6] < floors[6] and info[6]["below_floor"]  # the fallback
    assert floors[7:] == [0.0, 0.0]


@pytest.mark.parametrize("integer", [True, False])
def test_candidates_inside_a_window_and_the_fallback_when_eta_rises_past_its_ceiling(integer):
    """From the third warm solve on, the sparse path's candidates are exact inside a window
    [floor, ceiling] around the last two eta* (fewer pairs), with the cold solve's results bit
    for bit and the HiGHS optimum; a solve whose eta* rises past its ceiling (the budget cut
    sharply) makes them again from the floor alone, and the window's room grows."""
    from budro.solvers import _dual_plan
    from budro.solvers.lp import LPSolver

    rng = np.random.default_rng(8)
    n = 300
    Z, labels, losses = instance(rng, n, n_distinct=120, integer=integer)
    losses = losses + 0.3 * (Z**2).sum(axis=1, keepdims=True)  # losses rising with the distance
    cost = neighbor_cost(Z, 30)
    mean_cost = float(cost.neighbor_costs.mean())
    eps = [0.3 * mean_cost * 0.97**t for t in range(6)] + [0.3 * mean_cost * 0.97**5 * 0.2] * 3
    warm = DualSolver(kernel="numba")
    info, etas, rooms = [], [], []
    for e in eps:
        problem = TransportProblem(losses, labels, cost, e)
        res = warm.solve(problem)
        cold = DualSolver(kernel="numba").solve(problem)
        same_result(res, cold)
        lp = LPSolver().solve(problem)
        assert abs(res.objective - lp.objective) <= 1e-9 * max(1.0, abs(lp.objective))
        info.append(res.info)
        etas.append(res.eta)
        rooms.append(warm._layout_cache.floors.room)
        if res.info["ceiling"] < np.inf and not res.info["above_ceiling"]:
            assert res.info["floor"] <= res.eta <= res.info["ceiling"]
            assert res.info["initial_pairs"] <= cold.info["initial_pairs"]
    ceilings = [i["ceiling"] for i in info]
    assert ceilings[:2] == [np.inf, np.inf] and all(c < np.inf for c in ceilings[2:])
    assert all(np.diff(etas) >= 0) and not any(i["below_floor"] for i in info)
    assert etas[6] > ceilings[6] and info[6]["above_ceiling"]  # the sharp cut: the fallback
    # the room narrows after a solve inside its window, widens after one above it
    w = _dual_plan.EtaFloor
    for t in range(3, len(eps)):
        want = min(4.0 * rooms[t - 1], w.ROOM_MAX) if info[t]["above_ceiling"] else max(0.9 * rooms[t - 1], w.ROOM_MIN)
        assert rooms[t] == pytest.approx(want)
    assert sum(not i["above_ceiling"] for i in info[2:]) >= 4  # most solves inside their window


def test_eta_window_rises_with_eta_and_adapts_its_room():
    from budro.solvers import _dual_plan

    w = _dual_plan.EtaFloor()
    assert w.next() == 0.0 and w.ceiling() == np.inf
    w.certified(1.0)
    assert w.next() == 0.0 and w.ceiling() == np.inf
    w.certified(1.1)
    assert w.next() == pytest.approx(0.98)
    # the last eta* times its last rise, times 1 + room
    assert w.ceiling() == pytest.approx(1.1 * 1.1 * (1 + w.ROOM_START))
    w.certified(1.2)  # inside: the room narrows, down to ROOM_MIN
    assert w.room == pytest.approx(0.9 * w.ROOM_START)
    w.next()
    w.ceiling()
    w.above()  # above: the room widens, up to ROOM_MAX
    w.certified(2.0)
    assert w.room == pytest.approx(4 * 0.9 * w.ROOM_START)
    for _ in range(10):
        w.next(); w.ceiling(); w.above(); w.certified(2.0)
    assert w.room == w.ROOM_MAX
    for _ in range(200):
        w.next(); w.ceiling(); w.certified(2.0)
    assert w.room == w.ROOM_MIN
    # falling eta*: no rise, the ceiling is the last eta* times 1 + room; no ceiling while the
    # floor rests after a miss below it
    w.certified(1.5)
    w.next()
    assert w.ceiling() == pytest.approx(1.5 * (1 + w.ROOM_MIN))
    w.missed()
    assert w.next() == 0.0 and w.ceiling() == np.inf


def test_pruned_lists_give_the_complete_lists_kernel_output_bit_for_bit():
    # The kernel's claim the warm start rests on: on any sub-list that keeps every entry
    # dominance keeps, the candidates, edges and breakpoint are those of the complete list.
    rng = np.random.default_rng(5)
    n, m = 500, 30
    Z, labels, losses = instance(rng, n, n_distinct=350, integer=True)
    losses = losses + 0.01 * rng.normal(size=losses.shape)
    cost = neighbor_cost(Z, m)
    solver = DualSolver(kernel="numba")
    problem = TransportProblem(losses, labels, cost, 0.1)
    layout = _dual_sparse.sparse_layout(solver, problem)
    lf = losses.reshape(-1)
    ptr, C, flat, width = layout.complete
    tau = 4e-12 * float(np.abs(losses).max())
    # ... and so does the kernel with a floor (candidates exact for eta >= floor only): an entry
    # dominance drops lies below an earlier kept one at the floor too, so it never sets the
    # running maximum of the values at the floor
    for floor in (0.0, 0.05, 1.0):
        ref = _sparse_kernels.sparse_candidates(layout.labels, 2, C, flat, lf, tau, layout.ones, ptr=ptr, width=width,
                                                floor=floor)
        ref = [np.array(x, copy=True) if isinstance(x, np.ndarray) else x for x in ref]
        for margin in [tau, 0.003, 0.05, 10.0]:
            optr, oC, of = np.empty(n + 1, dtype=np.int64), np.empty(C.size), np.empty(C.size, dtype=flat.dtype)
            size, w, _ = _sparse_kernels.prune(ptr, C, flat, lf, layout.labels, np.full(2, margin), optr, oC, of)
            assert size < C.size or margin == 10.0
            got = _sparse_kernels.sparse_candidates(layout.labels, 2, oC[:size], of[:size], lf, tau, layout.ones,
                                                    ptr=optr, width=w, floor=floor)
            for a, b in zip(got, ref):
                np.testing.assert_array_equal(a, b)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), integer=st.booleans(), kind=st.sampled_from(["neighbors", "collapsed"]),
       steps=st.lists(st.sampled_from([0.0, 1e-9, 1e-4, 1e-2, 0.5, 1.0]), min_size=3, max_size=12),
       directed=st.booleans(), n=st.integers(5, 60), share=st.sampled_from([0.0, 0.05, 0.3, 1.0]))
def test_property_any_drift_sequence_gives_the_cold_results(seed, integer, kind, steps, directed, n, share):
    # Ties and duplicates: integer losses and steps that are integers or zero keep exact ties;
    # continuous ones break them; the steps range from none to larger than the losses' spread.
    # Directed drift moves every loss the full step in a fixed direction each round (losses that
    # approach each other as fast as the certificate allows); otherwise the moves are random.
    rng = np.random.default_rng(seed)
    Z, labels, losses = instance(rng, n, n_distinct=max(1, n // 3), integer=integer)
    sign = rng.choice([-1.0, 1.0], size=losses.shape)
    sequence = [losses]
    for step in steps:
        if directed:
            move = sign * (np.round(step) if integer else step)
        elif integer:
            move = rng.integers(-1, 2, size=losses.shape) * np.round(step)
        else:
            move = rng.uniform(-step, step, losses.shape)
        sequence.append(sequence[-1] + move)
    cost = neighbor_cost(Z, min(n, 8)) if kind == "neighbors" else EmbeddingCost(Z)
    listed = cost.neighbor_costs if kind == "neighbors" else cost.costs_among(np.arange(n))
    run_rounds(cost, labels, share * float(listed.mean()), sequence)


@pytest.mark.parametrize("kind", ["neighbors", "collapsed"])
def test_losses_approaching_at_the_largest_drift_allowed_keep_the_cold_results(kind):
    # Every loss moves by the same step each round, half of them up and half down (fixed
    # directions): a dropped entry and the one above it approach each other at twice the drift
    # per round, so the certificate must give out exactly as the gaps it relies on close.
    rng = np.random.default_rng(21)
    n = 300
    Z, labels, _ = instance(rng, n, n_distinct=250, integer=False)
    losses = np.column_stack([np.sin(3 * Z @ [1.0, 2.0]), np.cos(3 * Z @ [2.0, -1.0])])
    sign = rng.choice([-1.0, 1.0], size=losses.shape)
    sequence = [losses + t * 2e-4 * sign for t in range(40)]
    cost = neighbor_cost(Z, 60) if kind == "neighbors" else EmbeddingCost(Z)
    solver = run_rounds(cost, labels, 0.1, sequence)
    state = warm_state(solver)
    assert state.warm_rounds >= 10 and state.anchors >= 3


def test_warm_state_follows_the_cost_and_labels_and_is_not_pickled():
    rng = np.random.default_rng(11)
    Z, labels, losses = instance(rng, 300, n_distinct=300, integer=False)
    cost = neighbor_cost(Z, 20)
    solver = DualSolver(kernel="numba")
    for t in range(4):
        solver.solve(TransportProblem(losses + 1e-6 * t, labels, cost, 0.05))
    state = warm_state(solver)
    assert state.anchors >= 1
    # other labels: a new layout with its own (fresh) warm state; results still equal a cold solve
    other = 1 - labels
    res = solver.solve(TransportProblem(losses, other, cost, 0.05))
    same_result(res, DualSolver(kernel="numba").solve(TransportProblem(losses, other, cost, 0.05)))
    assert warm_state(solver) is not state
    copy = pickle.loads(pickle.dumps(solver))
    assert copy._layout_cache is None and copy._reduction_cache is None
    # the collapsed dense path keeps its warm state on its own (cached) reduction
    dense = DualSolver(kernel="numba")
    ecost = EmbeddingCost(Z)
    for t in range(4):
        dense.solve(TransportProblem(losses + 1e-6 * t, labels, ecost, 0.05))
    assert dense._reduction_cache is not None and isinstance(dense._reduction_cache, _dual_lists.Reduction)
    assert warm_state(dense).anchors >= 1


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(1, 3000), ties=st.booleans(),
       moves=st.lists(st.floats(0.5, 2.0), min_size=1, max_size=6), share=st.floats(0.0, 1.2))
def test_breakpoint_started_from_the_last_one_equals_the_full_selection(seed, size, ties, moves, share):
    # min{t in e : sum(dc[e <= t]) >= need} for hull edges whose values move from call to call
    # (a window around the extrapolated last answer, else the full selection): equal answers,
    # with tied values (integer e) and weights, needs beyond the total included.
    rng = np.random.default_rng(seed)
    warm = _sparse_kernels.WarmBreakpoint(cap=256)
    e = rng.integers(0, 40, size).astype(float) if ties else rng.exponential(size=size)
    dc = rng.integers(1, 4, size).astype(float) if ties else rng.uniform(0.1, 1.0, size)
    hits = 0
    for factor in moves:
        e = e * factor
        need = share * float(dc.sum())
        if ties and share <= 1.0:  # a need reached exactly at a value (integer weights: exact sums)
            need = float(dc[e <= np.quantile(e, share)].sum())
        assert warm(e, dc, need) == _sparse_kernels.select_breakpoint(e, dc, need)
        hits = warm.hits
    assert hits <= len(moves)


def test_breakpoint_window_is_used_when_the_minimiser_moves_little():
    rng = np.random.default_rng(2)
    e, dc = rng.exponential(size=50_000), rng.uniform(0.1, 1.0, 50_000)
    warm = _sparse_kernels.WarmBreakpoint()
    need = 0.4 * float(dc.sum())
    for t in range(12):
        drifted = e * (1.0 + 0.02 * t)
        assert warm(drifted, dc, need) == _sparse_kernels.select_breakpoint(drifted, dc, need)
    assert warm.hits >= 9


def test_breakpoint_window_narrows_when_it_holds_too_many_values():
    """Many edges (10^6 points give millions): a window holding more values than the buffer is
    narrowed, not widened, and the later calls hit; the answers are the full selection's."""
    rng = np.random.default_rng(3)
    e, dc = rng.exponential(size=200_000), rng.uniform(0.1, 1.0, 200_000)
    warm = _sparse_kernels.WarmBreakpoint(cap=512)
    need = 0.4 * float(dc.sum())
    for t in range(12):
        drifted = e * (1.0 + 0.001 * t)
        assert warm(drifted, dc, need) == _sparse_kernels.select_breakpoint(drifted, dc, need)
    assert warm.overflows >= 1 and warm.hits >= 6, (warm.overflows, warm.hits)


def test_breakpoint_windows_follow_a_minimiser_that_alternates():
    """A minimiser alternating between two rising sequences, call by call (the 10^6-row synthetic
    fit's): the window around the answer of two calls before holds it; the same answers."""
    rng = np.random.default_rng(4)
    e, dc = rng.exponential(size=50_000), rng.uniform(0.1, 1.0, 50_000)
    warm = _sparse_kernels.WarmBreakpoint()
    need = 0.4 * float(dc.sum())
    for t in range(16):
        drifted = e * (1.0 + 0.01 * t) * (1.7 if t % 2 else 1.0)
        assert warm(drifted, dc, need) == _sparse_kernels.select_breakpoint(drifted, dc, need)
    assert warm.hits >= 10, warm.hits


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), K=st.integers(1, 3), integer=st.booleans())
def test_compiled_group_maxima_equal_the_numpy_reduction(seed, n, K, integer):
    # Duplicated points collapsed: each group's largest loss per label and the smallest row
    # attaining it (ties among copies are common with integer losses).
    rng = np.random.default_rng(seed)
    Z = rng.integers(0, 3, size=(n, 1)).astype(float)
    losses = rng.integers(0, 3, size=(n, K)).astype(float) if integer else rng.normal(size=(n, K))
    problem = TransportProblem(losses, rng.integers(0, K, size=n), EmbeddingCost(Z), 0.1)
    red = _dual_lists.reduction(DualSolver(kernel="numba"), problem)
    assert red is not None
    top, rep = red.reduce(losses)
    ctop, crep = red.reduce(losses, compiled=True)
    if rep is None:
        assert crep is None and ctop is top
    else:
        np.testing.assert_array_equal(ctop, top)
        np.testing.assert_array_equal(crep, rep)


@pytest.mark.skipif(not _sparse_kernels.available(), reason="numba is not installed: pip install -e '.[fast]'")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 50), K=st.integers(1, 3))
def test_warm_lists_drift_kernels_equal_numpy(seed, n, K):
    """The warm lists' bookkeeping passes (largest |loss|, each label's largest change) equal
    numpy's whole-array expressions exactly."""
    kern = _sparse_kernels._kernels()
    rng = np.random.default_rng(seed)
    x, ref = rng.normal(size=n * K), rng.normal(size=n * K)
    assert kern.abs_max(x) == (float(np.abs(x).max()) if x.size else 0.0)
    out = np.empty(K)
    kern.label_drift(x, ref, K, out)
    expected = np.abs(x - ref).reshape(-1, K).max(axis=0) if n else np.zeros(K)
    np.testing.assert_array_equal(out, expected)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), K=st.integers(1, 4), order=st.sampled_from("CF"),
       integer=st.booleans())
def test_label_max_is_the_largest_loss_under_each_label(seed, n, K, order, integer):
    from budro.solvers import _dual_plan

    rng = np.random.default_rng(seed)
    losses = rng.integers(0, 3, size=(n, K)).astype(float) if integer else rng.normal(size=(n, K))
    losses = np.asarray(losses, order=order)
    top = _dual_plan.label_max(losses)
    assert top.dtype == np.float64 and top.shape == (K,)
    np.testing.assert_array_equal(top, losses.max(axis=0))
