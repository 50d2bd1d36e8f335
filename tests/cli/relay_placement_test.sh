#!/usr/bin/env bash
# A placement of clients on relays applied mid-run (issue 22, docs/placement.md
# "Applying a placement"): a coordinator, two starling-relay processes and four clients
# with --sparse-rows whose data fall in two communities of features (clients 0 and 1,
# clients 2 and 3). Every client starts on relay-0 (the first of its servers). Mid-run
# `starling-coordinator placement --db relay-0.db` (METIS over the row sets the clients
# offered) writes the coordinator's server.placement-file; the coordinator keeps it in
# its database and sends it to the relays, and relay-0 redirects one community to
# relay-1 at its next round. Then the coordinator is SIGKILLed and restarted (the
# placement comes back from its database), relay-0 is SIGKILLed (its clients move to
# relay-1, which sends them back once relay-0 is up again), and the task completes.
# Rounds are slowed (tau, --slowdown) so that each phase happens mid-run; sanitizer builds
# are slow already (STARLING_PLACEMENT_TAU, STARLING_PLACEMENT_SLOWDOWN).
# Usage: relay_placement_test.sh COORDINATOR_BIN CLIENT_BIN RELAY_BIN
set -u
coord_bin=$1
client_bin=$2
relay_bin=$3
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"

"$coord_bin" init --out "$work/certs" --clients 4 --relays 2 >/dev/null || exit 1

for i in 0 1 2 3; do community_libsvm $((60 + i)) 300 $((i / 2)) >"$work/client-$i.libsvm"; done
{ community_libsvm 70 200 0; community_libsvm 71 200 1 | sed 's/ 4096:0//'; } >"$work/test.libsvm"

declare -a relay_pid relay_port client_pid
# Fixed ports: a relay says its address to the coordinator before it serves, and a
# restarted relay-0 must be where its clients look for it.
read -r -a relay_port < <(python3 -c "
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(('127.0.0.1', 0))
print(*(x.getsockname()[1] for x in s))")
start_relay() {  # R
  local r=$1
  "$relay_bin" --coordinator "127.0.0.1:$coord_port" --listen "127.0.0.1:${relay_port[$r]:-0}" \
    --certs "$work/certs" --id "relay-$r" --db "$work/relay-$r.db" --clients-per-round 1 --min-clients 1 \
    --over-selection 2 --deadline-ms 4000 >>"$work/relay-$r.log" 2>&1 &
  relay_pid[$r]=$!
  pids+=("${relay_pid[$r]}")
  local before=${2:-0}
  for _ in $(seq 200); do
    [ "$(grep -c "listening on" "$work/relay-$r.log")" -gt "$before" ] && break
    sleep 0.1
  done
  relay_port[$r]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/relay-$r.log" | tail -n 1)
}
coordinator_args=(--task binary --model linear --test-data "$work/test.libsvm" --clients-per-round 1
  --over-selection 2 --min-clients 1 --rounds 100 --tau "${STARLING_PLACEMENT_TAU:-500}" --lr 0.5 --deadline-ms 4000
  --db "$work/coord.db"
  --placement-file "$work/placement.txt")
launch_coordinator coord "${coordinator_args[@]}" || exit 1
coord_port=$port
start_relay 0
start_relay 1
for i in 0 1 2 3; do
  "$client_bin" --coordinator "127.0.0.1:${relay_port[0]},127.0.0.1:${relay_port[1]}" --certs "$work/certs" \
    --id "client-$i" --data "$work/client-$i.libsvm" --task binary --sparse-rows 1 --seed "$i" --slowdown "${STARLING_PLACEMENT_SLOWDOWN:-40}" \
    >"$work/client-$i.log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
done
check "the coordinator commits rounds through relay-0" wait_for "$work/coord.log" "round   3 committed" 60
check "relay-0 keeps the 4 clients' row sets in its database" \
  test "$(python3 -c "import sqlite3; print(sqlite3.connect('$work/relay-0.db').execute('select count(*) from clients where row_set is not null').fetchone()[0])")" -eq 4

# ---- the placement, mid-run -------------------------------------------------------
"$coord_bin" placement --db "$work/relay-0.db" --relays 2 --out "$work/placement.next" >"$work/placement.log" 2>&1
check "METIS puts each community on its own relay" \
  bash -c "awk '/^client/ { r[\$2] = \$3 } END { exit !(r[\"client-0\"] == r[\"client-1\"] &&
    r[\"client-2\"] == r[\"client-3\"] && r[\"client-0\"] != r[\"client-2\"]) }' '$work/placement.next'"
mv "$work/placement.next" "$work/placement.txt"
check "the coordinator applies it, kept in its database" \
  wait_for "$work/coord.log" "placement version 1 from .*placement.txt: 4 clients on 2 relays" 30
check "relay-0 redirects the community placed on relay-1" wait_for "$work/relay-0.log" "redirected" 30
moved=$(awk '/^client/ && $3 == 1 { print $2 }' "$work/placement.txt" | head -n 1)
check "and $moved trains with relay-1" wait_for "$work/relay-1.log" "$moved joined from" 30

# ---- the coordinator SIGKILLed and restarted ---------------------------------------
kill -9 "$coord_pid"
wait "$coord_pid" 2>/dev/null
launch_coordinator coord "${coordinator_args[@]}" || exit 1
check "the restarted coordinator takes the placement from its database" \
  grep -q "placement version 1 from the database: 4 clients on relays" "$work/coord.log"
check "and does not apply the unchanged file again" \
  bash -c "test \$(grep -c 'placement version' '$work/coord.log') -eq 2"

# ---- relay-0 SIGKILLed: its clients go to relay-1, which sends them back ------------
kill -9 "${relay_pid[0]}"
wait "${relay_pid[0]}" 2>/dev/null
stayed=$(awk '/^client/ && $3 == 0 { print $2 }' "$work/placement.txt" | head -n 1)
check "$stayed, on relay-0, moves to relay-1 when relay-0 dies" wait_for "$work/relay-1.log" "$stayed joined from" 30
start_relay 0 1
check "relay-1 sends it back once relay-0 is up again" \
  wait_for "$work/relay-1.log" "$stayed is placed on the relay at 127.0.0.1:${relay_port[0]}" 60
wait "$coord_pid"
check "the task completes" test $? -eq 0
for i in 0 1 2 3; do wait "${client_pid[$i]}"; done
check "100 rounds are committed" test "$(committed "$work/coord.db")" -eq 100
finish
