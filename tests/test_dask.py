"""budro.dask.DaskBuDROClassifier on a LocalCluster of two worker processes (issue 15).

What is checked: one partition gives the single-machine model; with several partitions every
round's robust loss and eta are those of budro's DualSolver on the union of the partitions' lists
and the same losses, and the trees are those of one machine trained with that solver's plans on
the same (quantile-coded) features; the local model predicts what the distributed one does and
saves with budro's model format; the neighbour recall is what a brute-force count gives; bad
inputs fail before any work, a lost worker and a closed client raise ClusterError and leave no
model.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

pytest.importorskip("distributed")
pytest.importorskip("dask.dataframe")

import dask.array as da  # noqa: E402
import dask.dataframe as dd  # noqa: E402
import pandas as pd  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402

from budro import BuDROClassifier  # noqa: E402
from budro.dask import ClusterError, DaskBuDROClassifier  # noqa: E402
from budro.exceptions import ValidationError  # noqa: E402
from budro.solvers import _sparse_kernels  # noqa: E402
from budro.solvers.dual import DualSolver  # noqa: E402
from budro.transport import NeighborCost, TransportProblem  # noqa: E402

PARAMS = dict(n_neighbors=8, n_steps=4, eps=0.02, protected=[4], random_state=0,
              backend_params={"max_depth": 3, "nthread": 1})


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                               env={"OMP_NUM_THREADS": "1"})
    c = Client(cluster)
    yield c
    c.close()
    cluster.close()


def _data(n=2400, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.normal(size=n) > 0).astype(int)
    return X, y


def _clustered(seed=1):
    """Two far-apart groups: a small one (400 rows) all of label 0, a large one (2000) mixed."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(400, 5)) * 0.5
    a[:, 0] += 12.0
    b = rng.normal(size=(2000, 5))
    X = np.vstack([a, b])
    y = np.concatenate([np.zeros(400, dtype=int), (b[:, 1] + rng.normal(size=2000) > 0).astype(int)])
    perm = rng.permutation(len(y))
    return X[perm], y[perm]


def _dask(X, y, rows=800):
    return da.from_array(X, chunks=(rows, X.shape[1])), da.from_array(y, chunks=rows)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# -- exactness ---------------------------------------------------------------------------------

def test_one_partition_is_the_single_machine_model(client, tmp_path):
    from budro.persist import load_model, save_model

    X, y = _data()
    dX, dy = _dask(X, y)
    est = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **PARAMS).fit, dX, dy)
    single = _quiet(BuDROClassifier(**PARAMS).fit, X, y)
    proba = est.predict_proba(dX)
    assert isinstance(proba, da.Array)
    assert np.abs(proba.compute() - single.predict_proba(X)).max() <= 1e-6
    assert len(est.history_) == len(single.history_) == PARAMS["n_steps"]
    for a, b in zip(est.history_, single.history_):
        assert a.robust_loss == pytest.approx(b.robust_loss, abs=1e-12)
        assert a.plain_loss == pytest.approx(b.plain_loss, abs=1e-12)
        assert a.eta == pytest.approx(b.eta, rel=1e-12)
        assert a.eta > 0  # the budget binds: the search did real work
        assert a.bytes_sent > 0 and a.bytes_received > 0 and a.time_tree > 0
    assert est.bin_edges_ is None and est.neighbor_recall_ == 1.0
    assert set(est.timings_) >= {"check", "metric", "partition", "shards", "start", "rounds", "finish"}
    import pickle

    again = pickle.loads(pickle.dumps(est))  # the client stays behind, the model travels
    assert again.client is None and np.abs(again.predict_proba(X) - single.predict_proba(X)).max() <= 1e-6
    local = est.to_local()
    assert type(local) is BuDROClassifier
    np.testing.assert_array_equal(local.predict(X), single.predict(X))
    np.testing.assert_array_equal(est.predict(dX).compute(), single.predict(X))
    path = tmp_path / "m.budro"
    save_model(local, path)
    assert np.abs(load_model(path).predict_proba(X) - single.predict_proba(X)).max() <= 1e-6


