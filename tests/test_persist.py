"""Model files (budro.persist): a checked zip archive that runs no code when read, atomic writes,
and pickles only behind an explicit opt-in."""

from __future__ import annotations

import hashlib
import json
import textwrap
import zipfile
from pathlib import Path

import joblib
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from budro import BuDROClassifier
from budro.audit import load_any_model
from budro.cli import main
from budro.exceptions import ModelFileError, ValidationError
from budro.persist import FORMAT_VERSION, load_model, save_model

FAST = {
    "xgboost": {"nthread": 1, "max_depth": 2},
    "lightgbm": {"num_threads": 1, "num_leaves": 4},
    "catboost": {"thread_count": 1, "depth": 2},
}


def _data(n_classes: int = 2, n: int = 120, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    score = X[:, 0] + 0.5 * X[:, 2] + 0.3 * rng.normal(size=n)
    y = np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))
    return X, y


def _fit(backend="xgboost", n_classes=2, labels=None, **kw):
    X, y = _data(n_classes)
    if labels is not None:
        y = np.asarray(labels)[y]
    params = {"backend": backend, "backend_params": FAST[backend], "n_steps": 3, "eps": 0.05, "protected": [1],
              "random_state": 0, **kw}
    return BuDROClassifier(**params).fit(X, y), X


@pytest.fixture(scope="module")
def xgb_model():
    return _fit()


@pytest.fixture
def saved(xgb_model, tmp_path):
    clf, X = xgb_model
    return save_model(clf, tmp_path / "m.budro"), clf, X


def _rewrite(path: Path, *, manifest=None, members=None, extra: dict | None = None, drop=()):
    """Rewrite the archive at ``path``: ``manifest(m)`` edits the manifest dict, ``members(name,
    data)`` returns new bytes for a member, ``extra`` adds members, ``drop`` removes some."""
    with zipfile.ZipFile(path) as zf:
        content = {name: zf.read(name) for name in zf.namelist()}
    m = json.loads(content.pop("manifest.json"))
    if manifest is not None:
        manifest(m)
    out = {"manifest.json": json.dumps(m).encode()}
    for name, data in content.items():
        if name not in drop:
            out[name] = members(name, data) if members is not None else data
    out.update(extra or {})
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in out.items():
            zf.writestr(name, data)


# ------------------------------------------------------------------------------ pickles


