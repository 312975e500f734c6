"""The lean transport against real servers on loopback: answers read whole, connections kept
alive and dropped when the server closed them, and every failure raised as the httpx error
that `classify` reads as "not sent" or "in doubt" exactly as with httpx's own transport."""

from __future__ import annotations

import gzip
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from engage_sync.adapters import resources
from engage_sync.deliver.classify import classify
from engage_sync.deliver.deliverer import Deliverer
from engage_sync.deliver.lean_transport import LeanTransport
from engage_sync.deliver.ratelimit import RateBudgets
from engage_sync.pack.request import Request
from tests.integration.deliver.test_http_transport import an_integration
from tests.unit.deliver.test_deliver import make_request

TIMEOUT = {"connect": 2.0, "read": 0.5, "write": 2.0, "pool": 2.0}
Handler = Callable[[socket.socket, int], None]  # a connection, its number (from 0)


def _read_request(conn: socket.socket) -> bytes:
    """One whole request (head, then a Content-Length body), or b"" at end of stream."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


class Server:
    """A loopback TCP server handing each accepted connection to `handler` on its own thread."""

    def __init__(self, handler: Handler, wrap: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handler, self.wrap = handler, wrap
        self.connections = 0
        self.requests: list[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.wrap is not None:
                try:
                    conn = self.wrap.wrap_socket(conn, server_side=True)
                except (OSError, ssl.SSLError):
                    conn.close()
                    continue
            number, self.connections = self.connections, self.connections + 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        with conn:
            self.handler(conn, number)

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/users/track"


def answering(answer: bytes, close_after: int | None = None) -> Callable[[Server], Handler]:
    """A handler that answers every request with `answer` (closing after `close_after`)."""
    def make(server: Server) -> Handler:
        def handle(conn: socket.socket, _number: int) -> None:
            served = 0
            while request := _read_request(conn):
                server.requests.append(request)
                conn.sendall(answer)
                served += 1
                if close_after is not None and served >= close_after:
                    return
        return handle
    return make


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(make: Callable[[Server], Handler], wrap: ssl.SSLContext | None = None) -> Server:
        server = Server(lambda c, n: None, wrap)
        server.handler = make(server)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.sock.close()


HEADERS = {"Authorization": "Bearer k"}
Post = Callable[..., httpx.Response]


def _via_httpx(transport: LeanTransport, url: str, body: bytes = b'{"attributes":[]}',
               headers: dict[str, str] = HEADERS) -> httpx.Response:
    response = transport.handle_request(httpx.Request(
        "POST", url, content=body, headers=headers, extensions={"timeout": TIMEOUT}))
    response.read()
    response.close()
    return response


def _via_prepared(transport: LeanTransport, url: str, body: bytes = b'{"attributes":[]}',
                  headers: dict[str, str] = HEADERS) -> httpx.Response:
    """`prepare` then `post`, as the Deliverer sends; the answer as an httpx.Response for the
    same assertions."""
    answer = transport.post(transport.prepare(url, headers), body, TIMEOUT)
    decoded = {k: v for k, v in answer.headers.items() if k != "content-encoding"}
    return httpx.Response(answer.status_code, headers=decoded, content=answer.content)


@pytest.fixture(params=["handle_request", "prepare-post"])
def post(request: pytest.FixtureRequest) -> Post:
    """Each way into the transport: every test that posts holds for both."""
    return _via_httpx if request.param == "handle_request" else _via_prepared


REQUEST = Request("/users/track", "track", b"{}", (), ())


def outcome_of(exc: Exception) -> str:
    return classify(REQUEST, None, None, exc).kind


def test_a_request_is_written_as_given_and_the_answer_read_whole(serve, post: Post) -> None:
    answer = (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
              b"X-RateLimit-Remaining: 7\r\nContent-Length: 21\r\n\r\n{\"message\":\"success\"}")
    server = serve(answering(answer))
    with LeanTransport() as transport:
        response = post(transport, server.url() + "?q=1", b'{"a":1}')
    assert response.status_code == 201
    assert response.json() == {"message": "success"}
    assert response.headers["x-ratelimit-remaining"] == "7"
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /users/track?q=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}".encode() in lines
    assert b"Authorization: Bearer k" in lines and b"Content-Length: 7" in lines
    assert body == b'{"a":1}'


def test_connections_are_kept_alive_and_reused(serve, post: Post) -> None:
    server = serve(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    with LeanTransport() as transport:
        statuses = [post(transport, server.url()).status_code for _ in range(5)]
    assert statuses == [200] * 5
    assert server.connections == 1 and len(server.requests) == 5


def test_a_chunked_answer_is_read_whole_and_the_connection_reused(serve, post: Post) -> None:
    answer = (b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"6\r\n{\"a\":1\r\n1\r\n}\r\n0\r\n\r\n")
    server = serve(answering(answer))
    with LeanTransport() as transport:
        first, second = post(transport, server.url()), post(transport, server.url())
    assert first.status_code == second.status_code == 400
    assert first.json() == {"a": 1}
    assert server.connections == 1


def test_an_answer_that_closes_the_connection_is_not_reused(serve, post: Post) -> None:
    """Even when the server then keeps the connection open."""
    server = serve(answering(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n"
                             b"\r\n{}"))
    with LeanTransport() as transport:
        assert [post(transport, server.url()).status_code for _ in range(3)] == [200] * 3
    assert server.connections == 3


def test_a_keep_alive_the_server_closed_is_dropped_never_in_doubt(serve, post: Post) -> None:
    """The server closes each connection after one answer without saying so: the next request
    must go out on a new connection, not fail on the dead one."""
    server = serve(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", close_after=1))
    with LeanTransport() as transport:
        for _ in range(3):
            assert post(transport, server.url()).status_code == 200
            time.sleep(0.05)  # the server's close reaches us before the next request
    assert server.connections == 3


def test_a_refused_connection_is_not_sent(post: Post) -> None:
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    with LeanTransport() as transport, pytest.raises(httpx.ConnectError) as info:
        post(transport, f"http://127.0.0.1:{port}/users/track")
    assert outcome_of(info.value) == "retry"


def test_no_answer_in_time_is_a_read_timeout_in_doubt(serve, post: Post) -> None:
    stop = threading.Event()

    def make(server: Server) -> Handler:
        def handle(conn: socket.socket, _n: int) -> None:
            server.requests.append(_read_request(conn))
            stop.wait(5)
        return handle
    server = serve(make)
    with LeanTransport() as transport, pytest.raises(httpx.ReadTimeout) as info:
        post(transport, server.url())
    stop.set()
    assert outcome_of(info.value) == "in_doubt"
    assert server.requests and server.requests[0].endswith(b'{"attributes":[]}')


@pytest.mark.parametrize("answer", [
    b"", b"HTTP/1.1 201 Created\r\nContent-Length: 50\r\n\r\n{", b"garbage\r\n\r\n",
    b"HTTP/1.1 201 Created\r\nContent-Length: 99999999999999999999999\r\n\r\n{}"])
def test_a_closed_cut_or_malformed_answer_is_in_doubt(serve, answer: bytes, post: Post
                                                      ) -> None:
    def make(server: Server) -> Handler:
        def handle(conn: socket.socket, _n: int) -> None:
            server.requests.append(_read_request(conn))
            conn.sendall(answer)
        return handle
    server = serve(make)
    with LeanTransport() as transport, pytest.raises(httpx.TransportError) as info:
        post(transport, server.url())
    assert isinstance(info.value, httpx.RemoteProtocolError | httpx.ReadError)
    assert outcome_of(info.value) == "in_doubt"


def test_an_unsupported_scheme_is_refused_before_connecting(post: Post) -> None:
    with LeanTransport() as transport, pytest.raises(httpx.UnsupportedProtocol):
        post(transport, "ftp://127.0.0.1:9/users/track")


def test_a_header_http_client_refuses_names_no_value(serve, post: Post) -> None:
    server = serve(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    with LeanTransport() as transport, pytest.raises(httpx.LocalProtocolError) as info:
        post(transport, server.url(), b"{}", headers={"X-Key": "s3cret\nX-Evil: 1"})
    assert "s3cret" not in str(info.value)
    assert outcome_of(info.value) == "failed"
    assert server.connections == 0  # refused before connecting


def test_prepared_posts_write_the_bytes_handle_request_writes(serve) -> None:
    """The Deliverer's way (a head prepared once, then each body) and httpx's way put the same
    bytes on the wire, whatever the body, the headers or the query (an empty body, never sent
    by a run, only the same lines: httpx puts its Content-Length right after Host)."""
    server = serve(answering(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"))
    headers = {"Authorization": "Bearer k", "Content-Type": "application/json",
               "User-Agent": "engage-sync/0", "X-Braze-Bulk": "true"}
    url = server.url() + "?q=1"
    with LeanTransport() as transport:
        prepared = transport.prepare(url, headers)
        for body in (b'{"events":[]}', b"", "{\"é\":1}".encode() * 500):
            _via_httpx(transport, url, body, headers)
            answer = transport.post(prepared, body, TIMEOUT)
            assert answer == (201, {"content-length": "2"}, b"{}")
    sent = server.requests
    assert len(sent) == 6 and sent[0] == sent[1] and sent[4] == sent[5]
    assert sorted(sent[2].split(b"\r\n")) == sorted(sent[3].split(b"\r\n"))
    assert sent[3].endswith(b"\r\nContent-Length: 0\r\n\r\n")


def test_an_answers_repeated_headers_are_joined_as_httpx_joins_them(serve) -> None:
    server = serve(answering(b"HTTP/1.1 429 Too Many Requests\r\nX-RateLimit-Reset: 5\r\n"
                             b"Via: a\r\nvia: b\r\nContent-Length: 0\r\n\r\n"))
    with LeanTransport() as transport:
        answer = transport.post(transport.prepare(server.url(), HEADERS), b"{}", TIMEOUT)
        response = _via_httpx(transport, server.url())
    assert answer.headers == {"x-ratelimit-reset": "5", "via": "a, b", "content-length": "0"}
    assert {k: response.headers[k] for k in answer.headers} == answer.headers


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_https_is_verified(serve, certificate: tuple[Path, Path],
                           monkeypatch: pytest.MonkeyPatch, post: Post) -> None:
    """An answer over TLS with a certificate the client trusts; the same server is refused
    (not sent) by httpx's default trust, which does not hold it, and trusted by default once
    SSL_CERT_FILE names it, as httpx does."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = serve(answering(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}"), context)
    trusting = ssl.create_default_context(cafile=str(cert))
    with LeanTransport(ssl_context=trusting) as transport:
        assert [post(transport, server.url("https")).status_code for _ in range(2)] == [201] * 2
    assert server.connections == 1
    with LeanTransport() as transport, pytest.raises(httpx.ConnectError) as info:
        post(transport, server.url("https"))
    assert outcome_of(info.value) == "retry"
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with LeanTransport() as transport:
        assert post(transport, server.url("https")).status_code == 201


