"""Catalogs: a table's name -> its current metadata file and the FileIO properties to read it.

pyiceberg's catalog clients do the talking (REST with OAuth2, SigV4 and vended credentials;
SQL; Glue; Hive; DynamoDB), configured as pyiceberg configures them (`~/.pyiceberg.yaml`,
`PYICEBERG_CATALOG__<NAME>__<KEY>`), with the caller's properties over that. meltwater
asks a catalog one question, `load_table`, and keeps two answers: the metadata location
and the table's FileIO properties (the catalog's own, the server's `loadTable` config such
as `s3.endpoint` or vended, expiring credentials). Planning and reading stay meltwater's.

Every call is bounded (`meltwater.timeout`, default 30 s, a catalog property meltwater
reads and pyiceberg never sees): a catalog that does not answer is an error naming it,
not a hang. Clients are kept per catalog name and properties, so a stream polling its
table reuses one authenticated session. pyiceberg is imported only when a catalog is used.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from meltwater.planner.errors import CatalogError, NoSuchTableError, redact_url
from meltwater.planner.table.deadlines import call_within

TIMEOUT_PROPERTY = "meltwater.timeout"
DEFAULT_TIMEOUT_S = 30.0
# What of a loaded table's properties is FileIO configuration, by Iceberg's prefixes. The
# rest (the catalog's uri, OAuth credential and token, ...) stays on the driver: only
# FileIO properties travel to executors.
FILE_IO_PREFIXES = ("s3.", "client.", "gcs.", "adls.", "hdfs.", "oss.")

T = TypeVar("T")


@dataclass(frozen=True, repr=False)
class CatalogTable:
    """What a catalog says of a table: its current metadata file, and how to read its files."""

    metadata_location: str
    io_properties: Mapping[str, str]

    def __repr__(self) -> str:
        return f"CatalogTable({self.metadata_location!r})"


def _configured(read: Callable[[Any], T]) -> T:
    """`read(config)` on pyiceberg's configuration, read now (its module-level copy is read
    once at import, so a `PYICEBERG_CATALOG__...` variable set later would be missed).

    pyiceberg reads `.pyiceberg.yaml` with no error of its own: a YAML syntax error comes
    out as the parser's, a file holding a list as an AttributeError. Either is refused here
    as one line naming the file and the problem."""
    from pyiceberg.utils.config import Config
    from strictyaml.ruamel.error import YAMLError

    try:
        return read(Config())
    except (YAMLError, ValueError, TypeError, AttributeError, OSError) as error:
        raise CatalogError(_configuration_problem(error)) from error


def _configuration_file() -> Path | None:
    """The `.pyiceberg.yaml` pyiceberg reads: the first non-empty one in `$PYICEBERG_HOME`,
    the home directory and the working directory (pyiceberg skips an empty file)."""
    for directory in (os.environ.get("PYICEBERG_HOME"), os.path.expanduser("~"), os.getcwd()):
        if not directory:
            continue
        path = Path(directory) / ".pyiceberg.yaml"
        try:
            if path.is_file() and path.read_bytes().strip():
                return path
        except OSError:
            return path  # unreadable: pyiceberg fails on it, and so it is the one to name
    return None


def _configuration_problem(error: BaseException) -> str:
    """What is wrong with pyiceberg's configuration: the file's problem when the file has
    one (its YAML, or a document that is not a mapping of settings), else the error as
    pyiceberg words it, about the file or the PYICEBERG_* variables merged over it."""
    from strictyaml import load
    from strictyaml.ruamel.error import YAMLError

    path = _configuration_file()
    if path is None:
        return f"pyiceberg configuration (PYICEBERG_* variables): {_one_line(error)}"
    try:
        document = load(path.read_text(encoding="utf-8")).data
    except OSError as problem:
        return f"pyiceberg configuration {path}: cannot be read ({problem.strerror})"
    except UnicodeDecodeError:
        return f"pyiceberg configuration {path}: not UTF-8 text"
    except YAMLError as problem:
        mark = getattr(problem, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        what = getattr(problem, "problem", None) or _one_line(problem)
        return f"pyiceberg configuration {path}: not valid YAML ({where}{what})"
    if not isinstance(document, dict):
        kind = "a list" if isinstance(document, list) else "a single value"
        return (f"pyiceberg configuration {path}: holds {kind}, not a mapping of settings "
                "(catalog: {name: {uri: ...}})")
    return f"pyiceberg configuration {path} (and PYICEBERG_* variables): {_one_line(error)}"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def known_catalogs(given: Mapping[str, Mapping[str, str]] | None = None) -> set[str]:
    """Catalog names defined by pyiceberg's configuration or given by the caller."""
    names = {name.lower() for name in (given or {})} | set(given or {})
    return names | set(_configured(lambda config: config.get_known_catalogs()))


