"""The service's errors: what `meltwater serve` refuses before it starts anything.

Both are `MeltwaterError`s, so `meltwater serve` prints their one line and exits 2.
"""

from __future__ import annotations

from meltwater.planner.errors import MeltwaterError


class ConfigError(MeltwaterError):
    """The service configuration is invalid; the message names the file and the key."""


class CheckpointInUseError(MeltwaterError):
    """Another process holds a checkpoint's lock: another service runs that pipeline
    (`meltwater.service.checkpoints`)."""
