"""LightGBM's trees grown under a leaf cap (budro.backends._lightgbm_leaves): the fit of the
requested num_leaves to the bit, also when a tree reaches the cap and its round is grown again."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

lgb = pytest.importorskip("lightgbm")

import budro.backends._lightgbm_leaves as leaves  # noqa: E402
import budro.backends.lightgbm as bl  # noqa: E402
from budro.backends.lightgbm import LightGBMBackend  # noqa: E402

from _direct_rounds import assert_same_rounds, record_rounds  # noqa: E402

N = 600
#: Trees of a few dozen leaves on these data: caps from 4 up are reached at f_0 and at later rounds.
PARAMS = dict(num_leaves=1024, min_sum_hessian_in_leaf=1e-6, learning_rate=0.3, num_threads=2)


def make_data(K=2, n=N, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 6))
    score = X[:, 0] + X[:, 1] * X[:, 2] + 0.5 * rng.normal(size=n)
    cuts = np.quantile(score, np.linspace(0, 1, K + 1)[1:-1])
    return X, np.digitize(score, cuts)


def weights(n, K):
    def make(seed):
        rng = np.random.default_rng(100 + seed)
        P = rng.random((n, K)) * (rng.random((n, K)) < 0.5)  # half the copies carry nothing
        return P / P.sum()

    return make


def fit(K, first_cap, monkeypatch, rounds=8, growth=2, **params):
    """A recorded fit with the first cap ``first_cap`` (None: uncapped) and its finished model text."""
    monkeypatch.setattr(leaves, "FIRST_CAP", first_cap if first_cap is not None else 10**9)
    monkeypatch.setattr(leaves, "GROWTH", growth)
    X, y = make_data(K)
    backend, seen = record_rounds(LightGBMBackend(**{**PARAMS, **params}), X, y, K, weights(len(y), K),
                                  rounds=rounds, random_state=1)
    cap = backend._cap
    events = list(cap.events) if cap is not None else None
    backend.finish()
    return seen, backend.to_native_bytes(), events, cap


@pytest.mark.parametrize("K", [2, 3])
def test_capped_fit_is_the_uncapped_fit_to_the_bit(K, monkeypatch):
    """Caps reached at f_0 and at later rounds: every margin and loss, and the finished model
    text (its parameters included), equal those of the uncapped fit."""
    plain, plain_text, none, _ = fit(K, None, monkeypatch)
    assert none is None  # uncapped: no cap at all
    capped, text, events, cap = fit(K, 4, monkeypatch)
    assert_same_rounds(capped, plain, N, K)
    assert text == plain_text
    assert any(r == 0 for r, *_ in events) and any(r > 0 for r, *_ in events)
    assert [old for _, old, _, _ in events] == [4 * 2**i for i in range(len(events))]  # the cap doubled each time
    assert cap.largest <= cap.cap <= PARAMS["num_leaves"]


@pytest.mark.parametrize("K", [2, 3])
def test_an_inexact_rollback_recomputes_the_score(K, monkeypatch):
    """Where the rollback's score is (made to look) off by a bit, LightGBM recomputes its
    training score tree by tree on a Dataset of the same rows: still the uncapped fit."""
    plain, plain_text, _, _ = fit(K, None, monkeypatch)
    real = leaves.LeafCap.score
    monkeypatch.setattr(leaves.LeafCap, "score", lambda self: np.nextafter(real(self), np.inf))
    capped, text, events, _ = fit(K, 4, monkeypatch)
    assert_same_rounds(capped, plain, N, K)
    assert text == plain_text
    assert events and all(resynced for *_, resynced in events)
    assert any(r > 0 for r, *_ in events)


def test_capped_rounds_through_the_public_api(monkeypatch):
    """Without the direct C rounds (Booster.update every round) the capped fit is the same."""
    plain, plain_text, _, _ = fit(2, None, monkeypatch)
    monkeypatch.setattr(bl, "_direct_rounds", lambda *args: None)
    capped, text, events, _ = fit(2, 4, monkeypatch)
    assert_same_rounds(capped, plain, N, 2)
    assert text == plain_text
    assert any(r > 0 for r, *_ in events)


def test_a_round_grown_again_keeps_depth_limited_trees(monkeypatch):
    """max_depth bounds the leaves (2**max_depth): a cap at that bound never checks a tree."""
    plain, plain_text, _, _ = fit(2, None, monkeypatch, max_depth=3)
    capped, text, events, cap = fit(2, 4096, monkeypatch, max_depth=3)
    assert cap.cap == 8 and not cap.active and events == []
    assert_same_rounds(capped, plain, N, 2)
    assert text == plain_text


@pytest.mark.parametrize(
    "params",
    [dict(bagging_fraction=0.5, bagging_freq=1), dict(feature_fraction=0.5), dict(feature_fraction_bynode=0.5),
     dict(extra_trees=True), dict(monotone_constraints=[1, 0, 0, 0, 0, 0]), dict(num_leaves=31)],
)
def test_no_cap_with_random_draws_constraints_or_few_leaves(params, monkeypatch):
    monkeypatch.setattr(leaves, "FIRST_CAP", 4)
    X, y = make_data()
    backend = LightGBMBackend(**{**PARAMS, **params, "num_leaves": params.get("num_leaves", 1024)})
    if params.get("num_leaves") == 31:
        monkeypatch.setattr(leaves, "FIRST_CAP", 2048)  # 31 <= the first cap: nothing to save
    backend.start(X, y, 2)
    assert backend._cap is None


def test_model_text_and_pickles_say_the_requested_num_leaves(monkeypatch):
    monkeypatch.setattr(leaves, "FIRST_CAP", 16)
    X, y = make_data()
    backend = LightGBMBackend(**PARAMS)
    backend.start(X, y, 2)
    backend.step(weights(N, 2)(0))
    assert backend._cap is not None
    live = pickle.loads(pickle.dumps(backend))  # pickled while training: the model text
    backend.finish()
    for booster in (backend.model, live.model, lgb.Booster(model_str=backend.to_native_bytes().decode())):
        assert int(booster.params["num_leaves"]) == PARAMS["num_leaves"]
        assert "[num_leaves: 1024]" in booster.model_to_string()


def test_with_num_leaves_rewrites_the_parameters_section_only():
    text = "tree\nnum_leaves=5\n\nparameters:\n[boosting: gbdt]\n[num_leaves: 16]\n[max_depth: 4]\nend of parameters\n"
    out = leaves.with_num_leaves(text, 4096)
    assert out == text.replace("[num_leaves: 16]", "[num_leaves: 4096]")
    assert leaves.with_num_leaves("tree\nnum_leaves=5\n", 7) == "tree\nnum_leaves=5\n"


def test_effective_leaves_and_first_cap():
    assert leaves.effective_leaves({}) == 31
    assert leaves.effective_leaves({"num_leaves": 16384, "max_depth": 14}) == 16384
    assert leaves.effective_leaves({"num_leaves": 16384, "max_depth": 5}) == 32
    assert leaves.effective_leaves({"num_leaves": 100, "max_depth": -1}) == 100
    assert leaves.first_cap({"num_leaves": 16384, "max_depth": 14}) == leaves.FIRST_CAP
    assert leaves.first_cap({"num_leaves": 16384, "max_depth": 5}) == 32
    assert leaves.first_cap({"num_leaves": 64}) is None
    assert leaves.first_cap({"num_leaves": 16384, "feature_fraction": 0.9}) is None
