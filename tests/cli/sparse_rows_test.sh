#!/usr/bin/env bash
# Sparse models on real processes (issue 22, docs/sparse.md): 3 starling-client processes
# with --sparse-rows train a logistic regression over 65,536 features on power-law
# LIBSVM data (made here with awk's seeded generator) against a coordinator over mutual
# TLS. They must reach the same test accuracy as clients training the whole model while
# moving several times fewer bytes; coarse buckets cost bytes, not accuracy; the
# coordinator can refuse row sets (train.sparse-rows false); a placement's row shards
# serve as the engine's shard map, replaced mid-run; and a coordinator killed with
# SIGKILL mid-run and restarted brings the clients back to their rows' values and
# takes the replaced shard map from its database.
# Usage: sparse_rows_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"

"$coord_bin" init --out "$work/certs" --clients 3 >/dev/null || exit 1

# Each example: about 12 features, feature j drawn as exp(ln(D) u^2) (many small ids,
# a long tail); the label is the sign of hidden weights on the first 2,000 features.
# The first line ends with the explicit zero "65536:0": every file has 65,536 features.
make_power_law() {
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed); D = 65536; K = 12;
    srand(1); for (j = 1; j <= 2000; j++) w[j] = (rand() < 0.5 ? -1 : 1); srand(seed);
    for (i = 0; i < n; i++) {
      m = 0; s = 0; line = "";
      for (k = 0; k < K; k++) { u = rand(); j = int(exp(log(D) * u * u)); if (j < 1) j = 1;
        dup = 0; for (q = 1; q <= m; q++) if (a[q] == j) dup = 1;
        if (!dup) { m++; a[m] = j } }
      for (p = 2; p <= m; p++) { v = a[p]; q = p - 1; while (q >= 1 && a[q] > v) { a[q + 1] = a[q]; q-- } a[q + 1] = v }
      for (q = 1; q <= m; q++) { j = a[q]; s += (j <= 2000 ? w[j] : 0); line = line " " j ":1" }
      if (i == 0) line = line " " D ":0";
      print (s >= 0 ? "+1" : "-1") line } }'
}
make_power_law 3 6000 >"$work/train.libsvm"
make_power_law 4 2000 >"$work/test.libsvm"
data="$work/train.libsvm"

# COLUMN (1-based) of the report's round CSV for round ROUND.
value() { "$coord_bin" report --db "$1" --format csv | awk -F, -v r="$2" -v col="$3" '$1 == r && $2 == "committed" { print $col }'; }
ratio_at_least() { awk -v a="$1" -v b="$2" -v r="$3" 'BEGIN { exit !(a != "" && b != "" && b > 0 && a / b >= r) }'; }

common=(--task binary --test-data "$work/test.libsvm" --clients-per-round 3 --lr 0.5 --deadline-ms 20000)
run() {  # NAME CLIENT_ARGS [COORDINATOR_ARGS...]
  local name=$1 client_args=$2
  shift 2
  port=""
  launch_coordinator "$name" "${common[@]}" --model "${model:-linear}" --rounds 5 --tau 20 --db "$work/$name.db" "$@" ||
    exit 1
  for i in 0 1 2; do start_client "$i" "$name-client-$i.log" $client_args; done
  wait "$coord_pid"
  check "the $name federation finishes" test $? -eq 0
  for i in 0 1 2; do wait "${client_pid[$i]}"; done
}

run dense ""
run sparse "--sparse-rows 1"
run coarse "--sparse-rows 64"
check "the coordinator takes each client's rows" \
  test "$(grep -c 'trains the compact model of' "$work/sparse.log")" -ge 3
check "a client trains the compact model of its rows" \
  grep -q "training the compact model linear:[0-9]*-1/logistic of the [0-9]* rows" "$work/sparse-client-0.log"
for r in 1 5; do
  check "round $r's test accuracy is the dense run's ($(value "$work/dense.db" $r 18))" \
    test "$(value "$work/sparse.db" $r 18)" = "$(value "$work/dense.db" $r 18)"
