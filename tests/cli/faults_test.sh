#!/usr/bin/env bash
# Faults injected into a federation of real processes (a coordinator, starling-client
# processes, 127.0.0.1, Fashion-MNIST):
#   1. the coordinator is SIGKILLed at 20 random moments; after each kill the rounds
#      committed before it are unchanged (same model checksum) and the database passes
#      PRAGMA integrity_check; after the last restart training completes;
#   2. 30% of the clients are killed and restarted every round: every round is
#      committed or abandoned with its reason, none is missing;
#   3. a database on a full disk and one on a read-only file system: a clear error,
#      and the rounds committed before stay intact and resumable.
# Peers that stall inside a frame or the TLS handshake: stall_test.sh.
# Usage: faults_test.sh COORDINATOR_BIN CLIENT_BIN [DATA_DIR]
# STARLING_FAULT_TAU sets the local steps per round (sanitizer builds use fewer), and
# STARLING_FAULT_WINDOW_MS the window in which each kill lands.
set -u
coord_bin=$1
client_bin=$2
data=${3:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"
tau=${STARLING_FAULT_TAU:-40}
# The kill lands up to this long after the clients are back: a few rounds' time
# (sanitizer builds' rounds are slower).
window_ms=${STARLING_FAULT_WINDOW_MS:-600}
RANDOM=7  # the kill moments are random, and the same on every run

"$coord_bin" init --out "$work/certs" --clients 10 >/dev/null || exit 1

# A small task: rounds take tens of milliseconds, so many fit in a short test.
task=(--model mlp:784-16-10 --lr 0.05 --tau "$tau" --uplink topk --uplink-density 0.1 --downlink topk
  --downlink-density 0.1)

# committed_checksums DB: "round checksum" per committed round.
committed_checksums() {
  "$coord_bin" report --db "$1" --format json | python3 -c '
import json, sys
for r in json.load(sys.stdin)["rounds"]:
    if r["status"] == "committed":
        print(r["round"], r["model_checksum"])'
}

# ---- 1. SIGKILL of the coordinator at 20 random moments --------------------------
port=""
db="$work/kill.db"
# Training cannot finish during the trials; after them it is given 20 more rounds.
launch_coordinator kill "${task[@]}" --rounds 1000000 --clients-per-round 3 --deadline-ms 10000 --db "$db" || exit 1
for i in 0 1 2; do start_client "$i" "kill-client-$i.log"; done
joined=0
intact=0
integrity=0
progressed=0
: >"$work/before.txt"
for trial in $(seq 20); do
  # Once the 3 clients are back (they retry with backoff), somewhere in the next
  # window (0.6 s; 1.5 s in sanitizer builds): rounds take tens of milliseconds, so
  # the kill lands before, inside or after a round, or in the middle of a commit.
  for _ in $(seq 150); do
    [ "$(grep -c 'joined from' "$work/kill.log")" -ge $((joined + 3)) ] && break
    sleep 0.1
  done
  joined=$(grep -c 'joined from' "$work/kill.log")
  ms=$((RANDOM % window_ms))
  sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
  kill -9 "$coord_pid"
  wait "$coord_pid" 2>/dev/null
  integrity_ok "$db" || integrity=$((integrity + 1))
  committed_checksums "$db" >"$work/after.txt"
  # Every round committed before this kill is still there, with the same model.
  if ! python3 -c "
import sys
before = dict(l.split() for l in open('$work/before.txt'))
after = dict(l.split() for l in open('$work/after.txt'))
sys.exit(0 if all(after.get(r) == c for r, c in before.items()) else 1)"; then
    intact=$((intact + 1))
    echo "  trial $trial: committed rounds changed"
  fi
  [ "$(wc -l <"$work/after.txt")" -gt "$(wc -l <"$work/before.txt")" ] && progressed=$((progressed + 1))
  cp "$work/after.txt" "$work/before.txt"
  [ "$trial" -lt 20 ] &&
    { launch_coordinator kill "${task[@]}" --rounds 1000000 --clients-per-round 3 --deadline-ms 10000 --db "$db" ||
      exit 1; }
done
echo "  $trial kills, $(wc -l <"$work/before.txt") rounds committed by then, $progressed kills after progress"
check "after every kill, the rounds committed before it are intact (same checksums)" test $intact -eq 0
check "after every kill, PRAGMA integrity_check is ok" test $integrity -eq 0
check "training made progress between most kills" test $progressed -ge 15
final_rounds=$(($(wc -l <"$work/before.txt") + 20))
launch_coordinator kill "${task[@]}" --rounds "$final_rounds" --clients-per-round 3 --deadline-ms 10000 --db "$db" || exit 1
wait "$coord_pid"
check "after the last restart, training completes" test $? -eq 0
check "$final_rounds rounds are committed in all" test "$(committed "$db")" -eq "$final_rounds"
all_ok=0
for i in 0 1 2; do wait "${client_pid[$i]}" || all_ok=1; done
check "the clients reconnected by themselves each time and finished" test $all_ok -eq 0
check "no client saw a model checksum mismatch" bash -c "! grep -q 'checksum mismatch' '$work'/kill-client-*.log"

# ---- 1b. a restart costs clients that missed rounds no dense model ---------------
# 6 clients, 2 a round: most miss rounds. The coordinator is killed once round 4 is
# committed and restarted for 3 more rounds; the checkpoint's catch-up state
# (broadcast log, change stamps, model checksums) lets it bring them forward by the
# log or by value, as it would have without the restart. Without it, every client
# behind the checkpoint would get the dense model (12,730 fp32 values: 50,920 bytes).
# At density 0.1 a client that missed up to 6 commits costs less than that.
port=""
shards=6
db="$work/restart.db"
launch_coordinator restart "${task[@]}" --rounds 1000000 --clients-per-round 2 --min-clients 6 \
  --deadline-ms 10000 --db "$db" || exit 1
for i in $(seq 0 5); do start_client "$i" "restart-client-$i.log"; done
check "round 4 is committed before the kill" wait_for "$work/restart.log" "round   4 committed" 60
kill -9 "$coord_pid"
wait "$coord_pid" 2>/dev/null
launch_coordinator restart "${task[@]}" --rounds $(($(committed "$db") + 3)) --clients-per-round 2 --min-clients 6 \
  --deadline-ms 10000 --db "$db" || exit 1
wait "$coord_pid"
check "restarted after round 4 or later, training completes" test $? -eq 0
resumed_from=$(sed -n 's/.*resumed from round \([0-9]*\).*/\1/p' "$work/restart.log" | head -n 1)
check "clients caught up after the restart (from round ${resumed_from:-?}) got no dense model" python3 -c "
import sqlite3, sys
c = sqlite3.connect('file:$db?mode=ro', uri=True)
commits = [r for (r,) in c.execute(\"SELECT round FROM rounds WHERE status = 'committed'\")]
rows = list(c.execute('SELECT round, client_id, outcome, bytes_down_wire FROM participants'))
behind = []  # (commits the client missed, bytes it downloaded), for the accepted after the restart
for r, client, outcome, down in rows:
    if outcome != 'accepted' or r <= int('${resumed_from:-0}'):
        continue
    before = [q for q, k, _, _ in rows if k == client and q < r]
    last = max(before) if before else 0
    behind.append((sum(1 for q in commits if last <= q < r), down))
print('  (commits missed, bytes down) after the restart:', sorted(behind))
ok = all(down < 50920 for missed, down in behind if missed <= 6)
caught_up = sum(1 for missed, down in behind if 1 <= missed <= 6 and down > 0)  # a catch-up was sent
sys.exit(0 if ok and caught_up >= 2 else 1)"
check "and none saw a model checksum mismatch" bash -c "! grep -q 'checksum mismatch' '$work'/restart-client-*.log"
for i in $(seq 0 5); do wait "${client_pid[$i]}" 2>/dev/null; done

# ---- 2. 30% of the clients killed and restarted every round -----------------------
port=""
shards=10
db="$work/churn.db"
launch_coordinator churn "${task[@]}" --rounds 12 --clients-per-round 5 --min-clients 5 --min-goal 3 \
  --deadline-ms 3000 --db "$db" || exit 1
for i in $(seq 0 9); do start_client "$i" "churn-client-$i.log"; done
seen=0
while kill -0 "$coord_pid" 2>/dev/null; do
  ended=$(grep -c 'committed:\|abandoned:' "$work/churn.log")
  if [ "$ended" -gt "$seen" ]; then
    seen=$ended
    for i in $(shuf -i 0-9 -n 3 --random-source=<(yes "$seen")); do
      kill -9 "${client_pid[$i]}" 2>/dev/null
      wait "${client_pid[$i]}" 2>/dev/null
      start_client "$i" "churn-client-$i.log"
    done
  fi
  sleep 0.05
done
wait "$coord_pid"
check "training completes with 3 of 10 clients killed and restarted every round" test $? -eq 0
"$coord_bin" report --db "$db" --format json >"$work/churn.json"
check "every round is committed or abandoned with its reason, none is missing" python3 -c "
import json, sys
rounds = json.load(open('$work/churn.json'))['rounds']
ok = [r for r in rounds if r['status'] == 'committed' or (r['status'] == 'abandoned' and r['reason'])]
numbers = sorted(r['round'] for r in rounds)
print('  rounds:', len(rounds), 'committed:', sum(r['status'] == 'committed' for r in rounds))
sys.exit(0 if len(ok) == len(rounds) and numbers == list(range(1, len(rounds) + 1)) else 1)"
check "the killed clients are recorded as dropped, with their reasons" python3 -c "
import json, sys
p = json.load(open('$work/churn.json'))['participants']
dropped = [x for x in p if x['outcome'] in ('dropped', 'straggler')]
sys.exit(0 if dropped and all(x['reason'] for x in dropped) else 1)"
for i in $(seq 0 9); do kill "${client_pid[$i]}" 2>/dev/null; done
shards=3

# ---- 3. a full disk and a read-only file system -----------------------------------
# A small tmpfs is a disk that fills up; remounted read-only, it is a read-only file
# system (file modes do not stop root, a read-only mount does). Without the right to
# mount, a file-size limit stands in for the full disk and the read-only case is skipped.
disk="$work/disk"
mkdir -p "$disk"
if mount -t tmpfs -o size=600k tmpfs "$disk" 2>/dev/null; then
  cleanup_hooks+=("umount '$disk' 2>/dev/null")
  mounted=1
else
  mounted=0
  echo "  (cannot mount a tmpfs here: a file-size limit stands in for the full disk)"
fi
port=""
db="$disk/full.db"
if [ $mounted -eq 1 ]; then
  launch_coordinator full "${task[@]}" --rounds 1000 --clients-per-round 3 --deadline-ms 10000 --db "$db" || exit 1
else
  (
    trap '' XFSZ
    ulimit -f 600
    exec "$coord_bin" run --certs "$work/certs" --listen 127.0.0.1:0 "${task[@]}" --rounds 1000 \
      --clients-per-round 3 --deadline-ms 10000 --db "$db"
  ) >>"$work/full.log" 2>&1 &
  coord_pid=$!
  pids+=("$coord_pid")
  wait_for "$work/full.log" "listening on" 20
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/full.log" | tail -n 1)
fi
for i in 0 1 2; do start_client "$i" "full-client-$i.log"; done
for _ in $(seq 600); do kill -0 "$coord_pid" 2>/dev/null || break; sleep 0.1; done
wait "$coord_pid"
status=$?
check "on a full disk the coordinator stops with an error (exit $status)" test $status -ne 0 -a $status -lt 128
check "and says what went wrong" grep -qi "database or disk is full\|disk I/O error\|full" "$work/full.log"
cp "$disk"/full.db* "$work/" 2>/dev/null
check "the database copied off the full disk passes integrity_check" integrity_ok "$work/full.db"
full_committed=$(committed "$work/full.db")
echo "  $full_committed rounds committed before the disk filled"
check "rounds committed before the disk filled are there" test "$full_committed" -ge 1
port=""
launch_coordinator full-resumed "${task[@]}" --rounds $((full_committed + 2)) --clients-per-round 3 \
  --deadline-ms 10000 --db "$work/full.db" || exit 1
check "moved to a disk with room, it resumes from the last committed round" \
  wait_for "$work/full-resumed.log" "resumed from round $full_committed " 20
for i in 0 1 2; do kill "${client_pid[$i]}" 2>/dev/null; done
for i in 0 1 2; do start_client "$i" "full-client-$i.log"; done
wait "$coord_pid"
check "and completes" test $? -eq 0
for i in 0 1 2; do kill "${client_pid[$i]}" 2>/dev/null; done

if [ $mounted -eq 1 ]; then
  rm -f "$disk"/full.db*
  # The file has grown since (it resumed and finished on a disk with room).
  mount -o remount,size=16m "$disk"
  cp "$work/full.db" "$disk/ro.db"
  mount -o remount,ro "$disk"
  "$coord_bin" run --certs "$work/certs" --listen 127.0.0.1:0 "${task[@]}" --db "$disk/ro.db" >"$work/ro.log" 2>&1
  status=$?
  check "on a read-only file system the coordinator refuses to start (exit $status)" test $status -eq 1
  check "and says why" grep -q "cannot open database.*needs to write" "$work/ro.log"
  check "the database is unchanged" cmp -s "$disk/ro.db" "$work/full.db"
  check "the report still reads it" bash -c "'$coord_bin' report --db '$disk/ro.db' --format csv >/dev/null"
else
  echo "  (the read-only file system case needs the right to mount: skipped)"
fi

finish
