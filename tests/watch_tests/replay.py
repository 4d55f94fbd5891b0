"""Replaying an Iceberg Java table's commits into a fresh directory, as Iceberg commits.

A corpus table's `v<N>.metadata.json` files are its history. `Replay` commits them again
one by one into a new table directory the way Iceberg's Hadoop tables do:
`metadata/<uuid>.metadata.json` written, renamed to `v<N>.metadata.json`, then a
`<uuid>-version-hint.temp` written, `version-hint.text` deleted and the temp file renamed
in its place. Data files and manifests stay where the metadata points (the corpus), so
the replayed table reads like the original at each version.

`synthesized(count)` makes more commits than a corpus table has: appends on top of its
newest metadata, with fresh snapshot ids (only the metadata JSON is new; their manifest
lists are the last real snapshot's, so do not scan them).
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from pathlib import Path


def metadata_versions(location: str) -> list[Path]:
    """A table's `v<N>.metadata.json` files in version order."""
    return sorted(Path(location, "metadata").glob("v*.metadata.json"),
                  key=lambda p: int(p.name[1:].split(".")[0]))


class Replay:
    """A table directory that receives a source table's metadata versions as commits."""

    def __init__(self, source: str, target: Path) -> None:
        self.sources = metadata_versions(source)
        self.location = str(target)
        self.metadata = target / "metadata"
        self.metadata.mkdir(parents=True)
        self.version = 0

    @property
    def remaining(self) -> int:
        return len(self.sources) - self.version

    def current_snapshot(self, version: int | None = None) -> int | None:
        """The main branch's snapshot at a source version (default: the last committed)."""
        text = self.sources[(version or self.version) - 1].read_text()
        current = json.loads(text).get("current-snapshot-id")
        return None if current in (None, -1) else current

    def commit(self, text: str | None = None) -> int:
        """Commit the next source version (or `text`) as Iceberg's Hadoop tables do;
        returns the new version number."""
        self.version += 1
        if text is None:
            text = self.sources[self.version - 1].read_text()
        temp = self.metadata / f"{uuid.uuid4()}.metadata.json"
        temp.write_text(text)
        os.rename(temp, self.metadata / f"v{self.version}.metadata.json")
        self.write_hint(self.version)
        return self.version

    def write_hint(self, version: int) -> None:
        hint = self.metadata / "version-hint.text"
        temp = self.metadata / f"{uuid.uuid4()}-version-hint.temp"
        temp.write_text(str(version))
        if hint.exists():
            hint.unlink()
        os.rename(temp, hint)

    def commit_until(self, version: int) -> None:
        while self.version < version:
            self.commit()

    def synthesized(self, count: int) -> list[tuple[int, str]]:
        """`count` appends after the newest source version: (snapshot id, metadata JSON)."""
        obj = json.loads(self.sources[-1].read_text())
        out = []
        for i in range(count):
            obj = copy.deepcopy(obj)
            parent = obj["current-snapshot-id"]
            last = next(s for s in obj["snapshots"] if s["snapshot-id"] == parent)
            snapshot_id = 7_000_000_000_000_000_000 + i
            sequence = obj.get("last-sequence-number", 0) + 1
            timestamp = last["timestamp-ms"] + 1
            snapshot = {**last, "snapshot-id": snapshot_id, "parent-snapshot-id": parent,
                        "sequence-number": sequence, "timestamp-ms": timestamp,
                        "summary": {"operation": "append", "added-records": str(i + 1),
                                    "added-data-files": "1"}}
            obj["snapshots"].append(snapshot)
            obj["current-snapshot-id"] = snapshot_id
            obj["last-sequence-number"] = sequence
            obj["last-updated-ms"] = timestamp
            obj.setdefault("refs", {})["main"] = {"snapshot-id": snapshot_id, "type": "branch"}
            obj.setdefault("snapshot-log", []).append({"timestamp-ms": timestamp,
                                                       "snapshot-id": snapshot_id})
            out.append((snapshot_id, json.dumps(obj)))
        return out
