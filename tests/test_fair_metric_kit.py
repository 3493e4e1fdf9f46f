"""budro.testing.check_fair_metric: every registered fair metric passes; broken ones fail, by name."""

import numpy as np
import pytest

from budro import registry
from budro.exceptions import ValidationError
from budro.metrics import FairMetricLearner, FittedFairMetric, LinearMetric, ProtectedEuclidean
from budro.metrics._validation import check_protected, check_X
from budro.testing import check_fair_metric
from budro.testing._metrics import make_fair_metric_data

X, Y, PROTECTED = make_fair_metric_data(7)
N, D = X.shape


def _groups(X):
    return np.repeat(np.arange(len(X) // 4), 4)


def _pairs(X):
    gen = np.random.default_rng(3)
    pairs = gen.integers(0, len(X), size=(160, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]][:150]
    comparable = np.abs(X[pairs[:, 0], 2] - X[pairs[:, 1], 2]) < 0.6
    return pairs, comparable


def _explore_inputs(X):
    pairs, comparable = _pairs(X)
    # pairs hold row indices (renumbered when the kit reorders the rows); comparable is per pair
    return {"fit_params": {"pairs": pairs, "comparable": comparable}, "row_indices": ("pairs",), "row_aligned": ()}


#: What a learner needs beyond its defaults, per registered name (a new built-in without
#: defaults must add a line here, or test_every_registered_fair_metric fails creating it).
EXTRA = {
    "features": lambda X: {"params": {"features": [2, 3, 4]}},
    "mahalanobis": lambda X: {"params": {"matrix": np.diag([1.0, 2.0, 0.5, 1.0, 3.0])}},
    "svd-subspace": lambda X: {"fit_params": {"groups": _groups(X)}},
    "explore": _explore_inputs,
    # the example plugin ignores ``protected`` (it uses a fixed feature subset) and does not validate it
    "weighted-features": lambda X: {"params": {"features": [2, 3], "weights": [1.0, 2.0]}, "check_errors": False},
}

#: Further configurations of built-ins worth checking on their own.
VARIANTS = {
    "sensitive-subspace(n_components=1)": ("sensitive-subspace", {"params": {"n_components": 1}}),
    "sensitive-subspace(indicators=False)": ("sensitive-subspace", {"params": {"indicators": False}}),
    "sensitive-subspace(fit_linear_models=False)": ("sensitive-subspace", {"params": {"fit_linear_models": False}}),
    "mahalanobis(ignore_protected=False)": ("mahalanobis", {"params": {"matrix": np.eye(5), "ignore_protected": False},
                                                            "check_errors": True}),
    "explore(ignore_protected=False)": ("explore", {**_explore_inputs(X), "params": {"ignore_protected": False}}),
}


def _run(name, extra, X=X, protected=PROTECTED):
    learner = registry.create("fair_metric", name, **extra.get("params", {}))
    return check_fair_metric(learner, X, protected, y=Y, fit_params=extra.get("fit_params"),
                             row_aligned=extra.get("row_aligned"), row_indices=extra.get("row_indices", ()),
                             check_errors=extra.get("check_errors", True))


@pytest.mark.parametrize("name", registry.available("fair_metric"))
def test_every_registered_fair_metric(name):
    extra = EXTRA.get(name, lambda X: {})(X)
    report = _run(name, extra)
    assert "symmetry" in report["checked"] and "row-order invariance" in report["checked"]
    if registry.get("fair_metric", name).source == "budro":
        # budro's own metrics provide every optional part of the contract
        assert report["skipped"] == {}, report["skipped"]
        assert "zero distance along protected directions" in report["checked"]
        assert "embedding consistency" in report["checked"] and "positive semidefiniteness" in report["checked"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_of_builtin_metrics(variant):
    name, extra = VARIANTS[variant]
    _run(name, extra)


def test_builtin_metrics_with_a_continuous_and_a_grouped_protected_attribute():
    """Protected column 4 (continuous) and a one-hot group appended as columns 5, 6."""
    gen = np.random.default_rng(0)
    category = gen.integers(0, 2, N)
    Xg = np.column_stack([X, np.eye(2)[category]])
    for name in ("sensitive-subspace", "protected-euclidean", "svd-subspace"):
        extra = EXTRA.get(name, lambda X: {})(Xg)
        learner = registry.create("fair_metric", name, **extra.get("params", {}))
        for protected in ([4, [5, 6]], [[5, 6], 4]):  # the kit's error checks use the first attribute
            report = check_fair_metric(learner, Xg, protected, fit_params=extra.get("fit_params"))
            assert report["skipped"] == {}


def test_example_plugin_is_checked_when_installed():
    if "weighted-features" not in registry.available("fair_metric"):
        pytest.skip("the example plugin budro-weighted-features is not installed")
    report = _run("weighted-features", EXTRA["weighted-features"](X))
    assert report["skipped"]["errors"] == "check_errors=False"
    # what the kit would say about its (missing) validation of protected attributes:
    with pytest.raises(AssertionError, match="fails 'error for a protected column out of range': fit accepted it"):
        _run("weighted-features", {"params": {"features": [2, 3]}})


def test_default_data():
    report = check_fair_metric(ProtectedEuclidean())
    assert report["metric"].startswith("FeatureMetric") and "error for a constant protected attribute" in report["checked"]


def test_kit_rejects_non_learners_and_bad_arguments():
    with pytest.raises(TypeError, match="expects a fair-metric learner"):
        check_fair_metric(object())
    with pytest.raises(ValueError, match="'groups' is not in fit_params"):
        check_fair_metric(ProtectedEuclidean(), X, row_aligned=("groups",))


# ------------------------------------------------------------------------- the kit can fail


class Good(FairMetricLearner):
    """A correct learner (protected Euclidean) whose metric the subclasses below break."""

    metric_class = None

    def fit(self, X, protected=(), *, y=None):
        X = check_X(X)
        attributes = check_protected(protected, X.shape[1])
        for cols in attributes:
            if np.all(X[:, cols] == X[0, cols]):
                raise ValueError(f"protected attribute {cols} is constant")
        flat = [c for cols in attributes for c in cols]
        L = np.eye(X.shape[1])[:, [j for j in range(X.shape[1]) if j not in flat]]
        return self.make(X, L, flat)

    def make(self, X, L, flat):
        return (self.metric_class or LinearMetric)(L, protected=flat, protected_directions=np.eye(X.shape[1])[flat])

    def __repr__(self):
        return type(self).__name__


class _Asymmetric(FittedFairMetric):
    def pairwise(self, X1, X2=None):
        X1 = np.asarray(X1, float)
        X2 = X1 if X2 is None else np.asarray(X2, float)
        return ((X1[:, None, 1:] - X2[None, :, 1:]) ** 2).sum(-1) * (1.0 + 0.5 * np.tanh(X1[:, None, 2]))


class _SelfDistance(LinearMetric):
    def pairwise(self, X1, X2=None):
        return super().pairwise(X1, X2) + 0.1


class _Negative(LinearMetric):
    def pairwise(self, X1, X2=None):
        return -super().pairwise(X1, X2)


class _Indefinite(LinearMetric):
    @property
    def matrix_(self):
        return np.diag([0.0, 1.0, 1.0, 1.0, -1.0])

    def pairwise(self, X1, X2=None):
        X2 = X1 if X2 is None else X2
        diff = np.asarray(X1)[:, None, :] - np.asarray(X2)[None, :, :]
        return np.maximum(np.einsum("ijk,kl,ijl->ij", diff, self.matrix_, diff), 0.0)

    embed = None


class _EmbedMismatch(LinearMetric):
    def pairwise(self, X1, X2=None):
        return 2.0 * super().pairwise(X1, X2)


class _WrongMatrix(LinearMetric):
    @property
    def matrix_(self):
        return 2.0 * self.transform_ @ self.transform_.T


class _BadBlocks(LinearMetric):
    def iter_pairwise(self, X1, X2=None, *, block_bytes=0):
        yield 0, len(X1), self.pairwise(X1, X2)


class _BadCost(LinearMetric):
    def cost(self, X, **kwargs):
        from budro.transport import EmbeddingCost

        return EmbeddingCost(2.0 * self.embed(X))


class _Unpicklable(LinearMetric):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hook = lambda z: z


class _BadRoundTrip(LinearMetric):
    kind = "test-bad-round-trip"  # registered by the test_metric_classes fixture

    def to_dict(self):
        state = super().to_dict()
        state["transform_"] = (2.0 * self.transform_).tolist()
        return state


class _ComesBackAsBase(LinearMetric):
    """Writes its base class's kind: the dict reloads as a plain LinearMetric."""

    kind = "linear"


class _Scaled(LinearMetric):
    """A subclass with extra fitted state of its own, saved and registered properly."""

    kind = "test-scaled"
    _state_attributes = LinearMetric._state_attributes + ("scale_", "note_")

    def __init__(self, transform, *, scale=2.0, **kwargs):
        super().__init__(np.asarray(transform) * scale, **kwargs)
        self.scale_ = float(scale)
        self.note_ = ("fitted", 3)

    def _restore(self):
        self.note_ = tuple(self.note_)


class _DropsState(_Scaled):
    """Has its own kind but adds fitted state that its _state_attributes do not list."""

    kind = "test-drops-state"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.offset_ = np.ones(3)


@pytest.fixture
def test_metric_classes():
    """The default registry with a plugin listing this module's metric classes (restored afterwards)."""
    import budro
    from budro.registry import Registry, use_registry

    class Plugin:
        @budro.hookimpl
        def budro_fair_metrics(self):
            yield budro.FairMetricPlugin(name="test-scaled", factory=Good, capabilities={"embedding"},
                                         metric_classes=(_Scaled, _BadRoundTrip))

    reg = Registry(entry_points=False)
    reg.register(Plugin(), source="test-pkg")
    with use_registry(reg):
        yield reg


class AsymmetricLearner(Good):
    def make(self, X, L, flat):
        return _Asymmetric()


class IgnoresNothing(Good):
    """Claims the protected directions but does not ignore them."""

    def make(self, X, L, flat):
        return LinearMetric(np.eye(X.shape[1]), protected=flat, protected_directions=np.eye(X.shape[1])[flat])


class ReturnsMatrix(Good):
    def fit(self, X, protected=(), *, y=None):
        return np.eye(2)


class MutatesInput(Good):
    def fit(self, X, protected=(), *, y=None):
        metric = super().fit(X, protected, y=y)
        X[:, 3] += 1.0
        return metric


class OrderDependent(Good):
    """Scales the metric by the first training row: another row order, another metric."""

    def make(self, X, L, flat):
        return LinearMetric(L * (1.0 + abs(X[0, 2])), protected=flat, protected_directions=np.eye(X.shape[1])[flat])


class AcceptsAnyColumn(Good):
    def fit(self, X, protected=(), *, y=None):
        X = check_X(X)
        return LinearMetric(np.eye(X.shape[1]))


class AcceptsConstant(Good):
    def fit(self, X, protected=(), *, y=None):
        X = check_X(X)
        flat = list(check_protected(protected, X.shape[1])[0]) if protected else []
        return self.make(X, np.eye(X.shape[1])[:, 1:], flat)


class UnclearNonNumeric(Good):
    def fit(self, X, protected=(), *, y=None):
        np.asarray(X, dtype=float)  # numpy's "could not convert string to float" names no column
        return super().fit(X, protected, y=y)


def _with_metric(cls):
    return type(f"Learner{cls.__name__}", (Good,), {"metric_class": cls})()


@pytest.mark.parametrize("learner, prop", [
    (ReturnsMatrix(), "fit returns a fitted metric"),
    (_with_metric(_Negative), "non-negativity"),
    (AsymmetricLearner(), "symmetry"),
    (_with_metric(_SelfDistance), "zero distance between identical points"),
    (IgnoresNothing(), "zero distance along protected directions"),
    (_with_metric(_Indefinite), "positive semidefiniteness"),
    (_with_metric(_EmbedMismatch), "embedding consistency"),
    (_with_metric(_WrongMatrix), "matrix consistency"),
    (_with_metric(_BadBlocks), "blocked pairwise"),
    (_with_metric(_BadCost), "transport cost consistency"),
    (_with_metric(_Unpicklable), "persistence"),
    (_with_metric(_BadRoundTrip), "persistence"),
    (_with_metric(_ComesBackAsBase), "persistence"),
    (MutatesInput(), "input not modified"),
    (OrderDependent(), "row-order invariance"),
    (AcceptsAnyColumn(), "error for a protected column out of range"),
    (AcceptsConstant(), "error for a constant protected attribute"),
    (UnclearNonNumeric(), "error for a non-numeric protected attribute"),
], ids=lambda v: v if isinstance(v, str) else type(v).__name__)
def test_kit_fails_on_a_broken_metric(learner, prop, test_metric_classes):
    with pytest.raises(AssertionError, match=f"fails '{prop}'"):
        check_fair_metric(learner, X, PROTECTED, y=Y)


def test_the_good_reference_learner_passes():
    report = check_fair_metric(Good(), X, PROTECTED, y=Y)
    assert report["skipped"] == {}


# ------------------------------------------------------------------------- to_dict / metric_from_dict


def test_a_registered_subclass_round_trips_as_itself_with_its_state(test_metric_classes):
    import json

    from budro.metrics import metric_from_dict

    metric = _Scaled(np.eye(3)[:, :2], scale=3.0, protected=(2,), protected_directions=np.eye(3)[[2]])
    rebuilt = metric_from_dict(json.loads(json.dumps(metric.to_dict())))
    assert type(rebuilt) is _Scaled
    assert rebuilt.scale_ == 3.0 and rebuilt.note_ == ("fitted", 3)
    np.testing.assert_array_equal(rebuilt.transform_, metric.transform_)
    np.testing.assert_array_equal(rebuilt.pairwise(X[:5, :3]), metric.pairwise(X[:5, :3]))
    assert type(_Scaled.from_dict(metric.to_dict())) is _Scaled
    with pytest.raises(ValidationError, match="not a _Scaled"):
        _Scaled.from_dict(LinearMetric(np.eye(3)).to_dict())
    # the kit passes it (same class, same state, same distances)
    learner = _with_metric(_Scaled)
    assert "persistence" in check_fair_metric(learner, X, PROTECTED, y=Y)["checked"]


def test_to_dict_refuses_what_would_not_come_back():
    with pytest.raises(ValidationError, match="inherits kind 'linear'.*metric_classes"):
        _Unpicklable(np.eye(3)).to_dict()
    with pytest.raises(ValidationError, match="drop the fitted attribute.*offset_"):
        _DropsState(np.eye(3)).to_dict()


def test_metric_from_dict_imports_nothing_named_in_the_dict(test_metric_classes):
    import sys

    from budro.metrics import metric_from_dict

    sys.modules.pop("this_module_must_not_be_imported", None)
    with pytest.raises(ValidationError, match="unknown fair-metric kind 'this_module_must_not_be_imported.X'"):
        metric_from_dict({"kind": "this_module_must_not_be_imported.X", "format": 1})
    state = LinearMetric(np.eye(2)).to_dict()
    state["transform_"]["dtype"] = "|O"
    with pytest.raises(ValidationError, match="not numeric"):
        metric_from_dict(state)


def test_a_plugin_metric_class_cannot_take_a_builtin_kind():
    import warnings

    import budro
    from budro.exceptions import PluginWarning
    from budro.registry import Registry

    class Impostor(LinearMetric):
        kind = "subspace"

    class Plugin:
        @budro.hookimpl
        def budro_fair_metrics(self):
            yield budro.FairMetricPlugin(name="impostor", factory=Good, metric_classes=(Impostor,))

    reg = Registry(entry_points=False)
    reg.register(Plugin(), source="impostor-pkg")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert "impostor" not in reg.available("fair_metric")
    (w,) = [w for w in caught if issubclass(w.category, PluginWarning)]
    assert "impostor-pkg" in str(w.message) and "kind 'subspace'" in str(w.message)
    assert reg.metric_class("subspace").__name__ == "SubspaceMetric"


def test_the_example_plugin_metric_round_trips_when_installed():
    pytest.importorskip("budro_weighted_features")
    from budro_weighted_features import WeightedFeaturesMetric

    from budro.metrics import metric_from_dict

    metric = registry.create("fair_metric", "weighted-features", features=[2, 3], weights=[1.0, 4.0]).fit(X, PROTECTED)
    rebuilt = metric_from_dict(metric.to_dict())
    assert type(rebuilt) is WeightedFeaturesMetric
    assert rebuilt.features_ == (2, 3) and np.array_equal(rebuilt.weights_, [1.0, 4.0])
    np.testing.assert_array_equal(rebuilt.pairwise(X[:6]), metric.pairwise(X[:6]))
