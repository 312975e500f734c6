"""The lean transport beside httpx's own on the edge cases httpx's transport handles: chunked
answers, early closes, informational answers, keep-alive expiry and TLS, each against a real
server on loopback. Every case runs through both ways into the lean transport and through
`httpx.HTTPTransport`, and must end the same way on all three: the same answer, or errors that
`classify` reads as the same kind ("retry": not sent; "in_doubt": may have been processed)."""

from __future__ import annotations

import select
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from engage_sync.deliver.classify import classify
from engage_sync.deliver.lean_transport import IDLE_SECONDS, LeanTransport
from engage_sync.pack.request import Request

TIMEOUT = {"connect": 2.0, "read": 1.0, "write": 2.0, "pool": 2.0}
HEADERS = {"Authorization": "Bearer k", "Content-Type": "application/json"}
BODY = b'{"attributes":[]}'
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
WAYS = ("lean-handle_request", "lean-prepare-post", "httpx")


class Server:
    """A loopback server: each connection on its own thread, handed to `handle(server, conn,
    number)`; over TLS when given a context (the handshake on the connection's thread)."""

    def __init__(self, handle: Callable[[Server, socket.socket, int], None],
                 tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.handle, self.tls = handle, tls
        self.connections = 0
        self.requests: list[bytes] = []
        self.handshake_errors: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, scheme: str = "http", host: str = "127.0.0.1") -> str:
        return f"{scheme}://{host}:{self.port}/users/track"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            number, self.connections = self.connections, self.connections + 1
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                self.handshake_errors.append(str(exc))
                conn.close()
                return
        try:
            self.handle(self, conn, number)
        except OSError:
            pass
        finally:
            conn.close()

    def read_request(self, conn: socket.socket) -> bytes:
        """One whole request (head and Content-Length body), kept; b"" at the end of stream."""
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
        self.requests.append(head + b"\r\n\r\n" + body)
        return self.requests[-1]


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(handle: Callable[[Server, socket.socket, int], None],
              tls: ssl.SSLContext | None = None) -> Server:
        servers.append(Server(handle, tls))
        return servers[-1]
    yield start
    for server in servers:
        server.sock.close()


class Client:
    """One transport, posted to one of three ways: the lean transport's `handle_request` (as any
    httpx transport), its `prepare` / `post` (as the Deliverer sends), or httpx's own transport
    (the reference). `post` returns (status, body) or raises the transport's error."""

    def __init__(self, way: str, verify: ssl.SSLContext | None = None) -> None:
        self.way = way
        self.transport: httpx.BaseTransport = (
            httpx.HTTPTransport(verify=verify if verify is not None else True)
            if way == "httpx" else LeanTransport(ssl_context=verify))

    def post(self, url: str, body: bytes = BODY) -> tuple[int, bytes]:
        if self.way == "lean-prepare-post":
            assert isinstance(self.transport, LeanTransport)
            answer = self.transport.post(self.transport.prepare(url, HEADERS), body, TIMEOUT)
            return answer.status_code, answer.content
        response = self.transport.handle_request(httpx.Request(
            "POST", url, content=body, headers=HEADERS, extensions={"timeout": TIMEOUT}))
        try:
            response.read()
        finally:
            response.close()
        return response.status_code, response.content

    def close(self) -> None:
        self.transport.close()


@pytest.fixture(params=WAYS)
def client(request: pytest.FixtureRequest) -> Iterator[Callable[..., Client]]:
    """Each case holds for the lean transport's two ways in and for httpx's own transport."""
    made: list[Client] = []

    def make(verify: ssl.SSLContext | None = None) -> Client:
        made.append(Client(request.param, verify))
        return made[-1]
    yield make
    for c in made:
        c.close()


REQUEST = Request("/users/track", "track", b"{}", (), ())


def outcome_of(exc: BaseException) -> str:
    assert isinstance(exc, Exception)
    return classify(REQUEST, None, None, exc).kind


def answering(*answers: bytes, pause: float = 0.0, close_after: int | None = None
              ) -> Callable[[Server, socket.socket, int], None]:
    """Every request answered by `answers` written in turn (`pause` seconds apart), the
    connection closed after `close_after` requests."""
    def handle(server: Server, conn: socket.socket, _number: int) -> None:
        served = 0
        while server.read_request(conn):
            for k, part in enumerate(answers):
                if k and pause:
                    time.sleep(pause)
                conn.sendall(part)
            served += 1
            if close_after is not None and served >= close_after:
                return
    return handle


# --- chunked answers ----------------------------------------------------------------------------

