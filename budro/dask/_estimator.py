"""``DaskBuDROClassifier``: BuDRO on a Dask cluster (issue 15).

How a fit runs (every phase on the workers; the client only sends scalars and short lists per
round, ``history_[t].bytes_sent`` / ``bytes_received`` count them):

1. **Checks** before any work: parameters (those of :class:`budro.BuDROClassifier`, validated by
   its own code), the inputs (dask arrays or DataFrames with known chunk sizes and numeric
   columns, ``y`` of the same length; numpy/pandas inputs are scattered to the workers), then one
   pass over the blocks on the workers (non-finite features, missing labels, the classes).
2. **Fair metric** fitted in one task on a worker, on all rows (``metric_sample=None``: the
   learners are in-memory scikit-learn fits, so the whole metric input is gathered on that one
   worker) or on ``metric_sample`` rows drawn uniformly (seeded by ``random_state``); the budget
   diagnosis (``budget_``, ``eps_scale_``) comes from the same rows.
3. **Partitions** by fair-metric locality: k-means (scikit-learn, fitted on an embedded sample of
   :data:`KMEANS_SAMPLE` rows) assigns every row to one of ``n_partitions`` cells on the workers;
   the cells go to one Dask Actor per worker (:class:`budro.dask._shard.Shard`), largest first to
   the least loaded.  Each shard embeds its rows and builds the neighbour lists *within each of
   its cells* (:class:`budro.transport.NeighborCost`).  ``neighbor_recall_`` reports the share of
   the single-machine neighbour pairs that stay inside a cell (on :data:`RECALL_SAMPLE` query
   rows, searched against every row on the workers).
4. **Rounds**: each shard computes its losses from the margins XGBoost keeps for its training
   ``DMatrix``; the exact dual of the union of all lists is solved by a distributed search over
   eta (:mod:`budro.dask._search`); each shard recovers its columns' part of the plan with one
   global budget split and grows the next tree with budro's own XGBoost backend, all shards under
   one ``xgboost.collective`` communicator (XGBoost's distributed ``hist``: the trees are those of
   one machine on the union of the rows).
5. The model is kept on the client as a single-machine :class:`budro.BuDROClassifier`
   (:meth:`to_local`), which predicts on raw features and saves with budro's model format.

Tables: a dask DataFrame with text, categorical or boolean columns, or data with missing values,
is encoded as :class:`budro.BuDROClassifier` encodes it (:class:`budro.tables.TableEncoder`): the
encoder is fitted in the fair metric's task (categories counted on every row first, in the
checks' pass), every block is turned into the booster's and the metric's matrices on the workers,
and the local model keeps the encoder.

Features: with one shard (one partition, or one worker) the booster sees the raw features,
exactly as :class:`budro.BuDROClassifier` does.  With several shards every feature is first
coded by global quantiles (at most ``max_bin`` codes, default 256, cut points from a sample of
:data:`BIN_SAMPLE` rows), so that XGBoost's distributed sketch finds the same bins whatever the
partitioning; the local model maps the trees' thresholds back to the raw features.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np

from budro.budget import check_budget, check_eps_unit, effective_eps
from budro.core import RoundInfo, RoundRecord, _check_eps, _check_n_neighbors, _check_n_steps
from budro.estimator import BuDROClassifier, adopt_table
from budro.exceptions import ConvergenceWarning, NumericalError, ValidationError
from budro.solvers import _dual_plan
from budro.dask._search import ClusterError, Shards, budget_shares, hulls_and_solve

__all__ = ["DaskBuDROClassifier", "DaskRoundRecord", "ClusterError", "PARTITIONINGS"]

#: Rows of the embedded sample the k-means partitioning is fitted on.
KMEANS_SAMPLE = 20_000
#: Rows of the sample the global quantile codes are cut from.
BIN_SAMPLE = 200_000
#: Query rows of the neighbour-recall measurement.
RECALL_SAMPLE = 500
#: Seconds a shard waits in one of XGBoost's collective operations for the others (a shard whose
#: peer died stops there with an error instead of holding its worker's actor thread for ever).
COLLECTIVE_TIMEOUT = 600


@dataclass(frozen=True)
class DaskRoundRecord(RoundRecord):
    """A :class:`budro.core.RoundRecord` of a distributed round, with its phases and traffic.

    ``time_losses``: the slowest shard's seconds computing this round's losses from its margins
    (done at the end of the previous round's tree call, which returns them).  ``time_solve``:
    client wall time of the hulls call, the eta search and the budget split (``time_hulls``,
    ``time_search``) plus the slowest shard's recovery (``time_recover``).  ``time_tree``: client
    wall time of the tree call less that recovery and the next losses (network included);
    ``worker_time_hulls`` / ``worker_time_tree``: the slowest shard's own seconds (wall), and
    ``worker_cpu_*`` the largest CPU seconds of a shard's thread there (wall well above CPU: the
    shard waited for a core, or for its peers in XGBoost's allreduce).  So
    ``time_total`` is about the wall time of a round.  ``bytes_sent`` / ``bytes_received``: payload
    of the round's actor calls (pickled arguments to the shards, pickled results back), ``calls``
    their number (one per shard per call)."""

    time_hulls: float = 0.0
    time_search: float = 0.0
    time_recover: float = 0.0
    worker_time_hulls: float = 0.0
    worker_time_tree: float = 0.0
    worker_cpu_hulls: float = 0.0
    worker_cpu_tree: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    calls: int = 0
    eta_guess: float = math.nan
    selection_steps: int = 0

    def to_round_record(self) -> RoundRecord:
        return RoundRecord(step=self.step, robust_loss=self.robust_loss, plain_loss=self.plain_loss, eta=self.eta,
                           transport_cost=self.transport_cost, solver_iterations=self.solver_iterations,
                           time_losses=self.time_losses, time_solve=self.time_solve, time_tree=self.time_tree,
                           converged=self.converged, gap=self.gap)


def _embedding_dim(metric: Any, n_features: int) -> int:
    """Columns of the fitted metric's embedding (0: every fair distance is 0)."""
    return int(np.asarray(metric.embed(np.zeros((1, n_features)))).shape[1])


def _cells_kmeans(est: "DaskBuDROClassifier", ctx: dict) -> Any:
    """k-means on an embedded sample; every row's cell, assigned on the workers."""
    import dask
    import dask.array as da
    from budro.dask import _shard

    X, N, P = ctx["X"], ctx["n"], ctx["n_partitions"]
    idx = _sample_index(N, KMEANS_SAMPLE, ctx["seed"])
    parts = [dask.delayed(_shard.embed_block)(dask.delayed(_shard.sample_X)(b, i), ctx["metric"])
             for b, i in _blocks_with_index(X, idx)]
    kmeans = ctx["client"].compute(dask.delayed(_shard.fit_partitioner)(parts, P, ctx["seed"])).result()
    return X.map_blocks(_shard.assign_block, ctx["metric"], kmeans, dtype=np.int64, drop_axis=1,
                        name=f"budro-cells-{uuid.uuid4().hex}"), kmeans


def _cells_blocks(est: "DaskBuDROClassifier", ctx: dict) -> Any:
    """Contiguous row ranges of equal size (no locality: a baseline and for tests)."""
    import dask.array as da

    N, P = ctx["n"], ctx["n_partitions"]
    rows = da.arange(N, chunks=ctx["X"].chunks[0])
    return (rows * P) // N, None


#: ``partitioning=`` values: how rows are grouped into partitions (cells).
PARTITIONINGS = {"kmeans": _cells_kmeans, "blocks": _cells_blocks}


def _sample_index(n: int, size: int | None, seed: int) -> np.ndarray:
    if size is None or size >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def _blocks_with_index(X: Any, idx: np.ndarray):
    """(block as a delayed object, the rows of idx inside it) for each row block of X."""
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    blocks = X.to_delayed().ravel()
    for b, start, stop in zip(blocks, offsets[:-1], offsets[1:]):
        lo, hi = np.searchsorted(idx, [start, stop])
        if hi > lo:
            yield b, idx[lo:hi] - start


class DaskBuDROClassifier(BuDROClassifier):
    """BuDRO on a Dask cluster: the parameters of :class:`budro.BuDROClassifier`, plus

    Parameters
    ----------
    client : distributed.Client, optional
        The cluster to train on; None: ``distributed.get_client()`` (the current client).
    n_partitions : int, optional
        Partitions (cells) of the fair-metric partitioning; the adversary moves mass only within a
        cell.  None: one per worker.  Cells are spread over at most one shard (Dask Actor) per
        worker.  One partition reproduces :class:`budro.BuDROClassifier` (probabilities equal to
        1e-6 on the same data and parameters).
    partitioning : {"kmeans", "blocks"}, default "kmeans"
        ``"kmeans"``: k-means on the fair metric's embedding (fitted on a sample, assigned on the
        workers), so that near points share a cell.  ``"blocks"``: contiguous row ranges.
    metric_sample : int, optional
        Rows the fair metric (and the budget diagnosis) is fitted on, drawn uniformly with
        ``random_state``; None: every row, gathered on one worker for the fit.
    **params
        Those of :class:`budro.BuDROClassifier`.  ``n_neighbors`` must be an integer (the
        neighbour lists within each partition); ``solver`` must be the exact ``"dual"``;
        ``backend`` must be ``"xgboost"`` (LightGBM and CatBoost are refused, with the reason);
        ``preprocessing`` as there: a dask DataFrame with text, categorical or boolean columns,
        or any input with missing values, goes through :class:`budro.tables.TableEncoder`
        (``"auto"`` or ``"table"``), fitted with the fair metric on the ``metric_sample`` rows
        (every row by default) with the categories of every row, and applied to each block on
        the workers; ``table_`` holds it and the local model keeps it.
        ``callbacks`` receive a :class:`budro.core.RoundInfo` whose ``record`` is the round's
        :class:`DaskRoundRecord` and whose ``problem`` and ``result`` are None (the round's
        losses and plan stay on the workers).  XGBoost's thread count defaults to the workers'
        thread count.

    Notes
    -----
    What is exact: with one shard (one partition, or a one-worker cluster) the fit is
    :class:`budro.BuDROClassifier`'s on the same data and parameters, round by round.  With
    several partitions each round solves exactly the transport problem on the union of the
    partitions' neighbour lists (eta, robust loss and plan are DualSolver's on those lists, columns
    ordered shard by shard) and the trees are those one machine grows on the quantile-coded
    features with those plans.  What differs from a single-machine fit is the adversary: a point
    may only move within its partition (``neighbor_recall_`` measures the share of neighbour
    pairs kept) and features are coded to at most ``max_bin`` quantiles.  ``subsample`` /
    ``colsample_*`` draw per shard.

    Failures: bad inputs raise :class:`~budro.exceptions.ValidationError` before any work.  A
    worker lost during the fit, or a client closed mid-fit, raises :class:`ClusterError` and no
    model is kept (a shard's rows, booster and margins live only on its worker; fit again).  A
    partition smaller than ``n_neighbors`` is refused (lower ``n_partitions``); partitions of
    very different sizes are balanced over the shards (largest first to the least loaded); a
    partition holding one class only needs nothing special (its points can only move within it,
    and keep their labels).  A shard waits at most ``COLLECTIVE_TIMEOUT`` (600 s) in XGBoost's
    collective operations for a peer.

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_, protected_indices_, fair_metric_, budget_,
    eps_scale_, eps_effective_ : as in :class:`budro.BuDROClassifier`.
    history_ : list of DaskRoundRecord
        Per round: the single-machine record's fields plus phase times and bytes moved.
    timings_ : dict
        Seconds of the once-per-fit phases (``check``, ``metric``, ``partition``, ``shards``
        (moving rows to the shards, embedding, neighbour lists), ``start`` (f_0), ``recall``,
        ``rounds``, ``finish``) and ``bytes_setup`` (payload of the set-up actor calls).
    n_partitions_, partition_sizes_ : int, list of int
    shard_cells_ : list of lists of int
        The cells each shard held (shards in the global column order).
    neighbor_recall_ : float
        Share of the single-machine ``n_neighbors``-neighbour pairs (each point's ``n_neighbors -
        1`` nearest other points) whose two points share a partition, on a sample of query rows
        (1.0 with one partition).
    bin_edges_ : list of float32 arrays or None
        Per booster feature, the cut points of the global quantile codes (None: raw features; an
        entry None: a column of category codes, not coded).
    table_ : budro.tables.TableEncoder or None
        The table encoder (None without table preprocessing).
    """

    def __init__(self, client: Any = None, n_partitions: int | None = None, partitioning: str = "kmeans",
                 metric_sample: int | None = None, backend: str = "xgboost", backend_params: dict | None = None,
                 solver: str = "dual", solver_params: dict | None = None, fair_metric: str = "sensitive-subspace",
                 fair_metric_params: dict | None = None, protected: Any = None, eps: float = 0.1,
                 n_steps: int = 100, random_state: int | None = None, callbacks: Any = None,
                 n_neighbors: int | str | None = None, verbose: int = 0, eps_unit: str = "raw",
                 preprocessing: str = "auto", max_categories: int = 1000):
        super().__init__(backend=backend, backend_params=backend_params, solver=solver, solver_params=solver_params,
                         fair_metric=fair_metric, fair_metric_params=fair_metric_params, protected=protected,
                         eps=eps, n_steps=n_steps, random_state=random_state, callbacks=callbacks,
                         n_neighbors=n_neighbors, verbose=verbose, eps_unit=eps_unit, preprocessing=preprocessing,
                         max_categories=max_categories)
        self.client = client
        self.n_partitions = n_partitions
        self.partitioning = partitioning
        self.metric_sample = metric_sample

    #: Keep every round's losses and the neighbour lists on the shards and collect them after the
    #: fit (``recorded_``): for checks of each round against a single-machine solve.  Not a
    #: parameter; set on an instance before ``fit``.
    _record = False

    # ------------------------------------------------------------------ checks
    def _check_params(self) -> dict:
        from budro import registry
        from budro.backends.xgboost import XGBoostBackend
        from budro.solvers.dual import DualSolver

        out = {"eps": _check_eps(self.eps), "eps_unit": check_eps_unit(self.eps_unit),
               "n_steps": _check_n_steps(self.n_steps)}
        m = _check_n_neighbors(self.n_neighbors)
        if m is None:
            raise ValidationError(
                f"DaskBuDROClassifier needs n_neighbors set to an integer (each point's neighbour list within its "
                f"partition); got {self.n_neighbors!r}: the full problem couples every pair of rows across workers")
        if m < 2:
            raise ValidationError(f"n_neighbors must be >= 2 on a cluster (the point itself and at least one "
                                  f"neighbour), got {self.n_neighbors!r}")
        out["n_neighbors"] = m
        if not isinstance(self.verbose, numbers.Integral) or self.verbose < 0:
            raise ValidationError(f"verbose must be an integer >= 0, got {self.verbose!r}")
        if self.random_state is not None and (
                isinstance(self.random_state, bool) or not isinstance(self.random_state, numbers.Integral)):
            raise ValidationError(f"random_state must be an integer or None, got {self.random_state!r}")
        from budro.estimator import PREPROCESSING

        if isinstance(self.max_categories, bool) or not isinstance(self.max_categories, numbers.Integral) \
                or self.max_categories < 2:
            raise ValidationError(f"max_categories must be an integer >= 2, got {self.max_categories!r}")
        if self.preprocessing not in PREPROCESSING:
            raise ValidationError(f"preprocessing must be one of {', '.join(map(repr, PREPROCESSING))}, "
                                  f"got {self.preprocessing!r}")
        if self.n_partitions is not None and (isinstance(self.n_partitions, bool) or not isinstance(
                self.n_partitions, numbers.Integral) or self.n_partitions < 1):
            raise ValidationError(f"n_partitions must be an integer >= 1 or None (one per worker), got {self.n_partitions!r}")
        if not isinstance(self.partitioning, str) or self.partitioning not in PARTITIONINGS:
            raise ValidationError(f"partitioning must be one of {', '.join(map(repr, PARTITIONINGS))}, "
                                  f"got {self.partitioning!r}")
        if self.metric_sample is not None and (isinstance(self.metric_sample, bool) or not isinstance(
                self.metric_sample, numbers.Integral) or self.metric_sample < 2):
            raise ValidationError(f"metric_sample must be an integer >= 2 (rows the fair metric is fitted on) or None "
                                  f"(all rows), got {self.metric_sample!r}")
        backend_entry = registry.get("backend", self.backend)
        if backend_entry.name != "xgboost":
            raise ValidationError(
                f"DaskBuDROClassifier trains with backend='xgboost' only, got {self.backend!r}: a BuDRO round grows one "
                f"more tree with new soft labels and weights on rows that stay on the workers.  lightgbm.dask cannot "
                f"continue that way: DaskLGBMClassifier rejects soft labels (scikit-learn's target check), and "
                f"DaskLGBMRegressor(init_model=...) rebuilds every worker's Dataset, re-finds ports and re-scores every "
                f"row with every tree on each call (keep_training_booster is not reachable through it), a whole "
                f"LightGBM fit per round; CatBoost has no Dask interface.  Use backend='xgboost', or BuDROClassifier "
                f"on one machine")
        backend, solver, metric = self._make_plugins()
        if not isinstance(backend, XGBoostBackend):
            raise ValidationError(f"backend {self.backend!r} is not budro's XGBoost backend")
        if not isinstance(solver, DualSolver):
            raise ValidationError(
                f"DaskBuDROClassifier solves each round exactly with the distributed dual search and needs "
                f"solver='dual' (its tie_rtol, max_iter and kernel apply), got {self.solver!r}")
        from budro.registry import capabilities_of

        if "embedding" not in capabilities_of("fair_metric", metric):
            raise ValidationError(f"the fair metric {self.fair_metric!r} has no embedding (the 'embedding' capability), "
                                  f"which neighbour lists on the workers need")
        out.update(backend=backend, solver=solver, metric=metric)
        return out

    def _get_client(self) -> Any:
        if self.client is not None:
            from distributed import Client

            if not isinstance(self.client, Client):
                raise ValidationError(f"client must be a distributed.Client or None, got {type(self.client).__name__}")
            if self.client.status not in ("running", "connecting", "newly-created"):
                raise ValidationError(f"client is {self.client.status!r}, not connected to a cluster")
            return self.client
        from distributed import get_client

        try:
            return get_client()
        except ValueError:
            raise ValidationError("DaskBuDROClassifier(client=None) uses the current Dask client, but there is none: "
                                  "create a distributed.Client first or pass client=") from None

    def _as_dask(self, X: Any, y: Any, client: Any, *, fit: bool) -> tuple[Any, Any]:
        """X as a dask array (rows in blocks of known size, one block of columns, numeric), y as
        a 1-D dask array with the same row blocks; numpy/pandas inputs are scattered."""
        import dask.array as da
        import dask.dataframe as dd

        names = None
        table = fit and self.preprocessing == "table" or not fit and getattr(self, "table_", None) is not None
        if not _is_dask(X) and hasattr(X, "columns") and hasattr(X, "dtypes") and (
                table or self.preprocessing == "auto" and fit and _needs_encoding(X)):
            X = _scatter_table(X, client)  # a pandas table: a dask DataFrame of one partition per worker
        if isinstance(X, dd.DataFrame):
            bad = [str(c) for c, t in X.dtypes.items() if not _numeric(t)]
            if table or bad and self.preprocessing == "auto" and fit:
                T = _Table.from_frame(X, client)
                return T, (self._as_dask_y(y, T, client) if fit else None)
            if bad:
                raise ValidationError(
                    f"X has non-numeric columns {bad[:5]}: " + (
                        "this model was trained on numeric data without table preprocessing; pass the same kind of "
                        "data" if not fit else "preprocessing='none' takes numeric columns only; use "
                        "preprocessing='auto' or 'table' (budro.tables.TableEncoder, fitted on the workers' rows)"))
            names = np.asarray([str(c) for c in X.columns], dtype=object)
            if fit:
                self._source_frame = X  # a table after all if the checks find missing values
            X = X.to_dask_array(lengths=True)
        elif isinstance(X, da.Array):
            if X.ndim != 2:
                raise ValidationError(f"X must be a 2-D dask array (rows, features), got {X.ndim} dimensions")
            if any(math.isnan(c) for c in X.chunks[0]):
                raise ValidationError("X has unknown chunk sizes (e.g. after boolean indexing): call "
                                      "X.compute_chunk_sizes() first, or pass a dask DataFrame")
            if X.dtype.kind not in "biuf":
                raise ValidationError(f"X must hold numbers, got dtype {X.dtype}: a dask array of strings or objects "
                                      f"has no column types; pass a dask DataFrame (table preprocessing)")
        else:
            X = self._scatter_X(X, client)
        if X.numblocks[1] > 1:
            X = X.rechunk({1: -1})
        if table:
            T = _Table.from_array(X)
            return T, (self._as_dask_y(y, T, client) if fit else None)
        if fit:
            y = self._as_dask_y(y, X, client)
            if names is not None:
                self.feature_names_in_ = names
            elif hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        else:
            names_fit = getattr(self, "feature_names_in_", None)
            if names is not None and names_fit is not None and list(names) != list(names_fit):
                raise ValidationError("X's columns differ from those seen in fit (names or order)")
        return X, y

    def _scatter_X(self, X: Any, client: Any) -> Any:
        import dask.array as da
        from sklearn.utils.validation import check_array

        names = None
        if hasattr(X, "columns") and hasattr(X, "dtypes"):
            names = [str(c) for c in X.columns]
        try:
            arr = check_array(X, dtype=np.float64, ensure_all_finite=False, ensure_min_samples=1)
        except ValueError as exc:
            raise ValidationError(f"X must be a numeric (n, d) array or DataFrame: {exc}") from None
        if names is not None:
            self._scattered_names = np.asarray(names, dtype=object)
        n_workers = max(1, len(worker_addresses(client)))
        rows = max(1, math.ceil(arr.shape[0] / n_workers))
        return client.persist(da.from_array(arr, chunks=(rows, arr.shape[1])))

    def _as_dask_y(self, y: Any, X: Any, client: Any) -> Any:
        import dask.array as da
        import dask.dataframe as dd

        if isinstance(y, dd.DataFrame):
            if len(y.columns) != 1:
                raise ValidationError(f"y must be one column of labels, got a DataFrame with {len(y.columns)} columns")
            y = y[y.columns[0]]
        if isinstance(y, dd.Series):
            y = y.to_dask_array(lengths=True)
        elif isinstance(y, da.Array):
            if any(math.isnan(c) for c in y.chunks[0]):
                raise ValidationError("y has unknown chunk sizes: call y.compute_chunk_sizes() first")
        else:
            from budro.estimator import _check_labels

            arr = _check_labels(y)
            if arr.shape[0] != X.shape[0]:
                raise ValidationError(f"X has {X.shape[0]} rows but y has {arr.shape[0]} labels")
            y = client.persist(da.from_array(arr, chunks=(X.chunks[0],)))
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        if y.ndim != 1:
            raise ValidationError(f"y must be 1-D (one label per row), got shape {y.shape}")
        if y.shape[0] != X.shape[0]:
            raise ValidationError(f"X has {X.shape[0]} rows but y has {y.shape[0]} labels")
        if tuple(y.chunks[0]) != tuple(X.chunks[0]):
            y = y.rechunk((tuple(X.chunks[0]),))
        return y

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, y: Any) -> "DaskBuDROClassifier":
        """Fit on ``X`` (dask array or DataFrame, or numpy/pandas, scattered) and labels ``y``."""
        import dask
        from budro.dask import _shard

        for attr in ("_local", "history_", "timings_", "recorded_", "neighbor_recall_"):  # nothing of an earlier fit
            self.__dict__.pop(attr, None)
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        p = self._check_params()
        client = self._get_client()
        self._scattered_names = None
        X, y = self._as_dask(X, y, client, fit=True)
        frame = self.__dict__.pop("_source_frame", None)
        names = self.__dict__.pop("_scattered_names", None)
        if names is not None:
            self.feature_names_in_ = names
        N, d = int(X.shape[0]), int(X.shape[1])
        if N < 2:
            raise ValidationError(f"DaskBuDROClassifier needs at least 2 rows, got {N}")
        table = isinstance(X, _Table)
        stats = self._block_stats(X, y, client)
        if not table:
            bad = sum(s["nonfinite"] for s in stats)
            nan = sum(s["nan"] for s in stats)
            if bad and nan == bad and self.preprocessing == "auto":  # missing values: the table encoder
                X = _Table.from_array(X) if frame is None else _Table.from_frame(frame, client)
                table = True
                stats = self._block_stats(X, y, client)
            elif bad:
                raise ValidationError(
                    f"X has {bad - nan} infinite and {nan} missing (NaN) values" + (
                        ": preprocessing='none' takes numeric data without missing values; use preprocessing='auto' "
                        "or 'table' for missing values" if nan == bad else ": replace or drop the infinite ones"))
        missing = sum(s["y_missing"] for s in stats)
        if missing:
            raise ValidationError(f"y has {missing} missing labels; drop those rows")
        try:
            classes = np.unique(np.concatenate([s["labels"] for s in stats]))
        except TypeError as exc:
            raise ValidationError(f"y mixes labels that cannot be compared: {exc}") from None
        if classes.size < 2:
            raise ValidationError(f"DaskBuDROClassifier needs at least 2 classes in y; got {classes.size}: "
                                  f"{classes.tolist()}")
        self.classes_ = classes
        m = p["n_neighbors"]
        seed = int(self.random_state or 0)
        if table:
            encoder_args = self._table_args(stats)
        else:
            self.n_features_in_ = d
            self.table_ = None
            self.protected_indices_ = self._protected_indices()
        timings["check"] = time.perf_counter() - t0

        # -- fair metric (and with a table, its encoder), on the metric_sample rows
        t0 = time.perf_counter()
        idx = _sample_index(N, self.metric_sample, seed)
        if table:
            parts = [dask.delayed(_shard.sample_table)(xb, yb, i) for (xb, i), yb in _paired(X, y, idx)]
            encoder, metric, budget, _ = client.compute(dask.delayed(_shard.fit_table_metric)(
                p["metric"], tuple(self.protected or ()), classes, seed, parts, encoder_args)).result()
            adopt_table(self, encoder)
            XB, XM = self._encode_blocks(X, encoder, client)
        else:
            parts = [dask.delayed(_shard.sample_rows)(xb, yb, i) for (xb, i), yb in _paired(X, y, idx)]
            metric, budget, _ = client.compute(dask.delayed(_shard.fit_metric)(
                p["metric"], self.protected_indices_, classes, seed, parts)).result()
            XB = XM = X
        self.fair_metric_ = metric
        self.budget_ = budget
        self.eps_scale_ = budget.nn_scale
        self.eps_effective_ = effective_eps(p["eps"], p["eps_unit"], budget)
        check_budget(budget, self.eps_effective_, eps_given=p["eps"], eps_unit=p["eps_unit"],
                     protected=self.protected, stacklevel=2)
        timings["metric"] = time.perf_counter() - t0

        # -- partitions and shards
        t0 = time.perf_counter()
        workers = worker_addresses(client)
        if not workers:
            raise ValidationError("the Dask cluster has no workers")
        P = int(self.n_partitions or len(workers))
        if P > 1 and self.partitioning == "kmeans" and _embedding_dim(metric, XM.shape[1]) == 0:
            raise ValidationError(
                "partitioning='kmeans' arranges rows by fair-metric locality, but the fitted fair metric's embedding "
                "has no dimensions (the protected directions span every feature: all points are at fair distance 0, "
                "see DegenerateFairMetricWarning); use partitioning='blocks' or n_partitions=1, or protect fewer "
                "features"
            )
        ctx = {"X": XM, "n": N, "n_partitions": P, "metric": metric, "seed": seed, "client": client}
        if P == 1:
            import dask.array as da

            cells = da.zeros(N, chunks=XM.chunks[0], dtype=np.int64)
        else:
            cells, _ = PARTITIONINGS[self.partitioning](self, ctx)
        cells = client.persist(cells)
        counts = client.compute([dask.delayed(np.bincount)(c, minlength=P) for c in cells.to_delayed().ravel()])
        sizes = np.sum(client.gather(counts), axis=0)[:P].astype(int)
        self.n_partitions_ = P
        self.partition_sizes_ = sizes.tolist()
        small = np.flatnonzero(sizes < m)
        if small.size:
            raise ValidationError(
                f"partition {int(small[0])} has {int(sizes[small[0]])} rows, fewer than n_neighbors={m} (partition "
                f"sizes: {sizes.tolist()}): lower n_partitions or n_neighbors")
        n_shards = min(P, len(workers))
        groups: list[list[int]] = [[] for _ in range(n_shards)]
        load = np.zeros(n_shards)
        for c in sorted(range(P), key=lambda c: (-sizes[c], c)):  # largest first to the least loaded shard
            a = int(np.argmin(load))
            groups[a].append(c)
            load[a] += sizes[c]
        groups = [sorted(g) for g in groups]
        order = sorted(range(n_shards), key=lambda a: groups[a][0])
        groups = [groups[a] for a in order]
        self.shard_cells_ = groups
        timings["partition"] = time.perf_counter() - t0

        # -- features: raw on one shard, global quantile codes on several
        t0 = time.perf_counter()
        self.bin_edges_ = None
        categorical = tuple(self.table_.categorical_features_) if table else ()
        if n_shards > 1:
            n_codes = int(p["backend"].params.get("max_bin", 256))
            bidx = _sample_index(N, BIN_SAMPLE, seed + 1)
            bparts = [dask.delayed(_shard.sample_X)(xb, i) for xb, i in _blocks_with_index(XB, bidx)]
            self.bin_edges_ = client.compute(dask.delayed(_shard.bin_edges)(bparts, n_codes, categorical)).result()
        backend = _backend_for_workers(p["backend"], client, workers[:n_shards])
        spec = {"n_total": N, "n_classes": classes.size, "backend": backend, "solver": p["solver"], "metric": metric,
                "n_neighbors": m, "bin_edges": self.bin_edges_, "random_state": self.random_state,
                "record": bool(self._record), "threads": _worker_threads(client, workers[0]),
                "categorical": categorical}
        offsets = np.concatenate([[0], np.cumsum(XB.chunks[0])])
        metric_blocks = XM.to_delayed().ravel() if table else [None] * len(offsets[:-1])
        blocks = list(zip(XB.to_delayed().ravel(), y.to_delayed().ravel(), cells.to_delayed().ravel(), offsets[:-1],
                          metric_blocks))
        actors = []
        try:
            for a in range(n_shards):
                part_futures = client.compute([dask.delayed(_shard.take_rows)(xb, yb, cb, int(off), groups[a], classes, mb)
                                               for xb, yb, cb, off, mb in blocks])
                fut = client.submit(_shard.Shard, part_futures, spec, workers=[workers[a]], allow_other_workers=False,
                                    actor=True, pure=False)
                actors.append(fut)
            actors = [f.result() for f in actors]
            del part_futures  # the shards hold their rows now; the blocks' pieces are released
        except Exception as exc:
            if isinstance(exc, (ValidationError, NumericalError)):
                raise
            raise ClusterError(f"the shards could not be built on the workers: {type(exc).__name__}: {exc}") from exc
        shards = Shards(actors, workers[:n_shards], client=client)
        timings["shards"] = time.perf_counter() - t0
        try:
            self._train(shards, client, p, N, timings)
        finally:
            try:
                shards.timeout = 30
                shards.call("close")
            except Exception:  # noqa: BLE001 - the fit's own error (if any) is the one to report
                pass
            del shards, actors
        # -- neighbour recall (after training: it does not change the model)
        t0 = time.perf_counter()
        self.neighbor_recall_ = 1.0 if P == 1 else _neighbor_recall(client, XM, cells, metric, m, seed)
        timings["recall"] = time.perf_counter() - t0
        self.timings_ = timings
        return self

    # ------------------------------------------------------------------ tables
    def _block_stats(self, X: Any, y: Any, client: Any) -> list:
        """One pass over the blocks on the workers: rows, non-finite values, labels (and, for a
        table, its columns' kinds and categories)."""
        import dask
        from budro.dask import _shard

        if isinstance(X, _Table):
            tasks = [dask.delayed(_shard.table_stats)(xb, yb, int(self.max_categories))
                     for xb, yb in zip(X.blocks, y.to_delayed().ravel())]
        else:
            tasks = [dask.delayed(_shard.block_stats)(xb, yb) for xb, yb in zip(_row_blocks(X), y.to_delayed().ravel())]
        return client.gather(client.compute(tasks))

    def _table_args(self, stats: list) -> dict:
        """The encoder's arguments from the blocks' stats, checked before any long work: the same
        columns and kinds in every block, every categorical column's categories over all rows (at
        most ``max_categories``), the booster's handling of categories and missing values."""
        from budro import registry

        first = next((s for s in stats if s["n"]), stats[0])
        for s in stats:
            if not s["n"]:
                continue
            if s["columns"] != first["columns"]:
                raise ValidationError(f"X's blocks have different columns: {first['columns']} and {s['columns']}")
            if s["kinds"] != first["kinds"]:
                col = next(c for c, a, b in zip(first["columns"], first["kinds"], s["kinds"]) if a != b)
                raise ValidationError(f"column {col!r} reads as different kinds in different blocks of X (numbers in one, "
                                      f"text in another): give it one dtype")
        categories: dict[str, set] = {}
        for s in stats:
            for name, values in s["categories"].items():
                categories.setdefault(name, set()).update(values)
        for name, values in categories.items():
            if len(values) > self.max_categories:
                raise ValidationError(
                    f"column {name!r} has more than max_categories={self.max_categories} distinct values; it looks like "
                    f"an identifier or free text: drop it, or raise max_categories if it really is a category")
        caps = registry.get("backend", self.backend).spec.capabilities
        native_missing = "missing-values" in caps
        return {"max_categories": int(self.max_categories), "native_missing": native_missing,
                "native_categorical": native_missing and "native-categorical" in caps,
                "categories": {k: sorted(v) for k, v in categories.items()}}

    def _encode_blocks(self, X: "_Table", encoder: Any, client: Any) -> tuple[Any, Any]:
        """The table's booster matrix and metric matrix as dask arrays of the same row blocks,
        encoded and persisted on the workers."""
        import dask
        import dask.array as da
        from budro.dask import _shard

        db, dm = len(encoder.booster_feature_names_), len(encoder.metric_feature_names_)
        xb, xm = [], []
        for block, rows in zip(X.blocks, X.lengths):
            pair = dask.delayed(_shard.table_matrices, nout=2, pure=True)(block, encoder)
            xb.append(da.from_delayed(pair[0], shape=(rows, db), dtype=np.float64))
            xm.append(da.from_delayed(pair[1], shape=(rows, dm), dtype=np.float64))
        XB, XM = client.persist([da.concatenate(xb), da.concatenate(xm)])
        return XB, XM

    def _train(self, shards: Shards, client: Any, p: dict, N: int, timings: dict) -> None:
        from budro.dask._shard import Shard  # noqa: F401  (the actors' class)

        t0 = time.perf_counter()
        infos = shards.call("info")
        self.shard_sizes_ = [i["n"] for i in infos]
        self.time_setup_ = timings["metric"] + max(i["time_neighbors"] for i in infos)
        args: list[tuple] = [(None,)] * len(shards)
        if len(shards) > 1:
            args = [({**a, "dmlc_task_id": f"budro-{r:05d}", "dmlc_timeout": COLLECTIVE_TIMEOUT},)
                    for r, a in enumerate(_tracker_args(client, len(shards)))]
        shards.call("start", per_shard=args)
        timings["start"] = time.perf_counter() - t0
        timings["bytes_setup"] = shards.traffic.sent + shards.traffic.received
        shards.traffic.reset()

        eps = self.eps_effective_
        solver = p["solver"]
        callbacks = tuple(self.callbacks or ())
        bar = None
        if self.verbose > 0:
            from budro.progress import ProgressBar

            bar = ProgressBar()
            callbacks += (bar,)
        history: list[DaskRoundRecord] = []
        floors = _dual_plan.EtaFloor()  # the shards' hulls exact from a floor under the last rounds' eta*
        t_rounds = time.perf_counter()
        try:
            losses = shards.call("round_losses")  # later rounds' losses come with the previous step
            t_losses = max(r[3] for r in losses)
            for t in range(p["n_steps"]):
                bad = sum(r[2] for r in losses)
                if bad:
                    raise NumericalError(
                        f"round {t}: the booster's losses hold {bad} NaN or infinite value(s): the model diverged or "
                        f"the features overflow; standardise the features, lower the learning rate, or use a smaller eps")
                plain = sum(r[0] for r in losses) / N
                scale = max(r[1] for r in losses)
                t1 = time.perf_counter()
                hulls, solve, t_hulls = hulls_and_solve(shards, scale, N, eps, solver.max_iter, floors)
                shares = budget_shares(shards, solve, N, eps)
                t3 = time.perf_counter()
                last = t == p["n_steps"] - 1
                steps = shards.call("recover_and_step", per_shard=[(solve.cheap, solve.dear, solve.switch, s, not last)
                                                                   for s in shares])
                t4 = time.perf_counter()
                sizes = self.shard_sizes_
                objective = sum(s[0] * n for s, n in zip(steps, sizes)) / N
                transport = sum(s[1] * n for s, n in zip(steps, sizes)) / N
                traffic = shards.traffic.reset()
                t_rec = max(s[4] for s in steps)
                t_next = 0.0 if last else max(s[6][3] for s in steps)
                record = DaskRoundRecord(
                    step=t, robust_loss=float(objective), plain_loss=float(plain), eta=float(solve.eta),
                    transport_cost=float(transport), solver_iterations=int(solve.n_eval), time_losses=t_losses,
                    time_solve=(t3 - t1) + t_rec, time_tree=max(0.0, (t4 - t3) - t_rec - t_next),
                    converged=bool(solve.certified or solve.stalled), gap=float(solve.dual_objective - objective),
                    time_hulls=t_hulls, time_search=t3 - t1 - t_hulls, time_recover=t_rec,
                    worker_time_hulls=max(h[4] for h in hulls), worker_time_tree=max(s[5] for s in steps),
                    worker_cpu_hulls=max(h[6] for h in hulls), worker_cpu_tree=max(s[7] for s in steps),
                    bytes_sent=traffic.sent, bytes_received=traffic.received, calls=traffic.calls,
                    eta_guess=float(solve.eta_guess), selection_steps=int(solve.selection_steps))
                history.append(record)
                self.history_ = history
                info = RoundInfo(record=record, problem=None, result=None, n_steps=p["n_steps"], trainer=self)
                if any([bool(cb(info)) for cb in callbacks]):
                    break
                if not last:
                    losses = [s[6] for s in steps]
                    t_losses = t_next
        finally:
            if bar is not None:
                bar.close()
        timings["rounds"] = time.perf_counter() - t_rounds
        self.history_ = history
        t0 = time.perf_counter()
        model = shards.call("model_bytes")[0]
        if self._record:
            self.recorded_ = shards.call("recorded")
        self._local = self._make_local(model, p)
        timings["finish"] = time.perf_counter() - t0
        unconverged = [r.step for r in history if not r.converged]
        if unconverged:
            import warnings

            warnings.warn(f"{len(unconverged)} of {len(history)} distributed BuDRO rounds stopped before the dual search "
                          f"converged (rounds {unconverged[:10]}): raise solver_params max_iter", ConvergenceWarning,
                          stacklevel=3)

    # ------------------------------------------------------------------ the model
    def _make_local(self, model: bytes, p: dict) -> BuDROClassifier:
        if self.bin_edges_ is not None:
            model = _thresholds_to_raw(model, self.bin_edges_)
        params = {k: getattr(self, k) for k in BuDROClassifier().get_params(deep=False)}
        local = BuDROClassifier(**params)
        local.classes_ = self.classes_
        local.n_features_in_ = self.n_features_in_
        if hasattr(self, "feature_names_in_"):
            local.feature_names_in_ = self.feature_names_in_
        local.table_ = self.table_
        local.protected_indices_ = self.protected_indices_
        backend = copy.deepcopy(p["backend"])  # the user's backend, never started
        if self.table_ is None:
            n_booster, categorical = int(self.n_features_in_), ()
        else:
            n_booster = len(self.table_.booster_feature_names_)
            categorical = tuple(self.table_.categorical_features_)
        backend.load_native_bytes(model, n_classes=int(self.classes_.size), n_features=n_booster,
                                  categorical_features=categorical)
        local.backend_ = backend
        local.solver_ = p["solver"]
        local.fair_metric_ = self.fair_metric_
        local.history_ = [r.to_round_record() for r in self.history_]
        local.last_transport_ = None
        local.time_setup_ = self.time_setup_
        local.budget_ = self.budget_
        local.eps_scale_ = self.eps_scale_
        local.eps_effective_ = self.eps_effective_
        return local

    def to_local(self) -> BuDROClassifier:
        """The fitted model as a single-machine :class:`budro.BuDROClassifier` (a copy): it
        predicts what this model predicts, on raw features, and saves with
        :func:`budro.persist.save_model`."""
        self._require_fitted()
        return copy.deepcopy(self._local)

    def _require_fitted(self) -> None:
        from sklearn.exceptions import NotFittedError

        if "_local" not in self.__dict__:
            raise NotFittedError("this DaskBuDROClassifier is not fitted yet; call fit first")

    @property
    def backend_(self):
        """The trained backend of the local model (``backend_.model``: the XGBoost Booster)."""
        self._require_fitted()
        return self._local.backend_

    def __sklearn_is_fitted__(self) -> bool:
        return "_local" in self.__dict__

    def predict_proba(self, X: Any) -> Any:
        """Class probabilities; a dask array (computed on the workers) for dask input, else numpy."""
        self._require_fitted()
        if _is_dask(X):
            client = self._get_client()
            Xd, _ = self._as_dask(X, None, client, fit=False)
            if isinstance(Xd, _Table):  # the local model encodes each block with its table encoder
                import dask
                import dask.array as da

                K = int(self.classes_.size)
                blocks = [da.from_delayed(dask.delayed(_predict_table_block)(b, self._local), shape=(r, K),
                                          dtype=np.float64) for b, r in zip(Xd.blocks, Xd.lengths)]
                return da.concatenate(blocks)
            if Xd.shape[1] != self.n_features_in_:
                raise ValidationError(f"X has {Xd.shape[1]} features, but this model was fitted on {self.n_features_in_}")
            K = int(self.classes_.size)
            return Xd.map_blocks(_predict_block, self._local, dtype=np.float64, chunks=(Xd.chunks[0], (K,)))
        return self._local.predict_proba(X)

    def predict(self, X: Any) -> Any:
        proba = self.predict_proba(X)
        if _is_dask(proba):
            return proba.map_blocks(_argmax_classes, self.classes_, dtype=self.classes_.dtype, drop_axis=1)
        return self.classes_[np.argmax(proba, axis=1)]

    def decision_margin(self, X: Any) -> Any:
        self._require_fitted()
        if _is_dask(X):
            raise ValidationError("decision_margin takes in-memory X; use to_local().decision_margin or predict_proba")
        return self._local.decision_margin(X)

    def __getstate__(self) -> dict:
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state["client"] = None  # a client does not travel; the fitted model does
        return state


