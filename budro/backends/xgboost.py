"""XGBoost, driven one boosting round at a time (Algorithm 3 of Vargo et al., 2021).

Every BuDRO round trains one tree on the augmented data set
``D0 = {(x_i, k) : i < n, k < K}`` where the copy ``(x_i, k)`` has weight ``P[i, k]``.  This
backend never materialises the ``n * K`` rows of D0: the cross-entropy loss is linear in the
label distribution, so

    sum_k P[i, k] * loss(f(x_i), k) = w_i * CE(f(x_i), q_i),  w_i = sum_k P[i, k],  q_i = P[i, :] / w_i,

and one round on the ``n`` original rows with row weights ``w_i`` and soft labels ``q_i`` has
exactly the gradient and hessian sums of a round on D0 (the same tree, the same leaf values):

* two classes: ``binary:logistic`` accepts soft labels in ``[0, 1]``; the labels and weights of
  the training ``DMatrix`` are replaced in place and the booster trains its next round with its
  own objective;
* more classes: the softmax gradient ``w_i * (p_i - q_i)`` and XGBoost's own ``multi:softprob``
  hessian ``max(2 p (1 - p) w_i, 1e-16)`` are computed here and handed to ``Booster.boost``.

The training ``DMatrix`` is built once per fit, so the histogram bins are those of the original
rows and XGBoost's prediction cache keeps the training margins current at no extra cost.

XGBoost is imported when a backend is created or trained, not when this module is imported.
"""

from __future__ import annotations

import json
import numbers
import os
from typing import Any

import numpy as np

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
from budro.exceptions import BudroError, ConfigError, ValidationError
from budro.losses import label_losses

__all__ = ["XGBoostBackend", "check_xgboost_json"]

#: XGBoost parameters this backend passes through, by their native names: the documented general,
#: tree-booster and learning-task parameters that make sense for a tree grown one round at a time.
NATIVE_PARAMS: frozenset[str] = frozenset(
    {
        # general
        "nthread",
        "device",
        "verbosity",
        "validate_parameters",
        # tree booster
        "eta",
        "gamma",
        "max_depth",
        "min_child_weight",
        "max_delta_step",
        "subsample",
        "sampling_method",
        "colsample_bytree",
        "colsample_bylevel",
        "colsample_bynode",
        "lambda",
        "alpha",
        "tree_method",
        "scale_pos_weight",
        "grow_policy",
        "max_leaves",
        "max_bin",
        "num_parallel_tree",
        "monotone_constraints",
        "interaction_constraints",
        "multi_strategy",
        "max_cached_hist_node",
        # categorical features (start(..., categorical_features=...))
        "max_cat_to_onehot",
        "max_cat_threshold",
        # learning task
        "base_score",
        "seed",
        "seed_per_iteration",
    }
)

#: Alternative names (XGBoost's own aliases and scikit-learn-style names) -> native name.
PARAM_ALIASES: dict[str, str] = {
    "learning_rate": "eta",
    "min_split_loss": "gamma",
    "reg_lambda": "lambda",
    "reg_alpha": "alpha",
    "n_jobs": "nthread",
    "random_state": "seed",
}

#: Parameters budro sets itself, with the reason given when a user passes one.
RESERVED_PARAMS: dict[str, str] = {
    "objective": "budro sets it from the number of classes (binary:logistic or multi:softprob)",
    "num_class": "budro sets it from the number of classes seen by start()",
    "num_boost_round": "budro trains one round per step(); choose the number of rounds on the estimator",
    "num_round": "budro trains one round per step(); choose the number of rounds on the estimator",
    "n_estimators": "budro trains one round per step(); choose the number of rounds on the estimator",
    "booster": "budro grows one gbtree round per step()",
    "process_type": "budro grows new trees; it does not refresh or prune existing ones",
    "updater": "budro grows new trees through tree_method; the updater sequence is XGBoost's",
}

#: Defaults that differ from XGBoost's own (see :class:`XGBoostBackend`).
DEFAULT_PARAMS: dict[str, Any] = {"base_score": 0.5, "tree_method": "hist", "nthread": 0}

