"""Sustained POST /users/track rate of the sandbox, measured with wrk (not our code).

Starts the sandbox as a child process (``python -m engage_sandbox.cli``) on 127.0.0.1 with
rate limiting disabled (``--no-rate-limits``: the real 3,000 per 3 s limit would otherwise
cap the figure at 1,000 req/s), then runs wrk several times with a Lua script that posts one
fixed 75-object body (25 attributes, 25 events, 25 purchases) with the demo key. Reports the
median requests per second for lean mode and for full mode, and fails (exit 1) if any
answer was not 201.

Usage: ``.venv/bin/python benchmarks/sandbox_track_rate.py [--runs 3] [--seconds 10]
[--connections 32] [--threads 1] [--modes lean,full]``. Needs ``wrk`` (Debian: apt-get
install -y wrk).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from engage_sandbox.state.settings import SandboxSettings
from engage_sandbox.web.server import run_sandbox

T = "2024-05-01T12:00:00Z"


def body_75() -> dict[str, Any]:
    """A valid 75-object /users/track body, about 11 KB."""
    return {
        "attributes": [
            {"external_id": f"user-{i}", "first_name": "Ada", "loyalty_points": i,
             "favorite_color": "teal", "vip": i % 2 == 0}
            for i in range(25)
        ],
        "events": [
            {"external_id": f"user-{i}", "name": "played_song", "time": T,
             "properties": {"song": "Blue in Green", "duration_s": 337.5, "genre": "jazz"}}
            for i in range(25)
        ],
        "purchases": [
            {"external_id": f"user-{i}", "product_id": "sku-42", "currency": "USD",
             "price": 9.99, "quantity": 1, "time": T}
            for i in range(25)
        ],
    }


def lua_script(api_key: str) -> str:
    """The wrk script: POST the body with JSON content type and the bearer key."""
    payload = json.dumps(body_75())
    return (
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'wrk.headers["Authorization"] = "Bearer {api_key}"\n'
        f"wrk.body = [==[{payload}]==]\n"
    )


def run_wrk(url: str, script: Path, seconds: int, connections: int, threads: int) -> float:
    """One wrk run; returns requests per second. Raises if any answer was not 2xx."""
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "-s", str(script),
           f"{url}/users/track"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw failures:\n{out}")
    match = re.search(r"Requests/sec:\s+([0-9.]+)", out)
    if match is None:
        raise RuntimeError(f"cannot read wrk output:\n{out}")
    return float(match[1])


def measure(lean: bool, args: argparse.Namespace, workdir: Path) -> list[float]:
    """Median-ready list of req/s of ``args.runs`` wrk runs against a fresh child sandbox."""
    settings = SandboxSettings(lean=lean, rate_limiting=False)
    with run_sandbox(settings=settings, in_process=False) as sandbox:
        script = workdir / "post75.lua"
        script.write_text(lua_script(sandbox.api_key), "utf-8")
        run_wrk(sandbox.base_url, script, 2, args.connections, args.threads)  # warm-up
        rates = []
        for _ in range(args.runs):
            sandbox.reset()
            rates.append(run_wrk(sandbox.base_url, script, args.seconds, args.connections,
                                 args.threads))
        return rates


def main() -> int:
    """Run the benchmark and print one line per mode."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--modes", default="lean,full")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install -y wrk", file=sys.stderr)
        return 2
    print(f"body: 75 objects, {len(json.dumps(body_75()))} bytes; wrk -t{args.threads} "
          f"-c{args.connections} -d{args.seconds}s x {args.runs} runs; rate limits off")
    with tempfile.TemporaryDirectory() as tmp:
        for mode in args.modes.split(","):
            rates = measure(mode == "lean", args, Path(tmp))
            print(f"{mode:5s} mode: median {statistics.median(rates):8.0f} req/s "
                  f"(runs: {', '.join(f'{r:.0f}' for r in rates)})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
