"""budro: individually fair gradient boosting (BuDRO, Vargo et al., ICLR 2021).

A pluggable framework: booster backends, transport solvers and fair-metric learners are plugins
(see :mod:`budro.registry`), composed by :class:`BuDROClassifier` or by a configuration.
"""

from __future__ import annotations

import os as _os

# OpenMP (libgomp) threads spin for about 3 ms after each parallel region by default, taking the
# cores budro's solve (and, on a busy machine, everyone else) needs; budro shortens the spin.  A
# runtime reads this once when it starts, so it is set here, before any booster is imported; set
# OMP_WAIT_POLICY or GOMP_SPINCOUNT yourself to choose otherwise (budro/_threads.py, docs/threads.md).
if "OMP_WAIT_POLICY" not in _os.environ:
    _os.environ.setdefault("GOMP_SPINCOUNT", "3000")

from budro.exceptions import (
    BudroError,
    ConfigError,
    DuplicatePluginError,
    PluginError,
    UnknownPluginError,
    ValidationError,
)
from budro.hookspecs import hookimpl
from budro.plugin_types import BackendPlugin, FairMetricPlugin, PluginSpec, SolverPlugin
from budro.transport import Cost, DenseCost, EmbeddingCost, TransportProblem, TransportResult

__version__ = "0.1.0"

__all__ = [
    "BackendPlugin",
    "BuDROClassifier",
    "BudroError",
    "ConfigError",
    "Cost",
    "DenseCost",
    "DuplicatePluginError",
    "EmbeddingCost",
    "FairMetricPlugin",
    "PluginError",
    "PluginSpec",
    "SolverPlugin",
    "TransportProblem",
    "TransportResult",
    "UnknownPluginError",
    "ValidationError",
    "hookimpl",
    "registry",
]


def __getattr__(name: str):
    # Lazy: importing budro must not import scikit-learn or a booster.
    if name == "BuDROClassifier":
        from budro.estimator import BuDROClassifier

        return BuDROClassifier
    if name == "registry":
        import budro.registry as registry

        return registry
    raise AttributeError(f"module 'budro' has no attribute {name!r}")
