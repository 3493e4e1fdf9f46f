"""Hook implementations: what budro loads through the "budro" entry-point group."""

import budro


@budro.hookimpl
def budro_backends():
    # Imported here only to keep `import budro_example_backend.plugin` cheap; the backend module
    # itself imports xgboost only when a backend starts training.
    from budro_example_backend.backend import D0XGBoostBackend

    yield budro.BackendPlugin(
        name="example-xgboost-d0",
        factory=D0XGBoostBackend,
        description="XGBoost trained each round on the K copies of every row (D0) with the round's weights; "
                    "small and plain (an example plugin).",
        # closed set: budro.plugin_types.BACKEND_CAPABILITIES.  No "missing-values" (budro refuses
        # NaN in X for it) and no "native-categorical".
        capabilities={"multiclass", "native-export"},
    )