def _union_problem(est, t):
    """Round t's problem on the union of the shards' lists, columns in the shards' order."""
    rec = est.recorded_
    rows = np.concatenate([r["rows"] for r in rec])
    pos = np.empty(rows.size, dtype=np.intp)
    pos[rows] = np.arange(rows.size)
    nb = pos[np.concatenate([r["neighbors"] for r in rec])]
    cost = NeighborCost.from_lists(nb, np.concatenate([r["neighbor_costs"] for r in rec]))
    L = np.concatenate([r["losses"][t] for r in rec])
    y = np.concatenate([r["y"] for r in rec])
    return rows, TransportProblem(L, y, cost, est.eps_effective_)


def test_several_partitions_each_round_is_the_dual_solve_on_the_union(client):
    """Uneven k-means partitions, one of them holding one class only: every round's robust loss,
    eta and budget use equal DualSolver's on the union of the lists; the trees are one machine's
    grown with DualSolver's plans on the same quantile codes."""
    from budro.backends.xgboost import XGBoostBackend
    from budro.dask._shard import codes

    X, y = _clustered()
    dX, dy = _dask(X, y)
    est = DaskBuDROClassifier(client=client, n_partitions=3, **PARAMS)
    est._record = True
    _quiet(est.fit, dX, dy)
    sizes = est.partition_sizes_
    assert max(sizes) >= 2 * min(sizes)  # very different sizes
    one_class = [np.unique(np.concatenate([r["y"][r["cell"] == c] for r in est.recorded_])).size == 1
                 for c in range(3)]
    assert any(one_class)
    assert len(est.shard_cells_) == 2 and est.bin_edges_ is not None
    backend = XGBoostBackend(max_depth=3, nthread=1)
    rows0, _ = _union_problem(est, 0)
    backend.start(codes(X[rows0], est.bin_edges_), y[rows0], 2, random_state=0)
    solver = DualSolver()
    for t, record in enumerate(est.history_):
        rows, problem = _union_problem(est, t)
        np.testing.assert_allclose(problem.losses, backend.losses(), atol=1e-6)
        result = solver.solve(problem)
        assert result.info["certified"] and record.converged
        assert record.robust_loss == pytest.approx(result.objective, abs=1e-12)
        assert record.eta == pytest.approx(result.eta, rel=1e-12) and record.eta > 0
        assert record.transport_cost == pytest.approx(problem.eps, rel=1e-9)
        backend.step(result.weights)
    local = est.to_local()
    margins = backend.predict_margin(codes(X[rows0], est.bin_edges_))
    assert np.abs(local.decision_margin(X[rows0]) - margins).max() <= 1e-5
    assert np.abs(local.predict_proba(X) - est.predict_proba(dX).compute()).max() <= 1e-6


def test_three_classes_on_two_shards(client):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(1500, 5))
    y = np.digitize(X[:, 0] + 0.5 * rng.normal(size=1500), [-0.5, 0.5])
    dX, dy = _dask(X, y, rows=500)
    est = DaskBuDROClassifier(client=client, n_partitions=2, **{**PARAMS, "n_steps": 3})
    est._record = True
    _quiet(est.fit, dX, dy)
    assert est.classes_.tolist() == [0, 1, 2] and len(est.shard_cells_) == 2
    for t, record in enumerate(est.history_):
        _, problem = _union_problem(est, t)
        result = DualSolver().solve(problem)
        assert record.robust_loss == pytest.approx(result.objective, abs=1e-12) and record.eta > 0
    proba = est.predict_proba(dX).compute()
    assert proba.shape == (1500, 3) and np.abs(est.to_local().predict_proba(X) - proba).max() <= 1e-6


