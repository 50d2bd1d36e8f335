#!/usr/bin/env bash
# Overlap Local-SGD (train.overlap) through the real binaries: a coordinator with
# --overlap 0.2 and 3 starling-client processes over mutual TLS on Fashion-MNIST shards,
# top-k uplinks with error feedback. The task must complete with every round committed
# in the database, the clients must have trained every round after their first in the
# background (before its assignment came), the uplink memory's invariant must hold
# exactly for every client (what the coordinator applied + the memory = everything
# computed, from both sides' --test-audit), and the model must have learned. Out-of-range
# alpha and beta are refused by name.
# Usage: overlap_test.sh COORDINATOR_BIN CLIENT_BIN [DATA_DIR]
set -u
coord_bin=$1
client_bin=$2
data=${3:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"
rounds=12

"$coord_bin" init --out "$work/certs" --clients 3 >/dev/null || exit 1

refused() {  # refused EXPECTED_TEXT ARGS...: the coordinator exits non-zero naming the key
  local expect=$1
  shift
  local out
  out=$("$coord_bin" run --certs "$work/certs" --listen 127.0.0.1:0 --db "$work/refused.db" "$@" 2>&1)
  [ $? -ne 0 ] && grep -q "$expect" <<<"$out" || { echo "  said: $out"; return 1; }
}
check "an alpha above 1 is refused by name" refused "overlap (the pull-back alpha) must be in \[0, 1\]" --overlap 1.5
check "a beta of 1 is refused by name" refused "overlap-momentum (the anchor momentum beta) must be in \[0, 1)" \
  --overlap 0.2 --overlap-momentum 1

port=""
launch_coordinator overlap --model mlp:784-64-10 --clients-per-round 3 --min-clients 3 --lr 0.05 --tau 50 \
  --uplink topk --uplink-density 0.1 --overlap 0.2 --rounds "$rounds" --deadline-ms 30000 --test-data "$data" \
  --db "$work/overlap.db" --test-audit "$work/coordinator.audit" || exit 1
for i in 0 1 2; do start_client "$i" "client-$i.log" --test-audit "$work/client-$i.audit"; done
wait "$coord_pid"
check "the coordinator finishes training and exits 0" test $? -eq 0
all_ok=0
for i in 0 1 2; do wait "${client_pid[$i]}" || all_ok=1; done
check "every client exits 0" test $all_ok -eq 0
check "the database shows $rounds committed rounds" test "$(committed "$work/overlap.db")" -eq "$rounds"
for i in 0 1 2; do
  n=$(grep -c "ran before its assignment came" "$work/client-$i.log")
  check "client-$i trained $n of rounds 2..$rounds in the background (at least $((rounds - 2)))" \
    test "$n" -ge $((rounds - 2))
done
check "applied + memory = computed for every client, nothing applied twice" check_sums "$work" "$work/overlap.db"
accuracy=$("$coord_bin" report --db "$work/overlap.db" --format csv | awk -F, '$2 == "committed" { v = $18 } END { print v }')
check "the final test accuracy ($accuracy) is above 0.75" awk -v x="$accuracy" 'BEGIN { exit !(x != "" && x > 0.75) }'
finish
