"""The transport budget: nearest-neighbour unit, degenerate-metric and large-budget warnings."""

import contextlib
import warnings
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budro import registry
from budro.budget import (
    BudgetDiagnosis,
    DegenerateFairMetricWarning,
    LargeBudgetWarning,
    check_budget,
    diagnose_budget,
    effective_eps,
)
from budro.datasets import load_synthetic
from budro.exceptions import BudroWarning, ValidationError
from budro.metrics.base import FittedFairMetric

FAST = {"max_depth": 2, "nthread": 1}


def _euclidean():
    return registry.create("fair_metric", "sensitive-subspace").fit(np.zeros((3, 1)) + [[0.0], [1.0], [2.0]], [])


class _NoEmbedding(FittedFairMetric):
    """A metric known only through pairwise distances (weighted Euclidean)."""

    def __init__(self, w):
        self.w = np.asarray(w, dtype=float)

    def pairwise(self, X1, X2=None):
        X2 = X1 if X2 is None else X2
        diff = X1[:, None, :] - X2[None, :, :]
        return np.einsum("ijk,k->ij", diff**2, self.w)


def _brute(X, y, w=None):
    w = np.ones(X.shape[1]) if w is None else np.asarray(w)
    D = np.einsum("ijk,k->ij", (X[:, None, :] - X[None, :, :]) ** 2, w)
    np.fill_diagonal(D, np.inf)
    nearest = np.where(D > 1e-12, D, np.inf).min(axis=1)
    opposite = np.where(y[None, :] != y[:, None], np.where(D <= 1e-12, 0.0, D), np.inf).min(axis=1)
    n = len(X)
    zero_share = (D <= 1e-12).sum() / (n * (n - 1))
    return np.median(nearest[np.isfinite(nearest)]), np.sort(opposite), zero_share


def _metric_for(X, protected=()):
    return registry.create("fair_metric", "sensitive-subspace", fit_linear_models=False).fit(X, list(protected))


def test_diagnosis_matches_brute_force_with_duplicates_and_both_metric_kinds():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    X = np.vstack([X, X[:10]])  # ten duplicated points: distance 0 to their copy
    y = (X[:, 0] > 0).astype(int)
    y[40:45] = 1 - y[40:45]  # five duplicates with the other label: relabelled for free
    scale, opposite, zero_share = _brute(X, y)
    d = diagnose_budget(_metric_for(X), X, y, max_samples=None)
    assert d.nn_scale == pytest.approx(scale, rel=1e-9)
    np.testing.assert_allclose(d.opposite_distances, opposite, rtol=1e-9, atol=1e-12)
    assert d.zero_pair_share == pytest.approx(zero_share)
    assert d.free_relabel_share == pytest.approx(10 / 50)  # both copies of each of the five pairs
    w = [1.0, 4.0, 0.25]
    scale_w, opposite_w, _ = _brute(X, y, w)
    dw = diagnose_budget(_NoEmbedding(w), X, y, max_samples=None)
    assert dw.nn_scale == pytest.approx(scale_w, rel=1e-9)
    np.testing.assert_allclose(dw.opposite_distances, opposite_w, rtol=1e-9, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.floats(0.01, 100.0), st.integers(0, 10_000))
def test_nn_scale_is_in_squared_distance_units(c, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(30, 2))
    y = rng.integers(0, 2, 30)
    if len(set(y)) < 2:
        y[0] = 1 - y[-1]
    d1 = diagnose_budget(_metric_for(X), X, y)
    dc = diagnose_budget(_metric_for(c * X), c * X, y)
    assert dc.nn_scale == pytest.approx(c**2 * d1.nn_scale, rel=1e-6)
    # the same share of points is relabelled by the same budget in nn units, whatever the scale
    for eps in (0.1, 1.0, 5.0):
        assert dc.relabel_share(effective_eps(eps, "nn", dc)) == d1.relabel_share(effective_eps(eps, "nn", d1))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=12), st.floats(0.0, 20.0))
def test_relabel_share_is_the_largest_affordable_share(distances, eps):
    d = BudgetDiagnosis(nn_scale=1.0, zero_pair_share=0.0, opposite_distances=np.sort(distances),
                        n_rows=len(distances), n_sampled=len(distances), zero_tolerance=0.0)
    m = len(distances)
    best = 0
    for mask in range(1 << m):  # every subset of points the adversary could move
        chosen = [distances[i] for i in range(m) if mask >> i & 1]
        if sum(chosen) / m <= eps * (1 + 1e-12):
            best = max(best, len(chosen))
    assert d.relabel_share(eps) == pytest.approx(best / m)
    share = d.relabel_share(eps)
    assert d.relabel_share(d.eps_for_relabel_share(share)) >= share


