"""A counting HTTP proxy on loopback: forwards every request to one upstream and counts them.

    with CountingProxy("http://127.0.0.1:8181") as proxy:   # proxy.url to use instead
        ...
        proxy.count("GET", "/tables/")  # requests so far, by method and a part of the path

For measuring what meltwater costs a catalog (requests per minute while a table is idle)
from outside meltwater, at the socket, instead of trusting its own counters.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class CountingProxy:
    """Forwards HTTP/1.1 requests to `upstream` and records (method, path) of each."""

    def __init__(self, upstream: str, keep_host: bool = False) -> None:
        """`keep_host` forwards the client's `Host` header, which S3's SigV4 signs (the
        server checks the signature against the host the client signed for)."""
        parts = urlsplit(upstream)
        self.keep_host = keep_host
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def count(self, method: str, path_part: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and path_part in p)

    def __enter__(self) -> CountingProxy:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                with proxy._lock:
                    proxy.requests.append((self.command, self.path))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection(proxy.upstream_host,
                                                      proxy.upstream_port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if proxy.keep_host or k.lower() != "host"}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    data = answer.read()
                finally:
                    upstream.close()
                self.send_response(answer.status, answer.reason)
                head = self.command == "HEAD"  # no body: the upstream's length is the size
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection",
                                           "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", answer.getheader("Content-Length", "0")
                                 if head else str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            # BaseHTTPRequestHandler's names for its handlers
            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward  # noqa: N815

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the test reads the counts

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