@dataclass
class _Table:
    """A table to encode on the workers (``budro.tables.TableEncoder``): the row blocks of a dask
    DataFrame (its partitions) or of a dask array, as delayed objects, with their row counts."""

    blocks: list
    lengths: tuple
    n_columns: int

    @classmethod
    def from_frame(cls, X: Any, client: Any = None) -> "_Table":
        lengths = X.map_partitions(len)
        lengths = client.compute(lengths).result() if client is not None else lengths.compute()
        return cls(list(X.to_delayed()), tuple(int(v) for v in lengths), len(X.columns))

    @classmethod
    def from_array(cls, X: Any) -> "_Table":
        return cls(list(X.to_delayed().ravel()), tuple(int(c) for c in X.chunks[0]), int(X.shape[1]))

    @property
    def shape(self) -> tuple[int, int]:
        return sum(self.lengths), self.n_columns

    @property
    def chunks(self) -> tuple:
        return self.lengths, (self.n_columns,)


def _scatter_table(X: Any, client: Any) -> Any:
    """An in-memory DataFrame (pandas, or anything with ``to_pandas``) as a dask DataFrame of one
    partition per worker, its columns' own dtypes kept, persisted on the workers."""
    import dask
    import dask.dataframe as dd
    import pandas as pd

    if not isinstance(X, pd.DataFrame):
        to_pandas = getattr(X, "to_pandas", None)
        if to_pandas is None:
            raise ValidationError(f"X must be a dask or pandas DataFrame, a dask array or an array, got "
                                  f"{type(X).__name__}")
        X = to_pandas()
    n_workers = max(1, len(worker_addresses(client)))
    with dask.config.set({"dataframe.convert-string": False}):
        frame = dd.from_pandas(X.reset_index(drop=True), npartitions=max(1, min(n_workers, len(X))), sort=False)
    return client.persist(frame)


