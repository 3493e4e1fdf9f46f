"""The small typed records that budro's hooks yield (one per plugin).

A hook implementation yields records such as::

    SolverPlugin(name="dual", factory=DualSolver, description="Exact dual ...",
                 aliases=("dual-bisection",))

``factory(**params)`` creates the plugin instance.  ``parameters`` (name -> default) is the
parameter schema; when omitted it is read from the factory's signature, so configs are
validated against it before anything is trained.

``capabilities`` is a subset of a closed, documented set per kind (:data:`CAPABILITIES`; one line
each below).  The registry leaves out (and reports) a record naming any other string, and the
orchestrator (:class:`budro.core.BuDRO`) honours them: a solver without ``"sparse-cost"`` is never
handed a :class:`~budro.transport.NeighborCost`, a backend without ``"multiclass"`` never more than
two classes, and so on (``docs/plugins.md``).
"""

from __future__ import annotations

import difflib
import inspect
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Iterable, Mapping

__all__ = [
    "PluginSpec",
    "BackendPlugin",
    "SolverPlugin",
    "FairMetricPlugin",
    "KINDS",
    "REQUIRED",
    "CAPABILITIES",
    "SOLVER_CAPABILITIES",
    "BACKEND_CAPABILITIES",
    "FAIR_METRIC_CAPABILITIES",
    "check_capabilities",
]

#: Marks a parameter without a default.
REQUIRED = inspect.Parameter.empty

#: What a solver record may declare (``SolverPlugin(capabilities=...)``), with what it means.
SOLVER_CAPABILITIES: Mapping[str, str] = MappingProxyType({
    "exact": "the objective is the LP optimum up to rounding: objective_tolerance(problem) <= 1e-9 * max(1, max|losses|)",
    "dense-cost": "solves full costs (DenseCost, EmbeddingCost); assumed when neither cost capability is declared",
    "sparse-cost": "solves sparse NeighborCost problems (moves only to the listed neighbours); "
                   "without it BuDRO refuses n_neighbors",
    "blocked": "reads full costs in column blocks (cost.iter_blocks), never holding an n x n matrix",
    "warm-start": "uses eta0 (last round's eta); BuDRO passes eta0 only to solvers declaring this",
    "array-api": "accepts losses as any array-API array (e.g. torch, cupy) and computes in that namespace",
    "stochastic": "randomised: takes a random_state parameter and repeats itself exactly for a fixed seed",
})

#: What a backend record may declare.
BACKEND_CAPABILITIES: Mapping[str, str] = MappingProxyType({
    "multiclass": "trains on K > 2 classes (margins (n, K)); without it BuDRO refuses more than two classes",
    "missing-values": "accepts NaN in X (the library routes missing values); without it BuDRO refuses NaN",
    "native-categorical": "splits categorical columns natively (the library's own categorical support)",
    "native-export": "save_model writes a file the plain library loads and predicts with",
})

#: What a fair-metric record may declare.
FAIR_METRIC_CAPABILITIES: Mapping[str, str] = MappingProxyType({
    "embedding": "the fitted metric has embed(X) with d(x, x')^2 = ||embed(x) - embed(x')||^2; "
                 "needed for n_neighbors (sparse transport)",
    "subspace": "the metric ignores a learned subspace (d = 0 along it)",
    "project": "the fitted metric can project points onto the fair subspace's complement",
    "needs-groups": "fit needs groups of comparable individuals (fit(..., groups=...))",
    "needs-pairs": "fit needs pairs labelled comparable or not (fit(..., pairs=...))",
})

#: Every kind's closed set of capabilities.
CAPABILITIES: Mapping[str, Mapping[str, str]] = MappingProxyType({
    "backend": BACKEND_CAPABILITIES,
    "solver": SOLVER_CAPABILITIES,
    "fair_metric": FAIR_METRIC_CAPABILITIES,
})


def check_capabilities(kind: str, capabilities: Any) -> frozenset[str]:
    """``capabilities`` as a frozenset, or ValueError naming the first unknown one and the choices."""
    allowed = CAPABILITIES[kind]
    if isinstance(capabilities, str) or not isinstance(capabilities, Iterable):
        raise ValueError(f"{kind} capabilities must be a set of strings, got {capabilities!r}; "
                         f"choose from: {', '.join(allowed)}")
    caps = frozenset(capabilities)
    unknown = sorted(c for c in caps if c not in allowed)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), list(allowed), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"unknown {kind} capability {unknown[0]!r}{hint}; choose one of: {', '.join(allowed)}")
    return caps


@dataclass(frozen=True)
class PluginSpec:
    """A plugin: its name, how to create it and what it accepts."""

    name: str
    factory: Callable[..., Any]
    description: str = ""
    parameters: Mapping[str, Any] | None = None
    capabilities: frozenset[str] = frozenset()
    aliases: tuple[str, ...] = ()
    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name != self.name.strip():
            raise ValueError(f"plugin name must be a non-empty string without surrounding spaces, got {self.name!r}")
        if not callable(self.factory):
            raise TypeError(f"plugin {self.name!r}: factory must be callable, got {self.factory!r}")
        params = self.parameters
        if params is None:
            params = _signature_parameters(self.factory)
        object.__setattr__(self, "parameters", MappingProxyType(dict(params)))
        caps = self.capabilities
        caps = frozenset([caps]) if isinstance(caps, str) else frozenset(caps or ())
        object.__setattr__(self, "capabilities", caps)
        object.__setattr__(self, "aliases", tuple(self.aliases))

    @property
    def summary(self) -> str:
        """First line of the description."""
        return (self.description or "").strip().splitlines()[0] if self.description else ""

    def defaults(self) -> dict[str, Any]:
        """Parameters that have defaults, with those defaults."""
        return {k: v for k, v in self.parameters.items() if v is not REQUIRED}


@dataclass(frozen=True)
class BackendPlugin(PluginSpec):
    """A booster backend, driven one round at a time (see :class:`budro.backends.Backend`)."""

    kind: ClassVar[str] = "backend"


@dataclass(frozen=True)
class SolverPlugin(PluginSpec):
    """A transport solver (see :class:`budro.solvers.Solver`)."""

    kind: ClassVar[str] = "solver"


@dataclass(frozen=True)
class FairMetricPlugin(PluginSpec):
    """A fair-metric learner (see :class:`budro.metrics.FairMetricLearner`).

    ``metric_classes`` lists the fitted-metric classes the learner returns that can be saved:
    subclasses of :class:`budro.metrics.LinearMetric`, each with its own ``kind`` string.
    :func:`budro.metrics.metric_from_dict` finds the class behind a dict's ``kind`` among the
    registered records' ``metric_classes`` (nothing is imported from the dict itself).
    """

    metric_classes: tuple[type, ...] = ()
    kind: ClassVar[str] = "fair_metric"

    def __post_init__(self) -> None:
        super().__post_init__()
        classes = self.metric_classes
        if isinstance(classes, type):
            classes = (classes,)
        object.__setattr__(self, "metric_classes", tuple(classes))


KINDS: dict[str, type[PluginSpec]] = {
    "backend": BackendPlugin,
    "solver": SolverPlugin,
    "fair_metric": FairMetricPlugin,
}


def _signature_parameters(factory: Callable[..., Any]) -> dict[str, Any]:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return {}
    out = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        out[p.name] = p.default
    return out


def _accepts_any_keyword(factory: Callable[..., Any]) -> bool:
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return True
    return any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
