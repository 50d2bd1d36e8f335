#!/usr/bin/env bash
# Relays over mutual TLS: a coordinator, two starling-relay processes with two
# starling-client processes each (CSV regression files of their own). The coordinator
# sees two participants, the relays; each relay runs 2 local rounds with its clients per
# assignment and sends the difference they made upwards. Checked: the coordinator's
# rounds have the relays as their only participants, each relay's database has its local
# rounds and the adopted models, every process exits 0 when the task ends, the model
# learned the task; a client's certificate cannot run a relay, a relay does not take
# another relay for its coordinator, and a revoked relay is refused. Then the same under
# an asynchronous coordinator whose tau and decaying lr reach the relays' clients, and
# three tiers (a relay under a relay, --upstream-relay).
# Usage: relay_test.sh COORDINATOR_BIN CLIENT_BIN RELAY_BIN
set -u
coord_bin=$1
client_bin=$2
relay_bin=$3
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"
python=/usr/bin/python3

"$coord_bin" init --out "$work/certs" --clients 4 --relays 2 >/dev/null || exit 1

for i in 0 1 2 3; do regression_csv $((40 + i)) 400 >"$work/client-$i.csv"; done
regression_csv 50 1000 >"$work/test.csv"

# start_relay R NAME UPSTREAM_PORT [RELAY FLAGS...]: relay-R under the server at
# UPSTREAM_PORT, its database and log $work/NAME.db and .log; sets relay_pid[R] and, once
# it serves, relay_port[R].
declare -a relay_pid relay_port client_pid
start_relay() {
  local r=$1 name=$2 upstream_port=$3
  shift 3
  "$relay_bin" --coordinator "127.0.0.1:$upstream_port" --listen 127.0.0.1:0 --certs "$work/certs" --id "relay-$r" \
    --db "$work/$name.db" --over-selection 1 --deadline-ms 30000 "$@" >"$work/$name.log" 2>&1 &
  relay_pid[$r]=$!
  pids+=("${relay_pid[$r]}")
  wait_for "$work/$name.log" "listening on" 20 || { echo "relay-$r did not start serving"; cat "$work/$name.log"; exit 1; }
  relay_port[$r]=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.log" | head -n 1)
}
# start_client I PORT LOG: client-I (its own CSV) against the server at PORT.
start_client() {
  "$client_bin" --coordinator "127.0.0.1:$2" --certs "$work/certs" --id "client-$1" \
    --data "$work/client-$1.csv" --task regression --seed "$1" >"$work/$3" 2>&1 &
  client_pid[$1]=$!
  pids+=("${client_pid[$1]}")
}

client_cert_relay() {
  local out
  out=$("$relay_bin" --coordinator 127.0.0.1:1 --listen 127.0.0.1:0 --certs "$work/certs" --id client-0 \
    --db "$work/bad-relay.db" 2>&1)
  [ $? -ne 0 ] && grep -q "the certificate of client-0 states the role 'client': only a relay certificate" <<<"$out" ||
    { echo "  said: $out"; return 1; }
}
check "a client's certificate cannot run a relay" client_cert_relay

launch_coordinator coord --task regression --model mlp:hidden:32 --test-data "$work/test.csv" --clients-per-round 2 \
  --over-selection 1 --min-clients 2 --rounds 6 --tau 50 --lr 0.02 --batch-size 16 --deadline-ms 60000 \
  --db "$work/coord.db" || exit 1
coord_port=$port
# relay-1 is given the systemd unit's stand-in revocation list (a newline: none revoked).
echo >"$work/empty-crl.pem"
start_relay 0 relay-0 "$coord_port" --clients-per-round 2 --local-rounds 2
start_relay 1 relay-1 "$coord_port" --clients-per-round 2 --local-rounds 2 --crl "$work/empty-crl.pem"
relay_to_relay() {
  local out
  out=$(timeout 30 "$relay_bin" --coordinator "127.0.0.1:${relay_port[0]}" --listen 127.0.0.1:0 --certs "$work/certs" \
    --id relay-1 --db "$work/relay-to-relay.db" 2>&1)
  [ $? -ne 0 ] &&
    grep -q "relay-0 at 127.0.0.1:${relay_port[0]} has the certificate of a relay, not of a coordinator" <<<"$out" ||
    { echo "  said: $out"; return 1; }
}
check "a relay refuses a relay as its coordinator" relay_to_relay
for i in 0 1 2 3; do start_client "$i" "${relay_port[$((i / 2))]}" "client-$i.log"; done
wait "$coord_pid"
check "the coordinator's task over two relays finishes" test $? -eq 0
for r in 0 1; do
  wait "${relay_pid[$r]}"
  check "relay-$r exits 0 when the task ends" test $? -eq 0
