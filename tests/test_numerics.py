"""Numbers checked at the boundary: overflowing fair costs, non-finite losses, solver
non-convergence (warning + history), and dense solvers refused past their size limit."""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budro import BuDROClassifier
from budro.core import BuDRO, RoundRecord
from budro.exceptions import ConvergenceWarning, NumericalError, ValidationError
from budro.solvers.dual import DualSolver
from budro.solvers.entropic import EntropicSGDSolver, EntropicSolver
from budro.solvers.lp import LPSolver
from budro.solvers.sgd import DualSGDSolver
from budro.transport import Cost, EmbeddingCost, NeighborCost, TransportProblem

FAST = {"nthread": 1}


def _data(n=60, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (X[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(int)
    X[:, 0] *= scale
    return X, y


# ---------------------------------------------------------------------------------- overflow


@pytest.mark.parametrize("solver", ["lp", "dual", "entropic"])
def test_huge_features_give_a_clear_error_for_every_solver(solver):
    # Today's code: lp trained a model silently on NaN costs, dual failed with an IndexError,
    # entropic with a TypeError.
    pytest.importorskip("lightgbm")
    X, y = _data(scale=1e155)
    clf = BuDROClassifier(backend="lightgbm", backend_params={"n_jobs": 1, "verbose": -1}, solver=solver,
                          protected=[2], eps=0.1, n_steps=3, random_state=0)
    with pytest.raises(NumericalError, match=r"values up to 2\.\d+e\+155.*overflow the squared fair distance.*standardise"):
        clf.fit(X, y)


def test_huge_embeddings_are_refused_by_the_cost_objects():
    Z = np.array([[1e155, 0.0], [0.0, 1.0], [2.0, 3.0]])
    for make in (lambda: EmbeddingCost(Z), lambda: NeighborCost(Z, 2)):
        with pytest.raises(NumericalError, match=r"EmbeddingCost|NeighborCost"):
            make()
    with pytest.raises(NumericalError, match="Z contains 1 NaN or infinite value.*fair metric produced them"):
        EmbeddingCost(np.array([[np.nan, 0.0], [1.0, 2.0]]))


@settings(max_examples=40, deadline=None)
@given(exponent=st.floats(min_value=0.0, max_value=300.0), n=st.integers(2, 6), p=st.integers(1, 4),
       seed=st.integers(0, 2**16))
def test_an_embedding_cost_is_finite_or_refused(exponent, n, p, seed):
    # Invariant: whatever the scale, the costs are finite and non-negative, or the constructor
    # refuses with a NumericalError; never NaN costs handed to a solver.
    Z = np.random.default_rng(seed).normal(size=(n, p)) * 10.0**exponent
    try:
        cost = EmbeddingCost(Z)
    except NumericalError as exc:
        assert "overflow the squared fair distance" in str(exc)
        return
    C = cost.column_block(0, n)
    assert np.isfinite(C).all() and (C >= 0).all() and np.all(np.diagonal(C) == 0)


def test_non_finite_losses_are_reported_with_the_round(monkeypatch):
    from budro import registry

    X, y = _data(n=40)
    backend = registry.create("backend", "xgboost", **FAST)
    metric = registry.create("fair_metric", "sensitive-subspace", fit_linear_models=False)
    trainer = BuDRO(backend, DualSolver(), metric, eps=0.1, n_steps=3)
    real = type(backend).losses
    calls = []

    def losses(self):
        calls.append(1)
        L = real(self)
        return L if len(calls) < 2 else np.full_like(L, np.nan)

    monkeypatch.setattr(type(backend), "losses", losses)
    with pytest.raises(NumericalError, match="round 1: the booster's losses hold 80 NaN or infinite value"):
        trainer.fit(X, y)


# ---------------------------------------------------------------------------------- convergence


def test_a_solver_stopped_by_max_iter_warns_with_its_gap(monkeypatch):
    monkeypatch.setattr("budro.solvers._dual_lists._MAX_PAIRS", 0)  # the cutting plane (lists certify in 1)
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(50, 3))
    losses = rng.random((50, 2))
    problem = TransportProblem(losses, rng.integers(0, 2, 50), EmbeddingCost(Z), 0.3)
    with pytest.warns(ConvergenceWarning, match=r"solver 'dual' stopped before convergence after 1 iteration\(s\) "
                                                r"\(max_iter=1\).*may lie up to [0-9.e+-]+ \("):
        res = DualSolver(max_iter=1).solve(problem)
    assert not res.converged and res.gap > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        full = DualSolver().solve(problem)  # converged: no warning
    assert full.converged and full.gap < 1e-9 and res.objective < full.objective


@pytest.mark.parametrize("solver", [DualSGDSolver(n_steps=1, polish=False, gap_rtol=1e-12),
                                    EntropicSGDSolver(n_steps=1, polish=False, tol=1e-12, gamma_rel=1e-6)])
def test_unpolished_sgd_solvers_report_non_convergence(solver):
    rng = np.random.default_rng(4)
    Z = rng.normal(size=(80, 3))
    problem = TransportProblem(rng.random((80, 2)) * 3, rng.integers(0, 2, 80), EmbeddingCost(Z), 0.2)
    with pytest.warns(ConvergenceWarning, match=f"solver '{solver.name}' stopped before convergence.*polish=False"):
        res = solver.solve(problem)
    assert not res.converged and res.gap > 0


def test_non_convergence_is_recorded_per_round_and_summarised(monkeypatch):
    monkeypatch.setattr("budro.solvers._dual_lists._MAX_PAIRS", 0)  # the cutting plane (lists certify in 1)
    X, y = _data(n=80, seed=1)
    clf = BuDROClassifier(solver="dual", solver_params={"max_iter": 1}, protected=[2], eps=0.02, n_steps=4,
                          backend_params=FAST, fair_metric_params={"fit_linear_models": False}, random_state=0)
    with pytest.warns(ConvergenceWarning) as caught:
        clf.fit(X, y)
    messages = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    # One warning for the first round, one summary: not one per round.
    assert len(messages) == 2, messages
    assert "max_iter=1" in messages[0]
    assert messages[1].startswith("4 of 4 BuDRO rounds stopped before the solver converged (rounds 0, 1, 2, 3")
    assert all(not r.converged and r.gap > 0 for r in clf.history_)
    d = clf.history_[0].to_dict()
    assert d["converged"] is False and d["gap"] == clf.history_[0].gap and "time_total" in d
    # A converged fit records it too.
    ok = BuDROClassifier(protected=[2], eps=0.02, n_steps=2, backend_params=FAST,
                         fair_metric_params={"fit_linear_models": False}, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        ok.fit(X, y)
    assert all(r.converged and r.gap <= 1e-9 for r in ok.history_)


def test_round_record_defaults_keep_old_constructors():
    r = RoundRecord(step=0, robust_loss=1.0, plain_loss=0.5, eta=0.1, transport_cost=0.2, solver_iterations=3,
                    time_losses=0.0, time_solve=0.0, time_tree=0.0)
    assert r.converged is True and math.isnan(r.gap)


# ---------------------------------------------------------------------------------- dense size limits


class _HugeCost(Cost):
    """A cost of 40000 points that fails the test if any column is read."""

    def __init__(self, n):
        self.n = n

    def column_block(self, start, stop):
        raise AssertionError("the solver read the n x n cost instead of refusing first")

    def entries(self, rows, cols):
        raise AssertionError("the solver read the n x n cost instead of refusing first")


def _huge_problem(n=40_000):
    labels = np.zeros(n, dtype=int)
    labels[::2] = 1
    return TransportProblem(np.zeros((n, 2)), labels, _HugeCost(n), 0.1)


@pytest.mark.parametrize("solver, fits", [
    (EntropicSolver(), "use solver 'dual' with n_neighbors=32"),
    (EntropicSGDSolver(), "use solver 'dual' with n_neighbors=32"),
    (DualSolver(), "use n_neighbors=32"),
    (DualSGDSolver(), "use solver 'dual' with n_neighbors=32"),
])
def test_dense_solvers_refuse_a_huge_full_problem_before_reading_it(solver, fits):
    with pytest.raises(ValidationError, match=rf"n = 40000: solver '{solver.name}' on the full \(n x n\) transport "
                                              rf"problem needs ~\d+ min and ~[\d.]+ MiB per round.*{fits}.*max_dense_n"):
        solver.solve(_huge_problem())


def test_entropic_estimate_at_40000_and_a_held_matrix():
    from budro.solvers import _sizing

    est = _sizing.dense_estimate("entropic", 40_000, held=False, block_bytes=8 << 20)
    assert 10 * 60 < est.seconds < 20 * 60  # the issue: more than 10 minutes per round
    held = _sizing.dense_estimate("entropic", 40_000, held=True, block_bytes=8 << 20)
    assert held.bytes >= 8 * 40_000**2 and "GiB" in held.describe()


def test_max_dense_n_is_a_solver_parameter():
    rng = np.random.default_rng(5)
    Z = rng.normal(size=(60, 2))
    problem = TransportProblem(rng.random((60, 2)), rng.integers(0, 2, 60), EmbeddingCost(Z), 0.2)
    with pytest.raises(ValidationError, match="n = 60: solver 'entropic'.*now 50"):
        EntropicSolver(max_dense_n=50).solve(problem)
    assert EntropicSolver(max_dense_n=None).solve(problem).converged
    assert DualSolver(max_dense_n=60).solve(problem).converged
    # A sparse cost is never limited.
    sparse = TransportProblem(problem.losses, problem.labels, NeighborCost(Z, 5), 0.2)
    assert EntropicSolver(max_dense_n=10).solve(sparse).converged
    for bad in (0, -1, 2.5, True, "big"):
        with pytest.raises(ValidationError, match="max_dense_n must be None"):
            EntropicSolver(max_dense_n=bad)


def test_lp_refusal_gives_its_estimate():
    with pytest.raises(ValidationError, match=r"n = 1000 points exceeds max_n = 400.*would need ~\d+ min and ~[\d.]+ GiB"):
        LPSolver().check_size(1000)


def test_the_fit_refuses_before_any_work(monkeypatch):
    X, y = _data(n=80)
    clf = BuDROClassifier(solver="entropic", solver_params={"max_dense_n": 50}, protected=[2], eps=0.1, n_steps=2,
                          backend_params=FAST, fair_metric_params={"fit_linear_models": False})
    from budro import registry

    def no_metric_fit(*args, **kwargs):
        raise AssertionError("the fair metric was fitted before the size check")

    learner = type(registry.create("fair_metric", "sensitive-subspace"))
    monkeypatch.setattr(learner, "fit", no_metric_fit)
    with pytest.raises(ValidationError, match="n = 80: solver 'entropic'.*max_dense_n \\(now 50"):
        clf.fit(X, y)
    monkeypatch.undo()
    sparse = BuDROClassifier(solver="entropic", solver_params={"max_dense_n": 50}, n_neighbors=8, protected=[2],
                             eps=0.1, n_steps=2, backend_params=FAST, fair_metric_params={"fit_linear_models": False})
    assert len(sparse.fit(X, y).history_) == 2


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_solver_weights_are_refused_with_the_round(bad):
    # the round loop checks a solver's weights by their sum (one reduction); any NaN or infinite
    # entry must still be refused, and huge finite weights (an overflowing sum) are not
    from budro.core import _check_result
    from budro.transport import TransportResult

    weights = np.full((5, 2), 0.1)
    weights[3, 1] = bad
    with pytest.raises(NumericalError, match="round 7: solver 'dual' returned a non-finite"):
        _check_result(TransportResult(weights=weights, objective=0.5, transport_cost=0.0), 7, DualSolver())
    _check_result(TransportResult(weights=np.full((5, 2), 1e308), objective=0.5, transport_cost=0.0), 7, DualSolver())


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 30), K=st.integers(1, 3),
       sign=st.sampled_from([1.0, -1.0, 0.0]), zeros=st.sampled_from([0.0, -0.0, None]))
def test_max_abs_loss_is_the_largest_loss_magnitude_computed_once(seed, n, K, sign, zeros):
    # (the solvers' tie tolerances read it several times a solve; computed without |losses|,
    # it must be np.abs(losses).max() to the bit: all signs mixed (sign 0), signed zeros)
    rng = np.random.default_rng(seed)
    losses = (sign if sign else rng.choice([1.0, -1.0], size=(n, K))) * rng.exponential(size=(n, K))
    if zeros is not None:
        losses[rng.random((n, K)) < 0.5] = zeros
    problem = TransportProblem(losses, rng.integers(0, K, size=n), EmbeddingCost(rng.normal(size=(n, 2))), 0.1)
    want = float(np.abs(losses).max())
    assert problem.max_abs_loss == want and math.copysign(1.0, problem.max_abs_loss) == math.copysign(1.0, want)
    assert "max_abs_loss" in vars(problem)  # kept on the problem after the first read
