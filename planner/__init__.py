"""The kernel: Iceberg table metadata, manifests, predicates and scan/change planning.

Nothing here reads data files or imports Spark. Planning emits plain, picklable task
objects that the engine side (`meltwater.stream`) executes.
"""

from meltwater.planner.errors import MeltwaterError

__all__ = ["MeltwaterError"]