done
for i in 0 1 2 3; do
  wait "${client_pid[$i]}"
  check "client-$i (behind relay-$((i / 2))) exits 0 when the task ends" test $? -eq 0
done
check "6 global rounds are committed" test "$(committed "$work/coord.db")" -eq 6
check "the coordinator knows the relays by their certificates' role" \
  bash -c "grep -q 'relay-0 (a relay) joined' '$work/coord.log' && grep -q 'relay-1 (a relay) joined' '$work/coord.log'"
if [ -x "$python" ]; then
  check "the coordinator's participants are the two relays, both applied in every round" "$python" - "$work/coord.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
who = sorted(r[0] for r in c.execute("select distinct client_id from participants"))
per_round = c.execute("select r.round, count(*) from rounds r join participants p on p.round = r.round "
                      "where r.status = 'committed' and p.outcome = 'accepted' group by r.round").fetchall()
print("participants:", who, "accepted per round:", per_round)
sys.exit(0 if who == ["relay-0", "relay-1"] and len(per_round) == 6 and all(n == 2 for _, n in per_round) else 1)
PY
  for r in 0 1; do
    check "relay-$r's database: its clients in 2 local rounds per global round, each after an adopted model" \
      "$python" - "$work/relay-$r.db" "$r" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
r = int(sys.argv[2])
rows = c.execute("select round, status, accepted, reason from rounds order by round").fetchall()
adopted = [x for x in rows if x[1] == "committed" and x[2] == 0 and "adopted" in (x[3] or "")]
local = [x for x in rows if x[1] == "committed" and x[2] == 2]
who = sorted(x[0] for x in c.execute("select distinct client_id from participants"))
print("adopted:", len(adopted), "local:", len(local), "clients:", who)
ok = len(adopted) == 6 and len(local) == 12 and who == ["client-%d" % (2 * r), "client-%d" % (2 * r + 1)]
sys.exit(0 if ok else 1)
PY
  done
fi
rmse=$("$coord_bin" report --db "$work/coord.db" --format csv | awk -F, '$2 == "committed" { v = $24 } END { print v }')
check "the model learned the task: test RMSE $rmse < 0.3 (a zero model: about 1.3)" \
  awk -v x="$rmse" 'BEGIN { exit !(x != "" && x < 0.3) }'

# An asynchronous coordinator (a server step per 2 updates, 2 relays training at once)
# with a decaying learning rate and tau 30: the relays' local rounds train with each
# assignment's tau and lr (RoundEngine::adopt's UpstreamPace), so their rounds' lr falls
# with the coordinator's.
port=""
launch_coordinator coord-async --task regression --model mlp:hidden:32 --test-data "$work/test.csv" \
  --mode async --clients-per-round 2 --concurrency 2 --rounds 4 --tau 30 --lr 0.02 --lr-decay 0.5 --batch-size 16 \
  --deadline-ms 60000 --db "$work/coord-async.db" || exit 1
for r in 0 1; do start_relay "$r" "relay-async-$r" "$port" --clients-per-round 2 --local-rounds 1; done
for i in 0 1 2 3; do start_client "$i" "${relay_port[$((i / 2))]}" "client-async-$i.log"; done
wait "$coord_pid"
check "an asynchronous coordinator's task over two relays finishes" test $? -eq 0
for r in 0 1; do
  wait "${relay_pid[$r]}"
  check "relay-$r exits 0 when the asynchronous task ends" test $? -eq 0
done
for i in 0 1 2 3; do wait "${client_pid[$i]}"; done
check "4 server steps are committed" test "$(committed "$work/coord-async.db")" -eq 4
if [ -x "$python" ]; then
  check "the relays' local rounds ask for the coordinator's tau and decayed lr" "$python" - "$work/coord-async.db" \
    "$work/relay-async-0.db" "$work/relay-async-1.db" <<'PY'