class _WritesMarker:
    """Unpickling this object runs code: it writes the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('code ran')",))


def _crafted_pickle(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "marker.txt"
    path = tmp_path / "crafted.budro"
    joblib.dump({"format": "budro-model", "budro_version": "0.1.0", "estimator": _WritesMarker(marker)}, path)
    assert not marker.exists()
    return path, marker


def test_a_crafted_pickle_is_refused_and_runs_no_code(tmp_path, capsys):
    path, marker = _crafted_pickle(tmp_path)
    with pytest.raises(ModelFileError, match=r"pickle.*runs code.*trusted=True") as info:
        load_model(path)
    assert str(path) in str(info.value)
    with pytest.raises(ModelFileError, match="--trust-pickle"):
        load_any_model(path)
    assert main(["audit", str(path), "--data", "synthetic", "--no-certificate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("budro: error:") and "--trust-pickle" in err and "Traceback" not in err
    assert not marker.exists()


def test_trusted_opt_in_unpickles_and_so_runs_the_files_code(tmp_path, capsys):
    """trusted=True is the documented opt-in: it reads legacy model pickles, and it runs their code."""
    path, marker = _crafted_pickle(tmp_path)
    with pytest.raises(ModelFileError, match="not of a budro model"):
        load_model(path, trusted=True)
    assert marker.read_text() == "code ran"
    marker.unlink()
    assert main(["audit", str(path), "--trust-pickle", "--data", "synthetic", "--no-certificate"]) == 2
    assert marker.read_text() == "code ran"  # once: the file is unpickled a single time
    assert "budro: error:" in capsys.readouterr().err


def test_a_legacy_model_pickle_loads_with_trusted_and_can_be_saved_again(xgb_model, tmp_path):
    clf, X = xgb_model
    legacy = tmp_path / "old.budro"
    joblib.dump({"format": "budro-model", "budro_version": "0.1.0", "estimator": clf}, legacy)
    with pytest.raises(ModelFileError, match="pickle"):
        load_model(legacy)
    old = load_model(legacy, trusted=True)
    again = load_model(save_model(old, tmp_path / "new.budro"))
    assert np.array_equal(again.predict_proba(X), clf.predict_proba(X))


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("backend", ["xgboost", "lightgbm", "catboost"])
@pytest.mark.parametrize("n_classes, labels", [
    (2, None),
    (3, None),
    (2, np.array(["no", "yes"])),
    (3, np.array(["a", "bb", "ccc"], dtype=object)),
    (2, np.array([False, True])),
    (3, np.array([-5, 0, 7], dtype=np.int32)),
    (2, np.array([1.0, 3.0])),
])
def test_round_trip_predicts_bitwise_equal(backend, n_classes, labels, tmp_path):
    clf, X = _fit(backend, n_classes, labels)
    path = save_model(clf, tmp_path / "m.budro")
    again = load_model(path)
    assert np.array_equal(again.predict_proba(X), clf.predict_proba(X))
    assert np.array_equal(again.decision_margin(X), clf.decision_margin(X))
    assert again.classes_.dtype == clf.classes_.dtype and again.classes_.tolist() == clf.classes_.tolist()
    assert np.array_equal(again.predict(X), clf.predict(X))
    assert again.get_params() == {**clf.get_params(), "callbacks": None}
    assert again.history_ == clf.history_ and again.protected_indices_ == clf.protected_indices_
    assert np.array_equal(again.fair_metric_.pairwise(X[:7]), clf.fair_metric_.pairwise(X[:7]))
    assert again.backend_.n_rounds == clf.backend_.n_rounds
    # the native member is the library's own model file
    with zipfile.ZipFile(path) as zf:
        manifest = json.loads(zf.read("manifest.json"))
        native = zf.read(manifest["backend"]["member"])
    assert native == clf.backend_.to_native_bytes()
    assert set(manifest["members"]) == set(zipfile.ZipFile(path).namelist()) - {"manifest.json"}


def test_round_trip_keeps_feature_names_and_tuples(tmp_path):
    pd = pytest.importorskip("pandas")
    X, y = _data()
    df = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    clf = BuDROClassifier(backend_params=FAST["xgboost"], n_steps=2, protected=("b",), random_state=0).fit(df, y)
    again = load_model(save_model(clf, tmp_path / "m.budro"))
    assert again.protected == ("b",) and list(again.feature_names_in_) == ["a", "b", "c", "d"]
    assert np.array_equal(again.predict_proba(df), clf.predict_proba(df))


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**62, 2**62), st.text(max_size=5),
                       st.floats(allow_nan=False), st.just(float("inf")))
_arrays = st.sampled_from([np.float64, np.int32, np.bool_]).flatmap(
    lambda dt: st.lists(st.integers(-3, 3), max_size=4).map(lambda v: np.asarray(v, dtype=dt)))
_values = st.recursive(
    st.one_of(_json_leaf, _arrays),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=4).filter(lambda k: not k.startswith("__")), inner, max_size=3)),
    max_leaves=8,
)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_values)
def test_parameter_values_round_trip_exactly(value, xgb_model, tmp_path):
    """JSON values, tuples, infinities and numeric arrays in a parameter come back equal and of the same type."""
    clf, _ = xgb_model
    clf = BuDROClassifier(**clf.get_params())
    clf.__dict__.update({k: v for k, v in xgb_model[0].__dict__.items() if k.endswith("_")})
    clf.set_params(fair_metric_params={"v": value})
    again = load_model(save_model(clf, tmp_path / "p.budro"))
    assert _same(again.fair_metric_params, {"v": value})


def test_unstorable_estimators_and_parameters_are_refused(xgb_model, tmp_path):
    from sklearn.linear_model import LogisticRegression

    clf, X = xgb_model
    with pytest.raises(ValidationError, match="save_model stores .*BuDROClassifier.*LogisticRegression"):
        save_model(LogisticRegression().fit(X, X[:, 0] > 0), tmp_path / "lr.budro")
    with pytest.raises(ValidationError, match="not fitted"):
        save_model(BuDROClassifier(), tmp_path / "u.budro")
    odd = BuDROClassifier(**clf.get_params())
    odd.__dict__.update({k: v for k, v in clf.__dict__.items() if k.endswith("_")})
    odd.set_params(solver_params={"hook": print})
    with pytest.raises(ValidationError, match=r"parameter 'solver_params'\['hook'\] holds a builtins.builtin_function"):
        save_model(odd, tmp_path / "o.budro")
    odd.set_params(solver_params={"__tuple__": 1})
    with pytest.raises(ValidationError, match="reserves"):
        save_model(odd, tmp_path / "o.budro")
    odd.set_params(solver_params=None)
    odd.mystery_ = 1
    with pytest.raises(ValidationError, match="mystery_ .*not part of budro's model format"):
        save_model(odd, tmp_path / "o.budro")
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------ damaged and edited files


def test_extra_missing_and_changed_members_are_refused(saved):
    path, clf, X = saved
    good = path.read_bytes()
    booster = [n for n in zipfile.ZipFile(path).namelist() if n.startswith("model/")][0]

    _rewrite(path, extra={"payload.pkl": b"\x80\x04N."})
    with pytest.raises(ModelFileError, match="does not list: 'payload.pkl'"):
        load_model(path)

    path.write_bytes(good)
    _rewrite(path, members=lambda name, data: data.replace(b'"', b" ", 1) if name == booster else data)
    with pytest.raises(ModelFileError, match=f"member '{booster}' .*SHA-256"):
        load_model(path)

    path.write_bytes(good)
    _rewrite(path, drop=[booster])
    with pytest.raises(ModelFileError, match="missing"):
        load_model(path)

    path.write_bytes(good)
    assert np.array_equal(load_model(path).predict_proba(X), clf.predict_proba(X))


def test_a_newer_format_version_is_refused_with_the_budro_that_reads_it(saved):
    path, _, _ = saved

    def newer(m):
        m["format_version"] = FORMAT_VERSION + 1
        m["created_by"]["budro"] = "9.1.0"

    _rewrite(path, manifest=newer)
    with pytest.raises(ModelFileError, match=r"format version 2 .*newer budro.*budro 9\.1\.0 or later"):
        load_model(path)


def _set(*keys, value):
    def edit(m):
        obj = m
        for k in keys[:-1]:
            obj = obj[k]
        obj[keys[-1]] = value
    return edit


@pytest.mark.parametrize("edit, match", [
    (_set("format", value="pickle"), "not a budro model file"),
    (_set("format_version", value="1"), "unknown model format version '1'"),
    (_set("estimator", "class", value="os.system"), "estimator.class is 'os.system'"),
    (_set("estimator", "params", "evil", value=1), "parameter.*'evil'"),
    (_set("fitted", "classes", "values", value=[0, 1, 2]), "backend.n_classes is 2 but fitted.classes holds 3"),
    (_set("fitted", "classes", "values", value=[1, 0]), "sorted and distinct"),
    (_set("fitted", "classes", "dtype", value="O"), "fitted.classes.dtype"),
    (_set("fitted", "n_features_in", value="4"), "n_features_in must be an integer"),
    (_set("fitted", "protected_indices", value=[9]), r"protected_indices\[\] must be an integer in \[0, 3\]"),
    (_set("fitted", "history", value=[{"step": 0}]), r"history\[0\] lacks"),
    (_set("fitted", "fair_metric", "kind", value="pickle"), "fitted.fair_metric: unknown fair-metric kind"),
    (_set("fitted", "extra", "budget_", "__dataclass__", value="subprocess.Popen"), "may hold budro.budget"),
    (_set("backend", "n_features", value=5), "backend.n_features is 5"),
    (_set("backend", "name", value="nope"), "backend 'nope' cannot be created"),
    (_set("backend", "native_format", value="xgboost-ubj"), "native_format"),
    (_set("backend", "member", value="../../etc/passwd"), "does not hold"),
    (_set("members", value=[]), "'members' table"),
])
def test_manifest_values_are_checked(saved, edit, match):
    path, _, _ = saved
    _rewrite(path, manifest=edit)
    with pytest.raises(ModelFileError, match=match) as info:
        load_model(path)
    assert str(path) in str(info.value)


def test_a_resigned_crafted_booster_is_refused_not_crashed(saved):
    """A file whose author rewrote the booster (and its checksum): the booster's checks still apply."""
    path, _, _ = saved
    booster = json.loads(zipfile.ZipFile(path).read("model/booster.json"))
    tree = booster["learner"]["gradient_booster"]["model"]["trees"][0]
    tree["split_indices"][0] = 10**6  # XGBoost would read feature 10**6 of 4 when predicting
    data = json.dumps(booster).encode()

    def resign(m):
        m["members"]["model/booster.json"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

    _rewrite(path, manifest=resign, members=lambda name, old: data if name == "model/booster.json" else old)
    with pytest.raises(ModelFileError, match="split index 1000000"):
        load_model(path)


def test_files_that_are_not_model_archives(tmp_path):
    (tmp_path / "junk.budro").write_bytes(b"not a model")
    with pytest.raises(ModelFileError, match="not a budro model file"):
        load_model(tmp_path / "junk.budro")
    with pytest.raises(ModelFileError, match="does not exist"):
        load_model(tmp_path / "absent.budro")
    with pytest.raises(ModelFileError, match="is a directory"):
        load_model(tmp_path)
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("readme.txt", "hi")
    with pytest.raises(ModelFileError, match="has no manifest.json"):
        load_model(tmp_path / "other.zip")
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("manifest.json", "{not json")
    with pytest.raises(ModelFileError, match="manifest.json is not valid JSON"):
        load_model(tmp_path / "bad.zip")
    (tmp_path / "cut.budro").write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(ModelFileError, match="not a readable budro model file"):
        load_model(tmp_path / "cut.budro")


# ------------------------------------------------------------------------------ atomic writes


def test_a_save_that_fails_midway_leaves_the_old_file_intact(xgb_model, tmp_path, monkeypatch):
    clf, X = xgb_model
    path = save_model(clf, tmp_path / "m.budro")
    before = path.read_bytes()
    calls = []
    original = zipfile.ZipFile.writestr

    def fail_on_second_member(self, name, data, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:  # the manifest is in the file already
            raise OSError("disk full (simulated)")
        return original(self, name, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", fail_on_second_member)
    other, _ = _fit(n_classes=3)
    with pytest.raises(OSError, match="disk full"):
        save_model(other, path)
    monkeypatch.undo()
    assert len(calls) == 2
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.budro"]  # no temporary file left
    assert np.array_equal(load_model(path).predict_proba(X), clf.predict_proba(X))


def test_save_to_a_directory_is_refused(xgb_model, tmp_path):
    clf, _ = xgb_model
    with pytest.raises(ValidationError, match="is a directory"):
        save_model(clf, tmp_path)
    assert not list(tmp_path.iterdir())


def test_cli_fit_refuses_a_directory_output_before_training(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent("""
        n_steps = 2
        [data]
        source = "synthetic"
        [backend]
        name = "xgboost"
        nthread = 1
    """))
    out = tmp_path / "models"
    out.mkdir()
    fitted = []
    monkeypatch.setattr(BuDROClassifier, "fit", lambda self, X, y: fitted.append(1) or self)
    assert main(["fit", str(cfg), "--output", str(out), "--quiet"]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert fitted == [] and not list(out.iterdir())


# ------------------------------------------------------------------------------ budro audit's loader


def test_load_any_model_reads_safe_formats_without_trust(saved, tmp_path):
    sio = pytest.importorskip("skops.io")
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.linear_model import LogisticRegression

    path, clf, X = saved
    assert np.array_equal(load_any_model(path).predict_proba(X), clf.predict_proba(X))
    y = (X[:, 0] > 0).astype(int)
    sio.dump(LogisticRegression().fit(X, y), tmp_path / "lr.skops")
    assert load_any_model(tmp_path / "lr.skops").predict(X).shape == (len(X),)
    sio.dump(RandomForestClassifier(n_estimators=2, random_state=0).fit(X, y), tmp_path / "rf.skops")
    with pytest.raises(ModelFileError, match="does not trust by default: sklearn.tree._tree.Tree"):
        load_any_model(tmp_path / "rf.skops")
    clf.save_native_model(tmp_path / "native.json")
    assert np.allclose(load_any_model(tmp_path / "native.json").predict_proba(X), clf.predict_proba(X), atol=1e-6)


def test_load_any_model_checks_xgboost_json_before_xgboost_reads_it(xgb_model, tmp_path):
    clf, _ = xgb_model
    clf.save_native_model(tmp_path / "native.json")
    model = json.loads((tmp_path / "native.json").read_text())
    model["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"][0] = 10**6
    (tmp_path / "crafted.json").write_text(json.dumps(model))
    with pytest.raises(ModelFileError, match="crafted.json.*not a usable XGBoost model"):
        load_any_model(tmp_path / "crafted.json")


def test_load_any_model_never_parses_an_unchecked_ubj_file_in_process(xgb_model, tmp_path):
    """XGBoost's UBJ parser can crash on a damaged file: budro converts UBJ to JSON in a child
    process and checks the JSON before XGBoost loads it in budro's process."""
    import xgboost

    clf, X = xgb_model
    clf.save_native_model(tmp_path / "native.json")
    booster = xgboost.Booster(model_file=str(tmp_path / "native.json"))
    booster.save_model(str(tmp_path / "native.ubj"))
    assert np.allclose(load_any_model(tmp_path / "native.ubj").predict_proba(X), clf.predict_proba(X), atol=1e-6)

    model = json.loads((tmp_path / "native.json").read_text())
    model["learner"]["gradient_booster"]["model"]["trees"][0]["split_indices"][0] = 10**6
    crafted = xgboost.Booster()
    crafted.load_model(bytearray(json.dumps(model).encode()))  # loading alone does not crash; predicting would
    crafted.save_model(str(tmp_path / "crafted.ubj"))
    with pytest.raises(ModelFileError, match="crafted.ubj.*split index 1000000"):
        load_any_model(tmp_path / "crafted.ubj")

    raw = bytearray((tmp_path / "native.ubj").read_bytes())
    raw[len(raw) // 2:] = b"\xff" * (len(raw) - len(raw) // 2)  # a damaged second half
    (tmp_path / "damaged.ubj").write_bytes(bytes(raw))
    with pytest.raises(ModelFileError, match="damaged.ubj.*not a usable XGBoost model"):
        load_any_model(tmp_path / "damaged.ubj")


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


_json = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-3, 10**12), st.floats(allow_nan=False, allow_infinity=False),
                               st.text(max_size=6), st.sampled_from(["NaN", "Infinity", "<U3", "|b1", "arrays/0.npy"])),
                     lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                     max_leaves=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_edit_of_a_manifest_value_loads_the_same_predictions_or_is_refused(data, xgb_model, tmp_path):
    """Replace any value of the manifest (the CRC is rewritten, as an author would): budro either
    refuses the file with ModelFileError or the model predicts exactly as before; nothing else."""
    clf, X = xgb_model
    path = save_model(clf, tmp_path / "e.budro")
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    where = data.draw(st.sampled_from([p for p in _paths(manifest) if p]), label="path")
    value = data.draw(_json, label="value")

    def edit(m):
        obj = m
        for k in where[:-1]:
            obj = obj[k]
        obj[where[-1]] = value

    _rewrite(path, manifest=edit)
    try:
        model = load_model(path)
    except ModelFileError as exc:
        assert str(path) in str(exc)
        return
    assert np.array_equal(model.predict_proba(X), clf.predict_proba(X))
