"""A keep-alive HTTP/1.1 transport on plain sockets (`http11`), for httpx.

Why: a run sends about 13,000 requests a million rows, from threads that share the GIL with
the thread that reads and packs. httpx's own transport (httpcore and h11, pure Python) and
the standard library's `http.client` (whose header parsing through the `email` package is most
of its cost) each spend several times the CPU a request that `http11` does
(`benchmarks/transport_cpu.py`, figures in benchmarks/README.md).
Two ways in, the same bytes on the wire: `handle_request` (an `httpx.Request` in, an
`httpx.Response` out, as any httpx transport), and `prepare` once per URL and headers, then
`post` per body (a `LeanAnswer` out), which the Deliverer uses: building httpx's request and
response models cost it as much CPU as the exchange itself (`benchmarks/deliver_overhead.py`,
figures in benchmarks/README.md). Either way every error is httpx's
own, raised where httpx raises it, so `deliver.classify` tells "not sent" from "in doubt"
exactly as before:

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
from collections.abc import Mapping
from typing import Any, NamedTuple

import httpx

from engage_sync.deliver.http11 import Answer, ProtocolError, Wire, request_head

_Key = tuple[str, str, int]  # scheme, host (its ASCII form), port
_PORTS = {"http": 80, "https": 443}
IDLE_SECONDS = 1.0  # an idle connection older than this is dropped, not reused: below the
# keep-alive timeouts of common servers (2-5 s), so a server's close of it cannot cross our
# next request on the wire (which would leave that request in doubt)


class Prepared(NamedTuple):
    """A POST's connection and its head up to Content-Length, made and checked once."""

    key: _Key
    head: bytes  # the request line and headers, each line ending in CRLF


class LeanAnswer(NamedTuple):
    """An answer as the Deliverer reads it (the names an `httpx.Response` has for the same)."""

    status_code: int
    headers: dict[str, str]  # names in lower case; a repeated name's values joined by ", "
    content: bytes


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
        key = _key_of(request)
        data = _head(request, request.headers.raw) + request.read()
        status, reason, headers, body, _ = self._round_trip(
            key, data, request.extensions.get("timeout", {}), request)
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body),
                              extensions={"http_version": b"HTTP/1.1",
                                          "reason_phrase": reason.encode("latin-1")})

    def prepare(self, url: str, headers: Mapping[str, str]) -> Prepared:
        """POSTs to `url` with `headers`: the head httpx's request would have, checked once
        (raises what `handle_request` raises for a bad URL or header, before connecting)."""
        request = httpx.Request("POST", url, headers=headers, content=b"")
        raw = [(n, v) for n, v in request.headers.raw if n.lower() != b"content-length"]
        return Prepared(_key_of(request), _head(request, raw)[:-2])  # open for Content-Length

    def post(self, prepared: Prepared, body: bytes, timeouts: Mapping[str, Any]) -> LeanAnswer:
        """One POST of `body`: the bytes `handle_request` writes for the same request."""
        data = b"%sContent-Length: %d\r\n\r\n%s" % (prepared.head, len(body), body)
        status, _, headers, content, _ = self._round_trip(prepared.key, data, timeouts, None)
        named = _header_map(headers)
        if named.get("content-encoding", "identity").strip().lower() not in ("", "identity"):
            content = _decoded(status, headers, content)  # as httpx's Response decodes it
        return LeanAnswer(status, named, content)

    def _round_trip(self, key: _Key, data: bytes, timeouts: Mapping[str, Any],
                    request: httpx.Request | None) -> Answer:
        """`data` written on a pooled (or new) connection to `key`, the answer read whole; the
        connection kept only if the answer allows it, closed on any error."""
        conn = self._take(key) or self._connect(key, timeouts.get("connect"), request)
        try:
            answer = _exchange(conn, data, timeouts, request)
        except BaseException:
            conn.close()
            raise
        if answer.reusable:
            self._give(key, conn)
        else:
            conn.close()
        return answer

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

    def _connect(self, key: _Key, timeout: float | None, request: httpx.Request | None
                 ) -> Wire:
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


def _key_of(request: httpx.Request) -> _Key:
    """(scheme, host as ASCII, port) of the request's URL; raises UnsupportedProtocol for a
    scheme that is not http or https."""
    url = request.url
    if url.scheme not in _PORTS:
        raise httpx.UnsupportedProtocol(f"the URL's scheme {url.scheme!r} is not http or "
                                        "https", request=request)
    return url.scheme, url.raw_host.decode("ascii"), url.port or _PORTS[url.scheme]


def _head(request: httpx.Request, raw: list[tuple[bytes, bytes]]) -> bytes:
    """The request's line and the `raw` headers, ending in the blank line; LocalProtocolError
    (naming no value: it may be a secret) for anything that could split the request."""
    try:
        return request_head(request.method, request.url.raw_path.decode("ascii"), raw)
    except (ValueError, UnicodeError):
        raise httpx.LocalProtocolError("an invalid header or body", request=request) from None


def _header_map(headers: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """An answer's headers by lower-case name, a repeated name's values joined, all decoded as
    httpx's `Headers` decodes them (ASCII if all are, else UTF-8 if all are, else Latin-1)."""
    encoding = next((e for e in ("ascii", "utf-8") if _all_decode(headers, e)), "latin-1")
    out: dict[str, str] = {}
    for name, value in headers:
        key, text = name.decode(encoding).lower(), value.decode(encoding)
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def _all_decode(headers: list[tuple[bytes, bytes]], encoding: str) -> bool:
    try:
        for name, value in headers:
            name.decode(encoding)
            value.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


def _decoded(status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """A body under a Content-Encoding (gzip, deflate and what else httpx reads), decoded by
    httpx's own decoders, as the Deliverer's `response.read()` did: httpx's DecodingError for
    one it cannot decode (a request in doubt, as before)."""
    response = httpx.Response(status, headers=headers, stream=httpx.ByteStream(body))
    try:
        return response.read()
    finally:
        response.close()


def _exchange(conn: Wire, data: bytes, timeouts: Mapping[str, Any],
              request: httpx.Request | None) -> Answer:
    """Write the request (`data`: head and body), read the whole answer: (status, reason,
    headers, body, reusable). A write the server cut short may have been refused with an
    answer first (413, 401 or 429 before it read the whole body), which is read and
    returned, as httpcore does; without one, the write's error stands (the request was not
    sent whole)."""
    try:
        _write(conn, data, timeouts.get("write"), request)
    except httpx.WriteError:
        early = _early_answer(conn, request)
        if early is None:
            raise
        return early
    return _read(conn, request, timeouts.get("read"))


def _early_answer(conn: Wire, request: httpx.Request | None) -> Answer | None:
    """The answer a server sent before it closed a connection we were still writing to, or
    None (then nothing was answered: the request was not sent whole)."""
    try:
        return _read(conn, request, EARLY_ANSWER_WAIT)._replace(reusable=False)
    except httpx.TransportError:
        return None


def _write(conn: Wire, data: bytes, timeout: float | None, request: httpx.Request | None
           ) -> None:
    conn.sock.settimeout(timeout)
    try:
        conn.send(data)  # one write: a failure leaves the body incomplete
    except TimeoutError as exc:
        raise httpx.WriteTimeout(_text(exc, "writing timed out"), request=request) from exc
    except OSError as exc:
        raise httpx.WriteError(_text(exc, "writing failed"), request=request) from exc


def _read(conn: Wire, request: httpx.Request | None, timeout: float | None) -> Answer:
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
