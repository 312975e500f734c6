"""Turn one HTTP exchange into an `Outcome`: the only place that reads a response.

`classify` is pure: a function of the request, the status, the body and the exception. Retry,
journal and status consume the outcome and never look at the response again.

Kinds:
- ``ok``: the service accepted the request; `item_errors` lists the items it refused anyway;
- ``retry``: known not processed (connect errors, pool timeouts, a write cut short, 408, 429,
  and 503 in the service's own shape): send again;
- ``in_doubt``: maybe processed: any answer that does not prove the request was refused before
  processing (a timeout or a dropped connection after sending, a body cut short, 500, 502,
  504 and unknown 5xx, a 503 that is not the service's JSON, a 2xx whose body is not the
  service's JSON object): send again only when duplicates are acceptable. A gateway answers
  502, 503 or 504 after forwarding as readily as before, so only the service's own refusal,
  or one that by its meaning came before processing (408, 429), proves "not processed";
- ``failed``: refused for good (400, 404, 413, 415, other 4xx): every item fails, with
  `item_errors` giving a finer reason where the service listed one;
- ``fatal``: the whole run must stop (401, 403, an unusable base URL).

A reason never holds the API key or a payload value: it is built from the status, the
exception's type and message, and the service's own short message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import orjson

from engage_sync.pack.request import Request

OutcomeKind = Literal["ok", "retry", "in_doubt", "failed", "fatal"]

_MAX_MESSAGE = 200


@dataclass(frozen=True, slots=True, eq=True)
class Outcome:
    """What became of one attempt (or, in a `Delivery`, of the whole request).

    `item_errors` maps a position in `request.items` to the service's `type` reason.
    `unmapped_errors` keeps service errors that name no item of the request, so none is lost.
    """

    kind: OutcomeKind
    reason: str
    status: int | None = None
    item_errors: dict[int, str] = field(default_factory=dict)
    unmapped_errors: tuple[str, ...] = ()

    def reason_for(self, k: int) -> str | None:
        """Why item k was not synced, or None when it was (an `ok` outcome without its error)."""
        if k in self.item_errors:
            return self.item_errors[k]
        return None if self.kind == "ok" else self.reason


# --- exceptions -----------------------------------------------------------------------------

_NOT_SENT: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.ProxyError,
    # A write that fails or times out leaves the body incomplete: the service cannot have
    # parsed it, let alone processed it. (httpcore also swallows most WriteErrors and reads the
    # answer instead.)
    httpx.WriteError,
    httpx.WriteTimeout,
)
_MAYBE_SENT: tuple[type[Exception], ...] = (
    httpx.ReadTimeout,
    httpx.ReadError,
    httpx.RemoteProtocolError,
    httpx.CloseError,
    httpx.DecodingError,
)


def _exception_text(exc: Exception) -> str:
    name = type(exc).__name__
    if isinstance(exc, httpx.LocalProtocolError):
        # h11 quotes the offending header value, which may be the API key: never repeat it.
        return f"{name}: the request could not be written (an invalid header or body)"
    text = " ".join(str(exc).split())[:_MAX_MESSAGE]
    return f"{name}: {text}" if text else name


def _classify_exception(exc: Exception) -> Outcome:
    text = _exception_text(exc)
    if isinstance(exc, _NOT_SENT):
        return Outcome("retry", f"{text} (not sent)")
    if isinstance(exc, httpx.ReadTimeout):  # sent, then no answer, or an answer that stalled
        return Outcome("in_doubt", f"{text} (no answer within service.timeout_seconds after "
                       "sending: may have been processed)")
    if isinstance(exc, _MAYBE_SENT):
        return Outcome("in_doubt", f"{text} (after sending: may have been processed)")
    if isinstance(exc, httpx.UnsupportedProtocol):
        return Outcome("fatal", f"{text}: check service.base_url")
    if isinstance(exc, httpx.RequestError):
        return Outcome("failed", text)  # LocalProtocolError, TooManyRedirects: not transient
    # Not an HTTP error: we cannot know how far the request got.
    return Outcome("in_doubt", f"{text} (unexpected error: may have been processed)")


# --- responses ------------------------------------------------------------------------------


def _parse(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _service_message(data: dict[str, Any] | None) -> str | None:
    if data is None:
        return None
    message = data.get("message")
    if not isinstance(message, str) or not message:
        return None
    return " ".join(message.split())[:_MAX_MESSAGE]


def _item_errors(
    request: Request, data: dict[str, Any] | None
) -> tuple[dict[int, str], tuple[str, ...]]:
    """Service `errors` entries → ({item position: reason}, reasons naming no item)."""
    errors = data.get("errors") if data is not None else None
    if not isinstance(errors, list):
        return {}, ()
    mapped: dict[int, str] = {}
    unmapped: list[str] = []
    for entry in errors:
        if not isinstance(entry, dict):
            continue  # a fatal message repeated as a string: `message` already holds it
        reason = " ".join(str(entry.get("type") or entry.get("message") or "error").split())
        reason = reason[:_MAX_MESSAGE]
        array, index = entry.get("input_array"), entry.get("index")
        k = (
            request.item_at(array, index)
            if isinstance(array, str) and isinstance(index, int)
            else None
        )
        if k is None:
            where = f" ({array}[{index}])" if array is not None else ""
            unmapped.append(reason + where)
        elif k in mapped:
            mapped[k] = f"{mapped[k]}; {reason}"
        else:
            mapped[k] = reason
    return mapped, tuple(unmapped)


_RETRY_STATUSES = {408: "request timeout", 429: "rate limited"}
# Not processed only when the service itself says so (its JSON object with a `message`): the
# same status from a proxy or load balancer may come after it forwarded the request.
_REFUSED_BY_THE_SERVICE = {503: "service unavailable"}
_IN_DOUBT_STATUSES = {500: "server error", 502: "bad gateway", 503: "service unavailable",
                      504: "gateway timeout"}
_FAILED_STATUSES = {
    400: "bad request",
    404: "unknown endpoint",
    405: "method not allowed",
    413: "request body too large: split the batch",
    415: "unsupported media type: the body must be sent as application/json",
}
_FATAL_STATUSES = {
    401: "the API key was refused (missing or invalid): check the key in the variable that "
         "service.api_key_env names (ENGAGE_API_KEY by default)",
    403: "the API key lacks this endpoint's permission, or the plan lacks the feature",
}


def _not_the_service(body: bytes | None) -> str:
    """What to say of an error answer whose body is an HTML page: something in front of the
    service answered (a proxy, a load balancer, a maintenance page)."""
    if body and body.lstrip()[:1] == b"<":
        return " (an HTML page, not the service's JSON: a proxy or gateway in front of it)"
    return ""


def _classify_success(request: Request, status: int, body: bytes | None) -> Outcome:
    """A 2xx: the service's own answer is a JSON object (204 alone has no body). Anything else
    came from something in front of it, or was mangled: processed or not, nobody knows."""
    if status == 204 and not body:
        return Outcome("ok", f"{status} success", status)
    data = _parse(body)
    if data is None:
        return Outcome("in_doubt", f"{status} answer that is not the service's JSON (may have "
                       "been processed): check that service.base_url reaches the service itself",
                       status)
    if "errors" not in data:
        return Outcome("ok", f"{status} success", status)
    mapped, unmapped = _item_errors(request, data)
    failed = len(mapped)
    reason = f"{status} success" + (f", {failed} item errors" if failed else "")
    if unmapped:
        reason += f", {len(unmapped)} errors naming no item of the request"
    return Outcome("ok", reason, status, mapped, unmapped)


def _classify_status(request: Request, status: int, body: bytes | None) -> Outcome:
    if 200 <= status < 300:
        return _classify_success(request, status, body)
    data = _parse(body)
    message = _service_message(data)
    suffix = f": {message}" if message else _not_the_service(body)
    if status in _RETRY_STATUSES:
        return Outcome("retry", f"{status} {_RETRY_STATUSES[status]}{suffix}", status)
    if status in _REFUSED_BY_THE_SERVICE and message is not None:
        return Outcome("retry", f"{status} {_REFUSED_BY_THE_SERVICE[status]}{suffix}", status)
    if status in _FATAL_STATUSES:
        return Outcome("fatal", f"{status} {_FATAL_STATUSES[status]}", status)
    if status in _IN_DOUBT_STATUSES or (status >= 500 and status != 501):
        label = _IN_DOUBT_STATUSES.get(status, "server error")
        return Outcome("in_doubt", f"{status} {label} (may have been processed){suffix}", status)
    label = _FAILED_STATUSES.get(status, "refused")
    if status == 404:
        label = f"{label} {request.endpoint}"
    mapped, unmapped = _item_errors(request, data)
    return Outcome("failed", f"{status} {label}{suffix}", status, mapped, unmapped)


def classify(
    request: Request, status: int | None, body: bytes | None, exc: Exception | None
) -> Outcome:
    """The outcome of one attempt: either a response (status, body) or an exception.

    Pure. Raises ValueError when given neither a status nor an exception.
    """
    if exc is not None:
        return _classify_exception(exc)
    if status is None:
        raise ValueError("classify needs a status or an exception")
    return _classify_status(request, status, body)
