"""The interop corpus: tables written by Apache Iceberg Java, with per-snapshot ground truth."""

# The scenarios of the shapes 2026's writers leave (issue 34): staged upserts converted to
# deletion vectors (or position deletes), mixed RowDeltas, write-audit-publish.
WRITERS_2026 = ("staged_upserts", "staged_upserts_v2", "mixed_row_deltas",
                "mixed_row_deltas_v3", "write_audit_publish")
