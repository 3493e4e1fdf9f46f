"""Evaluation: consistency, group gaps and the certificate against hand-computed values; any classifier."""

import math

import numpy as np
import pytest

from budro import registry
from budro.datasets import ColumnAssignments, load_synthetic
from budro.evaluation import Certificate, counterfactual_consistency, evaluate, fairness_certificate, group_gaps
from budro.exceptions import ValidationError
from budro.metrics.base import MahalanobisMetric


class LinearRule:
    """predict(x) = 1[0.5 x0 + x1 > 1.2]: a fixed, hand-checkable classifier."""

    classes_ = np.array([0, 1])

    def predict(self, X):
        X = np.asarray(X, dtype=float)
        return (0.5 * X[:, 0] + X[:, 1] > 1.2).astype(int)


class TableModel:
    """P(y = 1 | x) = x0 (column 0 holds the probability), labels 0 / 1."""

    classes_ = np.array([0, 1])

    def predict_proba(self, X):
        p = np.asarray(X, dtype=float)[:, 0]
        return np.column_stack([1.0 - p, p])

    def predict(self, X):
        return (np.asarray(X, dtype=float)[:, 0] > 0.5).astype(int)


class SecondCoordinate(MahalanobisMetric):
    """d(x, x')^2 = (x1 - x1')^2."""

    def embed(self, X):
        return np.asarray(X, dtype=float)[:, 1:2]


# ------------------------------------------------------------------------------ consistency


def test_consistency_hand_computed():
    X = np.array([[0.0, 0.2], [1.0, 0.2], [0.0, 0.9], [1.0, 0.9]])
    model = LinearRule()
    # x0 := 0 -> predictions 1[x1 > 1.2] = 0 0 0 0; x0 := 1 -> 1[x1 > 0.7] = 0 0 1 1
    definition = ColumnAssignments.product({0: [0.0, 1.0]})
    assert counterfactual_consistency(model, X, definition) == 0.5
    # precomputed copies work the same
    assert counterfactual_consistency(model, X, definition(X)) == 0.5
    # a third copy x0 := 3 (1[x1 > -0.3] = 1 1 1 1) leaves no point consistent
    assert counterfactual_consistency(model, X, ColumnAssignments.product({0: [0.0, 1.0, 3.0]})) == 0.0
    # one copy is a flip, compared with X itself: X predicts 0 0 0 1, x0 := 1 predicts 0 0 1 1
    assert counterfactual_consistency(model, X, ColumnAssignments([{0: 1.0}])) == 0.75
    # ... unless told otherwise; including X with two copies: 0 0 0 1 / 0 0 0 0 / 0 0 1 1
    assert counterfactual_consistency(model, X, definition, include_original=True) == 0.5
    X2 = np.array([[0.0, 0.2], [1.0, 0.2], [0.0, 0.9], [1.0, 0.9], [0.0, 2.0]])
    assert counterfactual_consistency(model, X2, definition, include_original=True) == pytest.approx(3 / 5)


def test_consistency_errors():
    X = np.zeros((4, 2))
    with pytest.raises(ValidationError, match="counterfactuals must be a callable"):
        counterfactual_consistency(LinearRule(), X, [])
    with pytest.raises(ValidationError, match="at least two versions"):
        counterfactual_consistency(LinearRule(), X, [X], include_original=False)
    with pytest.raises(ValidationError, match="copy 1 has 3 rows, X has 4"):
        counterfactual_consistency(LinearRule(), X, [X, X[:3]])
    with pytest.raises(ValidationError, match="with a predict"):
        counterfactual_consistency(object(), X, [X, X])


# ------------------------------------------------------------------------------ group gaps


def test_group_gaps_hand_computed():
    y_true = np.array([1, 1, 0, 0, 1, 1, 0, 0])
    group = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    y_pred = np.array([1, 0, 0, 0, 1, 1, 0, 0])
    # group 0: TPR 1/2, TNR 1; group 1: TPR 1, TNR 1 -> Gap_1 = -1/2, Gap_0 = 0
    gaps = group_gaps(y_true, y_pred, group)
    assert gaps.gaps == {0: 0.0, 1: -0.5}
    assert gaps.gap_max == 0.5
    assert gaps.gap_rms == pytest.approx(math.sqrt((0.25 + 0.0) / 2))
    assert gaps.groups == (0, 1)
    flipped = group_gaps(y_true, y_pred, group, protected_value=1)
    assert flipped.gaps == {0: 0.0, 1: 0.5} and flipped.gap_max == 0.5

    # unequal group sizes, string groups: g0 = "a" (TPR 2/3, TNR 1/2), g1 = "b" (TPR 0, TNR 1)
    y_true = np.array([1, 1, 1, 0, 0, 1, 0])
    y_pred = np.array([1, 1, 0, 1, 0, 0, 0])
    group = np.array(["a", "a", "a", "a", "a", "b", "b"])
    gaps = group_gaps(y_true, y_pred, group)
    assert gaps.gaps[1] == pytest.approx(2 / 3) and gaps.gaps[0] == pytest.approx(-1 / 2)
    assert gaps.gap_max == pytest.approx(2 / 3)
    assert gaps.gap_rms == pytest.approx(math.sqrt(((2 / 3) ** 2 + 0.25) / 2))


