"""The status server: clients that hang up are nobody's error, where it listens is checked
before anything starts, and listening beyond loopback is said out loud."""

from __future__ import annotations

import errno
import json
import logging
import socket
import struct
import urllib.request

import pytest

from meltwater.service.logs import setup_logging
from meltwater.service.metrics import (
    Health,
    ServiceMetrics,
    StatusServer,
    check_listen,
    exposure_warning,
)


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
