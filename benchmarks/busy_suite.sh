#!/usr/bin/env bash
# The README's test command from a fresh clone of HEAD while BURNERS CPU-bound processes run
# beside it (each a Python loop that never sleeps), ROUNDS times in a row; prints each round's
# pytest summary line and exit status, and the load average seen at the end of each round.
#   bash benchmarks/busy_suite.sh [BURNERS] [ROUNDS]      (default 2 2)
set -u
cd "$(dirname "$0")/.."
BURNERS=${1:-2}; ROUNDS=${2:-2}
W=$(mktemp -d)
git clone -q . "$W/engage-sync"
[ -d ../shared ] && ln -s "$(cd ../shared && pwd)" "$W/shared"
pids=()
for _ in $(seq "$BURNERS"); do python3 -c 'while True: pass' & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
status=0
for round in $(seq "$ROUNDS"); do
  start=$(date +%s)
  (cd "$W/engage-sync" && python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' \
     && .venv/bin/python -m pytest -n 2 --dist loadfile -q -p no:cacheprovider) > "$W/round$round.log" 2>&1
  rc=$?; [ $rc -ne 0 ] && status=$rc
  echo "round $round: exit $rc in $(( $(date +%s) - start )) s, load $(cut -d' ' -f1-3 /proc/loadavg):" \
       "$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$W/round$round.log" | tail -1)"
  grep -E '^FAILED|^ERROR' "$W/round$round.log" | head -20
done
echo "logs: $W"
exit $status
