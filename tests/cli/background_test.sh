#!/usr/bin/env bash
# Background training (ShadowSync) through the real binaries: a coordinator over mutual
# TLS (certificates from `init`) and two examples/embed/background.c programs on
# Fashion-MNIST shards, one S-EASGD and one S-MA, each training in its own main-thread
# loop while the library syncs in its thread; top-k uplinks with error feedback. The
# task must complete with every round committed and both clients' updates accepted in
# every round (the database), both programs must exit 0 having synced every round, the
# app's steps must not have waited on the network, and the model must have learned.
# Usage: background_test.sh COORDINATOR_BIN BACKGROUND_BIN [DATA_DIR]
set -u
coord_bin=$1
bg_bin=$2
data=${3:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"
rounds=10

"$coord_bin" init --out "$work/certs" --clients 2 >/dev/null || exit 1
port=""
launch_coordinator background --model mlp:784-64-10 --clients-per-round 2 --min-clients 2 --lr 0.05 --tau 50 \
  --uplink topk --uplink-density 0.1 --rounds "$rounds" --deadline-ms 30000 --test-data "$data" \
  --db "$work/background.db" || exit 1
"$bg_bin" "127.0.0.1:$port" "$work/certs" client-0 "$data" 0/2 easgd >"$work/client-0.out" 2>"$work/client-0.log" &
pid0=$!
"$bg_bin" "127.0.0.1:$port" "$work/certs" client-1 "$data" 1/2 ma >"$work/client-1.out" 2>"$work/client-1.log" &
pid1=$!
pids+=("$pid0" "$pid1")
wait "$coord_pid"
check "the coordinator finishes training and exits 0" test $? -eq 0
wait "$pid0"
check "the S-EASGD program exits 0" test $? -eq 0
wait "$pid1"
check "the S-MA program exits 0" test $? -eq 0
cat "$work/client-0.out" "$work/client-1.out"
check "the database shows $rounds committed rounds" test "$(committed "$work/background.db")" -eq "$rounds"
accepted=$(python3 -c "import sqlite3; c = sqlite3.connect('file:$work/background.db?mode=ro', uri=True); \
print(c.execute(\"select count(*) from participants where outcome = 'accepted'\").fetchone()[0])")
check "both clients' updates were accepted in every round ($accepted of $((2 * rounds)))" test "$accepted" -eq $((2 * rounds))
for i in 0 1; do
  check "client-$i synced every round" grep -q "rounds synced $rounds, accepted $rounds, rejected 0" "$work/client-$i.out"
  steps=$(sed -n 's/^app steps \([0-9]*\) .*/\1/p' "$work/client-$i.out")
  check "client-$i's app made at least tau steps a round ($steps)" test "${steps:-0}" -ge $((50 * rounds))
  # A step is a few hundred microseconds of mlp:784-64-10; one that waited for a round
  # trip or a catch-up would take far longer (a loose bound for loaded machines).
  longest=$(sed -n 's/.*longest \([0-9.]*\) ms.*/\1/p' "$work/client-$i.out")
  check "client-$i's longest step ($longest ms) did not wait on the network (< 200 ms)" \
    awk -v x="$longest" 'BEGIN { exit !(x != "" && x < 200) }'
done
accuracy=$("$coord_bin" report --db "$work/background.db" --format csv | awk -F, '$2 == "committed" { v = $18 } END { print v }')
check "the final test accuracy ($accuracy) is above 0.75" awk -v x="$accuracy" 'BEGIN { exit !(x != "" && x > 0.75) }'
finish