def test_neighbor_recall_is_the_share_of_kept_pairs(client):
    from sklearn.neighbors import NearestNeighbors

    X, y = _data(seed=3)
    dX, dy = _dask(X, y)
    est = DaskBuDROClassifier(client=client, n_partitions=4, **{**PARAMS, "n_steps": 1})
    est._record = True
    _quiet(est.fit, dX, dy)
    cell = np.empty(len(y), dtype=int)
    for r in est.recorded_:
        cell[r["rows"]] = r["cell"]
    Z = est.fair_metric_.embed(X)
    idx = NearestNeighbors(n_neighbors=PARAMS["n_neighbors"]).fit(Z).kneighbors(Z, return_distance=False)[:, 1:]
    true = float((cell[idx] == cell[:, None]).mean())
    assert 0.5 < true < 1.0
    assert est.neighbor_recall_ == pytest.approx(true, abs=0.04)
    blocks = DaskBuDROClassifier(client=client, n_partitions=4, partitioning="blocks", **{**PARAMS, "n_steps": 1})
    _quiet(blocks.fit, dX, dy)
    assert blocks.neighbor_recall_ < est.neighbor_recall_ - 0.3  # k-means keeps near points together


def test_dataframe_and_in_memory_inputs(client):
    X, y = _data(n=1200, seed=4)
    names = [f"f{j}" for j in range(5)]
    df = pd.DataFrame(X, columns=names)
    ddf = dd.from_pandas(df, npartitions=3)
    dys = dd.from_pandas(pd.Series(y), npartitions=3)
    params = {**PARAMS, "protected": ["f4"], "n_steps": 2}
    a = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **params).fit, ddf, dys)
    b = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **params).fit, df, y)
    assert list(a.feature_names_in_) == names and a.protected_indices_ == (4,)
    single = _quiet(BuDROClassifier(**params).fit, df, y)
    for est in (a, b):
        assert np.abs(est.predict_proba(df) - single.predict_proba(df)).max() <= 1e-6
    assert np.abs(a.predict_proba(ddf).compute() - single.predict_proba(df)).max() <= 1e-6


def test_fit_asks_the_scheduler_for_the_workers_not_the_clients_cached_record(client, monkeypatch):
    """``Client.scheduler_info()`` returns the client's identity record, which its periodic refresh
    replaces with one listing no workers; a fit that read it just after a refresh failed with "the
    Dask cluster has no workers" (once, in CI).  With that record, the fit still finds both
    workers (``Client.nthreads``) and gives the model it gives otherwise."""
    X, y = _data(n=600, seed=6)
    params = {**PARAMS, "n_steps": 2}
    ref = _quiet(DaskBuDROClassifier(client=client, n_partitions=2, **params).fit, X, y)
    monkeypatch.setattr(client, "scheduler_info", lambda *a, **k: {"workers": {}})
    est = _quiet(DaskBuDROClassifier(client=client, **params).fit, X, y)
    assert len(client.nthreads()) == 2 and est.n_partitions_ == 2
    np.testing.assert_array_equal(est.predict_proba(X), ref.predict_proba(X))


# -- tables: strings, categories, booleans, missing values ------------------------------------

def _table(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "age": rng.normal(40, 10, n),
        "income": np.where(rng.random(n) < 0.1, np.nan, rng.normal(50, 15, n)),
        "job": rng.choice(["a", "b", "c", "d"], n).astype(object),
        "sex": rng.choice(["F", "M"], n).astype(object),
        "city": pd.Categorical(rng.choice(["x", "y", "z"], n)),
        "owner": rng.random(n) < 0.3,
    })
    df.loc[rng.random(n) < 0.05, "job"] = None
    y = ((df["age"] - 40) / 10 + (df["job"] == "a") + rng.normal(size=n) > 0.5).astype(int).to_numpy()
    return df, y


def _dask_table(df, y, npartitions=3):
    import dask

    with dask.config.set({"dataframe.convert-string": False}):  # the columns' own dtypes
        return (dd.from_pandas(df, npartitions=npartitions, sort=False),
                dd.from_pandas(pd.Series(y), npartitions=npartitions, sort=False))


TABLE_PARAMS = {**PARAMS, "protected": ["sex"]}


