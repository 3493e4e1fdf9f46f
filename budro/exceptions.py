"""Errors raised at budro's API boundary."""

from __future__ import annotations

__all__ = ["BudroError", "ValidationError", "ModelFileError", "ConfigError", "PluginError", "UnknownPluginError", "DuplicatePluginError"]


class BudroError(Exception):
    """Base class of every error budro raises on purpose."""


class ValidationError(BudroError, ValueError):
    """Bad input: wrong shape, NaN/inf, impossible parameter value."""


class ModelFileError(ValidationError):
    """A model file that cannot be read: damaged, edited, of an unknown format or version, or a
    pickle refused without ``trusted=True``; the message names the file and what is wrong."""


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
