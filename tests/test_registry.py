"""The plugin registry: built-ins, entry points, aliases and every error a plugin author can hit."""

import importlib
import json
import subprocess
import sys
import textwrap
import warnings
from importlib import metadata

import numpy as np
import pytest

import budro
from budro import registry
from budro.exceptions import ConfigError, PluginError, PluginWarning, UnknownPluginError, ValidationError
from budro.plugin_types import CAPABILITIES
from budro.registry import STRICT_ENV, Registry, use_registry
from budro.solvers.dual import DualSolver
from budro.solvers.lp import LPSolver

from conftest import in_ci


def _isolated():
    return Registry(builtins=True, entry_points=False)


def test_builtins_are_registered_through_the_hooks():
    reg = _isolated()
    assert "xgboost" in reg.available("backend")
    assert {"lp", "dual"} <= set(reg.available("solver"))
    assert "sensitive-subspace" in reg.available("fair_metric")
    assert all(e.source == "budro" for e in reg.plugins())


def test_aliases_resolve_to_their_plugin():
    reg = _isolated()
    assert reg.get("solver", "dual-bisection").name == "dual"
    assert isinstance(reg.create("solver", "dual-bisection"), DualSolver)
    assert "dual-bisection" in reg.names("solver")
    assert "dual-bisection" not in reg.available("solver")  # canonical names only


def test_unknown_name_lists_the_choices():
    reg = _isolated()
    with pytest.raises(UnknownPluginError) as exc:
        reg.create("solver", "duel")
    msg = str(exc.value)
    assert "unknown solver 'duel'" in msg and "did you mean 'dual'" in msg
    assert "choose one of: " in msg and "lp" in msg and "dual-bisection" in msg


def test_unknown_kind():
    with pytest.raises(ValidationError, match="plugin kind must be one of: backend, solver, fair_metric"):
        _isolated().available("booster")


def test_unknown_parameter_is_named():
    with pytest.raises(ConfigError, match=r"solver 'dual' has no parameter 'tie_tol' \(did you mean 'tie_rtol'\?\)"):
        _isolated().create("solver", "dual", tie_tol=1e-9)


class _Plugin:
    """A third-party plugin object for tests."""

    def __init__(self, records_by_hook):
        for hook, records in records_by_hook.items():
            impl = budro.hookimpl(lambda records=records: iter(records))
            impl.__name__ = hook
            setattr(self, hook, impl)