def test_sampling_is_seeded_and_close_to_the_exact_scale():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 4))
    y = (X[:, 1] > 0).astype(int)
    metric = _metric_for(X)
    exact = diagnose_budget(metric, X, y, max_samples=None)
    a = diagnose_budget(metric, X, y, max_samples=400, random_state=3)
    b = diagnose_budget(metric, X, y, max_samples=400, random_state=3)
    assert a.n_sampled == 400 and a.nn_scale == b.nn_scale
    assert a.nn_scale == pytest.approx(exact.nn_scale, rel=0.15)


def test_readme_synthetic_with_protected_x1_is_a_degenerate_metric():
    ds = load_synthetic()
    X = ds.X.to_numpy()
    metric = registry.create("fair_metric", "sensitive-subspace").fit(X, [0], y=ds.y)
    d = diagnose_budget(metric, X, ds.y)
    assert d.zero_pair_share == 1.0 and d.nn_scale == 0.0
    with pytest.warns(DegenerateFairMetricWarning, match=r"protected=\['x1'\]: 100.0% of the pairs"):
        check_budget(d, 0.1, protected=["x1"])
    assert issubclass(DegenerateFairMetricWarning, BudroWarning)


def test_large_budget_warning_names_the_share_and_a_smaller_budget():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 2))
    y = (X[:, 0] > 0).astype(int)
    d = diagnose_budget(_metric_for(X), X, y)
    small = d.eps_for_paid_relabel_share(0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_budget(d, small) == []  # below the threshold: quiet
    big = 2 * d.eps_for_relabel_share(1.0)
    with pytest.warns(LargeBudgetWarning, match=r"move 100% of the training points onto a point with another label"):
        check_budget(d, big)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_budget(d, 0.0) == []


def test_eps_unit_is_checked():
    d = BudgetDiagnosis(2.0, 0.0, np.array([1.0]), 1, 1, 0.0)
    assert effective_eps(0.5, "raw", d) == 0.5 and effective_eps(0.5, "nn", d) == 1.0
    with pytest.raises(ValidationError, match="eps_unit must be one of 'raw', 'nn'"):
        effective_eps(0.5, "median", d)
    with pytest.raises(ValidationError, match="max_samples"):
        diagnose_budget(_euclidean(), np.zeros((3, 1)), np.array([0, 1, 0]), max_samples=0)


# ---------------------------------------------------------------------------------- in the estimator


def test_estimator_nn_unit_trains_with_eps_times_the_scale():
    from budro import BuDROClassifier

    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=120) > 0).astype(int)
    nn = BuDROClassifier(eps=0.5, eps_unit="nn", n_steps=5, backend_params=FAST, random_state=0).fit(X, y)
    assert nn.eps_scale_ == pytest.approx(diagnose_budget(nn.fair_metric_, X, y, random_state=0).nn_scale)
    assert nn.eps_effective_ == pytest.approx(0.5 * nn.eps_scale_)
    raw = BuDROClassifier(eps=nn.eps_effective_, n_steps=5, backend_params=FAST, random_state=0).fit(X, y)
    assert raw.eps_effective_ == raw.eps and raw.eps_scale_ == nn.eps_scale_
    assert [r.robust_loss for r in raw.history_] == [r.robust_loss for r in nn.history_]
    assert max(r.transport_cost for r in nn.history_) <= nn.eps_effective_ * (1 + 1e-6)
    # the scale follows the table: the same data in other units gives the same relabel share
    scaled = BuDROClassifier(eps=0.5, eps_unit="nn", n_steps=5, backend_params=FAST, random_state=0).fit(10 * X, y)
    assert scaled.eps_scale_ == pytest.approx(100 * nn.eps_scale_)
    assert scaled.budget_.relabel_share(scaled.eps_effective_) == nn.budget_.relabel_share(nn.eps_effective_)


def test_estimator_warns_on_the_readme_example_with_protected_x1():
    from budro import BuDROClassifier

    ds = load_synthetic()
    with pytest.warns(DegenerateFairMetricWarning, match="100.0% of the pairs"):
        clf = BuDROClassifier(protected=["x1"], n_steps=3, backend_params=FAST).fit(ds.X, ds.y)
    assert clf.eps_scale_ == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", BudroWarning)
        BuDROClassifier(protected=["x1"], eps=0.0, n_steps=3, backend_params=FAST).fit(ds.X, ds.y)  # plain boosting
    with pytest.raises(ValidationError, match="eps_unit must be one of"):
        BuDROClassifier(eps_unit="NN", n_steps=3).fit(ds.X, ds.y)


@pytest.mark.parametrize("through", ["diagnose_budget", "fit"])
def test_huge_features_give_one_numerical_error_and_no_overflow_warning(through):
    from budro import BuDROClassifier
    from budro.exceptions import NumericalError

    X = np.random.default_rng(0).normal(size=(40, 3))
    X[:, 0] *= 1e155  # squared distances overflow float64
    y = np.arange(40) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's overflow RuntimeWarnings would fail the test
        # fit refuses the features before the fair metric is fitted; diagnose_budget names itself
        where = r"the fair metric's input features" if through == "fit" else r"budget check\)"
        with pytest.raises(NumericalError, match=where + r": fair-embedding values up to .*e\+155.*standardise"):
            if through == "fit":
                BuDROClassifier(n_steps=2, backend_params=FAST).fit(X, y)
            else:
                diagnose_budget(_metric_for(X), X, y)