done
check "and so is the coarse buckets' run's" test "$(value "$work/coarse.db" 5 18)" = "$(value "$work/dense.db" 5 18)"
dense_down=$(value "$work/dense.db" 3 15)
sparse_down=$(value "$work/sparse.db" 3 15)
coarse_down=$(value "$work/coarse.db" 3 15)
dense_up=$(value "$work/dense.db" 3 13)
sparse_up=$(value "$work/sparse.db" 3 13)
check "sparse clients receive 5x+ fewer bytes a round ($sparse_down vs $dense_down)" \
  ratio_at_least "$dense_down" "$sparse_down" 5
check "and send 5x+ fewer ($sparse_up vs $dense_up)" ratio_at_least "$dense_up" "$sparse_up" 5
check "buckets of 64 rows move more than single rows ($coarse_down vs $sparse_down), fewer than dense" \
  bash -c "awk -v c='$coarse_down' -v s='$sparse_down' -v d='$dense_down' 'BEGIN { exit !(c > s && c < d) }'"

# ---- placement from the row sets the database recorded ------------------------------
"$coord_bin" placement --db "$work/sparse.db" --relays 2 --shards 2 --out "$work/placement.txt" \
  >"$work/placement.log" 2>&1
check "placement --db reads the 3 clients' row sets over the model's 65,536 inputs" \
  grep -q "3 clients, [0-9]* row entries, universe 65536 rows; 2 relays" "$work/placement.log"
check "and writes a relay for each of them" test "$(grep -c '^client ' "$work/placement.txt")" -eq 3
check "the row entries are the rows the clients trained (the coordinator's log)" \
  test "$(sed -n 's/.*3 clients, \([0-9]*\) row entries.*/\1/p' "$work/placement.log")" -eq \
  "$(sed -n 's/.*trains the compact model of \([0-9]*\) rows.*/\1/p' "$work/sparse.log" | awk '{ s += $1 } END { print s }')"
# The rows' shards as the engine's shard map, aggregated in 2 shards with sparse
# clients: an embedbag model (its table's rows are contiguous) and the linear model
# (its rows are columns of dense0.weight), which reaches the one-shard run's accuracy.
model=embedbag:hidden:8 run shardmap "--sparse-rows 1" --shards 2 --shard-map "$work/placement.txt"
check "an embedbag federation takes the placement's shard map" \
  grep -q "shard map version 1 from .*placement.txt: [0-9]* rows on 2 shards" "$work/shardmap.log"
run shardmap-linear "--sparse-rows 1" --shards 2 --shard-map "$work/placement.txt"
check "so does a linear one" \
  grep -q "shard map version 1 from .*placement.txt: [0-9]* rows on 2 shards" "$work/shardmap-linear.log"
for r in 1 5; do
  check "with round $r's test accuracy of the one-shard run ($(value "$work/sparse.db" $r 18))" \
    test "$(value "$work/shardmap-linear.db" $r 18)" = "$(value "$work/sparse.db" $r 18)"
done
check "a model without first-layer rows refuses a shard map, by name" \
  bash -c "'$coord_bin' run --certs '$work/certs' --listen 127.0.0.1:0 ${common[*]} --model gru:256x256-4-1/logistic \
    --db '$work/bad-map.db' --shards 2 --shard-map '$work/placement.txt' 2>&1 |
    grep -q 'engine.shard-map needs a model with first-layer rows (linear, mlp or embedbag), not gru:256x256-4-1'"
check "a database whose clients offered no rows says so" \
  bash -c "'$coord_bin' placement --db '$work/dense.db' --relays 2 2>&1 | grep -q 'no client offered its rows'"

# ---- the coordinator refuses row sets --------------------------------------------
run refused "--sparse-rows 1" --sparse-rows false
check "with train.sparse-rows off, clients that offer rows train the whole model" \
  grep -q "offered its rows; it trains the whole model: train.sparse-rows is off" "$work/refused.log"