def worker_addresses(client: Any) -> list[str]:
    """The cluster's workers now, sorted, from the scheduler (``Client.nthreads``).  Not
    ``Client.scheduler_info()["workers"]``: that returns the client's shared identity record,
    which its periodic refresh (every 2 s) replaces with one that lists no workers, so a read
    that follows the refresh saw an empty cluster (a fit failed with "no workers" on a
    LocalCluster of two)."""
    return sorted(client.nthreads())


def _needs_encoding(X: Any) -> bool:
    """Whether an in-memory DataFrame needs the table encoder: a column that is not numeric, or a
    missing value (as ``budro.tables.table_needs_encoding``)."""
    from budro.tables import table_needs_encoding

    return bool(table_needs_encoding(X))


def _numeric(t: Any) -> bool:
    try:
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        return bool(is_numeric_dtype(t) or is_bool_dtype(t))
    except ImportError:  # pragma: no cover - pandas comes with dask.dataframe
        return False


def _is_dask(X: Any) -> bool:
    return hasattr(X, "__dask_graph__") and callable(getattr(X, "__dask_graph__"))


def _row_blocks(X: Any) -> list:
    """The row blocks of a dask array, or a :class:`_Table`'s, as delayed objects."""
    return list(X.blocks) if isinstance(X, _Table) else list(X.to_delayed().ravel())