import sqlite3, sys
coord = sqlite3.connect(sys.argv[1])
steps = coord.execute("select round, lr from rounds where status = 'committed' order by round").fetchall()
coord_lrs = {round(lr, 9) for _, lr in steps}
ok = True
for path in sys.argv[2:]:
    c = sqlite3.connect(path)
    local = c.execute("select tau, lr from rounds where status = 'committed' and accepted > 0").fetchall()
    lrs = {round(lr, 9) for _, lr in local}
    print(path.split("/")[-1], "local rounds (tau, lr):", local, "coordinator's lrs:", sorted(coord_lrs))
    # Each local round's lr is one the coordinator assigned (0.02 x 0.5^steps), at
    # least one below the Welcome's 0.02, and every tau is the coordinator's 30.
    ok = ok and local and all(t == 30 for t, _ in local) and lrs <= {round(0.02 * 0.5 ** k, 9) for k in range(8)} \
        and min(lrs) < 0.02
sys.exit(0 if ok else 1)
PY
fi

# Three tiers: coordinator <- relay-0 <- relay-1 (--upstream-relay) <- client-0, client-1.
port=""
launch_coordinator coord-3 --task regression --model mlp:hidden:32 --test-data "$work/test.csv" \
  --clients-per-round 1 --over-selection 1 --rounds 4 --tau 50 --lr 0.02 --batch-size 16 --deadline-ms 60000 \
  --db "$work/coord-3.db" || exit 1
start_relay 0 relay-3-0 "$port" --clients-per-round 1 --local-rounds 1
start_relay 1 relay-3-1 "${relay_port[0]}" --clients-per-round 2 --local-rounds 2 --upstream-relay
for i in 0 1; do start_client "$i" "${relay_port[1]}" "client-3-$i.log"; done
wait "$coord_pid"
check "three tiers: the coordinator's task finishes" test $? -eq 0
for r in 0 1; do
  wait "${relay_pid[$r]}"
  check "three tiers: relay-$r exits 0" test $? -eq 0
done
for i in 0 1; do
  wait "${client_pid[$i]}"
  check "three tiers: client-$i exits 0" test $? -eq 0
done
check "three tiers: 4 global rounds are committed" test "$(committed "$work/coord-3.db")" -eq 4
if [ -x "$python" ]; then
  check "three tiers: each tier's participants are the next tier, the middle one ran 1 and the lower 2 local rounds" \
    "$python" - "$work/coord-3.db" "$work/relay-3-0.db" "$work/relay-3-1.db" <<'PY'
import sqlite3, sys
def tier(path):
    c = sqlite3.connect(path)
    who = sorted(r[0] for r in c.execute("select distinct client_id from participants"))
    local = c.execute("select count(*) from rounds where status = 'committed' and accepted > 0").fetchone()[0]
    return who, local
coord, middle, lower = (tier(p) for p in sys.argv[1:])
print("coordinator:", coord, "relay-0:", middle, "relay-1:", lower)
sys.exit(0 if coord == (["relay-0"], 4) and middle == (["relay-1"], 4) and lower == (["client-0", "client-1"], 8)
         else 1)
PY
fi
rmse=$("$coord_bin" report --db "$work/coord-3.db" --format csv | awk -F, '$2 == "committed" { v = $24 } END { print v }')
check "three tiers: the model learned the task: test RMSE $rmse < 0.3" awk -v x="$rmse" 'BEGIN { exit !(x != "" && x < 0.3) }'

# Revocation: relay-1 revoked; a coordinator started with the list refuses it at the
# handshake, and says why.
check "revoke takes a relay's certificate" \
  bash -c "'$coord_bin' revoke --certs '$work/certs' --client relay-1 | grep -q 'revoked relay-1 (serial '"
port=""
launch_coordinator coord-crl --task regression --model mlp:hidden:32 --test-data "$work/test.csv" \
  --clients-per-round 1 --rounds 1 --db "$work/coord-crl.db" || exit 1
revoked_relay() {
  local out
  out=$(timeout 30 "$relay_bin" --coordinator "127.0.0.1:$port" --listen 127.0.0.1:0 --certs "$work/certs" \
    --id relay-1 --db "$work/relay-revoked.db" 2>&1)
  [ $? -ne 0 ] && grep -q "refused the TLS handshake" <<<"$out" || { echo "  said: $out"; return 1; }
}
check "a revoked relay is refused at the handshake" revoked_relay
check "the coordinator logs that it was revoked" wait_for "$work/coord-crl.log" "refused .*the certificate has been revoked" 5
kill -TERM "$coord_pid" 2>/dev/null
wait "$coord_pid" 2>/dev/null
finish