_UNIT = Number(low=0.0, high=1.0, low_open=True)
_NON_NEGATIVE = Number(low=0.0)
#: Values accepted, by native name (checked in the constructor; XGBoost checks the rest).
PARAM_RULES: dict[str, Number] = {
    "eta": _NON_NEGATIVE,
    "gamma": _NON_NEGATIVE,
    "max_depth": Number(integer=True, low=0),
    "min_child_weight": _NON_NEGATIVE,
    "max_delta_step": _NON_NEGATIVE,
    "subsample": _UNIT,
    "colsample_bytree": _UNIT,
    "colsample_bylevel": _UNIT,
    "colsample_bynode": _UNIT,
    "lambda": _NON_NEGATIVE,
    "alpha": _NON_NEGATIVE,
    "scale_pos_weight": Number(low=0.0, low_open=True),
    "max_leaves": Number(integer=True, low=0),
    "max_bin": Number(integer=True, low=2),
    "num_parallel_tree": Number(integer=True, low=1),
    "base_score": Number(low=0.0, high=1.0, low_open=True, high_open=True),
    "seed": Number(integer=True, low=0, high=2**63 - 1),
    "nthread": Number(integer=True, low=-1),
    "verbosity": Number(integer=True, low=0, high=3),
    "max_cat_to_onehot": Number(integer=True, low=1),
    "max_cat_threshold": Number(integer=True, low=1),
    "max_cached_hist_node": Number(integer=True, low=1),
}

#: XGBoost's lower bound on each softmax hessian entry (``multi:softprob``).
_SOFTMAX_HESS_EPS = 1e-16


def _xgb():
    """Import XGBoost on first use (keeps ``import budro`` light)."""
    try:
        import xgboost
    except ImportError as exc:  # pragma: no cover - xgboost is a declared dependency
        raise ImportError("the 'xgboost' backend needs the xgboost package: pip install xgboost") from exc
    return xgboost


