"""Starting `format("meltwater")` streaming queries one at a time, around a race in Spark.

Spark's Python streaming sources (`PythonStreamingSourceRunner.init`, Spark 4.0 to 4.3) put
their worker settings (`SPARK_LOCAL_DIRS`, `SPARK_BUFFER_SIZE`, ...) straight into the
environment map of the data source's registered Python function: one `java.util.HashMap`
shared by every query that reads `format("meltwater")` in the session. When two queries
initialize their sources at the same moment, both insert into it unsynchronized; a lost
update leaves the map's size disagreeing with its entries, and from then on every task that
carries the function fails to deserialize (`java.io.OptionalDataException` in
`HashMap.readObject`), in every query of the session, until the process ends. Seen in
`meltwater serve` with two pipelines: 3 of 11 fresh processes starting three queries at once
were poisoned; none of 12 starting them through `start_query`.

Only the first initialization per registration inserts keys; later ones replace values,
which cannot corrupt the map. So each start holds one process-wide lock until its query has
initialized its sources (or stopped), and the next query starts after.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

_STARTING = threading.Lock()

# `StreamingQuery.status["message"]` while the sources are being created (and the Python
# runner initialized); any other message means the query is past that point.
_INITIALIZING = frozenset({"Initializing StreamExecution", "Initializing sources"})

_POLL_S = 0.02


def start_query(writer: Any, timeout_s: float = 120.0) -> Any:
    """`writer.start()`, returning once the query has initialized its sources.

    `writer` is a `DataStreamWriter`. Starts are serialized across threads of this process
    (see the module doc). A query still initializing after `timeout_s` is returned anyway,
    with a warning: a slow object store must not hang the caller for good.
    """
    with _STARTING:
        query = writer.start()
        deadline = time.monotonic() + timeout_s
        while query.isActive and query.status["message"] in _INITIALIZING:
            if time.monotonic() > deadline:
                log.warning("query %s still initializing its sources after %.0f s; "
                            "starting the next query anyway", query.name, timeout_s)
                break
            time.sleep(_POLL_S)
        return query


__all__ = ["start_query"]
