"""A keep-alive HTTP/1.1 transport on plain sockets (`http11`), for httpx.

Why: a run sends about 13,000 requests a million rows, from threads that share the GIL with
the thread that reads and packs. httpx's own transport (httpcore and h11, pure Python) costs
about 290 µs of CPU a request on loopback; the standard library's `http.client` about 135 µs
(benchmarks/README.md, "The lean transport"), of which its header parsing through the `email`
package is most; `http11` a fraction of that ("Answers read without the email package"). The
Deliverer still speaks httpx: it hands an `httpx.Request` and gets
an `httpx.Response`, and every error is httpx's own, raised where httpx raises it, so
`deliver.classify` tells "not sent" from "in doubt" exactly as before:

- connecting fails or times out: `ConnectError` / `ConnectTimeout` (nothing was sent);
- writing the request fails or times out: `WriteError` / `WriteTimeout` (the body is
  incomplete: the service cannot have parsed it);
- anything after the whole request was written (no answer in time, a reset, a malformed or
  cut answer, an informational 1xx where the final answer was due): `ReadTimeout`,
  `ReadError`, `RemoteProtocolError` (it may have been processed);
- a write the server cut short after answering (a 413 or 401 before it read the body): that
  answer, as httpcore returns it.

Invariants:
- a connection serves one request at a time; it goes back to the pool only after its whole
  answer was read and the answer did not ask to close it; any error closes it;
- an idle connection the server has closed (it reads as ready before we asked anything), or
  idle longer than `IDLE_SECONDS` (the server may be closing it right now), is dropped
  before use, never written to, so a stale keep-alive is never a request in doubt;
- TLS is verified with httpx's own default context (certifi, or SSL_CERT_FILE / SSL_CERT_DIR);
- at most `max_idle` idle connections are kept; thread-safe.

Used for plain `http`/`https` service URLs with no proxy (`adapters.wiring.http_transport`);
a proxy keeps httpx's own transport.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from typing import Any

import httpx

from engage_sync.deliver.http11 import Answer, ProtocolError, Wire, request_head

_Key = tuple[str, str, int]  # scheme, host (its ASCII form), port
_PORTS = {"http": 80, "https": 443}
IDLE_SECONDS = 1.0  # an idle connection older than this is dropped, not reused: below the
# keep-alive timeouts of common servers (2-5 s), so a server's close of it cannot cross our
# next request on the wire (which would leave that request in doubt)


class LeanTransport(httpx.BaseTransport):
    """httpx.BaseTransport over pooled keep-alive connections (see the module)."""

    def __init__(self, max_idle: int = 4, ssl_context: ssl.SSLContext | None = None,
                 idle_seconds: float = IDLE_SECONDS) -> None:
        self._max_idle = max_idle
        self._idle_seconds = idle_seconds
        self._ssl = ssl_context
        self._idle: list[tuple[_Key, Wire]] = []
        self._lock = threading.Lock()
        self._closed = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in _PORTS:
            raise httpx.UnsupportedProtocol(f"the URL's scheme {url.scheme!r} is not http or "
                                            "https", request=request)
        key = (url.scheme, url.raw_host.decode("ascii"), url.port or _PORTS[url.scheme])
        timeouts = request.extensions.get("timeout", {})
        conn = self._take(key) or self._connect(key, timeouts.get("connect"), request)
        try:
            status, reason, headers, body, reusable = _exchange(conn, request, timeouts)
        except BaseException:
            conn.close()
            raise
        if reusable:
            self._give(key, conn)
        else:
            conn.close()
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body),
                              extensions={"http_version": b"HTTP/1.1",
                                          "reason_phrase": reason.encode("latin-1")})

    def close(self) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for _, conn in idle:
            conn.close()

    # the pool --------------------------------------------------------------------------------
    def _take(self, key: _Key) -> Wire | None:
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

    def _give(self, key: _Key, conn: Wire) -> None:
        conn.idle_since = time.monotonic()
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append((key, conn))
                return
        conn.close()

    def _connect(self, key: _Key, timeout: float | None, request: httpx.Request) -> Wire:
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
            raise httpx.ConnectTimeout(_text(exc, "connecting timed out"),
                                       request=request) from exc
        except OSError as exc:  # refused, unreachable, name unknown, TLS refused
            if sock is not None:
                sock.close()
            raise httpx.ConnectError(_text(exc, "could not connect"), request=request) from exc
        return Wire(sock)


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


EARLY_ANSWER_WAIT = 2.0  # seconds to read an answer the server sent before closing mid-body


def _exchange(conn: Wire, request: httpx.Request, timeouts: dict[str, Any]) -> Answer:
    """Write the request, read the whole answer: (status, reason, headers, body, reusable).
    A write the server cut short may have been refused with an answer first (413, 401 or 429
    before it read the whole body), which is read and returned, as httpcore does; without
    one, the write's error stands (the request was not sent whole)."""
    try:
        _write(conn, request, timeouts.get("write"))
    except httpx.WriteError:
        early = _early_answer(conn, request)
        if early is None:
            raise
        return early
    return _read(conn, request, timeouts.get("read"))


def _early_answer(conn: Wire, request: httpx.Request) -> Answer | None:
    """The answer a server sent before it closed a connection we were still writing to, or
    None (then nothing was answered: the request was not sent whole)."""
    try:
        return _read(conn, request, EARLY_ANSWER_WAIT)._replace(reusable=False)
    except httpx.TransportError:
        return None


def _write(conn: Wire, request: httpx.Request, timeout: float | None) -> None:
    body = request.read()
    try:
        head = request_head(request.method, request.url.raw_path.decode("ascii"),
                            request.headers.raw)
    except (ValueError, UnicodeError):  # never quote the value: it may be a secret
        raise httpx.LocalProtocolError("an invalid header or body",
                                       request=request) from None
    conn.sock.settimeout(timeout)
    try:
        conn.send(head + body)  # one write: a failure leaves the body incomplete
    except TimeoutError as exc:
        raise httpx.WriteTimeout(_text(exc, "writing timed out"), request=request) from exc
    except OSError as exc:
        raise httpx.WriteError(_text(exc, "writing failed"), request=request) from exc


def _read(conn: Wire, request: httpx.Request, timeout: float | None) -> Answer:
    """The whole answer, once the request was written: every failure is one that leaves the
    request in doubt."""
    conn.sock.settimeout(timeout)
    try:
        return conn.answer()
    except TimeoutError as exc:
        raise httpx.ReadTimeout(_text(exc, "no answer in time"), request=request) from exc
    except ProtocolError as exc:  # cut, malformed, closed early, a 1xx for the answer
        raise httpx.RemoteProtocolError(_text(exc, "the answer was cut or malformed"),
                                        request=request) from exc
    except OSError as exc:
        raise httpx.ReadError(_text(exc, "reading the answer failed"), request=request) from exc
    except Exception as exc:  # MemoryError and the like: still an answer we could not read
        raise httpx.RemoteProtocolError(_text(exc, "the answer could not be read"),
                                        request=request) from exc


def _text(exc: BaseException, fallback: str) -> str:
    text = str(exc).strip()
    return f"{fallback}: {text}" if text else fallback