def _left_out(reg, kind="solver"):
    """Collect ``reg``'s plugins, returning (available names, [PluginWarning messages])."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = reg.available(kind)
    return names, [str(w.message) for w in caught if issubclass(w.category, PluginWarning)]


def test_a_third_party_plugin_claiming_a_builtin_name_is_left_out_and_the_builtin_kept():
    reg = _isolated()
    reg.register(_Plugin({"budro_solvers": [budro.SolverPlugin(name="dual", factory=LPSolver),
                                            budro.SolverPlugin(name="fine", factory=DualSolver)]}), source="fake-pkg")
    names, messages = _left_out(reg)
    assert len(messages) == 1
    assert "'dual'" in messages[0] and "package 'budro'" in messages[0] and "package 'fake-pkg'" in messages[0]
    assert "built-in 'dual' is kept" in messages[0]
    assert isinstance(reg.create("solver", "dual"), DualSolver)  # the built-in, not the impostor
    assert "fine" in names  # the plugin's other record is unaffected
    assert [(b.source, b.stage, b.name) for b in reg.broken()] == [("fake-pkg", "name", "dual")]


def test_two_third_party_plugins_claiming_one_name_are_both_left_out():
    reg = _isolated()
    reg.register(_Plugin({"budro_solvers": [budro.SolverPlugin(name="mine", factory=DualSolver)]}), source="pkg-a")
    reg.register(_Plugin({"budro_solvers": [budro.SolverPlugin(name="mine", factory=LPSolver)]}), source="pkg-b")
    names, messages = _left_out(reg)
    assert "mine" not in names and "dual" in names
    assert messages and all("'pkg-a'" in m and "'pkg-b'" in m for m in messages)
    assert {b.source for b in reg.broken()} == {"pkg-a", "pkg-b"}
    with pytest.raises(UnknownPluginError, match="unknown solver 'mine'.*left out.*pkg-a"):
        reg.get("solver", "mine")


def test_duplicate_alias_is_rejected_too():
    reg = _isolated()
    reg.register(_Plugin({"budro_solvers": [budro.SolverPlugin(name="mine", factory=DualSolver, aliases=("dual-bisection",))]}),
                 source="other-pkg")
    names, messages = _left_out(reg)
    assert "mine" not in names and reg.get("solver", "dual-bisection").name == "dual"
    assert len(messages) == 1 and "dual-bisection" in messages[0] and "other-pkg" in messages[0]


def test_misspelled_hook_is_reported_and_left_out():
    class Misspelled:
        @budro.hookimpl
        def budro_solver(self):  # should be budro_solvers
            yield budro.SolverPlugin(name="x", factory=DualSolver)

    reg = _isolated()
    with pytest.warns(PluginWarning, match="typo-pkg.*budro_solver.*did you mean 'budro_solvers'"):
        assert reg.register(Misspelled(), source="typo-pkg") is False
    names, messages = _left_out(reg)
    assert "x" not in names and "dual" in names and messages == []  # reported once, not again
    assert [b.stage for b in reg.broken()] == ["hookimpl"]


def test_wrong_record_type_is_reported_and_left_out():
    reg = _isolated()
    reg.register(_Plugin({"budro_solvers": [budro.BackendPlugin(name="x", factory=DualSolver),
                                            budro.SolverPlugin(name="y", factory=DualSolver)]}), source="mixed-pkg")
    names, messages = _left_out(reg)
    assert "x" not in names and "y" in names
    assert len(messages) == 1 and "mixed-pkg" in messages[0] and "must yield SolverPlugin" in messages[0]


def test_broken_hook_names_itself_and_the_rest_still_works():
    def boom():
        raise RuntimeError("kaput")

    class Broken:
        @budro.hookimpl
        def budro_solvers(self):
            boom()
            yield  # pragma: no cover

    reg = _isolated()
    reg.register(Broken(), source="broken-pkg")
    names, messages = _left_out(reg)
    assert {"dual", "lp"} <= set(names)
    assert len(messages) == 1 and "broken-pkg" in messages[0] and "RuntimeError: kaput" in messages[0]
    _, again = _left_out(reg)
    assert again == []  # one broken plugin is one warning


def test_unknown_capability_is_reported_with_the_choices():
    reg = _isolated()
    reg.register(_Plugin({"budro_solvers": [budro.SolverPlugin(name="typo", factory=DualSolver, capabilities={"sparse"}),
                                            budro.SolverPlugin(name="ok", factory=DualSolver, capabilities={"sparse-cost"})]}),
                 source="caps-pkg")
    names, messages = _left_out(reg)
    assert "typo" not in names and "ok" in names
    assert len(messages) == 1
    assert "caps-pkg" in messages[0] and "unknown solver capability 'sparse'" in messages[0]
    assert "choose one of: exact, dense-cost, sparse-cost" in messages[0]


def test_every_builtin_capability_is_in_the_closed_set():
    reg = _isolated()
    for entry in reg.plugins():
        assert entry.capabilities <= set(CAPABILITIES[entry.kind]), (entry.name, entry.capabilities)
    assert reg.broken() == []


def test_strict_mode_raises_instead(monkeypatch):
    def plugin():
        return _Plugin({"budro_solvers": [budro.SolverPlugin(name="dual", factory=LPSolver)]})

    reg = Registry(entry_points=False, strict=True)
    reg.register(plugin(), source="fake-pkg")
    with pytest.raises(PluginError, match="(?s)strict mode.*'dual'.*fake-pkg"):
        reg.available("solver")
    with pytest.raises(PluginError, match="strict mode"):  # the same error again, not "already registered"
        reg.available("solver")
    assert [b.source for b in reg.broken()] == ["fake-pkg"]  # listing still works in strict mode

    monkeypatch.setenv(STRICT_ENV, "1")
    env = _isolated()
    env.register(plugin(), source="fake-pkg")
    with pytest.raises(PluginError, match="fake-pkg"):
        env.available("solver")
    monkeypatch.setenv(STRICT_ENV, "0")
    assert "dual" in _left_out(env)[0]


# ---------------------------------------------------------------------------- entry points
# Fake distributions: a dist-info folder with entry_points.txt on a temporary sys.path entry, found
# by importlib.metadata like an installed package.


@pytest.fixture
def fake_dists(tmp_path, monkeypatch):
    """``make(dist_name, module_source)``: a distribution whose 'budro' entry point is a module
    holding ``module_source``.  sys.path and sys.modules are restored afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made: list[str] = []

    def make(dist: str, source: str) -> str:
        module = "budro_fake_" + dist.replace("-", "_") + "_" + tmp_path.name.replace("-", "_")
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        info = tmp_path / f"{dist.replace('-', '_')}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[budro]\n{dist.replace('-', '_')} = {module}\n")
        made.append(module)
        importlib.invalidate_caches()
        return module

    yield make
    for module in made:
        sys.modules.pop(module, None)
    importlib.invalidate_caches()


