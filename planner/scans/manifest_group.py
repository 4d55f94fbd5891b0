"""A snapshot scan's planner: the snapshot's manifests in, pruned live entries and scan
tasks out.

It prunes manifests by file counts and partition summaries, entries by partition values
and column metrics, matches delete files to data files (`DeleteFileIndex`) and gives each
task its residual. Change planning does not go through here: it carries the table's
state from commit to commit and reads only each commit's own manifests
(`meltwater.planner.changes.incremental`), sharing the delete rules (`delete_index`), the
filter's evaluators (`FilterEvaluators`) and the counters (`plan_stats`).

Pruning is counted in `PlanStats`, which `meltwater plan` prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from meltwater.planner.expressions.filter_evaluators import FilterEvaluators
from meltwater.planner.expressions.tree import (
    TRUE,
    AlwaysTrue,
    Expression,
    Op,
    predicates,
    rewrite_not,
)
from meltwater.planner.scans.delete_index import DeleteFileIndex
from meltwater.planner.scans.plan_stats import PlanStats
from meltwater.planner.scans.tasks import DeleteFileRef, EqualityDeleteSet, FileScanTask
from meltwater.planner.spec.files import (
    EntryStatus,
    FileContent,
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)
from meltwater.planner.spec.types import Schema
from meltwater.planner.table.manifests import ManifestReader

_NULL_SENSITIVE = (Op.NOT_EQ, Op.NOT_IN, Op.NOT_STARTS_WITH)


def default_workers() -> int:
    """Threads for reading manifests from object stores: a few more than cores, as they wait on
    the network."""
    return min(8, (os.cpu_count() or 2) + 2)


class ManifestGroup:
    """Plans a snapshot's live files from its data and delete manifests with one row filter
    (bound to `schema`); manifests whose file counts show no live file are skipped unread.
    """

    def __init__(self, reader: ManifestReader, schema: Schema,
                 data_manifests: Sequence[ManifestFile],
                 delete_manifests: Sequence[ManifestFile] = (), *,
                 row_filter: Expression = TRUE,
                 workers: int | None = None, stats: PlanStats | None = None) -> None:
        self.reader = reader
        self.metadata = reader.metadata
        self.schema = schema
        self.data_manifests = list(data_manifests)
        self.delete_manifests = list(delete_manifests)
        self.row_filter = row_filter
        self.workers = workers or default_workers()
        self.stats = stats or PlanStats()
        self._filtered = not isinstance(row_filter, AlwaysTrue)
        self._evaluators = FilterEvaluators(schema, row_filter, self.metadata.specs)
        if self._filtered:  # build every per-spec evaluator now, before threads share them
            for spec_id in self.metadata.specs:
                self._evaluators.manifest_evaluator(spec_id)
                self._evaluators.partition_evaluator(spec_id)
                self._evaluators.residual_evaluator(spec_id)
            _ = self._evaluators.metrics_evaluator
        # Iceberg's residuals treat `x != v` as true for null x; a user's filter follows
        # SQL, where it is not. Such filters are applied whole instead of as residuals.
        self._whole_filter = any(getattr(p, "op", None) in _NULL_SENSITIVE
                                 for p in predicates(rewrite_not(row_filter)))

    def _residual(self, spec_id: int, partition: tuple[Any, ...]) -> Expression:
        if not self._filtered:
            return TRUE
        if self._whole_filter:
            return self.row_filter
        return self._evaluators.residual_evaluator(spec_id).residual_for(partition)

    # -- manifests ----------------------------------------------------------------------
    @staticmethod
    def _may_hold_live_files(manifest: ManifestFile) -> bool:
        """Whether the manifest's file counts allow a live (ADDED or EXISTING) entry."""
        return manifest.has_added_files() or manifest.has_existing_files()

    def _matching_manifests(self, manifests: Iterable[ManifestFile]) -> Iterator[ManifestFile]:
        for manifest in manifests:
            if not self._may_hold_live_files(manifest):
                self.stats.add(manifests_skipped_by_counts=1)
                continue
            if self._filtered and not self._evaluators.may_match(manifest):
                self.stats.add(manifests_skipped_by_partition=1)
                continue
            yield manifest

    def _entries_of(self, manifest: ManifestFile) -> list[ManifestEntry]:
        """The live entries of one manifest that pass pruning."""
        entries = self.reader.entries(manifest)
        is_delete = manifest.content == ManifestContent.DELETES
        kept: list[ManifestEntry] = []
        partition_ok = (self._evaluators.partition_evaluator(manifest.partition_spec_id)
                        if self._filtered else None)
        skipped_partition = skipped_metrics = considered = 0
        for entry in entries:
            if entry.status == EntryStatus.DELETED:
                continue
            considered += 1
            if partition_ok is not None and not partition_ok.eval(entry.file.partition):
                skipped_partition += 1
                continue
            if self._filtered and not self._may_match(entry):
                skipped_metrics += 1
                continue
            kept.append(entry)
        if is_delete:
            self.stats.add(manifests_read=1, delete_files_considered=considered,
                           delete_files_skipped_by_partition=skipped_partition,
                           delete_files_skipped_by_metrics=skipped_metrics)
        else:
            self.stats.add(manifests_read=1, data_files_considered=considered,
                           data_files_skipped_by_partition=skipped_partition,
                           data_files_skipped_by_metrics=skipped_metrics)
        return kept

    def _may_match(self, entry: ManifestEntry) -> bool:
        """Metrics pruning; position delete files carry no column metrics worth using."""
        if entry.file.content == FileContent.POSITION_DELETES:
            return True
        return self._evaluators.metrics_evaluator.may_match(entry.file)

    def _map_manifests(self, manifests: list[ManifestFile],
                       work: Callable[[ManifestFile], list[ManifestEntry]],
                       ) -> list[list[ManifestEntry]]:
        """Apply `work` to each manifest, on a thread pool when reads wait on a network.

        Threads overlap the round trips of object stores. Decoding holds the GIL, so on a
        local filesystem, with no waiting to overlap, a pool only adds its own cost: 10-15%
        slower planning of local manifests than one thread.
        """
        if len(manifests) <= 1 or self.workers <= 1 or (
                self.reader.io.is_local(manifests[0].manifest_path)):
            return [work(m) for m in manifests]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(manifests))) as pool:
            return list(pool.map(work, manifests))

    def entries(self, *, deletes: bool = False) -> Iterator[tuple[ManifestFile, ManifestEntry]]:
        """Pruned entries of the data (or delete) manifests, with the manifest they came from."""
        source = self.delete_manifests if deletes else self.data_manifests
        manifests = list(self._matching_manifests(source))
        for manifest, kept in zip(manifests, self._map_manifests(manifests, self._entries_of),
                                  strict=True):
            for entry in kept:
                yield manifest, entry

    def delete_index(self) -> DeleteFileIndex:
        """The index of the snapshot's live delete files."""
        index = DeleteFileIndex(self.metadata.specs)
        for _, entry in self.entries(deletes=True):
            index.add(DeleteFileRef(entry.file, entry.sequence_number))
        return index

    def plan_files(self, deletes: DeleteFileIndex | None = None) -> list[FileScanTask]:
        """One task per data file: the file, its position deletes, the shared equality
        deletes (when any applies to it) and its residual."""
        deletes = deletes if deletes is not None else self.delete_index()
        equality = deletes.equality_set()
        tasks = []
        matched: set[tuple[str, int | None]] = set()
        for _, entry in self.entries():
            data_file = entry.file
            seq = entry.sequence_number
            applied = deletes.positional_for(seq, data_file)
            matched.update(ref.key for ref in applied)
            shared = equality if equality is not None and equality.applies_to(
                seq, data_file) else None
            tasks.append(FileScanTask(
                data_file=data_file, sequence_number=seq, deletes=applied,
                residual=self._residual(data_file.spec_id, data_file.partition),
                equality=shared))
        if equality is not None:
            matched.update(_equality_matched(equality, tasks))
        self.stats.add(delete_files_matched=len(matched), tasks=len(tasks))
        return tasks


def _equality_matched(equality: EqualityDeleteSet, tasks: Sequence[FileScanTask]
                      ) -> set[tuple[str, int | None]]:
    """The equality delete files that apply to at least one task's data file, by the rule:
    a global one to any data file older than it, a scoped one to an older one of its
    partition (the oldest data file per partition decides; no pair is looked at)."""
    oldest: int | None = None
    oldest_in: dict[Any, int] = {}
    for task in tasks:
        seq, key = task.sequence_number, task.data_file.partition_key
        oldest = seq if oldest is None else min(oldest, seq)
        oldest_in[key] = min(oldest_in.get(key, seq), seq)
    matched = {ref.key for ref in equality.global_refs
               if oldest is not None and ref.sequence_number > oldest}
    matched.update(ref.key for ref in equality.scoped_refs
                   if ref.sequence_number > oldest_in.get(ref.file.partition_key,
                                                           ref.sequence_number))
    return matched
