"""The booster-backend conformance kit: :func:`check_backend`.

A backend (built-in or third-party) passes when it behaves as one round of its library per
:meth:`~budro.backends.Backend.step`, on D0 weighted by the given weights, and as a well-behaved
model otherwise.  Every check compares the backend with its own library (through
:meth:`~budro.backends.Backend.fit_native` and a second instance of the backend), so the kit
needs nothing library-specific except, optionally, a way to load a saved model.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from typing import Any, Callable, Iterable

import numpy as np

from budro.backends.base import Backend
from budro.exceptions import ConfigError
from budro.losses import label_losses, probabilities

__all__ = ["check_backend", "builtin_loader"]

#: A parameter name no backend accepts.
_UNKNOWN_PARAMETER = "budro_kit_no_such_parameter"
#: Smallest spread of margins that makes a comparison of two models meaningful.
_MIN_SPREAD = 1e-3
#: Copies of every point per class in the per-round-weight checks.  A point's hessian at f_0 is
#: its number of copies times the per-row hessian at uniform probabilities: with one copy per
#: class that is exactly 1 for LightGBM at K = 3 (3 * 1.5 * 2/9), with two exactly 1 for
#: XGBoost and LightGBM at K = 2 (4 * 1/4), i.e. the default minimum child hessian, and float
#: rounding decides whether a one-point leaf is allowed.  Three copies per class stay clear of it.
_COPIES_PER_CLASS = 3

LoadAndPredict = Callable[[str, np.ndarray], np.ndarray]


def check_backend(
    backend_factory: Callable[..., Backend],
    *,
    n_classes: Iterable[int] = (2,),
    load_and_predict: LoadAndPredict | None = None,
    model_suffix: str | None = None,
    n_samples: int = 120,
    n_features: int = 4,
    n_rounds: int = 3,
    atol: float = 1e-6,
    random_state: int = 0,
) -> None:
    """Check that backends made by ``backend_factory`` honour the backend contract; raise
    AssertionError naming the first property that fails.

    Parameters
    ----------
    backend_factory : callable
        ``backend_factory(**params)`` returns a new, unstarted backend; ``params`` are the
        backend's own parameters (the kit passes none, except one unknown name to check that it
        is rejected).  Bind the settings to test with :func:`functools.partial`, e.g.
        ``partial(LightGBMBackend, num_threads=1)``.  The settings must be deterministic
        (CatBoost: ``random_strength=0``, no bootstrap) and let a few trees learn something.
    n_classes : iterable of int, default=(2,)
        The numbers of classes to check; each runs every check below.
    load_and_predict : callable, optional
        ``load_and_predict(path, X)`` loads a model written by ``save_model(path)`` with the
        plain library and returns its raw margins at ``X`` ((m,) for two classes, (m, K)
        otherwise).  The built-in backends have one (:func:`builtin_loader`); without one the
        kit only checks that ``save_model`` writes a non-empty file.
    model_suffix : str, optional
        File-name suffix for ``save_model`` (e.g. ``".json"``); the built-ins' is known.
    n_samples, n_features : int
        Size of the generated training data.
    n_rounds : int, default=3
        Rounds (f_0 included) of the model compared with native training.
    atol : float, default=1e-6
        Absolute tolerance on margins.  Libraries store gradients in float32, so exact
        equality is not expected; a wrong tree is off by far more.
    random_state : int, default=0
        Seed of the generated data, handed to ``start`` and ``fit_native`` as well.

    Checks
    ------
    For each K in ``n_classes``, on continuous data (n = ``n_samples``):

    1. **Parameters**: ``backend_factory(budro_kit_no_such_parameter=1)`` raises
       :class:`~budro.exceptions.ConfigError` (when created, or at the latest in ``start``); a
       new backend reports ``n_rounds == 0``.
    2. **Native equality** (eps = 0): ``start`` and ``n_rounds - 1`` steps with the empirical
       weights (``weights[i, y_i] = 1/n``) give the margins of ``fit_native(X, y, K,
       n_rounds)``, the library's own training; ``n_rounds`` counts f_0 and every step;
       ``fit_native`` with equal ``sample_weight`` gives the unweighted model.
    3. **Margins**: ``margins()`` has shape (n,) for two classes and (n, K) otherwise, equals
       ``predict_margin(X_train)``, and ``losses()`` equals the cross-entropy of the margins.
    4. **Probabilities**: ``predict_proba`` has shape (m, K), values in [0, 1], rows summing to 1.
    5. **Per-round weights, zeroed rows**: a round whose weights vanish on all but a subset H of
       the rows is the round the library trains on H alone.  The comparison is generic: the
       training rows are 3K copies of the rows of H; backend A gets labels that are balanced at
       every x (copy j of x_i labelled ``(y_i + j) mod K``), so its f_0 leaves every class
       equally likely, and then one step with weight only on the first copy, on label ``y_i``;
       backend B gets every copy labelled ``y_i``, so its f_0, one plain round from the same
       start, is the round on H with the same weight per x (n, the weight scale and the row
       count per x agree too).  A after its step must equal B after f_0.  A backend that
       ignores the new weights, keeps earlier ones or misplaces them fails this.
    6. **Per-round weights, spread over labels**: as 5, but B's copies of x_i carry random
       labels and A's step puts weight ``c_ik / (K |H|)`` on ``(x_i, k)``, ``c_ik`` being the
       number of B's copies of x_i with label k: the D0 semantics of weights on several labels
       of one point.
    7. **Export**: ``save_model(path)`` writes a file that ``load_and_predict`` loads with the
       plain library, predicting the backend's margins.
    8. **finish() and pickling**: after ``finish()`` the backend predicts as before, and a
       pickled copy predicts the same with the same ``n_rounds`` and ``n_classes_``.

    Before checks 5 and 6, **start from margin 0**: f_0 must be one round from margin 0 (equal
    class probabilities), not from an intercept.  A fixed intercept (XGBoost with a
    ``base_score`` other than 0.5) shows in the balanced start of checks 5 and 6; an intercept
    fitted to the labels (XGBoost >= 2 without ``base_score``, a boost-from-average) is 0 on
    balanced labels and is found by a probe: two points carrying the same label shares, three
    share levels in equal steps, where one round from margin 0 is linear in the shares (the
    gradients at margin 0 are, the hessians do not depend on the labels) and an intercept
    (``log`` of the shares) is not.  Both fail with a message that says "starts from an
    intercept".
    """
    K_values = [int(k) for k in n_classes]
    if not K_values or any(k < 2 for k in K_values):
        raise ValueError(f"n_classes must list numbers of classes >= 2, got {list(n_classes)!r}")
    label = _factory_label(backend_factory)
    _check_parameters(backend_factory, label)
    for K in K_values:
        ctx = f"check_backend[{label}, K={K}]"
        X, y = _make_data(n_samples, n_features, K, random_state)
        backend = _check_native_equality(backend_factory, X, y, K, n_rounds, atol, random_state, ctx)
        _check_margins(backend, X, y, K, atol, ctx)
        X_new, _ = _make_data(40, n_features, K, random_state + 1)
        _check_proba(backend, X_new, K, ctx)
        _check_no_intercept(backend_factory, K, atol, random_state, ctx)
        _check_zeroed_rows(backend_factory, n_samples // 3, n_features, K, atol, random_state, ctx)
        _check_spread_labels(backend_factory, n_samples // 3, n_features, K, atol, random_state, ctx)
        _check_export(backend, X_new, K, load_and_predict, model_suffix, atol, ctx)
        _check_finish_and_pickle(backend, X_new, K, ctx)


def builtin_loader(backend: Backend) -> tuple[str, LoadAndPredict] | None:
    """``(model_suffix, load_and_predict)`` for budro's built-in backends (and subclasses),
    ``None`` for any other backend."""
    from budro.backends.catboost import CatBoostBackend
    from budro.backends.lightgbm import LightGBMBackend
    from budro.backends.xgboost import XGBoostBackend

    if isinstance(backend, XGBoostBackend):
        return ".json", _load_xgboost
    if isinstance(backend, LightGBMBackend):
        return ".txt", _load_lightgbm
    if isinstance(backend, CatBoostBackend):
        return ".cbm", _load_catboost
    return None


# -- the checks ------------------------------------------------------------------------------


def _check_parameters(factory: Callable[..., Backend], label: str) -> None:
    ctx = f"check_backend[{label}]"
    fresh = factory()
    _require(isinstance(fresh, Backend), ctx, f"backend_factory() must return a budro Backend, got {type(fresh).__name__}")
    _require(fresh.n_rounds == 0, ctx, f"a new backend must report n_rounds == 0, got {fresh.n_rounds}")
    X, y = _make_data(20, 2, 2, 0)
    try:
        backend = factory(**{_UNKNOWN_PARAMETER: 1})
        backend.start(X, y, 2)
    except ConfigError as exc:
        _require(_UNKNOWN_PARAMETER in str(exc), ctx, f"the ConfigError for an unknown parameter must name it; got: {exc}")
        return
    except Exception as exc:  # noqa: BLE001 - reported as the failure
        raise AssertionError(
            f"{ctx}: an unknown parameter must raise budro.exceptions.ConfigError, got {type(exc).__name__}: {exc}"
        ) from exc
    raise AssertionError(f"{ctx}: the unknown parameter {_UNKNOWN_PARAMETER!r} was accepted; it must raise ConfigError")


def _check_native_equality(factory, X, y, K, n_rounds, atol, seed, ctx) -> Backend:
    n = len(y)
    backend = factory()
    backend.start(X, y, K, random_state=seed)
    _require(backend.n_rounds == 1, ctx, f"after start() n_rounds must be 1 (f_0), got {backend.n_rounds}")
    _require(backend.n_classes_ == K, ctx, f"n_classes_ must be {K} after start(), got {backend.n_classes_!r}")
    _require(backend.n_features_in_ == X.shape[1], ctx,
             f"n_features_in_ must be {X.shape[1]} after start(), got {backend.n_features_in_!r}")
    empirical = np.zeros((n, K))
    empirical[np.arange(n), y] = 1.0 / n
    for r in range(1, n_rounds):
        backend.step(empirical)
        _require(backend.n_rounds == r + 1, ctx, f"after {r} step(s) n_rounds must be {r + 1}, got {backend.n_rounds}")
    native = factory().fit_native(X, y, K, n_rounds, random_state=seed)
    _require(isinstance(native, Backend), ctx, f"fit_native must return a budro Backend, got {type(native).__name__}")
    _require(native.n_rounds == n_rounds, ctx, f"fit_native(..., n_rounds={n_rounds}) reports n_rounds={native.n_rounds}")
    ours = _margins(backend, n, K, ctx)
    theirs = np.asarray(native.predict_margin(X), dtype=np.float64)
    _require(theirs.shape == ours.shape, ctx, f"fit_native's predict_margin has shape {theirs.shape}, expected {ours.shape}")
    _close(ours, theirs, atol, ctx,
           f"with the empirical weights (eps = 0), start() + {n_rounds - 1} step(s) must equal the library's own "
           f"training (fit_native, {n_rounds} rounds)")
    _require(np.ptp(ours) > _MIN_SPREAD, ctx,
             "the model learned nothing on the kit's data (all margins equal); the comparison would be vacuous: "
             "relax the regularisation in backend_factory")
    weighted = factory().fit_native(X, y, K, n_rounds, random_state=seed, sample_weight=np.full(n, 2.5))
    _close(np.asarray(weighted.predict_margin(X), dtype=np.float64), theirs, atol, ctx,
           "fit_native with equal sample weights must train the unweighted model (sample_weight is a distribution "
           "over the rows, brought to the backend's weight scale)")
    return backend


def _check_margins(backend: Backend, X, y, K, atol, ctx) -> None:
    n = len(y)
    m = _margins(backend, n, K, ctx)
    _close(m, np.asarray(backend.predict_margin(X), dtype=np.float64), atol, ctx,
           "margins() must equal predict_margin(X_train)")
    L = np.asarray(backend.losses(), dtype=np.float64)
    _require(L.shape == (n, K), ctx, f"losses() must have shape (n, K) = {(n, K)}, got {L.shape}")
    _close(L, label_losses(m, K), 1e-9, ctx, "losses() must be the cross-entropy of margins() under each label")


def _check_proba(backend: Backend, X_new, K, ctx) -> None:
    p = np.asarray(backend.predict_proba(X_new), dtype=np.float64)
    _require(p.shape == (len(X_new), K), ctx, f"predict_proba must have shape (m, K) = {(len(X_new), K)}, got {p.shape}")
    _require(bool(np.isfinite(p).all()) and p.min() >= 0.0 and p.max() <= 1.0, ctx,
             f"predict_proba values must lie in [0, 1] (min {p.min():.3g}, max {p.max():.3g})")
    _close(p.sum(axis=1), np.ones(len(X_new)), 1e-9, ctx, "predict_proba rows must sum to 1")


def _check_no_intercept(factory, K, atol, seed, ctx) -> None:
    """f_0 on two points with equal label shares, at three equally spaced shares of label 1: one
    round from margin 0 is linear in the shares; an intercept fitted to the labels is not."""
    group = 18
    g = np.arange(2 * group) % 2
    X = np.column_stack([g, 1.0 - g]).astype(np.float64)
    margins = []
    for ones in (5, 7, 9):
        per_group = np.concatenate([np.arange(2, K), np.ones(ones, dtype=np.int64),
                                    np.zeros(group - ones - (K - 2), dtype=np.int64)])
        y = np.empty(2 * group, dtype=np.int64)
        y[g == 0] = per_group
        y[g == 1] = per_group
        probe = factory()
        probe.start(X, y, K, random_state=seed)
        margins.append(_margins(probe, len(y), K, ctx))
    low, mid, high = margins
    off = float(np.abs((high - low) - 2.0 * (mid - low)).max())
    scale = max(1.0, float(np.abs(high - low).max()))
    _require(off <= max(atol, 1e-6) * scale, ctx,
             f"the backend starts from an intercept fitted to the labels: f_0 on points with label-1 shares "
             f"5/18, 7/18 and 9/18 is not linear in the shares (off by {off:.3g}), as one round from margin 0 "
             f"is; budro's rounds reweight the labels every step, so every model must start from margin 0 "
             f"(XGBoost: base_score=0.5; LightGBM/CatBoost: boost_from_average=False)")


def _check_zeroed_rows(factory, h, d, K, atol, seed, ctx) -> None:
    X_H, y_H = _make_data(h, d, K, seed + 2)
    R = _COPIES_PER_CLASS * K
    labels_B = np.tile(y_H, R)  # every copy of x_i labelled y_i
    weights = np.zeros((R * h, K))
    weights[np.arange(h), y_H] = 1.0 / h  # the first copy only, on label y_i
    _compare_with_half(factory, X_H, labels_B, weights, K, atol, seed, ctx,
                       "a step whose weights vanish outside a subset H of the rows must equal the round trained "
                       "on H alone (here: f_0 of a backend trained on the copies with their labels)")


def _check_spread_labels(factory, h, d, K, atol, seed, ctx) -> None:
    X_H, _, score = _make_data(h, d, K, seed + 3, return_score=True)
    R = _COPIES_PER_CLASS * K
    # copy j of x_i gets the label of a shifted score: points near a class boundary get mixed
    # labels, the others pure ones (structured labels: no exact ties between candidate splits)
    cuts = np.quantile(score, np.linspace(0, 1, K + 1)[1:-1])
    shifts = np.linspace(-1.0, 1.0, R) * np.std(score) / K
    labels_B = np.concatenate([np.digitize(score + s, cuts) for s in shifts]).astype(np.int64)
    counts = np.zeros((h, K))
    np.add.at(counts, (np.tile(np.arange(h), R), labels_B), 1.0)
    weights = np.zeros((R * h, K))
    weights[:h] = counts / (R * h)
    _compare_with_half(factory, X_H, labels_B, weights, K, atol, seed, ctx,
                       "a step with weights spread over the labels of a point must equal the round on D0: "
                       "the point once per label, weighted by its weight on that label")


def _compare_with_half(factory, X_H, labels_B, weights, K, atol, seed, ctx, what) -> None:
    """A: R copies of X_H with labels balanced at every point, then one step with ``weights``;
    B: the same rows with ``labels_B``, f_0 only.  Both are one round from the same margins."""
    h = len(X_H)
    R = len(labels_B) // h
    X_rep = np.tile(X_H, (R, 1))
    balanced = np.concatenate([(labels_B[:h] + j) % K for j in range(R)])
    A = factory()
    A.start(X_rep, balanced, K, random_state=seed)
    before = _margins(A, R * h, K, ctx)
    uniform = np.abs(probabilities(before, K) - 1.0 / K).max()
    _require(np.ptp(before) <= atol and uniform <= atol, ctx,
             "f_0 trained on labels balanced at every point (each point equally often with every label) must leave "
             f"every class equally likely everywhere, but the margins span {np.ptp(before):.3g} and the "
             f"probabilities are up to {uniform:.3g} away from 1/K; the per-round-weight checks need a model that "
             "starts from equal class probabilities: the backend starts from an intercept (a base score or fitted "
             "intercept, boost-from-average); set it to margin 0")
    A.step(weights)
    B = factory()
    B.start(X_rep, labels_B, K, random_state=seed)
    reference = _margins(B, R * h, K, ctx)
    _require(np.ptp(reference) > _MIN_SPREAD, ctx,
             "the reference round learned nothing on the kit's data; relax the regularisation in backend_factory")
    # A's f_0 moved nothing, so A after one step and B after f_0 are one round from the same start
    _close(_margins(A, R * h, K, ctx), reference, atol, ctx, what)


def _check_export(backend: Backend, X_new, K, load_and_predict, model_suffix, atol, ctx) -> None:
    builtin = builtin_loader(backend)
    if builtin is not None:
        model_suffix = builtin[0] if model_suffix is None else model_suffix
        load_and_predict = builtin[1] if load_and_predict is None else load_and_predict
    expected = np.asarray(backend.predict_margin(X_new), dtype=np.float64)
    with tempfile.TemporaryDirectory(prefix="budro-kit-") as tmp:
        path = os.path.join(tmp, "model" + (model_suffix or ""))
        backend.save_model(path)
        _require(os.path.isfile(path) and os.path.getsize(path) > 0, ctx, f"save_model({path!r}) wrote no file or an empty one")
        if load_and_predict is None:
            return
        loaded = np.asarray(load_and_predict(path, X_new), dtype=np.float64)
    _require(loaded.shape == expected.shape, ctx,
             f"the saved model's margins have shape {loaded.shape}, the backend's {expected.shape}")
    _close(loaded, expected, atol, ctx, "the model saved by save_model and loaded by the plain library must predict "
                                        "the backend's margins")


def _check_finish_and_pickle(backend: Backend, X_new, K, ctx) -> None:
    expected = np.asarray(backend.predict_margin(X_new), dtype=np.float64)
    rounds = backend.n_rounds
    backend.finish()
    _close(np.asarray(backend.predict_margin(X_new), dtype=np.float64), expected, 0.0, ctx,
           "after finish() the model must predict exactly as before")
    try:
        restored = pickle.loads(pickle.dumps(backend))
    except Exception as exc:  # noqa: BLE001 - reported as the failure
        raise AssertionError(f"{ctx}: a finished backend must pickle, got {type(exc).__name__}: {exc}") from exc
    _close(np.asarray(restored.predict_margin(X_new), dtype=np.float64), expected, 0.0, ctx,
           "an unpickled backend must predict exactly as the original")
    _require(restored.n_rounds == rounds and restored.n_classes_ == K, ctx,
             f"an unpickled backend must keep n_rounds ({rounds}) and n_classes_ ({K}); "
             f"got {restored.n_rounds} and {getattr(restored, 'n_classes_', None)!r}")


# -- helpers ---------------------------------------------------------------------------------


def _make_data(n: int, d: int, K: int, seed: int, *, return_score: bool = False):
    """Continuous features and labels from a noisy linear score; every class occurs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    score = X @ rng.normal(size=d) + 0.5 * rng.normal(size=n)
    cuts = np.quantile(score, np.linspace(0, 1, K + 1)[1:-1])
    y = np.digitize(score, cuts).astype(np.int64)
    y[:K] = np.arange(K)  # every class present even for tiny n
    return (X, y, score) if return_score else (X, y)