def test_group_gaps_errors_and_empty_cells():
    with pytest.raises(ValidationError, match="exactly two groups"):
        group_gaps([0, 1, 1], [0, 1, 1], [0, 1, 2])
    with pytest.raises(ValidationError, match="same length"):
        group_gaps([0, 1], [0, 1, 1], [0, 1])
    with pytest.raises(ValidationError, match="protected_value=5"):
        group_gaps([0, 1], [0, 1], [0, 1], protected_value=5)
    with pytest.warns(RuntimeWarning, match="no point with label"):
        gaps = group_gaps([0, 1, 0], [0, 1, 1], [0, 0, 1])  # group 1 has no label 1
    assert math.isnan(gaps.gaps[1]) and math.isnan(gaps.gap_max)


# ------------------------------------------------------------------------------ certificate


def _two_points():
    # point 0: P(1) = 0.9 at x1 = 0; point 1: P(1) = 0.2 at x1 = 1; both labelled 1; C_01 = 1
    X = np.array([[0.9, 0.0], [0.2, 1.0]])
    return X, np.array([1, 1])


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.25, 0.5, 2.0])
def test_certificate_hand_computed(eps):
    """Moving mass t <= 1/2 of point 0 onto x_1 costs t and gains t * (log 0.9 - log 0.2)."""
    X, y = _two_points()
    cert = fairness_certificate(TableModel(), X, y, SecondCoordinate(), eps)
    t = min(eps, 0.5)
    empirical = -(math.log(0.9) + math.log(0.2)) / 2
    assert cert.empirical_loss == pytest.approx(empirical)
    assert cert.gap == pytest.approx(t * math.log(4.5), abs=1e-12)
    assert cert.robust_loss == pytest.approx(empirical + t * math.log(4.5))
    assert cert.n_samples == 2 and cert.eps == eps and cert.loss == "log_loss"
    assert math.isnan(cert.ci_low) and cert.bootstrap_gaps.size == 0
    # 0-1 loss: point 0 is right (loss 0), x_1 is predicted 0 (loss 1 for label 1)
    zero_one = fairness_certificate(TableModel(), X, y, SecondCoordinate(), eps, loss="zero_one")
    assert zero_one.empirical_loss == 0.5
    assert zero_one.gap == pytest.approx(t, abs=1e-12)


def test_certificate_labels_follow_classes_():
    class Named(TableModel):
        classes_ = np.array(["bad", "good"])

    X, _ = _two_points()
    cert = fairness_certificate(Named(), X, np.array(["good", "good"]), SecondCoordinate(), 0.25)
    assert cert.gap == pytest.approx(0.25 * math.log(4.5))
    with pytest.raises(ValidationError, match="label 'ugly'"):
        fairness_certificate(Named(), X, np.array(["good", "ugly"]), SecondCoordinate(), 0.25)


@pytest.fixture(scope="module")
def toy():
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=240, n_features=5, n_informative=3, random_state=0)
    X_train, y_train, X_test, y_test = X[:160], y[:160], X[160:], y[160:]
    metric = registry.create("fair_metric", "sensitive-subspace").fit(X_train, protected=[0])
    return X_train, y_train, X_test, y_test, metric


def _models():
    from sklearn.ensemble import RandomForestClassifier
    from xgboost import XGBClassifier

    return [RandomForestClassifier(n_estimators=30, random_state=0, n_jobs=1),
            XGBClassifier(n_estimators=30, max_depth=3, n_jobs=1, random_state=0)]