def _paired(X: Any, y: Any, idx: np.ndarray):
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    for xb, yb, start, stop in zip(_row_blocks(X), y.to_delayed().ravel(), offsets[:-1], offsets[1:]):
        lo, hi = np.searchsorted(idx, [start, stop])
        if hi > lo:
            yield (xb, idx[lo:hi] - start), yb


def _predict_block(X: np.ndarray, local: BuDROClassifier) -> np.ndarray:
    from budro.estimator import BuDROClassifier  # noqa: F401  (unpickled on the worker)

    # the block has the fitted number of columns (checked on the client); no names to compare
    return local.backend_.predict_proba(np.asarray(X, dtype=np.float64))


def _predict_table_block(X: Any, local: BuDROClassifier) -> np.ndarray:
    import warnings

    from budro.tables import UnseenCategoryWarning

    with warnings.catch_warnings():  # one warning per block on the workers would be lost there
        warnings.simplefilter("ignore", UnseenCategoryWarning)
        return np.asarray(local.predict_proba(X), dtype=np.float64)


def _argmax_classes(P: np.ndarray, classes: np.ndarray) -> np.ndarray:
    return classes[np.argmax(P, axis=1)]


def _worker_threads(client: Any, address: str) -> int:
    return int(client.nthreads().get(address, 1) or 1)


