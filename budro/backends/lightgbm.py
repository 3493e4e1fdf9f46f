"""LightGBM, driven one boosting round at a time (Algorithm 3 of Vargo et al., 2021).

Every BuDRO round trains one tree (one per class for K > 2) on the augmented data set
``D0 = {(x_i, k) : i < n, k < K}`` where the copy ``(x_i, k)`` has weight ``P[i, k]``.  The
cross-entropy loss is linear in the label distribution, so the gradient and hessian that D0
contributes at ``x_i`` are the ``P``-weighted sums over its K copies::

    binary:  g_i = w_i p_i - P[i, 1],            h_i = w_i p_i (1 - p_i)
    K > 2:   g_ik = w_i p_ik - P[i, k],          h_ik = K / (K - 1) * w_i p_ik (1 - p_ik)

with ``w_i = sum_k P[i, k]`` and ``p`` the sigmoid (softmax) of the current margins; the factor
``K / (K - 1)`` is LightGBM's own ``multiclass`` hessian.  Histograms are sums of these per row,
so one round on the ``n`` original rows with these gradients grows the tree that a round on
the ``K n`` rows of D0 grows.

Route
-----
The training ``Dataset`` (LightGBM's binned copy of ``X``) is built once per fit, and the
booster runs with ``objective="none"``: every round, f_0 included, is
``Booster.update(fobj=...)`` with the gradients above, f_0 using the empirical weights (weight 1
per row, the original labels).  ``Dataset.set_weight`` is no reliable alternative: it is
silently ignored on a ``Dataset`` built without weights, and all-ones weights are skipped (the
previous weights stay).  The route also keeps the training margins current for free: with no built-in
objective, LightGBM's training score is the raw margin, read through ``Booster.eval_train``
without predicting anything again.  The saved and the finished model carry LightGBM's
``binary``/``multiclass`` objective again (see :meth:`LightGBMBackend.save_model`), so the plain
library predicts probabilities with it.

Hyperparameters that count rows
-------------------------------
A D0 round sees ``K`` rows for every original row, some with weight zero, so a parameter that
counts rows means something different on D0 and on the ``n`` rows:

* ``min_data_in_leaf``: LightGBM's default is 20; budro's default is **0** (with
  ``min_sum_hessian_in_leaf = 1``, the hessian analogue of XGBoost's ``min_child_weight = 1``).
  With 0, a step is exactly one round on D0 (checked numerically against an explicit D0
  ``Dataset``).  A positive value is accepted; it then counts the original rows of a leaf as
  LightGBM estimates them (from each side's share of the leaf's hessian), like ordinary
  LightGBM on the ``n`` rows, and a step is no longer exactly a D0 round.
* ``path_smooth`` smooths leaf values by leaf row counts: rejected.
* ``min_data_in_bin``, ``max_bin``, ``bin_construct_sample_cnt``: binning only.  The bins are
  built once from the ``n`` original rows, exactly as LightGBM's own training on ``(X, y)``
  builds them, not from the ``K n`` rows of D0.
* categorical features (``start(..., categorical_features=...)``): LightGBM's many-vs-many
  categorical split search counts rows (estimated from hessians, so D0 counts twice as many)
  in ``min_data_per_group``, ``cat_smooth`` and its rounding; budro's default
  ``max_cat_to_onehot = 2**31 - 1`` makes every categorical split one-vs-rest, whose search
  counts nothing, and a step is then exactly one round on D0
  (``tests/test_backend_inputs.py::test_lightgbm_categorical_step_equals_one_round_on_explicit_D0``).
  A smaller ``max_cat_to_onehot`` (LightGBM's default is 4) allows many-vs-many splits; the
  steps then equal LightGBM's own training at the empirical weights, but not D0 rounds.
* ``bagging_fraction``/``bagging_freq`` sample original rows, each with all its label copies;
  ``pos_bagging_fraction``/``neg_bagging_fraction`` sample by a label that D0 rows do not have
  and are rejected, as is GOSS (``data_sample_strategy``).

LightGBM is imported when a backend is trained, not when this module is imported.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
from scipy.special import expit

from budro._archive import write_atomic
from budro.backends import _lightgbm_leaves
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
from budro.exceptions import BudroError, ValidationError
from budro.losses import label_losses

__all__ = ["LightGBMBackend", "check_lightgbm_text"]

#: LightGBM parameters this backend passes through, by LightGBM's native names.
NATIVE_PARAMS: frozenset[str] = frozenset(
    {
        # core
        "learning_rate",
        "num_leaves",
        "num_threads",
        "seed",
        "deterministic",
        # learning control
        "force_row_wise",
        "force_col_wise",
        "max_depth",
        "min_data_in_leaf",
        "min_sum_hessian_in_leaf",
        "bagging_fraction",
        "bagging_freq",
        "bagging_seed",
        "feature_fraction",
        "feature_fraction_bynode",
        "feature_fraction_seed",
        "extra_trees",
        "extra_seed",
        "max_delta_step",
        "lambda_l1",
        "lambda_l2",
        "min_gain_to_split",
        "monotone_constraints",
        "monotone_constraints_method",
        "monotone_penalty",
        "interaction_constraints",
        "verbosity",
        # dataset
        "max_bin",
        "max_bin_by_feature",
        "min_data_in_bin",
        "bin_construct_sample_cnt",
        "data_random_seed",
        "feature_pre_filter",
        # categorical features (start(..., categorical_features=...))
        "max_cat_to_onehot",
        "max_cat_threshold",
        "cat_l2",
        "cat_smooth",
        "min_data_per_group",
        # objective
        "scale_pos_weight",
    }
)

#: LightGBM's own aliases of the accepted parameters (scikit-learn names included) -> native name.
PARAM_ALIASES: dict[str, str] = {
    "eta": "learning_rate",
    "shrinkage_rate": "learning_rate",
    "num_leaf": "num_leaves",
    "max_leaves": "num_leaves",
    "max_leaf": "num_leaves",
    "max_leaf_nodes": "num_leaves",
    "num_thread": "num_threads",
    "nthread": "num_threads",
    "nthreads": "num_threads",
    "n_jobs": "num_threads",
    "random_seed": "seed",
    "random_state": "seed",
    "min_data_per_leaf": "min_data_in_leaf",
    "min_data": "min_data_in_leaf",
    "min_child_samples": "min_data_in_leaf",
    "min_samples_leaf": "min_data_in_leaf",
    "min_sum_hessian_per_leaf": "min_sum_hessian_in_leaf",
    "min_sum_hessian": "min_sum_hessian_in_leaf",
    "min_hessian": "min_sum_hessian_in_leaf",
    "min_child_weight": "min_sum_hessian_in_leaf",
    "sub_row": "bagging_fraction",
    "subsample": "bagging_fraction",
    "bagging": "bagging_fraction",
    "subsample_freq": "bagging_freq",
    "bagging_fraction_seed": "bagging_seed",
    "sub_feature": "feature_fraction",
    "colsample_bytree": "feature_fraction",
    "sub_feature_bynode": "feature_fraction_bynode",
    "colsample_bynode": "feature_fraction_bynode",
    "extra_tree": "extra_trees",
    "max_tree_output": "max_delta_step",
    "max_leaf_output": "max_delta_step",
    "reg_alpha": "lambda_l1",
    "l1_regularization": "lambda_l1",
    "reg_lambda": "lambda_l2",
    "lambda": "lambda_l2",
    "l2_regularization": "lambda_l2",
    "min_split_gain": "min_gain_to_split",
    "mc": "monotone_constraints",
    "monotone_constraint": "monotone_constraints",
    "monotonic_cst": "monotone_constraints",
    "monotone_constraining_method": "monotone_constraints_method",
    "mc_method": "monotone_constraints_method",
    "monotone_splits_penalty": "monotone_penalty",
    "ms_penalty": "monotone_penalty",
    "mc_penalty": "monotone_penalty",
    "verbose": "verbosity",
    "max_bins": "max_bin",
    "subsample_for_bin": "bin_construct_sample_cnt",
    "data_seed": "data_random_seed",
}

_UNIT = Number(low=0.0, high=1.0, low_open=True)
_NON_NEGATIVE = Number(low=0.0)
_INT = Number(integer=True)
#: Values accepted, by native name (checked in the constructor; LightGBM checks the rest).
PARAM_RULES: dict[str, Number] = {
    "learning_rate": Number(low=0.0, low_open=True),
    "num_leaves": Number(integer=True, low=2, high=131072),
    "num_threads": _INT,
    "seed": _INT,
    "max_depth": _INT,
    "min_data_in_leaf": Number(integer=True, low=0),
    "min_sum_hessian_in_leaf": _NON_NEGATIVE,
    "bagging_fraction": _UNIT,
    "bagging_freq": Number(integer=True, low=0),
    "bagging_seed": _INT,
    "feature_fraction": _UNIT,
    "feature_fraction_bynode": _UNIT,
    "feature_fraction_seed": _INT,
    "extra_seed": _INT,
    "max_delta_step": Number(),
    "lambda_l1": _NON_NEGATIVE,
    "lambda_l2": _NON_NEGATIVE,
    "min_gain_to_split": _NON_NEGATIVE,
    "monotone_penalty": _NON_NEGATIVE,
    "verbosity": _INT,
    "max_bin": Number(integer=True, low=2),
    "min_data_in_bin": Number(integer=True, low=1),
    "bin_construct_sample_cnt": Number(integer=True, low=1),
    "data_random_seed": _INT,
    "max_cat_to_onehot": Number(integer=True, low=1),
    "max_cat_threshold": Number(integer=True, low=1),
    "cat_l2": _NON_NEGATIVE,
    "cat_smooth": _NON_NEGATIVE,
    "min_data_per_group": Number(integer=True, low=1),
    "scale_pos_weight": Number(low=0.0, low_open=True),
}

_OBJECTIVE = "budro sets it: every round is trained on budro's D0 gradients (binary or softmax cross-entropy)"
_ROUNDS = "budro trains one round per step(); choose the number of rounds on the estimator"
#: Parameters budro sets itself or that break the one-round-on-D0 semantics, with the reason.
RESERVED_PARAMS: dict[str, str] = {
    **dict.fromkeys(["objective", "objective_type", "app", "application", "loss"], _OBJECTIVE),
    **dict.fromkeys(["num_class", "num_classes"], "budro sets it from the number of classes seen by start()"),
    **dict.fromkeys(
        ["num_iterations", "num_iteration", "n_iter", "num_tree", "num_trees", "num_round", "num_rounds",
         "nrounds", "num_boost_round", "n_estimators", "max_iter"],
        _ROUNDS,
    ),
    **dict.fromkeys(
        ["boosting", "boosting_type", "boost"],
        "budro grows one gbdt round per step(); dart rescales and rf averages earlier trees",
    ),
    "boost_from_average": "budro starts every model from margin 0 (probability 0.5, as in the paper)",
    **dict.fromkeys(["metric", "metrics", "metric_types"], "budro evaluates no metric while training"),
    **dict.fromkeys(
        ["early_stopping_round", "early_stopping_rounds", "early_stopping", "n_iter_no_change"], _ROUNDS
    ),
    **dict.fromkeys(
        ["is_unbalance", "unbalance", "unbalanced_sets"],
        "it derives label weights from the original labels; give scale_pos_weight instead",
    ),
    "sigmoid": "budro's losses use the standard logistic function (sigmoid = 1)",
    "path_smooth": "it smooths leaf values by leaf row counts, which differ between D0 and the original rows",
    **dict.fromkeys(
        ["pos_bagging_fraction", "pos_bagging", "pos_sub_row", "pos_subsample",
         "neg_bagging_fraction", "neg_bagging", "neg_sub_row", "neg_subsample"],
        "it samples rows by their original label, which the rows of D0 do not have",
    ),
    "data_sample_strategy": "only plain bagging (bagging_fraction, bagging_freq) is supported; GOSS rescales gradients",
    **dict.fromkeys(["linear_tree", "linear_trees"], "linear leaves are not supported by budro's backend"),
    **dict.fromkeys(["device_type", "device"], "budro's LightGBM backend trains on the CPU"),
    **dict.fromkeys(["tree_learner", "tree", "tree_type", "tree_learner_type"], "budro trains with the serial tree learner"),
    **dict.fromkeys(
        ["categorical_feature", "cat_feature", "categorical_column", "cat_column", "categorical_features"],
        "budro passes the categorical columns itself: give categorical_features to start()/fit_native() "
        "(BuDROClassifier's categorical_features)",
    ),
    "init_score": "budro starts every model from margin 0",
}

#: Defaults that differ from LightGBM's own (see :class:`LightGBMBackend`).
DEFAULT_PARAMS: dict[str, Any] = {
    "min_data_in_leaf": 0,
    "min_sum_hessian_in_leaf": 1.0,
    "verbosity": -1,
    # categorical features: one-vs-rest splits only (LightGBM's many-vs-many search counts rows)
    "max_cat_to_onehot": 2**31 - 1,
}


def _lgb():
    """Import LightGBM on first use (keeps ``import budro`` light)."""
    try:
        import lightgbm
    except ImportError as exc:  # pragma: no cover - lightgbm is a declared dependency
        raise ImportError("the 'lightgbm' backend needs the lightgbm package: pip install lightgbm") from exc
    return lightgbm


class LightGBMBackend(BuiltinBackend):
    """LightGBM booster backend for BuDRO.

    Parameters
    ----------
    weight_scale : {"n", "unit"}, default="n"
        How the per-round weights ``P`` (which sum to 1) reach LightGBM.

        - ``"n"``: multiplied by ``n``, so the empirical distribution is weight 1 per row.  With
          ``eps = 0`` BuDRO then reproduces LightGBM's own unweighted training, and the
          hessian-scale parameters (``min_sum_hessian_in_leaf``, ``lambda_l1``, ``lambda_l2``,
          ``min_gain_to_split``) mean what they mean in ordinary boosting.
        - ``"unit"``: handed over as they are, summing to 1 (the paper's convention).  Hessian
          sums are ``n`` times smaller, so those four parameters must be ``n`` times smaller to
          grow the same trees; with budro's default ``min_sum_hessian_in_leaf = 1`` no tree
          splits at all.  LightGBM's bins do not depend on the weights, so with the four
          parameters divided by ``n`` the two scales grow the same trees.

        f_0 and :meth:`fit_native` use the same scale (row weight 1, resp. ``1/n``).
    **params
        LightGBM parameters by their native names (``learning_rate``, ``num_leaves``,
        ``max_depth``, ``min_sum_hessian_in_leaf``, ``min_data_in_leaf``, ``lambda_l2``,
        ``bagging_fraction``, ``feature_fraction``, ``max_bin``, ``scale_pos_weight``,
        ``num_threads``, ``seed``, ...) or by LightGBM's aliases (``eta``, ``reg_lambda``,
        ``min_child_weight``, ``subsample``, ``colsample_bytree``, ``n_jobs``,
        ``random_state``, ...).  Unknown names raise :class:`~budro.exceptions.ConfigError`, as
        do ``objective``, ``num_class``, ``num_iterations``/``n_estimators``, ``boosting``,
        ``boost_from_average``, ``metric`` and the row-count or label-based options listed in
        the module docstring.  Values are checked when the backend is created, before any
        data (:data:`PARAM_RULES`, then one LightGBM round on a tiny synthetic data set, cached
        per parameter set): a bad value raises :class:`~budro.exceptions.ConfigError` naming
        the key.

        Defaults that differ from LightGBM's: ``min_data_in_leaf=0`` and
        ``min_sum_hessian_in_leaf=1.0`` (a row-count minimum breaks the D0 equivalence),
        ``verbosity=-1``; ``boost_from_average`` is always off (every model starts from
        margin 0, probability 0.5, as in the paper).

    Attributes
    ----------
    n_classes_ : int
        Number of classes of the current fit.
    n_features_in_ : int
        Number of features of the current fit.

    Notes
    -----
    Each :meth:`step` is exactly one LightGBM round on D0 with row weights ``P[i, k]`` (scaled)
    when ``min_data_in_leaf = 0``, up to float32 rounding (LightGBM stores gradients in float32).
    The rounds are exactly those of LightGBM's own training with a custom objective
    (``lightgbm.train`` with a callable ``objective``).  Against its built-in objectives
    (:meth:`fit_native`) the empirical-weight rounds are equal as well, with one exception:
    with ``feature_fraction < 1`` LightGBM's Python package draws one extra feature subset when
    a custom objective is first installed, so the per-tree feature subsets are shifted by one
    draw.

    ``scale_pos_weight`` (two classes only) multiplies the weight of every label-1 copy of D0,
    as LightGBM's ``binary`` objective does for label-1 rows.

    A round in which LightGBM finds no split adds no tree (LightGBM's own training behaves the
    same way), so :attr:`n_rounds` counts the rounds that were kept.

    Where ``num_leaves`` is far above what the trees use (the paper's depth-14 trees:
    ``num_leaves = 2**14``, 700-1200 leaves at Adult), each tree grows under a smaller leaf cap,
    raised and the round grown again where a tree reaches it: the same trees, without LightGBM's
    work per leaf slot at every split (:mod:`budro.backends._lightgbm_leaves`; not with bagging,
    feature fractions, extra trees or monotone constraints).

    While training, :attr:`model` is the live booster, whose own ``predict`` returns raw
    margins (it has no objective); after :meth:`finish` it is a booster with LightGBM's
    ``binary``/``multiclass`` objective.  A pickled backend keeps its model but not its
    training ``Dataset``: it unpickles finished.

    Examples
    --------
    >>> import numpy as np
    >>> from budro.backends.lightgbm import LightGBMBackend
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3)); y = (X[:, 0] > 0).astype(int)
    >>> backend = LightGBMBackend(num_leaves=4, num_threads=1)
    >>> backend.start(X, y, 2)
    >>> weights = np.zeros((200, 2)); weights[np.arange(200), y] = 1 / 200
    >>> backend.step(weights)
    >>> backend.n_rounds
    2
    >>> backend.finish()
    >>> backend.predict_proba(X[:2]).shape
    (2, 2)
    """

    name = "lightgbm"
    native_format = "lightgbm-text"

    NATIVE_PARAMS = NATIVE_PARAMS
    PARAM_ALIASES = PARAM_ALIASES
    RESERVED_PARAMS = RESERVED_PARAMS
    DEFAULT_PARAMS = DEFAULT_PARAMS
    PARAM_RULES = PARAM_RULES
    PROBE_SKIP = frozenset({"monotone_constraints", "interaction_constraints", "max_bin_by_feature", "num_threads"})
    THREAD_PARAM = "num_threads"
    # its many short parallel regions (several per split) stall beside a busy process; its
    # col-wise histograms give the same trees on any thread count (docs/threads.md)
    THREADS_YIELD_BUSY = True
    LIBRARY = "LightGBM"

    @classmethod
    def _probe(cls, params: dict[str, Any]) -> None:
        lgb = _lgb()
        X, y = probe_data()
        params = {**params, "objective": "binary", "boost_from_average": False, "metric": "None",
                  "num_threads": 1, "verbosity": -1}
        lgb.train(params, lgb.Dataset(X, label=y, params=params), num_boost_round=1)

    def _reset(self) -> None:
        self._booster = None
        self._dataset = None
        self._margins: np.ndarray | None = None
        self._direct: _DirectRounds | None = None
        self._cap: _lightgbm_leaves.LeafCap | None = None
        self._n_train = 0
        self._scale_pos_weight = 1.0

    def _is_training(self) -> bool:
        return self._dataset is not None

    def _has_model(self) -> bool:
        return self._booster is not None

    def _train_params(self, n_classes: int, random_state: int | None, *, native: bool) -> dict[str, Any]:
        params = dict(self._params)
        params.update(boost_from_average=False, metric="None")
        if n_classes > 2 and float(params.get("scale_pos_weight", 1.0)) != 1.0:
            raise ValidationError(
                f"scale_pos_weight applies to two classes only; got n_classes={n_classes} "
                f"with scale_pos_weight={params['scale_pos_weight']!r}"
            )
        if native:
            params["objective"] = "binary" if n_classes == 2 else "multiclass"
        else:
            params["objective"] = "none"
        if n_classes > 2:
            params["num_class"] = n_classes
        if random_state is not None:
            params["seed"] = check_seed(random_state, upper=2**31)
        return params

    # -- training -----------------------------------------------------------------------
    def start(self, X: np.ndarray, y: np.ndarray, n_classes: int, *, random_state: int | None = None,
              categorical_features: tuple[int, ...] = ()) -> None:
        """Bin ``X`` once into a LightGBM ``Dataset`` and train f_0, one plain round on ``(X, y)``.

        Parameters
        ----------
        X : array of shape (n, d)
            Training inputs; NaN marks a missing value (LightGBM sends it to the side of each
            split that its training chose), infinite values are rejected.
        y : array of shape (n,)
            Integer labels in ``[0, n_classes)``.
        n_classes : int
            Number of classes K >= 2.
        random_state : int, optional
            Seed of LightGBM's sampling (bagging, feature fraction, extra trees) for this fit;
            overrides the ``seed`` parameter when given.
        categorical_features : sequence of int, default=()
            Columns holding non-negative integer category codes (NaN: missing or unseen), split
            by LightGBM's native categorical splits (``categorical_feature`` of the
            ``Dataset``); see the class notes for the parameters involved.  Predictions treat
            the same columns the same way.
        """
        lgb = _lgb()
        X, y, n_classes, categorical = check_training_data(X, y, n_classes, categorical_features)
        params = self._with_threads(self._train_params(n_classes, random_state, native=False), X.shape[0])
        self._booster = self._dataset = self._margins = self._direct = self._cap = None
        n = X.shape[0]
        dataset = _dataset(lgb, X, categorical, params, label=y)
        # the trees of the requested num_leaves, grown under a smaller cap where they stay smaller
        # (budro.backends._lightgbm_leaves): LightGBM's learner works in proportion to num_leaves
        library = _c_library(lgb, _CAP_CALLS)
        cap = _lightgbm_leaves.first_cap(params) if library is not None else None
        booster = lgb.Booster(params=params if cap is None else {**params, "num_leaves": cap}, train_set=dataset)
        if cap is not None:
            self._cap = _lightgbm_leaves.LeafCap(*library, booster, cap, _lightgbm_leaves.effective_leaves(params),
                                                 n * (1 if n_classes == 2 else n_classes))
        self._booster, self._dataset, self._n_train = booster, dataset, n
        self.n_classes_, self.n_features_in_, self._categorical = n_classes, X.shape[1], categorical
        self._scale_pos_weight = float(params.get("scale_pos_weight", 1.0))
        empirical = np.zeros((n, n_classes))
        empirical[np.arange(n), y.astype(np.intp)] = 1.0 / n
        self._boost(empirical)  # (by Booster.update, which sets the booster's objective to "none" once)
        self._direct = _direct_rounds(lgb, booster, n, n_classes)

    def step(self, weights: np.ndarray) -> None:
        """Grow one more round on D0, the copy ``(x_i, k)`` weighted by ``weights[i, k]``.

        Parameters
        ----------
        weights : array of shape (n, n_classes)
            Finite, non-negative, summing to 1 (within 1e-5): the distribution ``P(x_i, k)``.
        """
        self._require_training("step")
        self._boost(check_weights(weights, (self._n_train, self.n_classes_)))

    def _boost(self, P: np.ndarray) -> None:
        scale = float(self._n_train) if self.weight_scale == "n" else 1.0
        objective = _d0_objective(P * scale if scale != 1.0 else P, self.n_classes_, self._scale_pos_weight)
        cap = self._cap if self._cap is not None and self._cap.active else None
        rounds_before = cap.iteration() if cap is not None else 0
        if self._direct is not None:
            margins = self._cached_margins()
            self._direct.boost(*objective(margins, None))
            if cap is not None:  # (the score the margins were read from, class-major)
                cap.settle(rounds_before, self._direct.score, self._direct.again, self._resync)
        else:
            before = None if cap is None or rounds_before == 0 else _class_major_copy(self._cached_margins())
            self._booster.update(fobj=objective)
            if cap is not None:
                cap.settle(rounds_before, before, lambda: self._booster.update(fobj=objective), self._resync)
        self._margins = None

    def _resync(self) -> None:
        """LightGBM's training score recomputed tree by tree (after a rollback that did not give
        it back to the bit), on a ``Dataset`` of the same rows that becomes the training data."""
        self._dataset = self._booster.train_set = self._cap.recompute_score(self._dataset)

    def _cached_margins(self) -> np.ndarray:
        if self._margins is None and self._direct is not None:
            self._margins = self._direct.margins()
        elif self._margins is None:
            captured: list[np.ndarray] = []

            def capture(preds, _data):
                captured.append(np.array(preds, dtype=np.float64))
                return "budro_margins", 0.0, False

            self._booster.eval_train(feval=capture)
            self._margins = captured[0].reshape(self._n_train, -1)
            if self.n_classes_ == 2:
                self._margins = self._margins[:, 0]
        return self._margins

    def margins(self) -> np.ndarray:
        """Raw margins at the training points, LightGBM's own training score:
        (n,) for two classes (log-odds of label 1), (n, K) otherwise."""
        self._require_training("margins")
        return self._cached_margins().copy()

    def losses(self) -> np.ndarray:
        """Per-label losses at the training points, from the cached margins (no copy of them)."""
        self._require_training("losses")
        return label_losses(self._cached_margins(), self.n_classes_)

    def finish(self) -> None:
        """Release the training ``Dataset``; the model becomes a plain LightGBM booster with
        its ``binary``/``multiclass`` objective and keeps predicting."""
        if self._dataset is not None:
            self._booster = _lgb().Booster(model_str=self._model_string())
        self._dataset = None
        self._margins = None
        self._direct = None
        self._cap = None

    # -- the model ----------------------------------------------------------------------
    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """Raw margins of the current model at ``X``: (m,) for two classes, (m, K) otherwise."""
        self._require_model("predict_margin")
        X = self._check_X(X)
        m = np.asarray(self._booster.predict(X, raw_score=True), dtype=np.float64)
        return m.reshape(X.shape[0]) if self.n_classes_ == 2 else m.reshape(X.shape[0], -1)

    def save_model(self, path: str | os.PathLike) -> None:
        """Write the model in LightGBM's text format (any file name), atomically, with its
        ``binary``/``multiclass`` objective: ``lightgbm.Booster(model_file=path)`` loads it; its ``predict`` gives the
        probabilities and ``predict(raw_score=True)`` the margins of this backend."""
        self._require_model("save_model")
        write_atomic(os.fspath(path), self._model_string().encode("utf-8"))

    def fit_native(self, X: np.ndarray, y: np.ndarray, n_classes: int, n_rounds: int,
                   *, random_state: int | None = None, sample_weight: np.ndarray | None = None,
                   categorical_features: tuple[int, ...] = ()) -> "LightGBMBackend":
        """Plain LightGBM training (``lightgbm.train`` with the built-in ``binary`` or
        ``multiclass`` objective) for ``n_rounds`` rounds on ``(X, y)`` with the same parameters
        and weight scale (row weight 1, resp. ``1/n``).

        ``sample_weight`` (n,), optional: row weights, rescaled to sum to n (scale ``"n"``) or
        to 1 (``"unit"``); see :func:`budro.backends.base.native_sample_weights`.
        ``categorical_features``: as in :meth:`start`.

        Returns a new, finished backend holding that booster; without ``sample_weight`` it
        equals :meth:`start` followed by ``n_rounds - 1`` steps with the empirical weights (see
        the class notes for ``feature_fraction``).
        """
        lgb = _lgb()
        X, y, n_classes, categorical = check_training_data(X, y, n_classes, categorical_features)
        n_rounds = check_n_rounds(n_rounds)
        params = self._with_threads(self._train_params(n_classes, random_state, native=True), X.shape[0])
        weight = native_sample_weights(sample_weight, X.shape[0], self.weight_scale)
        dataset = _dataset(lgb, X, categorical, params, label=y, weight=weight)
        booster = lgb.train(params, dataset, num_boost_round=n_rounds)
        other = self._new_finished(n_classes, X.shape[1], categorical)
        other._booster = booster
        return other

    def to_native_bytes(self) -> bytes:
        """The model in LightGBM's text format (:attr:`native_format` ``"lightgbm-text"``,
        UTF-8), with its ``binary``/``multiclass`` objective, as :meth:`save_model` writes it."""
        self._require_model("to_native_bytes")
        return self._model_string().encode("utf-8")

    def load_native_bytes(self, data: bytes, *, n_classes: int, n_features: int,
                          categorical_features: tuple[int, ...] = ()) -> None:
        """Load a model written by :meth:`to_native_bytes`; the backend is finished afterwards.

        The model must have ``n_features`` features and one tree per round (two classes) or
        ``n_classes`` (more); otherwise, and when LightGBM rejects the text,
        :class:`~budro.exceptions.ValidationError`."""
        lgb = _lgb()
        n_classes, n_features, categorical = check_native_load_args(n_classes, n_features, categorical_features)
        data = check_native_bytes(data, "LightGBM")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValidationError(f"the data is not a valid LightGBM model: not UTF-8 text ({exc})") from None
        check_lightgbm_text(text, n_features)
        try:
            booster = lgb.Booster(model_str=text)
        except lgb.basic.LightGBMError as exc:
            raise ValidationError(f"the data is not a valid LightGBM model: {str(exc).strip()}") from None
        if booster.num_feature() != n_features:
            raise ValidationError(
                f"the data is not a valid LightGBM model for {n_features} features: it has {booster.num_feature()}"
            )
        per_round = 1 if n_classes == 2 else n_classes
        if booster.num_model_per_iteration() != per_round:
            raise ValidationError(
                f"the data is not a valid LightGBM model for {n_classes} classes: it has "
                f"{booster.num_model_per_iteration()} tree(s) per round"
            )
        stored = _categorical_of(text)
        if stored != categorical:
            raise ValidationError(
                f"the data is not a valid LightGBM model for categorical_features={categorical}: "
                f"its categorical features are {stored}"
            )
        self._booster, self._dataset, self._margins, self._direct, self._cap = booster, None, None, None, None
        self.n_classes_, self.n_features_in_, self._categorical = n_classes, n_features, categorical

    @property
    def n_rounds(self) -> int:
        """Boosting rounds in the current model, f_0 included (0 before :meth:`start`)."""
        if self._booster is None:
            return 0
        per_round = 1 if self.n_classes_ == 2 else self.n_classes_
        return int(self._booster.num_trees()) // per_round

    @property
    def model(self):
        """The ``lightgbm.Booster`` (the live training booster until :meth:`finish`; while it
        trains, its ``num_leaves`` parameter may be the leaf cap its trees grow under, see
        :mod:`budro.backends._lightgbm_leaves`; saved, pickled and finished models say the
        requested value)."""
        self._require_model("model")
        return self._booster

    # -- pickling -----------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self._dataset is not None:  # a training booster: keep its model, with the objective
            state["_booster"] = _lgb().Booster(model_str=self._model_string())
        state["_dataset"] = None
        state["_margins"] = None
        state["_direct"] = None
        state["_cap"] = None
        return state

    # -- helpers ------------------------------------------------------------------------
    def _model_string(self) -> str:
        """The model in LightGBM's text format, with the objective line that the training
        booster (``objective="none"``) lacks."""
        text = _model_text(self._booster)
        if self._dataset is None:  # fit_native, finished or unpickled: LightGBM's own objective
            return text
        objective = "binary sigmoid:1" if self.n_classes_ == 2 else f"multiclass num_class:{self.n_classes_}"
        text = _with_objective_line(text, objective)
        if self._cap is not None:  # grown under a cap: the parameters say what was asked for
            text = _lightgbm_leaves.with_num_leaves(text, int(self._params.get("num_leaves", 31)))
        return text


class _DirectRounds:
    """A fit's rounds after f_0 by the two C functions ``Booster.update(fobj=...)`` and the
    training score's read call (``LGBM_BoosterUpdateOneIterCustom``, ``LGBM_BoosterGetPredict``;
    LightGBM's C API through the package's ctypes handle), with the same arguments, without the
    Python API's work around them every round: ``Booster.eval_train`` with a capturing metric to
    read the margins, the gradients' conversion into fresh float32 arrays and the checks of their
    lengths.  The gradients and hessians are copied into two float32 arrays kept for the fit
    (class-major, as ``Booster.update`` lays them out), the training score into a kept float64
    array; after each round the booster's own cache of the training score is marked stale, as
    ``Booster.update`` marks it, so that ``eval_train`` and the like read it afresh.  The models
    are the same to the bit (``tests/test_backend_lightgbm.py -k direct_rounds``)."""

    def __init__(self, booster, n: int, n_classes: int, lib, check):
        import ctypes

        self._ctypes, self._lib, self._check = ctypes, lib, check
        self._booster, self._handle = booster, booster._handle
        self._n, self._K = n, n_classes
        size = n * (1 if n_classes == 2 else n_classes)
        self._grad = np.empty(size, dtype=np.float32)
        self._hess = np.empty(size, dtype=np.float32)
        self._score = np.empty(size)
        self._grad_p = self._grad.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._hess_p = self._hess.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._score_p = self._score.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        self._length = ctypes.c_int64(0)
        self._finished = ctypes.c_int(0)

    def _class_major(self, a: np.ndarray) -> np.ndarray:
        """The (n, K) view of a kept class-major array (K > 2); the array itself for two classes."""
        return a if self._K == 2 else a.reshape(self._K, self._n).T

    def margins(self) -> np.ndarray:
        """The training score as a fresh array: (n,) for two classes, (n, K) otherwise."""
        self._check(self._lib.LGBM_BoosterGetPredict(self._handle, self._ctypes.c_int(0), self._ctypes.byref(self._length),
                                                     self._score_p))
        if self._length.value != self._score.size:  # pragma: no cover - one score per row and class
            raise BudroError(f"LightGBM returned {self._length.value} training scores, expected {self._score.size}")
        return np.array(self._class_major(self._score))

    @property
    def score(self) -> np.ndarray:
        """The training score as last read by :meth:`margins` (class-major; kept array)."""
        return self._score

    def boost(self, grad: np.ndarray, hess: np.ndarray) -> None:
        """One round on these gradients and hessians ((n,) or (n, K) float64, as the objective
        gives them)."""
        np.copyto(self._class_major(self._grad), grad, casting="same_kind")  # (float32, as Booster.update)
        np.copyto(self._class_major(self._hess), hess, casting="same_kind")
        self.again()

    def again(self) -> None:
        """The round on the gradients and hessians of the last :meth:`boost` (after a rollback)."""
        self._check(self._lib.LGBM_BoosterUpdateOneIterCustom(self._handle, self._grad_p, self._hess_p,
                                                              self._ctypes.byref(self._finished)))
        # Booster.update's own "not predicted yet" for the training and any validation data
        flags = self._booster._Booster__is_predicted_cur_iter
        self._booster._Booster__is_predicted_cur_iter = [False] * len(flags)


#: The C functions that growing under a leaf cap calls (besides _DirectRounds').
_CAP_CALLS = ("LGBM_BoosterGetCurrentIteration", "LGBM_BoosterSaveModelToString", "LGBM_BoosterGetPredict",
              "LGBM_BoosterRollbackOneIter", "LGBM_BoosterResetParameter", "LGBM_BoosterResetTrainingData",
              "LGBM_BoosterUpdateOneIterCustom")


def _c_library(lgb, calls: tuple[str, ...]):
    """``(lib, check)``: LightGBM's ctypes library and its error check, where the lightgbm package
    exposes them with every one of ``calls``; else None."""
    basic = getattr(lgb, "basic", None)
    lib, check = getattr(basic, "_LIB", None), getattr(basic, "_safe_call", None)
    if lib is None or check is None or not all(hasattr(lib, f) for f in calls):
        return None
    return lib, check


def _class_major_copy(margins: np.ndarray) -> np.ndarray:
    """Margins (n,) or (n, K) as LightGBM lays out its training score (class-major, flat)."""
    m = np.asarray(margins, dtype=np.float64)
    return m.copy() if m.ndim == 1 else np.ascontiguousarray(m.T).reshape(-1)


def _direct_rounds(lgb, booster, n: int, n_classes: int) -> "_DirectRounds | None":
    """:class:`_DirectRounds` for a training booster whose f_0 ``Booster.update`` has made (it sets
    the objective to "none" once), or None where the LightGBM package does not expose what it
    needs (its ctypes library and error check, the booster's handle and its list of which
    training scores are current): the rounds then go through ``Booster.update``."""
    found = _c_library(lgb, ("LGBM_BoosterUpdateOneIterCustom", "LGBM_BoosterGetPredict"))
    handle = getattr(booster, "_handle", None)
    predicted = getattr(booster, "_Booster__is_predicted_cur_iter", None)
    if found is None or handle is None or not isinstance(predicted, list):
        return None
    return _DirectRounds(booster, n, n_classes, *found)


def _d0_objective(P: np.ndarray, n_classes: int, scale_pos_weight: float) -> Callable:
    """LightGBM custom objective: the gradient and hessian of D0 weighted by ``P`` (n, K), at the
    current raw margins, collapsed onto the n original rows."""
    if n_classes == 2:
        a = P[:, 0]
        b = P[:, 1] * scale_pos_weight if scale_pos_weight != 1.0 else P[:, 1]
        w = a + b

        def objective(margins, _data):
            # w p - b and w p (1 - p), in place (the same operations, so the same values, without
            # five n-sized temporaries)
            p = expit(margins)
            wp = np.multiply(w, p)
            grad = np.subtract(wp, b)
            np.subtract(1.0, p, out=p)
            np.multiply(wp, p, out=wp)
            return grad, wp

    else:
        w = P.sum(axis=1, keepdims=True)
        factor = n_classes / (n_classes - 1.0)

        def objective(margins, _data):
            m = np.asarray(margins, dtype=np.float64)
            p = np.exp(m - m.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            return w * p - P, factor * w * p * (1.0 - p)

    return objective


#: Bytes reserved per tree node for :func:`_model_text`'s single serialisation (Adult's depth-14
#: trees take 63 bytes a node; a short reservation only costs a second serialisation).
_TEXT_BYTES_PER_NODE = 160


def _model_text(booster) -> str:
    """``booster.model_to_string(num_iteration=-1)``, the same text, serialised once.

    ``model_to_string`` serialises into a 1 MiB buffer and, when the model is larger, allocates
    one of the right size and serialises the whole model again: a finished Adult LightGBM model
    (200 trees of ~860 leaves, 22 MB of text) took 220-280 ms, one serialisation 85-100 ms.  Here
    LightGBM's C function (``LGBM_BoosterSaveModelToString``, the one ``model_to_string`` calls,
    with the same arguments) writes into a buffer reserved for the model's nodes (counted from
    its split importances: splits + trees); should the reservation be short, it is called again
    with the size it reported.  Where the lightgbm package does not expose these names (another
    version), or the system refuses the reservation (MemoryError), ``model_to_string`` itself."""
    try:
        import ctypes

        from lightgbm.basic import _LIB, _dump_pandas_categorical, _safe_call

        handle = booster._handle
        pandas_categorical = booster.pandas_categorical
    except (ImportError, AttributeError):  # pragma: no cover - another lightgbm's internals
        return booster.model_to_string(num_iteration=-1)
    splits = int(np.asarray(booster.feature_importance(importance_type="split"), dtype=np.int64).sum())
    size = (1 << 16) + _TEXT_BYTES_PER_NODE * (2 * splits + booster.num_trees())
    for _ in range(2):
        try:
            buffer = np.empty(size, dtype=np.uint8)  # no zero-filling (ctypes.create_string_buffer's)
        except MemoryError:  # a reservation the system refuses: the library's own way, as it needs
            return booster.model_to_string(num_iteration=-1)
        written = ctypes.c_int64(0)
        _safe_call(_LIB.LGBM_BoosterSaveModelToString(
            handle, ctypes.c_int(0), ctypes.c_int(-1), ctypes.c_int(0),  # all iterations, split importance
            ctypes.c_int64(size), ctypes.byref(written), ctypes.c_char_p(buffer.ctypes.data)))
        if written.value <= size:
            break
        size = written.value
    # written counts the terminating NUL
    return buffer[: written.value - 1].tobytes().decode("utf-8") + _dump_pandas_categorical(pandas_categorical)


def _with_objective_line(text: str, objective: str) -> str:
    """Insert ``objective=...`` into a LightGBM model text that has none, where LightGBM
    writes it (after ``max_feature_idx``).  Only the header (up to the first blank line, before
    the trees) is read: the trees and the parameters at the end hold no such line."""
    end = text.find("\n\n")
    head = text if end < 0 else text[:end]
    if head.startswith("objective=") or "\nobjective=" in head:
        return text
    if head.startswith("max_feature_idx="):
        at = 0
    else:
        at = head.find("\nmax_feature_idx=") + 1
        if at == 0:  # pragma: no cover - LightGBM always writes it
            raise BudroError("unexpected LightGBM model text: no 'max_feature_idx=' line")
    eol = text.find("\n", at)
    if eol < 0:  # pragma: no cover - the header always goes on after this line
        return f"{text}\nobjective={objective}"
    return f"{text[:eol + 1]}objective={objective}\n{text[eol + 1:]}"


# -- structural check of a model text ------------------------------------------------------

_NOT_LGB = "the data is not a valid LightGBM model"


def _lgb_fields(block: str, where: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in block.split("\n"):
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value
    return fields


def _lgb_ints(fields: dict[str, str], key: str, where: str, length: int) -> np.ndarray:
    text = fields.get(key)
    if text is None:
        raise ValidationError(f"{_NOT_LGB}: {where} has no {key!r} line")
    try:
        values = np.array([int(v) for v in text.split()], dtype=np.int64)
    except ValueError:
        raise ValidationError(f"{_NOT_LGB}: {where}: {key!r} must be integers") from None
    if len(values) != length:
        raise ValidationError(f"{_NOT_LGB}: {where}: {key!r} has {len(values)} entries, expected {length}")
    return values


def _lgb_count(fields: dict[str, str], key: str, where: str) -> int:
    return int(_lgb_ints(fields, key, where, 1)[0])


def check_lightgbm_text(text: str, n_features: int | None) -> None:
    """Check the structure of a LightGBM model text before LightGBM parses it; raise
    :class:`~budro.exceptions.ValidationError` naming the tree and node at fault.

    LightGBM cuts the text into trees by the byte sizes listed in its ``tree_sizes`` header and
    trusts them: a truncated model text crashes the process (segmentation fault) while loading.
    This checks the header (``max_feature_idx`` against ``n_features`` when given), that every
    listed size delimits a ``Tree=i`` block followed by ``end of trees``, and in every tree that
    the node arrays have the lengths ``num_leaves`` implies, every split feature is a feature of
    the model, every child is an inner node or a leaf of the tree, and every categorical split
    refers to stored category bitsets."""
    if not text.startswith("tree\n"):
        raise ValidationError(f"{_NOT_LGB}: it does not start with LightGBM's 'tree' header")
    head_end = text.find("\n\n")
    if head_end < 0:
        raise ValidationError(f"{_NOT_LGB}: its header does not end")
    header = _lgb_fields(text[:head_end], "the header")
    n_feat = _lgb_count(header, "max_feature_idx", "the header") + 1
    if n_feat < 1:
        raise ValidationError(f"{_NOT_LGB}: max_feature_idx is {n_feat - 1}")
    if n_features is not None and n_feat != n_features:
        raise ValidationError(f"{_NOT_LGB} for {n_features} features: it has {n_feat}")
    per_round = _lgb_count(header, "num_tree_per_iteration", "the header")
    if per_round < 1:
        raise ValidationError(f"{_NOT_LGB}: num_tree_per_iteration is {per_round}")
    if "tree_sizes" not in header:
        raise ValidationError(f"{_NOT_LGB}: its header has no 'tree_sizes' line")
    try:
        sizes = [int(v) for v in header["tree_sizes"].split()]
    except ValueError:
        raise ValidationError(f"{_NOT_LGB}: 'tree_sizes' must be integers") from None
    data = text.encode("utf-8")  # LightGBM's sizes count bytes
    pos = data.find(b"Tree=", head_end)
    if sizes and pos < 0:
        raise ValidationError(f"{_NOT_LGB}: the header lists {len(sizes)} trees but none follows")
    pos = head_end + 2 if pos < 0 else pos
    for t, size in enumerate(sizes):
        block = data[pos:pos + size] if size > 0 else b""
        if len(block) != size or not block.startswith(f"Tree={t}\n".encode()):
            raise ValidationError(f"{_NOT_LGB}: tree {t} is not where 'tree_sizes' says (the text is cut or edited)")
        _check_lgb_tree(block.decode("utf-8"), t, n_feat)
        pos += size
    if not data[pos:].lstrip(b"\n").startswith(b"end of trees"):
        raise ValidationError(f"{_NOT_LGB}: no 'end of trees' after the {len(sizes)} trees of 'tree_sizes'")


def _check_lgb_tree(block: str, t: int, n_feat: int) -> None:
    where = f"tree {t}"
    fields = _lgb_fields(block, where)
    n_leaves = _lgb_count(fields, "num_leaves", where)
    if n_leaves < 1:
        raise ValidationError(f"{_NOT_LGB}: {where} has {n_leaves} leaves")
    if len((fields.get("leaf_value") or "").split()) != n_leaves:
        raise ValidationError(f"{_NOT_LGB}: {where}: 'leaf_value' must have num_leaves = {n_leaves} entries")
    if n_leaves == 1:
        return
    inner = n_leaves - 1
    split = _lgb_ints(fields, "split_feature", where, inner)
    decision = _lgb_ints(fields, "decision_type", where, inner)
    if len(fields.get("threshold", "").split()) != inner:
        raise ValidationError(f"{_NOT_LGB}: {where}: 'threshold' must have num_leaves - 1 = {inner} entries")
    bad = np.flatnonzero((split < 0) | (split >= n_feat))
    if bad.size:
        i = int(bad[0])
        raise ValidationError(f"{_NOT_LGB}: {where}, node {i}: split feature {int(split[i])} is not in [0, {n_feat})")
    seen: list[np.ndarray] = []
    for key in ("left_child", "right_child"):
        child = _lgb_ints(fields, key, where, inner)
        bad = np.flatnonzero((child >= inner) | (child < -n_leaves) | (child == 0))
        if bad.size:
            i = int(bad[0])
            raise ValidationError(
                f"{_NOT_LGB}: {where}, node {i}: {key} {int(child[i])} is neither an inner node in [1, {inner}) "
                f"nor a leaf in [-{n_leaves}, -1]"
            )
        seen.append(child)
    children = np.concatenate(seen)
    if np.unique(children).size != children.size:
        raise ValidationError(f"{_NOT_LGB}: {where}: a node or leaf is the child of two splits")
    n_cat = _lgb_count(fields, "num_cat", where)
    categorical = (decision & 1) == 1
    if n_cat < 0 or (categorical.any() and n_cat == 0):
        raise ValidationError(f"{_NOT_LGB}: {where}: num_cat is {n_cat}")
    if n_cat > 0:
        bounds = _lgb_ints(fields, "cat_boundaries", where, n_cat + 1)
        n_words = len(fields.get("cat_threshold", "").split())
        if bounds[0] != 0 or (np.diff(bounds) < 0).any() or bounds[-1] != n_words:
            raise ValidationError(f"{_NOT_LGB}: {where}: 'cat_boundaries' do not delimit the {n_words} 'cat_threshold' words")
        try:
            cat_index = np.array([float(v) for v in fields["threshold"].split()])[categorical]
        except ValueError:
            raise ValidationError(f"{_NOT_LGB}: {where}: 'threshold' must be numbers") from None
        bad = np.flatnonzero((cat_index < 0) | (cat_index >= n_cat) | (cat_index != np.round(cat_index)))
        if bad.size:
            node = int(np.flatnonzero(categorical)[bad[0]])
            raise ValidationError(f"{_NOT_LGB}: {where}, node {node}: category set {cat_index[bad[0]]!r} is not in [0, {n_cat})")


def _dataset(lgb, X: np.ndarray, categorical: tuple[int, ...], params: dict[str, Any], **fields: Any):
    """A LightGBM ``Dataset`` of ``X``: NaN missing, the ``categorical`` columns categorical features."""
    return lgb.Dataset(X, params=params, free_raw_data=True,
                       categorical_feature=list(categorical) if categorical else "auto", **fields)


def _categorical_of(text: str) -> tuple[int, ...]:
    """The categorical features of a model text: LightGBM's ``feature_infos`` header gives a
    numeric feature as ``[min:max]`` (or ``none``), a categorical one as its categories ``a:b:c``."""
    for line in text.split("\n"):
        if line.startswith("feature_infos="):
            infos = line[len("feature_infos="):].split()
            return tuple(i for i, info in enumerate(infos) if not info.startswith("[") and info != "none")
        if not line:
            break
    return ()