@pytest.mark.parametrize("model", _models(), ids=["random-forest", "xgboost"])
def test_certificate_of_plain_models(toy, model):
    X_train, y_train, X_test, y_test, metric = toy
    model.fit(X_train, y_train)
    at_zero = fairness_certificate(model, X_test, y_test, metric, 0.0)
    assert at_zero.gap == pytest.approx(0.0, abs=1e-12)
    assert at_zero.robust_loss == pytest.approx(at_zero.empirical_loss)
    gaps = [fairness_certificate(model, X_test, y_test, metric, eps).gap for eps in (0.01, 0.1, 1.0)]
    assert all(g >= 0.0 for g in gaps)
    assert gaps[0] <= gaps[1] + 1e-12 <= gaps[2] + 2e-12  # a larger budget never lowers L(f)
    assert gaps[2] > 0.0
    lp = fairness_certificate(model, X_test, y_test, metric, 0.1, solver="lp")
    assert lp.gap == pytest.approx(gaps[1], rel=1e-7, abs=1e-9)


def test_certificate_bootstrap_neighbors_and_subsampling(toy):
    from sklearn.linear_model import LogisticRegression

    X_train, y_train, X_test, y_test, metric = toy
    model = LogisticRegression().fit(X_train, y_train)
    exact = fairness_certificate(model, X_test, y_test, metric, 0.5)
    boot = fairness_certificate(model, X_test, y_test, metric, 0.5, n_bootstrap=15, random_state=1)
    assert boot.gap == exact.gap
    assert boot.bootstrap_gaps.shape == (15,) and np.all(boot.bootstrap_gaps >= 0.0)
    assert boot.ci_low <= boot.ci_high
    assert boot.ci_low == pytest.approx(np.quantile(boot.bootstrap_gaps, 0.025))
    again = fairness_certificate(model, X_test, y_test, metric, 0.5, n_bootstrap=15, random_state=1)
    np.testing.assert_array_equal(again.bootstrap_gaps, boot.bootstrap_gaps)
    # nearest neighbours only: a restriction of the LP, so never above the exact value; all n = exact
    near = fairness_certificate(model, X_test, y_test, metric, 0.5, n_neighbors=5)
    assert 0.0 <= near.gap <= exact.gap + 1e-12
    full = fairness_certificate(model, X_test, y_test, metric, 0.5, n_neighbors=len(y_test))
    assert full.gap == pytest.approx(exact.gap, rel=1e-9, abs=1e-12)
    sub = fairness_certificate(model, X_test, y_test, metric, 0.5, max_samples=30, random_state=0)
    assert sub.n_samples == 30 and sub.gap >= 0.0
    assert isinstance(exact, Certificate) and set(exact.as_dict()) == {
        "certificate", "certificate_ci_low", "certificate_ci_high", "robust_loss", "empirical_loss"}


def test_certificate_errors(toy):
    X, y = _two_points()
    metric = SecondCoordinate()
    with pytest.raises(ValidationError, match="eps must be a finite number >= 0"):
        fairness_certificate(TableModel(), X, y, metric, -1.0)
    with pytest.raises(ValidationError, match="loss must be one of"):
        fairness_certificate(TableModel(), X, y, metric, 0.1, loss="hinge")
    with pytest.raises(ValidationError, match="metric must be a fitted fair metric"):
        fairness_certificate(TableModel(), X, y, object(), 0.1)
    with pytest.raises(ValidationError, match="n_bootstrap must be an integer >= 0"):
        fairness_certificate(TableModel(), X, y, metric, 0.1, n_bootstrap=-1)
    with pytest.raises(ValidationError, match=r"confidence_level must lie in \(0, 1\)"):
        fairness_certificate(TableModel(), X, y, metric, 0.1, confidence_level=1.5)
    with pytest.raises(ValidationError, match="y has 3 labels but X has 2 rows"):
        fairness_certificate(TableModel(), X, np.array([1, 1, 0]), metric, 0.1)
    with pytest.raises(ValidationError, match="predict_proba"):
        fairness_certificate(LinearRule(), X, y, metric, 0.1)
    with pytest.raises(ValidationError, match="solver must be a solver name"):
        fairness_certificate(TableModel(), X, y, metric, 0.1, solver=3)


# ------------------------------------------------------------------------------ evaluate


