"""The fair-metric conformance kit: :func:`check_fair_metric`.

A fair-metric learner (built-in or third-party) passes when the metric it fits behaves like a
squared (pseudo-)metric that budro can use as a transport cost, and when it refuses protected
attributes it cannot use with a clear error.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from budro.metrics.base import FairMetricLearner, FittedFairMetric

__all__ = ["check_fair_metric", "make_fair_metric_data"]

#: Rows of the sample the distance properties are checked on.
_SAMPLE = 40
#: Absolute tolerance of exact properties, relative to max(1, largest squared distance on the sample).
_RTOL = 1e-8
#: Tolerance of row-order invariance (a refit may converge to a slightly different optimum).
_REFIT_RTOL = 1e-5


def make_fair_metric_data(random_state: Any = 0, n: int = 80) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    """The kit's default data: ``(X, y, protected)`` with X (n, 5) and protected ``(0,)``.

    Column 0 is a binary protected attribute, column 1 a proxy of it (the attribute plus noise),
    columns 2 and 3 standard normal, column 4 a continuous attribute; y is a binary label.
    """
    gen = np.random.default_rng(random_state)
    g = gen.integers(0, 2, n).astype(float)
    g[:2] = [0.0, 1.0]  # both values present
    proxy = g + 0.5 * gen.normal(size=n)
    other = gen.normal(size=(n, 2))
    cont = gen.normal(size=n) + 0.3 * other[:, 0]
    X = np.column_stack([g, proxy, other, cont])
    y = (other[:, 0] + 0.5 * proxy + 0.3 * gen.normal(size=n) > 0.3).astype(int)
    return X, y, (0,)


def check_fair_metric(
    learner: FairMetricLearner,
    X: Any = None,
    protected: Sequence[Any] | None = None,
    *,
    y: Any = None,
    fit_params: Mapping[str, Any] | None = None,
    row_aligned: Iterable[str] | None = None,
    row_indices: Iterable[str] = (),
    check_errors: bool = True,
    random_state: Any = 0,
) -> dict:
    """Check that ``learner`` honours the fair-metric contract; raise AssertionError if not.

    The learner is fitted with ``learner.fit(X, protected, y=y, **fit_params)`` and the fitted
    metric is checked on a sample of X (and on X shifted along its protected directions):

    * ``fit returns a fitted metric``: a :class:`budro.metrics.FittedFairMetric`;
    * ``non-negativity``: ``pairwise(A, B)`` has shape (len(A), len(B)), finite entries >= 0;
    * ``symmetry``: ``pairwise(A) == pairwise(A).T`` and ``pairwise(A, B) == pairwise(B, A).T``;
    * ``zero distance between identical points``: the diagonal of ``pairwise(A)`` and of
      ``pairwise(A, copy of A)``;
    * ``zero distance along protected directions``: for every row v of the metric's
      ``protected_directions_`` (when it has them), ``d(x, x + t v) = 0``;
    * ``embedding consistency``: where the metric has ``embed``,
      ``pairwise(a, b) == ||embed(a) - embed(b)||^2``;
    * ``positive semidefiniteness``: where the metric has a matrix ``matrix_``: symmetric with no
      negative eigenvalue; where it has ``matrix_`` or ``embed``: the squared-distance matrix is
      Euclidean (``-J D J / 2`` is positive semidefinite);
    * ``matrix consistency``: ``pairwise`` equals the quadratic form ``(x - x')^T matrix_ (x - x')``;
    * ``blocked pairwise``: ``iter_pairwise`` with small blocks reassembles ``pairwise``;
    * ``transport cost consistency``: ``cost(X)`` (when provided) equals ``pairwise(X)``;
    * ``persistence``: the metric pickles, and ``to_dict`` (when provided) survives JSON and
      ``metric_from_dict`` (for a :class:`~budro.metrics.LinearMetric`; else the class's
      ``from_dict``) as the same class, with equal ``_state_attributes`` and the same distances;
    * ``input not modified``: fitting and evaluating leave X unchanged;
    * ``row-order invariance``: refitting on the rows in another order gives the same metric;
    * with ``check_errors``: a ``ValueError`` (e.g. :class:`budro.exceptions.ValidationError`)
      at fit for a protected column out of range (the message names the column or says
      "range"), a constant protected attribute (message says "constant") and a non-numeric
      protected column (message says "numeric" or "encode").

    Parameters
    ----------
    learner : FairMetricLearner
        The learner to check (an instance, configured).
    X : array (n, d), optional
        Training data; default :func:`make_fair_metric_data` (80 rows, 5 columns, protected (0,)).
    protected : sequence, optional
        Protected attributes passed to ``fit`` (default ``(0,)`` with the default data, else ``()``).
    y : array (n,), optional
        Labels passed to ``fit`` (default: the default data's labels, else None).
    fit_params : mapping, optional
        Further keyword arguments of ``fit`` (e.g. ``groups`` for ``svd-subspace``, ``pairs`` and
        ``comparable`` for ``explore``).
    row_aligned : iterable of str, optional
        Names in ``fit_params`` whose first axis runs over the rows of X (reordered with them in
        the row-order check).  Default: every fit parameter that is an array with n rows, except
        those in ``row_indices``.
    row_indices : iterable of str, default ()
        Names in ``fit_params`` holding row indices into X (renumbered in the row-order check).
    check_errors : bool, default True
        Check the errors for bad protected attributes (turn off for a learner that ignores
        ``protected`` by design, e.g. a fixed feature subset).
    random_state : int or Generator, default 0
        Seeds the row permutation and the sample.

    Returns
    -------
    dict
        ``metric`` (repr of the fitted metric), ``checked`` (the properties checked) and
        ``skipped`` (property -> reason).

    Raises
    ------
    AssertionError
        On the first failure, naming the property and the numbers.
    """
    if not callable(getattr(learner, "fit", None)):
        raise TypeError(f"check_fair_metric expects a fair-metric learner (with fit), got {type(learner).__name__}")
    gen = np.random.default_rng(random_state)
    if X is None:
        X, y_default, p_default = make_fair_metric_data(gen.integers(2**31))
        protected = p_default if protected is None else protected
        y = y_default if y is None else y
    protected = () if protected is None else protected
    X = np.array(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 4:
        raise ValueError(f"check_fair_metric: X must be 2-D with at least 4 rows, got shape {X.shape}")
    fit_params = dict(fit_params or {})
    row_indices = tuple(row_indices)
    n, d = X.shape
    if row_aligned is None:
        row_aligned = tuple(k for k, v in fit_params.items()
                            if k not in row_indices and np.ndim(v) >= 1 and len(np.asarray(v)) == n)
    row_aligned = tuple(row_aligned)
    for k in row_aligned + row_indices:
        if k not in fit_params:
            raise ValueError(f"check_fair_metric: {k!r} is not in fit_params")

    kit = _Kit(learner)
    X_before = X.copy()
    metric = kit.fit(X, protected, y, fit_params)

    m = min(n, _SAMPLE)
    A = X[:m]
    B = X[n - min(n, 17):][::-1] + 0.25 * gen.normal(size=(min(n, 17), d))
    D = kit.pairwise(metric, A)
    scale = max(1.0, float(np.max(D)) if D.size else 1.0)
    atol = _RTOL * scale

    # -- shape, sign and symmetry ------------------------------------------------------------
    DAB = kit.pairwise(metric, A, B)
    kit.require(D.shape == (m, m) and DAB.shape == (m, len(B)), "non-negativity",
                f"pairwise returned shapes {D.shape} and {DAB.shape}, expected {(m, m)} and {(m, len(B))}")
    for name, M in (("pairwise(A)", D), ("pairwise(A, B)", DAB)):
        kit.require(bool(np.all(np.isfinite(M))), "non-negativity", f"{name} has non-finite entries")
        kit.require(float(M.min()) >= -atol, "non-negativity", f"{name} has a negative entry {float(M.min()):g}")
    kit.close(D, D.T, atol, "symmetry", "pairwise(A) differs from its transpose")
    kit.close(DAB, kit.pairwise(metric, B, A).T, atol, "symmetry", "pairwise(A, B) differs from pairwise(B, A).T")

    # -- identical points ------------------------------------------------------------------------
    kit.close(np.diagonal(D), np.zeros(m), atol, "zero distance between identical points", "diagonal of pairwise(A)")
    kit.close(np.diagonal(kit.pairwise(metric, A, A.copy())), np.zeros(m), atol,
              "zero distance between identical points", "diagonal of pairwise(A, copy of A)")

    # -- protected directions --------------------------------------------------------------------
    directions = getattr(metric, "protected_directions_", None)
    if directions is not None and np.size(directions):
        V = np.asarray(directions, dtype=float).reshape(-1, d)
        t = 2.0 * max(1.0, float(np.abs(A).max()))
        for k, v in enumerate(V):
            shifted = A + t * v * np.linspace(-1.0, 1.0, m)[:, None]
            moved = np.diagonal(kit.pairwise(metric, A, shifted))
            kit.close(moved, np.zeros(m), atol * 4, "zero distance along protected directions",
                      f"moving along protected_directions_[{k}] changes the distance")
        kit.checked.append("zero distance along protected directions")
    else:
        kit.skipped["zero distance along protected directions"] = "the metric has no protected_directions_"

    # -- embedding -----------------------------------------------------------------------------
    matrix = getattr(metric, "matrix_", None)
    embed = getattr(metric, "embed", None)
    if callable(embed):
        ZA, ZB = kit.call(embed, "embedding consistency", A), kit.call(embed, "embedding consistency", B)
        kit.require(np.ndim(ZA) == 2 and np.shape(ZA)[0] == m and np.ndim(ZB) == 2 and np.shape(ZB)[1] == np.shape(ZA)[1],
                    "embedding consistency", f"embed returned shapes {np.shape(ZA)} and {np.shape(ZB)}")
        ZA, ZB = np.asarray(ZA, float), np.asarray(ZB, float)
        from_z = ((ZA[:, None, :] - ZB[None, :, :]) ** 2).sum(-1)
        kit.close(DAB, from_z, 1e-7 * scale, "embedding consistency", "pairwise(A, B) != ||embed(A) - embed(B)||^2")
        kit.checked.append("embedding consistency")
    else:
        kit.skipped["embedding consistency"] = "the metric has no embed"

    # -- positive semidefiniteness -----------------------------------------------------------
    if matrix is not None:
        M = np.asarray(matrix, dtype=float)
        kit.require(M.shape == (d, d), "positive semidefiniteness", f"matrix_ has shape {M.shape}, expected {(d, d)}")
        mscale = max(1.0, float(np.abs(M).max()))
        kit.require(float(np.abs(M - M.T).max()) <= _RTOL * mscale, "positive semidefiniteness", "matrix_ is not symmetric")
        lam = np.linalg.eigvalsh(0.5 * (M + M.T))
        kit.require(lam[0] >= -1e-9 * mscale, "positive semidefiniteness",
                    f"matrix_ has a negative eigenvalue {lam[0]:g}")
    if matrix is not None or callable(embed):
        J = np.eye(m) - 1.0 / m
        G = -0.5 * J @ D @ J
        lam = np.linalg.eigvalsh(0.5 * (G + G.T))
        kit.require(lam[0] >= -1e-7 * scale * m, "positive semidefiniteness",
                    f"pairwise(A) is not a Euclidean squared-distance matrix (-JDJ/2 has eigenvalue {lam[0]:g})")
        kit.checked.append("positive semidefiniteness")
    else:
        kit.skipped["positive semidefiniteness"] = "the metric is not Mahalanobis (no matrix_ or embed)"

    if matrix is not None:
        diff = A[:, None, :] - A[None, :, :]
        quad = np.einsum("ijk,kl,ijl->ij", diff, M, diff)
        kit.close(D, quad, 1e-7 * scale, "matrix consistency",
                  "pairwise differs from the quadratic form (x - x')^T matrix_ (x - x')")
        kit.checked.append("matrix consistency")
    else:
        kit.skipped["matrix consistency"] = "the metric has no matrix_"

    # -- blocks and cost -----------------------------------------------------------------------
    if callable(getattr(metric, "iter_pairwise", None)):
        blocks = kit.call(lambda: list(metric.iter_pairwise(A, B, block_bytes=8 * len(B) * 3)), "blocked pairwise")
        covered = [(s, e) for s, e, _ in blocks]
        expected = [(s, min(m, s + 3)) for s in range(0, m, 3)]
        kit.require(covered == expected, "blocked pairwise", f"blocks cover {covered}, expected {expected}")
        kit.close(np.vstack([blk for _, _, blk in blocks]), DAB, atol, "blocked pairwise",
                  "iter_pairwise blocks differ from pairwise")
        kit.checked.append("blocked pairwise")
    try:
        cost = metric.cost(A)
    except NotImplementedError:
        kit.skipped["transport cost consistency"] = "the metric provides no cost"
    except Exception as exc:
        kit.fail("transport cost consistency", f"cost(A) raised {type(exc).__name__}: {exc}")
    else:
        C = np.hstack([np.asarray(blk) for _, _, blk in cost.iter_blocks()])
        kit.close(C, D, 1e-7 * scale, "transport cost consistency", "cost(A) differs from pairwise(A)")
        kit.checked.append("transport cost consistency")

    # -- persistence ---------------------------------------------------------------------------
    try:
        clone = pickle.loads(pickle.dumps(metric))
    except Exception as exc:
        kit.fail("persistence", f"the fitted metric does not pickle: {type(exc).__name__}: {exc}")
    kit.close(kit.pairwise(clone, A, B), DAB, 0.0, "persistence", "the unpickled metric gives other distances")
    if callable(getattr(metric, "to_dict", None)):
        state = kit.call(metric.to_dict, "persistence")
        try:
            state = json.loads(json.dumps(state))
        except (TypeError, ValueError) as exc:
            kit.fail("persistence", f"to_dict() is not JSON-serialisable: {exc}")
        from budro.metrics.linear import LinearMetric, metric_from_dict

        # budro's linear metrics go through the public metric_from_dict (the registry finds the class)
        from_dict = metric_from_dict if isinstance(metric, LinearMetric) else getattr(type(metric), "from_dict", None)
        if not callable(from_dict):
            kit.fail("persistence", f"{type(metric).__name__} has to_dict but no from_dict to rebuild it")
        rebuilt = kit.call(from_dict, "persistence", state)
        kit.require(type(rebuilt) is type(metric), "persistence",
                    f"from_dict(to_dict()) gives a {type(rebuilt).__name__}, not a {type(metric).__name__}")
        for name in getattr(type(metric), "_state_attributes", ()):
            kit.require(_same_value(getattr(rebuilt, name, None), getattr(metric, name, None)), "persistence",
                        f"from_dict(to_dict()) changes the fitted attribute {name}")
        kit.close(kit.pairwise(rebuilt, A, B), DAB, atol, "persistence", "from_dict(to_dict()) gives other distances")
    kit.checked.append("persistence")

    kit.require(np.array_equal(X, X_before), "input not modified", "fit or pairwise modified X in place")
    kit.checked.append("input not modified")

    # -- row order -------------------------------------------------------------------------------
    perm = gen.permutation(n)
    inverse = np.empty(n, dtype=np.intp)
    inverse[perm] = np.arange(n)
    params_p = dict(fit_params)
    for k in row_aligned:
        params_p[k] = np.asarray(fit_params[k])[perm]
    for k in row_indices:
        params_p[k] = inverse[np.asarray(fit_params[k])]
    y_p = None if y is None else np.asarray(y)[perm]
    metric_p = kit.fit(X[perm], protected, y_p, params_p, learner=_fresh(learner), prop="row-order invariance")
    kit.close(kit.pairwise(metric_p, A, B), DAB, _REFIT_RTOL * scale, "row-order invariance",
              "refitting on the rows in another order changes the distances")
    kit.checked.append("row-order invariance")

    # -- errors --------------------------------------------------------------------------------
    if check_errors:
        _check_errors(kit, learner, X, protected, y, fit_params)
    else:
        kit.skipped["errors"] = "check_errors=False"
    return {"metric": repr(metric), "checked": kit.checked, "skipped": kit.skipped}


class _Kit:
    def __init__(self, learner: Any):
        self.learner = learner
        self.checked: list[str] = ["fit returns a fitted metric", "non-negativity", "symmetry",
                                   "zero distance between identical points"]
        self.skipped: dict[str, str] = {}

    def fail(self, prop: str, detail: str) -> None:
        raise AssertionError(f"check_fair_metric: {self.learner!r} fails '{prop}': {detail}")

    def require(self, ok: bool, prop: str, detail: str) -> None:
        if not ok:
            self.fail(prop, detail)

    def close(self, a: Any, b: Any, atol: float, prop: str, detail: str) -> None:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if a.shape != b.shape:
            self.fail(prop, f"{detail}: shapes {a.shape} and {b.shape}")
        if a.size:
            err = np.abs(a - b)
            worst = int(np.argmax(err))
            if not err.flat[worst] <= atol:
                idx = np.unravel_index(worst, a.shape)
                self.fail(prop, f"{detail} (at {tuple(int(i) for i in idx)}: {a.flat[worst]:.10g} vs "
                                f"{b.flat[worst]:.10g}, tolerance {atol:.3g})")

    def call(self, fn: Callable, prop: str, *args: Any) -> Any:
        try:
            return fn(*args)
        except AssertionError:
            raise
        except Exception as exc:
            self.fail(prop, f"{getattr(fn, '__name__', 'call')} raised {type(exc).__name__}: {exc}")

    def fit(self, X: np.ndarray, protected: Any, y: Any, fit_params: dict, *, learner: Any = None,
            prop: str = "fit returns a fitted metric") -> FittedFairMetric:
        learner = self.learner if learner is None else learner
        try:
            metric = learner.fit(X, protected, y=y, **fit_params)
        except Exception as exc:
            self.fail(prop, f"fit raised {type(exc).__name__}: {exc}")
        self.require(isinstance(metric, FittedFairMetric), prop,
                     f"fit returned {type(metric).__name__}, not a budro.metrics.FittedFairMetric")
        return metric

    def pairwise(self, metric: FittedFairMetric, X1: np.ndarray, X2: np.ndarray | None = None) -> np.ndarray:
        try:
            return np.asarray(metric.pairwise(X1, X2), dtype=float)
        except Exception as exc:
            self.fail("non-negativity", f"pairwise raised {type(exc).__name__}: {exc}")


def _fresh(learner: Any) -> Any:
    try:
        return copy.deepcopy(learner)
    except Exception:
        return learner


def _first_attribute(protected: Any) -> list[int] | None:
    """The columns of the first protected attribute (a column index or a group of them)."""
    for item in protected or ():
        if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            return [int(item)]
        try:
            cols = [int(c) for c in item]
        except Exception:
            continue
        if cols:
            return cols
    return None


def _expect_error(kit: _Kit, learner: Any, prop: str, words: Sequence[str], X: Any, protected: Any, y: Any,
                  fit_params: dict) -> None:
    try:
        learner.fit(X, protected, y=y, **fit_params)
    except (ValueError, TypeError) as exc:
        message = str(exc).lower()
        if not any(w.lower() in message for w in words):
            kit.fail(prop, f"fit raised {type(exc).__name__} with an unclear message (expected it to mention "
                           f"{' or '.join(map(repr, words))}): {exc}")
        if isinstance(exc, TypeError) and prop != "error for a non-numeric protected attribute":
            kit.fail(prop, f"fit raised TypeError, expected a ValueError (ValidationError): {exc}")
    except Exception as exc:
        kit.fail(prop, f"fit raised {type(exc).__name__} instead of a ValueError (ValidationError): {exc}")
    else:
        kit.fail(prop, "fit accepted it without an error")
    kit.checked.append(prop)


def _check_errors(kit: _Kit, learner: Any, X: np.ndarray, protected: Any, y: Any, fit_params: dict) -> None:
    n, d = X.shape
    bad = d + 3
    _expect_error(kit, _fresh(learner), "error for a protected column out of range", [str(bad), "range"],
                  X, list(protected) + [bad], y, fit_params)
    cols = _first_attribute(protected)
    if cols is None:
        kit.skipped["error for a constant protected attribute"] = "no protected attribute given"
        kit.skipped["error for a non-numeric protected attribute"] = "no protected attribute given"
        return
    X_const = X.copy()
    X_const[:, cols] = X[0, cols]  # the whole attribute (every column of a group) takes one value
    _expect_error(kit, _fresh(learner), "error for a constant protected attribute", ["constant"],
                  X_const, protected, y, fit_params)
    X_text = X.astype(object)
    col = cols[0]
    values = np.unique(X[:, col])
    names = {v: f"group-{k}" for k, v in enumerate(values)}
    X_text[:, col] = [names[v] for v in X[:, col]]
    _expect_error(kit, _fresh(learner), "error for a non-numeric protected attribute", ["numeric", "encod"],
                  X_text, protected, y, fit_params)


def _same_value(a: Any, b: Any) -> bool:
    """Equal fitted values: arrays elementwise (NaN equal to NaN), sequences and dicts recursively."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    return bool(a == b) or (a != a and b != b)  # NaN scalars
