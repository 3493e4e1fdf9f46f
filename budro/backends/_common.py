"""Parameter and input handling shared by budro's built-in backends (XGBoost, LightGBM, CatBoost).

Nothing here imports a boosting library.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from budro.exceptions import ValidationError

__all__ = ["check_native_load_args", "check_native_bytes"]


def check_native_load_args(n_classes: Any, n_features: Any, categorical_features: Any) -> tuple[int, int, tuple[int, ...]]:
    """Check the description that comes with a model's bytes (:meth:`Backend.load_native_bytes`)."""
    if isinstance(n_classes, bool) or not isinstance(n_classes, numbers.Integral) or n_classes < 2:
        raise ValidationError(f"n_classes must be an integer >= 2, got {n_classes!r}")
    if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral) or n_features < 1:
        raise ValidationError(f"n_features must be an integer >= 1, got {n_features!r}")
    return int(n_classes), int(n_features), check_categorical_features(categorical_features, int(n_features))


def check_categorical_features(categorical_features: Any, n_features: int) -> tuple[int, ...]:
    """``categorical_features`` as a sorted tuple of distinct column indices in ``[0, n_features)``."""
    if categorical_features is None:
        return ()
    if isinstance(categorical_features, (str, bytes)) or not hasattr(categorical_features, "__iter__"):
        raise ValidationError(
            f"categorical_features must be a sequence of column indices, got {type(categorical_features).__name__}"
        )
    out: list[int] = []
    for c in categorical_features:
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, numbers.Integral) or not 0 <= int(c) < n_features:
            raise ValidationError(
                f"categorical_features must hold column indices in [0, {n_features}), got {c!r}"
            )
        out.append(int(c))
    if len(set(out)) != len(out):
        raise ValidationError(f"categorical_features lists a column twice: {sorted(out)}")
    return tuple(sorted(out))


def check_native_bytes(data: Any, library: str) -> bytes:
    """``data`` as ``bytes``; anything else is not a model of ``library``."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
        if data:
            return data
        raise ValidationError(f"the data is not a valid {library} model: it is empty")
    raise ValidationError(f"the data is not a valid {library} model: expected bytes, got {type(data).__name__}")
