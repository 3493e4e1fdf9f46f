"""The plugin registry: every backend, solver and fair-metric learner, built-in or third-party.

Public API (scripts and plugins depend on these names)::

    budro.registry.available("solver")           # -> ["dual", "lp", ...]
    budro.registry.create("solver", "dual")      # -> a solver instance
    budro.registry.get("solver", "dual-bisection")   # -> the record behind a name or alias
    budro.registry.plugins()                     # -> every record with its source package
    budro.registry.broken()                      # -> every plugin left out, with its error

Built-in plugins are registered through the same hooks as third-party ones, before the
``budro`` entry points are loaded.  Heavy libraries (xgboost, ...) are imported only when a
plugin is created.

One broken plugin is one warning
--------------------------------
A third-party plugin that fails to import, raises in its hook, yields something other than its
hook's record type, declares an unknown capability, implements a hook budro does not define, or
claims a name another plugin claims is left out and reported once, as a
:class:`~budro.exceptions.PluginWarning` naming its package and the error; every other plugin
works.  Name collisions (names and aliases alike): a third-party plugin that claims a built-in
name is left out and the built-in kept; when two third-party plugins claim one name, both are
left out (neither wins by installation order).  :func:`broken` and ``budro plugins list`` show what
was left out.  Strict mode -- ``Registry(strict=True)``, the environment variable
``BUDRO_STRICT_PLUGINS=1`` or ``budro --strict-plugins`` -- raises
:class:`~budro.exceptions.PluginError` instead (for plugin authors' CI).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import pluggy

from budro import hookspecs
from budro.exceptions import ConfigError, PluginError, PluginWarning, UnknownPluginError, ValidationError
from budro.plugin_types import KINDS, REQUIRED, PluginSpec, _accepts_any_keyword, check_capabilities

__all__ = [
    "Registry",
    "RegisteredPlugin",
    "BrokenPlugin",
    "available",
    "create",
    "get",
    "plugins",
    "broken",
    "capabilities_of",
    "metric_class",
    "default_registry",
    "use_registry",
    "KINDS",
    "ENTRY_POINT_GROUP",
    "STRICT_ENV",
]

HOOK_NAMES = {
    "backend": "budro_backends",
    "solver": "budro_solvers",
    "fair_metric": "budro_fair_metrics",
}

#: Modules holding budro's own hook implementations (cheap to import).
BUILTIN_PLUGIN_MODULES = (
    "budro.backends.plugins",
    "budro.solvers.plugins",
    "budro.metrics.plugins",
)

BUILTIN_SOURCE = "budro"

#: The entry-point group third-party packages register their hook modules in.
ENTRY_POINT_GROUP = hookspecs.PROJECT

#: Environment variable turning broken-plugin warnings into errors ("1", "true", "yes", "on").
STRICT_ENV = "BUDRO_STRICT_PLUGINS"

#: Capabilities assumed for an object whose class declares none (see :func:`capabilities_of`).
_BASELINE = {"solver": frozenset({"dense-cost"}), "backend": frozenset(), "fair_metric": frozenset()}


@dataclass(frozen=True)
class RegisteredPlugin:
    """A plugin record together with the package that provided it."""

    spec: PluginSpec
    source: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def description(self) -> str:
        return self.spec.summary

    @property
    def capabilities(self) -> frozenset[str]:
        """The declared capabilities; a solver declaring no cost capability gets ``"dense-cost"``."""
        return _effective(self.kind, self.spec.capabilities)

    @property
    def builtin(self) -> bool:
        return self.source == BUILTIN_SOURCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "aliases": list(self.spec.aliases),
            "source": self.source,
            "description": self.description,
            "parameters": {k: (None if v is REQUIRED else _jsonable(v)) for k, v in self.spec.parameters.items()},
            "required": [k for k, v in self.spec.parameters.items() if v is REQUIRED],
            "capabilities": sorted(self.capabilities),
            "status": "ok",
        }


@dataclass(frozen=True)
class BrokenPlugin:
    """A plugin (or one of its records) that was left out, and why.

    ``stage`` is where it failed: ``"import"`` (loading its entry point), ``"hookimpl"`` (its hook
    functions do not match budro's hooks), ``"hook"`` (its hook raised), ``"record"`` (a record
    of the wrong type or with an unknown capability) or ``"name"`` (a name collision).
    """

    source: str
    stage: str
    error: str
    kind: str = ""
    name: str = ""
    plugin: str = ""

    @property
    def message(self) -> str:
        return self.error

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind or None,
            "name": self.name or None,
            "source": self.source,
            "plugin": self.plugin or None,
            "stage": self.stage,
            "status": "broken",
            "error": self.error,
        }


class Registry:
    """A set of plugins collected through budro's hooks.

    Parameters
    ----------
    builtins : bool
        Register budro's own plugins (default True).
    entry_points : bool
        Load third-party plugins from the ``budro`` entry-point group (default True).
    strict : bool or None
        Raise :class:`~budro.exceptions.PluginError` for a broken plugin instead of warning and
        leaving it out.  None (default): strict when the environment variable
        ``BUDRO_STRICT_PLUGINS`` is ``1``/``true``/``yes``/``on`` (read on each use).
    """

    def __init__(self, *, builtins: bool = True, entry_points: bool = True, strict: bool | None = None):
        self._builtins = builtins
        self._entry_points = entry_points
        self._strict = strict
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        self._sources: dict[int, str] = {}
        self._loaded = False
        self._load_problems: list[BrokenPlugin] = []  # import and hookimpl problems (kept)
        self._table: dict[str, dict[str, RegisteredPlugin]] | None = None
        self._aliases: dict[str, dict[str, str]] = {}
        self._broken: list[BrokenPlugin] = []
        self._metric_classes: dict[str, tuple[type, RegisteredPlugin]] = {}
        self._warned: set[str] = set()
        self._lock = threading.RLock()

    @property
    def strict(self) -> bool:
        if self._strict is not None:
            return bool(self._strict)
        return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes", "on")

    # -- registration -------------------------------------------------------------------
    def register(self, plugin: Any, *, source: str | None = None, name: str | None = None) -> bool:
        """Register an object or module holding hook implementations (``source`` names its package).

        Returns True when registered; a plugin whose hook functions do not match budro's hooks
        is reported (warning, or PluginError in strict mode) and left out (False).
        """
        with self._lock:
            self._load()
            source = source or getattr(plugin, "__name__", None) or type(plugin).__name__
            ok = self._register_one(plugin, source=source, name=name, plugin_label=name or source)
            self._table = None
            self._report_load_problems()
            return ok

    def unregister(self, plugin: Any) -> None:
        with self._lock:
            self._pm.unregister(plugin)
            self._sources.pop(id(plugin), None)
            self._table = None

    def _register_one(self, plugin: Any, *, source: str, name: str | None, plugin_label: str) -> bool:
        """Register ``plugin`` with pluggy, or record why it cannot be (never raises for the plugin's faults)."""
        if self._pm.is_registered(plugin):
            return True  # the same module loaded twice (e.g. a duplicated path entry)
        if name is not None and self._pm.has_plugin(name):
            return self._pm.get_plugin(name) is plugin
        try:
            self._pm.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            self._load_problems.append(BrokenPlugin(
                source=source, stage="hookimpl", plugin=plugin_label,
                error=f"plugin package {source!r} ({plugin_label}) does not match budro's hooks: {exc}"))
            return False
        except ValueError as exc:  # pluggy: the name or object is taken
            self._load_problems.append(BrokenPlugin(
                source=source, stage="hookimpl", plugin=plugin_label,
                error=f"plugin package {source!r} ({plugin_label}) cannot be registered: {exc}"))
            return False
        unknown = sorted(caller.name for caller in (self._pm.get_hookcallers(plugin) or []) if not caller.has_spec())
        if unknown:
            self._pm.unregister(plugin)
            known = ", ".join(sorted(HOOK_NAMES.values()))
            close = difflib.get_close_matches(unknown[0], list(HOOK_NAMES.values()), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else " (misspelled?)"
            self._load_problems.append(BrokenPlugin(
                source=source, stage="hookimpl", plugin=plugin_label,
                error=f"plugin package {source!r} ({plugin_label}) implements a hook budro does not define: "
                      f"{', '.join(unknown)}{hint}; budro's hooks are: {known}"))
            return False
        self._sources[id(plugin)] = source
        return True

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            # Marked loaded first: a failure below is recorded, never retried half-way (a second
            # attempt must not find the built-ins "already registered").
            self._loaded = True
            if self._builtins:
                for modname in BUILTIN_PLUGIN_MODULES:
                    module = importlib.import_module(modname)  # budro's own: a failure is a budro bug
                    self._pm.register(module, name=modname)
                    self._sources[id(module)] = BUILTIN_SOURCE
            if self._entry_points:
                self._load_entry_points()

    def _load_entry_points(self) -> None:
        """Load the ``budro`` entry points one at a time, so one that fails is named and skipped."""
        seen: set[tuple[str, str]] = set()
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = _dist_name(getattr(ep, "dist", None)) or ep.value
            label = f"entry point {ep.name} = {ep.value}"
            if (dist, ep.name) in seen:
                continue  # the same distribution found twice on sys.path
            seen.add((dist, ep.name))
            try:
                plugin = ep.load()
            except Exception as exc:  # a third-party import error must not stop budro
                self._load_problems.append(BrokenPlugin(
                    source=dist, stage="import", plugin=label,
                    error=f"plugin package {dist!r} failed to import ({label}): {type(exc).__name__}: {exc}"))
                continue
            self._register_one(plugin, source=dist, name=f"{dist}:{ep.name}", plugin_label=label)

    def _source_of(self, plugin: Any) -> str:
        return self._sources.get(id(plugin)) or self._pm.get_name(plugin) or repr(plugin)

    # -- reporting ----------------------------------------------------------------------
    def _report(self, problems: list[BrokenPlugin]) -> None:
        """Warn once per problem, or raise PluginError for all of them in strict mode."""
        if not problems:
            return
        if self.strict:
            lines = "\n".join(f"  - {p.error}" for p in problems)
            raise PluginError(
                f"{len(problems)} broken plugin(s) (strict mode: {STRICT_ENV}=1 or --strict-plugins):\n{lines}")
        for p in problems:
            if p.error in self._warned:
                continue
            self._warned.add(p.error)
            text = p.error if "left out" in p.error else f"{p.error}; it is left out"
            warnings.warn(PluginWarning(text), stacklevel=4)

    def _report_load_problems(self) -> None:
        self._report(list(self._load_problems))

    # -- collection ---------------------------------------------------------------------
    def _collect(self) -> dict[str, dict[str, RegisteredPlugin]]:
        self._load()
        with self._lock:
            if self._table is None:
                self._build()
            self._report(self._load_problems + self._broken)
            assert self._table is not None
            return self._table

    def _build(self) -> None:
        problems: list[BrokenPlugin] = []
        table: dict[str, dict[str, RegisteredPlugin]] = {}
        aliases: dict[str, dict[str, str]] = {}
        metric_classes: dict[str, tuple[type, RegisteredPlugin]] = {}
        for kind, hook_name in HOOK_NAMES.items():
            entries = self._records(kind, hook_name, problems)
            kept = _resolve_collisions(kind, entries, problems)
            if kind == "fair_metric":
                kept, metric_classes = _metric_class_table(kept, problems)
            table[kind] = {e.name: e for e in kept}
            aliases[kind] = {key: e.name for e in kept for key in (e.name, *e.spec.aliases)}
        self._table, self._aliases, self._broken = table, aliases, problems
        self._metric_classes = metric_classes

    def _records(self, kind: str, hook_name: str, problems: list[BrokenPlugin]) -> list[RegisteredPlugin]:
        """Every valid record of ``kind`` in registration order; the invalid ones go to ``problems``."""
        record_type = KINDS[kind]
        out: list[RegisteredPlugin] = []
        for impl in getattr(self._pm.hook, hook_name).get_hookimpls():  # registration order: built-ins first
            source = self._source_of(impl.plugin)
            try:
                records = list(impl.function() or ())
            except Exception as exc:  # a broken third-party plugin must say who it is
                problems.append(BrokenPlugin(
                    source=source, stage="hook", kind=kind,
                    error=f"plugin package {source!r} failed in hook {hook_name}: {type(exc).__name__}: {exc}"))
                continue
            for spec in records:
                if not isinstance(spec, record_type):
                    problems.append(BrokenPlugin(
                        source=source, stage="record", kind=kind, name=str(getattr(spec, "name", "") or ""),
                        error=f"plugin package {source!r}: hook {hook_name} must yield {record_type.__name__} "
                              f"records, got {type(spec).__name__}"))
                    continue
                try:
                    check_capabilities(kind, spec.capabilities)
                except ValueError as exc:
                    problems.append(BrokenPlugin(
                        source=source, stage="record", kind=kind, name=spec.name,
                        error=f"plugin package {source!r}: {kind} {spec.name!r}: {exc}"))
                    continue
                out.append(RegisteredPlugin(spec=spec, source=source))
        return out

    # -- public API ---------------------------------------------------------------------
    def available(self, kind: str) -> list[str]:
        """Canonical names of the plugins of ``kind`` ("backend", "solver" or "fair_metric")."""
        return sorted(self._collect()[_check_kind(kind)])

    def names(self, kind: str) -> list[str]:
        """Every name that resolves for ``kind``: canonical names and aliases."""
        kind = _check_kind(kind)
        self._collect()
        return sorted(self._aliases[kind])

    def get(self, kind: str, name: str) -> RegisteredPlugin:
        """The record behind ``name`` (a canonical name or an alias)."""
        kind = _check_kind(kind)
        table = self._collect()
        if not isinstance(name, str):
            raise UnknownPluginError(f"{kind} name must be a string, got {name!r}; choose one of: {', '.join(self.names(kind))}")
        canonical = self._aliases[kind].get(name)
        if canonical is None:
            choices = self.names(kind)
            close = difflib.get_close_matches(name, choices, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            left_out = [b for b in self._load_problems + self._broken if b.kind in ("", kind) and b.name in ("", name)]
            note = ""
            if any(b.name == name for b in left_out):
                note = "; a plugin claiming that name was left out: " + "; ".join(b.error for b in left_out if b.name == name)
            raise UnknownPluginError(f"unknown {kind} {name!r}{hint}; choose one of: {', '.join(choices)}{note}")
        return table[kind][canonical]

    def create(self, kind: str, name: str, **params: Any) -> Any:
        """Create the plugin ``name`` of ``kind`` with ``params`` (validated against its parameters)."""
        entry = self.get(kind, name)
        validate_params(entry, params)
        return entry.spec.factory(**params)

    def plugins(self, kind: str | None = None) -> list[RegisteredPlugin]:
        """Every registered plugin (of one kind, or of all kinds), sorted by kind and name."""
        table = self._collect()
        kinds = [_check_kind(kind)] if kind is not None else list(HOOK_NAMES)
        return [table[k][n] for k in kinds for n in sorted(table[k])]

    def broken(self, kind: str | None = None) -> list[BrokenPlugin]:
        """Every plugin or record left out, with its error (import failures have no kind)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", PluginWarning)
            try:
                self._collect()
            except PluginError:  # strict mode: listing the problems must still work
                pass
        found = self._load_problems + self._broken
        if kind is not None:
            kind = _check_kind(kind)
            found = [b for b in found if b.kind in ("", kind)]
        return list(found)

    def capabilities_of(self, kind: str, obj: Any) -> frozenset[str]:
        """The capabilities of a plugin instance (a solver, backend or fair-metric learner).

        Read from the record of the nearest class in ``type(obj).__mro__`` that is a registered
        factory of ``kind``, or from a ``capabilities`` attribute defined by a class nearer in
        the MRO (for classes used without registering them; validated against the closed set).
        An object with neither gets the kind's baseline: ``{"dense-cost"}`` for a solver, nothing
        for a backend or fair-metric learner.
        """
        kind = _check_kind(kind)
        table = self._collect()
        factories: dict[Any, RegisteredPlugin] = {}
        for entry in table[kind].values():
            factories.setdefault(entry.spec.factory, entry)
        for cls in type(obj).__mro__:
            own = cls.__dict__.get("capabilities")
            if own is not None and not isinstance(own, (property, staticmethod, classmethod)):
                try:
                    return _effective(kind, check_capabilities(kind, own))
                except ValueError as exc:
                    raise ValidationError(f"{cls.__name__}.capabilities: {exc}") from None
            entry = factories.get(cls)
            if entry is not None:
                return entry.capabilities
        return _effective(kind, _BASELINE[kind])

    def metric_class(self, kind: str) -> type:
        """The fitted-metric class whose ``kind`` is ``kind``, from the fair-metric records."""
        self._collect()
        found = self._metric_classes.get(kind) if isinstance(kind, str) else None
        if found is None:
            known = ", ".join(sorted(self._metric_classes)) or "(none)"
            raise ValidationError(
                f"unknown fair-metric kind {kind!r}: no registered fair-metric plugin lists a metric class of that "
                f"kind (install the plugin that wrote it); known kinds: {known}")
        return found[0]


def validate_params(entry: RegisteredPlugin, params: dict[str, Any], *, where: str | None = None) -> None:
    """Reject parameters the plugin does not accept, and missing required ones; messages name the key."""
    spec = entry.spec
    label = f"{spec.kind} {spec.name!r}"
    prefix = f"{where}: " if where else ""
    accepted = dict(spec.parameters)
    if not _accepts_any_keyword(spec.factory):  # factories taking **kwargs validate them themselves
        unknown = [k for k in params if k not in accepted]
        if unknown:
            listing = ", ".join(sorted(accepted)) or "(none)"
            close = difflib.get_close_matches(unknown[0], list(accepted), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{prefix}{label} has no parameter {unknown[0]!r}{hint}; its parameters are: {listing}")
    missing = [k for k, v in accepted.items() if v is REQUIRED and k not in params]
    if missing:
        raise ConfigError(f"{prefix}{label} needs parameter {missing[0]!r}")


def _resolve_collisions(kind: str, entries: list[RegisteredPlugin], problems: list[BrokenPlugin]) -> list[RegisteredPlugin]:
    """Drop the entries that claim a taken name or alias: a built-in keeps its name against a
    third-party plugin; two third-party plugins claiming one name are both dropped."""
    claims: dict[str, list[RegisteredPlugin]] = {}
    for e in entries:
        for key in dict.fromkeys((e.name, *e.spec.aliases)):
            claims.setdefault(key, []).append(e)
    dropped: dict[int, RegisteredPlugin] = {}
    for key, claimants in claims.items():
        if len(claimants) < 2:
            continue
        builtins = [e for e in claimants if e.builtin]
        keep = builtins[0] if builtins else None
        losers = [e for e in claimants if e is not keep]
        packages = ", ".join(f"{e.name!r} from package {e.source!r}" for e in claimants)
        if keep is not None:
            outcome = f"the built-in {keep.name!r} is kept and the other(s) left out"
        else:
            outcome = "all of them are left out (rename one, or uninstall one of the packages)"
        for e in losers:
            if id(e) in dropped:
                continue
            dropped[id(e)] = e
            problems.append(BrokenPlugin(
                source=e.source, stage="name", kind=kind, name=e.name,
                error=f"{len(claimants)} {kind} plugins claim the name {key!r}: {packages}; {outcome}"))
    return [e for e in entries if id(e) not in dropped]


def _metric_class_table(entries: list[RegisteredPlugin], problems: list[BrokenPlugin]
                        ) -> tuple[list[RegisteredPlugin], dict[str, tuple[type, RegisteredPlugin]]]:
    """The fair-metric records kept and ``kind -> (class, record)`` over their ``metric_classes``;
    a record listing an unusable class, or a kind another package's class has, is left out."""
    from budro.metrics.linear import LinearMetric

    out: dict[str, tuple[type, RegisteredPlugin]] = {}
    dropped: set[int] = set()
    for entry in sorted(entries, key=lambda e: not e.builtin):  # built-ins first: they keep their kinds
        bad = None
        mine: dict[str, type] = {}
        for cls in entry.spec.metric_classes:  # type: ignore[attr-defined]
            if not (isinstance(cls, type) and issubclass(cls, LinearMetric)):
                bad = f"metric_classes must hold subclasses of budro.metrics.LinearMetric, got {cls!r}"
                break
            own = cls.__dict__.get("kind")
            if not isinstance(own, str) or not own:
                bad = (f"metric class {cls.__name__} must define its own 'kind' string (else it would be saved with "
                       f"its base class's kind {cls.kind!r} and reloaded as the base class)")
                break
            other = out.get(own)
            if other is not None and other[0] is not cls:
                bad = (f"metric class {cls.__name__} has kind {own!r}, which {other[0].__name__} from package "
                       f"{other[1].source!r} already has")
                break
            mine[own] = cls
        if bad is not None:
            dropped.add(id(entry))
            problems.append(BrokenPlugin(source=entry.source, stage="record", kind="fair_metric", name=entry.name,
                                         error=f"plugin package {entry.source!r}: fair_metric {entry.name!r}: {bad}"))
            continue
        for k, cls in mine.items():
            out[k] = (cls, entry)
    return [e for e in entries if id(e) not in dropped], out


def _effective(kind: str, caps: frozenset[str]) -> frozenset[str]:
    if kind == "solver" and not caps & {"dense-cost", "sparse-cost"}:
        return caps | {"dense-cost"}
    return caps


def _check_kind(kind: str) -> str:
    if kind not in HOOK_NAMES:
        raise ValidationError(f"plugin kind must be one of: {', '.join(HOOK_NAMES)}; got {kind!r}")
    return kind


def _dist_name(dist: Any) -> str:
    if dist is None:
        return ""
    for attr in ("project_name", "name"):
        value = getattr(dist, attr, None)
        if value:
            return str(value)
    try:
        return str(dist.metadata["Name"])
    except Exception:
        return repr(dist)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return repr(v)


# -- the process-wide default registry ------------------------------------------------------
_default: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The registry used by :func:`available`, :func:`create`, ... (built on first use)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Registry()
    return _default


@contextlib.contextmanager
def use_registry(registry: Registry) -> Iterator[Registry]:
    """Make ``registry`` the default inside a ``with`` block (restored afterwards; for tests)."""
    global _default
    previous = _default
    _default = registry
    try:
        yield registry
    finally:
        _default = previous


def available(kind: str) -> list[str]:
    """Canonical names of the plugins of ``kind`` ("backend", "solver" or "fair_metric")."""
    return default_registry().available(kind)


def get(kind: str, name: str) -> RegisteredPlugin:
    """The record behind a plugin name or alias."""
    return default_registry().get(kind, name)


def create(kind: str, name: str, **params: Any) -> Any:
    """Create plugin ``name`` of ``kind`` with ``params``."""
    return default_registry().create(kind, name, **params)


def plugins(kind: str | None = None) -> list[RegisteredPlugin]:
    """Every registered plugin with its source package."""
    return default_registry().plugins(kind)


def broken(kind: str | None = None) -> list[BrokenPlugin]:
    """Every plugin left out of the default registry, with its error."""
    return default_registry().broken(kind)


def capabilities_of(kind: str, obj: Any) -> frozenset[str]:
    """The capabilities of a plugin instance (see :meth:`Registry.capabilities_of`)."""
    return default_registry().capabilities_of(kind, obj)


def metric_class(kind: str) -> type:
    """The registered fitted-metric class of a ``to_dict`` ``kind`` (see :meth:`Registry.metric_class`)."""
    return default_registry().metric_class(kind)
