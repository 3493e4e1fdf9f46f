"""The ``[cluster]`` config section: validation (no cluster needed), connecting, and ``budro fit`` /
``budro experiment`` on a two-worker LocalCluster."""

from __future__ import annotations

import socket
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from budro.config import parse_config
from budro.dask._cluster import CLUSTER_KEYS, LOCAL_KEYS, client_from_config, parse_cluster_section, to_dask
from budro.exceptions import ConfigError

BASE = {"eps": 0.05, "n_steps": 3, "n_neighbors": 8, "protected": ["x1"], "data": {"source": "synthetic"}}


def _config(cluster):
    return parse_config({**BASE, "cluster": cluster})


def test_no_cluster_section_means_this_machine():
    assert parse_config(BASE).cluster is None


def test_valid_sections_are_filled_in():
    cfg = _config({"local": {"n_workers": 3, "memory_limit": "4GiB"}, "n_partitions": 6})
    assert cfg.cluster == {"local": {"n_workers": 3, "threads_per_worker": 1, "processes": True,
                                     "memory_limit": "4GiB"},
                           "n_partitions": 6, "partitioning": "kmeans", "metric_sample": None}
    assert parse_cluster_section(cfg.cluster) == cfg.cluster  # validated twice (config, then connect): the same
    cfg = _config({"address": "tcp://10.0.0.5:8786", "timeout": 2.5, "metric_sample": 10_000})
    assert cfg.cluster["address"] == "tcp://10.0.0.5:8786" and cfg.cluster["timeout"] == 2.5
    assert cfg.cluster["metric_sample"] == 10_000 and "local" not in cfg.cluster
    assert parse_cluster_section(cfg.cluster) == cfg.cluster
    assert _config({"address": "tcp://h:1"}).cluster["timeout"] == 10.0


@pytest.mark.parametrize("cluster, message", [
    ({"adress": "tcp://h:1"}, r"unknown config key 'cluster.adress'; allowed: address, local, timeout, n_partitions"),
    ({"address": "tcp://h:1", "local": {}}, r"exactly one of 'cluster.address' .* it has both"),
    ({"n_partitions": 2}, r"exactly one of 'cluster.address' .* it has neither"),
    ({"address": "h:8786"}, r"'cluster.address' must be a scheduler address such as \"tcp://host:8786\", got 'h:8786'"),
    ({"address": 8786}, r"'cluster.address' must be a scheduler address"),
    ({"local": 2}, r"'cluster.local' must be a table such as \{ n_workers = 2 \}"),
    ({"local": {"workers": 2}}, r"unknown config key 'cluster.local.workers'; allowed: n_workers, threads_per_worker, "
                                r"memory_limit, processes"),
    ({"local": {"n_workers": 0}}, r"'cluster.local.n_workers' must be an integer >= 1, got 0"),
    ({"local": {"n_workers": True}}, r"'cluster.local.n_workers' must be an integer >= 1, got True"),
    ({"local": {"threads_per_worker": 1.5}}, r"'cluster.local.threads_per_worker' must be an integer >= 1"),
    ({"local": {"memory_limit": "4 lots"}}, r"'cluster.local.memory_limit' must be a size such as \"4GiB\""),
    ({"local": {"memory_limit": 0}}, r"'cluster.local.memory_limit' must be > 0 bytes"),
    ({"local": {"processes": "yes"}}, r"'cluster.local.processes' must be true or false"),
    ({"local": {}, "timeout": 5}, r"'cluster.timeout' applies to 'cluster.address' only"),
    ({"address": "tcp://h:1", "timeout": 0}, r"'cluster.timeout' must be a number of seconds > 0, got 0"),
    ({"local": {}, "n_partitions": -1}, r"'cluster.n_partitions' must be an integer >= 1, got -1"),
    ({"local": {}, "metric_sample": "all"}, r"'cluster.metric_sample' must be an integer >= 1"),
    ({"local": {}, "partitioning": 3}, r"'cluster.partitioning' must be a string"),
    ("tcp://h:1", r"config key 'cluster' must be a table with 'address' or 'local'"),
])
def test_bad_sections_name_the_key(cluster, message):
    with pytest.raises(ConfigError, match=message):
        _config(cluster)


