"""The transport a run sends through: its proxy comes from the environment by the standard
library's rules (the Deliverer bypasses httpx's client, so the wiring must not lose the proxy)."""

from __future__ import annotations

import os
import socketserver
import threading

import httpx
import pytest

from engage_sync.adapters import resources
from engage_sync.config.integration import Integration
from engage_sync.deliver.proxies import proxy_for
from engage_sync.errors import ConfigError


def an_integration(base_url: str) -> Integration:
    return Integration.model_validate({
        "name": "t", "kind": "events", "warehouse": {"url": "duckdb:///:memory:"},
        "source": {"table": "T"}, "payload": {"identifier": "external_id"},
        "service": {"base_url": base_url}})


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
    # without a scheme, a proxy is http:// (curl, requests and httpx read it so)
    ("https://rest.example.com", {"HTTPS_PROXY": "proxy.corp:3128"}, "http://proxy.corp:3128"),
    ("https://rest.example.com", {"HTTPS_PROXY": "user:pw@proxy:3128"},
     "http://user:pw@proxy:3128"),
    # a lower-case variable wins over its upper-case twin, in whatever order they come
    ("https://rest.example.com", {"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://up:1"},
     "http://lower:1"),
    ("https://rest.example.com", {"HTTPS_PROXY": "http://up:1", "https_proxy": "http://lower:1"},
     "http://lower:1"),
    # a port in NO_PROXY must match (443 is https's own); without one, any port
    ("https://rest.example.com", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "rest.example.com:8443"},
     "http://p:1"),
    ("https://rest.example.com", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "rest.example.com:443"},
     None),
    # IPv6 in brackets, as in a URL, with or without its port
    ("http://[::1]:8080", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "[::1]"}, None),
    ("http://[::1]:8080", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "[::1]:8080"}, None),
    ("http://[::1]:8080", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "[::1]:9"}, "http://p:1"),
    # what the standard library does not read as a pattern, and so leaves to the proxy: a URL,
    # a bare IPv6 address, a `*.` wildcard (a domain alone covers its subdomains)
    ("https://rest.example.com", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "https://rest.example.com"},
     "http://p:1"),
    ("http://[::1]:8080", {"HTTP_PROXY": "http://p:1", "NO_PROXY": "::1"}, "http://p:1"),
    ("https://rest.example.com", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*.example.com"},
     "http://p:1"),
])
def test_the_proxy_is_the_one_the_environment_names_for_the_url(
        url: str, environ: dict[str, str], expected: str | None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.lower().endswith("_proxy")] + ["REQUEST_METHOD"]:
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert proxy_for(url) == expected


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
        integration = an_integration("http://service.invalid")
        with resources.http_transport(integration) as transport:
            response = transport.handle_request(httpx.Request(
                "POST", "http://service.invalid/users/track", content=b"{}"))
            response.read()
    assert response.status_code == 201
    assert seen == [b"POST http://service.invalid/users/track HTTP/1.1\r\n"]


def test_a_proxy_httpx_cannot_use_is_a_config_error_with_its_password_hidden(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "ftp://user:s3cret@proxy:1")
    for name in ("https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    integration = an_integration("https://rest.example.com")
    with pytest.raises(ConfigError) as info:
        resources.http_transport(integration)
    text = str(info.value)
    assert "HTTPS_PROXY" in text and "proxy:1" in text and "s3cret" not in text
    assert info.value.__cause__ is None and info.value.__suppress_context__
