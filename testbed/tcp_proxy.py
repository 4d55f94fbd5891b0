"""A TCP forwarder on loopback that a test can cut and restore: a broker "going away".

    with LoopbackProxy(target_port) as proxy:   # listens on proxy.port
        proxy.cut()        # closes every connection and stops listening: clients see the
                           # peer gone and their reconnects refused
        proxy.restore()    # listens again on the same port

The server behind it keeps running (and keeps what it holds: a broker with memory storage
would lose its topics if it were stopped instead). One thread accepts, one thread per
connection pumps both directions with `select`.

Either end may be a Unix socket instead (`unix_listen`, `unix_target`): a server in a
network namespace of its own (`metastore_server.py`) is reached through one, since a
socket file is seen from every namespace.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import threading

from loopback_ports import free_port

_CHUNK = 65536


class LoopbackProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port` until cut."""

    def __init__(self, target_port: int = 0, port: int | None = None, *,
                 unix_listen: str | None = None, unix_target: str | None = None) -> None:
        self.target_port = target_port
        self.unix_listen = unix_listen
        self.unix_target = unix_target
        self.port = 0 if unix_listen else port or free_port()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._closed = False

    def start(self) -> LoopbackProxy:
        self.restore()
        return self

    def restore(self) -> None:
        """Listen (again) on the proxy's port."""
        with self._lock:
            if self._listener is not None:
                return
            if self.unix_listen:
                listener = socket.socket(socket.AF_UNIX)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.unix_listen)
                listener.bind(self.unix_listen)
            else:
                listener = socket.socket()
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Stop listening and close every forwarded connection."""
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        self._closed = True
        self.cut()

    def __enter__(self) -> LoopbackProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = self._upstream()
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:  # cut while connecting
                    client.close()
                    upstream.close()
                    return
                self._connections += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _upstream(self) -> socket.socket:
        if self.unix_target:
            upstream = socket.socket(socket.AF_UNIX)
            upstream.settimeout(5)
            upstream.connect(self.unix_target)
            upstream.settimeout(None)
            return upstream
        return socket.create_connection(("127.0.0.1", self.target_port), timeout=5)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while True:
                readable, _, _ = select.select(list(peers), [], [], 1.0)
                for sock in readable:
                    data = sock.recv(_CHUNK)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for sock in (a, b):
                with contextlib.suppress(OSError):
                    sock.close()