def _margins(backend: Backend, n: int, K: int, ctx: str) -> np.ndarray:
    m = np.asarray(backend.margins(), dtype=np.float64)
    shape = (n,) if K == 2 else (n, K)
    _require(m.shape == shape, ctx, f"margins() must have shape {shape} for K={K}, got {m.shape}")
    return m


def _close(actual: np.ndarray, expected: np.ndarray, atol: float, ctx: str, what: str) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.shape != expected.shape:
        raise AssertionError(f"{ctx}: {what}; shapes differ: {actual.shape} vs {expected.shape}")
    diff = np.abs(actual - expected)
    if not np.all(diff <= atol):  # NaN fails too
        worst = int(np.nanargmax(diff)) if np.isfinite(diff).any() else 0
        raise AssertionError(
            f"{ctx}: {what}; max |difference| = {np.nanmax(diff):.3g} > atol = {atol:g} "
            f"(at flat index {worst}: {actual.ravel()[worst]!r} vs {expected.ravel()[worst]!r})"
        )


def _require(condition: bool, ctx: str, message: str) -> None:
    if not condition:
        raise AssertionError(f"{ctx}: {message}")


def _factory_label(factory: Any) -> str:
    func = getattr(factory, "func", factory)  # functools.partial
    return getattr(func, "__name__", type(func).__name__)


def _load_xgboost(path: str, X: np.ndarray) -> np.ndarray:
    import xgboost

    return xgboost.Booster(model_file=path).predict(xgboost.DMatrix(X), output_margin=True)


def _load_lightgbm(path: str, X: np.ndarray) -> np.ndarray:
    import lightgbm

    return lightgbm.Booster(model_file=path).predict(X, raw_score=True)


def _load_catboost(path: str, X: np.ndarray) -> np.ndarray:
    import catboost

    return catboost.CatBoost().load_model(path).predict(X, prediction_type="RawFormulaVal")
