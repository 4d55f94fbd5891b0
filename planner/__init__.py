"""The kernel: Iceberg table metadata, manifests, predicates and scan/change planning.

Nothing here reads data files or imports Spark. Planning emits plain, picklable task
objects that the engine side (`meltwater.stream`) executes. `errors` and `str_enum` serve
every room; the rooms, each importing only those below it (`tests/test_layers.py` checks
the order), from the bottom:

- `spec/`: the spec's data model (types, values, partition specs, file descriptions);
- `expressions/`: row filters, their projections and the metadata evaluators;
- `table/`: catalogs, FileIO, table metadata and manifests;
- `scans/`: snapshot scans, the delete index and task splitting;
- `changes/`: change ranges, incremental change planning and micro-batches.
"""

from meltwater.planner.errors import MeltwaterError

__all__ = ["MeltwaterError"]
