"""HTTP/1.1 as the lean transport writes and reads it (`deliver.http11`): request heads that
cannot be split, answers parsed and framed, over a socket pair (no network)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from engage_sync.deliver.http11 import (
    Informational,
    ProtocolError,
    Wire,
    body_length,
    parse_head,
    request_head,
)


def test_a_request_head_is_the_line_then_the_headers_then_a_blank_line() -> None:
    head = request_head("POST", "/users/track?q=1", [(b"Host", b"h:1"),
                                                     (b"Content-Length", b"2")])
    assert head == b"POST /users/track?q=1 HTTP/1.1\r\nHost: h:1\r\nContent-Length: 2\r\n\r\n"


@pytest.mark.parametrize(("method", "target", "headers"), [
    ("POST", "/a", [(b"X-Key", b"s3cret\r\nX-Evil: 1")]),
    ("POST", "/a", [(b"X-Key", b"s3cret\nX-Evil: 1")]),
    ("POST", "/a", [(b"X-Key", b"s3cret\x00")]),
    ("POST", "/a", [(b"X Key", b"v")]),
    ("POST", "/a", [(b"X-Key:", b"v")]),
    ("POST", "/a b", []),
    ("POST", "/a\r\nX: 1", []),
    ("PO ST", "/a", []),
])
def test_anything_that_could_split_the_request_is_refused_without_its_value(
        method: str, target: str, headers: list[tuple[bytes, bytes]]) -> None:
    with pytest.raises(ValueError) as info:
        request_head(method, target, headers)
    assert "s3cret" not in str(info.value)


def test_a_head_gives_the_status_the_reason_and_every_header_in_order() -> None:
    http11, status, reason, headers = parse_head(
        b"HTTP/1.1 201 Created\r\nX-RateLimit-Remaining:  7 \r\nSet-Cookie: a\r\nSet-Cookie: b")
    assert (http11, status, reason) == (True, 201, "Created")
    assert headers == [(b"X-RateLimit-Remaining", b"7"), (b"Set-Cookie", b"a"),
                       (b"Set-Cookie", b"b")]
    assert parse_head(b"HTTP/1.0 200")[:3] == (False, 200, "")


@pytest.mark.parametrize("head", [
    b"garbage", b"HTTP/2 200 OK", b"HTTP/1.1 20 OK", b"HTTP/1.1 2x0 OK", b"ICY 200 OK",
    b"HTTP/1.1 200 OK\r\nno colon", b"HTTP/1.1 200 OK\r\nA: 1\r\n folded",
    b"HTTP/1.1 200 OK\r\nBad Name: 1",
])
def test_a_malformed_head_is_a_protocol_error(head: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_head(head)


@pytest.mark.parametrize(("values", "length"), [
    ([], None), ([b"0"], 0), ([b"12"], 12), ([b"5, 5"], 5), ([b"5", b"5"], 5)])
def test_a_content_length_is_one_number(values: list[bytes], length: int | None) -> None:
    assert body_length([(b"Content-Length", v) for v in values]) == length


@pytest.mark.parametrize("values", [
    [b"5", b"6"], [b"5, 6"], [b"-1"], [b"x"], [b""], [b"99999999999999999999999"],
    [str((1 << 30) + 1).encode()]])
def test_a_conflicting_or_absurd_length_is_a_protocol_error(values: list[bytes]) -> None:
    with pytest.raises(ProtocolError):
        body_length([(b"Content-Length", v) for v in values])


@pytest.fixture
def wire() -> Iterator[tuple[Wire, socket.socket]]:
    """A wire to read answers from and the peer that writes them."""
    ours, theirs = socket.socketpair()
    ours.settimeout(2)
    yield Wire(ours), theirs
    ours.close()
    theirs.close()


def _send(peer: socket.socket, data: bytes, byte_by_byte: bool = False) -> None:
    """Write `data` (one byte at a time: every boundary, the head's end, a chunk's size, its
    CRLF, falls between two reads); a peer closed under it ends it quietly."""
    pieces = [data[k:k + 1] for k in range(len(data))] if byte_by_byte else [data]
    try:
        for piece in pieces:
            peer.sendall(piece)
    except OSError:
        return


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_answers_are_framed_by_length_and_chunks_and_what_follows_is_kept(
        wire: tuple[Wire, socket.socket], byte_by_byte: bool) -> None:
    conn, peer = wire
    answers = (b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
               b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
               b"6;ext=1\r\n{\"a\":1\r\n1\r\n}\r\n0\r\nTrailer: x\r\n\r\n"
               b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    sender = threading.Thread(target=_send, args=(peer, answers, byte_by_byte))
    sender.start()
    first, second, third = conn.answer(), conn.answer(), conn.answer()
    sender.join()
    assert (first.status, first.body, first.reusable) == (201, b"{}", True)
    assert (second.status, second.reason, second.body) == (400, "Bad", b'{"a":1}')
    assert second.reusable and not conn.leftover
    assert (third.status, third.body, third.reusable) == (204, b"", True)


@pytest.mark.parametrize(("answer", "body"), [
    (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", b"{}"),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", b"{}"),
    (b"HTTP/1.1 200 OK\r\n\r\n{\"whole\":true}", b'{"whole":true}'),  # read to the close
])
def test_an_answer_that_asks_to_close_is_http_1_0_or_has_no_length_is_not_reused(
        wire: tuple[Wire, socket.socket], answer: bytes, body: bytes) -> None:
    conn, peer = wire
    peer.sendall(answer)
    peer.shutdown(socket.SHUT_WR)
    got = conn.answer()
    assert (got.body, got.reusable) == (body, False)


def test_informational_answers_are_passed_over_but_a_switch_of_protocols_is_named(
        wire: tuple[Wire, socket.socket]) -> None:
    conn, peer = wire
    peer.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 102 Processing\r\n"
                 b"\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"
                 b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n")
    assert (conn.answer().status, conn.leftover) == (201, True)
    with pytest.raises(Informational) as info:
        conn.answer()
    assert info.value.status == 101 and isinstance(info.value, ProtocolError)


@pytest.mark.parametrize("answer", [
    b"", b"HTTP/1.1 200 OK\r\nContent-Le", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{}",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
])
def test_an_answer_cut_by_the_close_or_malformed_is_a_protocol_error(
        wire: tuple[Wire, socket.socket], answer: bytes) -> None:
    conn, peer = wire
    peer.sendall(answer)
    peer.shutdown(socket.SHUT_WR)
    with pytest.raises(ProtocolError):
        conn.answer()


def test_a_head_that_never_ends_is_refused_before_it_fills_the_memory(
        wire: tuple[Wire, socket.socket]) -> None:
    conn, peer = wire
    sender = threading.Thread(target=_send, args=(
        peer, b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 200_000))
    sender.start()
    with pytest.raises(ProtocolError, match="head is too long"):
        conn.answer()
    peer.close()
    sender.join()


def test_no_answer_in_time_is_the_sockets_timeout(wire: tuple[Wire, socket.socket]) -> None:
    conn, _peer = wire
    conn.sock.settimeout(0.05)
    with pytest.raises(TimeoutError):
        conn.answer()
