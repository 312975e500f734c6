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
figures in benchmarks/README.md). Either way every error is httpx's own, raised where httpx
raises it (`deliver/connection_pool.py` for connecting, `deliver/exchange.py` for the rest),
so `deliver.classify` tells "not sent" from "in doubt" exactly as on httpx's transport.

Invariants:
- a connection serves one request at a time; it goes back to the pool only after its whole
  answer was read and the answer did not ask to close it; any error closes it;
- the pool's (`deliver/connection_pool.py`): a stale keep-alive is never written to, TLS is
  verified with httpx's default context, at most `max_idle` idle connections; thread-safe;
- an answer's headers and body read as httpx's `Response` reads them (names in lower case,
  decoded alike, a Content-Encoding undone by httpx's own decoders).

Used for plain `http`/`https` service URLs with no proxy (`adapters.resources.http_transport`);
a proxy keeps httpx's own transport.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any, NamedTuple

import httpx

from engage_sync.deliver.connection_pool import IDLE_SECONDS, ConnectionPool, Key
from engage_sync.deliver.exchange import exchange
from engage_sync.deliver.http11 import Answer, request_head

_PORTS = {"http": 80, "https": 443}


class Prepared(NamedTuple):
    """A POST's connection and its head up to Content-Length, made and checked once."""

    key: Key
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
        self._pool = ConnectionPool(max_idle, ssl_context, idle_seconds)

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

    def _round_trip(self, key: Key, data: bytes, timeouts: Mapping[str, Any],
                    request: httpx.Request | None) -> Answer:
        """`data` written on a pooled (or new) connection to `key`, the answer read whole; the
        connection kept only if the answer allows it, closed on any error."""
        conn = self._pool.take(key) or self._pool.connect(key, timeouts.get("connect"), request)
        try:
            answer = exchange(conn, data, timeouts, request)
        except BaseException:
            conn.close()
            raise
        if answer.reusable:
            self._pool.give(key, conn)
        else:
            conn.close()
        return answer

    def close(self) -> None:
        self._pool.close()


def _key_of(request: httpx.Request) -> Key:
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
