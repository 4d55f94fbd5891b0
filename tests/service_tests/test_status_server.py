"""The status server: clients that hang up are nobody's error, where it listens is checked
before anything starts, and listening beyond loopback is said out loud."""

from __future__ import annotations

import errno
import json
import logging
import socket
import struct
import urllib.error
import urllib.request

import pytest

from meltwater.service.config import parse_config
from meltwater.service.logs import setup_logging
from meltwater.service.metrics import (
    Health,
    ServiceMetrics,
    StatusServer,
    check_listen,
    exposure_warning,
)
from meltwater.service.runner import Service


@pytest.fixture
def server():
    health = Health()
    health.update("orders", state="running")
    status = StatusServer("127.0.0.1", 0, ServiceMetrics(), health).start()
    yield status
    status.close()


def _hang_up(port: int, request: bytes) -> None:
    """Send `request`, then reset the connection at once (SO_LINGER 0: an RST, as a client
    killed or timing out mid-request does)."""
    with socket.create_connection(("127.0.0.1", port)) as client:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.sendall(request)


def test_clients_hanging_up_leave_no_trace_in_the_log(server, capfd):
    setup_logging("json")
    try:
        for _ in range(10):
            _hang_up(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            _hang_up(server.port, b"GET /hea")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/health") as answer:
            assert json.loads(answer.read())["status"] == "ok"  # still serving
    finally:
        logging.getLogger().handlers.clear()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err
    for line in err.splitlines():  # whatever was logged is a JSON line
        json.loads(line)


def test_where_it_listens_is_checked_before_it_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for attempt in (check_listen, lambda host, port: StatusServer(
                host, port, ServiceMetrics(), Health())):
            with pytest.raises(OSError, match="Address already in use") as raised:
                attempt("127.0.0.1", port)
            assert raised.value.errno == errno.EADDRINUSE
    with pytest.raises(socket.gaierror):
        check_listen("no-such-host.invalid", 9464)
    with pytest.raises(OSError, match="Cannot assign requested address"):
        check_listen("192.0.2.123", 9464)  # TEST-NET-1: not an address of this machine
    check_listen("127.0.0.1", 0)


def test_listening_beyond_loopback_is_warned_of():
    for host in ("127.0.0.1", "localhost", "127.0.0.2"):
        assert exposure_warning(host, 9464) is None, host
    warning = exposure_warning("0.0.0.0", 9464)
    assert warning is not None
    assert "0.0.0.0:9464" in warning and "without authentication" in warning


def _get_health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health") as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_health_is_503_starting_until_every_pipeline_has_started():
    """A readiness probe must not route to a service whose pipelines have not started: its
    status server answers from the moment it listens, seconds before Spark is up."""
    config = parse_config({"pipelines": [
        {"name": name, "table": "/t", "checkpoint": f"/tmp/chk-{name}", "trigger": trigger,
         "sink": {"type": "console"}}
        for name, trigger in (("orders", "event"), ("refunds", "available-now"))]})
    service = Service(config)
    server = StatusServer("127.0.0.1", 0, service.metrics, service.health).start()
    try:
        status, document = _get_health(server.port)
        assert (status, document["status"]) == (503, "starting")
        assert document["reason"] == "pipelines not started yet: orders, refunds"
        service.health.update("refunds", state="finished")  # available-now, done already
        status, document = _get_health(server.port)
        assert (status, document["reason"]) == (503, "pipelines not started yet: orders")
        service.health.update("orders", state="running")
        status, document = _get_health(server.port)
        assert (status, document["status"], "reason" in document) == (200, "ok", False)
        service.health.update("orders", state="failing", last_error="SinkUnavailableError: x")
        status, document = _get_health(server.port)
        assert (status, document["status"], document["reason"]) == (
            503, "failing", "orders: SinkUnavailableError: x")
    finally:
        server.close()
