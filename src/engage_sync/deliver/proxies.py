"""The proxy the environment names for the service's URL. Pure: the environment is passed in.

The rules are those an `httpx.Client` applies to its environment (the Deliverer sends through
a transport, not a client, so the wiring must apply them itself):
- `https_proxy` for an https URL, `http_proxy` for an http one, else `all_proxy`; a lower-case
  variable wins over its upper-case twin; an empty one counts as unset;
- a proxy given without a scheme (`proxy.corp:3128`) is `http://`;
- `no_proxy` is a comma-separated list: `*` (every host), a URL (its scheme, host and, if
  given, port must match), or a host, domain or IP address, optionally with a port (a
  domain covers its subdomains; a leading `.` or `*` changes nothing; without a port, any port).
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

_DEFAULT_PORTS = {"http": 80, "https": 443}


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """The proxy `environ` names for `url`, or None (none is set, or `no_proxy` covers it)."""
    target = httpx.URL(url)
    proxy = _variable(environ, target.scheme) or _variable(environ, "all")
    if not proxy or _bypassed(target, _variable(environ, "no")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _variable(environ: Mapping[str, str], name: str) -> str:
    return (environ.get(f"{name}_proxy") or environ.get(f"{name.upper()}_PROXY") or "").strip()


def _bypassed(target: httpx.URL, no_proxy: str) -> bool:
    port = target.port or _DEFAULT_PORTS.get(target.scheme)
    for entry in (raw.strip().lower() for raw in no_proxy.split(",")):
        if entry == "*":
            return True
        if not entry:
            continue
        if "://" in entry:
            given = httpx.URL(entry)
            scheme_ok, host, entry_port = given.scheme == target.scheme, given.host, given.port
        else:
            scheme_ok, (host, entry_port) = True, _host_and_port(entry)
        if scheme_ok and (entry_port is None or entry_port == port) and _covers(host,
                                                                                  target.host):
            return True
    return False


def _host_and_port(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]`, `[v6]:port` or a bare IPv6 address."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        return host, int(port) if port.isdigit() else None
    return entry, None


def _covers(pattern: str, host: str) -> bool:
    name = pattern.lstrip("*").lstrip(".")
    return bool(name) and (host == name or host.endswith("." + name))
