"""Linear (Mahalanobis) fair metrics: ``d(x, x')^2 = (x - x')^T M (x - x')`` with ``M = L L^T``.

Every built-in fitted metric is one of these.  They embed with ``embed(X) = X @ L`` (so the
transport cost never needs an n x n matrix), expose ``M`` as ``matrix_`` and the factor ``L`` as
``transform_``, pickle (and so travel inside a model saved with :func:`budro.persist.save_model`),
and convert to and from a JSON-compatible dict::

    state = metric.to_dict()                 # plain lists, numbers and strings
    same = budro.metrics.metric_from_dict(state)   # same class, same fitted state, same distances

A subclass (a plugin's metric included) round-trips as itself when it (1) defines its own ``kind``
string, (2) lists its fitted state in ``_state_attributes`` (attributes that ``_restore`` rebuilds go
in ``_derived_attributes``), and (3) is listed in its plugin record's
``FairMetricPlugin(metric_classes=...)``.  ``metric_from_dict`` finds the class through the plugin
registry by ``kind``: it never imports a module or calls anything named in the dict (a model file
feeds this dict), and arrays are rebuilt only with numeric dtypes.  ``to_dict`` refuses a class
that breaks (1) or (2) rather than writing a dict that would come back as another class or
without part of its state.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from budro.exceptions import ValidationError
from budro.metrics._validation import check_n_features, check_X
from budro.metrics.base import MahalanobisMetric

__all__ = ["LinearMetric", "metric_from_dict", "FORMAT_VERSION"]

#: Version of the :meth:`LinearMetric.to_dict` layout.
FORMAT_VERSION = 1


class LinearMetric(MahalanobisMetric):
    """A Mahalanobis fair metric given by a factor ``L`` (d, p): ``embed(X) = X @ L``.

    Parameters
    ----------
    transform : (d, p) array
        The factor ``L``; the metric matrix is ``M = L L^T``.
    protected : sequence of int, default ()
        The protected columns the metric was fitted with (kept for reference).
    protected_directions : (r, d) array, optional
        Unit vectors along which the metric is zero (``d(x, x + t v) = 0``), e.g. the protected
        indicator vectors; :func:`budro.testing.check_fair_metric` checks them.

    Attributes
    ----------
    transform_ : (d, p) array
    matrix_ : (d, d) array
        ``M = L L^T`` (computed on first access for subclasses that embed without ``L``).
    protected_ : tuple of int
    protected_directions_ : (r, d) array
    n_features_in_ : int
    """

    #: Name of the class in :meth:`to_dict` (see :func:`metric_from_dict`).
    kind: ClassVar[str] = "linear"
    #: Attributes written by :meth:`to_dict` (besides ``kind`` and ``format``).
    _state_attributes: ClassVar[tuple[str, ...]] = ("transform_", "protected_", "protected_directions_",
                                                    "n_features_in_")
    #: Fitted attributes not written by :meth:`to_dict` because :meth:`_restore` rebuilds them (or,
    #: documented per class, because they cannot be saved as plain data, e.g. fitted models).
    _derived_attributes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, transform: Any, *, protected: Any = (), protected_directions: Any = None):
        L = np.asarray(transform, dtype=np.float64)
        if L.ndim != 2 or not np.all(np.isfinite(L)):
            raise ValidationError(f"transform must be a finite 2-D (d, p) array, got shape {L.shape}")
        self.transform_ = L
        self.n_features_in_ = L.shape[0]
        self.protected_ = tuple(int(p) for p in protected)
        self.protected_directions_ = _directions(protected_directions, self.n_features_in_)

    # -- the metric ----------------------------------------------------------------------------
    def embed(self, X: Any) -> np.ndarray:
        """The embedding ``z = x L`` of the rows of X (n, p): ``d(x, x')^2 = ||z - z'||^2``."""
        X = check_X(X, "X")
        check_n_features(X, self.n_features_in_)
        return X @ self.transform_

    @property
    def matrix_(self) -> np.ndarray:
        """The (d, d) positive semidefinite matrix ``M`` with ``d(x, x')^2 = (x - x')^T M (x - x')``."""
        M = self.__dict__.get("_matrix")
        if M is None:
            L = self.transform_
            M = L @ L.T
            M = 0.5 * (M + M.T)
            self.__dict__["_matrix"] = M
        return M

    def distance(self, x1: Any, x2: Any) -> np.ndarray:
        """Squared fair distances between matching rows of x1 and x2 (n,), without an n x n matrix."""
        Z1 = self.embed(np.atleast_2d(x1))
        Z2 = self.embed(np.atleast_2d(x2))
        if Z1.shape != Z2.shape:
            raise ValidationError(f"x1 and x2 must have the same number of rows, got {Z1.shape[0]} and {Z2.shape[0]}")
        diff = Z1 - Z2
        return np.einsum("ij,ij->i", diff, diff)

    # -- persistence ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible description of the fitted metric (arrays as nested lists).

        Fitted scikit-learn models (``models_``) are not included: pickle the metric (or the model
        holding it) to keep them.  :func:`metric_from_dict` rebuilds an equal metric of the same class.

        Raises ValidationError for a class that does not define its own ``kind`` (it would be
        reloaded as its base class) or holds fitted attributes (public names ending in ``_``)
        listed in neither ``_state_attributes`` nor ``_derived_attributes`` (they would be lost).
        """
        cls = type(self)
        if "kind" not in cls.__dict__:
            raise ValidationError(
                f"{cls.__name__}.to_dict: the class inherits kind {self.kind!r} from a base class, so its dict would "
                f"be reloaded as that class; define its own 'kind' string and list the class in its plugin record "
                f"(FairMetricPlugin(metric_classes=...))")
        saved = set(cls._state_attributes) | set(cls._derived_attributes)
        dropped = sorted(a for a in vars(self) if a.endswith("_") and not a.startswith("_") and a not in saved)
        if dropped:
            raise ValidationError(
                f"{cls.__name__}.to_dict would drop the fitted attribute(s) {', '.join(dropped)}: list them in "
                f"{cls.__name__}._state_attributes (or in _derived_attributes when _restore rebuilds them)")
        out: dict[str, Any] = {"kind": self.kind, "format": FORMAT_VERSION}
        for name in self._state_attributes:
            out[name] = _encode(getattr(self, name))
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LinearMetric":
        """Rebuild a metric written by :meth:`to_dict` (the class is found by ``data["kind"]``; it
        must be this class or a subclass)."""
        metric = metric_from_dict(data)
        if not isinstance(metric, cls):
            raise ValidationError(f"{cls.__name__}.from_dict: the dict holds a {type(metric).__name__} "
                                  f"(kind {data.get('kind')!r}), not a {cls.__name__}")
        return metric

    @classmethod
    def _from_state(cls, state: dict[str, Any]) -> "LinearMetric":
        self = cls.__new__(cls)
        for name in cls._state_attributes:
            if name not in state:
                raise ValidationError(f"fair-metric dict of kind {cls.kind!r} lacks {name!r}")
            value = _decode(state[name])
            if name == "matrix_":
                self.__dict__["_matrix"] = value
            else:
                setattr(self, name, value)
        self.protected_ = tuple(int(p) for p in self.protected_)
        self.n_features_in_ = int(self.n_features_in_)
        self._restore()
        return self

    def _restore(self) -> None:
        """Fix up attributes after :meth:`_from_state` (tuples, derived arrays)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(d={self.n_features_in_}, p={self.transform_.shape[1]})"


def _directions(directions: Any, d: int) -> np.ndarray:
    if directions is None:
        return np.zeros((0, d))
    D = np.asarray(directions, dtype=np.float64).reshape(-1, d)
    norms = np.linalg.norm(D, axis=1)
    keep = norms > 0
    return D[keep] / norms[keep, None]


def _encode(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "shape": list(value.shape), "dtype": value.dtype.str}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return value.item()
    return value


#: Array dtypes a fair-metric dict may name (numbers and booleans: no objects).
_DTYPE_KINDS = frozenset("biufc")


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"array", "shape", "dtype"}:
        try:
            dtype = np.dtype(value["dtype"])
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in _DTYPE_KINDS:
            raise ValidationError(f"fair-metric dict: array dtype {value['dtype']!r} is not numeric")
        return np.asarray(value["array"], dtype=dtype).reshape(value["shape"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


def metric_from_dict(data: dict[str, Any]) -> LinearMetric:
    """Rebuild a fitted metric from :meth:`LinearMetric.to_dict`'s output, as the same class.

    The class is the registered one whose ``kind`` is ``data["kind"]``: budro's own metric
    classes and those listed by installed plugins (``FairMetricPlugin(metric_classes=...)``).
    Nothing named in the dict is imported or executed.
    """
    if not isinstance(data, dict) or "kind" not in data:
        raise ValidationError("a fair-metric dict must be a dict with a 'kind' key (from metric.to_dict())")
    if data.get("format") != FORMAT_VERSION:
        raise ValidationError(f"fair-metric dict has format {data.get('format')!r}; this budro reads format {FORMAT_VERSION}")
    from budro import registry

    cls = registry.metric_class(data["kind"])
    return cls._from_state(data)
