"""HTTP/1.1 on one socket, as much as a run needs: a request's head written, an answer read
whole (Content-Length, chunked, or up to the close).

Why not `http.client`: it parses every answer's headers through the `email` package, which
holds the interpreter lock a run's send threads share with the thread that reads and packs
(`benchmarks/transport_cpu.py`, figures in benchmarks/README.md). Here an answer is split
with bytes methods.

Invariants:
- `request_head` refuses (ValueError, naming no value) a method, target or header that could
  split the request: CR, LF or NUL anywhere, a header name that is not a token;
- `Wire.answer` returns only a final answer read whole; the informational answers before it
  (100 Continue, 102, 103 Early Hints) are skipped, as RFC 9110 lets a client; a 101 (a
  switch of protocols nobody asked for) is `Informational`;
- an answer cut short, malformed, or whose head or length is absurd is `ProtocolError`;
  socket errors and timeouts pass through as they are (`OSError`, `TimeoutError`), so the
  caller tells a read that failed from an answer that was wrong;
- an answer is `reusable` only when its end was known (a length or chunked), it is HTTP/1.1
  and it did not ask to close; bytes read past it stay in the wire's buffer (`leftover`).
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from typing import NamedTuple

MAX_HEAD = 65_536  # bytes of an answer's head (status line and headers)
MAX_LENGTH = 1 << 30  # an answer's declared length we would read (1 GiB)
_READ = 65_536
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SPLITS = re.compile(rb"[\r\n\x00]")
_NO_BODY = (204, 304)


class ProtocolError(Exception):
    """The answer broke HTTP/1.1: cut short, malformed, or absurd."""


class Informational(ProtocolError):
    """A 101 Switching Protocols where the final answer was due."""

    def __init__(self, status: int) -> None:
        super().__init__(f"an informational answer ({status}) came where the final one was "
                         "expected")
        self.status = status


class Answer(NamedTuple):
    status: int
    reason: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    reusable: bool


def request_head(method: str, target: str, headers: Iterable[tuple[bytes, bytes]]) -> bytes:
    """The request line and headers, ending in the blank line. Raises ValueError (with no
    value in its text) for anything that could split the request."""
    line = f"{method} {target} HTTP/1.1".encode("ascii")
    if not _TOKEN.fullmatch(method.encode("ascii")) or _SPLITS.search(line) \
            or " " in target or not target:
        raise ValueError("an invalid method or target")
    lines = [line]
    for name, value in headers:
        if not _TOKEN.fullmatch(name) or _SPLITS.search(value):
            raise ValueError("an invalid header")
        lines.append(b"%s: %s" % (name, value))
    lines.append(b"\r\n")
    return b"\r\n".join(lines)


def parse_head(head: bytes) -> tuple[bool, int, str, list[tuple[bytes, bytes]]]:
    """An answer's head (without its blank line) → (HTTP/1.1?, status, reason, headers).
    Raises ProtocolError."""
    status_line, *lines = head.split(b"\r\n")
    version, _, rest = status_line.partition(b" ")
    code, _, reason = rest.partition(b" ")
    if version not in (b"HTTP/1.1", b"HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise ProtocolError(f"a malformed status line ({status_line[:40]!r})")
    headers = []
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # obs-fold and junk included
            raise ProtocolError(f"a malformed header line ({line[:40]!r})")
        headers.append((name, value.strip(b" \t")))
    return version == b"HTTP/1.1", int(code), reason.decode("latin-1").strip(), headers


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    """Every value of header `name` (lower case), in order."""
    return [v for k, v in headers if k.lower() == name]


def body_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The answer's Content-Length, or None without one. Raises ProtocolError for a length
    that is not one non-negative number below MAX_LENGTH."""
    values = {v.strip() for joined in header(headers, b"content-length")
              for v in joined.split(b",")}
    if not values:
        return None
    if len(values) != 1 or not (value := values.pop()).isdigit() or len(value) > 12 \
            or int(value) > MAX_LENGTH:
        raise ProtocolError("an absurd or conflicting Content-Length")
    return int(value)


def is_chunked(headers: list[tuple[bytes, bytes]]) -> bool | None:
    """True if the body is chunked, False if it is read to the close (another coding last),
    None without Transfer-Encoding."""
    codings = [c.strip().lower() for v in header(headers, b"transfer-encoding")
               for c in v.split(b",")]
    return None if not codings else codings[-1] == b"chunked"


class Wire:
    """One connection: its socket and the bytes read from it but not yet used."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.idle_since = 0.0  # when it went back to a pool (monotonic seconds)
        self._buf = bytearray()

    @property
    def leftover(self) -> bool:
        """Bytes came that no answer used (a server talking out of turn)."""
        return bool(self._buf)

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def answer(self) -> Answer:
        """The next final answer, read whole (see the module)."""
        while True:
            at = self._until(b"\r\n\r\n", MAX_HEAD, "head")
            head = bytes(self._buf[:at])
            del self._buf[:at + 4]
            http11, status, reason, headers = parse_head(head)
            if status == 101:  # a switch of protocols nobody asked for
                raise Informational(status)
            if 100 <= status < 200:  # 100 Continue, 102, 103 Early Hints: the final follows
                continue
            body, delimited = self._body(status, headers)
            close = any(b"close" in v.lower() for v in header(headers, b"connection"))
            return Answer(status, reason, headers, body, delimited and http11 and not close)

    def _body(self, status: int, headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
        """(the body, whether its end was known)."""
        if status in _NO_BODY:
            return b"", True
        chunked = is_chunked(headers)
        if chunked:
            return self._chunks(), True
        length = None if chunked is False else body_length(headers)
        if length is None:
            return self._to_close(), False
        return self._take(length), True

    def _chunks(self) -> bytes:
        parts: list[bytes] = []
        while True:
            at = self._until(b"\r\n", MAX_HEAD, "chunk size")
            size_text = bytes(self._buf[:at]).split(b";", 1)[0].strip()
            del self._buf[:at + 2]
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"a malformed chunk size ({size_text[:20]!r})") from None
            if size < 0 or size > MAX_LENGTH:
                raise ProtocolError("an absurd chunk size")
            if size == 0:
                while (at := self._until(b"\r\n", MAX_HEAD, "trailer")) != 0:
                    del self._buf[:at + 2]  # trailers: not used
                del self._buf[:2]
                return b"".join(parts)
            parts.append(self._take(size))
            if self._take(2) != b"\r\n":
                raise ProtocolError("a chunk not followed by CRLF")

    def _take(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._fill("body")
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _to_close(self) -> bytes:
        while self._fill(None):
            if len(self._buf) > MAX_LENGTH:
                raise ProtocolError("an answer longer than any the service sends")
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def _until(self, mark: bytes, limit: int, what: str) -> int:
        """Where `mark` starts in the buffer, reading until it comes."""
        start = 0
        while (at := self._buf.find(mark, start)) < 0:
            if len(self._buf) > limit:
                raise ProtocolError(f"the answer's {what} is too long")
            start = max(0, len(self._buf) - len(mark) + 1)
            self._fill(what)
        return at

    def _fill(self, what: str | None) -> bool:
        """Read what the socket has; at its end: False if `what` is None, else ProtocolError
        (the answer was cut in its `what`)."""
        data = self.sock.recv(_READ)
        if not data:
            if what is None:
                return False
            raise ProtocolError(f"the connection closed in the answer's {what}")
        self._buf += data
        return True