_GOOD = """
    import budro
    from budro.solvers.dual import DualSolver

    @budro.hookimpl
    def budro_solvers():
        yield budro.SolverPlugin(name="good-solver", factory=DualSolver, capabilities={"exact", "sparse-cost"})
"""


def test_a_plugin_that_fails_to_import_is_one_warning_naming_its_package(fake_dists):
    fake_dists("budro-good", _GOOD)
    fake_dists("budro-broken-import", "import budro_no_such_module_anywhere\n")
    reg = Registry()
    names, messages = _left_out(reg)
    assert "good-solver" in names and "dual" in names  # everything else works
    assert len(messages) == 1
    assert "'budro-broken-import' failed to import" in messages[0] and "ModuleNotFoundError" in messages[0]
    assert reg.get("solver", "good-solver").source == "budro-good"
    (broken,) = reg.broken()
    assert broken.stage == "import" and broken.source == "budro-broken-import"
    # a second use in the same process: no second warning, and no "already registered"
    names_again, again = _left_out(reg)
    assert names_again == names and again == []
    # a fresh registry in the same process (the modules are cached): same result, not "already registered"
    names_fresh, fresh = _left_out(Registry())
    assert names_fresh == names and len(fresh) == 1 and "already registered" not in fresh[0]


def test_an_entry_point_colliding_with_a_builtin_keeps_the_builtin(fake_dists):
    fake_dists("budro-impostor", """
        import budro
        from budro.solvers.lp import LPSolver

        @budro.hookimpl
        def budro_solvers():
            yield budro.SolverPlugin(name="dual", factory=LPSolver)
    """)
    reg = Registry()
    names, messages = _left_out(reg)
    assert "dual" in names and reg.get("solver", "dual").source == "budro"
    assert len(messages) == 1 and "'budro-impostor'" in messages[0] and "package 'budro'" in messages[0]


def test_a_misspelled_hook_in_an_entry_point_is_reported(fake_dists):
    fake_dists("budro-typo", """
        import budro
        from budro.solvers.dual import DualSolver

        @budro.hookimpl
        def budro_solver():
            yield budro.SolverPlugin(name="never", factory=DualSolver)
    """)
    reg = Registry()
    names, messages = _left_out(reg)
    assert "never" not in names and "dual" in names
    assert len(messages) == 1 and "'budro-typo'" in messages[0] and "did you mean 'budro_solvers'" in messages[0]


@pytest.fixture
def broken_env(fake_dists):
    """The default registry, for the CLI, with one working and one broken third-party plugin."""
    fake_dists("budro-good", _GOOD)
    fake_dists("budro-broken-import", "raise RuntimeError('kaput at import')\n")
    fake_dists("budro-backend-impostor", """
        import budro
        from budro.solvers.lp import LPSolver

        @budro.hookimpl
        def budro_backends():
            yield budro.BackendPlugin(name="xgboost", factory=LPSolver)
    """)
    with use_registry(Registry()) as reg:
        yield reg


