#!/usr/bin/env bash
# The served demo under a 1-minute cron: the 8 demo deployments served by deployments/serve.py
# (its default run limit) for MINUTES minutes against a Prefect server and a sandbox of their own
# (free loopback ports, a temporary PREFECT_HOME), sampling every 10 s how many flow runs are
# Running and how many crashed or failed; then Ctrl-C (SIGINT) to serve, and what it left: runs
# by state, deployments paused, tracebacks in serve's output.
#   bash benchmarks/serve_soak.sh [MINUTES]      (default 5)
set -u
cd "$(dirname "$0")/.."
export PATH=$PWD/.venv/bin:$PATH
MINUTES=${1:-5}
W=$(mktemp -d)
free_port() { python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
API_PORT=$(free_port); SANDBOX_PORT=$(free_port)
export PREFECT_HOME=$W/home PREFECT_API_URL=http://127.0.0.1:$API_PORT/api
export PREFECT_SERVER_ANALYTICS_ENABLED=false DO_NOT_TRACK=1
mkdir -p "$PREFECT_HOME"
prefect server start --host 127.0.0.1 --port "$API_PORT" > "$W/server.log" 2>&1 &
SERVER=$!
until curl -fs "$PREFECT_API_URL/health" >/dev/null; do sleep 1; done
engage-sync demo --workdir "$W/demo" > "$W/demo.log" 2>&1 || { echo "demo failed: $W/demo.log"; exit 1; }
engage-sync sandbox --port "$SANDBOX_PORT" --seed config/sandbox-seed.yaml > "$W/sandbox.log" 2>&1 &
SANDBOX=$!
export ENGAGE_API_KEY=sandbox-demo-key ENGAGE_DEMO_DIR=$W/demo
export ENGAGE_BASE_URL=http://127.0.0.1:$SANDBOX_PORT ENGAGE_SYNC_STATE_URL=sqlite:///$W/state.db
python deployments/serve.py config/demo --cron "* * * * *" > "$W/serve.log" 2>&1 &
SERVE=$!
count() {  # flow runs in the given states
  curl -s -X POST "$PREFECT_API_URL/flow_runs/count" -H 'content-type: application/json' \
    -d "{\"flow_runs\":{\"state\":{\"type\":{\"any_\":[$1]}}}}"
}
most=0
for _ in $(seq $((MINUTES * 6))); do
  running=$(count '"RUNNING"'); most=$((running > most ? running : most))
  echo "$(date +%T) running=$running crashed_or_failed=$(count '"CRASHED","FAILED"') completed=$(count '"COMPLETED"')"
  sleep 10
done
kill -INT "$SERVE"; wait "$SERVE"; echo "serve exited $? after SIGINT; at most $most running in the samples"
echo "tracebacks in serve's output: $(grep -c Traceback "$W/serve.log")"
for state in RUNNING PENDING CANCELLED CRASHED FAILED COMPLETED SCHEDULED; do
  echo "$state $(count "\"$state\"")"
done
curl -s -X POST "$PREFECT_API_URL/deployments/filter" -H 'content-type: application/json' -d '{}' |
  python -c 'import json, sys; d = json.load(sys.stdin); print("deployments", len(d), "paused", sum(bool(x.get("paused")) for x in d))'
kill "$SANDBOX" "$SERVER"; wait
echo "logs: $W"
