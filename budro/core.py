"""The orchestrator: Algorithm 3 of the paper (BuDRO), composing one backend, one solver and one
fair metric.

Each round t:

1. ``L = backend.losses()``: loss of f_t at every training point under every label;
2. ``result = solver.solve(TransportProblem(L, y, cost, eps))``: the worst-case reweighting;
3. ``backend.step(result.weights)``: one more tree on D0 = {(x_i, k)} weighted by P(x_i, k).
"""

from __future__ import annotations

import inspect
import math
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from budro.backends.base import Backend
from budro.exceptions import ConvergenceWarning, NumericalError, ValidationError
from budro.metrics.base import FairMetricLearner, FittedFairMetric
from budro.solvers.base import Solver
from budro.transport import Cost, NeighborCost, TransportProblem, TransportResult

__all__ = ["BuDRO", "RoundRecord", "RoundInfo", "Callback"]


@dataclass(frozen=True)
class RoundRecord:
    """What happened in one boosting round (the model f_t before this round's tree)."""

    step: int
    robust_loss: float
    plain_loss: float
    eta: float
    transport_cost: float
    solver_iterations: int
    time_losses: float
    time_solve: float
    time_tree: float
    #: Whether the solver met its own stopping rule this round (False: stopped by max_iter, n_steps,
    #: a time budget...; a :class:`~budro.exceptions.ConvergenceWarning` was issued).
    converged: bool = True
    #: How far the robust loss may lie below this round's optimum, as certified by the solver
    #: (:attr:`budro.transport.TransportResult.gap`); NaN when the solver gives no certificate.
    gap: float = math.nan

    @property
    def time_total(self) -> float:
        return self.time_losses + self.time_solve + self.time_tree

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["time_total"] = self.time_total
        return d


@dataclass(frozen=True)
class RoundInfo:
    """Passed to callbacks after each round."""

    record: RoundRecord
    problem: TransportProblem
    result: TransportResult
    n_steps: int
    trainer: "BuDRO"


#: A callback receives a :class:`RoundInfo`; returning True stops training after that round.
Callback = Callable[[RoundInfo], Any]


