"""What the service tests read of a service's results beyond its sinks: the files it leaves
and its own JSON log. Running the service is testbed's `service_process`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def log_records(text: str) -> list[dict[str, Any]]:
    """The service's own JSON log records (log = "json"); Spark's JVM writes lines of its
    own, and a service killed with SIGKILL may have left its last line cut short."""
    records = []
    for line in text.splitlines():
        if line.startswith('{"time"'):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records
