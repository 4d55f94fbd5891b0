"""The interop corpus: tables written by Apache Iceberg Java, with per-snapshot ground truth."""
