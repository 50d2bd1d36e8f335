#!/usr/bin/env bash
# Sparse rows upstream of relays (issue 22, docs/sparse.md "Relays"): a coordinator, two
# `starling-relay --sparse-rows` and clients with --sparse-rows whose data fall in two
# communities of features: relay-0 serves community 0 (client-0, later client-1 too),
# relay-1 community 1 (clients 2 and 3). Each relay offers its coordinator the union of
# its clients' rows and trains upstream only those. When client-1 joins relay-0 with rows
# outside that union it waits; relay-0's next update flushes its uplink memory (density
# 1), it joins the coordinator again offering the larger union, and client-1 trains.
# When client-1 is SIGKILLed the union shrinks the same way. The same federation with
# relays that train the whole model (no --sparse-rows) is the baseline: relay <->
# coordinator bytes per round and the test accuracy are compared. Last, with
# server.placement-drift, clients start mixed (a client of each community on each relay):
# the coordinator places them itself from the rows the relays report (METIS), the relays
# redirect, and each relay's rows shrink to its community's.
# Usage: relay_sparse_test.sh COORDINATOR_BIN CLIENT_BIN RELAY_BIN
set -u
coord_bin=$1
client_bin=$2
relay_bin=$3
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"

"$coord_bin" init --out "$work/certs" --clients 4 --relays 2 >/dev/null || exit 1
for i in 0 1 2 3; do community_libsvm $((80 + i)) 300 $((i / 2)) >"$work/client-$i.libsvm"; done
{ community_libsvm 90 200 0; community_libsvm 91 200 1 | sed 's/ 4096:0//'; } >"$work/test.libsvm"
# A round's training takes milliseconds here: --slowdown paces the rounds so that the
# joins and the leave happen mid-run.
tau=${STARLING_RELAY_SPARSE_TAU:-300}
slowdown=${STARLING_RELAY_SPARSE_SLOWDOWN:-200}

declare -a relay_pid relay_port listen_port
start_relay() {  # RUN R [--sparse-rows]
  local run=$1 r=$2
  shift 2
  "$relay_bin" --coordinator "127.0.0.1:$coord_port" --listen "127.0.0.1:${listen_port[$r]:-0}" --certs "$work/certs" \
    --id "relay-$r" \
    --db "$work/$run-relay-$r.db" --clients-per-round 1 --min-clients 1 --deadline-ms 8000 "$@" \
    >"$work/$run-relay-$r.log" 2>&1 &
  relay_pid[$r]=$!
  pids+=("${relay_pid[$r]}")
  wait_for "$work/$run-relay-$r.log" "listening on" 20 || return 1
  relay_port[$r]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$run-relay-$r.log" | tail -n 1)
}
start_sparse_client() {  # RUN I R [R2]: client-I trains with relay R (then R2, if given)
  local servers="127.0.0.1:${relay_port[$3]}"
  [ -n "${4:-}" ] && servers="$servers,127.0.0.1:${relay_port[$4]}"
  "$client_bin" --coordinator "$servers" --certs "$work/certs" --id "client-$2" \
    --data "$work/client-$2.libsvm" --task binary --sparse-rows 1 --seed "$2" --slowdown "$slowdown" \
    >"$work/$1-client-$2.log" 2>&1 &
  client_pid[$2]=$!
  pids+=("${client_pid[$2]}")
}
coordinator() {  # RUN ROUNDS [ARGS...]
  local run=$1 rounds=$2
  shift 2
  launch_coordinator "$run-coord" --task binary --model linear --test-data "$work/test.libsvm" --clients-per-round 2 \
    --min-clients 2 --rounds "$rounds" --tau "$tau" --lr 0.5 --deadline-ms 8000 --db "$work/$run-coord.db" "$@" ||
    return 1
  coord_port=$port
}
# Mean bytes a committed round moved between the coordinator and its relays (both ways)
# over rounds FROM..TO, and the last round's test accuracy.
sql() {  # DB QUERY: the first column of the first row
  python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$1" "$2"
}
bytes_per_round() {  # DB FROM TO
  sql "$1" "select cast(avg(bytes_up_wire + bytes_down_wire) as integer) from rounds
            where status = 'committed' and round between $2 and $3"
}
accuracy() {  # DB
  sql "$1" "select test_accuracy from rounds where status = 'committed' order by round desc limit 1"
}

# ---- sparse relays --------------------------------------------------------------------
coordinator sparse 60 || exit 1
start_relay sparse 0 --sparse-rows || exit 1
start_relay sparse 1 --sparse-rows || exit 1
start_sparse_client sparse 0 0
start_sparse_client sparse 2 1
start_sparse_client sparse 3 1
check "relay-0 offers its coordinator the rows of its client" \
  wait_for "$work/sparse-relay-0.log" "offering the coordinator the [0-9]* rows this relay's clients train" 60
check "the coordinator trains relay-0's rows only" \
  wait_for "$work/sparse-coord.log" "relay-0 trains the compact model of [0-9]* rows" 30
check "and relay-1's (both of its clients')" \
  wait_for "$work/sparse-coord.log" "relay-1 trains the compact model of [0-9]* rows" 30
first=$(sed -n "s/.*relay-0 trains the compact model of \([0-9]*\) rows.*/\1/p" "$work/sparse-coord.log" | head -n 1)
check "round 8 commits" wait_for "$work/sparse-coord.log" "round   8 committed" 60

