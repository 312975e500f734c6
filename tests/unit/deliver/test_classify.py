"""classify: one table from status / exception to outcome kind, then the item-error mapping."""

from __future__ import annotations

import httpx
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engage_sync.deliver.classify import Outcome, classify
from engage_sync.items import Item
from engage_sync.pack.request import Request


def make_request(**arrays: int) -> Request:
    """A /users/track request with `arrays` objects per array, in body order."""
    items: list[Item] = []
    positions: list[tuple[str, int]] = []
    body: dict[str, list[dict[str, object]]] = {}
    for array, count in arrays.items():
        body[array] = []
        for i in range(count):
            blob = orjson.dumps({"external_id": f"u{len(items)}", "secret_value": "PAYLOAD"})
            items.append(Item(seq=len(items), key=f"row{len(items)}", user=f"u{len(items)}",
                              array=array, blob=blob))
            positions.append((array, i))
            body[array].append(orjson.loads(blob))
    return Request("/users/track", "users_track", orjson.dumps(body), tuple(items),
                   tuple(positions))


REQUEST = make_request(attributes=2, events=3, purchases=1)
VALID_DATA = b"Valid data must be provided in the 'attributes', 'events', or 'purchases' fields."

# (case id, status, body, exception, expected kind) — the whole policy at a glance.
TABLE: list[tuple[str, int | None, bytes | None, Exception | None, str]] = [
    ("200", 200, b'{"message":"success"}', None, "ok"),
    ("201", 201, b'{"message":"success","attributes_processed":2}', None, "ok"),
    ("201 with item errors", 201,
     b'{"message":"success","errors":[{"type":"x","input_array":"events","index":0}]}',
     None, "ok"),
    ("202 merge", 202, b'{"message":"success"}', None, "ok"),
    ("204 no body", 204, None, None, "ok"),
    # a 2xx that is not the service's JSON object came from something in front of it
    ("201 unparsable body", 201, b"<html>", None, "in_doubt"),
    ("200 HTML page", 200, b"<html><body>maintenance</body></html>", None, "in_doubt"),
    ("200 empty body", 200, b"", None, "in_doubt"),
    ("201 JSON, not an object", 201, b'["success"]', None, "in_doubt"),
    ("201 JSON cut short", 201, b'{"message":"succ', None, "in_doubt"),
    ("400 bad json", 400, b'{"message":"Error while parsing request body"}', None, "failed"),
    ("400 all invalid", 400, b'{"message":"' + VALID_DATA + b'","errors":[]}', None, "failed"),
    ("401", 401, b'{"message":"Invalid API Key"}', None, "fatal"),
    ("403", 403, b"{}", None, "fatal"),
    ("404", 404, None, None, "failed"),
    ("405", 405, None, None, "failed"),
    ("409", 409, None, None, "failed"),
    ("413", 413, b"Request Entity Too Large", None, "failed"),
    ("415", 415, None, None, "failed"),
    ("422", 422, None, None, "failed"),
    ("302 redirect", 302, None, None, "failed"),
    ("429", 429, b'{"message":"rate limited"}', None, "retry"),
    # a gateway answers 502, 503 or 504 after forwarding as readily as before: only the
    # service's own 503 proves the request was refused before processing
    ("502 gateway's HTML page", 502, b"<html>bad gateway</html>", None, "in_doubt"),
    ("502 JSON", 502, b'{"message":"Bad Gateway"}', None, "in_doubt"),
    ("502 no body", 502, None, None, "in_doubt"),
    ("503 the service's JSON", 503, b'{"message":"Service Unavailable"}', None, "retry"),
    ("503 gateway's HTML page", 503, b"<html>no healthy upstream</html>", None, "in_doubt"),
    ("503 plain text", 503, b"upstream connect error or disconnect/reset before headers",
     None, "in_doubt"),
    ("503 no body", 503, None, None, "in_doubt"),
    ("503 JSON without a message", 503, b"{}", None, "in_doubt"),
    ("429 gateway's HTML page", 429, b"<html>too many requests</html>", None, "retry"),
    ("408 no body", 408, b"", None, "retry"),
    ("500", 500, b'{"message":"oops"}', None, "in_doubt"),
    ("504", 504, None, None, "in_doubt"),
    ("520 unknown 5xx", 520, None, None, "in_doubt"),
    ("501", 501, None, None, "failed"),
    ("ConnectError", None, None, httpx.ConnectError("[Errno 111] refused"), "retry"),
    ("ConnectTimeout", None, None, httpx.ConnectTimeout("timed out"), "retry"),
    ("PoolTimeout", None, None, httpx.PoolTimeout("no connection"), "retry"),
    ("ProxyError", None, None, httpx.ProxyError("proxy down"), "retry"),
    ("WriteError", None, None, httpx.WriteError("broken pipe"), "retry"),
    ("WriteTimeout", None, None, httpx.WriteTimeout("timed out"), "retry"),
    ("ReadTimeout", None, None, httpx.ReadTimeout("timed out"), "in_doubt"),
    ("ReadError", None, None, httpx.ReadError("reset by peer"), "in_doubt"),
    ("reset after the body was written", None, None,
     httpx.ReadError("[Errno 104] Connection reset by peer"), "in_doubt"),
    ("RemoteProtocolError", None, None,
     httpx.RemoteProtocolError("Server disconnected without sending a response."), "in_doubt"),
    ("CloseError", None, None, httpx.CloseError("close failed"), "in_doubt"),
    ("DecodingError", None, None, httpx.DecodingError("bad gzip"), "in_doubt"),
    ("UnsupportedProtocol", None, None, httpx.UnsupportedProtocol("ftp://"), "fatal"),
    ("LocalProtocolError", None, None, httpx.LocalProtocolError("bad header"), "failed"),
    ("TooManyRedirects", None, None, httpx.TooManyRedirects("loop"), "failed"),
    ("not an HTTP error", None, None, RuntimeError("boom"), "in_doubt"),
]


