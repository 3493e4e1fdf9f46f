"""The example plugin packages in plugins/: installed (README's test command), registered through
their entry points, and passing budro's conformance kits honestly."""

from __future__ import annotations

from importlib import metadata

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro import registry
from budro.exceptions import ValidationError
from budro.testing import check_backend, check_solver

from conftest import in_ci


def _installed(dist: str) -> bool:
    try:
        metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return False
    return True


def _needs(dist: str):
    return pytest.mark.skipif(not _installed(dist) and not in_ci(),
                              reason=f"pip install -e plugins/{dist} (the README's test command does)")


# ---------------------------------------------------------------------------- budro-example-solver


@_needs("budro-example-solver")
def test_example_solver_is_registered_and_passes_the_solver_kit():
    entry = registry.get("solver", "example-breakpoints")
    assert entry.source == "budro-example-solver"
    assert entry.capabilities == {"exact", "dense-cost"}
    report = check_solver(registry.create("solver", "example-breakpoints"), n_instances=12, rng=5)
    assert {r["cost"] for r in report} == {"dense", "embedding"}  # from its capabilities
    assert max(r["gap"] for r in report) <= max(r["tolerance"] for r in report)


@_needs("budro-example-solver")
def test_example_solver_agrees_with_the_builtin_exact_solvers():
    from budro.transport import EmbeddingCost, TransportProblem

    rng = np.random.default_rng(3)
    for n in (5, 17, 40):
        Z = rng.integers(-2, 3, size=(n, 2)).astype(float)
        losses = np.logaddexp(0.0, rng.normal(size=(n, 2)))
        cost = EmbeddingCost(Z)
        for frac in (0.01, 0.3, 2.0):
            problem = TransportProblem(losses, rng.integers(0, 2, n), cost, frac * float(cost.column_block(0, n).mean()))
            ours = registry.create("solver", "example-breakpoints").solve(problem)
            reference = registry.create("solver", "lp").solve(problem)
            assert ours.objective == pytest.approx(reference.objective, rel=1e-9, abs=1e-12)
            assert ours.transport_cost <= problem.eps * (1 + 1e-9) + 1e-12


@st.composite
def _dense_tie_heavy_problems(draw):
    """Small dense instances with integer losses (ties), duplicated points and every kind of budget."""
    from budro.transport import EmbeddingCost, TransportProblem

    n = draw(st.integers(1, 25))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    base = rng.integers(-2, 3, size=(draw(st.integers(1, n)), draw(st.integers(1, 3)))).astype(float)
    Z = base[rng.integers(0, len(base), size=n)]
    K = draw(st.sampled_from([2, 3]))
    losses = rng.integers(0, 4, size=(n, K)).astype(float)
    if draw(st.booleans()):
        losses = losses + rng.normal(scale=0.1, size=(n, K))
    cost = EmbeddingCost(Z)
    C = cost.column_block(0, n)
    eps = draw(st.sampled_from([0.0, 1e-3 * float(C.mean()), 0.3 * float(C.mean()), float(C.max()) + 1.0]))
    return TransportProblem(losses, rng.integers(0, K, size=n), cost, eps)


@_needs("budro-example-solver")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=_dense_tie_heavy_problems())
def test_property_example_solver_is_exact_on_tie_heavy_problems(problem):
    check_solver(registry.create("solver", "example-breakpoints"), problems=[problem], n_instances=0,
                 edge_cases=False, costs=("dense",))


@_needs("budro-example-solver")
def test_budro_refuses_neighbour_costs_for_the_dense_only_example_solver():
    pytest.importorskip("xgboost")
    from budro import BuDROClassifier
    from budro.datasets import make_synthetic

    X, y, _ = make_synthetic(random_state=0)
    clf = BuDROClassifier(solver="example-breakpoints", fair_metric="features", fair_metric_params={"features": [1]},
                          eps=0.01, n_steps=2, n_neighbors=5, backend_params={"nthread": 1})
    with pytest.raises(ValidationError, match="'sparse-cost' capability"):
        clf.fit(X[:80], y[:80])
    clf.set_params(n_neighbors=None).fit(X[:80], y[:80])
    assert clf.solver_.name == "example-breakpoints" and len(clf.history_) == 2


# ---------------------------------------------------------------------------- budro-example-backend


@_needs("budro-example-backend")
def test_example_backend_is_registered_and_passes_the_backend_kit():
    from budro_example_backend import D0XGBoostBackend, load_and_predict

    entry = registry.get("backend", "example-xgboost-d0")
    assert entry.source == "budro-example-backend" and entry.capabilities == {"multiclass", "native-export"}
    check_backend(D0XGBoostBackend, n_classes=(2, 3), load_and_predict=load_and_predict, model_suffix=".json")


@_needs("budro-example-backend")
def test_the_backend_kit_catches_a_slip_in_the_example_backend():
    from budro_example_backend import D0XGBoostBackend, load_and_predict

    class RowMajor(D0XGBoostBackend):
        """Lays the (n, K) weights out row by row: D0's rows get the wrong weights."""

        def _scaled(self, weights):
            return (np.asarray(weights, dtype=np.float64) * weights.shape[0]).ravel(order="C")

    with pytest.raises(AssertionError, match="must equal"):
        check_backend(RowMajor, n_classes=(2,), load_and_predict=load_and_predict, model_suffix=".json")


@_needs("budro-example-backend")
def test_example_backend_trains_budro():
    from budro import BuDROClassifier
    from budro.datasets import make_synthetic

    X, y, _ = make_synthetic(random_state=1)
    clf = BuDROClassifier(backend="example-xgboost-d0", fair_metric="features", fair_metric_params={"features": [1]},
                          eps=0.01, n_steps=5).fit(X[:100], y[:100])
    assert clf.backend_.n_rounds == 6 and clf.predict(X[:10]).shape == (10,)
    # no "missing-values" capability: the engine refuses NaN for it before training (the estimator
    # imputes instead, reading the same capability)
    from budro.core import BuDRO
    from budro.metrics import Features
    from budro.solvers.dual import DualSolver
    from budro_example_backend import D0XGBoostBackend

    Xnan = X[:100].copy()
    Xnan[0, 0] = np.nan
    with pytest.raises(ValidationError, match="'missing-values' capability"):
        BuDRO(D0XGBoostBackend(), DualSolver(), Features([1]), eps=0.01, n_steps=1).fit(
            Xnan, y[:100], metric_X=np.nan_to_num(Xnan))
