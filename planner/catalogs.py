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

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from meltwater.planner.errors import CatalogError, NoSuchTableError, redact_url

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


def _config() -> Any:
    """Pyiceberg's configuration, read now (its module-level copy is read once at import,
    so a `PYICEBERG_CATALOG__...` variable set later would be missed)."""
    from pyiceberg.utils.config import Config

    return Config()


def known_catalogs(given: Mapping[str, Mapping[str, str]] | None = None) -> set[str]:
    """Catalog names defined by pyiceberg's configuration or given by the caller."""
    names = {name.lower() for name in (given or {})} | set(given or {})
    try:
        names |= set(_config().get_known_catalogs())
    except ValueError as error:
        raise CatalogError(f"pyiceberg configuration: {error}") from error
    return names


def default_catalog(given: Mapping[str, Mapping[str, str]] | None = None) -> str | None:
    """Pyiceberg's `default-catalog`, when it names a defined catalog."""
    name = _config().get_default_catalog_name()
    return name if name in known_catalogs(given) else None


def catalog_properties(name: str, given: Mapping[str, str] | None = None) -> dict[str, str]:
    """A catalog's properties: pyiceberg's configuration, then the caller's over it."""
    try:
        configured = _config().get_catalog_config(name) or {}
    except ValueError as error:
        raise CatalogError(f"catalog {name!r}: pyiceberg configuration: {error}") from error
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
    and a catalog behind a dropped route would hold the caller for minutes. The call runs
    in a daemon thread, which goes on until the OS gives up, but holds nobody up: not the
    caller, not the interpreter's exit (a pool's worker threads would be joined at exit)."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # noqa: BLE001 - handed to the caller, raised there
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=target, name="meltwater-catalog", daemon=True).start()
    if not done.wait(seconds):
        raise CatalogError(f"{what}: no answer within {seconds:g} s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return cast(T, value)


_clients: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
_clients_lock = threading.Lock()


def _client(name: str, properties: Mapping[str, str], seconds: float, where: str) -> Any:
    """Pyiceberg's client for a catalog, made once per name and properties (making one may
    already talk to the catalog: a REST client fetches its config and logs in)."""
    key = (name, tuple(sorted(properties.items())))
    with _clients_lock:
        client = _clients.get(key)
    if client is not None:
        return client
    from pyiceberg.catalog import load_catalog

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
    seconds = _timeout(properties, catalog)
    uri = properties.get("uri")
    where = f"table {name}: catalog {catalog!r}" + (f" at {redact_url(uri)}" if uri else "")
    client = _client(catalog, properties, seconds, where)
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
                "SSLError", "ServiceUnavailableError", "ServerError", "TooManyRequestsError"):
        return CatalogError(f"{where} cannot be reached ({text})")
    if kind == "NotInstalledError":
        return CatalogError(f"{where}: {text} (install meltwater with this catalog's extra, "
                            "e.g. `pip install '.[glue]'` in meltwater's checkout)")
    if isinstance(error, ValueError):
        return CatalogError(f"{where} is misconfigured ({text})")
    return CatalogError(f"{where}: {kind}: {text}")