start_sparse_client sparse 1 0
check "client-1, with rows relay-0 does not train upstream, waits" \
  wait_for "$work/sparse-relay-0.log" "client-1 waits until this relay's coordinator takes its rows" 30
check "relay-0's next update flushes its uplink memory" \
  wait_for "$work/sparse-relay-0.log" "the clients' rows changed ($first rows -> [0-9]* rows)" 60
check "relay-0 joins again, and client-1 trains" \
  wait_for "$work/sparse-relay-0.log" "client-1 joins the rounds: this relay's coordinator takes its rows now" 60
second=$(sed -n "s/.*relay-0 trains the compact model of \([0-9]*\) rows.*/\1/p" "$work/sparse-coord.log" | tail -n 1)
check "with more rows than before ($first -> $second)" test "$second" -gt "$first"
applied() {  # DB CLIENT: updates of CLIENT the relay applied
  sql "$1" "select count(*) from participants where client_id = '$2' and outcome in ('accepted', 'late-applied')"
}
for _ in $(seq 100); do [ "$(applied "$work/sparse-relay-0.db" client-1)" -ge 2 ] && break; sleep 0.1; done
check "client-1's updates are applied" test "$(applied "$work/sparse-relay-0.db" client-1)" -ge 2
mid=$(sql "$work/sparse-coord.db" "select max(round) from rounds where status = 'committed'")
kill -9 "${client_pid[1]}"
wait "${client_pid[1]}" 2>/dev/null
check "when client-1 dies relay-0's rows shrink again" \
  wait_for "$work/sparse-relay-0.log" "the clients' rows changed ($second rows -> $first rows)" 60
wait "$coord_pid"
check "the task completes" test $? -eq 0
for i in 0 2 3; do wait "${client_pid[$i]}"; done
check "60 rounds are committed, none lost to the joins" test "$(committed "$work/sparse-coord.db")" -eq 60
check "the coordinator keeps relay-0's row set" \
  test "$(sql "$work/sparse-coord.db" "select coalesce(length(row_set), 0) from clients where id = 'relay-0'")" -gt 0

# ---- the same with relays that train the whole model ------------------------------------
coordinator dense 20 || exit 1
start_relay dense 0 || exit 1
start_relay dense 1 || exit 1
for i in 0 1 2 3; do start_sparse_client dense "$i" $((i / 2)); done
wait "$coord_pid"
check "the baseline completes" test $? -eq 0
for i in 0 1 2 3; do wait "${client_pid[$i]}"; done
sparse_bytes=$(bytes_per_round "$work/sparse-coord.db" 4 "$mid")
dense_bytes=$(bytes_per_round "$work/dense-coord.db" 4 20)
echo "relay <-> coordinator bytes a round: sparse relays $sparse_bytes, whole-model relays $dense_bytes"
check "sparse relays move under half the bytes of whole-model relays" test $((2 * sparse_bytes)) -lt "$dense_bytes"
sparse_acc=$(accuracy "$work/sparse-coord.db")
dense_acc=$(accuracy "$work/dense-coord.db")
echo "test accuracy: sparse relays $sparse_acc (60 rounds), whole-model relays $dense_acc (20 rounds)"
check "accuracy is that of whole-model relays (within 0.05)" \
  python3 -c "import sys; sys.exit(not $sparse_acc >= $dense_acc - 0.05)"

# ---- placement recomputed on drift --------------------------------------------------------
# Fixed ports: the relays advertise them to the coordinator, which sends clients there.
read -r -a listen_port < <(python3 -c "
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(('127.0.0.1', 0))
print(*(x.getsockname()[1] for x in s))")
coordinator drift 40 --placement-drift 0.2 || exit 1
start_relay drift 0 --sparse-rows || exit 1
start_relay drift 1 --sparse-rows || exit 1
start_sparse_client drift 0 0 1
start_sparse_client drift 2 0 1
start_sparse_client drift 1 1 0
start_sparse_client drift 3 1 0
check "the coordinator places the relays' clients itself" \
  wait_for "$work/drift-coord.log" "placement version [0-9]* recomputed on drift: [0-9]* clients on 2 relays" 60
check "the relays redirect the clients placed elsewhere" wait_for "$work/drift-relay-0.log" "redirected" 30
wait "$coord_pid"
check "the task completes" test $? -eq 0
for i in 0 1 2 3; do wait "${client_pid[$i]}"; done
check "40 rounds are committed" test "$(committed "$work/drift-coord.db")" -eq 40
check "the placement is recorded with its partition time and the traffic it saves" \
  test "$(sql "$work/drift-coord.db" "select count(*) from placements where source = 'drift' and partition_s >= 0
                                        and rows_after < rows_before")" -ge 1
mixed=$(sed -n "s/.*relay-0 trains the compact model of \([0-9]*\) rows.*/\1/p" "$work/drift-coord.log" | sort -n | tail -n 1)
placed=$(sed -n "s/.*relay-0 trains the compact model of \([0-9]*\) rows.*/\1/p" "$work/drift-coord.log" | tail -n 1)
check "relay-0's rows shrink to its community's ($mixed -> $placed)" test "$placed" -lt "$mixed"
sql "$work/drift-coord.db" "select value from meta where key = 'placement'" >"$work/drift-placement.txt"
check "each community trains on one relay" \
  bash -c "awk '/^client/ { r[\$2] = \$3 } END { exit !(r[\"client-0\"] == r[\"client-1\"] &&
    r[\"client-2\"] == r[\"client-3\"] && r[\"client-0\"] != r[\"client-2\"]) }' '$work/drift-placement.txt'"
finish
