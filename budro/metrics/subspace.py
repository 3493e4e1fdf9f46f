"""The sensitive-subspace fair metric (Yurochkin et al. 2020; the paper's Appendix B.2).

Protected directions are the indicator vectors of the protected features plus, for each protected
attribute, the normal vector(s) of a linear model that predicts it from the other features:

* a binary attribute (one column, two values): logistic regression with an l2 penalty (the paper
  used strength 0.1);
* a continuous attribute (one column, more than two values): RidgeCV;
* a categorical attribute with more than two values, given either as a group of one-hot columns
  (``protected=[[3, 4, 5]]`` or ``categorical=[[3, 4, 5]]``) or as one integer-coded column
  declared in ``categorical``: one-vs-rest logistic regressions, one normal vector per category.

With ``P_A`` the orthogonal projector onto the span ``A`` of the directions (or onto its top
``n_components`` singular directions, as SenSR did for Adult)::

    d(x, x')^2 = ||(I - P_A)(x - x')||^2 = ||z - z'||^2,   z = N^T x,

where the columns of ``N`` are an orthonormal basis of the orthogonal complement of ``A``, so
the transport cost is formed from the embedding ``z`` without an n x n matrix.  The paper's
``project`` baseline trains plain boosting on ``metric.project(X) = X (I - P_A)``.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import numpy as np
import scipy.linalg

from budro._threads import pool_limits
from budro.exceptions import ValidationError
from budro.metrics._validation import (
    check_attribute_varies,
    check_bool,
    check_columns,
    check_int,
    check_n_features,
    check_protected,
    check_X,
    flatten_protected,
)
from budro.metrics.base import FairMetricLearner
from budro.metrics.linear import LinearMetric

__all__ = ["SensitiveSubspace", "SubspaceMetric", "subspace_basis"]


class SubspaceMetric(LinearMetric):
    """A fitted metric that ignores a linear subspace ``A`` (the span of ``basis_``).

    Parameters
    ----------
    directions : (r, d) array
        The protected directions found, one per row.
    direction_labels : list of str
        What each direction is, e.g. ``"indicator[3]"``, ``"logistic[3]"``, ``"ovr[4]"``, ``"svd[0]"``.
    n_features : int
    models : dict
        The fitted linear models (empty when none were fitted).
    protected : sequence of int
        The protected columns.
    basis : (d, s) array, optional
        Orthonormal basis of the ignored subspace; default an orthonormal basis of the span of
        ``directions``.
    singular_values : array, optional
        Singular values behind ``basis`` (recorded for reference).
    attributes : sequence of tuples of int, optional
        The protected attributes as groups of columns (default one per protected column).

    Attributes
    ----------
    directions_ : (r, d) array
        The protected directions (indicator vectors, then linear-model normals), unit rows.
    direction_labels_ : list of str
    basis_ : (d, s) array
        Orthonormal basis of the ignored subspace ``A`` (s <= r after removing dependent
        directions, or ``n_components`` with the truncated SVD).
    complement_ : (d, d - s) array
        Orthonormal basis of the orthogonal complement; ``embed(X) = X @ complement_``.
    transform_ : (d, d - s) array
        Same as ``complement_`` (the factor of :class:`~budro.metrics.linear.LinearMetric`).
    matrix_ : (d, d) array
        ``I - P_A``, also returned by :meth:`projector`.
    protected_directions_ : (s, d) array
        ``basis_.T``: moving along any of these rows costs nothing.
    singular_values_ : array or None
        Singular values of the stacked directions (``sensitive-subspace``) or of the within-group
        deviations (``svd-subspace``).
    explained_variance_ratio_ : array or None
        ``svd-subspace`` only: share of the within-group scatter each kept direction explains.
    models_ : dict
        The fitted scikit-learn models: keyed by the protected column for a one-column attribute
        (``LogisticRegression``, ``RidgeCV``, or ``OneVsRestClassifier`` for an integer-coded
        categorical) and by the tuple of columns for a one-hot group (``OneVsRestClassifier``).
    protected_ : tuple of int
        The protected columns.
    attributes_ : tuple of tuples of int
        The protected attributes, each as its columns.
    """

    kind = "subspace"
    _state_attributes = ("directions_", "direction_labels_", "basis_", "complement_", "singular_values_",
                         "explained_variance_ratio_", "protected_", "attributes_", "n_features_in_")
    #: transform_ and protected_directions_ are rebuilt by _restore; models_ (fitted scikit-learn
    #: models) are not plain data and are not saved.
    _derived_attributes = ("transform_", "protected_directions_", "models_")

    def __init__(self, directions: np.ndarray, direction_labels: list[str], n_features: int,
                 models: dict, protected: Sequence[int], *, basis: np.ndarray | None = None,
                 singular_values: np.ndarray | None = None, attributes: Sequence[Sequence[int]] | None = None):
        directions = np.asarray(directions, dtype=np.float64).reshape(-1, n_features)
        if len(direction_labels) != directions.shape[0]:
            raise ValidationError(f"{directions.shape[0]} directions but {len(direction_labels)} labels")
        self.directions_ = directions
        self.direction_labels_ = list(direction_labels)
        self.n_features_in_ = int(n_features)
        self.models_ = dict(models)
        self.protected_ = tuple(int(p) for p in protected)
        self.attributes_ = (tuple(tuple(int(c) for c in a) for a in attributes) if attributes is not None
                            else tuple((p,) for p in self.protected_))
        self.singular_values_ = None if singular_values is None else np.asarray(singular_values, dtype=np.float64)
        self.explained_variance_ratio_ = None
        if basis is None:
            basis = subspace_basis(directions, n_features)
        else:
            basis = np.asarray(basis, dtype=np.float64).reshape(n_features, -1)
        self.basis_ = basis
        self.complement_ = scipy.linalg.null_space(basis.T) if basis.shape[1] else np.eye(n_features)
        self._restore()

    def _restore(self) -> None:
        self.transform_ = self.complement_
        self.protected_directions_ = self.basis_.T.copy()
        self.protected_ = tuple(int(p) for p in self.protected_)
        self.attributes_ = tuple(tuple(int(c) for c in a) for a in self.attributes_)
        self.direction_labels_ = list(self.direction_labels_)
        if not hasattr(self, "models_"):
            self.models_ = {}  # to_dict does not carry the fitted models

    def projector(self) -> np.ndarray:
        """``I - P_A`` as a (d, d) matrix (the metric is ``(x - x')^T (I - P_A) (x - x')``)."""
        return self.matrix_

    def project(self, X: Any) -> np.ndarray:
        """``X (I - P_A)``: the rows of X with their component in the protected subspace removed.

        Same shape as X.  This is the paper's ``project`` preprocessing (train plain boosting on
        the projected data); ``metric.pairwise(X1, X2)`` equals the squared Euclidean distances
        between ``project(X1)`` and ``project(X2)``.
        """
        X = check_X(X, "X")
        check_n_features(X, self.n_features_in_)
        return X - (X @ self.basis_) @ self.basis_.T

    def __repr__(self) -> str:
        return f"SubspaceMetric(d={self.n_features_in_}, protected_dims={self.basis_.shape[1]})"


def subspace_basis(directions: np.ndarray, n_features: int, n_components: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
    """Orthonormal basis (d, s) of the span of the rows of ``directions``.

    With ``n_components = k``, the top-k right singular vectors of ``directions`` (a truncated
    SVD, as SenSR did for Adult) and the singular values are returned as ``(basis, singular_values)``.
    """
    D = np.asarray(directions, dtype=np.float64).reshape(-1, n_features)
    if n_components is None:
        return scipy.linalg.orth(D.T) if D.shape[0] else np.zeros((n_features, 0))
    _, s, vt = np.linalg.svd(D, full_matrices=False)
    return vt[:n_components].T.copy(), s


class SensitiveSubspace(FairMetricLearner):
    """Learn the sensitive subspace from the protected attributes (the paper's fair metric).

    Parameters
    ----------
    indicators : bool, default True
        Include the indicator vector of every protected column.
    fit_linear_models : bool or sequence of int, default True
        Include the normal vector(s) of a linear model predicting each protected attribute from
        the other features.  Turn off when the other features are all fair (e.g. the paper's
        synthetic example, where the metric is simply the distance in the unprotected coordinate).
        A list of column indices fits models for the attributes holding those columns only: the
        paper's Adult metric is ``protected=[sex, race]`` with ``fit_linear_models=[sex]``
        (indicators of both, a logistic direction for gender).
    l2 : float, default 0.1
        Strength of the l2 penalty of the logistic regressions (scikit-learn's ``C = 1 / l2``);
        the paper used 0.1.
    ridge_alphas : sequence of float, default (0.1, 1.0, 10.0)
        Penalties RidgeCV chooses among for continuous attributes (scikit-learn's default grid).
    categorical : sequence, optional
        Categorical protected attributes, each either a list of one-hot columns (e.g.
        ``[[3, 4, 5]]``: one attribute, a category per column, rows with no column set form a
        reference category) or one column index holding integer codes (e.g. ``[2]``).  Their
        columns are protected whether or not they are also passed to ``fit`` (the estimator
        passes a flat list of protected columns: a column listed there that belongs to a group
        is handled with its group).  Each gets one-vs-rest logistic regressions: one normal
        vector per category.  A group can also be given directly to ``fit``:
        ``fit(X, protected=[0, [3, 4, 5]])``.
    n_components : int, optional
        Keep only the top ``n_components`` right singular vectors of the stacked (unit)
        directions instead of their whole span: the truncated-SVD orthonormalisation SenSR used
        for Adult.  Must not exceed the number of directions found.
    max_iter : int, default 2000
        Iterations allowed to each logistic regression.

    With no protected attribute the metric is the plain Euclidean distance.
    """

    name = "sensitive-subspace"

    def __init__(self, indicators: bool = True, fit_linear_models: bool = True, l2: float = 0.1,
                 ridge_alphas: Sequence[float] = (0.1, 1.0, 10.0), categorical: Sequence[Any] | None = None,
                 n_components: int | None = None, max_iter: int = 2000):
        self.indicators = check_bool(indicators, "indicators")
        if isinstance(fit_linear_models, (bool, np.bool_)):
            self.fit_linear_models = bool(fit_linear_models)
        elif isinstance(fit_linear_models, (str, bytes)) or not hasattr(fit_linear_models, "__iter__"):
            raise ValidationError(f"fit_linear_models must be True, False or a list of protected column indices, "
                                  f"got {fit_linear_models!r}")
        else:
            self.fit_linear_models = check_columns(fit_linear_models, "fit_linear_models")
        if not self.indicators and not self.fit_linear_models:
            raise ValidationError("indicators and fit_linear_models cannot both be False: the metric would ignore "
                                  "nothing (use protected=() for the plain Euclidean distance)")
        if not isinstance(l2, numbers.Real) or isinstance(l2, bool) or not np.isfinite(l2) or l2 <= 0:
            raise ValidationError(f"l2 must be a positive number, got {l2!r}")
        try:
            alphas = np.asarray(ridge_alphas, dtype=float) if ridge_alphas is not None else np.array([])
        except (TypeError, ValueError):
            alphas = np.array([[]])
        if alphas.ndim != 1 or alphas.size == 0 or not np.all(np.isfinite(alphas)) or np.any(alphas <= 0):
            raise ValidationError(f"ridge_alphas must be a non-empty sequence of positive numbers, got {ridge_alphas!r}")
        self.l2 = float(l2)
        self.ridge_alphas = tuple(float(a) for a in alphas)
        self.categorical = _check_categorical(categorical)
        self.n_components = check_int(n_components, "n_components", allow_none=True)
        self.max_iter = check_int(max_iter, "max_iter")

    def fit(self, X: Any, protected: Sequence[Any] = (), *, y: Any = None) -> SubspaceMetric:
        """Learn the protected directions on ``X`` (n, d).

        ``protected`` lists the protected attributes: column indices, or lists of one-hot columns
        (one categorical attribute each).  ``y`` is not used.
        """
        X = check_X(X, "X")
        n, d = X.shape
        attributes = self._attributes(protected, d)
        with_models = self._model_attributes(attributes, d)
        directions: list[np.ndarray] = []
        labels: list[str] = []
        models: dict = {}
        for cols, kind in attributes:
            check_attribute_varies(X, cols)
            if kind == "onehot":
                _check_one_hot(X, cols)
            if self.indicators:
                for c in cols:
                    e = np.zeros(d)
                    e[c] = 1.0
                    directions.append(e)
                    labels.append(f"indicator[{c}]")
            if cols not in with_models:
                if not self.indicators:
                    where = f"column {cols[0]}" if len(cols) == 1 else f"columns {list(cols)}"
                    raise ValidationError(f"protected attribute in {where} gets no direction: indicators=False and "
                                          "fit_linear_models does not list it")
                continue
            others = np.setdiff1d(np.arange(d), cols)
            if others.size == 0:
                continue
            # One BLAS thread: scikit-learn's L-BFGS on a few dozen columns spends more on a second
            # thread's synchronisation than it gains (Adult: 0.45 -> 0.15-0.19 s for the paper's
            # metric, 10^6 x 19: 1.7-1.8 -> 1.4 s), and the same model on any number of cores.
            with pool_limits(1, "blas"):
                key, model, fitted = self._fit_models(X[:, others], X, cols, kind)
            models[key] = model
            for w_other, label in fitted:
                w = np.zeros(d)
                w[others] = w_other
                norm = np.linalg.norm(w)
                if norm > 0:
                    directions.append(w / norm)
                    labels.append(label)
        D = np.array(directions).reshape(len(directions), d)
        basis = None
        singular_values = np.linalg.svd(D, compute_uv=False) if D.shape[0] else np.zeros(0)
        if self.n_components is not None:
            if self.n_components > D.shape[0]:
                raise ValidationError(f"n_components={self.n_components} exceeds the {D.shape[0]} protected "
                                      f"directions found ({', '.join(labels) or 'none'})")
            basis, singular_values = subspace_basis(D, d, self.n_components)
        flat = flatten_protected([cols for cols, _ in attributes])
        return SubspaceMetric(D, labels, d, models, flat, basis=basis, singular_values=singular_values,
                              attributes=[cols for cols, _ in attributes])

    # -- helpers -------------------------------------------------------------------------------
    def _attributes(self, protected: Any, d: int) -> list[tuple[tuple[int, ...], str]]:
        """Merge ``protected`` with the declared ``categorical`` attributes; give each its kind."""
        given = check_protected(protected, d)
        declared = [tuple(_in_range(c, d) for c in group) for group in self.categorical]
        owner = {c: group for group in declared for c in group}
        order: list[tuple[int, ...]] = []
        for cols in given:
            groups = {owner.get(c) for c in cols}
            if groups == {None}:
                attribute = cols
            elif len(groups) == 1 and None not in groups:
                attribute = groups.pop()
                if len(cols) > 1 and set(cols) != set(attribute):
                    raise ValidationError(f"protected group {list(cols)} only partly matches the categorical "
                                          f"attribute {list(attribute)}")
            else:
                raise ValidationError(f"protected group {list(cols)} mixes columns of the categorical attribute(s) "
                                      f"{[list(g) for g in groups if g is not None]} with other columns")
            if attribute not in order:
                order.append(attribute)
        for group in declared:
            if group not in order:
                order.append(group)
        seen: dict[int, tuple[int, ...]] = {}
        for attribute in order:
            for c in attribute:
                if c in seen and seen[c] != attribute:
                    raise ValidationError(f"protected column {c} belongs to two attributes: {list(seen[c])} and {list(attribute)}")
                seen[c] = attribute
        out = []
        for attribute in order:
            if len(attribute) > 1:
                kind = "onehot"
            elif attribute in declared:
                kind = "categorical"
            else:
                kind = "single"
            out.append((attribute, kind))
        return out

    def _model_attributes(self, attributes: list[tuple[tuple[int, ...], str]], d: int) -> set[tuple[int, ...]]:
        """The attributes that get linear models (all, none, or those holding the listed columns)."""
        if self.fit_linear_models is True:
            return {cols for cols, _ in attributes}
        if self.fit_linear_models is False:
            return set()
        chosen = set()
        for c in self.fit_linear_models:
            holder = [cols for cols, _ in attributes if c % d in cols] if -d <= c < d else []
            if not holder:
                raise ValidationError(f"fit_linear_models lists column {c}, which is not a protected column")
            chosen.add(holder[0])
        return chosen

    def _logistic(self):
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(C=1.0 / self.l2, max_iter=self.max_iter)

    def _fit_models(self, X_other: np.ndarray, X: np.ndarray, cols: tuple[int, ...], kind: str):
        """Fit the linear model(s) for one attribute: ``(key, model, [(normal, label), ...])``."""
        from sklearn.linear_model import RidgeCV
        from sklearn.multiclass import OneVsRestClassifier

        if kind == "single":
            (c,) = cols
            target = X[:, c]
            values = np.unique(target)
            if values.size == 2:
                model = self._logistic().fit(X_other, (target == values[1]).astype(int))
                return c, model, [(np.ravel(model.coef_), f"logistic[{c}]")]
            model = RidgeCV(alphas=self.ridge_alphas).fit(X_other, target)
            return c, model, [(np.ravel(model.coef_), f"ridge[{c}]")]
        if kind == "categorical":
            (c,) = cols
            codes = X[:, c]
            names = {v: f"{c}={v:g}" for v in np.unique(codes)}
            key = c
        else:  # one-hot group: category = the active column, -1 = none (reference category)
            block = X[:, list(cols)]
            codes = np.where(block.any(axis=1), np.asarray(cols)[block.argmax(axis=1)], -1)
            names = {c: str(c) for c in cols}
            names[-1] = "|".join(map(str, cols)) + "=none"
            key = cols
        model = OneVsRestClassifier(self._logistic()).fit(X_other, codes)
        classes = model.classes_
        if len(model.estimators_) == 1:  # two categories: one binary problem, positive = classes[1]
            pairs = [(classes[1], model.estimators_[0])]
        else:
            pairs = list(zip(classes, model.estimators_))
        fitted = [(np.ravel(getattr(est, "coef_", np.zeros((1, X_other.shape[1])))), f"ovr[{names[cls]}]")
                  for cls, est in pairs]
        return key, model, fitted

    def __repr__(self) -> str:
        extra = ""
        if self.categorical:
            extra += f", categorical={[list(g) for g in self.categorical]}"
        if self.n_components is not None:
            extra += f", n_components={self.n_components}"
        models = list(self.fit_linear_models) if isinstance(self.fit_linear_models, tuple) else self.fit_linear_models
        return (f"SensitiveSubspace(indicators={self.indicators}, fit_linear_models={models}, "
                f"l2={self.l2}{extra})")


def _check_categorical(categorical: Any) -> tuple[tuple[int, ...], ...]:
    if categorical is None:
        return ()
    if isinstance(categorical, (str, bytes)) or not hasattr(categorical, "__iter__"):
        raise ValidationError(f"categorical must be a list of column indices or of groups of one-hot columns, got {categorical!r}")
    groups = []
    seen: set[int] = set()
    for item in categorical:
        if isinstance(item, (numbers.Integral, np.integer)) and not isinstance(item, (bool, np.bool_)):
            group = (int(item),)
        elif isinstance(item, (str, bytes)) or not hasattr(item, "__iter__"):
            raise ValidationError(f"categorical must hold column indices or groups of them, got {item!r}")
        else:
            group = tuple(item)
            if len(group) < 2 or not all(isinstance(c, (numbers.Integral, np.integer)) and not isinstance(c, (bool, np.bool_))
                                         for c in group):
                raise ValidationError(f"categorical: a group of one-hot columns needs at least two column indices, got {item!r}")
            group = tuple(int(c) for c in group)
        for c in group:
            if c in seen:
                raise ValidationError(f"categorical lists column {c} twice")
            seen.add(c)
        groups.append(group)
    return tuple(groups)


def _in_range(c: int, d: int) -> int:
    if not -d <= c < d:
        raise ValidationError(f"categorical column {c} is out of range for {d} features")
    return c % d


def _check_one_hot(X: np.ndarray, cols: tuple[int, ...]) -> None:
    block = X[:, list(cols)]
    if not np.all((block == 0) | (block == 1)):
        raise ValidationError(f"protected group {list(cols)} must be one-hot (0/1) columns; for a scaled or "
                              "integer-coded attribute give one column")
    active = block.sum(axis=1)
    if np.any(active > 1):
        row = int(np.flatnonzero(active > 1)[0])
        raise ValidationError(f"protected group {list(cols)} is not one-hot: row {row} has {int(active[row])} active columns")
