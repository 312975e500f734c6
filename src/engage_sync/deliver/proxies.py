"""The proxy the environment names for the service's URL, by the standard library's rules.

The Deliverer sends through a transport, not an `httpx.Client`, so no client applies the
environment for it: the wiring asks here once per run. `urllib.request.getproxies_environment`
reads the variables (a lower-case variable wins over its upper-case twin; an empty one is
unset; HTTP_PROXY is ignored under CGI's REQUEST_METHOD) and `urllib.request.proxy_bypass`
matches `no_proxy` (the environment's, since it names a proxy): `*` alone, or host names and
domains (a leading `.` changes nothing; a domain covers its subdomains; `host:port` matches
that port only, a URL's default port included). The proxy is `https_proxy` for an https URL,
`http_proxy` for an http one, else `all_proxy`; one given without a scheme is `http://`, as
httpx, curl and requests read it.
"""

from __future__ import annotations

import urllib.request

import httpx

_DEFAULT_PORTS = {"http": 80, "https": 443}


def proxy_for(url: str) -> str | None:
    """The proxy the process environment names for `url`, or None (none is set, or
    `no_proxy` covers it)."""
    target = httpx.URL(url)
    proxies = urllib.request.getproxies_environment()
    proxy = (proxies.get(target.scheme) or proxies.get("all") or "").strip()
    host = f"[{target.host}]" if ":" in target.host else target.host
    port = target.port or _DEFAULT_PORTS.get(target.scheme)
    if not proxy or urllib.request.proxy_bypass(f"{host}:{port}"):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"
