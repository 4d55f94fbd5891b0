"""File access for metadata, manifests and data files, on `pyarrow.fs`.

One small protocol, so local paths, `file://`, `s3://`, `gs://`, `hdfs://` and `abfs://`
locations all go through the same calls. Filesystems are resolved per scheme and authority
once and reused; a `PyArrowFileIO` pickles by its properties only, so an executor builds
its own filesystems instead of receiving live connections (`shared_file_io` keeps one per
properties in each process, so the tasks of an executor share their S3 clients).

Properties are Iceberg's FileIO properties (`s3.endpoint`, `s3.access-key-id`,
`s3.session-token`, `s3.region`, `gcs.*`, `adls.*`, ...), as a catalog's `loadTable`
returns them or a user gives them. With properties, remote filesystems are built by
pyiceberg's `PyArrowFileIO`, which maps those names onto `pyarrow.fs`; without any, by
`pyarrow.fs.FileSystem.from_uri`, which reads the usual environment (`AWS_ENDPOINT_URL`,
`AWS_ACCESS_KEY_ID`, ...). A properties-built S3 client takes `AWS_ENDPOINT_URL` and
`AWS_REGION` from the environment when the properties do not say, as AWS's own clients do.
Google Cloud Storage and Azure filesystems are built by `meltwater.planner.table.gcs_azure`, which
reads both Iceberg Java's and pyiceberg's names for their properties (pyiceberg's mapping
misses some that catalogs vend and emulators need).

Failures of the storage itself (access denied, expired credentials, a missing bucket, an
endpoint that does not answer) are `StorageError`s naming the file and the problem.

Every request to an object store made here (building its client, which may already ask
for credentials or a bucket's region; a file's existence, a listing, opening a file, reading
metadata and manifests) is bounded: a store that accepts connections and never answers, or
a credential endpoint that does the same, is an error after `MELTWATER_STORAGE_TIMEOUT`
seconds (default 30), never a hang (`meltwater.planner.table.deadlines`: not every client has a
timeout of its own, and none covers the credential lookups of Azure and Google). A GCS
client built here stops retrying after as long. A scheme no filesystem here reads
(`http://`, say) is refused, naming the ones that are.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar
from urllib.parse import urlparse

import pyarrow.fs as pafs
from pyarrow import ArrowException

from meltwater.planner.errors import NoSuchFileError, StorageError, UnsupportedFeatureError
from meltwater.planner.table.deadlines import call_within
from meltwater.planner.table.gcs_azure import azure_filesystem, gcs_filesystem

T = TypeVar("T")
TIMEOUT_VARIABLE = "MELTWATER_STORAGE_TIMEOUT"
DEFAULT_TIMEOUT_S = 30.0
# What pyarrow's filesystems (and gcs_azure's) read by URI, and what pyiceberg's FileIO adds
# when properties are given (Iceberg's FileIO property names): anything else is refused by
# name.
_URI_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss", "wasb", "wasbs", "hdfs",
                "viewfs")
_PROPERTY_SCHEMES = (*_URI_SCHEMES, "oss")
# What a storage client raises: OSError for most, ArrowException (no OSError) for Azure's
# credential failures ("Failed to get token from DefaultAzureCredential").
_STORAGE_FAILURES = (OSError, ArrowException)


def storage_timeout() -> float:
    """Seconds a request to an object store may take before it is an error:
    `MELTWATER_STORAGE_TIMEOUT`, default 30."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if text is None or not text.strip():
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(text.strip().rstrip("s"))
    except ValueError:
        seconds = -1.0
    if not 0 < seconds < float("inf"):
        raise StorageError(f"{TIMEOUT_VARIABLE}={text!r}: expected seconds, e.g. 30")
    return seconds