class BuDRO:
    """Fair gradient boosting (Algorithm 3) with explicit plugin instances.

    Most users want :class:`budro.BuDROClassifier`; this class is the engine underneath, for
    callers who build their own backend, solver and fair metric.

    Parameters
    ----------
    backend : Backend
    solver : Solver
    fair_metric : FairMetricLearner or FittedFairMetric
        A learner is fitted on the training data; a fitted metric is used as it is.
    eps : float
        Transport budget (``eps = 0`` is plain boosting).
    n_steps : int
        BuDRO rounds after f_0.
    callbacks : sequence of callables
        Each called with a :class:`RoundInfo` after every round; one returning True stops training.
    n_neighbors : int, "exact" or None
        None or ``"exact"``: the full transport problem (every point may move to every other; the cost is
        computed in column blocks, never stored as an n x n matrix unless small).  An integer m:
        the sparse problem where each point may only move to its m nearest neighbours in the fair
        metric (:class:`~budro.transport.NeighborCost`, built once per fit): O(n m) per round.

    Attributes
    ----------
    history_ : list of RoundRecord
        One record per round, with the time of its three phases.
    time_setup_, time_start_, time_rounds_ : float
        Seconds spent fitting the fair metric and building the cost; in ``backend.start`` (the
        library's training structures and f_0); in the round loop (its phases plus the per-round
        bookkeeping: ``time_rounds_ - sum(r.time_total for r in history_)``).
    """

    def __init__(self, backend: Backend, solver: Solver, fair_metric: FairMetricLearner | FittedFairMetric,
                 *, eps: float, n_steps: int, callbacks: Sequence[Callback] = (), n_neighbors: int | str | None = None):
        if not isinstance(backend, Backend):
            raise ValidationError(f"backend must be a budro Backend, got {type(backend).__name__}")
        if not isinstance(solver, Solver):
            raise ValidationError(f"solver must be a budro Solver, got {type(solver).__name__}")
        if not isinstance(fair_metric, (FairMetricLearner, FittedFairMetric)):
            raise ValidationError(f"fair_metric must be a budro FairMetricLearner or fitted metric, got {type(fair_metric).__name__}")
        self.backend = backend
        self.solver = solver
        self.fair_metric = fair_metric
        self.eps = _check_eps(eps)
        self.n_steps = _check_n_steps(n_steps)
        for cb in callbacks:
            if not callable(cb):
                raise ValidationError(f"callbacks must be callables, got {cb!r}")
        self.callbacks = tuple(callbacks)
        self.n_neighbors = _check_n_neighbors(n_neighbors)

    def fit(self, X: np.ndarray, y: np.ndarray, *, protected: Sequence[int] = (), n_classes: int | None = None,
            random_state: int | None = None, metric_X: np.ndarray | None = None,
            categorical_features: Sequence[int] = ()) -> "BuDRO":
        """Train on ``X`` (n, d) with integer labels ``y`` in ``[0, n_classes)``.

        ``X`` goes to the booster: it may hold NaN (missing) and, in the columns
        ``categorical_features``, integer category codes, for a backend that takes them.  The fair
        metric and the transport cost see ``metric_X`` (n, d'), the points in the metric's
        coordinates (default: ``X``), which must be finite; ``protected`` indexes its columns.
        :class:`budro.tables.TableEncoder` makes both matrices from a DataFrame.
        """
        from budro._threads import limit_threads

        # BLAS and OpenMP pools of budro's own work (fair metric, neighbour graph, solves) bounded
        # to the cores this process may use (affinity mask, cgroup quota): budro/_threads.py.
        with limit_threads():
            return self._fit(X, y, protected=protected, n_classes=n_classes, random_state=random_state,
                             metric_X=metric_X, categorical_features=categorical_features)

    def _fit(self, X: np.ndarray, y: np.ndarray, *, protected: Sequence[int] = (), n_classes: int | None = None,
             random_state: int | None = None, metric_X: np.ndarray | None = None,
             categorical_features: Sequence[int] = ()) -> "BuDRO":
        """The body of :meth:`fit` (inside its thread limits)."""
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y)
        if X.ndim != 2 or y.shape != (X.shape[0],):
            raise ValidationError(f"X must be (n, d) and y (n,); got {X.shape} and {y.shape}")
        if metric_X is None:
            metric_X = X
        else:
            metric_X = np.asarray(metric_X, dtype=np.float64)
            if metric_X.ndim != 2 or metric_X.shape[0] != X.shape[0]:
                raise ValidationError(f"metric_X must be (n, d') with the n = {X.shape[0]} rows of X; got {metric_X.shape}")
        if not np.isfinite(metric_X).all():
            where = "X" if metric_X is X else "metric_X"
            raise ValidationError(
                f"{where} has missing (NaN) or infinite values, which the fair metric cannot measure; pass a "
                f"DataFrame to BuDROClassifier (missing values are imputed for the metric) or metric_X with no NaN"
            )
        categorical_features = tuple(int(j) for j in categorical_features)
        if any(not 0 <= j < X.shape[1] for j in categorical_features):
            raise ValidationError(f"categorical_features must be column indices of X (0..{X.shape[1] - 1}), got {categorical_features}")
        K = int(n_classes if n_classes is not None else y.max() + 1)
        check_solver_size(self.solver, X.shape[0], sparse=self.n_neighbors is not None,
                          embedding=expects_embedding(self.fair_metric))
        warm = _check_capabilities(self, X, K, categorical_features)  # declared capabilities, before any work
        t0 = time.perf_counter()
        prepare = getattr(self.solver, "prepare", None)  # e.g. load compiled kernels during the set-up
        if callable(prepare):
            prepare(X.shape[0], sparse=self.n_neighbors is not None)
        if isinstance(self.fair_metric, FairMetricLearner):
            self.metric_ = self.fair_metric.fit(metric_X, protected, y=y)
        else:
            self.metric_ = self.fair_metric
        try:
            if self.n_neighbors is None:
                self.cost_: Cost = self.metric_.cost(metric_X)
            else:
                embed = getattr(self.metric_, "embed", None)
                if embed is None:
                    raise ValidationError(
                        f"n_neighbors needs a fair metric with an embedding (embed(X)); {type(self.metric_).__name__} has none"
                    )
                self.cost_ = NeighborCost(embed(metric_X), self.n_neighbors, n_jobs=-1)
        except NumericalError as exc:  # overflowing or NaN fair distances: name the features' scale
            big = float(np.abs(metric_X).max()) if metric_X.size else 0.0
            raise NumericalError(
                f"the fair cost cannot be computed from these features (values up to {big:.3g}): {exc}"
            ) from None
        self.time_setup_ = time.perf_counter() - t0

        # Backends that predate category codes take no categorical_features keyword.
        extra = {"categorical_features": categorical_features} if categorical_features else {}
        t_start = time.perf_counter()
        self.backend.start(X, y, K, random_state=random_state, **extra)
        t_loop = time.perf_counter()
        self.time_start_ = t_loop - t_start
        self.history_: list[RoundRecord] = []
        self.last_result_: TransportResult | None = None
        eta: float | None = None
        unconverged: list[RoundRecord] = []
        # Per-fit constants of the round loop (a BuDRO round on German costs well under a
        # millisecond outside the solve, so nothing is recomputed per round that need not be).
        label_entries: np.ndarray | None = None  # flat indices of losses[i, y_i] (take: 5x a fancy index)
        for t in range(self.n_steps):
            t0 = time.perf_counter()
            losses = self.backend.losses()
            t1 = time.perf_counter()
            try:  # TransportProblem checks the losses are finite (one pass over them)
                problem = TransportProblem(losses, y, self.cost_, self.eps)
            except NumericalError:
                _check_losses(losses, t)  # the same finding, naming the round
                raise
            if label_entries is None:
                label_entries = np.arange(len(y)) * problem.losses.shape[1] + problem.labels
            if unconverged:  # the first round's warning stands for all; a summary follows the fit
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    result = self.solver.solve(problem, eta0=eta if warm else None)
            else:
                result = self.solver.solve(problem, eta0=eta if warm else None)
            _check_result(result, t, self.solver)
            t2 = time.perf_counter()
            self.backend.step(result.weights)
            t3 = time.perf_counter()
            record = RoundRecord(
                step=t,
                robust_loss=float(result.objective),
                plain_loss=float(problem.losses.take(label_entries).mean()),
                eta=float(result.eta),
                transport_cost=float(result.transport_cost),
                solver_iterations=int(result.n_iter),
                time_losses=t1 - t0,
                time_solve=t2 - t1,
                time_tree=t3 - t2,
                converged=bool(result.converged),
                gap=float(result.gap),
            )
            if not record.converged:
                unconverged.append(record)
            self.history_.append(record)
            self.last_result_ = result
            eta = result.eta if math.isfinite(result.eta) else None
            info = RoundInfo(record=record, problem=problem, result=result, n_steps=self.n_steps, trainer=self)
            if any([bool(cb(info)) for cb in self.callbacks]):
                break
        self.time_rounds_ = time.perf_counter() - t_loop
        self.backend.finish()
        if len(unconverged) > 1:
            gaps = [r.gap for r in unconverged if math.isfinite(r.gap)]
            warnings.warn(
                f"{len(unconverged)} of {len(self.history_)} BuDRO rounds stopped before the solver converged "
                f"(rounds {', '.join(str(r.step) for r in unconverged[:10])}{', ...' if len(unconverged) > 10 else ''}"
                f"{f'; largest remaining gap {max(gaps):.3g}' if gaps else ''}): see history_[t].converged and .gap; "
                f"raise the solver's iteration limit",
                ConvergenceWarning,
                stacklevel=3,  # the caller of fit (this is _fit, inside fit)
            )
        return self


