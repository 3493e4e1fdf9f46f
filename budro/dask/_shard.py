"""What one Dask worker holds for a :class:`~budro.dask.DaskBuDROClassifier` fit: a Dask Actor.

A :class:`Shard` owns the rows of one or more partitions (cells of the fair-metric partitioning)
for the whole fit: their booster matrix and labels, XGBoost's training ``DMatrix`` and ``Booster``
(through budro's own :class:`~budro.backends.xgboost.XGBoostBackend`, run under one
``xgboost.collective`` communicator shared by all shards), the margins (XGBoost's prediction
cache), the neighbour lists of its cells and, each round, its losses and their hulls.  The client
drives the rounds through the methods below; each takes and returns a few scalars or short
arrays, except at set-up and for the optional records of :meth:`recorded`.

Everything here runs in the worker process (the actor's own thread); numpy, scikit-learn and
XGBoost are imported when a shard is built, dask is not needed.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

__all__ = ["Shard", "take_rows", "block_stats", "fit_metric", "embed_block", "assign_block", "fit_partitioner",
           "bin_edges", "nearest_in_block"]


class _Scale:
    """Stand-in for a problem in the solver helpers that only read ``losses`` or ``max_abs_loss``
    (for its largest magnitude), ``n`` and ``eps``: the tie tolerance must use the *global*
    largest loss."""

    def __init__(self, scale: float, n: int = 1, eps: float = 0.0):
        self.losses = np.array([[float(scale)]])
        self.max_abs_loss = abs(float(scale))  # as TransportProblem.max_abs_loss
        self.n = n
        self.eps = eps


class Shard:
    """One worker's share of a distributed BuDRO fit (used as a Dask Actor).

    Parameters
    ----------
    parts : list of tuples ``(rows, X, y, cell)``
        The rows of this shard from each input block: global row indices, features (float64),
        encoded labels, partition (cell) ids.
    spec : dict
        ``n_total`` (rows of the whole fit), ``n_classes``, ``backend`` (a budro backend, not yet
        started), ``solver`` (the exact :class:`~budro.solvers.dual.DualSolver`, for its tie
        tolerance and kernel), ``metric`` (the fitted fair metric),
        ``n_neighbors``, ``bin_edges`` (None: raw features; else per feature the float32 cut
        points of the global quantile codes), ``random_state``, ``record`` (keep each round's
        losses for :meth:`recorded`).
    """

    def __init__(self, parts: list, spec: dict):
        from budro.transport import NeighborCost

        t0 = time.perf_counter()
        parts = [p for p in parts if len(p[0])]
        rows = np.concatenate([p[0] for p in parts]).astype(np.int64)
        X = np.concatenate([p[1] for p in parts])  # float32 or float64 as the input (see take_rows)
        y = np.concatenate([p[2] for p in parts]).astype(np.intp)
        cell = np.concatenate([p[3] for p in parts]).astype(np.int64)
        # the fair metric's input: the table encoder's metric matrix, or the features themselves
        M = np.concatenate([p[4] for p in parts]) if len(parts[0]) > 4 and parts[0][4] is not None else None
        del parts
        order = np.lexsort((rows, cell))  # by cell, then by global row (one cell: the input order)
        if np.any(order[1:] < order[:-1]):
            rows, X, y, cell = rows[order], X[order], y[order], cell[order]
            M = None if M is None else M[order]
        self.rows, self.y, self.cell = rows, y, cell
        del order
        self.n = len(self.rows)
        self.n_total = int(spec["n_total"])
        self.K = int(spec["n_classes"])
        self.spec = spec
        self.record = bool(spec.get("record"))
        self.recorded_losses: list[np.ndarray] = []
        # Neighbour lists within each cell (NeighborCost on the cell's own embedding), one block each.
        metric = spec["metric"]
        m = int(spec["n_neighbors"])
        threads = int(spec.get("threads") or 1)
        Z = embed_rows(X if M is None else M, metric)
        del M
        cells, starts = np.unique(self.cell, return_index=True)
        bounds = list(starts) + [self.n]
        nb_parts, nc_parts = [], []
        for k in range(len(cells)):
            lo, hi = bounds[k], bounds[k + 1]
            cost = NeighborCost(Z[lo:hi], m, n_jobs=threads)
            if lo:
                cost.neighbors += lo  # rows of this shard
            nb_parts.append(cost.neighbors)
            nc_parts.append(cost.neighbor_costs)
            del cost
        del Z
        if len(cells) == 1:
            nb, nc = nb_parts[0], nc_parts[0]
        else:
            width = min(c.shape[1] for c in nb_parts)
            nb = np.concatenate([c[:, :width] for c in nb_parts])
            nc = np.concatenate([c[:, :width] for c in nc_parts])
        del nb_parts, nc_parts
        self._set_lists(nb, nc)
        del nb, nc
        self.time_neighbors = time.perf_counter() - t0
        edges = spec.get("bin_edges")
        if edges is not None:
            X = codes(X, edges)
        self.X = X
        self.solver = spec["solver"]
        self.backend = spec["backend"]
        self.losses: np.ndarray | None = None
        self.points: dict[float, Any] = {}
        self.problem = None
        self.cand_edges: tuple[np.ndarray, np.ndarray] | None = None
        self.collective = False

    def _set_lists(self, nb: np.ndarray, nc: np.ndarray) -> None:
        """Keep the neighbour lists: from LOCALITY_MIN_N rows renumbered by locality, as DualSolver
        solves them (budro.solvers._dual_sparse; ``perm``/``inv`` map the numbering), and then
        only the renumbered lists are kept."""
        from budro.solvers import _dual_sparse
        from budro.transport import NeighborCost

        self.perm = self.inv = None
        if self.n >= _dual_sparse.LOCALITY_MIN_N:
            self.perm, self.inv = _dual_sparse.locality_order(nb)
            self.cost = _dual_sparse.renumbered_lists(nb, nc, self.perm, self.inv)
        else:
            self.cost = NeighborCost.from_lists(nb, nc)  # without the embedding

    @classmethod
    def on_lists(cls, losses: np.ndarray, y: np.ndarray, cost: Any, solver: Any, backend: Any) -> "Shard":
        """A shard over given losses and neighbour lists (no data, no booster set-up): the search
        and the recovery in one process, for checks against DualSolver."""
        self = cls.__new__(cls)
        self.losses = np.asarray(losses, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.intp)
        self.n = self.y.size
        self._set_lists(cost.neighbors, cost.neighbor_costs)
        self.solver, self.backend = solver, backend
        self.points, self.problem, self.record, self.collective = {}, None, False, False
        return self

    # -- set-up ---------------------------------------------------------------------------
    def info(self) -> dict:
        """Rows, cells and the time the neighbour lists took (the set-up's own record)."""
        cells, counts = np.unique(self.cell, return_counts=True)
        return {"n": self.n, "cells": cells.tolist(), "cell_sizes": counts.tolist(),
                "time_neighbors": self.time_neighbors, "classes": np.unique(self.y).tolist()}

    def start(self, collective_args: dict | None) -> float:
        """Join the collective communicator (with more than one shard) and train f_0."""
        t0 = time.perf_counter()
        if collective_args:
            from xgboost import collective

            collective.init(**collective_args)
            self.collective = True
        self.backend.start(self.X, self.y, self.K, random_state=self.spec.get("random_state"),
                           categorical_features=tuple(self.spec.get("categorical") or ()))
        self.X = None  # the training DMatrix holds the rows now
        return time.perf_counter() - t0

    def close(self) -> None:
        """Leave the communicator (XGBoost warns about one that was not shut down)."""
        if self.collective:
            from xgboost import collective

            self.collective = False
            collective.finalize()

    # -- a round --------------------------------------------------------------------------
    def round_losses(self) -> tuple:
        """This round's losses from the margins kept here: (sum of the plain loss, largest
        |loss|, number of non-finite losses, seconds)."""
        t0 = time.perf_counter()
        L = self.backend.losses()
        self.losses = L
        self.points = {}
        if self.record:
            self.recorded_losses.append(L.copy())
        bad = int(L.size - np.count_nonzero(np.isfinite(L)))
        plain = float(L[np.arange(self.n), self.y].sum()) if not bad else math.nan
        scale = float(np.abs(L).max()) if not bad else math.nan
        return plain, scale, bad, time.perf_counter() - t0

    def hulls(self, scale: float, eps: float, n_quantiles: int, floor: float = 0.0) -> tuple:
        """Prune this shard's lists to their upper hulls (with the global tie margin) and keep the
        hulls' breakpoints in increasing order with the cumulative cost drops; ``floor`` > 0: hulls
        exact for eta >= floor only (on the compiled path; see ``_Candidates.floor``).

        Returns ``(top, n_edges, largest breakpoint, quantiles of the breakpoints, seconds, summed
        drops of all breakpoints, CPU seconds of this thread, the floor the hulls are exact from)``;
        ``top`` is the summed cost of every column's hull top (the cheapest argmax at eta = 0+)."""
        from budro.solvers._dual_plan import tie_margin
        from budro.solvers._dual_sparse import list_candidates, sparse_layout
        from budro.transport import TransportProblem

        t0, c0 = time.perf_counter(), time.thread_time()
        self.problem = TransportProblem(*self._numbered(), self.cost, eps)
        layout = sparse_layout(self.solver, self.problem)
        tau = tie_margin(self.solver, _Scale(scale))
        cand, _ = list_candidates(self.solver, layout, self.problem.losses, self.n, eps, tau, floor)
        self.cand = cand
        self.scale = float(scale)
        if cand.edges is not None:  # the compiled kernel read the exact hulls' breakpoints off already
            e, dC, last_cost = cand.edges
            top = float(last_cost.sum())
        else:  # the exact hulls' breakpoints, as DualSolver's breakpoint_eta reads them
            top, e, dC = _hull_edges(cand)
        order = np.argsort(e)
        self.E, self.D = e[order], np.cumsum(dC[order])
        return (top, int(self.E.size), float(self.E[-1]) if self.E.size else 0.0,
                self._quantiles(0, self.E.size, n_quantiles), time.perf_counter() - t0,
                float(self.D[-1]) if self.D.size else 0.0, time.thread_time() - c0, float(cand.floor))

    def _numbered(self) -> tuple[np.ndarray, np.ndarray]:
        """This round's losses and the labels in the numbering of the lists (``perm``: renumbered
        by locality from LOCALITY_MIN_N rows)."""
        perm = getattr(self, "perm", None)
        if perm is None:
            return self.losses, self.y
        return np.take(self.losses, perm, axis=0), np.take(self.y, perm)

    def _quantiles(self, i0: int, i1: int, q: int) -> list:
        if i1 <= i0:
            return []
        idx = np.unique(np.linspace(i0, i1 - 1, num=min(q, i1 - i0)).round().astype(np.int64))
        return self.E[idx].tolist()

    def window(self, lo: float, hi: float, n_quantiles: int, max_pairs: int) -> tuple:
        """The breakpoints in ``(lo, hi]``: all of them with their cumulative drops when there are
        at most ``max_pairs``, else ``n_quantiles`` of their values.  Also the cumulative drop at
        ``lo``.  Returns ``(F(lo), count, values, cumulative drops or None)``."""
        i0 = int(np.searchsorted(self.E, lo, side="right"))
        i1 = int(np.searchsorted(self.E, hi, side="right"))
        f_lo = float(self.D[i0 - 1]) if i0 > 0 else 0.0
        if i1 - i0 <= max_pairs:
            return f_lo, i1 - i0, self.E[i0:i1].tolist(), self.D[i0:i1].tolist()
        return f_lo, i1 - i0, self._quantiles(i0, i1, n_quantiles), None

    def cumulative(self, ts: list) -> list:
        """``F(t)``: summed cost drops of this shard's breakpoints ``<= t``, for each t."""
        if not self.D.size:  # a shard without breakpoints drops nothing
            return [0.0] * len(ts)
        idx = np.searchsorted(self.E, np.asarray(ts, dtype=np.float64), side="right")
        return np.where(idx > 0, self.D[np.maximum(idx - 1, 0)], 0.0).tolist()

    def evaluate(self, eta: float, keep: list) -> tuple:
        """``g`` on this shard's columns at ``eta`` (candidates only, global tie tolerance); keeps
        the argmax rows for the recovery.  Returns (sum of column maxima, summed cheapest and
        dearest argmax costs, seconds, summed gains of switching every column from its cheapest to
        its dearest argmax row); the points not in ``keep`` are dropped."""
        from budro.solvers._dual_plan import evaluate_candidates

        t0 = time.perf_counter()
        self.points = {k: v for k, v in self.points.items() if k in keep}
        # n = 1, eps = 0: the point's value is the sum of the column maxima itself.
        point = evaluate_candidates(self.solver, _Scale(self.scale), self.cand, eta)
        self.points[float(eta)] = point
        gains = self.split_sums((float(eta), "lo"), (float(eta), "hi"))[1]
        return float(point.value), float(point.c_lo.sum()), float(point.c_hi.sum()), time.perf_counter() - t0, gains

    def kelley(self, eta_a: float, eta_b: float) -> tuple:
        """Summed ``R[lo(a)] - R[hi(b)]`` and ``C[lo(a)] - C[hi(b)]`` over this shard's columns."""
        a, b = self.points[float(eta_a)], self.points[float(eta_b)]
        L, y = self.problem.losses, self.problem.labels
        dr = L[a.lo, y] - L[b.hi, y]
        dc = a.c_lo - b.c_hi
        return float(dr.sum()), float(dc.sum())

    def _rows(self, spec) -> tuple[np.ndarray, np.ndarray]:
        if spec is None:  # every column stays where it is, at cost 0
            return np.arange(self.n), np.zeros(self.n)
        eta, which = spec
        p = self.points[float(eta)]
        return (p.lo, p.c_lo) if which == "lo" else (p.hi, p.c_hi)

    def split_sums(self, cheap, dear) -> tuple:
        """Summed cost of the cheap rows and of the gains of switching to the dear rows."""
        rc, cc = self._rows(cheap)
        rd, cd = self._rows(dear)
        delta = np.where(rd != rc, cd - cc, 0.0)
        delta[delta < 0] = 0.0
        return float(cc.sum()), float(delta.sum())

    def recover_and_step(self, cheap, dear, switch: bool, budget: tuple, next_losses: bool = False) -> tuple:
        """This shard's part of the optimal plan and one more tree on it.

        ``budget``: ``("eps", eps)``, the global budget on this shard's columns (one shard: the
        single-machine recovery itself), or ``("share", s)``: switch columns in order until their
        cost gains sum to ``s`` (``inf``: all), the last one fractionally.  Returns (objective and
        transport cost on this shard's columns at mass ``1 / n`` each, columns switched, whether a
        column was split, seconds of the recovery, seconds of the tree, and with ``next_losses``
        the next round's :meth:`round_losses`, saving the client one call per round, and the CPU
        seconds of this thread in the tree)."""
        from budro.solvers._dual_plan import result_from_switch
        from budro.transport import TransportProblem

        t0 = time.perf_counter()
        rc, cc = self._rows(cheap)
        rd, cd = self._rows(dear)
        kind, value = budget
        numbered = (self.problem.losses, self.problem.labels, self.problem.cost)
        if kind == "eps":
            problem = self.problem if self.problem.eps == value else TransportProblem(*numbered, value)
        else:
            if value <= 0.0:
                switch = False
                value = 0.0
            elif math.isinf(value):  # every gain fits: a budget above all of them
                delta = np.where(rd != rc, cd - cc, 0.0)
                value = 2.0 * float(np.maximum(delta, 0.0).sum()) + 1.0
            problem = TransportProblem(*numbered, (float(cc.sum()) + value) / self.n)
        result, split, n_switched = result_from_switch(problem, (rc, cc), (rd, cd), switch, compiled=False,
                                                       solver="dual")
        weights = result.weights
        if getattr(self, "perm", None) is not None:  # back to this shard's own row order
            weights = np.take(result.weights, self.inv, axis=0)
        t1, c1 = time.perf_counter(), time.thread_time()
        self.backend.step(weights)
        t2, c2 = time.perf_counter(), time.thread_time()
        self.points = {}
        return (float(result.objective), float(result.transport_cost), int(n_switched), split is not None,
                t1 - t0, t2 - t1, self.round_losses() if next_losses else None, c2 - c1)

    # -- after the fit --------------------------------------------------------------------
    def model_bytes(self) -> bytes:
        """The booster in XGBoost's JSON (every shard holds the same model)."""
        return self.backend.to_native_bytes()

    def recorded(self) -> dict:
        """Global row indices, labels, neighbour lists (global rows) and costs, and each round's
        losses, for checks against a single-machine solve (``record=True`` only)."""
        nb, nc = self.own_lists()
        return {"rows": self.rows, "y": self.y, "cell": self.cell, "neighbors": self.rows[nb],
                "neighbor_costs": nc, "losses": self.recorded_losses}

    def own_lists(self) -> tuple[np.ndarray, np.ndarray]:
        """The neighbour lists (shard rows) and their costs in the shard's own row order."""
        nb, nc = self.cost.neighbors, self.cost.neighbor_costs
        if getattr(self, "perm", None) is None:
            return nb, nc
        return self.perm[nb[self.inv]], nc[self.inv]


def _hull_edges(cand) -> tuple[float, np.ndarray, np.ndarray]:
    """The exact (tau = 0) upper hulls of the candidates, column by column: (summed cost of the
    hull tops, breakpoints, cost drops), as :func:`budro.solvers._dual_plan.breakpoint_eta` reads
    them (the numpy path; the compiled kernel returns them with the candidates)."""
    from budro.solvers._dual_plan import _upper_hulls

    _, cols, R, C = _upper_hulls(cand.rows, cand.cols, cand.R, cand.C, 0.0, cand.starts.size)
    last = np.empty(cols.size, dtype=bool)
    last[-1] = True
    np.not_equal(cols[1:], cols[:-1], out=last[:-1])
    top = float(C[last].sum())
    inner = ~last[:-1]
    dC = (C[1:] - C[:-1])[inner]
    dR = (R[1:] - R[:-1])[inner]
    useful = dC > 0.0
    return top, np.maximum(dR[useful] / dC[useful], 0.0), dC[useful]


# -- tasks on the input blocks (plain functions, run by dask on the workers) ----------------

def codes(X: np.ndarray, edges: list) -> np.ndarray:
    """Global quantile codes: per feature, the number of cut points ``<= x`` (compared in
    float32, as XGBoost compares features), as float32."""
    X32 = np.asarray(X, dtype=np.float32)
    out = np.empty(X32.shape, dtype=np.float32)
    for j, e in enumerate(edges):
        if e is None:  # a column of category codes: kept as it is
            out[:, j] = X32[:, j]
            continue
        out[:, j] = np.searchsorted(np.asarray(e, dtype=np.float32), X32[:, j], side="right")
        missing = np.isnan(X32[:, j])
        if missing.any():  # missing stays missing (XGBoost's default direction)
            out[missing, j] = np.nan
    return out


def block_stats(X: Any, y: Any) -> dict:
    """Rows, non-finite features and the distinct labels of one block (checked before any work)."""
    X = np.asarray(X)
    y = np.asarray(y)
    out = {"n": int(X.shape[0]), "ny": int(y.shape[0]), "nonfinite": 0, "nan": 0, "y_missing": 0, "labels": None}
    if X.dtype.kind in "biuf":
        out["nonfinite"] = int(X.size - np.count_nonzero(np.isfinite(X)))
        out["nan"] = int(np.count_nonzero(np.isnan(X))) if out["nonfinite"] else 0
    if y.dtype.kind == "f":
        miss = np.isnan(y)
        out["y_missing"] = int(miss.sum())
        y = y[~miss]
    elif y.dtype.kind == "O":
        miss = np.array([v is None or (isinstance(v, float) and v != v) for v in y], dtype=bool)
        out["y_missing"] = int(miss.sum())
        y = y[~miss]
    out["labels"] = np.unique(y)
    return out


def take_rows(X: Any, y: Any, cell: Any, offset: int, wanted: list, classes: np.ndarray, M: Any = None) -> tuple:
    """The rows of one block whose cell is in ``wanted``: (global rows, X, encoded y, cells, rows
    of the fair metric's input ``M``, or None where the metric reads ``X`` itself)."""
    cell = np.asarray(cell)
    mask = np.isin(cell, np.asarray(wanted, dtype=cell.dtype))
    idx = np.flatnonzero(mask)
    y_enc = np.searchsorted(classes, np.asarray(y)[idx])
    return (idx + offset, _float_rows(X, idx), y_enc.astype(np.int32), cell[idx],
            None if M is None else _float_rows(M, idx))


def _float_rows(X: Any, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` of a block as floats: float32 and float64 blocks keep their type (every
    float32 value is a float64 exactly, so the fit is the same at half the memory), other
    numbers become float64."""
    X = np.asarray(X)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    return X[idx]


# -- tables (string, categorical and boolean columns, missing values): budro.tables.TableEncoder

def table_stats(X: Any, y: Any, max_categories: int) -> dict:
    """:func:`block_stats` of a table block, with its columns' kinds and, per categorical column,
    its distinct values (as the encoder compares them: strings; at most ``max_categories + 1``,
    enough to tell a column with too many).  Infinite numbers are refused here, naming the column
    (``budro.tables``' own check)."""
    from budro.tables import _read_columns

    cols, named = _read_columns(X, "X")
    if not cols:
        from budro.exceptions import ValidationError

        raise ValidationError("X has no columns")
    out = block_stats(np.zeros((len(cols[0].values), 0)), y)
    out["columns"] = [c.name for c in cols]
    out["named"] = bool(named)
    out["kinds"] = [c.kind for c in cols]
    out["categories"] = {}
    for c in cols:
        if c.kind == "categorical":
            values = np.unique(c.values[~c.missing].astype(str))
            out["categories"][c.name] = values[:max_categories + 1].tolist()
    return out


def sample_table(X: Any, y: Any, idx: np.ndarray) -> tuple:
    """Rows ``idx`` of a table block (a DataFrame keeps its columns and dtypes) and their labels."""
    rows = X.iloc[idx] if hasattr(X, "iloc") else np.asarray(X)[idx]
    return rows, np.asarray(y)[idx]


def fit_table_metric(learner: Any, protected: tuple, classes: np.ndarray, random_state: int, parts: list,
                     encoder_args: dict) -> tuple:
    """Fit the table encoder on the rows given (with the categories counted on every row), then the
    fair metric on their metric matrix: (encoder, metric, budget diagnosis, seconds)."""
    from budro.tables import TableEncoder

    t0 = time.perf_counter()
    tables = [p[0] for p in parts]
    if hasattr(tables[0], "iloc"):
        import pandas as pd

        T = pd.concat(tables, axis=0, ignore_index=True)
    else:
        T = np.concatenate(tables)
    encoder = TableEncoder(max_categories=encoder_args["max_categories"]).fit(
        T, protected=protected, native_categorical=encoder_args["native_categorical"],
        native_missing=encoder_args["native_missing"], categories=encoder_args["categories"])
    M = encoder.metric_matrix(T)
    del T
    metric, budget, _ = fit_metric(learner, encoder.protected_metric_indices_, classes, random_state,
                                   [(M, np.concatenate([p[1] for p in parts]))])
    return encoder, metric, budget, time.perf_counter() - t0


def table_matrices(X: Any, encoder: Any) -> tuple[np.ndarray, np.ndarray]:
    """A table block as the booster sees it and as the fair metric does (float64 each)."""
    import warnings

    with warnings.catch_warnings():  # the training rows' own categories are known to the encoder
        warnings.simplefilter("ignore")
        return (np.asarray(encoder.booster_matrix(X), dtype=np.float64),
                np.asarray(encoder.metric_matrix(X), dtype=np.float64))


def sample_rows(X: Any, y: Any, idx: np.ndarray) -> tuple:
    """Rows ``idx`` of one block and their labels."""
    return np.asarray(X, dtype=np.float64)[idx], np.asarray(y)[idx]


def sample_X(X: Any, idx: np.ndarray) -> np.ndarray:
    """Rows ``idx`` of one block."""
    return np.asarray(X, dtype=np.float64)[idx]


def fit_metric(learner: Any, protected: tuple, classes: np.ndarray, random_state: int, parts: list) -> tuple:
    """Fit the fair metric (and diagnose the budget) on the rows given, in their order."""
    from budro.budget import diagnose_budget
    from budro.estimator import _check_metric_input

    X = np.concatenate([p[0] for p in parts])
    y = np.searchsorted(classes, np.concatenate([p[1] for p in parts]))
    t0 = time.perf_counter()
    _check_metric_input(X)
    metric = learner.fit(X, protected, y=y)
    budget = diagnose_budget(metric, X, y, random_state=random_state)
    return metric, budget, time.perf_counter() - t0


def embed_block(X: Any, metric: Any) -> np.ndarray:
    return np.asarray(metric.embed(np.asarray(X, dtype=np.float64)), dtype=np.float64)


def embed_rows(X: np.ndarray, metric: Any, rows_per_pass: int = 65536) -> np.ndarray:
    """The fair-metric embedding of every row (float64), ``rows_per_pass`` rows at a time (no
    float64 copy of the whole of a float32 ``X``)."""
    first = embed_block(X[:rows_per_pass], metric)
    if X.shape[0] <= rows_per_pass:
        return first
    Z = np.empty((X.shape[0], first.shape[1]))
    Z[:first.shape[0]] = first
    for start in range(rows_per_pass, X.shape[0], rows_per_pass):
        Z[start:start + rows_per_pass] = embed_block(X[start:start + rows_per_pass], metric)
    return Z


def fit_partitioner(parts: list, n_partitions: int, random_state: int) -> Any:
    """k-means (scikit-learn) on a sample of the embedded rows."""
    from sklearn.cluster import KMeans

    Z = np.concatenate(parts)
    return KMeans(n_clusters=n_partitions, n_init=3, random_state=random_state).fit(Z)


def assign_block(X: Any, metric: Any, kmeans: Any) -> np.ndarray:
    return kmeans.predict(embed_block(X, metric)).astype(np.int64)


def bin_edges(parts: list, n_codes: int, categorical: tuple = ()) -> list:
    """Per feature at most ``n_codes - 1`` float32 cut points at the sample's quantiles (missing
    values left out), so that the codes take at most ``n_codes`` values; None for the columns of
    category codes in ``categorical`` (XGBoost splits on them natively, they are not coded)."""
    X = np.concatenate(parts).astype(np.float32)
    levels = np.arange(1, n_codes) / n_codes
    out: list = []
    for j in range(X.shape[1]):
        if j in categorical:
            out.append(None)
            continue
        col = X[:, j]
        col = col[~np.isnan(col)]
        distinct = np.unique(col)
        if distinct.size == 0:
            out.append(np.zeros(0, dtype=np.float32))
            continue
        if distinct.size <= n_codes:
            cuts = distinct[1:]  # one code per distinct value
        else:
            cuts = np.unique(np.quantile(col, levels, method="inverted_cdf").astype(np.float32))
            cuts = cuts[cuts > distinct[0]]
        out.append(np.asarray(cuts, dtype=np.float32))
    return out


def nearest_in_block(X: Any, cell: Any, offset: int, queries: np.ndarray, metric: Any, m: int,
                     rows_per_pass: int = 8192) -> tuple:
    """For each query point, its ``m`` nearest rows of this block in the fair metric: (squared
    distances, global rows, cells), each (q, m') with m' = min(m, rows); the block is embedded and
    searched ``rows_per_pass`` rows at a time (a q x rows_per_pass distance array at most)."""
    X = np.asarray(X, dtype=np.float64)
    cell = np.asarray(cell)
    q = len(queries)
    qq = np.einsum("ij,ij->i", queries, queries)[:, None]
    dist = np.zeros((q, 0))
    rows = np.zeros((q, 0), dtype=np.int64)
    for start in range(0, X.shape[0], rows_per_pass):
        Z = embed_block(X[start:start + rows_per_pass], metric)
        d = qq - 2.0 * queries @ Z.T + np.einsum("ij,ij->i", Z, Z)[None, :]
        dist = np.concatenate([dist, d], axis=1)
        rows = np.concatenate([rows, np.broadcast_to(np.arange(start, start + Z.shape[0]), d.shape)], axis=1)
        k = min(m, dist.shape[1])
        keep = np.argpartition(dist, k - 1, axis=1)[:, :k]
        dist, rows = np.take_along_axis(dist, keep, axis=1), np.take_along_axis(rows, keep, axis=1)
    return dist, rows + offset, cell[rows]