def test_table_on_one_partition_is_the_single_machine_model(client, tmp_path):
    """A dask DataFrame with text, categorical, boolean columns and missing values goes through
    the same TableEncoder as BuDROClassifier (fitted on every row with metric_sample=None): the
    same encoder, rounds and model; the local model keeps the encoder, saves and loads."""
    from budro.persist import load_model, save_model

    df, y = _table()
    ddf, dys = _dask_table(df, y)
    est = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **TABLE_PARAMS).fit, ddf, dys)
    single = _quiet(BuDROClassifier(**TABLE_PARAMS).fit, df, y)
    assert est.table_ is not None and est.table_.categories_ == single.table_.categories_
    assert list(est.feature_names_in_) == list(df.columns) and est.protected_indices_ == (3,)
    assert est.table_.categorical_features_ == single.table_.categorical_features_ != ()
    for a, b in zip(est.history_, single.history_):
        assert a.robust_loss == pytest.approx(b.robust_loss, abs=1e-12)
        assert a.eta == pytest.approx(b.eta, rel=1e-12) and a.eta > 0
    proba = est.predict_proba(ddf)
    assert isinstance(proba, da.Array)
    assert np.abs(proba.compute() - single.predict_proba(df)).max() <= 1e-6
    assert np.abs(est.predict_proba(df) - single.predict_proba(df)).max() <= 1e-6
    np.testing.assert_array_equal(est.predict(ddf).compute(), single.predict(df))
    path = tmp_path / "table.budro"
    save_model(est.to_local(), path)
    loaded = load_model(path)
    assert loaded.table_ is not None
    assert np.abs(loaded.predict_proba(df) - single.predict_proba(df)).max() <= 1e-6
    # in-memory pandas input is scattered as a table too
    again = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **TABLE_PARAMS).fit, df, y)
    assert np.abs(again.predict_proba(df) - single.predict_proba(df)).max() <= 1e-6


def test_table_on_several_partitions_each_round_is_the_dual_solve_on_the_union(client):
    """Two partitions of a table: category codes go to XGBoost as they are (not quantile coded),
    missing values stay missing in the codes; every round is DualSolver's on the union of the
    lists, and the local model (raw table in, thresholds mapped back) gives the margins of one
    machine trained with those plans on the coded booster matrix."""
    from budro.backends.xgboost import XGBoostBackend
    from budro.dask._shard import codes

    df, y = _table(seed=2)
    ddf, dys = _dask_table(df, y)
    est = DaskBuDROClassifier(client=client, n_partitions=2, **TABLE_PARAMS)
    est._record = True
    _quiet(est.fit, ddf, dys)
    cat = est.table_.categorical_features_
    assert cat and all(est.bin_edges_[j] is None for j in cat)
    assert all(est.bin_edges_[j] is not None for j in range(len(est.bin_edges_)) if j not in cat)
    B = est.table_.booster_matrix(df)
    coded = codes(B, est.bin_edges_)
    assert np.isnan(coded).sum() == np.isnan(B).sum() > 0  # missing stays missing
    rows0, _ = _union_problem(est, 0)
    backend = XGBoostBackend(max_depth=3, nthread=1)
    backend.start(coded[rows0], y[rows0], 2, random_state=0, categorical_features=cat)
    solver = DualSolver()
    for t, record in enumerate(est.history_):
        _, problem = _union_problem(est, t)
        np.testing.assert_allclose(problem.losses, backend.losses(), atol=1e-6)
        result = solver.solve(problem)
        assert record.robust_loss == pytest.approx(result.objective, abs=1e-12) and record.eta > 0
        backend.step(result.weights)
    local = est.to_local()
    margins = backend.predict_margin(coded[rows0])
    assert np.abs(local.decision_margin(df.iloc[rows0]) - margins).max() <= 1e-5
    assert np.abs(local.predict_proba(df) - est.predict_proba(ddf).compute()).max() <= 1e-6


def test_table_categories_come_from_every_row(client):
    """With metric_sample the encoder's statistics come from the sample, its categories from
    every row: a category absent from the sample is still a category of the model."""
    df, y = _table(n=1500, seed=5)
    df.loc[7, "job"] = "rare"
    ddf, dys = _dask_table(df, y)
    params = {**TABLE_PARAMS, "n_steps": 1}
    est = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, metric_sample=200, **params).fit, ddf, dys)
    assert "rare" in est.table_.categories_["job"]
    with pytest.raises(ValidationError, match="'job' has more than max_categories=3"):
        DaskBuDROClassifier(client=client, max_categories=3, **params).fit(ddf, dys)
    with pytest.raises(ValidationError, match="max_categories must be an integer >= 2, got 'many'"):
        DaskBuDROClassifier(client=client, max_categories="many", **params).fit(ddf, dys)
    with pytest.raises(ValidationError, match="preprocessing='none' takes numeric columns only"):
        DaskBuDROClassifier(client=client, preprocessing="none", **params).fit(ddf, dys)
    with pytest.raises(ValidationError, match="protected attribute 'gender' is not a column"):
        _quiet(DaskBuDROClassifier(client=client, **{**params, "protected": ["gender"]}).fit, ddf, dys)