def _backend_for_workers(backend: Any, client: Any, workers: list) -> Any:
    """The backend the shards train with: the user's, with XGBoost's thread count set to the
    worker's thread count unless the user chose one (budro's default counts the machine's cores,
    which several worker processes on one machine would oversubscribe)."""
    from budro import registry

    if backend.THREAD_PARAM is None or backend.THREAD_PARAM in backend._given_as:
        return backend
    params = {**backend._user_params, backend.THREAD_PARAM: min(_worker_threads(client, w) for w in workers)}
    return registry.create("backend", backend.name, weight_scale=backend.weight_scale, **params)


def _tracker_args(client: Any, n: int) -> list[dict]:
    """Start XGBoost's tracker on the scheduler (as xgboost.dask does) for ``n`` shards, with
    ``COLLECTIVE_TIMEOUT`` for the group's bootstrap and shutdown (xgboost.dask's default is no
    timeout: a fit that fails before every shard has joined, or without shutting the group down,
    would leave the tracker's thread waiting on the scheduler for ever)."""
    from distributed.comm import get_address_host
    from xgboost.dask import _start_tracker

    try:
        host = get_address_host(client.scheduler.address).strip("/:")
    except Exception:  # noqa: BLE001
        host = None
    env = client.run_on_scheduler(_start_tracker, n, host, None, COLLECTIVE_TIMEOUT)
    return [dict(env) for _ in range(n)]