def test_cli_plugins_list_shows_broken_plugins(broken_env, capsys):
    from budro.cli import main

    assert main(["plugins", "list", "--json"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out)
    broken = [r for r in rows if r["status"] == "broken"]
    assert {b["source"] for b in broken} == {"budro-broken-import", "budro-backend-impostor"}
    assert any("kaput at import" in b["error"] for b in broken)
    assert any(r["name"] == "good-solver" and r["status"] == "ok" for r in rows)
    assert captured.err.count("budro: warning:") == 2 and "budro-broken-import" in captured.err
    assert main(["plugins", "list"]) == 0
    out = capsys.readouterr().out
    assert "BROKEN (import)" in out and "kaput at import" in out and "good-solver" in out


def test_cli_strict_plugins_flag(broken_env, capsys):
    from budro.cli import main

    assert main(["--strict-plugins", "plugins", "list"]) == 2
    err = capsys.readouterr().err
    assert "budro: error:" in err and "budro-broken-import" in err and "kaput at import" in err
    assert registry.default_registry() is broken_env  # the strict registry was only for that command


def test_cli_fit_works_beside_a_broken_unrelated_plugin(broken_env, tmp_path, capsys):
    from budro.cli import main

    config = tmp_path / "tiny.toml"
    config.write_text(textwrap.dedent("""
        eps = 0.01
        n_steps = 2
        protected = ["x1"]
        solver = "dual"
        fair_metric = {name = "features", features = [1]}
        backend = {name = "xgboost", nthread = 1}

        [data]
        source = "synthetic"
    """))
    assert main(["fit", str(config), "--output", str(tmp_path / "m.budro"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "model saved to" in captured.out
    assert "budro-broken-import" in captured.err and "Traceback" not in captured.err
    assert "budro-backend-impostor" in captured.err and "backend.name" not in captured.err  # the built-in trained


# ---------------------------------------------------------------------------- capabilities honoured


def test_capabilities_of_instances():
    reg = _isolated()
    assert reg.capabilities_of("solver", DualSolver()) >= {"exact", "sparse-cost", "warm-start"}
    assert "sparse-cost" not in reg.capabilities_of("solver", LPSolver())

    class Subclass(DualSolver):  # inherits its registered base's record
        pass

    class Declared(DualSolver):
        capabilities = {"dense-cost"}

    class Unregistered(LPSolver.__mro__[1]):  # the Solver base: nothing declared
        def _solve(self, problem, *, eta0=None):  # pragma: no cover
            raise NotImplementedError

    assert "sparse-cost" in reg.capabilities_of("solver", Subclass())
    assert reg.capabilities_of("solver", Declared()) == {"dense-cost"}
    assert reg.capabilities_of("solver", Unregistered()) == {"dense-cost"}  # the contract's baseline


def test_budro_refuses_a_sparse_cost_for_a_solver_without_sparse_cost():
    from budro.backends.xgboost import XGBoostBackend
    from budro.core import BuDRO
    from budro.datasets import make_synthetic
    from budro.metrics import Features

    pytest.importorskip("xgboost")
    X, y, _ = make_synthetic(random_state=0)
    calls = []

    class DenseOnly(LPSolver):
        def _solve(self, problem, *, eta0=None):
            calls.append(problem.cost)
            return super()._solve(problem, eta0=eta0)

    trainer = BuDRO(XGBoostBackend(nthread=1), DenseOnly(), Features([1]), eps=0.1, n_steps=2, n_neighbors=5)
    with pytest.raises(ValidationError, match="'sparse-cost' capability"):
        trainer.fit(X[:60], y[:60])
    assert calls == []  # refused before any round
    # a solver that declares it is handed the NeighborCost
    BuDRO(XGBoostBackend(nthread=1), DualSolver(), Features([1]), eps=0.1, n_steps=1, n_neighbors=5).fit(X[:60], y[:60])


def test_budro_passes_eta0_only_to_warm_start_solvers():
    from budro.backends.xgboost import XGBoostBackend
    from budro.core import BuDRO
    from budro.datasets import make_synthetic
    from budro.metrics import Features

    pytest.importorskip("xgboost")
    X, y, _ = make_synthetic(random_state=0)
    seen = []

    class Cold(DualSolver):
        capabilities = {"exact", "dense-cost"}  # no "warm-start"

        def _solve(self, problem, *, eta0=None):
            seen.append(eta0)
            return super()._solve(problem, eta0=eta0)

    class Warm(Cold):
        capabilities = {"exact", "dense-cost", "warm-start"}

    BuDRO(XGBoostBackend(nthread=1), Cold(), Features([1]), eps=0.1, n_steps=3).fit(X[:60], y[:60])
    assert seen == [None, None, None]
    seen.clear()
    BuDRO(XGBoostBackend(nthread=1), Warm(), Features([1]), eps=0.1, n_steps=3).fit(X[:60], y[:60])
    assert seen[0] is None and all(e is not None for e in seen[1:])


def test_budro_refuses_more_classes_than_a_binary_backend_declares():
    from budro.backends.xgboost import XGBoostBackend
    from budro.core import BuDRO
    from budro.metrics import Features

    pytest.importorskip("xgboost")

    class BinaryOnly(XGBoostBackend):
        capabilities = {"native-export"}

    X = np.random.default_rng(0).normal(size=(30, 3))
    y = np.arange(30) % 3
    with pytest.raises(ValidationError, match="3 classes.*'multiclass' capability"):
        BuDRO(BinaryOnly(nthread=1), DualSolver(), Features([1]), eps=0.1, n_steps=1).fit(X, y)


def test_third_party_plugin_created_through_registry():
    reg = _isolated()
    reg.register(_Plugin({"budro_solvers": [budro.SolverPlugin(name="exact-2", factory=DualSolver, description="Same, other name")]}),
                 source="pkg2")
    solver = reg.create("solver", "exact-2")
    assert isinstance(solver, DualSolver)
    assert reg.get("solver", "exact-2").source == "pkg2"


def test_use_registry_restores_the_default():
    before = registry.default_registry()
    custom = _isolated()
    with use_registry(custom):
        assert registry.default_registry() is custom
    assert registry.default_registry() is before


def test_plugin_record_validation():
    with pytest.raises(ValueError, match="non-empty string"):
        budro.SolverPlugin(name=" spaced ", factory=DualSolver)
    with pytest.raises(TypeError, match="callable"):
        budro.SolverPlugin(name="x", factory=42)
    spec = budro.SolverPlugin(name="x", factory=DualSolver)
    assert "tie_rtol" in spec.parameters  # schema read from the factory's signature


def _example_plugin_installed() -> bool:
    try:
        metadata.distribution("budro-weighted-features")
    except metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.skipif(not _example_plugin_installed() and not in_ci(),
                    reason="pip install -e plugins/budro-weighted-features (the README's test command does)")
def test_entry_point_plugin_is_loaded_end_to_end():
    entry = registry.get("fair_metric", "weighted-features")
    assert entry.source == "budro-weighted-features"
    import numpy as np

    from budro import BuDROClassifier
    from budro.datasets import make_synthetic

    X, y, _ = make_synthetic(random_state=1)
    clf = BuDROClassifier(fair_metric="weighted-features", fair_metric_params={"features": [1]},
                          protected=[0], eps=0.05, n_steps=10, backend_params={"nthread": 1}).fit(X, y)
    metric = clf.fair_metric_
    # The plugin's metric is |x2 - x2'|: moving x1 costs nothing.
    assert np.allclose(metric.pairwise(X[:3], X[:3] + [5.0, 0.0]).diagonal(), 0.0)
    assert clf.predict(X).shape == y.shape


def test_importing_budro_does_not_import_boosters():
    code = ("import sys, budro, budro.registry as r; r.available('backend'); r.available('solver'); "
            "heavy = [m for m in ('xgboost', 'lightgbm', 'catboost', 'sklearn', 'torch') if m in sys.modules]; "
            "print(heavy); assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cli_plugins_list_json_and_table(capsys):
    from budro.cli import main

    assert main(["plugins", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_name = {(r["kind"], r["name"]): r for r in rows}
    assert by_name[("solver", "dual")]["source"] == "budro"
    assert by_name[("solver", "dual")]["aliases"] == ["dual-bisection"]
    assert "tie_rtol" in by_name[("solver", "dual")]["parameters"]
    assert main(["plugins", "list", "--kind", "solver"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:4] == ["KIND", "NAME", "ALIASES", "PACKAGE"]
    assert "dual-bisection" in out
