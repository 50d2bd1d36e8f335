#!/usr/bin/env bash
# A federation of real processes: a coordinator and 3 starling-client processes
# on 127.0.0.1 training on Fashion-MNIST shards. Checks that training completes
# and is recorded; that a coordinator killed with SIGKILL mid-training resumes
# from its last committed round (same model checksum) while the clients reconnect
# by themselves; and that a client killed mid-round is recorded, then rejoins and
# catches up.
# Usage: federation_test.sh COORDINATOR_BIN CLIENT_BIN [DATA_DIR]
set -u
coord_bin=$1
client_bin=$2
data=${3:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"

"$coord_bin" init --out "$work/certs" --clients 3 >/dev/null || exit 1

# start_coordinator NAME ARGS...: the task of these tests, with ARGS added.
start_coordinator() {
  local name=$1
  shift
  launch_coordinator "$name" --model mlp:784-64-10 --clients-per-round 3 --lr 0.05 --uplink topk \
    --uplink-density 0.05 --downlink topk --downlink-density 0.05 --test-data "$data" "$@"
}

# ---- 1. a federation runs to the end -------------------------------------------
port=""
start_coordinator plain --rounds 4 --tau 20 --deadline-ms 20000 --db "$work/plain.db" --model-file "$work/plain.model" || exit 1
for i in 0 1 2; do start_client "$i" "plain-client-$i.log"; done
wait "$coord_pid"
check "the coordinator finishes training and exits 0" test $? -eq 0
all_ok=0
for i in 0 1 2; do wait "${client_pid[$i]}" || all_ok=1; done
check "every client exits 0 when the coordinator says training is complete" test $all_ok -eq 0
check "the final model is saved" test -s "$work/plain.model"
report=$("$coord_bin" report --db "$work/plain.db" --format csv)
check "the report lists 4 committed rounds" test "$(grep -c ',committed,' <<<"$report")" -eq 4
check "the report is valid JSON" bash -c "'$coord_bin' report --db '$work/plain.db' --format json | python3 -m json.tool >/dev/null"
check "a restart on a finished database says so and exits 0" \
  bash -c "'$coord_bin' run --certs '$work/certs' --listen 127.0.0.1:0 --model mlp:784-64-10 --rounds 4 --db '$work/plain.db' 2>&1 | grep -q 'training already complete'"
check "a database of another task is refused" \
  bash -c "! '$coord_bin' run --certs '$work/certs' --listen 127.0.0.1:0 --model mlp:784-32-10 --db '$work/plain.db' 2>/dev/null"

# ---- 2. the coordinator is killed with SIGKILL mid-training ---------------------
# STARLING_CRASH_ROUNDS rounds in all (fewer in the sanitizer builds, where a round of
# this task costs several times more).
crash_rounds=${STARLING_CRASH_ROUNDS:-30}
port=""
start_coordinator crash --rounds "$crash_rounds" --tau 100 --deadline-ms 20000 --db "$work/crash.db" || exit 1
for i in 0 1 2; do start_client "$i" "crash-client-$i.log"; done
wait_for "$work/crash.log" "round   3 committed" 60 || echo "  (round 3 never committed)"
kill -9 "$coord_pid"
wait "$coord_pid" 2>/dev/null
last=$("$coord_bin" report --db "$work/crash.db" --format csv | grep ',committed,' | tail -n 1)
last_round=$(cut -d, -f1 <<<"$last")
check "rounds committed before the kill are in the database" test "${last_round:-0}" -ge 3 -a "${last_round:-0}" -lt "$crash_rounds"
check "the database passes PRAGMA integrity_check" integrity_ok "$work/crash.db"
start_coordinator crash --rounds "$crash_rounds" --tau 100 --deadline-ms 20000 --db "$work/crash.db" || exit 1  # same port: clients reconnect by themselves
check "the restarted coordinator resumes from the last committed round" \
  wait_for "$work/crash.log" "resumed from round $last_round " 10
wait "$coord_pid"
check "training completes after the restart" test $? -eq 0
all_ok=0
for i in 0 1 2; do wait "${client_pid[$i]}" || all_ok=1; done
check "the clients reconnected by themselves and finished" test $all_ok -eq 0
check "$crash_rounds rounds are committed in all" \
  test "$("$coord_bin" report --db "$work/crash.db" --format csv | grep -c ',committed,')" -eq "$crash_rounds"
check "no client saw a model checksum mismatch" bash -c "! grep -q 'checksum mismatch' '$work'/crash-client-*.log"

# ---- 3. a client is killed mid-round, restarted, and catches up -----------------
port=""
churn_tau=${STARLING_CHURN_TAU:-6000}
start_coordinator churn --rounds 6 --tau "$churn_tau" --tau-max "$churn_tau" --deadline-ms 60000 --min-goal 2 --min-clients 2 \
  --db "$work/churn.db" || exit 1
for i in 0 1 2; do start_client "$i" "churn-client-$i.log"; done
# Round 3 is assigned as round 2 commits; its local steps (STARLING_CHURN_TAU, sized
# by the build) take a second or more, so a kill 0.1 s after the commit lands
# mid-round.
wait_for "$work/churn.log" "round   2 committed" 120
sleep 0.1
kill -9 "${client_pid[2]}"
wait "${client_pid[2]}" 2>/dev/null
sleep 1
start_client 2 "churn-client-2.log"
wait "$coord_pid"
check "training completes with a client killed and restarted" test $? -eq 0
report=$("$coord_bin" report --db "$work/churn.db" --format csv)
check "the killed client is recorded with its reason" grep -q "client-2,dropped" <<<"$report"
check "the restarted client rejoined and trained again" \
  bash -c "test \$(grep -c 'joined task' '$work/churn-client-2.log') -ge 2"
check "and caught up with a matching checksum" bash -c "! grep -q 'checksum mismatch' '$work/churn-client-2.log'"

# ---- 4. SIGTERM: the round in flight is abandoned with a reason -----------------
port=""
start_coordinator term --rounds 30 --tau 100 --deadline-ms 20000 --db "$work/term.db" || exit 1
for i in 0 1 2; do start_client "$i" "term-client-$i.log"; done
wait_for "$work/term.log" "round   2 committed" 60
kill -TERM "$coord_pid"
wait "$coord_pid"
check "the coordinator stops cleanly on SIGTERM" test $? -eq 0
check "the round in flight is recorded as abandoned, with the reason" \
  bash -c "'$coord_bin' report --db '$work/term.db' --format csv | grep ',abandoned,' | grep -q 'coordinator stopping (signal 15)'"
for i in 0 1 2; do kill "${client_pid[$i]}" 2>/dev/null; done

# ---- 5. idle clients are kept alive by heartbeats --------------------------------
port=""
start_coordinator idle --rounds 2 --min-clients 3 --deadline-ms 1000 --idle-timeout-ms 1500 --heartbeat-ms 200 \
  --db "$work/idle.db" || exit 1
for i in 0 1; do start_client "$i" "idle-client-$i.log"; done
sleep 4  # the round waits for a third client; the connections idle meanwhile
check "idle clients stay connected past the idle timeout (they answer heartbeats)" \
  bash -c "test \$(grep -c 'joined from' '$work/idle.log') -eq 2 && ! grep -q 'disconnected\\|no message' '$work/idle.log'"
kill -TERM "$coord_pid"
wait "$coord_pid"
for i in 0 1; do kill "${client_pid[$i]}" 2>/dev/null; done

finish
