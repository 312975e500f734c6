"""The transport a run sends through: its proxy comes from the environment, as an httpx.Client's
would (the Deliverer bypasses the client, so the wiring must not lose the proxy)."""

from __future__ import annotations

import socketserver
import threading

import httpx
import pytest

from engage_sync import wiring
from engage_sync.config import Integration
from engage_sync.wiring import proxy_for


@pytest.mark.parametrize(("url", "environ", "expected"), [
    ("https://rest.example.com", {}, None),
    ("https://rest.example.com", {"HTTPS_PROXY": "http://proxy:3128"}, "http://proxy:3128"),
    ("https://rest.example.com", {"https_proxy": "http://lower:3128"}, "http://lower:3128"),
    ("https://rest.example.com", {"HTTP_PROXY": "http://plain:3128"}, None),  # not for https
    ("http://127.0.0.1:9", {"HTTP_PROXY": "http://plain:3128"}, "http://plain:3128"),
    ("https://rest.example.com", {"ALL_PROXY": "http://all:3128"}, "http://all:3128"),
    ("https://rest.example.com",
     {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "example.com"}, None),
    ("https://rest.example.com",
     {"HTTPS_PROXY": "http://proxy:3128", "NO_PROXY": "other.org"}, "http://proxy:3128"),
    ("https://rest.example.com", {"HTTPS_PROXY": ""}, None),
    ("https://rest.example.com", {"HTTPS_PROXY": "http://p:1", "no_proxy": ".example.com"}, None),
    ("https://rest.example.com", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
    ("https://notexample.com", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"},
     "http://p:1"),
    ("http://127.0.0.1:8080", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "127.0.0.1:8080"}, None),
])
def test_the_proxy_is_the_one_the_environment_names_for_the_url(
        url: str, environ: dict[str, str], expected: str | None) -> None:
    assert proxy_for(url, environ) == expected


def test_a_run_sends_through_the_proxy_the_environment_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A loopback server stands in for the proxy: the run's POST reaches it, addressed to the
    service by its absolute URL, as a forward proxy receives it."""
    seen: list[bytes] = []

    class Proxy(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            seen.append(self.rfile.readline())
            while self.rfile.readline() not in (b"\r\n", b""):
                pass
            self.wfile.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}")

    with socketserver.TCPServer(("127.0.0.1", 0), Proxy) as server:
        threading.Thread(target=server.handle_request, daemon=True).start()
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
        for name in ("NO_PROXY", "no_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        integration = Integration.model_validate({
            "name": "t", "kind": "events", "warehouse": {"url": "duckdb:///:memory:"},
            "source": {"table": "T"}, "payload": {"identifier": "external_id"},
            "service": {"base_url": "http://service.invalid"}})
        with wiring.http_transport(integration) as transport:
            response = transport.handle_request(httpx.Request(
                "POST", "http://service.invalid/users/track", content=b"{}"))
            response.read()
    assert response.status_code == 201
    assert seen == [b"POST http://service.invalid/users/track HTTP/1.1\r\n"]