def test_a_metric_without_embedding_giving_inf_distances_is_refused():
    from budro.exceptions import NumericalError

    X = np.random.default_rng(1).normal(size=(30, 2))
    with pytest.raises(NumericalError, match="_NoEmbedding gives non-finite distances"):
        diagnose_budget(_NoEmbedding([np.inf, 1.0]), X, np.arange(30) % 2)


class _Embedded(FittedFairMetric):
    """A Mahalanobis-style metric given by its embedding (weighted coordinates)."""

    def __init__(self, w):
        self.w = np.sqrt(np.asarray(w, dtype=float))

    def embed(self, X):
        return np.asarray(X, dtype=float) * self.w

    def pairwise(self, X1, X2=None):
        X2 = X1 if X2 is None else X2
        return ((self.embed(X1)[:, None, :] - self.embed(X2)[None, :, :]) ** 2).sum(axis=2)


def _tile_paths():
    """The embedding scan's tile reductions: numpy's passes, and the compiled one where numba is
    installed (forced on at any size)."""
    paths = [pytest.param(False, id="numpy")]
    try:
        import numba  # noqa: F401

        paths.append(pytest.param(True, id="compiled"))
    except ImportError:
        paths.append(pytest.param(True, id="compiled", marks=pytest.mark.skip(
            reason="numba is not installed: pip install -e '.[fast]' for the compiled tile reduction")))
    return paths


@contextlib.contextmanager
def _tile_path(compiled: bool, tile_bytes: int | None = None):
    from budro import budget

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(budget, "USE_KERNEL", compiled))
        stack.enter_context(mock.patch.object(budget, "KERNEL_MIN_PAIRS", 0))
        if tile_bytes is not None:
            stack.enter_context(mock.patch.object(budget, "_TILE_BYTES", tile_bytes))
            stack.enter_context(mock.patch.object(budget, "_BLOCK_BYTES", tile_bytes))
        yield


@pytest.mark.parametrize("compiled", _tile_paths())
@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 60), d=st.integers(1, 4), n_labels=st.integers(1, 3), samples=st.integers(1, 70),
       tile_rows=st.integers(1, 7), seed=st.integers(0, 2**31))
def test_embedding_scan_by_label_tiles_equals_the_generic_scan(compiled, n, d, n_labels, samples, tile_rows, seed):
    """The embedding's scan (training rows in tiles of one label each, here of a few rows) gives
    the distance-only metric's row-block scan: the same nearest scale, opposite-label distances
    and zero pairs, with duplicated points (zero distances) and up to three labels; by numpy's
    passes and by the compiled reduction."""
    rng = np.random.default_rng(seed)
    X = rng.integers(-1, 2, size=(n, d)).astype(float)
    y = rng.integers(0, n_labels, n) * 7 - 3  # labels are any values
    w = rng.integers(1, 4, d)
    with _tile_path(compiled, 8 * tile_rows * min(samples, n)):
        a = diagnose_budget(_Embedded(w), X, y, max_samples=samples, random_state=seed)
        b = diagnose_budget(_NoEmbedding(w), X, y, max_samples=samples, random_state=seed)
    assert a.n_sampled == b.n_sampled and a.zero_pair_share == b.zero_pair_share
    assert a.nn_scale == pytest.approx(b.nn_scale, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(a.opposite_distances, b.opposite_distances, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("labels", [1, 3])
def test_compiled_tile_reduction_is_numpys_to_the_bit(labels):
    """The compiled tile reduction makes numpy's operations in numpy's order: the same diagnosis
    to the bit, on real-valued points with copies (zero pairs within and across labels), points
    far from the origin and sampled rows whose own point falls in every position of a tile."""
    pytest.importorskip("numba", reason="numba is not installed: pip install -e '.[fast]'")
    rng = np.random.default_rng(5)
    X = rng.normal(size=(700, 6)) * rng.uniform(0.1, 3.0, 6) + 50.0
    X[100:160] = X[:60]  # copies
    y = rng.integers(0, labels, 700)
    out = []
    for compiled in (False, True):
        with _tile_path(compiled, 8 * 13 * 300):  # tiles of 13 rows
            out.append(diagnose_budget(_Embedded(np.ones(6)), X, y, max_samples=300, random_state=2))
    a, b = out
    assert a.zero_pair_share > 0 and a.zero_pair_share == b.zero_pair_share
    assert a.nn_scale == b.nn_scale
    np.testing.assert_array_equal(a.opposite_distances, b.opposite_distances)