CHUNKED = (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n"
           b"Content-Type: application/json\r\n\r\n",
           b"b;name=value\r\n{\"message\":\r\n",
           b"d\r\n\"success\",\"n\"\r\n4\r\n:42}\r\n",
           b"0\r\nX-Trailer: t\r\n\r\n")


def test_a_chunked_answer_sent_piece_by_piece_is_read_whole_and_the_connection_reused(
        serve, client) -> None:
    """Chunk extensions and a trailer, each piece on its own write, the next request on the
    same connection."""
    server = serve(answering(*CHUNKED, pause=0.05))
    c = client()
    assert [c.post(server.url()) for _ in range(2)] == [
        (201, b'{"message":"success","n":42}')] * 2
    assert server.connections == 1 and len(server.requests) == 2


@pytest.mark.parametrize("cut", [
    pytest.param(CHUNKED[0], id="after-the-head"),
    pytest.param(CHUNKED[0] + CHUNKED[1][:8], id="in-a-chunk"),
    pytest.param(CHUNKED[0] + CHUNKED[1] + CHUNKED[2], id="before-the-last-chunk"),
])
def test_a_chunked_answer_cut_by_the_close_is_in_doubt(serve, client, cut: bytes) -> None:
    server = serve(answering(cut, close_after=1))
    with pytest.raises(httpx.TransportError) as info:
        client().post(server.url())
    assert outcome_of(info.value) == "in_doubt"
    assert len(server.requests) == 1


# --- early closes -------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [
    pytest.param(b"", id="before-answering"),
    pytest.param(b"HTTP/1.1 201 Created\r\nContent-Length: 21\r\n\r\n", id="after-the-head"),
    pytest.param(b"HTTP/1.1 201 Created\r\nContent-Length: 21\r\n\r\n{\"mess", id="mid-body"),
    pytest.param(b"HTTP/1.1 201 Created\r\nContent-Le", id="mid-head"),
])
def test_a_close_after_the_request_was_read_is_in_doubt(serve, client, answer: bytes) -> None:
    server = serve(answering(answer, close_after=1))
    with pytest.raises(httpx.TransportError) as info:
        client().post(server.url())
    assert isinstance(info.value, httpx.RemoteProtocolError | httpx.ReadError)
    assert outcome_of(info.value) == "in_doubt"
    assert server.requests[0].endswith(BODY)


def _second_request_closed(unread: bool) -> Callable[[Server, socket.socket, int], None]:
    """The first request answered; the second one, on the kept-alive connection, closed
    without an answer: after reading it, or (`unread`) as soon as it arrives, unread (the
    kernel answers the unread bytes with a reset), as a server closing an idle connection at
    the moment a request reaches it does."""
    def handle(server: Server, conn: socket.socket, number: int) -> None:
        if number > 0:  # a request the client sent again on a new connection: answered
            answering(OK)(server, conn, number)
            return
        server.read_request(conn)
        conn.sendall(OK)
        if unread:
            select.select([conn], [], [], 5)
            return
        server.read_request(conn)
    return handle


@pytest.mark.parametrize("unread", [False, True], ids=["read-then-closed", "closed-unread"])
def test_a_kept_alive_connection_closed_before_answering_is_in_doubt_as_with_httpx(
        serve, client, unread: bool) -> None:
    """Sent on a connection that was alive when taken from the pool: the client cannot tell a
    server that processed it from one that did not, so it is in doubt, never silently sent
    again; the next request goes out on a new connection."""
    server = serve(_second_request_closed(unread))
    c = client()
    assert c.post(server.url()) == (200, b"{}")
    with pytest.raises(httpx.TransportError) as info:
        c.post(server.url())
    assert outcome_of(info.value) == "in_doubt"
    assert c.post(server.url()) == (200, b"{}")
    assert server.connections == 2


# --- informational answers ----------------------------------------------------------------------

def test_a_100_continue_and_early_hints_are_passed_over_for_the_final_answer(
        serve, client) -> None:
    """A 100 Continue nobody asked for (no Expect is sent), a 102 and a 103 before the final
    answer, on separate writes; the next request on the connection gets its own answer."""
    server = serve(answering(b"HTTP/1.1 100 Continue\r\n\r\n",
                             b"HTTP/1.1 102 Processing\r\n\r\n",
                             b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n",
                             b"HTTP/1.1 201 Created\r\nContent-Length: 7\r\n\r\n\"final\"",
                             pause=0.05))
    c = client()
    assert [c.post(server.url()) for _ in range(2)] == [(201, b'"final"')] * 2
    assert server.connections == 1


def test_a_switch_of_protocols_nobody_asked_for_is_in_doubt(serve, client) -> None:
    server = serve(answering(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                             b"Connection: upgrade\r\n\r\n"))
    with pytest.raises(httpx.RemoteProtocolError) as info:
        client().post(server.url())
    assert outcome_of(info.value) == "in_doubt"


