"""Where meltwater keeps what it builds on this machine: $MELTWATER_CACHE, else
~/.cache/meltwater. One place, so the key indexes (`keys.index_location`) and a local
Spark's staged home (`meltwater.stream.spark.session`) agree on it."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """Meltwater's cache directory on this machine (made by whoever writes into it)."""
    given = os.environ.get("MELTWATER_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "meltwater"
