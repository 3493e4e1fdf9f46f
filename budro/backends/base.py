"""The booster-backend contract: a gradient-boosting library driven one round at a time."""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from budro.exceptions import PluginError
from budro.losses import label_losses, probabilities

__all__ = ["Backend", "WEIGHT_SCALES", "native_sample_weights"]

#: How the per-round weights (which sum to 1) are scaled before they reach the library.
#: "n": multiplied by n, so the empirical distribution is weight 1 per row and the library's
#: default regularisation means what it means in ordinary boosting (the default).
#: "unit": handed over as they are, summing to 1 (the paper's convention; its hyperparameters,
#: e.g. lambda ~ 1e-4 and min_child_weight ~ 0.1/n, assume this).
WEIGHT_SCALES = ("n", "unit")


class Backend(abc.ABC):
    """A boosting library, driven by BuDRO one round at a time.

    Lifecycle::

        backend.start(X, y, n_classes)   # build data structures once; f_0 = one plain round on (X, y)
        for t in range(T):
            L = backend.losses()         # (n, K): loss at each training point under each label
            backend.step(weights)        # one more tree on D0 = {(x_i, k)} weighted by weights[i, k]
        backend.finish()                 # drop training-only structures; the model still predicts

    ``weights`` is an (n, K) array, non-negative, summing to 1.  Implementations keep the
    training margins current without re-predicting from scratch where the library allows.

    Inputs ``X`` are float64 arrays (n, d).  A backend whose plugin record declares the
    capability ``"missing-values"`` accepts NaN in any column as a missing value and routes it
    the way its library does; infinite values are always an error.  One that declares
    ``"native-categorical"`` accepts ``categorical_features`` in :meth:`start` and
    :meth:`fit_native`: the listed columns hold non-negative integer category codes stored as
    floats, NaN meaning missing or unseen (the caller maps categories never seen in training to
    NaN); the backend remembers them, and :meth:`predict_margin` treats the same columns the
    same way.  BuDRO passes ``categorical_features`` only when it is not empty, so a backend
    without the capability need not accept the keyword.
    """

    #: Registered name (informational).
    name: str = ""

    #: Name of the byte format of :meth:`to_native_bytes` (the library's own model format, e.g.
    #: ``"xgboost-json"``); empty for a backend that cannot export its model as bytes.
    native_format: str = ""

    n_classes_: int
    n_features_in_: int

    @abc.abstractmethod
    def start(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, random_state: int | None = None,
              categorical_features: tuple[int, ...] = ()) -> None:
        """Build the library's training structures for ``X`` (n, d) and labels ``y`` in [0, n_classes),
        and train f_0: one plain round on the original data (every row weight 1/n).

        ``categorical_features``: columns of category codes (see the class docstring)."""

    @abc.abstractmethod
    def step(self, weights: np.ndarray) -> None:
        """Add one round trained on D0 with weights ``weights[i, k]`` for the copy (x_i, k)."""

    @abc.abstractmethod
    def margins(self) -> np.ndarray:
        """Raw margins at the training points: (n,) for two classes, (n, K) otherwise."""

    @abc.abstractmethod
    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """Raw margins of the current model at new points."""

    @abc.abstractmethod
    def save_model(self, path: str) -> None:
        """Write the model in the library's own format (the plain library loads it)."""

    @abc.abstractmethod
    def fit_native(self, X: np.ndarray, y: np.ndarray, n_classes: int, n_rounds: int,
                   *, random_state: int | None = None, sample_weight: np.ndarray | None = None,
                   categorical_features: tuple[int, ...] = ()) -> "Backend":
        """A new backend holding the library's own multi-round training on (X, y) with the same
        parameters: plain boosting, the reference BuDRO is compared with.

        ``sample_weight`` (n,), optional: row weights (e.g. the reweighing baseline's).  They
        are a distribution over the rows, brought to the backend's weight scale as
        :func:`native_sample_weights` does (summing to n for ``"n"``, to 1 for ``"unit"``), so
        that equal weights train exactly the unweighted model.  ``categorical_features``: as in
        :meth:`start`."""

    @property
    @abc.abstractmethod
    def n_rounds(self) -> int:
        """Trees (rounds) in the current model, f_0 included."""

    @property
    @abc.abstractmethod
    def model(self) -> Any:
        """The library's native model object."""

    def finish(self) -> None:
        """Release training-only structures (after the last round). The model keeps predicting."""

    def to_native_bytes(self) -> bytes:
        """The current model in the library's own format (:attr:`native_format`), as bytes.

        :meth:`load_native_bytes` on a new backend with the same parameters restores a model
        that predicts exactly (bitwise) what this one predicts.  Backends that cannot do this
        keep this default, which raises :class:`~budro.exceptions.PluginError`."""
        raise PluginError(
            f"backend {type(self).__name__} ({self.name or 'unnamed'}) cannot export its model as bytes: "
            "it does not implement to_native_bytes()/load_native_bytes()"
        )

    def load_native_bytes(self, data: bytes, *, n_classes: int, n_features: int,
                          categorical_features: tuple[int, ...] = ()) -> None:
        """Replace the model by one read from ``data`` (written by :meth:`to_native_bytes` of a
        backend with the same parameters); afterwards the backend is finished (no training
        structures), and :meth:`predict_margin`, :attr:`n_rounds` and ``n_classes_`` are those of
        the backend that wrote the bytes.

        ``n_classes``, ``n_features`` and ``categorical_features`` describe the model; a model
        that contradicts them, or bytes that are not a model of the library, raise
        :class:`~budro.exceptions.ValidationError`.  The default raises
        :class:`~budro.exceptions.PluginError` (see :meth:`to_native_bytes`)."""
        raise PluginError(
            f"backend {type(self).__name__} ({self.name or 'unnamed'}) cannot load a model from bytes: "
            "it does not implement to_native_bytes()/load_native_bytes()"
        )

    def losses(self) -> np.ndarray:
        """``L[i, k]`` = loss of the current model at training point i under label k."""
        return label_losses(self.margins(), self.n_classes_)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities (m, n_classes)."""
        return probabilities(self.predict_margin(X), self.n_classes_)


def native_sample_weights(sample_weight: Any, n: int, weight_scale: str) -> np.ndarray | None:
    """Row weights for :meth:`Backend.fit_native` on the backend's weight scale.

    ``None`` stays ``None`` for scale ``"n"`` (weight 1 per row, the library's unweighted run) and
    becomes ``1/n`` per row for ``"unit"``.  Given weights must be finite, non-negative, of shape
    (n,) and not all zero; they are rescaled to sum to ``n`` (``"n"``) or to 1 (``"unit"``).
    """
    from budro.exceptions import ValidationError

    if sample_weight is None:
        return None if weight_scale == "n" else np.full(n, 1.0 / n)
    try:
        w = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValidationError(f"sample_weight must be a numeric array of shape ({n},), got {type(sample_weight).__name__}") from None
    if w.shape != (n,):
        raise ValidationError(f"sample_weight must have shape ({n},) (one weight per row of X), got {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any():
        raise ValidationError("sample_weight must be finite and non-negative")
    total = float(w.sum())
    if total <= 0.0:
        raise ValidationError("sample_weight must not be all zero")
    return w * (n / total) if weight_scale == "n" else w / total
