"""A row filter's evaluators for one scan: projected onto each partition spec, cached.

`meltwater.planner.expressions.evaluators` answers the four metadata questions for a filter already
on the right columns; `meltwater.planner.expressions.projections` moves a row filter onto a spec's
partition columns. This module joins the two, so neither needs the other.
"""

from __future__ import annotations

from collections.abc import Mapping

from meltwater.planner.errors import FilterError
from meltwater.planner.expressions.evaluators import ManifestEvaluator, PartitionEvaluator
from meltwater.planner.expressions.metrics_evaluator import InclusiveMetricsEvaluator
from meltwater.planner.expressions.projections import (
    ResidualEvaluator,
    inclusive_projection,
    residual_evaluator,
)
from meltwater.planner.expressions.tree import Expression, bind
from meltwater.planner.spec.files import DataFile, ManifestFile
from meltwater.planner.spec.partitioning import PartitionSpec
from meltwater.planner.spec.types import Schema


def manifest_evaluator(spec: PartitionSpec, schema: Schema, row_filter: Expression,
                       case_sensitive: bool = True) -> ManifestEvaluator:
    """May a manifest of `spec` hold rows matching `row_filter` (a filter on table columns)?"""
    projected = inclusive_projection(spec, schema, case_sensitive).project(row_filter)
    return ManifestEvaluator(spec, projected)


# -- one scan's evaluators, cached per spec ----------------------------------------------------


class FilterEvaluators:
    """Every evaluator one scan needs for its row filter, built once per partition spec id.

    The planner calls these for every manifest and every entry; building a projection or
    compiling an evaluator per call would dominate planning time, hence the cache.
    """

    def __init__(self, schema: Schema, row_filter: Expression,
                 specs: Mapping[int, PartitionSpec], case_sensitive: bool = True) -> None:
        self.schema = schema
        self.specs = specs
        self.case_sensitive = case_sensitive
        self.row_filter = bind(row_filter, schema, case_sensitive)
        self._partition_filters: dict[int, Expression] = {}
        self._manifest: dict[int, ManifestEvaluator] = {}
        self._partition: dict[int, PartitionEvaluator] = {}
        self._residual: dict[int, ResidualEvaluator] = {}
        self._metrics: InclusiveMetricsEvaluator | None = None

    def _spec(self, spec_id: int) -> PartitionSpec:
        try:
            return self.specs[spec_id]
        except KeyError:
            raise FilterError(f"no partition spec with id {spec_id}") from None

    def partition_filter(self, spec_id: int) -> Expression:
        """The row filter's inclusive projection onto spec `spec_id`."""
        if spec_id not in self._partition_filters:
            projection = inclusive_projection(self._spec(spec_id), self.schema,
                                              self.case_sensitive)
            self._partition_filters[spec_id] = projection.project(self.row_filter)
        return self._partition_filters[spec_id]

    def manifest_evaluator(self, spec_id: int) -> ManifestEvaluator:
        """The evaluator pruning manifests of spec `spec_id` by their partition summaries."""
        if spec_id not in self._manifest:
            self._manifest[spec_id] = ManifestEvaluator(self._spec(spec_id),
                                                        self.partition_filter(spec_id))
        return self._manifest[spec_id]

    def partition_evaluator(self, spec_id: int) -> PartitionEvaluator:
        """The evaluator pruning files of spec `spec_id` by their partition tuples."""
        if spec_id not in self._partition:
            self._partition[spec_id] = PartitionEvaluator(self._spec(spec_id),
                                                          self.partition_filter(spec_id))
        return self._partition[spec_id]

    def residual_evaluator(self, spec_id: int) -> ResidualEvaluator:
        """A `projections.ResidualEvaluator` for spec `spec_id`."""
        if spec_id not in self._residual:
            self._residual[spec_id] = residual_evaluator(
                self._spec(spec_id), self.schema, self.row_filter, self.case_sensitive)
        return self._residual[spec_id]

    @property
    def metrics_evaluator(self) -> InclusiveMetricsEvaluator:
        """The evaluator pruning files by their column metrics (one for every spec)."""
        if self._metrics is None:
            self._metrics = InclusiveMetricsEvaluator(self.schema, self.row_filter,
                                                      self.case_sensitive)
        return self._metrics

    def may_match(self, manifest: ManifestFile) -> bool:
        """Shortcut: may this manifest hold matching files?"""
        return self.manifest_evaluator(manifest.partition_spec_id).may_match(manifest)

    def file_may_match(self, file: DataFile) -> bool:
        """Shortcut: may this data or delete file hold matching rows (partition and metrics)?"""
        return (self.partition_evaluator(file.spec_id).eval(file.partition)
                and self.metrics_evaluator.may_match(file))
