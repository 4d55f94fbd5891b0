"""The corpus's tables written by pyiceberg: its history (`pyiceberg_writer.write_history`:
appends, a filtered overwrite, a dynamic partition overwrite, a delete, an upsert) through
a SQL catalog, into the corpus directory, before Iceberg Java records what it reads at
each of their snapshots (writer/generate.py --foreign), so they are judged by the same
truth as Iceberg Java's own tables.

Runs in the tests' environment (pyiceberg is a dev dependency), where the corpus build
runs; pyiceberg 0.12 writes format v2 only (v3 raises NotImplementedError) and
copy-on-write only (a merge-on-read delete falls back to copy-on-write, with a warning).
"""

from __future__ import annotations

import json
from pathlib import Path

from corpus.pyiceberg_writer import write_history

PYICEBERG_SCENARIOS = ("pyiceberg_history",)


def write_pyiceberg_tables(root: Path) -> Path:
    """Write the pyiceberg tables under `root`; the JSON file generate.py's --foreign reads."""
    import pyiceberg
    from pyiceberg.catalog import load_catalog

    root.mkdir(parents=True, exist_ok=True)
    catalog = load_catalog("corpus", type="sql", uri=f"sqlite:///{root}/catalog.db",
                           warehouse=(root / "warehouse").as_uri())
    history = write_history(catalog, ("py", "pyiceberg_history"))
    table = history.table.refresh()
    labels = {str(snapshot_id): f"pyiceberg {pyiceberg.__version__}: {step.label}"
              for step in history.steps for snapshot_id in step.snapshot_ids}
    entries = [{
        "name": "pyiceberg_history",
        "metadata_location": table.metadata_location,  # a file: URI, as pyiceberg writes it
        "features": [f"written by pyiceberg {pyiceberg.__version__}", "v2",
                     "copy-on-write overwrite, dynamic partition overwrite, delete, upsert",
                     "a SQL catalog's <NNNNN>-<uuid> metadata files", "identifier fields",
                     "identity partitions"],
        "labels": labels,
    }]
    listing = root / "tables.json"
    listing.write_text(json.dumps(entries, indent=2))
    return listing
