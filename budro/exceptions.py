"""Errors raised at budro's API boundary."""

from __future__ import annotations

__all__ = ["PluginWarning", "BudroError", "ValidationError", "ModelFileError", "ConfigError", "PluginError", "UnknownPluginError", "DuplicatePluginError",
           "NumericalError", "ConvergenceWarning", "BudroWarning"]


class BudroError(Exception):
    """Base class of every error budro raises on purpose."""


class ValidationError(BudroError, ValueError):
    """Bad input: wrong shape, NaN/inf, impossible parameter value."""


class ModelFileError(ValidationError):
    """A model file that cannot be read: damaged, edited, of an unknown format or version, or a
    pickle refused without ``trusted=True``; the message names the file and what is wrong."""


class NumericalError(ValidationError):
    """Numbers that cannot be computed with: NaN/inf or overflowing features, fair embeddings, costs
    or losses; the message names the quantity and the likely cause (e.g. unscaled features)."""


class ConfigError(ValidationError):
    """A configuration (dict or TOML) that cannot be used; the message names the key."""


class PluginError(BudroError):
    """A plugin could not be registered or created."""


class UnknownPluginError(PluginError, KeyError):
    """No plugin of that kind has that name; the message lists the choices."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class DuplicatePluginError(PluginError):
    """Two plugins claim the same name; the message names both distributions."""


class BudroWarning(UserWarning):
    """Base class of every warning budro issues on purpose."""


class ConvergenceWarning(BudroWarning):
    """A solver stopped before meeting its own stopping rule (``max_iter``, a time budget, a failed
    inner solve): its plan is feasible but may be suboptimal; the message gives the remaining gap or
    residual, and :attr:`budro.core.RoundRecord.converged` records it per round."""


class PluginWarning(BudroWarning):
    """A third-party plugin is broken and was left out (the message names its package and the error).

    Strict mode (``budro --strict-plugins`` or ``BUDRO_STRICT_PLUGINS=1``) raises
    :class:`PluginError` instead.
    """