def _thresholds_to_raw(model: bytes, edges: list) -> bytes:
    """The XGBoost JSON model with every split threshold on a code mapped back to the raw feature:
    ``code < c`` iff ``code <= ceil(c) - 1`` iff ``x < edges[ceil(c) - 1]`` (float32, as XGBoost
    compares), +-float32 max where the split sends every row one way."""
    big = float(np.finfo(np.float32).max)
    doc = json.loads(model)
    for tree in doc["learner"]["gradient_booster"]["model"]["trees"]:
        left, feats, conds = tree["left_children"], tree["split_indices"], tree["split_conditions"]
        for i, child in enumerate(left):
            if child == -1:
                continue
            e = edges[feats[i]]
            if e is None:  # a categorical split (category codes are not coded again)
                continue
            k = math.ceil(float(np.float32(conds[i]))) - 1
            conds[i] = -big if k < 0 else (big if k >= len(e) else float(e[k]))
    return json.dumps(doc).encode()


def _neighbor_recall(client: Any, X: Any, cells: Any, metric: Any, m: int, seed: int) -> float:
    """Share of the single-machine neighbour pairs (each query's m - 1 nearest other rows) whose
    two rows share a partition, on RECALL_SAMPLE query rows, searched block by block on the workers."""
    import dask
    from budro.dask import _shard

    N = int(X.shape[0])
    qidx = _sample_index(N, RECALL_SAMPLE, seed + 2)
    qparts = [dask.delayed(_shard.sample_rows)(xb, cb, i) for (xb, i), cb in _paired(X, cells, qidx)]
    got = client.compute(qparts)
    got = client.gather(got)
    Q = _shard.embed_block(np.concatenate([g[0] for g in got]), metric)
    qcell = np.concatenate([g[1] for g in got])
    offsets = np.concatenate([[0], np.cumsum(X.chunks[0])])
    res = client.gather(client.compute([dask.delayed(_shard.nearest_in_block)(xb, cb, int(off), Q, metric, m)
                                        for xb, cb, off in zip(X.to_delayed().ravel(), cells.to_delayed().ravel(),
                                                               offsets[:-1])]))
    dist = np.concatenate([r[0] for r in res], axis=1)
    rows = np.concatenate([r[1] for r in res], axis=1)
    cell = np.concatenate([r[2] for r in res], axis=1)
    own = rows == qidx[:, None]
    dist = np.where(own, np.inf, dist)  # the query itself is not a pair
    k = min(m - 1, dist.shape[1] - 1)
    if k <= 0:
        return 1.0
    nearest = np.argsort(dist, axis=1, kind="stable")[:, :k]
    same = np.take_along_axis(cell, nearest, axis=1) == qcell[:, None]
    return float(same.mean())
