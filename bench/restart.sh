#!/usr/bin/env bash
# bench/restart.sh: what a coordinator restart costs the clients' downlink, with the
# checkpoint's catch-up state (schema version 4) beside a checkpoint without it (what
# version 3 kept). Run: bench/restart.sh [BUILD_DIR] (default build-release; builds
# starling-coordinator and starling-client there first).
#
# Each run: certificates for 10 clients; the coordinator with
# examples/fashion-mnist/coordinator.toml, 16 rounds of 5 of the 10 clients, each
# client on its Dirichlet(0.5) shard of Fashion-MNIST; SIGKILL once round 8 is
# committed, then a restart on the same database (in the "without" run, its
# checkpoint_catch_up rows deleted first). Prints the downlink bytes of the rounds
# committed after the restart and how many assignments carried the dense model.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-release}
data=${DATA:-/usr/share/datasets/fashion-mnist}
ninja -C "$build" coordinator/starling-coordinator client/starling-client >/dev/null
coord_bin=$build/coordinator/starling-coordinator
client_bin=$build/client/starling-client
out=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$out"
}
trap cleanup EXIT

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_line FILE TEXT: until FILE has a line with TEXT (at most 5 minutes).
wait_line() {
  for _ in $(seq 3000); do
    grep -q "$2" "$1" && return 0
    sleep 0.1
  done
  echo "bench/restart.sh: no '$2' in $1 after 5 minutes:" >&2
  tail -n 20 "$1" >&2
  exit 1
}

run() {  # run NAME KEEP(1|0): writes "rounds bytes dense resumed-from" to $out/NAME.txt
  local work=$out/$1 port
  mkdir -p "$work"
  port=$(free_port)
  "$coord_bin" init --out "$work/certs" --clients 10 >/dev/null
  local args=(run --config examples/fashion-mnist/coordinator.toml --certs "$work/certs" --db "$work/s.db"
    --model-file "$work/model.bin" --listen "127.0.0.1:$port" --rounds 16 --clients-per-round 5 --test-data "$data")
  "$coord_bin" "${args[@]}" >>"$work/coordinator.log" 2>&1 &
  local coord=$!
  pids+=("$coord")
  wait_line "$work/coordinator.log" "listening on"
  local clients=()
  for i in $(seq 0 9); do
    "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$i" --data "$data" \
      --shard "$i/10" --partition dirichlet:0.5 --partition-seed 7 --seed "$i" >"$work/client-$i.log" 2>&1 &
    clients+=($!)
    pids+=($!)
  done
  wait_line "$work/coordinator.log" "round   8 committed"
  kill -9 "$coord"
  wait "$coord" 2>/dev/null || true
  if [ "$2" = 0 ]; then
    /usr/bin/python3 -c "import sqlite3; c = sqlite3.connect('$work/s.db'); c.execute('DELETE FROM checkpoint_catch_up'); c.commit()"
  fi
  "$coord_bin" "${args[@]}" >>"$work/coordinator.log" 2>&1
  for p in "${clients[@]}"; do wait "$p" || true; done
  local from
  from=$(sed -n 's/.*resumed from round \([0-9]*\).*/\1/p' "$work/coordinator.log" | head -n 1)
  /usr/bin/python3 -c "
import sqlite3
c = sqlite3.connect('$work/s.db')
d = 4 * 199210  # the dense MLP 784-200-200-10, fp32
rows = c.execute(\"SELECT round, bytes_down_wire FROM rounds WHERE status = 'committed' AND round > ?\", ($from,)).fetchall()
dense = c.execute(\"SELECT count(*) FROM participants WHERE round > ? AND bytes_down_wire >= ?\", ($from, d)).fetchone()[0]
print(len(rows), sum(b for _, b in rows), dense, $from)" >"$out/$1.txt"
}

run with 1
run without 0
read -r rounds_with bytes_with dense_with from_with <"$out/with.txt"
read -r rounds_without bytes_without dense_without from_without <"$out/without.txt"
printf '%-44s %8s %14s %16s\n' "checkpoint" "rounds" "downlink bytes" "dense downloads"
printf '%-44s %8s %14s %16s\n' "with the catch-up state (Starling)" "$rounds_with" "$bytes_with" "$dense_with"
printf '%-44s %8s %14s %16s\n' "without it (baseline: schema version 3)" "$rounds_without" "$bytes_without" "$dense_without"
echo "(rounds committed after the restart; resumed from rounds $from_with and $from_without)"
echo "summary: restart_down_bytes=$bytes_with restart_down_bytes_without_state=$bytes_without" \
  "ratio=$(/usr/bin/python3 -c "print(round($bytes_without / max(1, $bytes_with), 1))")"
