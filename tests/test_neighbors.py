"""NeighborCost's neighbour search: exact methods give the exact lists, copies share lists,
approximate (faiss) lists are deterministic across runs and thread counts, "auto" picks as
documented, and missing faiss or bad arguments are clear errors."""

from __future__ import annotations

import contextlib
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import budro.transport as transport
from budro.exceptions import ValidationError
from budro.transport import NeighborCost

FAISS_METHODS = ["faiss-ivf", "faiss-hnsw"]


def _exact_sorted_costs(Z: np.ndarray, m: int) -> np.ndarray:
    """Per point, the m smallest squared distances to all points (itself included), brute force."""
    D = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(-1)
    return np.sort(D, axis=1)[:, :m]


def _check_lists(cost: NeighborCost) -> None:
    n = cost.n
    assert np.array_equal(cost.neighbors[:, 0], np.arange(n))
    assert np.all(cost.neighbor_costs[:, 0] == 0.0)
    assert np.all(np.diff(cost.neighbor_costs[:, 1:], axis=1) >= 0)
    assert all(len(set(row)) == cost.m for row in cost.neighbors)  # no row listed twice
    Z = cost.Z
    exact = ((Z[cost.neighbors] - Z[:, None, :]) ** 2).sum(-1)
    np.testing.assert_allclose(cost.neighbor_costs, exact, rtol=1e-12, atol=1e-12)


def _clustered(rng, n: int, p: int, n_distinct: int | None = None) -> np.ndarray:
    """Tabular-like points: a few latent factors, correlated columns; optionally many copies."""
    base = rng.normal(size=(n if n_distinct is None else n_distinct, 3)) @ rng.normal(size=(3, p))
    base += 0.05 * rng.normal(size=base.shape)
    if n_distinct is None:
        return base
    return base[rng.integers(0, n_distinct, size=n)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 120), p=st.integers(1, 6), m=st.integers(1, 12),
       copies=st.booleans(), integer=st.booleans())
