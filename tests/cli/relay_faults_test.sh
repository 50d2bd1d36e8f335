#!/usr/bin/env bash
# A relay killed with SIGKILL mid-task over mutual TLS: a coordinator, relays relay-0 and
# relay-1 with two starling-client processes each, every client given both relays
# (--coordinator A,B). relay-0 is killed after the coordinator's third round: its
# clients move to relay-1, the coordinator's rounds go on with relay-1 to the last one
# (every database passes integrity_check), relay-0 restarted on its database resumes
# from its last round and rejoins with two new clients, and every process exits 0.
# Usage: relay_faults_test.sh COORDINATOR_BIN CLIENT_BIN RELAY_BIN
set -u
coord_bin=$1
client_bin=$2
relay_bin=$3
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"
python=/usr/bin/python3

"$coord_bin" init --out "$work/certs" --clients 6 --relays 2 >/dev/null || exit 1
for i in 0 1 2 3 4 5; do regression_csv $((60 + i)) 400 >"$work/client-$i.csv"; done
regression_csv 70 1000 >"$work/test.csv"

# The coordinator assigns the idle relays (both, mostly) each round and closes it with
# the first update; the other's is applied late or counted a straggler. A relay whose
# local rounds cannot end by 90% of the coordinator's deadline (relay-0 restarted, its
# clients gone) says so, leaves and joins again.
launch_coordinator coord --task regression --model mlp:hidden:256-256 --test-data "$work/test.csv" --clients-per-round 1 \
  --over-selection 2 --min-clients 1 --rounds 14 --tau "${STARLING_RELAY_FAULT_TAU:-1000}" --lr 0.02 --batch-size 16 --deadline-ms 2000 \
  --db "$work/coord.db" || exit 1
coord_port=$port
declare -a relay_pid relay_port
start_relay() {  # start_relay R PORT
  "$relay_bin" --coordinator "127.0.0.1:$coord_port" --listen "127.0.0.1:$2" --certs "$work/certs" --id "relay-$1" \
    --db "$work/relay-$1.db" --clients-per-round 2 --min-clients 2 --over-selection 1 --local-rounds 1 \
    --deadline-ms 1500 >>"$work/relay-$1.log" 2>&1 &
  relay_pid[$1]=$!
  pids+=("${relay_pid[$1]}")
}
for r in 0 1; do start_relay "$r" 0; done
for r in 0 1; do
  wait_for "$work/relay-$r.log" "listening on" 20 || { echo "relay-$r did not start serving"; exit 1; }
  relay_port[$r]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/relay-$r.log" | head -n 1)
done
for i in 0 1 2 3; do
  r=$((i / 2))
  other=$((1 - r))
  "$client_bin" --coordinator "127.0.0.1:${relay_port[$r]},127.0.0.1:${relay_port[$other]}" --certs "$work/certs" \
    --id "client-$i" --data "$work/client-$i.csv" --task regression --seed "$i" >"$work/client-$i.log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
done

# relay-0 dies after the coordinator's third committed round.
for _ in $(seq 300); do
  [ "$(committed "$work/coord.db" 2>/dev/null)" -ge 3 ] 2>/dev/null && break
  sleep 0.1
done
kill -9 "${relay_pid[0]}"
wait "${relay_pid[0]}" 2>/dev/null
check "relay-0 was killed mid-task (3 of 14 rounds committed)" test "$(committed "$work/coord.db")" -lt 14
check "relay-0's clients move to relay-1" \
  bash -c "wait_for() { for _ in \$(seq 200); do grep -q \"\$2\" \"\$1\" && return 0; sleep 0.1; done; return 1; };
    wait_for '$work/relay-1.log' 'client-0 joined' && wait_for '$work/relay-1.log' 'client-1 joined'"
# relay-0 returns on its database and port, and two new clients join it (its first
# two stay with relay-1: a client moves only when its server fails).
sleep 1
start_relay 0 "${relay_port[0]}"
check "relay-0 restarted resumes from its database" wait_for "$work/relay-0.log" "resumed from round" 20
for i in 4 5; do
  "$client_bin" --coordinator "127.0.0.1:${relay_port[0]},127.0.0.1:${relay_port[1]}" --certs "$work/certs" \
    --id "client-$i" --data "$work/client-$i.csv" --task regression --seed "$i" >"$work/client-$i.log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
done

wait "$coord_pid"
check "the coordinator's task finishes" test $? -eq 0
check "all 14 global rounds are committed" test "$(committed "$work/coord.db")" -eq 14
for r in 0 1; do
  wait "${relay_pid[$r]}"
  check "relay-$r exits 0 when the task ends" test $? -eq 0
done
for i in 0 1 2 3 4 5; do
  wait "${client_pid[$i]}"
  check "client-$i exits 0 when the task ends" test $? -eq 0
done
for db in coord relay-0 relay-1; do
  check "$db.db passes integrity_check" integrity_ok "$work/$db.db"
done
if [ -x "$python" ]; then
  check "the coordinator applied updates of both relays, relay-1's into the last rounds" "$python" - "$work/coord.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("select round, client_id from participants where outcome in ('accepted', 'late-applied') "
                 "order by round").fetchall()
by = {}
for r, who in rows:
    by.setdefault(who, []).append(r)
print({k: (min(v), max(v), len(v)) for k, v in by.items()})
sys.exit(0 if by.get("relay-0") and by.get("relay-1") and max(by["relay-1"]) >= 10 else 1)
PY
fi
rmse=$("$coord_bin" report --db "$work/coord.db" --format csv | awk -F, '$2 == "committed" { v = $24 } END { print v }')
check "the model learned the task: test RMSE $rmse < 0.3 (a zero model: about 1.3)" \
  awk -v x="$rmse" 'BEGIN { exit !(x != "" && x < 0.3) }'
finish
