"""A recording S3 proxy on loopback: what requests a reader makes of an object store.

    with RecordingProxy(server.s3_endpoint) as proxy:   # give readers proxy.url as endpoint
        ...read...
        proxy.take()                                    # the requests since the last take

Unlike testbed/http_counter.py it forwards the client's own `Host` header (S3's SigV4 signs
it, so the server must see the host the client signed for) and keeps one upstream
connection per client connection, and it records each request's method, path, `Range`,
status, body bytes and the seconds the upstream took to answer it in full (SeaweedFS's
service time on loopback, without the client's own overhead). It buffers each answer whole
before passing it on, so it is for counting, never for timing a read.
"""

from __future__ import annotations

import http.client
import statistics
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: str
    range: str | None
    status: int
    bytes: int
    seconds: float


class RecordingProxy:
    """Forwards HTTP/1.1 requests to `upstream`, recording each one (see the module doc)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def endpoint(self) -> str:
        """host:port, as DuckDB's S3 secret takes it."""
        return self.url.removeprefix("http://")

    def take(self) -> list[Request]:
        """The requests recorded since the last take."""
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    def __enter__(self) -> RecordingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPConnection | None = None

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if self.upstream is None:
                    self.upstream = http.client.HTTPConnection(*proxy.upstream, timeout=60)
                started = time.perf_counter()
                self.upstream.request(self.command, self.path, body=body,
                                      headers=dict(self.headers.items()))  # Host kept
                answer = self.upstream.getresponse()
                data = answer.read()
                seconds = time.perf_counter() - started
                path, _, query = self.path.partition("?")
                with proxy._lock:
                    proxy.requests.append(Request(
                        self.command, unquote(path), query, self.headers.get("Range"),
                        answer.status, len(data), seconds))
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                if self.command == "HEAD":  # no body: pass the object's length on as is
                    self.send_header("Content-Length", answer.getheader("Content-Length", "0"))
                else:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            # BaseHTTPRequestHandler's names for its handlers
            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward  # noqa: N815

            def finish(self) -> None:
                super().finish()
                if self.upstream is not None:
                    self.upstream.close()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def kind_of(request: Request, delete_files: set[str]) -> str:
    """What an object request was for: metadata JSON, manifest list, manifest, data file,
    delete file, a listing, or other (version hint, bucket probes)."""
    key = request.path
    if request.query and ("list-type" in request.query or "prefix=" in request.query):
        return "listing"
    if key.endswith(".metadata.json"):
        return "metadata json"
    if "/metadata/" in key and key.endswith(".avro"):
        return "manifest list" if "/snap-" in key.rsplit("/", 1)[-1] else "manifest"
    if key in delete_files:
        return "delete file"
    if key.endswith(".parquet"):
        return "data file"
    return "other"


def summarize(requests: list[Request], delete_files: set[str]) -> dict:
    """Counts by method and by kind, bytes, and the upstream's answer times."""
    by_method: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for r in requests:
        by_method[r.method] = by_method.get(r.method, 0) + 1
        kind = by_kind.setdefault(kind_of(r, delete_files),
                                  {"requests": 0, "HEAD": 0, "GET": 0, "bytes": 0})
        kind["requests"] += 1
        kind[r.method] = kind.get(r.method, 0) + 1
        kind["bytes"] += r.bytes
    gets = [r for r in requests if r.method == "GET" and r.status in (200, 206)]
    heads = [r for r in requests if r.method == "HEAD"]
    small = [r.seconds for r in gets if r.bytes <= 65_536]
    return {
        "requests": len(requests),
        "by_method": by_method,
        "by_kind": by_kind,
        "bytes": sum(r.bytes for r in requests),
        "ranged_gets": sum(1 for r in gets if r.range),
        "errors": sum(1 for r in requests if r.status >= 400),
        "head_ms_median": _ms(statistics.median([r.seconds for r in heads])) if heads else None,
        "small_get_ms_median": _ms(statistics.median(small)) if small else None,
        "get_ms_median": _ms(statistics.median([r.seconds for r in gets])) if gets else None,
        "upstream_seconds_total": sum(r.seconds for r in requests),
    }


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)
