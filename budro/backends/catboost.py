"""CatBoost, driven one boosting round at a time (Algorithm 3 of Vargo et al., 2021).

Every BuDRO round trains one tree on the augmented data set ``D0 = {(x_i, k) : i < n, k < K}``
where the copy ``(x_i, k)`` has weight ``P[i, k]``.

Route
-----
CatBoost cannot add a tree to a running model with new weights: ``fit(init_model=...)``
silently keeps the weights of the first fit, and a multi-iteration ``fit`` with a custom
objective cannot change its weights between iterations.  So every round is **one**
``CatBoost.fit`` with ``iterations=1`` on a ``Pool`` that is quantized once per fit, and the
model is the sum of the one-tree models (``catboost.sum_models``, built when it is needed).
f_0 is CatBoost's own first iteration on ``(X, y)`` (``Logloss`` or ``MultiClass``), so the
model keeps CatBoost's class names.

* **Two classes**: a ``Pool`` of the ``n`` original rows whose *label is the row index*, with
  pool weight ``w_i = P[i, 0] + P[i, 1]``, and a custom objective that returns the D0
  derivatives ``P[i, 1] - w_i p_i`` and ``-w_i p_i (1 - p_i)`` at the current margin plus the
  round's approx (CatBoost hands the objective 1000-row chunks without their offsets, hence
  the row index as label; its custom derivatives are not multiplied by the weights).
  CatBoost's split scores (``Cosine``, ``L2``) divide by pool weights, whose leaf sums are
  those of D0, so the tree is the tree of a D0 round.  No baseline is set (setting one costs
  more than the round itself), and the margins are updated by predicting the new tree on the
  quantized pool.
* **K > 2**: CatBoost's custom multi-class objectives are called once per row, which is far
  too slow, so this route materialises D0: a ``Pool`` of the ``K n`` rows ``(x_i, k)`` with
  labels ``k``, quantized once, whose weights (``P`` scaled) and baseline (the current
  margins) are set every round before one ``MultiClass`` iteration.  Setting a baseline costs
  about 1.5 microseconds per value in CatBoost 1.2, i.e. ``K^2 n`` values per round.

CatBoost scales ``l2_leaf_reg`` by the mean pool weight (sum of weights / rows).  The ``n``-row
route therefore reproduces CatBoost's ordinary training on ``(X, y)`` with the user's
``l2_leaf_reg`` exactly; an explicit D0 pool has ``K`` times as many rows, and the ``K > 2``
route passes ``K * l2_leaf_reg`` to restore the same regularisation.  Put differently: a step
equals a round on an explicit D0 pool with ``l2_leaf_reg`` multiplied by ``K``.  The same
scaling makes ``weight_scale`` immaterial for CatBoost.

Missing values and categorical features
---------------------------------------
NaN in a numeric column is CatBoost's missing value (``nan_mode`` ``"Min"``).  Categorical
columns (``start(..., categorical_features=...)``, integer codes) reach CatBoost as categorical
features whose values are the codes as strings, NaN as the category ``"NA"``; budro sets
``one_hot_max_size`` to at least the number of categories of every such column (at least 255),
so every categorical split is one-hot.  CatBoost's default for larger categories, target
statistics (CTRs), would be computed from the labels of budro's per-round pools (the row index
in the two-class route), not from the data's labels.  Prediction builds the same strings; a code
never seen in training (the caller should pass NaN) matches no one-hot split, like ``"NA"``
when no training value was missing.

Hyperparameters
---------------
Randomness does not carry over between one-iteration fits: budro defaults to
``random_strength=0`` and ``bootstrap_type="No"``, with which a run reproduces CatBoost's own
training exactly.  With ``random_strength > 0`` or a bootstrap, round ``t`` is fitted with
seed ``random_seed + t``: reproducible, but not CatBoost's own random stream.  A bootstrap
samples original rows in the two-class route and rows of D0 in the ``K > 2`` route.
``grow_policy="Lossguide"`` is limited to two classes: CatBoost's own ``MultiClass`` training
with Lossguide trees does not continue from a baseline the way its multi-iteration training
does (margins differ by about 0.01 after two rounds), so no one-iteration route reproduces it.
``boosting_type`` is ``"Plain"`` (ordered boosting keeps supporting models that a one-iteration
fit discards), ``leaf_estimation_backtracking`` is ``"No"`` (the custom objective has no loss
to backtrack on), and row-count options (``min_data_in_leaf``) are rejected because they count
different rows in the two routes.  ``learning_rate`` defaults to 0.03, CatBoost's documented
default, because CatBoost's automatic choice depends on the iteration count, which a
one-iteration fit does not know.

CatBoost is imported when a backend is trained, not when this module is imported.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from typing import Any

import numpy as np
from scipy.special import expit

from budro._archive import write_atomic
from budro.backends._common import (
    BuiltinBackend,
    Number,
    check_n_rounds,
    check_native_bytes,
    check_native_load_args,
    check_seed,
    check_training_data,
    check_weights,
    probe_data,
)
from budro.backends.base import native_sample_weights
from budro.exceptions import ConfigError, ValidationError

__all__ = ["CatBoostBackend"]

#: CatBoost parameters this backend passes through, by CatBoost's native names.
NATIVE_PARAMS: frozenset[str] = frozenset(
    {
        "learning_rate",
        "depth",
        "l2_leaf_reg",
        "random_strength",
        "bootstrap_type",
        "subsample",
        "bagging_temperature",
        "sampling_frequency",
        "rsm",
        "border_count",
        "feature_border_type",
        "grow_policy",
        "max_leaves",
        "leaf_estimation_method",
        "leaf_estimation_iterations",
        "score_function",
        "scale_pos_weight",
        "thread_count",
        "random_seed",
        "used_ram_limit",
    }
)

#: CatBoost's own synonyms of the accepted parameters -> native name.
PARAM_ALIASES: dict[str, str] = {
    "eta": "learning_rate",
    "max_depth": "depth",
    "reg_lambda": "l2_leaf_reg",
    "max_bin": "border_count",
    "colsample_bylevel": "rsm",
    "random_state": "random_seed",
    "num_leaves": "max_leaves",
}

_ROUNDS = "budro trains one round per step(); choose the number of rounds on the estimator"
_SILENT = "budro runs CatBoost silently and writes no training files"
#: Parameters budro sets itself or that break the one-round-on-D0 semantics, with the reason.
RESERVED_PARAMS: dict[str, str] = {
    **dict.fromkeys(
        ["loss_function", "objective"],
        "budro sets it: every round is trained on budro's D0 derivatives (binary or softmax cross-entropy)",
    ),
    **dict.fromkeys(["iterations", "n_estimators", "num_boost_round", "num_trees"], _ROUNDS),
    **dict.fromkeys(["od_type", "od_wait", "od_pval", "early_stopping_rounds", "use_best_model"], _ROUNDS),
    **dict.fromkeys(["eval_metric", "custom_metric", "custom_loss"], "budro evaluates no metric while training"),
    "boosting_type": "budro uses 'Plain': ordered boosting keeps supporting models that one-round fits cannot carry",
    "boost_from_average": "budro starts every model from margin 0 (probability 0.5, as in the paper)",
    "leaf_estimation_backtracking": "budro uses 'No': the per-round custom objective has no loss to backtrack on",
    **dict.fromkeys(
        ["class_weights", "auto_class_weights"],
        "they weight the original labels; give scale_pos_weight (two classes) instead",
    ),
    **dict.fromkeys(["class_names", "classes_count"], "budro sets them from the number of classes seen by start()"),
    **dict.fromkeys(
        ["min_data_in_leaf", "min_child_samples"],
        "it counts rows, i.e. original rows for two classes but the K copies of D0 for more",
    ),
    **dict.fromkeys(["model_shrink_rate", "model_shrink_mode"], "it shrinks the model at every iteration of one fit"),
    **dict.fromkeys(["langevin", "posterior_sampling", "diffusion_temperature"], "it adds noise across iterations of one fit"),
    **dict.fromkeys(["task_type", "devices"], "budro's CatBoost backend trains on the CPU"),
    **dict.fromkeys(
        ["verbose", "verbose_eval", "silent", "logging_level", "metric_period", "allow_writing_files",
         "train_dir", "save_snapshot", "snapshot_file", "snapshot_interval"],
        _SILENT,
    ),
    **dict.fromkeys(
        ["cat_features", "text_features", "embedding_features"],
        "budro passes the categorical columns itself: give categorical_features to start()/fit_native() "
        "(BuDROClassifier's categorical_features); text and embedding features are not supported",
    ),
    "one_hot_max_size": "budro sets it above every categorical feature's number of categories: one-hot splits "
    "only, because CatBoost's target statistics would be computed from the labels of budro's per-round pools",
    "baseline": "budro starts every model from margin 0",
}

#: Defaults that differ from CatBoost's own (see :class:`CatBoostBackend`).
DEFAULT_PARAMS: dict[str, Any] = {
    "learning_rate": 0.03,
    "random_strength": 0.0,
    "bootstrap_type": "No",
    "leaf_estimation_method": "Newton",
    "leaf_estimation_iterations": 1,
}

_UNIT = Number(low=0.0, high=1.0, low_open=True)
_NON_NEGATIVE = Number(low=0.0)
#: Values accepted, by native name (checked in the constructor; CatBoost checks the rest).
PARAM_RULES: dict[str, Number] = {
    "learning_rate": Number(low=0.0, low_open=True),
    "depth": Number(integer=True, low=1, high=16),
    "l2_leaf_reg": _NON_NEGATIVE,
    "random_strength": _NON_NEGATIVE,
    "subsample": _UNIT,
    "bagging_temperature": _NON_NEGATIVE,
    "rsm": _UNIT,
    "border_count": Number(integer=True, low=1, high=65535),
    "max_leaves": Number(integer=True, low=2, high=64),
    "leaf_estimation_iterations": Number(integer=True, low=1),
    "scale_pos_weight": Number(low=0.0, low_open=True),
    "thread_count": Number(integer=True, low=-1),
    "random_seed": Number(integer=True, low=0, high=2**31 - 1),
}
#: Bootstrap types that sample rows with ``subsample`` (CatBoost rejects it with the others).
_SUBSAMPLING_BOOTSTRAPS = ("Bernoulli", "Poisson", "MVS")

#: Set for every fit, never by the user.
FIXED_PARAMS: dict[str, Any] = {
    "boosting_type": "Plain",
    "leaf_estimation_backtracking": "No",
    "logging_level": "Silent",
    "allow_writing_files": False,
}

#: The split scores whose CPU implementation divides by pool weights (the D0 weight sums).
SCORE_FUNCTIONS = ("Cosine", "L2")
#: Smallest ``one_hot_max_size`` budro sets when there are categorical features.
_ONE_HOT_MAX_SIZE = 255
#: A missing or unseen category code, as CatBoost sees it (CatBoost's categories are strings).
_MISSING_CATEGORY = "NA"
#: Parameters that decide how a Pool is quantized (handed to ``Pool.quantize`` as well).
_QUANTIZE_PARAMS = ("border_count", "feature_border_type", "used_ram_limit", "random_seed")


def _cb():
    """Import CatBoost on first use (keeps ``import budro`` light)."""
    try:
        import catboost
    except ImportError as exc:  # pragma: no cover - catboost is a declared dependency
        raise ImportError("the 'catboost' backend needs the catboost package: pip install catboost") from exc
    return catboost


class CatBoostBackend(BuiltinBackend):
    """CatBoost booster backend for BuDRO.

    Parameters
    ----------
    weight_scale : {"n", "unit"}, default="n"
        How the per-round weights ``P`` (which sum to 1) reach CatBoost: multiplied by ``n``
        (weight 1 per row for the empirical distribution) or as they are.  CatBoost scales
        ``l2_leaf_reg`` by the mean weight itself, so both scales grow the same trees; the
        choice is kept for symmetry with the other backends.  f_0 and :meth:`fit_native` use the
        same scale.
    **params
        CatBoost parameters by their native names (``learning_rate``, ``depth``,
        ``l2_leaf_reg``, ``border_count``, ``grow_policy``, ``max_leaves``, ``rsm``,
        ``random_strength``, ``bootstrap_type``, ``subsample``, ``score_function``,
        ``scale_pos_weight``, ``thread_count``, ``random_seed``, ...) or by CatBoost's synonyms
        (``eta``, ``max_depth``, ``reg_lambda``, ``max_bin``, ``colsample_bylevel``,
        ``random_state``, ``num_leaves``).  Unknown names raise
        :class:`~budro.exceptions.ConfigError`, as do ``loss_function``, ``iterations``,
        ``boosting_type``, ``eval_metric``, class weights and the options listed in the module
        docstring.  ``score_function`` must be ``"Cosine"`` or ``"L2"``; ``subsample`` needs
        ``bootstrap_type`` ``"Bernoulli"``, ``"Poisson"`` or ``"MVS"``.  Values are checked when
        the backend is created, before any data (:data:`PARAM_RULES`, then one CatBoost round on
        a tiny synthetic data set, cached per parameter set): a bad value raises
        :class:`~budro.exceptions.ConfigError` naming the key.

        Defaults that differ from CatBoost's: ``learning_rate=0.03`` (fixed instead of
        CatBoost's automatic choice), ``random_strength=0`` and ``bootstrap_type="No"``
        (deterministic rounds), ``leaf_estimation_method="Newton"`` and
        ``leaf_estimation_iterations=1`` (CatBoost's defaults for ``Logloss``/``MultiClass``,
        made explicit for the custom objective).

    Attributes
    ----------
    n_classes_ : int
        Number of classes of the current fit.
    n_features_in_ : int
        Number of features of the current fit.

    Notes
    -----
    With the default (deterministic) parameters, :meth:`start` followed by empirical-weight
    steps reproduces CatBoost's own training (:meth:`fit_native`) up to floating-point
    rounding, and each :meth:`step` equals one CatBoost round on an explicit D0 pool with
    ``l2_leaf_reg`` multiplied by ``K`` (see the module docstring).

    The exported model (:meth:`save_model`, :attr:`model`) is an ordinary CatBoost model:
    ``CatBoost().load_model(path)`` predicts its margins (``prediction_type="RawFormulaVal"``)
    and probabilities (``"Probability"``).

    Each round is a separate ``fit``; at about 1.5-2.5 ms of fixed cost per fit (CatBoost 1.2,
    ``benchmarks/backends.py``), a step costs far more than one of CatBoost's own iterations on
    small data (0.15-0.3 ms at n = 800-4222, depth 4).

    A pickled backend keeps its model but not its training pools: it unpickles finished.

    Examples
    --------
    >>> import numpy as np
    >>> from budro.backends.catboost import CatBoostBackend
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = (X[:, 0] > 0).astype(int)
    >>> backend = CatBoostBackend(depth=2, thread_count=1)
    >>> backend.start(X, y, 2)
    >>> weights = np.zeros((200, 2)); weights[np.arange(200), y] = 1 / 200
    >>> backend.step(weights)
    >>> backend.n_rounds
    2
    >>> backend.finish()
    >>> backend.predict_proba(X[:2]).shape
    (2, 2)
    """

    name = "catboost"
    native_format = "catboost-cbm"

    NATIVE_PARAMS = NATIVE_PARAMS
    PARAM_ALIASES = PARAM_ALIASES
    RESERVED_PARAMS = RESERVED_PARAMS
    DEFAULT_PARAMS = DEFAULT_PARAMS

    PARAM_RULES = PARAM_RULES
    PROBE_SKIP = frozenset({"thread_count", "used_ram_limit"})
    THREAD_PARAM = "thread_count"
    LIBRARY = "CatBoost"

    @classmethod
    def _probe(cls, params: dict[str, Any]) -> None:
        cb = _cb()
        X, y = probe_data()
        _fit(cb, {**params, **FIXED_PARAMS, "loss_function": "Logloss", "boost_from_average": False,
                  "iterations": 1, "thread_count": 1}, cb.Pool(X, label=y))

    def _check_combinations(self) -> None:
        score = self._params.get("score_function", "Cosine")
        if score not in SCORE_FUNCTIONS:
            raise ConfigError(
                f"CatBoostBackend: score_function must be one of {', '.join(map(repr, SCORE_FUNCTIONS))} "
                f"(the scores whose leaf sums are those of D0); got {score!r}"
            )
        bootstrap = self._params.get("bootstrap_type")
        if "subsample" in self._given_as and bootstrap not in _SUBSAMPLING_BOOTSTRAPS:
            raise ConfigError(
                f"CatBoostBackend: parameter {self._key('subsample')!r} needs bootstrap_type "
                f"{', '.join(map(repr, _SUBSAMPLING_BOOTSTRAPS))}; bootstrap_type is {bootstrap!r} "
                "(budro's default is 'No': deterministic rounds)"
            )
        if "bagging_temperature" in self._given_as and bootstrap != "Bayesian":
            raise ConfigError(
                f"CatBoostBackend: parameter 'bagging_temperature' needs bootstrap_type 'Bayesian'; "
                f"bootstrap_type is {bootstrap!r}"
            )

    def _reset(self) -> None:
        self._models: list[Any] = []  # one CatBoost model per round (one model after finish)
        self._combined = None  # sum of self._models, built on demand
        self._rounds = 0
        self._pool = None  # K = 2: the n rows, label = row index; K > 2: the K n rows of D0
        self._X: Any = None  # where each new tree is predicted: raw inputs, or a Pool with categories
        self._margins: np.ndarray | None = None
        self._n_train = 0
        self._seed = 0
        self._scale_pos_weight = 1.0
        self._round_params: dict[str, Any] = {}

    def _is_training(self) -> bool:
        return self._pool is not None

    def _has_model(self) -> bool:
        return bool(self._models)

    def _native_params(self, n_classes: int, random_state: int | None) -> dict[str, Any]:
        params = {**self._params, **FIXED_PARAMS}
        if n_classes == 2:
            params.update(loss_function="Logloss", boost_from_average=False)
        else:
            if float(params.get("scale_pos_weight", 1.0)) != 1.0:
                raise ValidationError(
                    f"scale_pos_weight applies to two classes only; got n_classes={n_classes} "
                    f"with scale_pos_weight={params['scale_pos_weight']!r}"
                )
            if params.get("grow_policy") == "Lossguide":
                raise ValidationError(
                    "grow_policy='Lossguide' applies to two classes only in the CatBoost backend: a Lossguide "
                    "MultiClass round continued from a baseline is not the round of CatBoost's own training"
                )
            params.update(loss_function="MultiClass", classes_count=n_classes)
        if random_state is not None:
            params["random_seed"] = check_seed(random_state, upper=2**31)
        return params

    # -- training -----------------------------------------------------------------------
    def start(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, random_state: int | None = None,
              categorical_features: tuple[int, ...] = ()) -> None:
        """Quantize ``X`` once into a CatBoost ``Pool`` and train f_0, CatBoost's own first
        iteration on ``(X, y)``.

        Parameters
        ----------
        X : array of shape (n, d)
            Training inputs; NaN marks a missing value (CatBoost's ``nan_mode`` ``"Min"``: below
            every value), infinite values are rejected.
        y : array of shape (n,)
            Integer labels in ``[0, n_classes)``, each of which must occur (CatBoost's
            ``Logloss`` rejects a single label, and ``MultiClass`` gives an absent class the
            margin ``-inf``).
        n_classes : int
            Number of classes K >= 2.
        random_state : int, optional
            Seed of CatBoost's randomness for this fit (round ``t`` uses ``random_state + t``);
            overrides the ``random_seed`` parameter when given.
        categorical_features : sequence of int, default=()
            Columns holding non-negative integer category codes (NaN: missing or unseen).
            CatBoost receives them as categorical features (strings; NaN becomes the category
            ``"NA"``) with one-hot splits only (see the module docstring).  Predictions treat
            the same columns the same way.
        """
        cb = _cb()
        X, y, n_classes, categorical = _check_all_classes(*check_training_data(X, y, n_classes, categorical_features))
        params = self._with_threads(self._native_params(n_classes, random_state), X.shape[0])
        data = _with_categories(X, categorical, params)
        self._reset()
        n = X.shape[0]
        self._n_train = n
        self.n_classes_, self.n_features_in_, self._categorical = n_classes, X.shape[1], categorical
        self._seed = int(params.get("random_seed", 0))
        quantize = {k: params[k] for k in _QUANTIZE_PARAMS if k in params}
        cats = list(categorical) or None

        weight = native_sample_weights(None, n, self.weight_scale)
        f0 = _fit(cb, dict(params, iterations=1), cb.Pool(data, label=y.astype(np.int64), weight=weight, cat_features=cats))
        self._add_round(f0)
        # CatBoost cannot predict categorical features from a quantized pool: predict each new
        # tree on an unquantized one (built once) then.
        self._X = cb.Pool(data, cat_features=cats) if categorical else X
        self._margins = _raw(f0, self._X, n_classes)
        if n_classes == 2:
            self._pool = cb.Pool(data, label=np.arange(n, dtype=np.float64), cat_features=cats)
            self._scale_pos_weight = float(params.get("scale_pos_weight", 1.0))
        else:
            self._pool = cb.Pool(
                np.tile(data, (n_classes, 1)), label=np.repeat(np.arange(n_classes), n), weight=np.ones(n_classes * n),
                cat_features=cats,
            )
        self._pool.quantize(**quantize)
        self._round_params = params

    def step(self, weights: np.ndarray) -> None:
        """Grow one more round on D0, the copy ``(x_i, k)`` weighted by ``weights[i, k]``.

        Parameters
        ----------
        weights : array of shape (n, n_classes)
            Finite, non-negative, summing to 1 (within 1e-5): the distribution ``P(x_i, k)``.
        """
        self._require_training("step")
        P = check_weights(weights, (self._n_train, self.n_classes_))
        if self.weight_scale == "n":
            P = P * self._n_train
        cb = _cb()
        params = dict(self._round_params, iterations=1, random_seed=(self._seed + self._rounds) % 2**31)
        if self.n_classes_ == 2:
            a = P[:, 0]
            b = P[:, 1] * self._scale_pos_weight if self._scale_pos_weight != 1.0 else P[:, 1]
            w = a + b
            self._pool.set_weight(w)
            params.pop("scale_pos_weight", None)  # carried by a and b
            params.pop("boost_from_average", None)
            params.update(loss_function=_BinaryD0Objective(a, b, self._margins), eval_metric=_NoMetric())
            model = _fit(cb, params, self._pool)
            where = self._X if self._categorical else self._pool
            self._margins = self._margins + model.predict(where, prediction_type="RawFormulaVal")
        else:
            K = self.n_classes_
            self._pool.set_weight(P.T.ravel())
            self._pool.set_baseline(np.tile(self._margins, (K, 1)))
            params["l2_leaf_reg"] = K * float(params.get("l2_leaf_reg", 3.0))
            model = _fit(cb, params, self._pool)
            self._margins = self._margins + _raw(model, self._X, K)
        self._add_round(model)

    def margins(self) -> np.ndarray:
        """Raw margins at the training points, accumulated round by round (each new tree
        predicted once): (n,) for two classes (log-odds of label 1), (n, K) otherwise."""
        self._require_training("margins")
        return self._margins.copy()

    def finish(self) -> None:
        """Release the training pools and collapse the rounds into one CatBoost model; the
        model keeps predicting."""
        if self._models:
            self._models = [self._sum()]
        self._pool = None
        self._X = None
        self._margins = None

    # -- the model ----------------------------------------------------------------------
    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """Raw margins of the current model at ``X``: (m,) for two classes, (m, K) otherwise."""
        self._require_model("predict_margin")
        X = self._check_X(X)
        return _raw(self._sum(), _with_categories(X, self._categorical), self.n_classes_)

    def save_model(self, path: str | os.PathLike) -> None:
        """Write the model in CatBoost's binary (``.cbm``) or JSON (``.json``) format, atomically;
        ``catboost.CatBoost().load_model(path, format=...)`` loads it and predicts identically."""
        self._require_model("save_model")
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1].lower()
        formats = {".cbm": "cbm", ".json": "json"}
        if suffix not in formats:
            raise ValidationError(f"save_model: path must end in .cbm or .json (CatBoost's formats); got {path!r}")
        write_atomic(path, self._model_bytes(formats[suffix]))

    def fit_native(self, X: np.ndarray, y: np.ndarray, n_classes: int, n_rounds: int,
                   *, random_state: int | None = None, sample_weight: np.ndarray | None = None,
                   categorical_features: tuple[int, ...] = ()) -> "CatBoostBackend":
        """Plain CatBoost training (one ``fit`` with ``Logloss`` or ``MultiClass``) for
        ``n_rounds`` iterations on ``(X, y)`` with the same parameters and weight scale.

        ``sample_weight`` (n,), optional: row weights, rescaled to sum to n (scale ``"n"``) or
        to 1 (``"unit"``); see :func:`budro.backends.base.native_sample_weights`.
        ``categorical_features``: as in :meth:`start`.

        Returns a new, finished backend holding that model; without ``sample_weight`` and with
        the default (deterministic) parameters it equals :meth:`start` followed by
        ``n_rounds - 1`` steps with the empirical weights.
        """
        cb = _cb()
        X, y, n_classes, categorical = _check_all_classes(*check_training_data(X, y, n_classes, categorical_features))
        n_rounds = check_n_rounds(n_rounds)
        params = self._with_threads(self._native_params(n_classes, random_state), X.shape[0])
        weight = native_sample_weights(sample_weight, X.shape[0], self.weight_scale)
        pool = cb.Pool(_with_categories(X, categorical, params), label=y.astype(np.int64), weight=weight,
                       cat_features=list(categorical) or None)
        model = _fit(cb, dict(params, iterations=n_rounds), pool)
        other = self._new_finished(n_classes, X.shape[1], categorical)
        other._models, other._rounds = [model], n_rounds
        return other

    def to_native_bytes(self) -> bytes:
        """The model (all rounds summed) in CatBoost's binary format (:attr:`native_format`
        ``"catboost-cbm"``), the bytes :meth:`save_model` writes to a ``.cbm`` file."""
        self._require_model("to_native_bytes")
        return self._model_bytes("cbm")

    def _model_bytes(self, fmt: str) -> bytes:
        """The summed model in CatBoost's format ``fmt`` (``"cbm"`` or ``"json"``), as bytes:
        CatBoost writes only to a file name, so into a private folder first."""
        with tempfile.TemporaryDirectory(prefix="budro-catboost-") as tmp:
            path = os.path.join(tmp, "model." + fmt)
            self._sum().save_model(path, format=fmt)
            with open(path, "rb") as fh:
                return fh.read()

    def load_native_bytes(self, data: bytes, *, n_classes: int, n_features: int,
                          categorical_features: tuple[int, ...] = ()) -> None:
        """Load a model written by :meth:`to_native_bytes`; the backend is finished afterwards.

        The model must have ``n_features`` features and one output (two classes) or
        ``n_classes`` outputs; otherwise, and when CatBoost rejects the bytes,
        :class:`~budro.exceptions.ValidationError`."""
        cb = _cb()
        n_classes, n_features, categorical = check_native_load_args(n_classes, n_features, categorical_features)
        data = check_native_bytes(data, "CatBoost")
        model = cb.CatBoost()
        try:
            model.load_model(blob=data)
        except cb.CatBoostError as exc:
            raise ValidationError(f"the data is not a valid CatBoost model: {str(exc).strip()}") from None
        found = len(model.feature_names_ or ())  # n_features_in_ reads 0 on a loaded model
        if found != n_features:
            raise ValidationError(f"the data is not a valid CatBoost model for {n_features} features: it has {found}")
        leaves = int(np.sum(model.get_tree_leaf_counts()))
        outputs = len(model.get_leaf_values()) // leaves if leaves else 0
        if outputs != (1 if n_classes == 2 else n_classes):
            raise ValidationError(
                f"the data is not a valid CatBoost model for {n_classes} classes: it has {outputs} output(s)"
            )
        stored = tuple(sorted(int(i) for i in model.get_cat_feature_indices()))
        if stored != categorical:
            raise ValidationError(
                f"the data is not a valid CatBoost model for categorical_features={categorical}: "
                f"its categorical features are {stored}"
            )
        self._reset()
        self._models, self._rounds = [model], int(model.tree_count_)
        self.n_classes_, self.n_features_in_, self._categorical = n_classes, n_features, categorical

    @property
    def n_rounds(self) -> int:
        """Boosting rounds in the current model, f_0 included (0 before :meth:`start`)."""
        return self._rounds

    @property
    def model(self):
        """The CatBoost model of all rounds so far (a ``catboost.CatBoost``)."""
        self._require_model("model")
        return self._sum()

    # -- pickling -----------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._models:
            state["_models"] = [self._sum()]
        state["_combined"] = None
        state["_pool"] = None  # a Pool does not pickle; the unpickled backend is finished
        state["_X"] = None
        state["_margins"] = None
        return state

    # -- helpers ------------------------------------------------------------------------
    def _add_round(self, model) -> None:
        self._models.append(model)
        self._combined = None
        self._rounds += 1

    def _sum(self):
        if self._combined is None:
            self._combined = self._models[0] if len(self._models) == 1 else _cb().sum_models(self._models)
        return self._combined


class _BinaryD0Objective:
    """CatBoost custom objective of a two-class D0 round, on the n original rows.

    ``no_jit``: with numba installed, CatBoost tries to compile (``numba.njit``) the methods of
    every custom objective and metric it is handed, at every ``fit``, i.e. at every round here:
    those of :class:`_NoMetric` compile, at about 80 ms per round (CatBoost 1.2, numba 0.6x);
    those of this class cannot (they use ``self``) and CatBoost warns.  The attribute, which
    CatBoost looks for, skips the attempt; the rounds are unchanged.

    ``a_i`` and ``b_i`` are the weights of the copies ``(x_i, 0)`` and ``(x_i, 1)`` (the latter
    times scale_pos_weight), ``w_i = a_i + b_i``.  At the margin ``t = m_i + approx`` (the
    margin before this round plus the round's own approx) the loss
    ``-(a_i log(1 - p) + b_i log p)`` has, in CatBoost's sign convention (derivatives of the
    log-likelihood), the derivatives ``b_i - w_i p`` and ``-w_i p (1 - p)``.  The pool's label is
    the row index, because CatBoost passes 1000-row chunks without their offsets.
    """

    no_jit = True

    def __init__(self, a: np.ndarray, b: np.ndarray, margins: np.ndarray) -> None:
        self.b = b
        self.w = a + b
        self.margins = margins

    def __deepcopy__(self, memo):
        # CatBoost deep-copies the training parameters, this objective included, twice per fit;
        # the arrays are never written to, so share them (3 n floats copied twice per round).
        return self

    def calc_ders_range(self, approxes, targets, weights):
        idx = np.asarray(targets).astype(np.intp)
        p = expit(self.margins[idx] + np.asarray(approxes, dtype=np.float64))
        w = self.w[idx]
        # CatBoost iterates over (der1, der2) pairs; the rows of an (m, 2) array are such pairs
        # and convert about a third faster than a list of tuples (measured on 36k rows).
        return np.column_stack([self.b[idx] - w * p, -w * p * (1.0 - p)])


class _NoMetric:
    """A constant evaluation metric: CatBoost requires one next to a custom objective, and
    budro evaluates nothing while training.  ``no_jit``: see :class:`_BinaryD0Objective`."""

    no_jit = True

    def is_max_optimal(self) -> bool:
        return False

    def evaluate(self, approxes, target, weight):
        return 0.0, 1.0

    def get_final_error(self, error, weight):
        return 0.0


def _check_all_classes(X: np.ndarray, y: np.ndarray, n_classes: int, categorical: tuple[int, ...]):
    missing = sorted(set(range(n_classes)) - set(np.unique(y).astype(int).tolist()))
    if missing:
        raise ValidationError(
            f"the CatBoost backend needs every class in [0, {n_classes}) to occur in y; missing: {missing}"
        )
    return X, y, n_classes, categorical


def _with_categories(X: np.ndarray, categorical: tuple[int, ...], params: dict[str, Any] | None = None):
    """``X`` as CatBoost takes it: unchanged without categorical columns; otherwise an object array
    whose categorical columns hold the codes as strings (``"3"``), NaN as ``"NA"``.

    With ``params`` (training), ``params["one_hot_max_size"]`` is set to at least the number of
    categories of every categorical column, so that CatBoost splits them one-hot only."""
    if not categorical:
        return X
    data = X.astype(object)
    most = 0
    for c in categorical:
        codes = X[:, c]
        missing = np.isnan(codes)
        text = np.where(missing, 0, codes).astype(np.int64).astype(str).astype(object)
        text[missing] = _MISSING_CATEGORY
        data[:, c] = text
        most = max(most, np.unique(codes[~missing]).size + int(missing.any()))
    if params is not None:
        params["one_hot_max_size"] = max(_ONE_HOT_MAX_SIZE, most)
    return data


def _fit(cb, params: dict[str, Any], pool):
    with warnings.catch_warnings():
        # CatBoost warns at every fit with a Python objective that numba is not installed, and
        # that it cannot compile an objective (as ours, which indexes arrays) when it is; our
        # objects' no_jit skips both where CatBoost honours it (1.2.10 checks the parameters,
        # and warns "Can't optimze method", when the model is constructed: inside the filter).
        warnings.filterwarnings("ignore", message="(Failed to (import numba|optimize method)|Can't optimi?ze method)",
                                category=UserWarning)
        model = cb.CatBoost(params)
        model.fit(pool)
    return model


def _raw(model, X, n_classes: int) -> np.ndarray:
    m = np.asarray(model.predict(X, prediction_type="RawFormulaVal"), dtype=np.float64)
    return m.reshape(-1) if n_classes == 2 else m.reshape(m.shape[0], n_classes)