class XGBoostBackend(BuiltinBackend):
    """XGBoost booster backend for BuDRO.

    Parameters
    ----------
    weight_scale : {"n", "unit"}, default="n"
        How the per-round weights ``P`` (which sum to 1) reach XGBoost.

        - ``"n"``: multiplied by ``n``, so the empirical distribution is weight 1 per row.  With
          ``eps = 0`` BuDRO then reproduces ordinary unweighted XGBoost training exactly, and the
          library's default regularisation (``lambda=1``, ``min_child_weight=1``) means what it
          means in ordinary boosting.
        - ``"unit"``: handed over as they are, summing to 1 (the paper's convention).  Hessian
          sums are then ``n`` times smaller, so the hessian-scale parameters ``lambda``, ``alpha``,
          ``gamma`` and ``min_child_weight`` must be ``n`` times smaller to grow the same trees
          (the paper used ``lambda ~ 1e-4`` and ``min_child_weight = 0.1 / n``).  With XGBoost's
          defaults every tree is a single leaf.  The correspondence is not exact: XGBoost's
          quantile sketch (``hist``, ``approx``) places bin edges differently for weights 1/n
          than for weights 1, and it discards every split whose gain is at most 1e-6 in
          absolute terms, i.e. splits that would gain up to ``n * 1e-6`` at scale ``"n"``.

        f_0 and :meth:`fit_native` use the same scale (row weight 1, resp. ``1/n``).
    **params
        XGBoost booster parameters by their native names (``eta``, ``max_depth``, ``lambda``,
        ``min_child_weight``, ``gamma``, ``subsample``, ``colsample_bytree``, ``tree_method``,
        ``max_bin``, ``scale_pos_weight``, ``nthread``, ``seed``, ``base_score``, ...) or by the
        aliases ``learning_rate``, ``min_split_loss``, ``reg_lambda``, ``reg_alpha``, ``n_jobs``
        and ``random_state``.  Unknown names raise :class:`~budro.exceptions.ConfigError`, as do
        ``objective``, ``num_class``, ``num_boost_round``/``n_estimators`` and ``booster``, which
        budro controls.  Values are checked when the backend is created, before any data
        (:data:`PARAM_RULES`, then one XGBoost round on a tiny synthetic data set, cached per
        parameter set): a bad value raises :class:`~budro.exceptions.ConfigError` naming the key.

        Defaults that differ from XGBoost's: ``base_score=0.5`` (explicit, as in the paper;
        XGBoost >= 2 would otherwise estimate an intercept from the labels, which is not
        defined for BuDRO's reweighted rounds), ``tree_method="hist"`` and ``nthread=0``
        (XGBoost's "all available cores", which honours CPU quotas of the process).

    Attributes
    ----------
    n_classes_ : int
        Number of classes of the current fit.
    n_features_in_ : int
        Number of features of the current fit.

    Notes
    -----
    Each :meth:`step` is exactly one XGBoost round on D0 with row weights ``P[i, k]`` (scaled),
    up to float32 rounding: XGBoost itself stores labels, weights and gradients in float32.
    The histogram bins are computed once, from the original rows at f_0, whereas XGBoost trained
    from scratch on an explicit D0 matrix would sketch them from the weighted ``n * K`` rows;
    with continuous features the two bin sets, hence the trees, can differ slightly.

    ``scale_pos_weight`` (two classes only) multiplies the weight of every label-1 copy of D0:
    a round uses row weights ``P[i, 0] + s * P[i, 1]`` and soft labels ``s * P[i, 1] / w_i``.

    A pickled backend keeps its model but not its training structures: it unpickles finished.

    Examples
    --------
    >>> import numpy as np
    >>> from budro.backends.xgboost import XGBoostBackend
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = (X[:, 0] > 0).astype(int)
    >>> backend = XGBoostBackend(max_depth=2, nthread=1)
    >>> backend.start(X, y, 2)
    >>> weights = np.zeros((200, 2)); weights[np.arange(200), y] = 1 / 200
    >>> backend.step(weights)
    >>> backend.n_rounds
    2
    >>> backend.finish()
    >>> backend.predict_proba(X[:2]).shape
    (2, 2)
    """

    name = "xgboost"
    native_format = "xgboost-json"

    NATIVE_PARAMS = NATIVE_PARAMS
    PARAM_ALIASES = PARAM_ALIASES
    RESERVED_PARAMS = RESERVED_PARAMS
    DEFAULT_PARAMS = DEFAULT_PARAMS
    PARAM_RULES = PARAM_RULES
    PROBE_SKIP = frozenset({"monotone_constraints", "interaction_constraints", "device", "nthread"})
    THREAD_PARAM = "nthread"
    LIBRARY = "XGBoost"

    @classmethod
    def _probe(cls, params: dict[str, Any]) -> None:
        xgb = _xgb()
        X, y = probe_data()
        xgb.train({**params, "objective": "binary:logistic", "nthread": 1}, xgb.DMatrix(X, label=y), num_boost_round=1)

    def _reset(self) -> None:
        self._booster = None
        self._dtrain = None
        self._rounds: _Rounds | None = None
        self._margins: np.ndarray | None = None
        self._n_train = 0
        self._n_boosted = 0
        self._scale_pos_weight = 1.0

    def _is_training(self) -> bool:
        return self._dtrain is not None

    def _has_model(self) -> bool:
        return self._booster is not None

    def _train_params(self, n_classes: int, random_state: int | None) -> dict[str, Any]:
        params = dict(self._params)
        try:
            scale_pos_weight = float(params.get("scale_pos_weight", 1.0))
        except (TypeError, ValueError):
            raise ConfigError(f"scale_pos_weight must be a number, got {params['scale_pos_weight']!r}") from None
        if n_classes == 2:
            params["objective"] = "binary:logistic"
        else:
            if scale_pos_weight != 1.0:
                raise ValidationError(
                    f"scale_pos_weight applies to two classes only; got n_classes={n_classes} "
                    f"with scale_pos_weight={params['scale_pos_weight']!r}"
                )
            params["objective"] = "multi:softprob"
            params["num_class"] = n_classes
        if random_state is not None:
            params["seed"] = check_seed(random_state, upper=2**63)
        return params

    # -- training -----------------------------------------------------------------------
    def start(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, random_state: int | None = None,
              categorical_features: tuple[int, ...] = ()) -> None:
        """Build the training ``DMatrix`` for ``(X, y)`` and train f_0, one plain round.

        Parameters
        ----------
        X : array of shape (n, d)
            Training inputs; NaN marks a missing value (XGBoost learns a default direction
            for it at every split), infinite values are rejected.
        y : array of shape (n,)
            Integer labels in ``[0, n_classes)``.
        n_classes : int
            Number of classes K >= 2.
        random_state : int, optional
            Seed of XGBoost's row and column sampling for this fit; overrides the ``seed``
            parameter when given.
        categorical_features : sequence of int, default=()
            Columns holding non-negative integer category codes (NaN: missing or unseen),
            split by XGBoost's native categorical splits (``feature_types`` ``"c"``,
            ``enable_categorical``; parameters ``max_cat_to_onehot``, ``max_cat_threshold``).
            Predictions treat the same columns the same way.
        """
        xgb = _xgb()
        X, y, n_classes, categorical = check_training_data(X, y, n_classes, categorical_features)
        params = self._with_threads(self._train_params(n_classes, random_state), X.shape[0])
        self.finish()
        self._booster = None
        n = X.shape[0]
        dtrain = _dmatrix(xgb, X, categorical, params, label=y, weight=self._empirical_row_weights(n))
        booster = xgb.Booster(params, [dtrain])
        booster.update(dtrain, 0)  # (the public call: it also gives the booster the matrix's feature names)
        self._booster, self._dtrain, self._n_train, self._n_boosted = booster, dtrain, n, 1
        self._rounds = _rounds(booster, dtrain, n, n_classes)
        self.n_classes_, self.n_features_in_, self._categorical = n_classes, X.shape[1], categorical
        self._scale_pos_weight = float(params.get("scale_pos_weight", 1.0))

    def step(self, weights: np.ndarray) -> None:
        """Grow one more round on D0, the copy ``(x_i, k)`` weighted by ``weights[i, k]``.

        Parameters
        ----------
        weights : array of shape (n, n_classes)
            Finite, non-negative, summing to 1 (within 1e-5): the distribution ``P(x_i, k)``.
        """
        self._require_training("step")
        P = check_weights(weights, (self._n_train, self.n_classes_))
        scale = float(self._n_train) if self.weight_scale == "n" else 1.0
        # The round number is counted here: Booster.num_boosted_rounds() is a library call per round.
        iteration = self._n_boosted
        if self.n_classes_ == 2:
            # D0 weight of the label-1 copies (no multiplication, i.e. no copy, without scale_pos_weight)
            b = P[:, 1] * self._scale_pos_weight if self._scale_pos_weight != 1.0 else P[:, 1]
            w = P[:, 0] + b
            q = np.divide(b, w, out=np.zeros_like(w), where=w > 0).astype(np.float32)
            if self._scale_pos_weight != 1.0:
                # XGBoost multiplies the weight of rows whose label is exactly 1 by scale_pos_weight;
                # b already carries it, so divide it out again there.
                np.divide(w, self._scale_pos_weight, out=w, where=q == 1.0)  # w is this round's own array
            if scale != 1.0:
                w *= scale  # w is this round's own array
            self._rounds.update(q, w, iteration)
        else:
            m = self._cached_margins()
            p = np.exp(m - m.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            w = P.sum(axis=1, keepdims=True) * scale
            grad = w * p - P * scale
            hess = np.maximum(2.0 * p * (1.0 - p) * w, _SOFTMAX_HESS_EPS)
            self._rounds.boost(grad, hess, iteration)
        self._n_boosted = iteration + 1
        self._margins = None

    def margins(self) -> np.ndarray:
        """Raw margins at the training points, from XGBoost's prediction cache:
        (n,) for two classes (log-odds of label 1), (n, K) otherwise."""
        self._require_training("margins")
        return self._cached_margins().copy()

    def losses(self) -> np.ndarray:
        """Per-label losses at the training points, from the cached margins (no copy of them)."""
        self._require_training("losses")
        return label_losses(self._cached_margins(), self.n_classes_)

    def _cached_margins(self) -> np.ndarray:
        if self._margins is None:
            m = self._rounds.margins()  # (n, K) or (n, 1), overwritten by the next round's
            self._margins = m[:, 0] if self.n_classes_ == 2 else m
        return self._margins

    def finish(self) -> None:
        """Release the training ``DMatrix`` and cached margins; the model keeps predicting."""
        self._dtrain = None
        self._rounds = None
        self._margins = None

    # -- the model ----------------------------------------------------------------------
    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """Raw margins of the current model at ``X``: (m,) for two classes, (m, K) otherwise."""
        self._require_model("predict_margin")
        X = self._check_X(X)
        m = self._booster.inplace_predict(X, predict_type="margin", missing=np.nan)
        m = np.asarray(m, dtype=np.float64).reshape(X.shape[0], -1)
        return m[:, 0] if self.n_classes_ == 2 else m

    def save_model(self, path: str | os.PathLike) -> None:
        """Write the model in XGBoost's JSON (``.json``) or UBJSON (``.ubj``) format, atomically;
        ``xgboost.Booster(model_file=path)`` loads it and predicts identically."""
        self._require_model("save_model")
        path = os.fspath(path)
        if not path.lower().endswith((".json", ".ubj")):
            raise ValidationError(f"save_model: path must end in .json or .ubj (XGBoost's formats); got {path!r}")
        # the bytes Booster.save_model would write, written atomically
        write_atomic(path, bytes(self._booster.save_raw("ubj" if path.lower().endswith(".ubj") else "json")))

    def fit_native(self, X: np.ndarray, y: np.ndarray, n_classes: int, n_rounds: int,
                   *, random_state: int | None = None, sample_weight: np.ndarray | None = None,
                   categorical_features: tuple[int, ...] = ()) -> "XGBoostBackend":
        """Plain XGBoost training (``xgboost.train``) for ``n_rounds`` rounds on ``(X, y)`` with
        the same parameters and weight scale (row weight 1, resp. ``1/n``).

        ``sample_weight`` (n,), optional: row weights, rescaled to sum to n (scale ``"n"``) or
        to 1 (``"unit"``); see :func:`budro.backends.base.native_sample_weights`.
        ``categorical_features``: as in :meth:`start`.

        Returns a new, finished backend holding that booster; without ``sample_weight`` it equals
        :meth:`start` followed by ``n_rounds - 1`` steps with the empirical weights.
        """
        xgb = _xgb()
        X, y, n_classes, categorical = check_training_data(X, y, n_classes, categorical_features)
        n_rounds = check_n_rounds(n_rounds)
        params = self._with_threads(self._train_params(n_classes, random_state), X.shape[0])
        weight = native_sample_weights(sample_weight, X.shape[0], self.weight_scale)
        dtrain = _dmatrix(xgb, X, categorical, params, label=y, weight=weight)
        booster = xgb.train(params, dtrain, num_boost_round=n_rounds)
        other = self._new_finished(n_classes, X.shape[1], categorical)
        other._booster = booster
        return other

    def to_native_bytes(self) -> bytes:
        """The model in XGBoost's JSON format (:attr:`native_format` ``"xgboost-json"``, what
        ``Booster.save_raw("json")`` writes): JSON, so that :meth:`load_native_bytes` can check
        its structure (:func:`check_xgboost_json`) before XGBoost reads it."""
        self._require_model("to_native_bytes")
        return bytes(self._booster.save_raw("json"))

    def load_native_bytes(self, data: bytes, *, n_classes: int, n_features: int,
                          categorical_features: tuple[int, ...] = ()) -> None:
        """Load a model written by :meth:`to_native_bytes`; the backend is finished afterwards.

        The JSON is parsed and checked (:func:`check_xgboost_json`: XGBoost trusts the indices
        in a model file, and an out-of-range split index crashes the process when it predicts)
        and must describe ``n_features`` features and ``n_classes`` classes; otherwise, and when
        XGBoost rejects it, :class:`~budro.exceptions.ValidationError`."""
        xgb = _xgb()
        n_classes, n_features, categorical = check_native_load_args(n_classes, n_features, categorical_features)
        data = check_native_bytes(data, "XGBoost")
        try:
            model = json.loads(data)
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValidationError(f"the data is not a valid XGBoost model: not JSON ({exc})") from None
        check_xgboost_json(model, n_features)
        learner = model["learner"]
        num_class = _int_field(learner["learner_model_param"], "num_class", "learner_model_param")
        if num_class != (0 if n_classes == 2 else n_classes):
            raise ValidationError(
                f"the data is not a valid XGBoost model for {n_classes} classes: its num_class is {num_class}"
            )
        types = learner.get("feature_types") or []
        stored = tuple(i for i, t in enumerate(types) if t == "c")
        if stored != categorical:
            raise ValidationError(
                f"the data is not a valid XGBoost model for categorical_features={categorical}: "
                f"its categorical features are {stored}"
            )
        booster = xgb.Booster()
        try:
            booster.load_model(bytearray(data))
        except xgb.core.XGBoostError as exc:
            raise ValidationError(f"the data is not a valid XGBoost model: {_first_line(exc)}") from None
        booster.set_param({"nthread": self._with_threads(dict(self._params)).get("nthread", 0)})
        self.finish()
        self._booster = booster
        self.n_classes_, self.n_features_in_, self._categorical = n_classes, n_features, categorical

    @property
    def n_rounds(self) -> int:
        """Boosting rounds in the current model, f_0 included (0 before :meth:`start`)."""
        return 0 if self._booster is None else int(self._booster.num_boosted_rounds())

    @property
    def model(self):
        """The ``xgboost.Booster``."""
        self._require_model("model")
        return self._booster

    # -- pickling -----------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_dtrain"] = None  # a DMatrix does not pickle; the unpickled backend is finished
        state["_rounds"] = None
        state["_margins"] = None
        return state

    # -- helpers ------------------------------------------------------------------------
    def _empirical_row_weights(self, n: int) -> np.ndarray | None:
        # Scale "n": weight 1 per row, i.e. no weights at all (exactly XGBoost's unweighted run).
        return None if self.weight_scale == "n" else np.full(n, 1.0 / n)


class _Rounds:
    """The calls a fit makes to XGBoost every round, through its public Python API: the labels
    and weights of the training ``DMatrix``, one round, and the training margins (from XGBoost's
    prediction cache; ``validate_features=False``: the matrix is the booster's own, and the check
    would read and compare its feature names every round)."""

    def __init__(self, booster, dtrain, n: int, n_classes: int):
        self.booster, self.dtrain = booster, dtrain
        self.shape = (n, 1 if n_classes == 2 else n_classes)

    def update(self, label: np.ndarray, weight: np.ndarray, iteration: int) -> None:
        """Set the labels (float32) and row weights (float64) and train round ``iteration``."""
        self.dtrain.set_label(label)
        self.dtrain.set_weight(weight)
        self.booster.update(self.dtrain, iteration)

    def boost(self, grad: np.ndarray, hess: np.ndarray, iteration: int) -> None:
        """Train round ``iteration`` on these gradients and hessians, (n, K) float64."""
        self.booster.boost(self.dtrain, iteration, grad=grad, hess=hess)

    def margins(self) -> np.ndarray:
        """The training margins as float64, shape (n, 1) for two classes, (n, K) otherwise."""
        m = self.booster.predict(self.dtrain, output_margin=True, validate_features=False)
        return np.asarray(m, dtype=np.float64).reshape(self.shape)


class _DirectRounds(_Rounds):
    """:class:`_Rounds` by the C functions the Python API calls, with the same arguments
    (``XGDMatrixSetInfoFromInterface``, ``XGBoosterUpdateOneIter``, ``XGBoosterTrainOneIter``,
    ``XGBoosterPredictFromDMatrix``; XGBoost's documented C API, reached through the package's
    ctypes handle), without the API's own work around them on every call: building the array
    interfaces and the prediction's JSON arguments, checking the matrix's feature names against
    the booster's before each round (they were assigned at f_0 and do not change), a Python class
    and fresh arrays per prediction.  The labels and weights are copied into two arrays kept for
    the fit, whose array interfaces are built once (the gradients and hessians of more classes
    likewise); the margins are copied into a kept float64 array.  German and COMPAS
    (``benchmarks/backends.py --settings german,compas --backends xgboost --no-adversarial
    --no-d0``, the code before and after alternating three times): reading the margins
    0.12-0.16 -> 0.03-0.08 ms a round, a step 0.30-0.40 -> 0.21-0.33 ms, the whole driven round
    against XGBoost's own 2.0-2.8 -> 1.2-2.0x.  The models are the same to the bit
    (``tests/test_backend_xgboost.py -k direct_rounds``)."""

    def __init__(self, booster, dtrain, n: int, n_classes: int, lib, check, ulong):
        super().__init__(booster, dtrain, n, n_classes)
        import ctypes

        self._ctypes, self._lib, self._check, self._ulong = ctypes, lib, check, ulong
        self._label = np.empty(n, dtype=np.float32)
        self._weight = np.empty(n, dtype=np.float64)
        self._label_interface = _array_interface(self._label)
        self._weight_interface = _array_interface(self._weight)
        self._margins = np.empty(self.shape)
        if n_classes > 2:  # the softmax gradients and hessians of boost()
            self._grad, self._hess = np.empty(self.shape), np.empty(self.shape)
            self._grad_interface, self._hess_interface = _array_interface(self._grad), _array_interface(self._hess)
        # Booster.predict's arguments for output_margin=True, all trees, strict_shape=False
        self._predict_args = json.dumps({"type": 1, "training": False, "iteration_begin": 0, "iteration_end": 0,
                                         "strict_shape": False}).encode()

    def update(self, label: np.ndarray, weight: np.ndarray, iteration: int) -> None:
        np.copyto(self._label, label)
        np.copyto(self._weight, weight)
        handle = self.dtrain.handle
        self._check(self._lib.XGDMatrixSetInfoFromInterface(handle, b"label", self._label_interface))
        self._check(self._lib.XGDMatrixSetInfoFromInterface(handle, b"weight", self._weight_interface))
        self._check(self._lib.XGBoosterUpdateOneIter(self.booster.handle, self._ctypes.c_int(iteration), handle))

    def boost(self, grad: np.ndarray, hess: np.ndarray, iteration: int) -> None:
        np.copyto(self._grad, grad)
        np.copyto(self._hess, hess)
        self._check(self._lib.XGBoosterTrainOneIter(self.booster.handle, self.dtrain.handle, self._ctypes.c_int(iteration),
                                                     self._grad_interface, self._hess_interface))

    def margins(self) -> np.ndarray:
        ctypes = self._ctypes
        preds = ctypes.POINTER(ctypes.c_float)()
        shape = ctypes.POINTER(self._ulong)()
        dims = self._ulong()
        self._check(self._lib.XGBoosterPredictFromDMatrix(self.booster.handle, self.dtrain.handle, self._predict_args,
                                                          ctypes.byref(shape), ctypes.byref(dims), ctypes.byref(preds)))
        size = 1
        for k in range(dims.value):
            size *= int(shape[k])
        if size != self._margins.size:  # pragma: no cover - XGBoost returns one margin per row and tree group
            raise BudroError(f"XGBoost returned {size} training margins, expected {self._margins.size}")
        # (XGBoost's own buffer, valid until its next call: copied at once)
        np.copyto(self._margins, np.ctypeslib.as_array(preds, (size,)).reshape(self.shape))
        return self._margins


def _array_interface(a: np.ndarray) -> bytes:
    """``a``'s ``__array_interface__`` as the JSON bytes XGBoost reads (what its Python API passes)."""
    return json.dumps(a.__array_interface__).encode()


def _rounds(booster, dtrain, n: int, n_classes: int) -> _Rounds:
    """The per-round calls of a fit: :class:`_DirectRounds` where the xgboost package exposes its
    ctypes handle and those C functions (``xgboost.core._LIB``), else the public API."""
    try:
        from xgboost.core import _LIB, _check_call, c_bst_ulong
    except ImportError:  # pragma: no cover - another xgboost's internals
        return _Rounds(booster, dtrain, n, n_classes)
    names = ("XGDMatrixSetInfoFromInterface", "XGBoosterUpdateOneIter", "XGBoosterTrainOneIter",
             "XGBoosterPredictFromDMatrix")
    if not all(hasattr(_LIB, name) for name in names):  # another xgboost's library
        return _Rounds(booster, dtrain, n, n_classes)
    return _DirectRounds(booster, dtrain, n, n_classes, _LIB, _check_call, c_bst_ulong)


def _dmatrix_threads(params: dict[str, Any]) -> int | None:
    nthread = params.get("nthread", 0)
    return int(nthread) if isinstance(nthread, numbers.Integral) and nthread > 0 else None


def _dmatrix(xgb, X: np.ndarray, categorical: tuple[int, ...], params: dict[str, Any], **fields: Any):
    """A ``DMatrix`` of ``X``: NaN missing, the ``categorical`` columns XGBoost categorical features."""
    types = None
    if categorical:
        types = ["q"] * X.shape[1]
        for c in categorical:
            types[c] = "c"
    return xgb.DMatrix(X, missing=np.nan, feature_types=types, enable_categorical=bool(categorical),
                       nthread=_dmatrix_threads(params), **fields)


# -- structural check of a JSON model ------------------------------------------------------

#: ``parents`` value of a tree's root in XGBoost's JSON format.
_NO_PARENT = 2147483647


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _int_field(obj: Any, key: str, where: str) -> int:
    """An integer field of the JSON model, given as an int or as a decimal string (XGBoost's habit)."""
    if not isinstance(obj, dict) or key not in obj:
        raise ValidationError(f"the data is not a valid XGBoost model: {where} has no {key!r}")
    value = obj[key]
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValidationError(f"the data is not a valid XGBoost model: {where}.{key} is {obj[key]!r}, not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"the data is not a valid XGBoost model: {where}.{key} is {obj[key]!r}, not an integer")
    return value


def _int_array(tree: dict, key: str, where: str) -> np.ndarray:
    values = tree.get(key)
    if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValidationError(f"the data is not a valid XGBoost model: {where}: {key!r} must be a list of integers")
    return np.asarray(values, dtype=np.int64) if values else np.zeros(0, dtype=np.int64)


def check_xgboost_json(model: dict, n_features: int | None) -> None:
    """Check the structure of an XGBoost JSON model (``Booster.save_raw("json")``, parsed)
    before XGBoost reads it; raise :class:`~budro.exceptions.ValidationError` naming the tree
    and node at fault.

    XGBoost trusts the indices in a model file: a split on feature 10**6 of a three-feature
    model loads, and crashes the process (segmentation fault) at the first prediction.  This
    checks that ``num_feature`` (and ``n_features`` when given) and ``num_class`` are sane; that
    every tree's per-node arrays have ``num_nodes`` entries; that every split index is below
    ``num_feature``; that every child index is -1 (a leaf) or a node of the tree other than
    the root, each inner node having both children; that parents are in range; and that
    categorical split sets lie inside the tree's category arrays.  Multi-target trees
    (``multi_strategy="multi_output_tree"``) are checked for their split indices and children.
    """
    if not isinstance(model, dict) or not isinstance(model.get("learner"), dict):
        raise ValidationError("the data is not a valid XGBoost model: no 'learner' object at the top level")
    learner = model["learner"]
    mparam = learner.get("learner_model_param")
    num_feature = _int_field(mparam, "num_feature", "learner_model_param")
    num_class = _int_field(mparam, "num_class", "learner_model_param")
    if num_feature < 1:
        raise ValidationError(f"the data is not a valid XGBoost model: num_feature is {num_feature}")
    if n_features is not None and num_feature != n_features:
        raise ValidationError(
            f"the data is not a valid XGBoost model for {n_features} features: its num_feature is {num_feature}"
        )
    if num_class < 0 or num_class == 1 or num_class > 1_000_000:
        raise ValidationError(f"the data is not a valid XGBoost model: num_class is {num_class}")
    booster = learner.get("gradient_booster")
    gbtree = booster.get("model") if isinstance(booster, dict) else None
    if not isinstance(gbtree, dict) or not isinstance(gbtree.get("trees"), list):
        raise ValidationError("the data is not a valid XGBoost model: no gradient_booster.model.trees list")
    trees = gbtree["trees"]
    n_trees = _int_field(gbtree.get("gbtree_model_param"), "num_trees", "gbtree_model_param")
    if n_trees != len(trees):
        raise ValidationError(f"the data is not a valid XGBoost model: num_trees is {n_trees} but {len(trees)} trees are stored")
    tree_info = gbtree.get("tree_info")
    if not isinstance(tree_info, list) or len(tree_info) != len(trees):
        raise ValidationError("the data is not a valid XGBoost model: tree_info must list one output group per tree")
    n_groups = max(num_class, 1)
    for t, group in enumerate(tree_info):
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group < n_groups:
            raise ValidationError(f"the data is not a valid XGBoost model: tree {t}: output group {group!r} is not in [0, {n_groups})")
    for t, tree in enumerate(trees):
        _check_tree(tree, t, num_feature)


def _check_tree(tree: Any, t: int, num_feature: int) -> None:
    where = f"tree {t}"
    if not isinstance(tree, dict):
        raise ValidationError(f"the data is not a valid XGBoost model: {where} is not an object")
    n_nodes = _int_field(tree.get("tree_param"), "num_nodes", f"{where}.tree_param")
    if n_nodes < 1:
        raise ValidationError(f"the data is not a valid XGBoost model: {where} has {n_nodes} nodes")
    left = _int_array(tree, "left_children", where)
    right = _int_array(tree, "right_children", where)
    split = _int_array(tree, "split_indices", where)
    arrays = {"left_children": left, "right_children": right, "split_indices": split}
    for key in ("parents", "default_left", "split_type"):
        if key in tree:
            arrays[key] = _int_array(tree, key, where)
    for key in ("split_conditions", "base_weights", "loss_changes", "sum_hessian"):
        if key in tree and not isinstance(tree[key], list):
            raise ValidationError(f"the data is not a valid XGBoost model: {where}: {key!r} must be a list")
    for key, values in arrays.items():
        if len(values) != n_nodes:
            raise ValidationError(
                f"the data is not a valid XGBoost model: {where}: {key!r} has {len(values)} entries, num_nodes is {n_nodes}"
            )
    for key in ("split_conditions", "loss_changes", "sum_hessian"):
        if key in tree and len(tree[key]) != n_nodes:
            raise ValidationError(
                f"the data is not a valid XGBoost model: {where}: {key!r} has {len(tree[key])} entries, num_nodes is {n_nodes}"
            )
    for key, children in (("left_children", left), ("right_children", right)):
        bad = np.flatnonzero((children != -1) & ((children < 1) | (children >= n_nodes)))
        if bad.size:
            i = int(bad[0])
            raise ValidationError(
                f"the data is not a valid XGBoost model: {where}, node {i}: {key} index {int(children[i])} "
                f"is neither -1 nor a node in [1, {n_nodes})"
            )
    half = np.flatnonzero((left == -1) != (right == -1))
    if half.size:
        raise ValidationError(f"the data is not a valid XGBoost model: {where}, node {int(half[0])} has one child only")
    inner = left != -1
    bad = np.flatnonzero(inner & ((split < 0) | (split >= num_feature)))
    if bad.size:
        i = int(bad[0])
        raise ValidationError(
            f"the data is not a valid XGBoost model: {where}, node {i}: split index {int(split[i])} "
            f"is not a feature in [0, {num_feature})"
        )
    children = np.concatenate([left[inner], right[inner]])
    if np.unique(children).size != children.size:
        raise ValidationError(f"the data is not a valid XGBoost model: {where}: a node is the child of two splits")
    if "parents" in arrays:
        parents = arrays["parents"]
        bad = np.flatnonzero((parents != _NO_PARENT) & ((parents < 0) | (parents >= n_nodes)))
        if bad.size:
            i = int(bad[0])
            raise ValidationError(
                f"the data is not a valid XGBoost model: {where}, node {i}: parent index {int(parents[i])} is out of range"
            )
    _check_categories(tree, where, n_nodes)


def _check_categories(tree: dict, where: str, n_nodes: int) -> None:
    keys = ("categories", "categories_nodes", "categories_segments", "categories_sizes")
    if not any(k in tree for k in keys):
        return
    cats, nodes, segments, sizes = (_int_array(tree, k, where) for k in keys)
    if not len(nodes) == len(segments) == len(sizes):
        raise ValidationError(
            f"the data is not a valid XGBoost model: {where}: categories_nodes, categories_segments and "
            "categories_sizes must have equal lengths"
        )
    bad = np.flatnonzero((nodes < 0) | (nodes >= n_nodes))
    if bad.size:
        raise ValidationError(
            f"the data is not a valid XGBoost model: {where}: categorical node index {int(nodes[bad[0]])} is out of range"
        )
    bad = np.flatnonzero((segments < 0) | (sizes < 0) | (segments + sizes > len(cats)))
    if bad.size:
        i = int(bad[0])
        raise ValidationError(
            f"the data is not a valid XGBoost model: {where}, node {int(nodes[i])}: its category set "
            f"(offset {int(segments[i])}, size {int(sizes[i])}) lies outside the {len(cats)} stored categories"
        )
    if (cats < 0).any():
        raise ValidationError(f"the data is not a valid XGBoost model: {where}: a stored category is negative")