def test_exact_kd_tree_path_gives_the_exact_lists(monkeypatch, seed, n, p, m, copies, integer):
    """The k-d tree on the principal axes (forced here by a brute-force limit of 0) lists the
    exact m nearest points, with or without deduplication, ties and duplicates included."""
    monkeypatch.setattr(transport, "EXACT_BRUTE_MAX_N", 0)  # the same for every example
    monkeypatch.setattr(transport, "_brute_force_cheaper", lambda *a: False)  # the tree, whatever its cost
    rng = np.random.default_rng(seed)
    Z = _clustered(rng, n, p, n_distinct=max(1, n // 3) if copies else None)
    if integer:  # many exact ties
        Z = np.round(Z)
    for dedupe in (False, True):
        cost = NeighborCost(Z, m, method="exact", dedupe=dedupe)
        _check_lists(cost)
        np.testing.assert_allclose(np.sort(cost.neighbor_costs, axis=1), _exact_sorted_costs(Z, min(m, n)),
                                   rtol=1e-9, atol=1e-9)


def test_copies_share_lists_and_only_distinct_points_are_searched(monkeypatch):
    rng = np.random.default_rng(0)
    Z = _clustered(rng, 600, 4, n_distinct=150)
    searched = []
    real = transport._NEIGHBOR_METHODS["exact"]
    monkeypatch.setitem(transport._NEIGHBOR_METHODS, "exact",
                        lambda Zs, m, threads: searched.append(len(Zs)) or real(Zs, m, threads))
    cost = NeighborCost(Z, 12, method="exact")
    n_distinct = len(np.unique(Z, axis=0))
    assert searched == [n_distinct] and cost.n_distinct == n_distinct
    _check_lists(cost)
    np.testing.assert_allclose(np.sort(cost.neighbor_costs, axis=1), _exact_sorted_costs(Z, 12), atol=1e-9)
    # copies of a point (fewer than m of them) hold the same set of rows
    _, inverse, counts = np.unique(Z, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    for g in np.flatnonzero((counts > 1) & (counts <= 12))[:20]:
        rows = np.flatnonzero(inverse == g)
        sets = {frozenset(cost.neighbors[j]) for j in rows}
        assert len(sets) == 1
    # without copies nothing is deduplicated ("auto": more than 90 % distinct)
    searched.clear()
    plain = NeighborCost(_clustered(rng, 300, 4), 5, method="exact")
    assert searched == [300] and plain.n_distinct == 300


def test_dedupe_survives_hash_collisions(monkeypatch):
    """Rows are grouped by a hash and then checked: a collision (here: every hash equal) falls
    back to grouping by the rows themselves, never merges different points."""
    rng = np.random.default_rng(1)
    Z = _clustered(rng, 200, 3, n_distinct=40)
    monkeypatch.setattr(transport, "_row_hashes", lambda Z: np.zeros(len(Z), dtype=np.uint64))
    cost = NeighborCost(Z, 6, method="exact", dedupe=True)
    assert cost.n_distinct == len(np.unique(Z, axis=0))
    np.testing.assert_allclose(np.sort(cost.neighbor_costs, axis=1), _exact_sorted_costs(Z, 6), atol=1e-9)


@pytest.mark.parametrize("method", FAISS_METHODS)
def test_faiss_lists_are_deterministic_across_runs_and_threads(method):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(2)
    Z = _clustered(rng, 4000, 8)
    one = NeighborCost(Z, 10, method=method, n_jobs=1)
    two = NeighborCost(Z, 10, method=method, n_jobs=2)
    again = NeighborCost(Z, 10, method=method, n_jobs=2)
    assert np.array_equal(one.neighbors, two.neighbors)
    assert np.array_equal(two.neighbors, again.neighbors)
    _check_lists(two)
    # approximate, but close: recall against the exact lists
    kth = _exact_sorted_costs(Z, 10)[:, -1]
    assert np.mean(two.neighbor_costs <= kth[:, None] + 1e-9) >= 0.99


@pytest.mark.parametrize("method", FAISS_METHODS)
def test_faiss_with_copies(method):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(3)
    Z = _clustered(rng, 3000, 5, n_distinct=1000)
    cost = NeighborCost(Z, 8, method=method)
    _, inverse, counts = np.unique(Z, axis=0, return_inverse=True, return_counts=True)
    assert cost.n_distinct == len(counts) < 0.9 * len(Z)
    _check_lists(cost)
    # a point's copies (all of them, up to m - 1) come first in its list, at cost 0
    copies = np.minimum(counts[inverse.ravel()], 8) - 1
    zeros = (cost.neighbor_costs[:, 1:] == 0.0).sum(axis=1)
    assert np.all(zeros >= copies)


def test_intrinsic_dimension_estimate():
    rng = np.random.default_rng(4)
    flat = rng.normal(size=(4000, 3)) @ rng.normal(size=(3, 12))  # a 3-D subspace of 12-D space
    full = rng.normal(size=(4000, 12))
    assert 2.0 <= transport._AxesTree(flat).intrinsic_dimension(16) <= 4.0
    assert 8.0 <= transport._AxesTree(full).intrinsic_dimension(16) <= 14.0
    copies = np.repeat(flat[:100], 40, axis=0)  # zero distances are left out, not log(0)
    assert np.isfinite(transport._AxesTree(copies).intrinsic_dimension(16))


def test_auto_picks_by_size_and_dimension(monkeypatch):
    """"auto": brute force for small n; the k-d tree where the data's dimension is low; faiss IVF
    above APPROX_MIN_N points of higher dimension when faiss is installed, else exact."""
    rng = np.random.default_rng(5)
    low = rng.normal(size=(600, 2)) @ rng.normal(size=(2, 6))
    high = rng.normal(size=(600, 10))
    used = []
    monkeypatch.setattr(transport, "_brute_force_neighbors",
                        lambda Z, m, t, real=transport._brute_force_neighbors: used.append("brute") or real(Z, m, t))
    monkeypatch.setattr(transport, "_faiss_ivf_neighbors",
                        lambda Z, m, t: used.append("ivf") or transport._exact_neighbors(Z, m, t))
    monkeypatch.setattr(transport, "_has_faiss", lambda: True)
    assert NeighborCost(low, 5).method == "exact" and used == ["brute"]  # 600 <= EXACT_BRUTE_MAX_N
    monkeypatch.setattr(transport, "EXACT_BRUTE_MAX_N", 100)
    monkeypatch.setattr(transport, "APPROX_MIN_N", 200)
    monkeypatch.setattr(transport, "TREE_NS_PER_POINT", 1e-6)  # the cost model: the tree far cheaper
    used.clear()
    assert NeighborCost(low, 5).method == "exact" and used == []  # the k-d tree
    assert NeighborCost(high, 5).method == "faiss-ivf" and used[0] == "ivf"
    assert NeighborCost(high, 5, method="exact").method == "exact"
    monkeypatch.setattr(transport, "_has_faiss", lambda: False)
    assert NeighborCost(high, 5).method == "exact"  # the fallback without faiss
    monkeypatch.setattr(transport, "KD_TREE_MAX_DIM", 3.0)
    used.clear()
    NeighborCost(high, 5, method="exact")
    assert used == ["brute"]  # too high a dimension for the k-d tree
    monkeypatch.setattr(transport, "KD_TREE_MAX_DIM", 12.0)
    monkeypatch.setattr(transport, "TREE_NS_PER_POINT", 1e6)  # the cost model: brute force cheaper
    used.clear()
    assert NeighborCost(low, 5).method == "exact" and used == ["brute"]
    monkeypatch.setattr(transport, "BRUTE_MAX_SECONDS", 1e-9)  # ... but over its limit: the tree
    used.clear()
    assert NeighborCost(low, 5).method == "exact" and used == []


def test_examined_points_are_at_least_the_neighbours_and_at_most_all():
    """The cost model's count of points a tree query examines: every one of the m nearest lies in
    a leaf whose box meets the ball, so at least m; never more than n; all n for a ball that
    holds every point; the same count on every call (no timing, a seeded sample)."""
    rng = np.random.default_rng(8)
    Z = _clustered(rng, 3000, 8)
    tree = transport._AxesTree(Z)
    for m in (1, 16, 100):
        examined = tree.examined(m)
        assert m <= examined <= len(Z)
        assert transport._AxesTree(Z).examined(m) == examined
    assert transport._AxesTree(Z).examined(len(Z)) == len(Z)


def test_cost_model_settles_a_clear_choice_on_its_first_queries(monkeypatch):
    """The examined count of the first EXAMINED_FIRST seeded queries decides alone where the two
    estimates are more than EXAMINED_SETTLES apart; otherwise the whole sample decides.  The first
    queries' count is the whole count's over the same queries; the dimension estimate is not
    computed where the model finds brute force cheaper."""
    rng = np.random.default_rng(8)
    Z = _clustered(rng, 3000, 8)
    n, p = Z.shape
    tree = transport._AxesTree(Z)
    tree_s = transport._tree_seconds(tree, n, p, 16, 1)
    assert transport._tree_seconds(tree, n, p, 16, 1, queries=transport.EXAMINED_SAMPLE) == tree_s
    calls = []
    real = transport._tree_seconds
    monkeypatch.setattr(transport, "_tree_seconds", lambda *a, **k: calls.append(k.get("queries")) or real(*a, **k))
    for factor, settled, cheaper in ((10.0, True, False), (0.1, True, True), (1.5, False, False), (0.7, False, True)):
        first = real(tree, n, p, 16, 1, queries=transport.EXAMINED_FIRST)
        whole = tree_s
        brute = factor * (first if settled else whole)
        monkeypatch.setattr(transport, "_brute_force_seconds", lambda n, p, brute=brute: brute)
        calls.clear()
        assert transport._brute_force_cheaper(tree, n, p, 16) is cheaper
        assert calls == ([transport.EXAMINED_FIRST] if settled else [transport.EXAMINED_FIRST, None])
    monkeypatch.setattr(transport, "_brute_force_seconds", lambda n, p: 0.0)
    monkeypatch.setattr(transport, "EXACT_BRUTE_MAX_N", 100)
    monkeypatch.setattr(transport._AxesTree, "intrinsic_dimension", lambda *a: pytest.fail("dimension estimated"))
    assert NeighborCost(Z, 16, method="exact").method == "exact"


def test_seeded_queries_are_made_once():
    """The estimates query each seeded point once per m: the cost model's 16 then 64 points, the
    dimension's 256 (kept: asked again, no query), and a count after the dimension none; the
    values are those of a tree asked in another order."""
    rng = np.random.default_rng(8)
    Z = _clustered(rng, 3000, 8)

    class Counting:
        def __init__(self, inner):
            self.inner, self.queried = inner, 0

        def query(self, x, **kw):
            self.queried += len(x)
            return self.inner.query(x, **kw)

        def __getattr__(self, name):  # the tree's nodes and indices
            return getattr(self.inner, name)

    tree = transport._AxesTree(Z)
    tree.tree = counting = Counting(tree.tree)
    first = tree.examined(16, queries=16)
    whole = tree.examined(16)
    assert counting.queried == transport.EXAMINED_SAMPLE
    dimension = tree.intrinsic_dimension(16)
    assert tree.intrinsic_dimension(16) == dimension and tree.examined(16) == whole
    assert counting.queried == transport.EXAMINED_SAMPLE + transport.DIMENSION_SAMPLE
    other = transport._AxesTree(Z)
    assert other.intrinsic_dimension(16) == dimension
    assert other.examined(16) == whole and other.examined(16, queries=16) == first


def test_exact_lists_whichever_search_the_cost_model_picks(monkeypatch):
    """Brute force or the k-d tree, as the cost model decides: the same exact lists (costs equal;
    the data have no ties)."""
    rng = np.random.default_rng(9)
    Z = _clustered(rng, 1500, 6)
    monkeypatch.setattr(transport, "EXACT_BRUTE_MAX_N", 100)
    found = {}
    for scale, expected in ((1e6, "brute"), (1e-6, "tree")):
        monkeypatch.setattr(transport, "TREE_NS_PER_POINT", scale)
        tree = transport._AxesTree(Z)
        assert transport._brute_force_cheaper(tree, len(Z), Z.shape[1], 20) == (expected == "brute")
        cost = NeighborCost(Z, 20, method="exact")
        _check_lists(cost)
        found[expected] = cost
    np.testing.assert_array_equal(found["brute"].neighbors, found["tree"].neighbors)
    np.testing.assert_allclose(found["brute"].neighbor_costs, found["tree"].neighbor_costs, rtol=1e-12)


@pytest.mark.parametrize("method", FAISS_METHODS + ["faiss"])
def test_missing_faiss_is_a_clear_error(method, monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)  # import faiss -> ImportError
    with pytest.raises(ValidationError, match=r"budro\[neighbors\]"):
        NeighborCost(np.random.default_rng(5).normal(size=(50, 3)), 4, method=method)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"method": "annoy"}, "method must be one of: auto, exact"),
    ({"n_jobs": 0}, "n_jobs must be"),
    ({"n_jobs": 1.5}, "n_jobs must be"),
    ({"n_jobs": True}, "n_jobs must be"),
    ({"dedupe": "yes"}, "dedupe must be"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValidationError, match=match):
        NeighborCost(np.zeros((5, 2)), 2, **kwargs)


def test_threads_come_from_available_cores(monkeypatch):
    seen = []
    monkeypatch.setitem(transport._NEIGHBOR_METHODS, "exact",
                        lambda Z, m, threads: seen.append(threads) or transport._exact_neighbors(Z, m, threads))
    monkeypatch.setenv("BUDRO_NUM_THREADS", "1")
    Z = np.random.default_rng(6).normal(size=(40, 3))
    NeighborCost(Z, 3, method="exact")
    NeighborCost(Z, 3, method="exact", n_jobs=-1)
    NeighborCost(Z, 3, method="exact", n_jobs=2)
    assert seen == [1, 1, 2]


@pytest.mark.skipif(not __import__("budro.solvers._sparse_kernels", fromlist=["x"]).installed(),
                    reason="numba is not installed (pip install 'budro[fast]')")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 150), p=st.integers(1, 5), m=st.integers(1, 12),
       copies=st.booleans(), integer=st.booleans(), threads=st.sampled_from([1, 2]))
