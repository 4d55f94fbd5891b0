"""The output layer's errors: rows and changes that cannot be written where or as asked.
All are `MeltwaterError`s (one line, exit status 2).
"""

from meltwater.planner.errors import MeltwaterError


class OutputError(MeltwaterError):
    """The requested output cannot be written (format, destination)."""


class ParquetFooterError(OutputError):
    """A Parquet file meltwater encoded cannot be joined into its output (a footer field
    the vendored parquet.thrift does not know, a malformed part)."""


class OutputFileError(MeltwaterError):
    """The output file cannot be created or put in place (a missing directory, rights)."""


class ChangeOutputError(MeltwaterError):
    """Change rows that cannot be written as events (an unpaired update image)."""
