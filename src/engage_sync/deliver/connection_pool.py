"""The lean transport's keep-alive connections: opened, kept idle, taken again.

Invariants:
- an idle connection the server has closed (it reads as ready before we asked anything), or
  idle longer than `IDLE_SECONDS` (the server may be closing it right now), is dropped before
  use, never written to, so a stale keep-alive is never a request in doubt;
- connecting fails or times out as httpx's `ConnectError` / `ConnectTimeout`: nothing was
  sent;
- TLS is verified with httpx's own default context (certifi, or SSL_CERT_FILE /
  SSL_CERT_DIR), made on the first https connection;
- at most `max_idle` idle connections are kept, none once the pool is closed; thread-safe.

A connection taken is the taker's alone until it gives it back (only with its whole answer
read, `deliver/lean_transport.py`) or closes it.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time

import httpx

from engage_sync.deliver.exchange import error_text
from engage_sync.deliver.http11 import Wire

Key = tuple[str, str, int]  # scheme, host (its ASCII form), port
IDLE_SECONDS = 1.0  # an idle connection older than this is dropped, not reused: below the
# keep-alive timeouts of common servers (2-5 s), so a server's close of it cannot cross our
# next request on the wire (which would leave that request in doubt)


class ConnectionPool:
    """Idle connections by `Key`, at most `max_idle` (see the module)."""

    def __init__(self, max_idle: int = 4, ssl_context: ssl.SSLContext | None = None,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        self._max_idle = max_idle
        self._idle_seconds = idle_seconds
        self._ssl = ssl_context
        self._idle: list[tuple[Key, Wire]] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self, key: Key) -> Wire | None:
        """An idle connection to `key` the server has not closed, or None."""
        while True:
            with self._lock:
                at = next((k for k, (held, _) in enumerate(self._idle) if held == key), None)
                if at is None:
                    return None
                conn = self._idle.pop(at)[1]
            if time.monotonic() - conn.idle_since <= self._idle_seconds and _alive(conn):
                return conn
            conn.close()

    def give(self, key: Key, conn: Wire) -> None:
        """A connection whose answer was read whole, kept for the next request to `key` if
        there is room (else closed)."""
        conn.idle_since = time.monotonic()
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append((key, conn))
                return
        conn.close()

    def connect(self, key: Key, timeout: float | None, request: httpx.Request | None
                ) -> Wire:
        """A new connection to `key`, its TLS handshake done for https."""
        scheme, host, port = key
        sock: socket.socket | None = None
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                if self._ssl is None:
                    self._ssl = httpx.create_ssl_context()
                sock = self._ssl.wrap_socket(sock, server_hostname=host)  # the handshake
        except TimeoutError as exc:
            if sock is not None:
                sock.close()
            raise httpx.ConnectTimeout(error_text(exc, "connecting timed out"),
                                       request=request) from exc
        except OSError as exc:  # refused, unreachable, name unknown, TLS refused
            if sock is not None:
                sock.close()
            raise httpx.ConnectError(error_text(exc, "could not connect"),
                                     request=request) from exc
        return Wire(sock)

    def close(self) -> None:
        """Close the idle connections; those given back later are closed too."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for _, conn in idle:
            conn.close()


def _alive(conn: Wire) -> bool:
    """An idle keep-alive connection is usable while nothing is there to read: a readable one
    was closed by the server (or holds bytes nobody asked for)."""
    sock = conn.sock
    if conn.leftover or sock.fileno() < 0:
        return False
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    poller = select.poll()  # not select(): no limit on the descriptor's number
    try:
        poller.register(sock, select.POLLIN)
        return not poller.poll(0)
    except (OSError, ValueError):
        return False