def test_missing_values_in_an_array_go_through_the_table_encoder(client):
    X, y = _data(n=900, seed=6)
    X[::17, 2] = np.nan
    params = {**PARAMS, "n_steps": 2}
    est = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **params).fit, *_dask(X, y, rows=300))
    single = _quiet(BuDROClassifier(**params).fit, X, y)
    assert est.table_ is not None and single.table_ is not None
    assert np.abs(est.predict_proba(X) - single.predict_proba(X)).max() <= 1e-6
    dX, dy = _dask(X, y, rows=300)
    assert np.abs(est.predict_proba(dX).compute() - single.predict_proba(X)).max() <= 1e-6
    with pytest.raises(ValidationError, match="preprocessing='none' takes numeric data without missing values"):
        DaskBuDROClassifier(client=client, preprocessing="none", **params).fit(dX, dy)
    # numeric DataFrames with missing values keep their column names (protected by name)
    df = pd.DataFrame(X, columns=[f"f{j}" for j in range(5)])
    named = {**params, "protected": ["f4"]}
    single = _quiet(BuDROClassifier(**named).fit, df, y)
    ddf, dys = _dask_table(df, y)
    for data, labels in ((df, y), (ddf, dys)):
        est = _quiet(DaskBuDROClassifier(client=client, n_partitions=1, **named).fit, data, labels)
        assert est.table_ is not None and list(est.feature_names_in_) == list(df.columns)
        assert np.abs(est.predict_proba(df) - single.predict_proba(df)).max() <= 1e-6