def test_compiled_list_finish_equals_the_numpy_path(monkeypatch, seed, n, p, m, copies, integer, threads):
    """The compiled kernel that finishes the lists (self first, then the others by exact cost,
    ties in the search's order) gives the numpy path's lists, on one thread or several chunks in
    threads, with copies and exact ties."""
    rng = np.random.default_rng(seed)
    Z = _clustered(rng, n, p, n_distinct=max(1, n // 3) if copies else None)
    if integer:
        Z = np.round(Z)
    monkeypatch.setattr(transport, "FINISH_CHUNK", 7)  # several chunks
    monkeypatch.setattr(transport, "FINISH_KERNEL_MIN_PAIRS", 0)
    monkeypatch.setattr(transport, "USE_FINISH_KERNEL", True)
    compiled = NeighborCost(Z, m, method="exact", n_jobs=threads)
    assert transport._finish_kernel(1) is not None
    monkeypatch.setattr(transport, "USE_FINISH_KERNEL", False)
    plain = NeighborCost(Z, m, method="exact", n_jobs=threads)
    _check_lists(compiled)
    np.testing.assert_allclose(compiled.neighbor_costs, plain.neighbor_costs, rtol=1e-13, atol=0)
    if integer:  # exact costs: the same order, ties included
        np.testing.assert_array_equal(compiled.neighbors, plain.neighbors)


def _expand_copies_loop(idx, inverse, counts, m):
    """The reference: slot by slot, each listed distinct point followed by all its copies."""
    n_distinct = len(counts)
    members = np.argsort(inverse, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    out = np.empty((n_distinct, m), dtype=np.intp)
    for r in range(n_distinct):
        listed = [r] + [int(v) for v in idx[r] if v != r and v >= 0]
        rows = [int(members[starts[v] + c]) for v in listed for c in range(counts[v])]
        rows += [int(members[starts[r]])] * max(0, m - len(rows))
        out[r] = rows[:m]
    return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n_distinct=st.integers(1, 40), k=st.integers(1, 8), m=st.integers(1, 30),
       self_listed=st.booleans(), missing=st.booleans())
def test_copies_expanded_as_the_slot_by_slot_reference(seed, n_distinct, k, m, self_listed, missing):
    """Lists over distinct points expanded to rows (each listed point followed by all its copies in
    row order, the point itself first, repeated when the lists run out; -1, no point, skipped) as
    the reference does."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 5, size=n_distinct)
    inverse = rng.permutation(np.repeat(np.arange(n_distinct), counts))
    k = min(k, n_distinct)
    idx = np.array([rng.permutation(n_distinct)[:k] for _ in range(n_distinct)], dtype=np.intp)
    if self_listed:  # the point itself somewhere in its list, as an exact search returns it
        for r in range(n_distinct):
            if r not in idx[r]:
                idx[r, rng.integers(0, k)] = r
    if missing:  # approximate searches may return -1 for missing neighbours
        idx[rng.random(idx.shape) < 0.3] = -1
    np.testing.assert_array_equal(transport._expand_copies(idx, inverse, counts, m),
                                  _expand_copies_loop(idx, inverse, counts, m))


def _reference_lists(Z: np.ndarray, m: int) -> np.ndarray:
    """The m nearest points by the float64 cost the lists use (coordinates summed in order), ties
    by row order."""
    n = Z.shape[0]
    costs = np.zeros((n, n))
    for k in range(Z.shape[1]):
        d = Z[None, :, k] - Z[:, None, k]
        costs += d * d
    return np.argsort(costs, axis=1, kind="stable")[:, :m]


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 150), p=st.integers(1, 8), m=st.integers(1, 20),
       copies=st.booleans(), integer=st.booleans(), offset=st.sampled_from([0.0, 1e3, 1e6, -5e7, 1e9]),
       threads=st.sampled_from([1, 2]), block=st.sampled_from([64, 1 << 20]))
def test_compiled_brute_force_gives_the_exact_lists(monkeypatch, seed, n, p, m, copies, integer, offset, threads,
                                                     block):
    """The compiled search (float32 products, certified candidates, exact float64 costs) lists
    exactly the m nearest points by the lists' own cost, ties by row order: with duplicates,
    integer coordinates (many exact ties), points far from the origin (float32's rounding of
    uncentred coordinates would lose their differences) and any blocking of the rows."""
    from budro._knn_numba import select_rows

    monkeypatch.setattr(transport, "KNN_BLOCK_BYTES", block)
    rng = np.random.default_rng(seed)
    Z = _clustered(rng, n, p, n_distinct=max(1, n // 3) if copies else None)
    if integer:
        Z = np.round(3 * Z)
    Z = Z + offset
    m = min(m, n)
    got = transport._compiled_brute_force(select_rows, Z, m, threads)
    np.testing.assert_array_equal(got, _reference_lists(Z, m))


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
def test_neighbor_cost_uses_the_compiled_brute_force_and_matches_sklearn_costs(monkeypatch):
    """Above the pair threshold (here 0) NeighborCost's brute force is the compiled search; its
    lists' costs are those of scikit-learn's search (the same m nearest, up to ties)."""
    rng = np.random.default_rng(5)
    Z = _clustered(rng, 400, 6)
    monkeypatch.setattr(transport, "KNN_KERNEL_MIN_PAIRS", 0)
    used = []
    real = transport._compiled_brute_force
    monkeypatch.setattr(transport, "_compiled_brute_force", lambda *a: used.append(1) or real(*a))
    compiled = NeighborCost(Z, 9, method="exact")
    assert used
    monkeypatch.setattr(transport, "USE_KNN_KERNEL", False)
    plain = NeighborCost(Z, 9, method="exact")
    assert len(used) == 1
    _check_lists(compiled)
    np.testing.assert_allclose(compiled.neighbor_costs, plain.neighbor_costs, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), integer=st.booleans(), m=st.integers(1, 60))
def test_compiled_brute_force_sampled_threshold_and_its_fallback(seed, integer, m):
    """Rows of n >= 512 points take the sampled threshold; rows whose m nearest hide from the
    sample (here: a cluster at every 16th row, the other rows far away) take the heap over all
    points.  Both give the exact lists."""
    from budro._knn_numba import select_rows

    rng = np.random.default_rng(seed)
    n = 1600
    Z = _clustered(rng, n, 4, n_distinct=n // 2)
    Z[np.arange(n) % 16 != 0] += 40.0  # only the sampled rows near the cluster at the origin
    if integer:
        Z = np.round(Z)
    for threads in (1, 2):
        np.testing.assert_array_equal(transport._compiled_brute_force(select_rows, Z, m, threads),
                                      _reference_lists(Z, m))


def _symmetric_redo(monkeypatch) -> list:
    """Records, per call of the symmetric search, how many rows it left to ``select_rows``."""
    left = []
    real = transport._symmetric_search
    monkeypatch.setattr(transport, "_symmetric_search", lambda *a: (lambda r: left.append(int(r.sum())) or r)(real(*a)))
    return left


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(600, 900), p=st.integers(1, 8), m=st.integers(1, 20),
       copies=st.booleans(), integer=st.booleans(), offset=st.sampled_from([0.0, 1e3, 1e6, -5e7, 1e9]),
       threads=st.sampled_from([1, 2, 3]), tile=st.sampled_from([(7, 13), (64, 64), (256, 2048)]),
       groups=st.integers(1, 3))
def test_symmetric_search_gives_the_exact_lists(monkeypatch, seed, n, p, m, copies, integer, offset, threads, tile,
                                                groups):
    """Each pair's product computed once (tiles of the upper triangle, both rows of a pair
    collecting, float32 keys kept): exactly the m nearest points by the lists' own cost, ties by
    row order, with duplicates, integer coordinates (many exact ties, at the m-th cost too),
    points far from the origin, any tile shape, thread and group count."""
    from budro._knn_numba import select_rows

    monkeypatch.setattr(transport, "KNN_SYMMETRIC_MIN_N", 0)
    monkeypatch.setattr(transport, "KNN_TILE_ROWS", tile[0])
    monkeypatch.setattr(transport, "KNN_TILE_COLS", tile[1])
    monkeypatch.setattr(transport, "KNN_GROUPS_PER_THREAD", groups)
    left = _symmetric_redo(monkeypatch)
    rng = np.random.default_rng(seed)
    Z = _clustered(rng, n, p, n_distinct=max(1, n // 3) if copies else None)
    if integer:
        Z = np.round(3 * Z)
    Z = Z + offset
    got = transport._compiled_brute_force(select_rows, Z, m, threads)
    assert len(left) == 1  # the symmetric search ran
    np.testing.assert_array_equal(got, _reference_lists(Z, m))


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), integer=st.booleans(), m=st.integers(1, 60), capacity=st.booleans())
def test_symmetric_search_rows_searched_again(monkeypatch, seed, integer, m, capacity):
    """Rows the symmetric search cannot certify are searched again by rows: those whose m
    nearest hide from the sample (a cluster at every 16th row, the other rows far away) and, with
    a capacity of m + 1 candidates a row, those collecting more.  The lists stay exact."""
    from budro._knn_numba import select_rows

    monkeypatch.setattr(transport, "KNN_SYMMETRIC_MIN_N", 0)
    if capacity:
        monkeypatch.setattr(transport, "_symmetric_capacity", lambda m: m + 1)
    left = _symmetric_redo(monkeypatch)
    rng = np.random.default_rng(seed)
    n = 1600
    Z = _clustered(rng, n, 4, n_distinct=n // 2)
    Z[np.arange(n) % 16 != 0] += 40.0
    if integer:
        Z = np.round(Z)
    for threads in (1, 2):
        np.testing.assert_array_equal(transport._compiled_brute_force(select_rows, Z, m, threads),
                                      _reference_lists(Z, m))
    assert len(left) == 2 and min(left) > 0


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
def test_compiled_search_certifies_translated_points_as_the_originals(monkeypatch):
    """The search's rounding bound follows the centred points only (the lists' cost sums squared
    coordinate differences, whose rounding is relative to the cost): the same points moved 1e6
    from the origin leave as few rows to search again as the originals, and the same lists."""
    from budro._knn_numba import select_rows

    monkeypatch.setattr(transport, "KNN_SYMMETRIC_MIN_N", 0)
    left = _symmetric_redo(monkeypatch)
    rng = np.random.default_rng(4)
    Z = _clustered(rng, 1500, 4)
    near = transport._compiled_brute_force(select_rows, Z, 10, 2)
    far = transport._compiled_brute_force(select_rows, Z + 1e6, 10, 2)
    assert left[1] <= left[0] + 15  # (the translated points' own rounding moves a few keys)
    np.testing.assert_array_equal(far, _reference_lists(Z + 1e6, 10))
    np.testing.assert_array_equal(near, _reference_lists(Z, 10))


@pytest.mark.parametrize("groups", [2, 4, 8, 16])
def test_round_robin_meets_every_pair_of_groups_once_in_disjoint_rounds(groups):
    rounds = transport._round_robin(groups)
    assert len(rounds) == groups - 1
    met = [pair for pairs in rounds for pair in pairs]
    assert sorted(met) == [(a, b) for a in range(groups) for b in range(a + 1, groups)]
    for pairs in rounds:  # no group twice in a round: no two threads write the same rows
        assert len({g for pair in pairs for g in pair}) == 2 * len(pairs) == groups


def test_symmetric_search_applies_only_where_its_keys_and_memory_allow(monkeypatch):
    monkeypatch.setattr(transport, "KNN_SYMMETRIC_MIN_N", 1000)
    assert transport._symmetric_applies(30_000, 100, 50.0, 1e-5)
    assert not transport._symmetric_applies(999, 5, 50.0, 1e-5)  # below KNN_SYMMETRIC_MIN_N
    monkeypatch.setattr(transport, "KNN_SYMMETRIC_MIN_N", 0)
    assert not transport._symmetric_applies(16 * 4 * transport._symmetric_sample_rank(100) - 1, 100, 50.0, 1e-5)  # too few sampled points
    assert transport._symmetric_applies(16 * 4 * transport._symmetric_sample_rank(100), 100, 50.0, 1e-5)
    assert not transport._symmetric_applies(30_000, 100, 1e31, 1e-5)  # keys beyond float32
    assert not transport._symmetric_applies(30_000, 100, 50.0, 2.0)  # a useless bound
    monkeypatch.setattr(transport, "KNN_SYMMETRIC_MAX_BYTES", 8 * 30_000 * transport._symmetric_capacity(100) - 1)
    assert not transport._symmetric_applies(30_000, 100, 50.0, 1e-5)  # candidates over the memory limit


@pytest.mark.skipif(not transport._sparse_kernels_available(), reason="numba is not installed (pip install budro[fast])")
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(0, 23), p=st.integers(1, 9))
def test_squared_distances_four_at_a_time_equal_one_at_a_time(seed, c, p):
    """The lists' exact squared distances, four rows at a time, equal the one-row loop's to the
    bit (each sum in coordinate order), for any count of rows, the query's own row and repeated
    rows among them."""
    from budro._lists_numba import sq_distances

    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(10, p)) * 10.0 ** rng.integers(-3, 4)
    ids = rng.integers(0, 10, size=c).astype(np.int64)
    q = int(rng.integers(0, 10))
    out = np.full(c, np.nan)
    sq_distances(Z, q, ids, c, out)
    expected = []
    for i in ids:
        s = 0.0
        for d in range(p):
            a = float(Z[i, d]) - float(Z[q, d])
            s += a * a
        expected.append(s)
    np.testing.assert_array_equal(out, np.array(expected))