def default_catalog(given: Mapping[str, Mapping[str, str]] | None = None) -> str | None:
    """Pyiceberg's `default-catalog`, when it names a defined catalog."""
    name = _configured(lambda config: config.get_default_catalog_name())
    return name if name in known_catalogs(given) else None


def catalog_properties(name: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """A catalog's properties: pyiceberg's configuration, then the caller's over it."""
    configured = _configured(lambda config: config.get_catalog_config(name)) or {}
    merged = {str(k): str(v) for k, v in _flatten(configured).items()}
    merged.update({str(k): str(v) for k, v in (given or {}).items()})
    return merged


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Pyiceberg's nested yaml/env form (`s3: {endpoint: ...}`) as dotted property names."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _timeout(properties: Mapping[str, str], name: str) -> float:
    text = properties.get(TIMEOUT_PROPERTY)
    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(str(text).rstrip("s"))
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise CatalogError(f"catalog {name!r}: {TIMEOUT_PROPERTY}={text!r}: expected seconds")
    return seconds


def _bounded(call: Callable[[], T], seconds: float, what: str) -> T:
    """`call()`, or a CatalogError after `seconds`: pyiceberg's HTTP calls carry no timeout,
    and a catalog behind a dropped route would hold the caller for minutes
    (`meltwater.planner.table.deadlines`)."""
    return call_within(call, seconds,
                       lambda: CatalogError(f"{what}: no answer within {seconds:g} s"),
                       name="meltwater-catalog")


_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_clients_lock = threading.Lock()


# Loggers of catalog clients that log a failure the error this module raises reports too:
# thrift's socket logs "Could not connect to any of [...]" before raising.
_REPORTED_HERE = ("thrift.transport.TSocket",)


def _client(name: str, properties: Mapping[str, str], seconds: float, where: str) -> Any:
    """Pyiceberg's client for a catalog, made once per name and properties (making one may
    already talk to the catalog: a REST client fetches its config and logs in)."""
    key = (name, tuple(sorted(properties.items())))
    with _clients_lock:
        client = _clients.get(key)
    if client is not None:
        return client
    from pyiceberg.catalog import load_catalog

    for logger in _REPORTED_HERE:
        logging.getLogger(logger).setLevel(logging.CRITICAL)
    forwarded = {k: v for k, v in properties.items() if k != TIMEOUT_PROPERTY}
    try:
        client = _bounded(lambda: load_catalog(name, **forwarded), seconds, where)
    except CatalogError:
        raise
    except Exception as error:  # pyiceberg raises many kinds; each is one line
        raise _catalog_error(error, where, None) from error
    with _clients_lock:
        _clients[key] = client
    return client


def forget_client(name: str, properties: Mapping[str, str]) -> None:
    """Drop a cached client (after its session was refused), so the next call logs in anew."""
    with _clients_lock:
        _clients.pop((name, tuple(sorted(properties.items()))), None)


def _connected(catalog: str, properties: Mapping[str, str], subject: str
               ) -> tuple[Any, float, str]:
    """Pyiceberg's client for a catalog, its call bound in seconds, and how its errors name
    `subject` and the catalog (`table lake.db.t: catalog 'lake' at https://...`)."""
    seconds = _timeout(properties, catalog)
    uri = properties.get("uri")
    where = f"{subject}: catalog {catalog!r}" + (f" at {redact_url(uri)}" if uri else "")
    return _client(catalog, properties, seconds, where), seconds, where


def load_catalog_table(catalog: str, identifier: tuple[str, ...],
                       given: Mapping[str, str] | None = None, *,
                       table_name: str | None = None) -> CatalogTable:
    """Ask catalog `catalog` for the table `identifier` (namespace levels, then the name).

    Errors are one line naming the table and the problem: `NoSuchTableError` when the
    catalog does not have it, `CatalogError` when the catalog is unknown, misconfigured,
    unreachable or refuses access.
    """
    name = table_name or ".".join((catalog, *identifier))
    properties = catalog_properties(catalog, given)
    if not properties:
        raise CatalogError(f"table {name}: catalog {catalog!r} is not configured (define it in "
                           f"~/.pyiceberg.yaml or with PYICEBERG_CATALOG__{catalog.upper()}__URI"
                           "=..., or give its properties)")
    client, seconds, where = _connected(catalog, properties, f"table {name}")
    try:
        loaded = _bounded(lambda: client.load_table(identifier), seconds, where)
    except CatalogError:
        raise
    except Exception as error:  # mapped to one line below, cause kept
        mapped = _catalog_error(error, where, name)
        if "refused access" in str(mapped):
            forget_client(catalog, properties)
        raise mapped from error
    io_properties = {k: str(v) for k, v in loaded.io.properties.items()
                     if k.startswith(FILE_IO_PREFIXES)}
    return CatalogTable(str(loaded.metadata_location), io_properties)


_OS_REASON = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _reason(error: Exception) -> str:
    """The short why of an error: the OS's words for a failed connection (requests wraps
    them in a paragraph), else the error's first line."""
    text = redact_url(str(error))
    found = _OS_REASON.findall(text)
    if found:
        return str(found[-1]).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _catalog_error(error: Exception, where: str, table: str | None) -> Exception:
    """One line for what pyiceberg (or requests under it) raised."""
    kind = type(error).__name__
    text = _reason(error)
    if kind in ("NoSuchTableError", "NoSuchIcebergTableError", "NoSuchNamespaceError",
                "NoSuchIdentifierError") and table is not None:
        return NoSuchTableError(f"table {table}: not found in {where.split(': ', 1)[-1]}")
    if table is None and kind in ("NoSuchTableError", "NoSuchNamespaceError"):
        return NoSuchTableError(f"{where}: {text}")
    if kind in ("UnauthorizedError", "ForbiddenError", "OAuthError",
                "AuthorizationExpiredError"):
        return CatalogError(f"{where} refused access ({text})")
    if kind in ("ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout",
                "SSLError", "ServiceUnavailableError", "ServerError", "TooManyRequestsError",
                "TTransportException"):  # the last: a Hive Metastore's thrift transport
        return CatalogError(f"{where} cannot be reached ({text})")
    if kind == "NotInstalledError":
        return CatalogError(f"{where}: {text} (install meltwater with this catalog's extra, "
                            "e.g. `pip install '.[glue]'` in meltwater's checkout)")
    if isinstance(error, ValueError):
        return CatalogError(f"{where} is misconfigured ({text})")
    return CatalogError(f"{where}: {kind}: {text}")


def list_catalog_tables(catalog: str, namespace: tuple[str, ...],
                        given: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """The identifiers (namespace levels, then the name) of the tables catalog `catalog`
    holds in `namespace`: a pipeline over a namespace asks this as it runs. Errors are one
    line, as `load_catalog_table`'s; a namespace that is not there holds no table."""
    properties = catalog_properties(catalog, given)
    name = ".".join((catalog, *namespace))
    if not properties:
        raise CatalogError(f"namespace {name}: catalog {catalog!r} is not configured")
    client, seconds, where = _connected(catalog, properties, f"namespace {name}")
    try:
        found = _bounded(lambda: client.list_tables(namespace), seconds, where)
    except CatalogError:
        raise
    except Exception as error:  # mapped to one line below, cause kept
        if type(error).__name__ == "NoSuchNamespaceError":
            return []
        raise _catalog_error(error, where, None) from error
    return [tuple(identifier) for identifier in found]