def test_importing_budro_dask_does_not_import_dask():
    import subprocess
    import sys

    code = ("import sys, budro, budro.dask, budro.dask._cluster; from budro.dask import DaskBuDROClassifier; "
            "assert 'dask' not in sys.modules and 'distributed' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- bad input ---------------------------------------------------------------------------------

def test_bad_inputs_fail_before_work(client):
    X, y = _data(n=600)
    dX, dy = _dask(X, y, rows=200)
    est = DaskBuDROClassifier(client=client, **PARAMS)
    with pytest.raises(ValidationError, match="unknown chunk sizes"):
        est.fit(dX[dX[:, 0] > 0], dy[dX[:, 0] > 0])
    with pytest.raises(ValidationError, match="must hold numbers"):
        est.fit(da.from_array(X.astype(str), chunks=(200, 5)), dy)
    with pytest.raises(ValidationError, match="600 rows but y has 599"):
        est.fit(dX, dy[:599])
    bad = X.copy()
    bad[5, 2] = np.inf
    with pytest.raises(ValidationError, match="1 infinite"):
        est.fit(da.from_array(bad, chunks=(200, 5)), dy)
    with pytest.raises(ValidationError, match="preprocessing must be one of"):
        DaskBuDROClassifier(client=client, preprocessing="onehot", **PARAMS).fit(dX, dy)
    with pytest.raises(ValidationError, match="at least 2 classes"):
        est.fit(dX, da.zeros(600, chunks=200, dtype=int))
    with pytest.raises(ValidationError, match="n_neighbors set to an integer"):
        DaskBuDROClassifier(client=client, **{**PARAMS, "n_neighbors": None}).fit(dX, dy)
    for name in ("lightgbm", "catboost"):
        with pytest.raises(ValidationError, match="soft labels"):
            DaskBuDROClassifier(client=client, **{**PARAMS, "backend": name, "backend_params": {}}).fit(dX, dy)
    with pytest.raises(ValidationError, match="solver='dual'"):
        DaskBuDROClassifier(client=client, **{**PARAMS, "solver": "entropic"}).fit(dX, dy)
    with pytest.raises(ValidationError, match="partitioning"):
        DaskBuDROClassifier(client=client, partitioning="random", **PARAMS).fit(dX, dy)
    with pytest.raises(ValidationError, match="fewer than n_neighbors"):
        _quiet(DaskBuDROClassifier(client=client, n_partitions=100, **PARAMS).fit, dX, dy)
    with pytest.raises(NotFittedError):
        est.predict(X)
    assert not hasattr(est, "history_")
    # Two features, one protected: the metric's embedding has no dimensions (all fair distances
    # 0), so k-means cannot arrange rows by locality: a clear error, not scikit-learn's traceback.
    flat = np.column_stack([X[:, 0], (X[:, 1] > 0).astype(float)])
    with pytest.raises(ValidationError, match="embedding has no dimensions.*partitioning='blocks'"):
        _quiet(DaskBuDROClassifier(client=client, **{**PARAMS, "protected": [1]}).fit, *_dask(flat, y, rows=200))


def test_no_client_is_a_clear_error(client, monkeypatch):
    import distributed

    def none():
        raise ValueError("No clients found")

    monkeypatch.setattr(distributed, "get_client", none)
    X, y = _data(n=300)
    with pytest.raises(ValidationError, match="there is none"):
        DaskBuDROClassifier(**PARAMS).fit(*_dask(X, y, rows=100))
    with pytest.raises(ValidationError, match="client must be a distributed.Client"):
        DaskBuDROClassifier(client="tcp://x", **PARAMS).fit(*_dask(X, y, rows=100))


def test_closed_client_mid_fit_raises_and_keeps_no_model(client):
    X, y = _data(n=1200, seed=5)
    other = Client(client.scheduler.address)
    dX, dy = other.persist(list(_dask(X, y, rows=400)))

    def close(info):
        if info.record.step == 1:
            other.close()

    est = DaskBuDROClassifier(client=other, n_partitions=2, callbacks=[close], **PARAMS)
    with pytest.raises(ClusterError, match="client was closed"):
        _quiet(est.fit, dX, dy)
    with pytest.raises(NotFittedError):
        est.to_local()


def test_lost_worker_between_rounds_raises_and_keeps_no_model(client):
    """Last in the module: a worker process is killed (its nanny starts a new one)."""
    X, y = _data(n=1200, seed=6)
    dX, dy = _dask(X, y, rows=400)
    workers = sorted(client.nthreads())  # (not scheduler_info(): see the test above on its cached record)

    def kill(info):
        if info.record.step == 1:
            f = client.submit(os._exit, 1, workers=[workers[1]], pure=False)
            time.sleep(0.5)
            f.cancel()

    est = DaskBuDROClassifier(client=client, n_partitions=2, callbacks=[kill], **PARAMS)
    with pytest.raises(ClusterError, match=f"on the worker\\(s\\) {workers[1]}.*lost"):
        _quiet(est.fit, dX, dy)
    with pytest.raises(NotFittedError):
        est.to_local()


# -- the distributed search in one process (no cluster) ----------------------------------------

class _Weights:
    """A backend stand-in that keeps the weights a shard steps with."""

    def step(self, weights):
        self.weights = np.asarray(weights)


class _InProcess:
    """budro.dask._search.Shards' call protocol on shards in this process."""

    def __init__(self, shards):
        from budro.dask._search import Traffic

        self.shards = shards
        self.traffic = Traffic()

    def __len__(self):
        return len(self.shards)

    def call(self, method, *args, per_shard=None):
        return [getattr(s, method)(*(per_shard[a] if per_shard is not None else args)) for a, s in enumerate(self.shards)]


def _distributed_round(parts, eps, guess=None, monkeypatch=None, floors=None, shards=None):
    """The client's round (hulls, search, budget split, recovery) on in-process shards; returns
    the global objective, transport cost, eta, certified flag and the weights in shard order.
    ``floors``: the hulls exact from its floor (as a fit's rounds after the first two);
    ``shards``: those of an earlier round (their losses replaced), else new ones."""
    from budro.dask import _search
    from budro.dask._shard import Shard

    if shards is None:
        shards = [Shard.on_lists(L, y, cost, DualSolver(), _Weights()) for L, y, cost in parts]
    else:
        for s, (L, _, _) in zip(shards, parts):
            s.losses = L
    for s in shards:
        s.round_losses = None  # the losses are given
    group = _InProcess(shards)
    N = sum(s.n for s in shards)
    scale = max(float(np.abs(L).max()) for L, _, _ in parts)
    if guess is not None:
        monkeypatch.setattr(_search, "select_breakpoint", lambda *a: (guess(a), 0))
    _, solve, _ = _search.hulls_and_solve(group, scale, N, eps, 100, floors)
    shares = _search.budget_shares(group, solve, N, eps)
    steps = group.call("recover_and_step", per_shard=[(solve.cheap, solve.dear, solve.switch, s) for s in shares])
    objective = sum(r[0] * s.n for r, s in zip(steps, shards)) / N
    transport = sum(r[1] * s.n for r, s in zip(steps, shards)) / N
    weights = np.concatenate([s.backend.weights * s.n / N for s in shards])
    _distributed_round.last = shards
    return objective, transport, solve, weights


def _random_parts(rng, sizes, K, m, ties):
    parts = []
    for n_a in sizes:
        Z = rng.normal(size=(n_a, 2))
        if ties:
            Z = np.round(Z * 2) / 2  # duplicate points: zero costs and equal costs
        L = rng.exponential(size=(n_a, K))
        if ties:
            L = np.round(L * 4) / 4  # tied losses
        parts.append((L, rng.integers(0, K, size=n_a), _lists(Z, min(m, n_a))))
    return parts


def _lists(Z, m):
    """Each point's m nearest points (itself first), by brute force."""
    d = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(axis=2)
    order = np.argsort(np.where(np.eye(len(Z), dtype=bool), -1.0, d), axis=1, kind="stable")[:, :m]
    return NeighborCost.from_lists(order, np.take_along_axis(d, order, axis=1))


def _union(parts, eps):
    offsets = np.cumsum([0] + [p[0].shape[0] for p in parts])
    width = min(p[2].neighbors.shape[1] for p in parts)
    nb = np.concatenate([p[2].neighbors[:, :width] + o for p, o in zip(parts, offsets)])
    nc = np.concatenate([p[2].neighbor_costs[:, :width] for p in parts])
    return TransportProblem(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                            NeighborCost.from_lists(nb, nc), eps)


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n_shards=st.integers(1, 3), K=st.integers(2, 3), m=st.integers(2, 6),
       ties=st.booleans(), budget=st.floats(0.0, 1.5), guess=st.sampled_from([None, 0.0, 0.3, 3.0]),
       window=st.sampled_from([None, (2, 1), (3, 4)]), renumber=st.booleans())