@pytest.mark.parametrize(
    ("status", "body", "exc", "kind"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_classification_table(
    status: int | None, body: bytes | None, exc: Exception | None, kind: str
) -> None:
    outcome = classify(REQUEST, status, body, exc)
    assert outcome.kind == kind
    assert outcome.status == status
    assert outcome.reason
    assert "PAYLOAD" not in outcome.reason


def test_neither_status_nor_exception_is_a_bug() -> None:
    with pytest.raises(ValueError, match="status or an exception"):
        classify(REQUEST, None, None, None)


def test_item_errors_of_a_201_map_to_items_across_arrays() -> None:
    # attributes 0,1 → items 0,1; events 0..2 → items 2..4; purchases 0 → item 5
    body = orjson.dumps({"message": "success", "errors": [
        {"type": "'quantity' is not valid", "input_array": "purchases", "index": 0},
        {"type": "'external_id' is required", "input_array": "events", "index": 1},
        {"type": "provided external_id is blacklisted and disallowed",
         "input_array": "attributes", "index": 1},
    ]})
    outcome = classify(REQUEST, 201, body, None)
    assert outcome.kind == "ok"
    assert outcome.item_errors == {
        5: "'quantity' is not valid",
        3: "'external_id' is required",
        1: "provided external_id is blacklisted and disallowed",
    }
    assert outcome.unmapped_errors == ()
    assert "3 item errors" in outcome.reason
    assert outcome.reason_for(0) is None
    assert outcome.reason_for(3) == "'external_id' is required"


def test_errors_naming_no_item_are_kept_not_dropped() -> None:
    body = orjson.dumps({"message": "success", "errors": [
        {"type": "odd", "input_array": "events", "index": 99},
        {"type": "no position"},
    ]})
    outcome = classify(REQUEST, 201, body, None)
    assert outcome.kind == "ok"
    assert outcome.item_errors == {}
    assert outcome.unmapped_errors == ("odd (events[99])", "no position")


def test_two_errors_on_one_item_are_joined() -> None:
    body = orjson.dumps({"message": "success", "errors": [
        {"type": "a", "input_array": "events", "index": 0},
        {"type": "b", "input_array": "events", "index": 0},
    ]})
    assert classify(REQUEST, 201, body, None).item_errors == {2: "a; b"}


def test_a_400_listing_every_item_maps_each_and_fails_all() -> None:
    errors = [{"type": "'external_id', 'braze_id', 'user_alias', 'email' or 'phone' is required",
               "input_array": array, "index": index} for array, index in REQUEST.positions]
    body = orjson.dumps({"message": VALID_DATA.decode(), "errors": errors})
    outcome = classify(REQUEST, 400, body, None)
    assert outcome.kind == "failed"
    assert sorted(outcome.item_errors) == list(range(len(REQUEST.items)))
    assert outcome.reason.startswith("400 bad request: Valid data must be provided")
    assert all(outcome.reason_for(k) for k in range(len(REQUEST.items)))


def test_a_failed_request_gives_its_reason_to_items_not_listed() -> None:
    outcome = classify(REQUEST, 400, b'{"message":"Max Input Length Exceeded","errors":'
                       b'["Max Input Length Exceeded"]}', None)
    assert outcome.item_errors == {}
    assert outcome.reason_for(4) == "400 bad request: Max Input Length Exceeded"


def test_fatal_reasons_say_what_to_do_and_404_names_the_endpoint() -> None:
    assert "api_key_env" in classify(REQUEST, 401, None, None).reason
    assert "permission" in classify(REQUEST, 403, None, None).reason
    assert "/users/track" in classify(REQUEST, 404, None, None).reason
    assert "split the batch" in classify(REQUEST, 413, None, None).reason


def test_a_local_protocol_error_never_repeats_the_header_value() -> None:
    exc = httpx.LocalProtocolError("Illegal header value b'Bearer sk-SECRET\\n'")
    outcome = classify(REQUEST, None, None, exc)
    assert "sk-SECRET" not in outcome.reason
    assert outcome.reason.startswith("LocalProtocolError")


def test_long_service_messages_are_cut() -> None:
    outcome = classify(REQUEST, 400, orjson.dumps({"message": "x" * 5000}), None)
    assert len(outcome.reason) < 300


def test_outcomes_compare_by_value() -> None:
    assert classify(REQUEST, 429, None, None) == Outcome("retry", "429 rate limited", 429)


@given(status=st.integers(500, 599), body=st.one_of(st.none(), st.binary(max_size=64)))
def test_no_5xx_is_retried_as_not_processed_but_the_services_own_503(
    status: int, body: bytes | None
) -> None:
    """Under `in_doubt: skip` a `retry` is sent again: a 5xx is one only when the service
    itself said it refused the request (its 503 JSON with a message); any other 5xx may have
    come from a gateway after it forwarded the request."""
    outcome = classify(REQUEST, status, body, None)
    if outcome.kind == "retry":
        assert status == 503
        data = orjson.loads(body or b"null")
        assert isinstance(data, dict) and isinstance(data.get("message"), str)
    assert outcome.kind in {"retry", "in_doubt", "failed"}


@given(status=st.integers(100, 599), body=st.one_of(st.none(), st.binary(max_size=64)))
def test_every_status_gets_exactly_one_known_kind(status: int, body: bytes | None) -> None:
    outcome = classify(REQUEST, status, body, None)
    assert outcome.kind in {"ok", "retry", "in_doubt", "failed", "fatal"}
    success = 200 <= status < 300
    try:
        answered = isinstance(orjson.loads(body or b""), dict)
    except orjson.JSONDecodeError:
        answered = status == 204 and not body
    assert (outcome.kind == "ok") == (success and answered)
    if success and not answered:  # not the service's answer: processed or not, unknown
        assert outcome.kind == "in_doubt"


def test_an_html_error_page_is_named_as_not_the_services_answer() -> None:
    page = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
    outcome = classify(REQUEST, 502, page, None)
    assert outcome.kind == "in_doubt"
    assert outcome.reason == ("502 bad gateway (may have been processed) (an HTML page, not "
                              "the service's JSON: a proxy or gateway in front of it)")
    assert "nginx" not in outcome.reason  # the page itself is never repeated
