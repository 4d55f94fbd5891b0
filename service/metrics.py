"""What the service reports: Prometheus metrics and a health document, over HTTP on localhost.

`GET /metrics` is Prometheus' text format (prometheus_client renders it); `GET /health` is a
JSON document with each pipeline's state: 503 `starting` until every pipeline's query has
started, then 200 while every pipeline runs (or, available-now, has finished), and 503
`failing` once one is failing or has failed (with the reason, `last_error`), so a load
balancer, systemd watchdog script or Kubernetes readiness probe can act on it. Neither
asks who is asking: a status server listening beyond loopback is warned of
(`exposure_warning`).
The registry is the service's own, not prometheus_client's global one, so two services in
one process (the tests) never share counters.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import sys
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from meltwater.planner.str_enum import StrEnum
from meltwater.service.logs import fields

log = logging.getLogger("meltwater.service")

BATCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
REQUEST_TIMEOUT_S = 10.0


class PipelineState(StrEnum):
    """Where a pipeline is, as /health and the progress line say it."""

    STARTING = "starting"  # its query has not started yet
    RUNNING = "running"
    RESTARTING = "restarting"  # its query ended and starts again (a schema change, a retry)
    FAILING = "failing"  # failed, and is retried with backoff
    FAILED = "failed"  # failed for good: restarting cannot heal it
    FINISHED = "finished"  # available-now: done
    STOPPED = "stopped"  # the service stopped it


HEALTHY = (PipelineState.RUNNING, PipelineState.FINISHED)


class ServiceMetrics:
    """The service's Prometheus metrics, labelled by pipeline."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["pipeline"]
        self.snapshot = Gauge("meltwater_snapshot_reached_sequence_number",
                              "Sequence number of the newest snapshot the sink holds",
                              labels, registry=self.registry)
        self.lag_snapshots = Gauge("meltwater_lag_snapshots",
                                   "Snapshots committed to the table and not yet in the sink",
                                   labels, registry=self.registry)
        self.lag_seconds = Gauge("meltwater_lag_seconds",
                                 "Age of the oldest snapshot not yet in the sink (0: none)",
                                 labels, registry=self.registry)
        self.batch_duration = Histogram("meltwater_batch_duration_seconds",
                                        "Duration of a micro-batch, planning to sink commit",
                                        labels, buckets=BATCH_BUCKETS, registry=self.registry)
        self.rows = Counter("meltwater_rows", "Change rows written to the sink",
                            [*labels, "change_type"], registry=self.registry)
        self.batches = Counter("meltwater_batches", "Micro-batches completed",
                               labels, registry=self.registry)
        self.errors = Counter("meltwater_errors", "Pipeline failures (each restarts the query)",
                              labels, registry=self.registry)
        self.up = Gauge("meltwater_pipeline_up", "1 while the pipeline's query runs",
                        labels, registry=self.registry)
        self.tables_followed = Gauge("meltwater_tables_followed",
                                     "Tables a pipeline over many tables follows now",
                                     labels, registry=self.registry)
        self.tables_dropped = Counter("meltwater_tables_dropped",
                                      "Tables gone from a pipeline's pattern, their pipelines "
                                      "stopped", labels, registry=self.registry)

    def render(self) -> bytes:
        """The metrics in Prometheus' text format, for `/metrics`."""
        return generate_latest(self.registry)


