"""A minimal XGBoost backend for budro, written from the public backend contract (example plugin)."""

from budro_example_backend.backend import D0XGBoostBackend, load_and_predict

__all__ = ["D0XGBoostBackend", "load_and_predict"]
