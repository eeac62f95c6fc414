"""User-facing errors.

Anything the user can fix (a config value, a data file, a path, a checkpoint)
raises a :class:`UserError` whose message names the problem *and* the fix. The
entry points turn it into one line ``error: …`` and exit code 2, never a
traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """Bad user input; the message says what is wrong and how to fix it."""


class ConfigError(UserError):
    """An invalid configuration value or combination."""


class LightningRefusal(ConfigError):
    """A setting Lightning itself refused (its MisconfigurationException, or a fit it could
    not start with the trainer's settings): the override to fix is the user's."""


class DataError(UserError):
    """A missing, empty, unreadable or malformed data file or dataset."""


class CheckpointError(UserError):
    """A missing or unusable checkpoint or run directory."""
