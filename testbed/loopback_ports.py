"""Loopback ports for the servers the tests start (the service, PostgreSQL, SeaweedFS).

One place hands them out, so that no two servers of a session are given the same port and
none is given a port an outgoing connection may take in the meantime.
"""

from __future__ import annotations

import socket
from pathlib import Path


def _ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections (Linux; else its default)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, for a server started later.

    Below the kernel's ephemeral range: a port from `bind(0)` is an ephemeral one, and in the
    time before the server binds it, an outgoing connection (a PostgreSQL client creating
    the test's database, say) could be given it and hold it in TIME_WAIT, making the test
    fail with "Address already in use". Counted down from there, each port handed out once
    per session."""
    for port in range(_ephemeral_low() - 1, 1024, -1):
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def free_ports(count: int) -> list[int]:
    """`count` distinct ports from `free_port`."""
    return [free_port() for _ in range(count)]