def test_the_wiring_sends_through_the_lean_transport_without_a_proxy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    transport = resources.http_transport(an_integration("http://127.0.0.1:9"))
    assert isinstance(transport, LeanTransport)
    transport.close()


def test_an_informational_answer_is_passed_over_for_the_final_one_behind_it(
        serve, post: Post) -> None:
    """A 103 Early Hints before the final answer (RFC 9110 lets a client skip 1xx): the
    request gets its own final answer, and the next request on the connection gets its own,
    never the one left behind."""
    def make(server: Server) -> Handler:
        def handle(conn: socket.socket, number: int) -> None:
            while request := _read_request(conn):
                server.requests.append(request)
                if len(server.requests) == 1:
                    conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n")
                    time.sleep(0.2)
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n\"first\"")
                else:
                    conn.sendall(b"HTTP/1.1 500 Oops\r\nContent-Length: 8\r\n\r\n\"second\"")
        return handle
    server = serve(make)
    with LeanTransport() as transport:
        first = post(transport, server.url())
        second = post(transport, server.url())
    assert first.status_code == 200 and first.json() == "first"
    assert second.status_code == 500 and second.json() == "second"
    assert server.connections == 1


def test_a_connection_idle_too_long_is_not_reused(serve, post: Post) -> None:
    """The server may be closing it right now: a request written then would be in doubt."""
    server = serve(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
    with LeanTransport(idle_seconds=0.1) as transport:
        post(transport, server.url())
        post(transport, server.url())  # at once: the same connection
        time.sleep(0.2)
        post(transport, server.url())  # idle too long: a new one
    assert len(server.requests) == 3 and server.connections == 2


def test_a_host_name_is_connected_to_as_its_ascii_form(
        monkeypatch: pytest.MonkeyPatch, post: Post) -> None:
    """The name the Host header carries (IDNA 2008), not Python's older encoding of it."""
    asked: list[tuple[str, int]] = []

    def refuse(address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        asked.append(address)
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with LeanTransport() as transport, pytest.raises(httpx.ConnectError):
        post(transport, "http://straße.de:8080/users/track")
    assert asked == [("xn--strae-oqa.de", 8080)]


def test_an_answer_before_the_body_was_read_is_the_answer(serve, post: Post) -> None:
    """A server that refuses a large body at once (413, closing without reading it): the
    write fails, and the answer it sent is returned, as httpx's own transport returns it."""
    def make(server: Server) -> Handler:
        def handle(conn: socket.socket, _n: int) -> None:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            server.requests.append(data)
            conn.sendall(b"HTTP/1.1 413 Payload Too Large\r\nConnection: close\r\n"
                         b"Content-Length: 2\r\n\r\n{}")
            time.sleep(0.3)  # then close, the body unread
        return handle
    server = serve(make)
    with LeanTransport() as transport:
        response = post(transport, server.url(), b"x" * (16 << 20))
    assert response.status_code == 413


def test_the_deliverer_builds_no_httpx_models_on_the_lean_transport(serve) -> None:
    """Its requests go through `prepare` / `post` (about 90 µs of CPU less a request), bulk
    or not, each endpoint's head prepared once; and the budget still reads the answer's
    rate-limit headers."""
    class NoModels(LeanTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            raise AssertionError("the Deliverer built httpx's request model")

    answer = (b"HTTP/1.1 201 Created\r\nX-RateLimit-Limit: 99\r\nContent-Length: 46\r\n\r\n"
              b'{"message":"success","attributes_processed":1}')
    server = serve(answering(answer))
    budgets = RateBudgets({"users_track": (100, 60.0)})
    with NoModels() as transport:
        deliverer = Deliverer(transport, "sk-test-0123456789", budgets,
                              base_url=f"http://127.0.0.1:{server.port}")
        outcomes = [deliverer.send(make_request(bulk=bulk)).outcome.kind
                    for bulk in (False, True, False)]
    assert outcomes == ["ok"] * 3
    assert [b"X-Braze-Bulk: true" in r for r in server.requests] == [False, True, False]
    assert budgets.budget(f"http://127.0.0.1:{server.port}", "users_track").limit == 99


def test_a_compressed_answer_is_decoded_as_httpx_decodes_it(serve, post: Post) -> None:
    """No Accept-Encoding is sent, so a server may compress: the Deliverer must still read the
    answer (a gzipped 201 read raw was a request in doubt); a body that does not decode is
    httpx's DecodingError both ways."""
    body = gzip.compress(b'{"message":"success"}')
    good = serve(answering(b"HTTP/1.1 201 Created\r\nContent-Encoding: gzip\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body)))
    bad = serve(answering(b"HTTP/1.1 201 Created\r\nContent-Encoding: gzip\r\n"
                          b"Content-Length: 5\r\n\r\nnot-z"))
    with LeanTransport() as transport:
        assert post(transport, good.url()).json() == {"message": "success"}
        with pytest.raises(httpx.DecodingError) as info:
            post(transport, bad.url())
    assert outcome_of(info.value) == "in_doubt"


def test_a_reset_after_the_request_was_written_is_in_doubt(serve, post: Post) -> None:
    """The server read the whole request, then reset the connection: it may have processed
    it, so it is a read error (in doubt), never a write error (not sent)."""
    def make(server: Server) -> Handler:
        def handle(conn: socket.socket, _n: int) -> None:
            server.requests.append(_read_request(conn))
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        return handle  # closed on return: with a zero linger, a reset
    server = serve(make)
    with LeanTransport() as transport, pytest.raises(httpx.TransportError) as info:
        post(transport, server.url())
    assert server.requests and server.requests[0].endswith(b'{"attributes":[]}')
    assert isinstance(info.value, httpx.ReadError | httpx.RemoteProtocolError)
    assert outcome_of(info.value) == "in_doubt"


def test_answer_headers_are_decoded_as_httpx_decodes_them(serve) -> None:
    server = serve(answering("HTTP/1.1 200 OK\r\nX-Note: café\r\nContent-Length: 0\r\n\r\n"
                             .encode()))
    with LeanTransport() as transport:
        answer = transport.post(transport.prepare(server.url(), HEADERS), b"{}", TIMEOUT)
        response = _via_httpx(transport, server.url())
    assert answer.headers["x-note"] == response.headers["x-note"] == "café"