@pytest.mark.parametrize("model", _models(), ids=["random-forest", "xgboost"])
def test_evaluate_plain_models_on_a_dataset(model):
    from sklearn.metrics import accuracy_score, balanced_accuracy_score

    ds = load_synthetic(random_state=0)
    train, test = ds.split(np.arange(100), np.arange(100, 150))
    model.fit(train.X, train.y)
    metric = registry.create("fair_metric", "sensitive-subspace", fit_linear_models=False).fit(
        train.X.to_numpy(), protected=train.protected_indices)
    row = evaluate(model, test, metric=metric, eps=0.05, certificate_params={"n_bootstrap": 3, "random_state": 0})
    pred = model.predict(test.X)
    assert row["n_samples"] == 50
    assert row["accuracy"] == accuracy_score(test.y, pred)
    assert row["balanced_accuracy"] == balanced_accuracy_score(test.y, pred)
    assert row["consistency[cluster]"] == counterfactual_consistency(model, test.X, test.counterfactuals["cluster"])
    gaps = group_gaps(test.y, pred, test.groups["x1"])
    assert row["gap_max[x1]"] == gaps.gap_max and row["gap_rms[x1]"] == gaps.gap_rms
    assert row["certificate"] >= 0.0 and row["certificate_ci_low"] <= row["certificate_ci_high"]
    assert all(0.0 <= row[k] <= 1.0 for k in ("accuracy", "balanced_accuracy", "consistency[cluster]", "gap_max[x1]"))


@pytest.mark.parametrize("model", _models(), ids=["random-forest", "xgboost"])
def test_evaluate_on_german(data_home, model):
    from budro.datasets import load_german

    train, test = load_german().train_test_split(random_state=0)
    model.fit(train.X, train.y)
    row = evaluate(model, test)
    assert set(row) == {"n_samples", "accuracy", "balanced_accuracy", "consistency[S-cons]", "gap_max[age]", "gap_rms[age]"}
    assert row["n_samples"] == 200
    assert 0.5 < row["accuracy"] <= 1.0 and 0.0 <= row["consistency[S-cons]"] <= 1.0
    assert 0.0 <= row["gap_rms[age]"] <= row["gap_max[age]"] <= 1.0


def test_evaluate_with_arrays_and_errors():
    X = np.array([[0.0, 0.2], [1.0, 0.2], [0.0, 0.9], [1.0, 0.9]])
    y = np.array([0, 0, 1, 1])
    row = evaluate(LinearRule(), X, y, groups={"g": np.array([0, 1, 0, 1])},
                   counterfactuals={"flip": ColumnAssignments.product({0: [0.0, 1.0]})})
    # predictions 0 0 0 1: accuracy 3/4, balanced (1 + 1/2) / 2; g0 TPR 0, g1 TPR 1, TNR both 1
    assert row == {"n_samples": 4, "accuracy": 0.75, "balanced_accuracy": 0.75, "consistency[flip]": 0.5,
                   "gap_max[g]": 1.0, "gap_rms[g]": pytest.approx(math.sqrt(0.5))}
    with pytest.raises(ValidationError, match="y is required"):
        evaluate(LinearRule(), X)
    with pytest.raises(ValidationError, match="y must not be given"):
        evaluate(LinearRule(), load_synthetic(), y)
    with pytest.raises(ValidationError, match="metric and eps go together"):
        evaluate(LinearRule(), X, y, eps=0.1)
    with pytest.raises(ValidationError, match="groups must be a mapping"):
        evaluate(LinearRule(), X, y, groups=[1, 2])


def test_evaluate_gap_of_rows_holding_one_group_is_nan_with_a_warning():
    """A small test split may hold one of the two groups only: its gap is NaN (with a
    GroupGapWarning), the other metrics are computed; more than two groups is still an error."""
    from budro.evaluation import GroupGapWarning

    X = np.array([[0.0, 0.2], [1.0, 0.2], [0.0, 0.9], [1.0, 0.9]])
    y = np.array([0, 0, 1, 1])
    with pytest.warns(GroupGapWarning, match=r"gap of group 'g' is NaN: the 4 rows hold only one of its groups \(1\)"):
        row = evaluate(LinearRule(), X, y, groups={"g": np.ones(4, dtype=int), "h": np.array([0, 1, 0, 1])})
    assert math.isnan(row["gap_max[g]"]) and math.isnan(row["gap_rms[g]"])
    assert row["accuracy"] == 0.75 and row["gap_max[h]"] == 1.0
    with pytest.raises(ValidationError, match="exactly two groups"):
        evaluate(LinearRule(), X, y, groups={"g": np.array([0, 1, 2, 2])})
    with pytest.warns(GroupGapWarning):  # also a subclass of RuntimeWarning, as before
        group_gaps([0, 1, 0], [0, 1, 1], [0, 0, 1])
