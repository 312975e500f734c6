"""A whole sync run's CPU through each transport, over TLS at the service's ceiling: the lean
HTTP/1.1 client (`deliver/lean_transport.py`) against httpx's own transport.

Per scheme (https, then http for comparison) it starts the lean sandbox on 127.0.0.1 (over TLS
with a self-signed certificate made by `openssl req -x509` in the work folder; with the
service's /users/track limit of 3,000 requests per 3 s unless --no-rate-limits), then runs
`engage-sync run FILE --no-prefect` on a DuckDB warehouse of N attribute rows (built once in
the work folder, then reused), each run its own
process with a fresh state database, alternating the two transports `--runs` times. The run's
process is a small runner (`--child`) that replaces `adapters.resources.http_transport` by one
that builds the transport asked for (httpx's as the wiring builds it for a proxied URL: one
connection per request in flight), then calls the CLI; TLS trusts the certificate through
SSL_CERT_FILE, as a user's own CA would be trusted. Round k of both transports starts at the
same phase of the sandbox's 3-s windows ((k + 0.5) / runs of a window), so both meet the limit
alike.

Reported per transport: the run process's CPU seconds (user + system, from `os.wait4`, its
imports and start included), its wall seconds and rows/s over that wall, the requests the
sandbox received; the medians over the runs; and the CPU the lean transport saves as a share of
the httpx run's CPU (median against median, and the median of each round's pair).

    .venv/bin/python benchmarks/transport_tls.py [--rows 200000] [--runs 3]
        [--schemes https,http] [--no-rate-limits] [--workdir DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from pipeline_throughput import (
    API_KEY,
    OBJECTS_PER_REQUEST,
    SEED,
    build_warehouse,
    free_port,
    stop,
    warehouse_rows,
    write_integration,
)

TRANSPORTS = ("lean", "httpx")
WINDOW = 3.0  # seconds of the sandbox's /users/track rate window


# --- the sandbox, over TLS or not (a child process) ---------------------------------------------

def serve_main(port: int, cert: str | None, key: str | None, rate_limits: bool) -> int:
    """Runs in the sandbox's process: the lean sandbox on 127.0.0.1:port, over TLS when given
    a certificate, until SIGTERM."""
    import uvicorn

    from engage_sandbox.state.settings import SandboxSettings
    from engage_sandbox.web.app import create_app
    from engage_sandbox.web.server import bind_loopback, serve_until_stopped

    app = create_app(SandboxSettings(seed=str(SEED), lean=True, rate_limiting=rate_limits))
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_keep_alive=30, ssl_certfile=cert, ssl_keyfile=key)
    serve_until_stopped(uvicorn.Server(config), bind_loopback(port))
    return 0


def make_certificate(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "sandbox-cert.pem", folder / "sandbox-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def start_sandbox(scheme: str, cert: Path, key: Path, rate_limits: bool, log: Path
                  ) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port)]
    if scheme == "https":
        cmd += ["--cert", str(cert), "--key", str(key)]
    if not rate_limits:
        cmd.append("--no-rate-limits")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
    base = f"{scheme}://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{base}/_sandbox/health", timeout=1, verify=str(cert)
                         ).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    stop(proc)
    raise SystemExit(f"sandbox did not start: {' '.join(cmd)}\n{log.read_text()[-2000:]}")


# --- one run (the run's process) ----------------------------------------------------------------

def child_main(transport: str, integration: str) -> int:
    """Runs in the run's process: `engage-sync run FILE --no-prefect` with the transport forced,
    then one JSON line naming the transports the run built."""
    from engage_sync.adapters import resources
    from engage_sync.cli.main import main as cli
    from engage_sync.deliver.lean_transport import LeanTransport

    built: list[str] = []

    def forced(integration: Any) -> httpx.BaseTransport:
        in_flight = integration.service.max_in_flight
        chosen: httpx.BaseTransport
        if transport == "lean":
            chosen = LeanTransport(max_idle=in_flight)
        else:
            chosen = httpx.HTTPTransport(limits=httpx.Limits(
                max_connections=in_flight, max_keepalive_connections=in_flight))
        built.append(type(chosen).__name__)
        return chosen

    resources.http_transport = forced
    code = cli(["run", integration, "--no-prefect"])
    print(json.dumps({"code": code, "built": built}), flush=True)
    return int(code)


def one_run(transport: str, integration: Path, base: str, cert: Path, workdir: Path,
            rows: int, phase: float | None) -> dict[str, Any]:
    httpx.post(f"{base}/_sandbox/reset", timeout=10, verify=str(cert)).raise_for_status()
    state = workdir / "state.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{state}{suffix}").unlink(missing_ok=True)
    env = {**os.environ, "ENGAGE_API_KEY": API_KEY, "SSL_CERT_FILE": str(cert),
           "ENGAGE_SYNC_STATE_URL": f"sqlite:///{state}"}
    env.pop("SSL_CERT_DIR", None)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        env.pop(name, None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", transport, str(integration)]
    if phase is not None:
        time.sleep((phase - time.time()) % WINDOW)
    log = workdir / f"run-{transport}.log"
    started = time.perf_counter()
    with log.open("wb") as stderr:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, env=env)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)  # the run process's own rusage
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"the {transport} run failed ({proc.returncode}):\n"
                         f"{log.read_text()[-3000:]}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    expected = "LeanTransport" if transport == "lean" else "HTTPTransport"
    assert result["built"] and set(result["built"]) == {expected}, result
    counters = httpx.get(f"{base}/_sandbox/counters", timeout=10, verify=str(cert)).json()
    processed = int(counters["attributes_processed"])
    if processed < rows:
        raise SystemExit(f"the {transport} run delivered {processed:,} of {rows:,} rows")
    return {"transport": transport, "wall_s": wall, "rows_per_s": rows / wall,
            "user_s": usage.ru_utime, "sys_s": usage.ru_stime,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "requests": int(counters["requests"].get("/users/track", 0))}


# --- the comparison -----------------------------------------------------------------------------

def compare(scheme: str, args: argparse.Namespace, integration_for: Any, cert: Path, key: Path,
            workdir: Path) -> dict[str, Any]:
    sandbox, base = start_sandbox(scheme, cert, key, not args.no_rate_limits,
                                  workdir / f"sandbox-{scheme}.log")
    integration = integration_for(base)
    runs: dict[str, list[dict[str, Any]]] = {t: [] for t in TRANSPORTS}
    try:
        for k in range(args.runs):
            phase = None if args.no_rate_limits else (k + 0.5) * WINDOW / args.runs
            order = TRANSPORTS if k % 2 == 0 else TRANSPORTS[::-1]
            for transport in order:
                r = one_run(transport, integration, base, cert, workdir, args.rows, phase)
                runs[transport].append(r)
                print(f"{scheme} run {k + 1} {transport:5}: cpu {r['cpu_s']:.2f} s "
                      f"(user {r['user_s']:.2f}, sys {r['sys_s']:.2f}), wall {r['wall_s']:.2f} s, "
                      f"{r['rows_per_s']:,.0f} rows/s, requests {r['requests']:,}; "
                      f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        stop(sandbox)
    summary: dict[str, Any] = {"scheme": scheme, "runs": runs}
    for transport, rs in runs.items():
        summary[transport] = {key: statistics.median(r[key] for r in rs)
                              for key in ("cpu_s", "user_s", "sys_s", "wall_s", "rows_per_s",
                                          "requests")}
    lean, own = summary["lean"]["cpu_s"], summary["httpx"]["cpu_s"]
    summary["saved_share"] = (own - lean) / own
    summary["saved_share_paired"] = statistics.median(
        (h["cpu_s"] - ln["cpu_s"]) / h["cpu_s"] for ln, h in zip(runs["lean"], runs["httpx"],
                                                                 strict=True))
    return summary


def main() -> int:
    if len(sys.argv) >= 3 and sys.argv[1] == "--serve":
        rest = sys.argv[3:]
        certfile = rest[rest.index("--cert") + 1] if "--cert" in rest else None
        keyfile = rest[rest.index("--key") + 1] if "--key" in rest else None
        return serve_main(int(sys.argv[2]), certfile, keyfile, "--no-rate-limits" not in rest)
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        return child_main(sys.argv[2], sys.argv[3])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--schemes", default="https,http")
    p.add_argument("--no-rate-limits", action="store_true",
                   help="the sandbox never answers 429 (the client keeps its own budget)")
    p.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "engage-bench-tls"))
    p.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = p.parse_args()

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cert, key = make_certificate(workdir)
    warehouse = workdir / f"warehouse-{args.rows}.duckdb"
    if warehouse_rows(warehouse) != args.rows:
        build_warehouse(warehouse, args.rows)
    limits = "off" if args.no_rate_limits else "3,000 requests per 3 s"
    print(f"{args.rows:,} attribute rows, {args.runs} alternating runs a transport, "
          f"rate limit {limits}; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}; minimum requests "
          f"{math.ceil(args.rows / OBJECTS_PER_REQUEST):,}", flush=True)

    def integration_for(base: str) -> Path:
        return write_integration(workdir, warehouse, base, "")

    summaries = [compare(scheme, args, integration_for, cert, key, workdir)
                 for scheme in args.schemes.split(",")]
    print(f"\nmedians of {args.runs} (the run's process: CPU = user + system)")
    print(f"{'scheme':6} {'transport':9} {'CPU s':>7} {'user s':>7} {'sys s':>6} {'wall s':>7} "
          f"{'rows/s':>8} {'requests':>8}")
    for s in summaries:
        for transport in TRANSPORTS:
            m = s[transport]
            print(f"{s['scheme']:6} {transport:9} {m['cpu_s']:7.2f} {m['user_s']:7.2f} "
                  f"{m['sys_s']:6.2f} {m['wall_s']:7.2f} {m['rows_per_s']:8,.0f} "
                  f"{m['requests']:8,.0f}")
        print(f"{s['scheme']:6} lean saves {100 * s['saved_share']:.1f} % of the httpx run's "
              f"CPU (median of the paired rounds: {100 * s['saved_share_paired']:.1f} %)")
    if args.json:
        print(json.dumps(summaries, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