@settings(max_examples=40, deadline=None)
@given(key=st.text(min_size=1, max_size=12).filter(lambda k: k not in CLUSTER_KEYS))
def test_any_unknown_key_is_named_with_the_allowed_ones(key):
    with pytest.raises(ConfigError) as info:
        parse_cluster_section({"local": {}, key: 1})
    assert f"'cluster.{key}'" in str(info.value) and "allowed: " + ", ".join(CLUSTER_KEYS) in str(info.value)


@settings(max_examples=40, deadline=None)
@given(key=st.text(min_size=1, max_size=12).filter(lambda k: k not in LOCAL_KEYS))
def test_any_unknown_local_key_is_named(key):
    with pytest.raises(ConfigError, match="unknown config key 'cluster.local."):
        parse_cluster_section({"local": {key: 1}})


@pytest.mark.parametrize("change, message", [
    ({"n_neighbors": None}, r"the BuDRO model of the top-level keys cannot be trained on a Dask cluster: "
                            r"DaskBuDROClassifier needs n_neighbors set to an integer"),
    ({"solver": "entropic"}, r"cannot be trained on a Dask cluster: .*needs solver='dual'"),
    ({"backend": "lightgbm"}, r"cannot be trained on a Dask cluster: DaskBuDROClassifier trains with backend='xgboost' only"),
    ({"methods": {"Fair": {"method": "budro", "n_neighbors": 1}, "Plain": {"method": "gbdt"}}},
     r"the BuDRO model of \[methods.Fair\] cannot be trained on a Dask cluster: n_neighbors must be >= 2"),
])
def test_models_a_cluster_cannot_train_are_refused_with_the_config(change, message):
    raw = {**BASE, **change, "cluster": {"local": {"n_workers": 2}}}
    raw = {k: v for k, v in raw.items() if v is not None}
    parse_config({k: v for k, v in raw.items() if k != "cluster"})  # fine on one machine
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_dask_missing_gives_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(ConfigError, match=r"\[cluster\] .* distributed is not installed \(pip install 'budro\[dask\]'\)"):
        _config({"local": {"n_workers": 2}})
    assert parse_config(BASE).cluster is None  # configs without [cluster] do not need dask


def test_unreachable_scheduler_is_a_config_error_naming_the_address():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = _config({"address": f"tcp://127.0.0.1:{port}", "timeout": 1})
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"config key 'cluster.address': cannot reach the Dask scheduler at "
                                          rf"'tcp://127.0.0.1:{port}' within 1 s \(cluster.timeout\)"):
        client_from_config(cfg.cluster)
    assert time.perf_counter() - t0 < 8


def test_local_cluster_is_closed_by_close():
    client, close = client_from_config({"local": {"n_workers": 1, "processes": False}})
    cluster = client.cluster
    assert len(client.nthreads()) == 1 and client.submit(lambda v: v + 1, 1).result() == 2
    close()
    close()  # a second call does nothing
    assert client.status == "closed" and cluster.status.name == "closed"


def test_to_dask_splits_rows_into_blocks_without_changing_them():
    import pandas as pd

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(101, 3)), rng.integers(0, 2, 101)
    dX, dy = to_dask(X, y, 4)
    assert dX.numblocks == (4, 1) and dy.numblocks == (4,)
    np.testing.assert_array_equal(dX.compute(), X)
    np.testing.assert_array_equal(dy.compute(), y)
    frame = pd.DataFrame({"a": X[:, 0], "s": np.where(y == 1, "u", "v")}, index=np.arange(101) * 3)
    dF, dy = to_dask(frame, y, 3)
    assert dF.npartitions == 3 and dy.npartitions == 3
    pd.testing.assert_frame_equal(dF.compute(), frame.reset_index(drop=True))
    np.testing.assert_array_equal(dy.compute().to_numpy(), y)
    assert to_dask(X[:2], y[:2], 5)[0].numblocks == (2, 1)  # never more blocks than rows


