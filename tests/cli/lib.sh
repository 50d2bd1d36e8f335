# Shared by the real-process tests in tests/cli (sourced, not run). The caller sets
# coord_bin, client_bin and data; this makes $work, kills every started process on
# exit, and provides:
#   check NAME COMMAND...       (check.sh) runs COMMAND, prints "ok   - NAME" or "FAIL - NAME"
#   launch_coordinator LOG ARGS...  `run --certs $work/certs --listen 127.0.0.1:${port:-0} ARGS`,
#                                    output to $work/LOG.log; waits for the port, sets coord_pid and port
#   start_client I LOG [ARGS...]  client-I on shard I/${shards:-3}, sets client_pid[I]
#   wait_for FILE PATTERN SECONDS  true once grep finds PATTERN in FILE
#   committed DB                prints the number of committed rounds in DB's report
#   integrity_ok DB             true when PRAGMA integrity_check says ok
#   finish                      prints the logs when a check failed; exits 0 or 1
# STARLING_KEEP_WORK=1 keeps $work (logs, databases) for a look afterwards.
if [ "${needs_fashion_mnist:-1}" = 1 ] && [ ! -f "$data/t10k-labels-idx1-ubyte.gz" ] && [ ! -f "$data/t10k-labels-idx1-ubyte" ]; then
  echo "skip: no Fashion-MNIST in $data (scripts/setup installs dataset-fashion-mnist)"
  exit 77
fi
work=$(mktemp -d)
pids=()
cleanup_hooks=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for h in "${cleanup_hooks[@]}"; do eval "$h"; done
  if [ -n "${STARLING_KEEP_WORK:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
declare -a client_pid

source "$(dirname "${BASH_SOURCE[0]}")/check.sh"

launch_coordinator() {
  local name=$1
  shift
  # The log may hold earlier runs: wait for one more "listening on" line than it has.
  local before
  before=$(grep -c "listening on" "$work/$name.log" 2>/dev/null)
  "$coord_bin" run --certs "$work/certs" --listen "127.0.0.1:${port:-0}" "$@" >>"$work/$name.log" 2>&1 &
  coord_pid=$!
  pids+=("$coord_pid")
  for _ in $(seq 400); do
    local p=""
    if [ "$(grep -c "listening on" "$work/$name.log" 2>/dev/null)" -gt "${before:-0}" ]; then
      p=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.log" | tail -n 1)
    fi
    if [ -n "$p" ]; then
      port=$p
      return 0
    fi
    kill -0 "$coord_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "coordinator did not start:"
  cat "$work/$name.log"
  return 1
}

start_client() {
  local i=$1 log=$2
  shift 2
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$i" --data "$data" \
    --shard "$i/${shards:-3}" --seed "$i" "$@" >>"$work/$log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
}

wait_for() {
  for _ in $(seq $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

committed() {
  "$coord_bin" report --db "$1" --format csv | grep -c ',committed,'
}

integrity_ok() {
  python3 -c "import sqlite3,sys; c=sqlite3.connect('file:$1?mode=ro', uri=True); sys.exit(0 if c.execute('pragma integrity_check').fetchone()[0]=='ok' else 1)"
}

finish() {
  if [ $failures -ne 0 ]; then
    for f in "$work"/*.log; do
      echo "--- $f"
      tail -n 30 "$f"
    done
  fi
  exit $((failures > 0))
}
