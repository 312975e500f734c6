"""``engage-sandbox``: serve the sandbox on 127.0.0.1.

Example: ``engage-sandbox --port 8787 --seed config/sandbox-seed.yaml [--lean]
[--limit-mode total75|per_array75|total50] [--faults faults.yaml] [--no-rate-limits]``.
Prints one line with the URL once the socket is bound, then serves until SIGINT (Ctrl-C) or
SIGTERM, and prints one line when it has stopped and freed its port (exit 0). A port already in
use, a bad seed or fault file: one line on standard error, exit 2, no traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import uvicorn
import yaml

from engage_sandbox.state.faults import FaultError, parse_rules
from engage_sandbox.state.seed import SeedError
from engage_sandbox.state.settings import (
    DEFAULT_RATE_LIMITS,
    LIMIT_MODES,
    MAX_BODY_BYTES,
    RateLimit,
    SandboxSettings,
)
from engage_sandbox.web.app import create_app
from engage_sandbox.web.server import (
    HOST,
    bind_loopback,
    bind_problem,
    serve_until_stopped,
    uvicorn_config,
)


def _rate_limit(text: str) -> tuple[str, RateLimit]:
    group, _, figures = text.partition("=")
    limit, _, window = figures.partition("/")
    if group not in DEFAULT_RATE_LIMITS or not limit.isdigit() or not window.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected GROUP=LIMIT/SECONDS with GROUP in {sorted(DEFAULT_RATE_LIMITS)}"
        )
    return group, RateLimit(int(limit), int(window))


def parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    p = argparse.ArgumentParser(
        prog="engage-sandbox", description="Local stand-in for the engagement service."
    )
    p.add_argument("--port", type=int, default=8787, help="port on 127.0.0.1 (0 = any free)")
    p.add_argument("--seed", help="seed YAML (default: the packaged demo seed)")
    p.add_argument("--lean", action="store_true", help="no profile store: count only")
    p.add_argument("--limit-mode", choices=LIMIT_MODES, default="total75")
    p.add_argument("--faults", help="YAML/JSON file with a list of fault rules")
    p.add_argument("--no-rate-limits", action="store_true", help="never answer 429")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES)
    p.add_argument(
        "--rate-limit", type=_rate_limit, action="append", default=[],
        metavar="GROUP=LIMIT/SECONDS", help="override one rate-limit group (repeatable)",
    )
    p.add_argument("--log-level", default="warning")
    return p


def _faults(path: str | None) -> list[dict[str, Any]]:
    if path is None:
        return []
    with open(path, encoding="utf-8") as handle:
        raw = yaml.safe_load(handle)
    if isinstance(raw, dict) and "faults" in raw:
        raw = raw["faults"]
    parse_rules(raw)  # fail early with a clear message
    return list(raw) if isinstance(raw, list) else [raw]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    try:
        return _serve(parser().parse_args(argv))
    except KeyboardInterrupt:  # Ctrl-C before the server's own handlers are installed
        print("engage-sandbox: interrupted before it served", file=sys.stderr)
        return 130


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = SandboxSettings(
            seed=args.seed,
            lean=args.lean,
            limit_mode=args.limit_mode,
            max_body_bytes=args.max_body_bytes,
            rate_limits=dict(args.rate_limit),
            rate_limiting=not args.no_rate_limits,
            faults=_faults(args.faults),
        )
        app = create_app(settings)
    except (SeedError, FaultError, OSError, ValueError, yaml.YAMLError) as exc:
        print(f"engage-sandbox: {exc}", file=sys.stderr)
        return 2
    try:
        sock = bind_loopback(args.port)
    except OSError as exc:
        print(f"engage-sandbox: {bind_problem(args.port, exc)}", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    url = f"http://{HOST}:{port}"
    mode = "lean" if args.lean else "full"
    print(f"engage-sandbox listening on {url} ({mode} mode, control plane {url}/_sandbox)",
          flush=True)
    stopped_by = serve_until_stopped(uvicorn.Server(uvicorn_config(app, args.log_level)), sock)
    if stopped_by is None:
        print("engage-sandbox: the server ended without being stopped", file=sys.stderr)
        return 1
    print(f"engage-sandbox: stopped by {stopped_by}; {HOST}:{port} is free", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
