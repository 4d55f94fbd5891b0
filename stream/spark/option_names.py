"""The names of the meltwater source's options, in one place: what `options.py` reads,
and the check a configuration that names only stream options runs over them
(`check_stream_option_names`, for `meltwater serve`'s `[pipelines.options]`)."""

from __future__ import annotations

from collections.abc import Iterable

from meltwater.stream.errors import OptionError

CATALOG_OPTION = "catalog"
CATALOG_PREFIX = "catalog."
IO_PREFIX = "io."

# Every option the source reads, as its documentation writes it (Spark hands them over
# lower-cased), besides the table's (`path`/`table`, `catalog`) and the `catalog.*` and
# `io.*` properties.
ROW_OPTION_NAMES = ("compute-updates", "computeUpdates", "identifier-columns", "keep-carryover",
                    "appends-only", "equality-deletes", "change-type-names",
                    "before-images", "deduplicationMode")
STREAM_OPTION_NAMES = ("starting", "start-snapshot-id", "stream-from-timestamp",
                       "startingVersion", "startingTimestamp", "starting-snapshot-as-inserts",
                       "streaming-max-files-per-micro-batch", "maxFilesPerTrigger",
                       "streaming-max-rows-per-micro-batch",
                       "streaming-max-bytes-per-micro-batch", "maxBytesPerTrigger",
                       "skip-expired-snapshots", "schema-change", "split-size",
                       "watch-wait-ms", "key-index-dir", "branch", *ROW_OPTION_NAMES)
BATCH_OPTION_NAMES = ("snapshot-id", "versionAsOf", "as-of-timestamp", "timestampAsOf",
                      "branch", "tag", "start-snapshot-id", "start-sequence-number",
                      "start-timestamp", "startingVersion", "startingTimestamp",
                      "end-snapshot-id", "endingVersion", "end-timestamp", "endingTimestamp",
                      "read-changes", "readChangeFeed", "net-changes", "skip-expired-snapshots",
                      "split-size", "key-index-dir", *ROW_OPTION_NAMES)
TABLE_OPTION_NAMES = ("path", "table", CATALOG_OPTION)
PROPERTY_PREFIXES = (CATALOG_PREFIX, IO_PREFIX)


def check_stream_option_names(names: Iterable[str]) -> None:
    """Refuse a name that is not an option of the change stream, with the one meant if it
    looks like a misspelling: an OptionError naming the first such name.

    The source itself does not call this and reads past names it does not know, as Spark's
    own sources do: Spark hands a source options that are not the user's (`path`, a SQL
    view's `OPTIONS`), and code that switches a reader between formats keeps options meant
    for another. A configuration that names the stream's options and nothing else
    (`meltwater serve`'s `[pipelines.options]`) calls it, so a typo is not silently a
    default.
    """
    import difflib

    stream = {name.lower(): name for name in STREAM_OPTION_NAMES}
    batch = {name.lower() for name in BATCH_OPTION_NAMES} - set(stream)
    for name in names:
        lowered = name.lower()
        if lowered in stream or lowered.startswith(PROPERTY_PREFIXES):
            continue
        if lowered in TABLE_OPTION_NAMES:
            raise OptionError(f"option {name}: the table is given where the stream is "
                              "loaded, not as an option")
        if lowered in batch:
            raise OptionError(f"option {name} is an option of batch reads (spark.read); a "
                              "stream does not take it")
        close = difflib.get_close_matches(lowered, sorted(stream), n=1, cutoff=0.75)
        hint = (f" (did you mean {stream[close[0]]!r}?)" if close
                else f" (options: {', '.join(sorted(stream.values(), key=str.lower))})")
        raise OptionError(f"option {name} is not an option of the meltwater stream{hint}")
