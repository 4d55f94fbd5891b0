"""Parquet's own Thrift structs (`FileMetaData`, `OffsetIndex`, `PageHeader`, ...), for
what pyarrow does not expose: the page index a reader uses to read single pages
(`parquet_pages`), and the footers the Parquet output joins (`meltwater.output`).

The structs are parquet-format's `parquet.thrift`, vendored unchanged beside this module
and loaded by thriftpy2 once per process, on the first thread that needs them (structs of
two loads never compare equal), and only then: thriftpy2 and the parsing of the IDL cost a
command that never reads a page or writes Parquet nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFINITION = Path(__file__).with_name("parquet.thrift")


@dataclass(frozen=True)
class ParquetThrift:
    """parquet.thrift loaded: its structs, and Thrift's compact protocol both ways."""

    module: Any  # parquet.thrift's structs
    encode: Callable[[Any], bytes]
    decode: Callable[[Any, bytes], Any]  # (an empty struct to fill, the bytes) -> the struct


_LOADING = threading.Lock()


@functools.cache
def _load() -> ParquetThrift:
    import thriftpy2
    from thriftpy2.protocol import TCompactProtocolFactory
    from thriftpy2.utils import deserialize, serialize

    protocol = TCompactProtocolFactory()
    return ParquetThrift(thriftpy2.load(str(DEFINITION), module_name="parquet_thrift"),
                         lambda struct_: serialize(struct_, protocol),
                         lambda struct_, raw: deserialize(struct_, raw, protocol))


def parquet_thrift() -> ParquetThrift:
    """The structs and the protocol, loaded on first use."""
    with _LOADING:
        return _load()