class FileIO(Protocol):
    """What the planner and the readers need of storage; `PyArrowFileIO` is the implementation,
    tests may pass their own."""

    @property
    def properties(self) -> Mapping[str, str]:
        """The FileIO properties this FileIO reads with (endpoint, credentials; {} for the
        environment's): Spark's executors and other processes build their own FileIO from
        them, so a FileIO that cannot say them cannot be read through elsewhere."""

    def open_input(self, location: str) -> Any:
        """A random-access readable file (a pyarrow NativeFile)."""

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of a file, or `length` of them from `offset`; NoSuchFileError if it is
        absent."""

    def exists(self, location: str) -> bool:
        """Whether a file exists at the location."""

    def list_dir(self, location: str) -> list[str]:
        """Full locations of the files directly inside a directory."""

    def resolve(self, location: str) -> tuple[pafs.FileSystem, str] | None:
        """The pyarrow filesystem a location is read through and the path in it, or None
        for a FileIO that reads otherwise: Arrow's own readers (datasets, Parquet footers)
        are handed that filesystem, and without one every read goes through `open_input`
        and `read_bytes`."""

    def is_local(self, location: str) -> bool:
        """Whether reading the location waits on no network: where it does, readers overlap
        many small reads (manifests, footers, delete files) on threads."""


class PyArrowFileIO:
    """FileIO on pyarrow filesystems, resolved from each location's scheme and `properties`
    (Iceberg's FileIO property names; they may hold secrets and are never shown)."""

    def __init__(self, properties: Mapping[str, str] | None = None) -> None:
        self.properties = dict(properties or {})
        self._lock = threading.Lock()
        self._filesystems: dict[tuple[str, str], pafs.FileSystem] = {}

    def __repr__(self) -> str:
        return f"PyArrowFileIO({len(self.properties)} properties)"

    def __getstate__(self) -> dict[str, Any]:
        return {"properties": self.properties}

    def __setstate__(self, state: dict[str, Any]) -> None:
        PyArrowFileIO.__init__(self, state["properties"])

    def resolve(self, location: str) -> tuple[pafs.FileSystem, str]:
        """The filesystem for a location and the path inside it."""
        parsed = urlparse(location)
        scheme = parsed.scheme.lower()
        if scheme in ("", "file") or len(scheme) == 1:  # len 1: a Windows drive letter
            path = parsed.path if scheme == "file" else location
            return self._cached(("file", ""), pafs.LocalFileSystem), path
        readable = _PROPERTY_SCHEMES if self.properties else _URI_SCHEMES
        if scheme not in readable:
            raise UnsupportedFeatureError(
                f"{location}: meltwater does not read {scheme}:// locations (it reads local "
                f"paths, file:// and {', '.join(f'{s}://' for s in readable)})")
        if scheme in ("s3a", "s3n"):
            location, scheme = "s3" + location[len(scheme):], "s3"
        fs = self._cached((scheme, parsed.netloc), lambda: self._bounded(
            location, lambda: self._remote_filesystem(location, scheme, parsed.netloc)))
        if scheme in ("hdfs", "viewfs"):
            return fs, parsed.path
        if scheme in _AZURE_SCHEMES:  # container@account.dfs.core.windows.net/path
            return fs, parsed.netloc.split("@")[0] + parsed.path
        return fs, parsed.netloc + parsed.path  # s3, gs: bucket/key

    def _remote_filesystem(self, location: str, scheme: str, netloc: str) -> pafs.FileSystem:
        try:
            if scheme in ("gs", "gcs"):
                # retrying for half the timeout (not pyarrow's 15 minutes), so that the
                # client's own reason comes before the deadline's
                limit = dt.timedelta(seconds=max(1.0, storage_timeout() / 2))
                return gcs_filesystem(self.properties, limit)
            if scheme in _AZURE_SCHEMES:
                _without_a_missing_azure_cli()
                return azure_filesystem(netloc, self.properties)
            if not self.properties:
                return pafs.FileSystem.from_uri(location)[0]
            from pyiceberg.io.pyarrow import PyArrowFileIO as IcebergFileIO

            return IcebergFileIO(_with_environment(self.properties, scheme)).fs_by_scheme(
                scheme, netloc)
        except (*_STORAGE_FAILURES, ValueError, ImportError) as error:
            raise self._storage_error(error, location) from error

    def _bounded(self, location: str, call: Callable[[], T]) -> T:
        """`call()`, a request to the object store holding `location`, or a StorageError
        once it has taken the storage timeout (see the module doc)."""
        seconds = storage_timeout()
        return call_within(call, seconds, lambda: StorageError(
            f"{location}: the storage endpoint did not answer within {seconds:g} s "
            f"({TIMEOUT_VARIABLE})"), name="meltwater-storage")

    def _cached(self, key: tuple[str, str],
                make: Callable[[], pafs.FileSystem]) -> pafs.FileSystem:
        with self._lock:
            fs = self._filesystems.get(key)
            if fs is None:
                fs = self._filesystems[key] = make()
            return fs

    def open_input(self, location: str) -> Any:
        """A random-access readable file (a pyarrow NativeFile); NoSuchFileError if it is absent."""
        fs, path = self.resolve(location)
        if isinstance(fs, pafs.LocalFileSystem):
            return self._open(fs, path, location)
        return self._bounded(location, lambda: self._open(fs, path, location))

    def _open(self, fs: pafs.FileSystem, path: str, location: str) -> Any:
        try:
            return fs.open_input_file(path)
        except FileNotFoundError:
            raise NoSuchFileError(f"{location}: file not found") from None
        except _STORAGE_FAILURES as error:
            message = str(error).lower()
            if ("not found" in message or "no such file" in message) \
                    and "bucket" not in message:
                raise NoSuchFileError(f"{location}: file not found") from None
            raise self._storage_error(error, location) from error

    def read_bytes(self, location: str, offset: int = 0, length: int | None = None) -> bytes:
        """The bytes of a file, or `length` of them from `offset`; NoSuchFileError if it is
        absent."""
        fs, path = self.resolve(location)

        def read() -> bytes:
            with self._open(fs, path, location) as handle:
                try:
                    if offset:
                        handle.seek(offset)
                    data: bytes = handle.read() if length is None else handle.read(length)
                except _STORAGE_FAILURES as error:
                    raise self._storage_error(error, location) from error
                return data

        if isinstance(fs, pafs.LocalFileSystem):
            return read()
        return self._bounded(location, read)

    def is_local(self, location: str) -> bool:
        """Whether a location is on this machine's filesystem: reading it waits on no network."""
        return isinstance(self.resolve(location)[0], pafs.LocalFileSystem)

    def _storage_error(self, error: BaseException, location: str) -> StorageError:
        """`_storage_error`, and when the credentials these properties carry have expired
        (a catalog's vended `s3.session-token-expires-at-ms`), that: an S3 server answering
        a HEAD request has no body to say why it refuses."""
        found = _storage_error(error, location)
        expires = self.properties.get("s3.session-token-expires-at-ms")
        if expires and expires.isdigit() and int(expires) <= time.time() * 1000:
            at = dt.datetime.fromtimestamp(int(expires) / 1000, dt.timezone.utc)
            return StorageError(f"{location}: the credentials expired at "
                                f"{at.isoformat(timespec='seconds')} ({found})")
        return found

    def _require_bucket(self, fs: pafs.FileSystem, path: str, location: str) -> None:
        """An empty listing on an object store: say so if the bucket itself is missing
        (listing a missing bucket answers "nothing here", which would read as no table)."""
        bucket = path.split("/", 1)[0]
        try:
            missing = fs.get_file_info(bucket).type == pafs.FileType.NotFound
        except _STORAGE_FAILURES as error:
            raise self._storage_error(error, location) from error
        if missing:
            raise StorageError(f"{location}: the bucket {bucket!r} does not exist")

    def exists(self, location: str) -> bool:
        """Whether a file exists at the location."""
        fs, path = self.resolve(location)

        def look() -> bool:
            try:
                return bool(fs.get_file_info(path).type != pafs.FileType.NotFound)
            except _STORAGE_FAILURES as error:
                raise self._storage_error(error, location) from error

        return look() if isinstance(fs, pafs.LocalFileSystem) else self._bounded(location, look)

    def list_dir(self, location: str) -> list[str]:
        """Full locations of the files directly inside a directory; none if it is absent."""
        fs, path = self.resolve(location)

        def listing() -> list[pafs.FileInfo]:
            try:
                infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            except (FileNotFoundError, NotADirectoryError):
                raise
            except _STORAGE_FAILURES as error:
                raise self._storage_error(error, location) from error
            if not infos and not isinstance(fs, pafs.LocalFileSystem):
                self._require_bucket(fs, path, location)
            return list(infos)

        infos = (listing() if isinstance(fs, pafs.LocalFileSystem)
                 else self._bounded(location, listing))
        prefix = location.rstrip("/")
        return [f"{prefix}/{info.base_name}" for info in infos if info.type == pafs.FileType.File]


_S3_SCHEMES = ("s3", "s3a", "s3n")
_AZURE_SCHEMES = ("abfs", "abfss", "wasb", "wasbs")


def _without_a_missing_azure_cli() -> None:
    """With no `az` on PATH, leave the Azure CLI out of DefaultAzureCredential's chain
    (`AZURE_TOKEN_CREDENTIALS=prod`: environment, workload and managed identity), unless
    that variable says otherwise: the CLI step cannot succeed then, and the shell it runs
    `az` in prints `az: not found` on our stderr. Set once for the process, before the
    client is built (the Azure SDK reads it then)."""
    if "AZURE_TOKEN_CREDENTIALS" not in os.environ and shutil.which("az") is None:
        os.environ["AZURE_TOKEN_CREDENTIALS"] = "prod"


def _with_environment(properties: Mapping[str, str], scheme: str) -> dict[str, str]:
    """S3 properties completed from the environment the way AWS clients read it: the
    endpoint from `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, the region from `AWS_REGION`/
    `AWS_DEFAULT_REGION`. With an endpoint but no region, `us-east-1` (S3's default, which
    S3-compatible servers accept) rather than pyiceberg's lookup of the bucket's region at
    AWS, which only means something for buckets at AWS."""
    merged = dict(properties)
    if scheme not in _S3_SCHEMES:
        return merged
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if "s3.endpoint" not in merged and endpoint:
        merged["s3.endpoint"] = endpoint
    if "s3.region" not in merged and "client.region" not in merged:
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region or "s3.endpoint" in merged:
            merged["s3.region"] = region or "us-east-1"
    return merged


# What the storage's own messages say (AWS SDK error names, HTTP statuses, curl's words),
# and what each means to a user; the first match names the problem.
_STORAGE_PROBLEMS = (
    (("unable to load libjvm",), "HDFS needs a Java runtime: set JAVA_HOME to a JDK (and "
     "CLASSPATH to Hadoop's jars, `hadoop classpath --glob`)"),
    (("unable to load libhdfs", "libhdfs.so"), "HDFS needs Hadoop's native client: set "
     "HADOOP_HOME (or ARROW_LIBHDFS_DIR) to where libhdfs.so is"),
    (("nosuchbucket", "bucket does not exist", "the specified bucket does not exist"),
     "the bucket does not exist"),
    (("expiredtoken", "token has expired", "invalid_access_key_id", "invalidaccesskeyid",
      "signaturedoesnotmatch", "invalidtoken", "request has expired",
      # Azure's answer to a wrong shared key or SAS; Google's to a rejected token
      "authenticationfailed", "failed to authenticate", "invalid credentials",
      "http 401", "unauthenticated"),
     "the credentials were rejected or have expired"),
    # Azure's DefaultAzureCredential and Google's default credentials, finding none that
    # works (their messages go on to name the endpoints they tried, network words included)
    (("failed to get token", "could not create a oauth2 access token",
      "authenticationexception"), "no credentials for the storage could be obtained (none "
     "configured, or the identity or metadata endpoint failed)"),
    (("access_denied", "accessdenied", "access denied", "forbidden", "http 403",
      "response code 403", "permission denied"), "access denied"),
    (("could not resolve host", "couldn't resolve host", "couldn't connect", "connection refused",
      "failed to connect", "could not connect", "timed out", "timeout", "curlcode: 6",
      "curlcode: 7", "curlcode: 28", "network"), "the storage endpoint cannot be reached"),
)


def _storage_error(error: BaseException, location: str) -> StorageError:
    """One line for a storage failure at `location`, naming the problem when it is known."""
    text = str(error).replace("\n", " ")
    lowered = text.lower()
    for markers, problem in _STORAGE_PROBLEMS:
        if any(marker in lowered for marker in markers):
            return StorageError(f"{location}: {problem} ({_short(text)})")
    return StorageError(f"{location}: {_short(text)}")


def _short(text: str) -> str:
    return text if len(text) <= 240 else text[:237] + "..."


_SHARED_MAX = 8  # a stream refreshing vended credentials makes a new FileIO each time
_shared: OrderedDict[tuple[tuple[str, str], ...], PyArrowFileIO] = OrderedDict()
_shared_lock = threading.Lock()


def shared_file_io(properties: Mapping[str, str] | None = None) -> PyArrowFileIO:
    """One FileIO per properties in this process: the tasks one executor runs share their
    filesystems (an S3 client, its connection pool) instead of building one per task.
    New credentials (a refreshed vended token) are new properties, hence a new FileIO."""
    key = tuple(sorted((properties or {}).items()))
    with _shared_lock:
        io = _shared.get(key)
        if io is None:
            io = _shared[key] = PyArrowFileIO(dict(key))
            while len(_shared) > _SHARED_MAX:
                _shared.popitem(last=False)
        _shared.move_to_end(key)
        return io