def test_experiment_results_of_a_distributed_fit_are_not_reused_for_other_partitions():
    from budro.experiment import Unit, _fingerprint

    methods = {"methods": {"BuDRO": {"method": "budro"}, "Baseline": {"method": "gbdt"}}}
    plain = parse_config({**BASE, **methods})
    two = parse_config({**BASE, **methods, "cluster": {"local": {"n_workers": 2}}})
    four = parse_config({**BASE, **methods, "cluster": {"local": {"n_workers": 2}, "n_partitions": 4}})
    fp = {name: {label: _fingerprint(cfg, Unit(label, 0, 0, ()))["fingerprint"] for label in ("BuDRO", "Baseline")}
          for name, cfg in (("plain", plain), ("two", two), ("four", four))}
    assert len({fp[name]["BuDRO"] for name in fp}) == 3
    assert len({fp[name]["Baseline"] for name in fp}) == 1  # baselines are fitted on this machine either way


def _csv_config(tmp_path, cluster: str, n: int = 400) -> Path:
    """A small numeric CSV (5 features, binary protected s) and a config training on it."""
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(n, 3))
    X = Z @ rng.normal(size=(3, 5)) + 0.1 * rng.normal(size=(n, 5))
    s = rng.integers(0, 2, n)
    X[:, 1] += 0.8 * s
    y = (rng.random(n) < 1 / (1 + np.exp(-(X[:, 1] - 0.5 * X[:, 2] + 0.5 * s)))).astype(int)
    lines = ["f0,f1,f2,f3,f4,s,y"] + [",".join(f"{v:.6f}" for v in row) + f",{si},{yi}" for row, si, yi in zip(X, s, y)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    return _config_file(tmp_path, "train.csv", "s", cluster)


def _config_file(tmp_path, data: str, protected: str, extra: str) -> Path:
    """run.toml: 3 BuDRO rounds (8 neighbours, XGBoost) on the CSV ``data`` (label y), then ``extra``."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent(f"""
        eps = 0.05
        n_steps = 3
        n_neighbors = 8
        protected = ["{protected}"]
        random_state = 0
        [data]
        source = "csv"
        path = "{data}"
        label = "y"
        [backend]
        name = "xgboost"
    """) + extra)
    return cfg


def _children() -> set[int]:
    import psutil

    # Python's multiprocessing resource tracker lives as long as this process, by design
    return {p.pid for p in psutil.Process().children(recursive=True)
            if "resource_tracker" not in " ".join(p.cmdline())}


def test_budro_fit_trains_on_a_two_worker_local_cluster_and_closes_it(tmp_path, capsys):
    from budro.cli import main
    from budro.persist import load_model

    cfg = _csv_config(tmp_path, "[cluster]\nlocal = { n_workers = 2 }\n")
    before = _children()
    assert main(["fit", str(cfg), "--quiet", "--output", str(tmp_path / "m.budro"),
                 "--native", str(tmp_path / "m.json")]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "3 BuDRO rounds on a Dask cluster of 2 worker(s)" in out and "model saved to" in out
    import xgboost

    native = xgboost.Booster(model_file=str(tmp_path / "m.json"))
    assert native.num_boosted_rounds() == 4  # f_0 and one tree per round
    deadline = time.time() + 10
    while _children() - before and time.time() < deadline:  # the worker processes exit with their cluster
        time.sleep(0.2)
    assert not _children() - before, "the LocalCluster's processes outlived budro fit"
    model = load_model(tmp_path / "m.budro")
    assert type(model).__name__ == "BuDROClassifier" and len(model.history_) == 3
    import pandas as pd

    frame = pd.read_csv(tmp_path / "train.csv")
    proba = model.predict_proba(frame.drop(columns="y"))
    assert proba.shape == (400, 2) and np.allclose(proba.sum(axis=1), 1.0)
    acc = float(np.mean(model.predict(frame.drop(columns="y")) == frame["y"].to_numpy()))
    assert f"training accuracy {acc:.4f}" in out


def test_a_raw_table_config_trains_on_the_cluster_with_its_encoder(tmp_path, capsys):
    """A CSV with a text column, a protected text column and missing numbers: the table encoder
    runs on the cluster and travels with the saved model, which predicts the raw table."""
    from budro.cli import main
    from budro.persist import load_model
    import pandas as pd

    rng = np.random.default_rng(1)
    n = 400
    frame = pd.DataFrame({"age": rng.normal(40, 10, n).round(1), "job": rng.choice(["clerk", "driver", "nurse"], n),
                          "sex": rng.choice(["F", "M"], n)})
    frame.loc[rng.random(n) < 0.1, "age"] = np.nan
    frame["y"] = ((frame["age"].fillna(40) - 40) / 10 + (frame["job"] == "nurse") + rng.normal(size=n) > 0.3).astype(int)
    frame.to_csv(tmp_path / "people.csv", index=False)
    cfg = _config_file(tmp_path, "people.csv", "sex", "[cluster]\nlocal = { n_workers = 2 }\n")
    assert main(["fit", str(cfg), "--quiet", "--output", str(tmp_path / "m.budro")]) == 0, capsys.readouterr().err
    assert "3 BuDRO rounds on a Dask cluster of 2 worker(s)" in capsys.readouterr().out
    model = load_model(tmp_path / "m.budro")
    assert model.table_ is not None and model.table_.categories_["job"] == ("clerk", "driver", "nurse")
    proba = model.predict_proba(frame.drop(columns="y"))
    assert proba.shape == (n, 2) and np.isfinite(proba).all()


@pytest.mark.slow
def test_one_partition_on_the_cluster_is_the_single_machine_fit_of_the_same_config(tmp_path, capsys):
    from budro.cli import main
    from budro.persist import load_model
    import pandas as pd

    local = _csv_config(tmp_path, "")
    assert main(["fit", str(local), "--quiet", "--output", str(tmp_path / "one.budro")]) == 0
    dist = _csv_config(tmp_path, "[cluster]\nlocal = { n_workers = 2 }\nn_partitions = 1\n")
    assert main(["fit", str(dist), "--quiet", "--output", str(tmp_path / "dask.budro")]) == 0, capsys.readouterr().err
    X = pd.read_csv(tmp_path / "train.csv").drop(columns="y")
    p_one = load_model(tmp_path / "one.budro").predict_proba(X)
    p_dask = load_model(tmp_path / "dask.budro").predict_proba(X)
    assert np.abs(p_one - p_dask).max() <= 1e-6


@pytest.mark.slow
def test_budro_experiment_fits_budro_on_the_cluster_and_baselines_here(tmp_path):
    from budro.config import load_config
    from budro.experiment import run_experiment

    cfg_path = _csv_config(tmp_path, textwrap.dedent("""
        [cluster]
        local = { n_workers = 2 }
        [experiment]
        splits = 1
        [methods.BuDRO]
        method = "budro"
        [methods.Plain]
        method = "gbdt"
    """))
    result = run_experiment(load_config(cfg_path), output=tmp_path / "out", progress=False)
    rows = {r["method"]: r for r in result.rows}
    assert set(rows) == {"BuDRO", "Plain"} and result.n_computed == 2
    assert 0.5 < rows["BuDRO"]["accuracy"] <= 1.0 and rows["BuDRO"]["budget_used_max"] <= 1.0 + 1e-9
    again = run_experiment(load_config(cfg_path), output=tmp_path / "out", progress=False)
    assert again.n_reused == 2  # finished results reused without starting a cluster


def test_budro_compare_refuses_a_cluster_config(tmp_path, capsys):
    from budro.cli import main

    cfg = _csv_config(tmp_path, "[cluster]\nlocal = { n_workers = 2 }\n")
    assert main(["compare", str(cfg), "--output", str(tmp_path / "cmp")]) == 2
    assert "budro compare trains on this machine" in capsys.readouterr().err
    assert not (tmp_path / "cmp").exists()
