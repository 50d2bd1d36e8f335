#!/usr/bin/env bash
# Buffered asynchronous federation (task.mode async, FedBuff) over mutual TLS: a
# coordinator and 4 starling-client processes on CSV regression files of their own, one
# of them 10x slower (--slowdown 10). Up to 3 clients train at once and every 2 updates
# make a server step, whatever model version each started from. The database must show
# the steps (every committed round applied exactly 2 updates), updates applied with a
# staleness above 0 at FedBuff's weight, the slow client contributing fewer updates than
# the fast ones, and a model that learned the task. A second, short federation ends
# while its slow client is still working: every client must exit 0 within 20 s, the
# slow one after reading the goodbye the coordinator sent before closing.
# Usage: async_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"
python=/usr/bin/python3

"$coord_bin" init --out "$work/certs" --clients 4 >/dev/null || exit 1

for i in 0 1 2 3; do regression_csv $((20 + i)) 600 >"$work/client-$i.csv"; done
regression_csv 30 1000 >"$work/test.csv"

launch_coordinator async --mode async --concurrency 3 --buffer-size 2 --max-staleness 4 --server-lr 0.7 \
  --task regression --model mlp:hidden:64-64 --test-data "$work/test.csv" --min-clients 4 --rounds 30 --tau 100 --lr 0.02 \
  --batch-size 16 --deadline-ms 30000 --db "$work/async.db" || exit 1
for i in 0 1 2 3; do
  slow=()
  [ "$i" -eq 3 ] && slow=(--slowdown 10)
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$i" --data "$work/client-$i.csv" \
    --task regression --seed "$i" "${slow[@]}" >>"$work/client-$i.log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
done
wait "$coord_pid"
check "the asynchronous federation finishes" test $? -eq 0
for i in 0 1 2 3; do wait "${client_pid[$i]}"; done
check "30 server steps are committed" test "$(committed "$work/async.db")" -eq 30

if [ -x "$python" ]; then
  check "every server step applied exactly buffer-size = 2 updates" "$python" - "$work/async.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
bad = c.execute("select round, accepted from rounds where status = 'committed' and accepted != 2").fetchall()
print("steps that did not apply 2:", bad)
sys.exit(1 if bad else 0)
PY
  check "updates computed from an older model version were applied (staleness > 0)" "$python" - "$work/async.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = c.execute("select staleness, count(*) from participants where outcome = 'late-applied' group by staleness").fetchall()
print("late-applied by staleness:", rows)
sys.exit(0 if any(s > 0 for s, _ in rows) else 1)
PY
  check "the 10x slower client contributed fewer updates than each fast one" "$python" - "$work/async.db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
n = dict(c.execute("select client_id, count(*) from participants where outcome in ('accepted', 'late-applied') "
                   "group by client_id").fetchall())
print("applied updates per client:", n)
slow = n.get("client-3", 0)
sys.exit(0 if all(n.get("client-%d" % i, 0) > slow for i in range(3)) else 1)
PY
fi
rmse=$("$coord_bin" report --db "$work/async.db" --format csv | awk -F, '$2 == "committed" { v = $24 } END { print v }')
check "the model learned the task: test RMSE $rmse < 0.3 (a zero model: about 1.3)" \
  awk -v x="$rmse" 'BEGIN { exit !(x != "" && x < 0.3) }'

# The end of an asynchronous task reaches a client that is still working. All 4 clients
# are in flight from the start; client-3 is 40x slower, so the 3 steps of 2 updates are
# committed by the fast ones while it trains and sleeps (with 6 steps and 25x, a loaded
# CI machine once let client-3 wake and send before the end). The coordinator then says
# goodbye and exits; client-3's update (4 MB: the coordinator's closed socket resets
# it mid-write) cannot be sent. It must still learn that the task ended and exit 0,
# not reconnect to the closed port until its give-up limit (300 s).
port=""
launch_coordinator async-end --mode async --concurrency 4 --buffer-size 2 --max-staleness 8 --server-lr 0.7 \
  --task regression --model mlp:hidden:1024-1024 --test-data "$work/test.csv" --min-clients 4 --rounds 3 --tau "${STARLING_ASYNC_END_TAU:-20}" \
  --lr 0.02 --batch-size 16 --deadline-ms 60000 --db "$work/async-end.db" || exit 1
for i in 0 1 2 3; do
  slow=()
  [ "$i" -eq 3 ] && slow=(--slowdown 40)
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$i" --data "$work/client-$i.csv" \
    --task regression --seed "$i" "${slow[@]}" >"$work/end-client-$i.log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
done
wait "$coord_pid"
check "the asynchronous task with a slow client in flight finishes" test $? -eq 0
# Up to 20 s after the coordinator exits, each client must have exited with status 0
# and said that the task is finished; client-3 gets 20 s after the end of its own work:
# its --slowdown sleep is 39 x its training, which a sanitizer build makes longer than
# the fast clients' whole task. That end is bounded from its log: joined at J, trained
# its first round by T, asleep until at most T + 39 (T - J).
slow_left=0
if [ -x "$python" ]; then
  slow_left=$("$python" - "$work/end-client-3.log" <<'PY'
import datetime, sys, time
t = {}
for line in open(sys.argv[1]):
    for key, text in (("join", "joined task"), ("trained", " steps, loss ")):
        if text in line and key not in t:
            t[key] = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
left = t["trained"] + 39 * (t["trained"] - t["join"]) - time.time() if len(t) == 2 else 0
print(max(0, int(left + 1)))
PY
  )
fi
deadline=$((SECONDS + 20))
for i in 0 1 2 3; do
  [ "$i" -eq 3 ] && deadline=$((deadline + ${slow_left:-0}))
  while kill -0 "${client_pid[$i]}" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.1; done
  if kill -0 "${client_pid[$i]}" 2>/dev/null; then
    check "client-$i exits within 20 s of the task's end (of its work: client-3, ${slow_left:-0} s later) (still running: $(grep -c reconnecting "$work/end-client-$i.log") reconnect attempts)" false
    kill -9 "${client_pid[$i]}" 2>/dev/null
    wait "${client_pid[$i]}" 2>/dev/null
    continue
  fi
  wait "${client_pid[$i]}"
  code=$?
  check "client-$i exits with status 0 within 20 s of the task's end or of its own work (status $code)" test "$code" -eq 0
  check "client-$i says the task is finished" grep -q "the task is finished" "$work/end-client-$i.log"
done
check "client-3 was still working when the task ended and read the goodbye after the closed connection" \
  grep -q "its goodbye was read after the connection closed" "$work/end-client-3.log"
check "client-3 never reconnected" test "$(grep -c reconnecting "$work/end-client-3.log")" -eq 0
finish
