"""One request's bytes on one connection, and its whole answer, with httpx's errors.

Every failure is raised as the httpx error httpx's own transport raises at the same point, so
`deliver.classify` tells "not sent" from "in doubt" exactly as on httpx's transport:

- writing the request fails or times out: `WriteError` / `WriteTimeout` (the body is
  incomplete: the service cannot have parsed it);
- anything after the whole request was written (no answer in time, a reset, a malformed or
  cut answer, an informational 1xx where the final answer was due): `ReadTimeout`,
  `ReadError`, `RemoteProtocolError` (it may have been processed);
- a write the server cut short after answering (a 413 or 401 before it read the body): that
  answer, as httpcore returns it, its connection never reused.

(Connecting, the step before, is the pool's: `deliver/connection_pool.py`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from engage_sync.deliver.http11 import Answer, ProtocolError, Wire

EARLY_ANSWER_WAIT = 2.0  # seconds to read an answer the server sent before closing mid-body


def exchange(conn: Wire, data: bytes, timeouts: Mapping[str, Any],
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
        raise httpx.WriteTimeout(error_text(exc, "writing timed out"), request=request) from exc
    except OSError as exc:
        raise httpx.WriteError(error_text(exc, "writing failed"), request=request) from exc


def _read(conn: Wire, request: httpx.Request | None, timeout: float | None) -> Answer:
    """The whole answer, once the request was written: every failure is one that leaves the
    request in doubt."""
    conn.sock.settimeout(timeout)
    try:
        return conn.answer()
    except TimeoutError as exc:
        raise httpx.ReadTimeout(error_text(exc, "no answer in time"), request=request) from exc
    except ProtocolError as exc:  # cut, malformed, closed early, a 1xx for the answer
        raise httpx.RemoteProtocolError(error_text(exc, "the answer was cut or malformed"),
                                        request=request) from exc
    except OSError as exc:
        raise httpx.ReadError(error_text(exc, "reading the answer failed"),
                              request=request) from exc
    except Exception as exc:  # MemoryError and the like: still an answer we could not read
        raise httpx.RemoteProtocolError(error_text(exc, "the answer could not be read"),
                                        request=request) from exc


def error_text(exc: BaseException, fallback: str) -> str:
    """An httpx error's message: what happened, then the system's words, if any."""
    text = str(exc).strip()
    return f"{fallback}: {text}" if text else fallback