# --- keep-alive expiry --------------------------------------------------------------------------

def _idle_timeout(seconds: float, after: int = 2
                  ) -> Callable[[Server, socket.socket, int], None]:
    """Answers every request; once a connection has served `after` requests, closes it when
    left idle for `seconds` (as a server's keep-alive timeout does), without a word. (Not
    before: requests in quick succession then share a connection however slow the machine.)"""
    def handle(server: Server, conn: socket.socket, _number: int) -> None:
        served = 0
        while True:
            wait = seconds if served >= after else None
            pending = isinstance(conn, ssl.SSLSocket) and conn.pending()
            if not pending and not select.select([conn], [], [], wait)[0]:
                return  # idle too long: closed
            if not server.read_request(conn):
                return
            conn.sendall(OK)
            served += 1
    return handle


def test_a_keep_alive_the_server_expired_is_replaced_and_no_request_is_lost(
        serve, client) -> None:
    """The server's keep-alive timeout (0.3 s) is shorter than the pause between requests
    (0.8 s, within the lean transport's own limit on an idle connection's age): each request
    after a pause goes out on a new connection and is answered, and the server receives every
    request once; requests in quick succession share a connection."""
    assert IDLE_SECONDS > 0.8  # so the lean transport finds the server's close itself
    server = serve(_idle_timeout(0.3))
    c = client()
    statuses = []
    for _ in range(3):
        statuses += [c.post(server.url())[0] for _ in range(2)]
        time.sleep(0.8)  # the server closes the idle connection meanwhile
    assert statuses == [200] * 6
    assert len(server.requests) == 6 and server.connections == 3


# --- TLS ----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (only: not for `localhost`)."""
    where = tmp_path_factory.mktemp("tls-edges")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls(certificate: tuple[Path, Path]) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*certificate)
    return context


@pytest.fixture
def trusted(certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The certificate trusted as a user's own CA is: through SSL_CERT_FILE."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    return certificate[0]


def test_over_tls_trusted_through_ssl_cert_file_chunked_answers_keep_alive_and_expiry(
        serve, client, tls: ssl.SSLContext, trusted: Path) -> None:
    """The default trust (no context given) reads SSL_CERT_FILE; chunked answers and 1xx over
    TLS; a connection the server expired is replaced without losing a request."""
    chunked = serve(answering(b"HTTP/1.1 100 Continue\r\n\r\n", *CHUNKED, pause=0.02), tls)
    expiring = serve(_idle_timeout(0.3, after=1), tls)
    c = client()
    assert [c.post(chunked.url("https")) for _ in range(2)] == [
        (201, b'{"message":"success","n":42}')] * 2
    assert chunked.connections == 1
    statuses = [c.post(expiring.url("https"))[0]]
    time.sleep(0.8)
    statuses.append(c.post(expiring.url("https"))[0])
    assert statuses == [200, 200]
    assert len(expiring.requests) == 2 and expiring.connections == 2


@pytest.mark.parametrize("answer", [
    pytest.param(b"", id="before-answering"),
    pytest.param(b"HTTP/1.1 201 Created\r\nContent-Length: 21\r\n\r\n{\"mess", id="mid-body"),
])
def test_over_tls_a_close_after_the_request_was_read_is_in_doubt(
        serve, client, tls: ssl.SSLContext, trusted: Path, answer: bytes) -> None:
    """The server drops the TCP connection without TLS's close_notify (a truncation)."""
    server = serve(answering(answer, close_after=1), tls)
    with pytest.raises(httpx.TransportError) as info:
        client().post(server.url("https"))
    assert outcome_of(info.value) == "in_doubt"
    assert server.requests[0].endswith(BODY)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"], ids=["untrusted", "other-name"])
def test_a_certificate_not_trusted_or_for_another_name_is_refused_before_sending(
        serve, client, tls: ssl.SSLContext, certificate: tuple[Path, Path],
        monkeypatch: pytest.MonkeyPatch, host: str) -> None:
    """Refused in the handshake, so nothing was sent ("retry"), with the reason in the error's
    text: a self-signed certificate the default trust does not hold, or a trusted one that
    does not name the host connected to."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    if host == "127.0.0.1":
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    else:
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    server = serve(answering(OK), tls)
    with pytest.raises(httpx.ConnectError) as info:
        client().post(server.url("https", host))
    assert outcome_of(info.value) == "retry"
    text = str(info.value)
    assert "CERTIFICATE_VERIFY_FAILED" in text
    assert ("self-signed certificate" if host == "127.0.0.1" else "localhost") in text
    assert server.requests == []
