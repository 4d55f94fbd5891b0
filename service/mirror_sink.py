"""The service's database mirrors: a pipeline's sink config -> an exactly-once foreachBatch.

The ledger's pipeline name is the pipeline's name plus a digest of its checkpoint location:
Spark's batch ids restart from 0 with a new checkpoint, so a pipeline pointed at a fresh
checkpoint must not find its new batches "already applied" under the old one's ids.
"""

from __future__ import annotations

import hashlib
from typing import Any

from meltwater.service.config import PipelineConfig


def ledger_name(name: str, checkpoint: str) -> str:
    """The name a pipeline's batches go by in the mirror's ledger."""
    digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:8]
    return f"{name}@{digest}"


def open_mirror(pipeline: PipelineConfig) -> Any:
    from meltwater.sinks import open_sink

    options = pipeline.sink.options
    return open_sink(options["url"], table=options["table"], source=pipeline.table,
                     key_columns=options.get("key"),
                     pipeline=ledger_name(pipeline.name, pipeline.checkpoint))


def check_mirror(pipeline: PipelineConfig) -> None:
    """Open the mirror once (connect, create or check its table, resolve the key): what can
    fail there fails before the service starts."""
    open_mirror(pipeline).close()


def mirror_writer(frame: Any, pipeline: PipelineConfig) -> Any:
    """`frame.writeStream.foreachBatch(...)` applying each micro-batch to the mirror."""
    from meltwater.sinks.spark_writer import foreach_batch

    return frame.writeStream.foreachBatch(foreach_batch(lambda: open_mirror(pipeline)))
