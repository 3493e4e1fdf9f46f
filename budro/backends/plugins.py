"""budro's built-in booster backends, registered through the same hook as third-party ones.

Importing this module does not import any boosting library: each backend imports its library
when it is created.
"""

from __future__ import annotations

from budro.hookspecs import hookimpl
from budro.plugin_types import BackendPlugin


@hookimpl
def budro_backends():
    from budro.backends.xgboost import XGBoostBackend

    yield BackendPlugin(
        name="xgboost",
        factory=XGBoostBackend,
        description="XGBoost, one tree per round on the collapsed D0 (exact), margins kept from its prediction cache.",
        capabilities={"multiclass", "native-export", "missing-values", "native-categorical"},
    )

    from budro.backends.lightgbm import LightGBMBackend

    yield BackendPlugin(
        name="lightgbm",
        factory=LightGBMBackend,
        description="LightGBM, one round per step on the n rows with D0's weighted gradients (exact), "
        "margins from its training score.",
        capabilities={"multiclass", "native-export", "missing-values", "native-categorical"},
    )

    from budro.backends.catboost import CatBoostBackend

    yield BackendPlugin(
        name="catboost",
        factory=CatBoostBackend,
        description="CatBoost, one one-iteration fit per step on a pool quantized once, summed (exact with "
        "deterministic settings; slow per round).",
        capabilities={"multiclass", "native-export", "missing-values", "native-categorical"},
    )