@dataclass
class PipelineHealth:
    """What /health says of one pipeline."""

    state: PipelineState = PipelineState.STARTING
    snapshot_id: int | None = None
    sequence_number: int | None = None
    lag_snapshots: int = 0
    lag_seconds: float = 0.0
    batches: int = 0
    last_error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Health:
    """Thread-safe pipeline states, written by the service loop, read by the HTTP server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipelines: dict[str, PipelineHealth] = {}

    def update(self, name: str, **values: Any) -> None:
        """Set fields of a pipeline's health (state, last error, ...)."""
        with self._lock:
            health = self._pipelines.setdefault(name, PipelineHealth())
            for key, value in values.items():
                setattr(health, key, value)

    def remove(self, name: str) -> None:
        """Forget a pipeline (its table is gone: it no longer runs, and is not failing)."""
        with self._lock:
            self._pipelines.pop(name, None)

    def document(self) -> tuple[int, dict[str, Any]]:
        """The HTTP status and JSON body of `/health`: 200 `ok` while every pipeline is
        running or has finished (an available-now run); 503 otherwise, `failing` when one
        is neither running nor starting (a failing or failed pipeline says why in
        `last_error`), else `starting` while one has not started yet, with a `reason`
        naming them. A service that has no pipeline registered yet is starting too."""
        with self._lock:
            pipelines = {name: {k: v for k, v in vars(h).items() if k != "extra"}
                         for name, h in self._pipelines.items()}
        states = {name: p["state"] for name, p in pipelines.items()}
        waiting = sorted(name for name, state in states.items()
                         if state == PipelineState.STARTING)
        unwell = sorted(name for name, state in states.items()
                        if state not in HEALTHY and state != PipelineState.STARTING)
        if unwell:
            status, reason = "failing", "; ".join(
                f"{name}: {pipelines[name]['last_error'] or states[name]}" for name in unwell)
        elif waiting or not pipelines:
            status, reason = PipelineState.STARTING, (
                "pipelines not started yet: " + ", ".join(waiting) if waiting
                else "no pipeline started yet")
        else:
            return 200, {"status": "ok", "pipelines": pipelines}
        return 503, {"status": status, "reason": reason, "pipelines": pipelines}


def listen_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """The socket family and address to listen on at (host, port); OSError (a gaierror)
    for a host that does not resolve."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                  flags=socket.AI_PASSIVE)[0]
    return family, address


def check_listen(host: str, port: int) -> None:
    """Bind (host, port) as the status server would, and let go at once: OSError if it
    cannot be (a host that does not resolve or is not this machine's, a port in use)."""
    family, address = listen_address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server does
        probe.bind(address)


def is_loopback(host: str) -> bool:
    """Whether every address `host` resolves to is a loopback one (127.0.0.0/8, ::1): only
    this machine can reach a server listening there."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    addresses = {str(info[4][0]).split("%", 1)[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def exposure_warning(host: str, port: int) -> str | None:
    """What to warn of when the status server listens beyond this machine; None on loopback."""
    if is_loopback(host):
        return None
    return (f"the status server listens on {host}:{port}, which other machines can reach: "
            "/metrics and /health answer anyone who connects, without authentication "
            "(use 127.0.0.1, or restrict the port with a firewall)")


class _HTTPServer(ThreadingHTTPServer):
    """The status server's socket server: any address family; clients that go away quietly."""

    daemon_threads = True

    def __init__(self, family: socket.AddressFamily, address: tuple[Any, ...],
                 handler: type[BaseHTTPRequestHandler]) -> None:
        self.address_family = family
        super().__init__(address, handler)

    def handle_error(self, _request: Any, client_address: Any) -> None:
        """A client that hung up mid-request is nobody's error; anything else is one log
        line (socketserver would print a traceback to stderr for each, breaking JSON logs)."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        log.warning("status server: a request failed", extra=fields(
            client=str(client_address[0]) if client_address else "?",
            error=f"{type(error).__name__}: {error}"))


class StatusServer:
    """`/health` and `/metrics` on (host, port); port 0 takes a free port (see `.port`).
    Raises OSError if it cannot listen there."""

    def __init__(self, host: str, port: int, metrics: ServiceMetrics, health: Health) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S  # a client that sends nothing does not hold a thread

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, status, kind = outer.metrics.render(), 200, CONTENT_TYPE_LATEST
                elif path in ("/health", "/healthz", "/"):
                    status, document = outer.health.document()
                    body, kind = json.dumps(document).encode(), "application/json"
                else:
                    body, status, kind = b"not found\n", 404, "text/plain"
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, _format: str, *_args: Any) -> None:
                return  # access logs would drown the service's own

        self.metrics = metrics
        self.health = health
        family, address = listen_address(host, port)
        self.server = _HTTPServer(family, address, Handler)
        bound, self.port = self.server.server_address[:2]
        # Typed str | bytes (socketserver allows either); an AF_INET socket reports a str.
        self.host = bound if isinstance(bound, str) else bytes(bound).decode()
        self._thread = threading.Thread(target=self.server.serve_forever, name="meltwater-http",
                                        daemon=True)

    def start(self) -> StatusServer:
        """Serve on a daemon thread; returns the server, whose `port` is now bound."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()