check "with the dense run's accuracy" test "$(value "$work/refused.db" 5 18)" = "$(value "$work/dense.db" 5 18)"

# ---- SIGKILL mid-run and restart, with a shard map replaced mid-run ----------------
# The run starts on the placement's shard map (version 1); after round 2 the file is
# replaced by a hash placement of the rows, which the coordinator applies after the
# round it is in and keeps in its database (version 2); the coordinator restarted
# after a SIGKILL takes version 2 from the database, and does not count the unchanged
# file as a version 3.
"$coord_bin" placement --db "$work/sparse.db" --relays 2 --shards 2 --shard-method hash --out "$work/hash.txt" \
  >"$work/hash-placement.log" 2>&1
check "placement --shard-method hash places the rows otherwise" bash -c "! cmp -s <(grep '^row ' '$work/placement.txt') \
  <(grep '^row ' '$work/hash.txt')"
cp "$work/placement.txt" "$work/map.txt"
crash_args=("${common[@]}" --model linear --rounds 16 --tau 200 --db "$work/crash.db" --shards 2 --shard-map "$work/map.txt")
port=""
launch_coordinator crash "${crash_args[@]}" || exit 1
# Rounds of about 0.15 s (--slowdown 10), so the choreography below lands mid-run.
for i in 0 1 2; do start_client "$i" "crash-client-$i.log" --sparse-rows 1 --slowdown 10; done
wait_for "$work/crash.log" "round   2 committed" 60 || echo "  (round 2 never committed)"
cp "$work/hash.txt" "$work/map.txt.new" && mv "$work/map.txt.new" "$work/map.txt"
require "the replaced shard map is applied after a round" \
  wait_for "$work/crash.log" "shard map version 2 from .*map.txt: [0-9]* rows on 2 shards, applied after round" 60
applied=$(sed -n 's/.*shard map version 2 from .*applied after round \([0-9]*\).*/\1/p' "$work/crash.log")
wait_for "$work/crash.log" "round  *$((applied + 1)) committed" 60 || echo "  (round $((applied + 1)) never committed)"
# A map file that does not parse is reported once, not after every round, and the
# engine keeps version 2; the file put back as it was is no new version.
printf 'row 0 two\n' >"$work/map.txt.new" && mv "$work/map.txt.new" "$work/map.txt"
wait_for "$work/crash.log" "shard map not applied" 60 || echo "  (the malformed map was never reported)"
for _ in $(seq 600); do  # two rounds committed after the report
  [ "$(sed -n '/shard map not applied/,$p' "$work/crash.log" | grep -c 'committed')" -ge 2 ] && break
  sleep 0.1
done
check "a malformed shard map is reported once, naming its line" \
  test "$(grep -c 'shard map not applied: .*map.txt:1' "$work/crash.log")" -eq 1
cp "$work/hash.txt" "$work/map.txt.new" && mv "$work/map.txt.new" "$work/map.txt"
kill -9 "$coord_pid"
wait "$coord_pid" 2>/dev/null
launch_coordinator crash "${crash_args[@]}" || exit 1
wait "$coord_pid"
check "training completes after the restart" test $? -eq 0
for i in 0 1 2; do wait "${client_pid[$i]}"; done
check "16 rounds are committed" test "$(committed "$work/crash.db")" -eq 16
check "the restarted coordinator took the clients' rows again" \
  test "$(grep -c 'trains the compact model of' "$work/crash.log")" -ge 6
check "no client's view went out of sync" bash -c "! grep -q 'checksum mismatch' '$work'/crash-client-*.log"
check "the restarted coordinator took shard map version 2 from its database" \
  grep -q "shard map version 2 from the database: [0-9]* rows on 2 shards" "$work/crash.log"
check "and no version 3 from the unchanged file" bash -c "! grep -q 'shard map version 3' '$work/crash.log'"
finish
