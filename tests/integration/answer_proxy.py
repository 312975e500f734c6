"""A loopback proxy between the pipeline and the sandbox that spoils chosen answers.

Request n (1-based, counted per path) of `path` is treated as `script[n]` says; every other
request is forwarded and its answer passed on whole, on a keep-alive connection:

- ``not_json``: forwarded (the sandbox processes it), then answered 200 with an HTML page;
- ``html_502``: not forwarded (nothing processed), answered 502 with a gateway's HTML page;
- ``forwarded_502``: forwarded (the sandbox processes it), then answered 502 with a gateway's
  HTML page, as a gateway does when the service's answer reaches it broken or late;
- ``busy_503``: not forwarded, answered 503 with the service's own JSON (`message`);
- ``retry_later``: not forwarded, answered 503 with the service's own JSON and
  `Retry-After: 30`;
- ``cut``: forwarded, then the sandbox's answer sent with its Content-Length but only half its
  body, and the connection closed;
- ``stall``: forwarded, then the status line, headers and half the body sent, and nothing
  more until the client hangs up.

Listens on 127.0.0.1 only. Plain sockets, one thread per connection; HTTP/1.1 with a
Content-Length body, which is all the pipeline sends.
"""

from __future__ import annotations

import socket
import socketserver
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

import httpx

HTML_502 = (b"<html><head><title>502 Bad Gateway</title></head><body><center>"
            b"<h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>")
HTML_200 = b"<html><body><h1>Scheduled maintenance</h1><p>Back soon.</p></body></html>"
UNAVAILABLE = b'{"message":"Service Unavailable"}'
_PASSED = ("content-type", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset",
           "retry-after")
_FORWARDED = ("authorization", "content-type", "user-agent", "x-braze-bulk")


def _head(status: int, reason: str, headers: dict[str, str], length: int,
          close: bool = False) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items()),
             f"content-length: {length}", f"connection: {'close' if close else 'keep-alive'}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _read_request(rfile: BinaryIO) -> tuple[str, str, dict[str, str], bytes] | None:
    line = rfile.readline()
    if not line.strip():
        return None
    method, path, _ = line.decode("latin-1").split(" ", 2)
    headers: dict[str, str] = {}
    while (header := rfile.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = header.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return method, path, headers, rfile.read(int(headers.get("content-length", "0")))


class AnswerProxy:
    """The proxy; `url` is what an integration file names as `service.base_url`."""

    def __init__(self, upstream: str, path: str, script: dict[int, str]) -> None:
        self.path, self.script = path, script
        self.upstream = httpx.Client(base_url=upstream, timeout=30)
        self.counts: Counter[str] = Counter()
        self.spoiled: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                proxy.serve(self.connection, self.rfile)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def _action(self, path: str) -> str:
        with self._lock:
            self.counts[path] += 1
            action = self.script.get(self.counts[path], "pass") if path == self.path else "pass"
            if action != "pass":
                self.spoiled.append((self.counts[path], action))
            return action

    def serve(self, conn: socket.socket, rfile: BinaryIO) -> None:
        """Requests of one connection until the client hangs up or an answer is spoiled."""
        while (request := _read_request(rfile)) is not None:
            method, path, headers, body = request
            action = self._action(path)
            if action == "html_502":
                conn.sendall(_head(502, "Bad Gateway", {"content-type": "text/html"},
                                   len(HTML_502), close=True) + HTML_502)
                return
            if action in ("retry_later", "busy_503"):
                wait = {"retry-after": "30"} if action == "retry_later" else {}
                conn.sendall(_head(503, "Service Unavailable", {
                    "content-type": "application/json", **wait}, len(UNAVAILABLE)) + UNAVAILABLE)
                continue
            answer = self.upstream.request(method, path, content=body, headers={
                k: v for k, v in headers.items() if k in _FORWARDED})
            passed = {k: v for k, v in answer.headers.items() if k in _PASSED}
            if action == "forwarded_502":
                conn.sendall(_head(502, "Bad Gateway", {"content-type": "text/html"},
                                   len(HTML_502), close=True) + HTML_502)
                return
            if action == "not_json":
                passed["content-type"] = "text/html"
                conn.sendall(_head(200, "OK", passed, len(HTML_200)) + HTML_200)
                continue
            head = _head(answer.status_code, answer.reason_phrase, passed, len(answer.content))
            if action == "pass":
                conn.sendall(head + answer.content)
                continue
            conn.sendall(head + answer.content[: len(answer.content) // 2])
            if action == "stall":
                conn.settimeout(120)
                try:
                    while conn.recv(4096):  # until the client gives up and closes
                        pass
                except OSError:
                    pass
            return  # cut (or stalled): the connection closes here

    @contextmanager
    def running(self) -> Iterator[AnswerProxy]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()
            self.upstream.close()
            thread.join(5)