def test_property_distributed_search_is_the_dual_solve_on_the_union(monkeypatch, seed, n_shards, K, m, ties, budget,
                                                                       guess, window, renumber):
    """Any split of the columns into shards (lists within each), ties included, windows of any
    size, and a wrong breakpoint guess (the bracketing and Kelley fallback): the same eta,
    objective, budget and plan as DualSolver on the union of the lists, columns in shard order.
    ``renumber``: the shards solve on their lists renumbered by locality (as from LOCALITY_MIN_N
    rows) and give the weights back in their own row order (among tied rows another plan of
    the same value may be chosen)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(m, 60, size=n_shards)  # every shard at least m rows, as fit requires
    parts = _random_parts(rng, sizes, K, m, ties)
    union = _union(parts, 0.0)
    mean_max = float(union.cost.neighbor_costs.max(axis=1).mean())
    eps = budget * mean_max
    problem = TransportProblem(union.losses, union.labels, union.cost, eps)
    expected = DualSolver().solve(problem)
    wrong = None if guess is None else (lambda a: guess * max(expected.eta, 1e-3))
    with monkeypatch.context() as mp:
        if window is not None:  # tiny windows: many selection steps (quantiles, then breakpoints)
            from budro.dask import _search

            mp.setattr(_search, "N_QUANTILES", window[0])
            mp.setattr(_search, "MAX_PAIRS", window[1])
        if renumber:
            from budro.solvers import _dual_sparse

            mp.setattr(_dual_sparse, "LOCALITY_MIN_N", 1)
        objective, transport, solve, weights = _distributed_round(parts, eps, wrong, mp)
    assert solve.certified == expected.info["certified"]
    assert objective == pytest.approx(expected.objective, rel=1e-9, abs=1e-12)
    assert transport <= eps * (1 + 1e-9) + 1e-15
    if guess is None:  # (from another start a flat piece of g may be certified at another of its points)
        assert solve.eta == pytest.approx(expected.eta, rel=1e-9, abs=1e-12)
        if not (renumber and ties):
            np.testing.assert_allclose(weights, expected.weights, atol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=0), problem.label_shares, atol=1e-12)
    if renumber:  # the shards keep only the renumbered lists, and give back the given ones
        for shard, (_, _, cost) in zip(_distributed_round.last, parts):
            assert shard.perm is not None
            nb, nc = shard.own_lists()
            np.testing.assert_array_equal(nb, cost.neighbors)
            np.testing.assert_array_equal(nc, cost.neighbor_costs)


def test_hulls_from_a_floor_follow_rising_eta_and_fall_back_when_it_drops():
    """Rounds whose budget shrinks (eta* rises, as in a fit) and then grows: from the third round
    the shards' hulls are exact from a floor under the last two eta* (fewer breakpoints); the
    round whose eta* falls below it makes them again without one.  Every round is DualSolver's
    solve on the union of the lists (a fresh solver, from 0)."""
    from budro.solvers import _dual_plan

    rng = np.random.default_rng(4)
    parts = _random_parts(rng, [50, 40], 2, 6, ties=True)
    for k, (L, y, cost) in enumerate(parts):  # losses that rise with the distance, as in a fit
        parts[k] = (L + 0.3 * cost.neighbor_costs.mean(axis=1, keepdims=True), y, cost)
    union = _union(parts, 0.0)
    mean_max = float(union.cost.neighbor_costs.max(axis=1).mean())
    floors = _dual_plan.EtaFloor()
    shards, used, below = None, [], []
    for budget in [0.32, 0.28, 0.22, 0.16, 0.5, 0.45]:
        eps = budget * mean_max
        problem = TransportProblem(union.losses, union.labels, union.cost, eps)
        expected = DualSolver().solve(problem)
        objective, transport, solve, weights = _distributed_round(parts, eps, floors=floors, shards=shards)
        shards = _distributed_round.last
        assert solve.certified and solve.eta == pytest.approx(expected.eta, rel=1e-9, abs=1e-12)
        assert objective == pytest.approx(expected.objective, rel=1e-9, abs=1e-12)
        assert transport <= eps * (1 + 1e-9) + 1e-15
        used.append(solve.info["floor"])
        below.append(floors.rest == _dual_plan.EtaFloor.REST)
    if not _sparse_kernels.available():  # the numpy path makes no hulls from a floor
        assert used == [0.0] * 6
        return
    assert used[:2] == [0.0, 0.0] and used[2] > 0.0 and used[3] > 0.0
    assert not any(below[:4]) and below[4]  # the budget grown: eta* under the floor, the fallback
    assert used[5] == 0.0  # and no floor for the next rounds


def test_tracker_is_started_with_a_bootstrap_and_shutdown_timeout():
    """XGBoost's tracker on the scheduler gets COLLECTIVE_TIMEOUT (xgboost.dask's default, none,
    would leave its thread waiting for ever after a fit that failed before every shard joined)."""
    from budro.dask import _estimator

    calls = []

    class _Scheduler:
        address = "tcp://127.0.0.1:8786"

    class _Client:
        scheduler = _Scheduler()

        def run_on_scheduler(self, function, *args):
            calls.append((function.__name__, args))
            return {"dmlc_tracker_uri": "127.0.0.1", "dmlc_tracker_port": 9091}

    out = _estimator._tracker_args(_Client(), 3)
    assert calls == [("_start_tracker", (3, "127.0.0.1", None, _estimator.COLLECTIVE_TIMEOUT))]
    assert out == [{"dmlc_tracker_uri": "127.0.0.1", "dmlc_tracker_port": 9091}] * 3
    assert 0 < _estimator.COLLECTIVE_TIMEOUT
