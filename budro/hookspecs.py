"""budro's plugin hooks.

A plugin package implements one or more of these hooks and registers the module in the
``budro`` entry-point group::

    # pyproject.toml
    [project.entry-points.budro]
    my_plugin = "my_package.plugin"

    # my_package/plugin.py
    import budro

    @budro.hookimpl
    def budro_solvers():
        yield budro.SolverPlugin(name="my-solver", factory=MySolver, description="...")

budro's own backends, solvers and fair metrics are registered through these same hooks.
``docs/plugins.md`` has the contracts, the closed capability sets and the conformance kits; a
plugin that fails to import, raises here, yields a wrong record or collides on a name is reported
(:class:`~budro.exceptions.PluginWarning`) and left out, not fatal.
"""

from __future__ import annotations

from typing import Iterable

import pluggy

from budro.plugin_types import BackendPlugin, FairMetricPlugin, SolverPlugin

PROJECT = "budro"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def budro_backends() -> Iterable[BackendPlugin]:
    """Yield :class:`~budro.BackendPlugin` records: booster backends driven one round at a time."""


@hookspec
def budro_solvers() -> Iterable[SolverPlugin]:
    """Yield :class:`~budro.SolverPlugin` records: solvers of the per-round transport problem."""


@hookspec
def budro_fair_metrics() -> Iterable[FairMetricPlugin]:
    """Yield :class:`~budro.FairMetricPlugin` records: learners of fair metrics."""
