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
# relay-0 dies only once both relays are back with the restarted coordinator, which
# then knows relay-0's address: a client placed on a relay that is down must still be
# taken by the other relay.
# Rounds are slowed (tau, --slowdown) so that each phase happens mid-run; sanitizer builds
# are slow already (STARLING_PLACEMENT_TAU, STARLING_PLACEMENT_SLOWDOWN).
# Every wait is bounded, and an expectation the later phases depend on stops the test at
# once with the logs (require): the whole test stays within STARLING_PLACEMENT_BUDGET
# seconds (default 270, under meson's 300).
# Usage: relay_placement_test.sh COORDINATOR_BIN CLIENT_BIN RELAY_BIN
set -u
coord_bin=$1
client_bin=$2
relay_bin=$3
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"
budget=${STARLING_PLACEMENT_BUDGET:-270}

wait_after() {  # FILE LINES PATTERN SECONDS: PATTERN in FILE past its first LINES lines
  for _ in $(seq $(($4 * 10))); do
    tail -n +$(($2 + 1)) "$1" 2>/dev/null | grep -q "$3" && return 0
    sleep 0.1
  done
  return 1
}

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
require "the coordinator commits rounds through relay-0" wait_for "$work/coord.log" "round   3 committed" 60
require "relay-0 keeps the 4 clients' row sets in its database" \
  test "$(python3 -c "import sqlite3; print(sqlite3.connect('$work/relay-0.db').execute('select count(*) from clients where row_set is not null').fetchone()[0])")" -eq 4

# ---- the placement, mid-run -------------------------------------------------------
"$coord_bin" placement --db "$work/relay-0.db" --relays 2 --out "$work/placement.next" >"$work/placement.log" 2>&1
require "METIS puts each community on its own relay" \
  bash -c "awk '/^client/ { r[\$2] = \$3 } END { exit !(r[\"client-0\"] == r[\"client-1\"] &&
    r[\"client-2\"] == r[\"client-3\"] && r[\"client-0\"] != r[\"client-2\"]) }' '$work/placement.next'"
mv "$work/placement.next" "$work/placement.txt"
require "the coordinator applies it, kept in its database" \
  wait_for "$work/coord.log" "placement version 1 from .*placement.txt: 4 clients on 2 relays" 30
require "relay-0 redirects the community placed on relay-1" wait_for "$work/relay-0.log" "redirected" 30
moved=$(awk '/^client/ && $3 == 1 { print $2 }' "$work/placement.txt" | head -n 1)
require "and $moved trains with relay-1" wait_for "$work/relay-1.log" "$moved joined from" 30

# ---- the coordinator SIGKILLed and restarted ---------------------------------------
kill -9 "$coord_pid"
wait "$coord_pid" 2>/dev/null
mark=$(wc -l <"$work/coord.log")
launch_coordinator coord "${coordinator_args[@]}" || exit 1
require "the restarted coordinator takes the placement from its database" \
  grep -q "placement version 1 from the database: 4 clients on relays" "$work/coord.log"
check "and does not apply the unchanged file again" \
  bash -c "test \$(grep -c 'placement version' '$work/coord.log') -eq 2"
# Both relays back with the coordinator (which knows where relay-0 is again) before
# relay-0 dies: its clients must still be able to train with relay-1.
relays_rejoined() {
  wait_after "$work/coord.log" "$mark" "relay-0 (a relay) joined" 60 &&
    wait_after "$work/coord.log" "$mark" "relay-1 (a relay) joined" 60
}
require "both relays rejoin the restarted coordinator" relays_rejoined

# ---- relay-0 SIGKILLed: its clients go to relay-1, which sends them back ------------
# (The lines of relay-1's log before each step are skipped: relay-0 comes back on the
# same port, so a redirect there before it died reads the same.)
mark=$(wc -l <"$work/relay-1.log")
kill -9 "${relay_pid[0]}"
wait "${relay_pid[0]}" 2>/dev/null
stayed=$(awk '/^client/ && $3 == 0 { print $2 }' "$work/placement.txt" | head -n 1)
require "$stayed, on relay-0, moves to relay-1 when relay-0 dies" \
  wait_after "$work/relay-1.log" "$mark" "$stayed joined from" 30
mark=$(wc -l <"$work/relay-1.log")
start_relay 0 1
require "relay-1 sends it back once relay-0 is up again" \
  wait_after "$work/relay-1.log" "$mark" "$stayed is placed on the relay at 127.0.0.1:${relay_port[0]}" 60
require "the task completes (the coordinator exits 0 within the test's $budget s)" \
  wait_exit "$coord_pid" $((budget > SECONDS + 10 ? budget - SECONDS : 10))
for i in 0 1 2 3; do check "client-$i exits 0" wait_exit "${client_pid[$i]}" 30; done
check "100 rounds are committed" test "$(committed "$work/coord.db")" -eq 100
finish