def _check_losses(losses: Any, step: int) -> None:
    """A booster whose losses are NaN/inf would make every transport solve meaningless."""
    arr = np.asarray(losses)
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
        raise NumericalError(
            f"round {step}: the booster's losses hold {bad} NaN or infinite value(s) (of {arr.size}): the model "
            f"diverged or the features overflow; standardise the features, lower the learning rate, or use a "
            f"smaller eps"
        )


def _check_result(result: TransportResult, step: int, solver: Solver) -> None:
    """The solver's weights and objective must be finite (they become the next tree's weights)."""
    weights = np.asarray(result.weights, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):  # a NaN/inf entry makes the sum non-finite
        finite = math.isfinite(float(weights.sum())) or bool(np.isfinite(weights).all())
    if not (math.isfinite(float(result.objective)) and finite):
        raise NumericalError(
            f"round {step}: solver {getattr(solver, 'name', '') or type(solver).__name__!r} returned a non-finite "
            f"objective ({float(result.objective)!r}) or weights; the costs or losses overflowed: standardise the features"
        )


def _check_eps(eps: Any) -> float:
    if isinstance(eps, (bool, str, bytes)):  # a number, not its spelling: "0.1" is refused as 0.1 is not
        raise ValidationError(f"eps must be a finite number >= 0, got {eps!r}")
    try:
        value = float(eps)
    except (TypeError, ValueError):
        raise ValidationError(f"eps must be a finite number >= 0, got {eps!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValidationError(f"eps must be a finite number >= 0, got {eps!r}")
    return value


def _check_capabilities(trainer: "BuDRO", X: np.ndarray, K: int, categorical_features: Sequence[int]) -> bool:
    """Refuse what a plugin does not declare it can do (``budro.plugin_types.CAPABILITIES``), naming
    the plugin and the capability; return whether the solver takes a warm start."""
    from budro.registry import capabilities_of

    solver_caps = capabilities_of("solver", trainer.solver)
    solver_label = f"solver {type(trainer.solver).__name__}"
    if trainer.n_neighbors is not None and "sparse-cost" not in solver_caps:
        raise ValidationError(f"n_neighbors={trainer.n_neighbors} makes a sparse NeighborCost, but the {solver_label} does "
                              f"not declare the 'sparse-cost' capability (it declares: {', '.join(sorted(solver_caps))}); "
                              f"use a solver that does (e.g. 'dual') or n_neighbors=None")
    if trainer.n_neighbors is None and "dense-cost" not in solver_caps:
        raise ValidationError(f"the {solver_label} does not declare the 'dense-cost' capability (it declares: "
                              f"{', '.join(sorted(solver_caps))}); set n_neighbors for a sparse NeighborCost")
    if isinstance(trainer.fair_metric, FairMetricLearner) and trainer.n_neighbors is not None:
        metric_caps = capabilities_of("fair_metric", trainer.fair_metric)
        if "embedding" not in metric_caps:
            raise ValidationError(f"n_neighbors needs a fair metric with the 'embedding' capability; "
                                  f"{type(trainer.fair_metric).__name__} does not declare it")
    backend_caps = capabilities_of("backend", trainer.backend)
    backend_label = f"backend {type(trainer.backend).__name__}"
    needs = [("multiclass", K > 2, f"{K} classes"),
             ("missing-values", bool(np.isnan(X).any()), "missing (NaN) values in X"),
             ("native-categorical", bool(len(categorical_features)), "categorical columns (categorical_features)")]
    for capability, needed, what in needs:
        if needed and capability not in backend_caps:
            raise ValidationError(f"the data has {what}, but the {backend_label} does not declare the {capability!r} "
                                  f"capability (it declares: {', '.join(sorted(backend_caps)) or 'none'})")
    return "warm-start" in solver_caps


def expects_embedding(fair_metric: Any) -> bool:
    """Whether the full problem's cost will be an embedding cost (a fitted metric with ``embed``,
    or a learner declaring the ``"embedding"`` capability): known before the metric is fitted."""
    if isinstance(fair_metric, FairMetricLearner):
        from budro.registry import capabilities_of

        return "embedding" in capabilities_of("fair_metric", fair_metric)
    return callable(getattr(fair_metric, "embed", None))


def check_solver_size(solver: Solver, n: int, *, sparse: bool, embedding: bool) -> None:
    """Refuse, before any work, a full problem too large for the solver (its ``check_size``, if any).

    ``embedding`` is passed to solvers whose ``check_size`` takes it (``dual``: an embedding cost
    from ``full_min_n`` points on takes its full path, which never forms n x n)."""
    check_size = getattr(solver, "check_size", None)
    if not callable(check_size):
        return
    try:
        takes_embedding = "embedding" in inspect.signature(check_size).parameters
    except (TypeError, ValueError):
        takes_embedding = False
    if takes_embedding:
        check_size(n, sparse=sparse, embedding=embedding)
    else:
        check_size(n, sparse=sparse)


def _check_n_neighbors(n_neighbors: Any) -> int | None:
    """``n_neighbors`` as the orchestrator uses it: an int m (the m-neighbour restriction) or None
    (the full problem; ``"exact"`` is its explicit spelling)."""
    if n_neighbors is None or (isinstance(n_neighbors, str) and n_neighbors == "exact"):
        return None
    if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, (int, np.integer)) or n_neighbors < 1:
        raise ValidationError(
            f"n_neighbors must be an integer >= 1 (the m-neighbour restriction), \"exact\" or None (the full "
            f"problem), got {n_neighbors!r}"
        )
    return int(n_neighbors)


def _check_n_steps(n_steps: Any) -> int:
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise ValidationError(f"n_steps must be an integer >= 0, got {n_steps!r}")
    return int(n_steps)
