"""A streaming query's change rows counted by change type, as Spark's observed metrics.

`observe_change_counts` adds the counts to a change stream's DataFrame (`Dataset.observe`:
computed as the batch runs, no second pass over its rows); each progress report of the
query then carries them, and `observed_change_counts` reads them back, as `meltwater serve`
does for its metrics and log lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from meltwater.stream.engine.changes.change_schema import (
    CHANGE_TYPE,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
)

CHANGE_TYPES = (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER)
OBSERVATION = "meltwater_changes"


def observe_change_counts(frame: Any) -> Any:
    """`frame` (a change stream's DataFrame, Iceberg's change type names) with its rows
    counted by change type in each batch's progress report."""
    from pyspark.sql import functions as F

    counts = [F.sum(F.when(F.col(CHANGE_TYPE) == kind, 1).otherwise(0)).alias(kind)
              for kind in CHANGE_TYPES]
    return frame.observe(OBSERVATION, *counts)


def observed_change_counts(progress: Mapping[str, Any]) -> dict[str, int]:
    """The change counts of a batch's progress report (0 for a type it did not count, or a
    report without them)."""
    observed = (progress.get("observedMetrics") or {}).get(OBSERVATION) or {}
    if hasattr(observed, "asDict"):  # a Row in pyspark's progress, a dict in its JSON
        observed = observed.asDict()
    return {kind: int(observed.get(kind) or 0) for kind in CHANGE_TYPES}


__all__ = ["CHANGE_TYPES", "observe_change_counts", "observed_change_counts"]
