#!/usr/bin/env bash
# Differential privacy and robust aggregation through the real binaries, over mutual TLS
# on Fashion-MNIST shards (docs/privacy.md).
#  1. A task with privacy (clip norm 1, noise multiplier 4, every idle client each
#     round) and a budget of epsilon 3: the coordinator stops before its round limit,
#     the moment another round would pass 3; every committed round's epsilon is in the
#     database and the report, rising, and equals `starling-sim privacy` for as many
#     rounds; one more round would be over the budget. Restarted with its clients, it
#     trains no further.
#  1b. Distributed noise: the three clients add the noise (a sigma large enough to
#     ruin the model), and epsilon is starling-sim privacy's for fixed-size sampling.
#  1c. FedBuff (mode async) under privacy with a budget: every client's spending is
#     accounted on its own, and training ends when no client may train again.
#  2. Four clients, one of them hostile (--test-attack scale:1000). Under the plain
#     mean the model is ruined; under the coordinate-wise median it learns.
#  3. Privacy settings that would break the guarantee are refused by name.
# Usage: privacy_test.sh COORDINATOR_BIN CLIENT_BIN SIM_BIN [DATA_DIR]
set -u
coord_bin=$1
client_bin=$2
sim_bin=$3
data=${4:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"

"$coord_bin" init --out "$work/certs" --clients 4 >/dev/null || exit 1
model=(--model mlp:784-16-10 --lr 0.05 --tau 20 --deadline-ms 60000)
epsilons() {  # DB: the epsilon of every committed round, one a line
  "$coord_bin" report --db "$1" --format csv |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "epsilon") c = i } $2 == "committed" { print $c }'
}
accuracy() {  # DB: the last evaluated round's accuracy
  "$coord_bin" report --db "$1" --format csv |
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "test_accuracy") c = i } $2 == "committed" && $c != "" { v = $c } END { print v }'
}

# ---- 1. the privacy budget -------------------------------------------------------
launch_coordinator dp "${model[@]}" --rounds 50 --clients-per-round 3 --update-clip-norm 1 --noise-multiplier 4 \
  --sampling poisson --sampling-rate 1 --target-epsilon 3 --db "$work/dp.db" || exit 1
for i in 0 1 2; do start_client "$i" "client-$i.log"; done
wait_exit "$coord_pid" 240
check "the private task finishes" test $? -eq 0
for i in 0 1 2; do wait_exit "${client_pid[$i]}" 30 >/dev/null; done
rounds=$(committed "$work/dp.db")
check "the budget stopped it before its 50 rounds ($rounds committed)" test "$rounds" -gt 0 -a "$rounds" -lt 50
check "saying the budget is spent" grep -q "the privacy budget is spent" "$work/dp.log"
check "each committed round logs its epsilon" grep -q "committed: .*| epsilon " "$work/dp.log"
eps=$(epsilons "$work/dp.db")
check "every round's epsilon is stored, rising" \
  awk -v list="$(echo $eps)" 'BEGIN { n = split(list, e, " "); if (n < 1) exit 1;
    for (i = 2; i <= n; i++) if (!(e[i] > e[i - 1])) exit 1 }'
last=$(echo "$eps" | tail -n 1)
ours=$("$sim_bin" privacy --sampling-rate 1 --rounds "$rounds" --noise-multiplier 4 | sed 's/^epsilon=\([^ ]*\).*/\1/')
more=$("$sim_bin" privacy --sampling-rate 1 --rounds "$((rounds + 1))" --noise-multiplier 4 | sed 's/^epsilon=\([^ ]*\).*/\1/')
check "the last epsilon ($last) is starling-sim privacy's for $rounds rounds ($ours), within 3" \
  awk -v a="$last" -v b="$ours" 'BEGIN { exit !(a > 0 && a <= 3 && (a - b) ^ 2 < (1e-3 * b) ^ 2) }'
check "and another round would spend $more > 3" awk -v m="$more" 'BEGIN { exit !(m > 3) }'
check "the report shows the privacy spent" \
  bash -c "'$coord_bin' report --db '$work/dp.db' | grep -q 'privacy       epsilon .* after round'"
launch_coordinator dp "${model[@]}" --rounds 50 --clients-per-round 3 --update-clip-norm 1 --noise-multiplier 4 \
  --sampling poisson --sampling-rate 1 --target-epsilon 3 --db "$work/dp.db" || exit 1
for i in 0 1 2; do start_client "$i" "restart-client-$i.log"; done
wait_exit "$coord_pid" 60
check "a restarted coordinator, its clients back, finishes at once" test $? -eq 0
check "without training past the budget" test "$(committed "$work/dp.db")" -eq "$rounds"
for i in 0 1 2; do wait_exit "${client_pid[$i]}" 30 >/dev/null; done

# ---- 1b. distributed noise: the clients add the noise ------------------------------
# sigma 30 split into three shares of N(0, (30 / sqrt(3))^2) a coordinate: with every
# share arrived the coordinator adds nothing, and the noise the clients added ruins the
# model; epsilon is the fixed-size accountant's at q = 3 / 3.
port=""
launch_coordinator shares "${model[@]}" --rounds 4 --clients-per-round 3 --update-clip-norm 1 --noise-multiplier 30 \
  --noise distributed --test-data "$data" --db "$work/shares.db" || exit 1
for i in 0 1 2; do start_client "$i" "shares-client-$i.log"; done
wait_exit "$coord_pid" 240
check "the task with distributed noise finishes" test $? -eq 0
for i in 0 1 2; do wait_exit "${client_pid[$i]}" 30 >/dev/null; done
check "its 4 rounds committed" test "$(committed "$work/shares.db")" -eq 4
check "each client adds its share from a cryptographic generator" \
  bash -c "grep -l 'noise share N(0, 17.3205.*^2) a coordinate, from a cryptographic generator' '$work'/shares-client-*.log | wc -l | grep -qx 3"
shares_acc=$(accuracy "$work/shares.db")
check "the clients' noise ruins the model (accuracy $shares_acc < 0.3)" \
  awk -v a="$shares_acc" 'BEGIN { exit !(a != "" && a < 0.3) }'
shares_eps=$(epsilons "$work/shares.db" | tail -n 1)
shares_ref=$("$sim_bin" privacy --sampling fixed --sampling-rate 1 --rounds 4 --noise-multiplier 30 |
  sed 's/^epsilon=\([^ ]*\).*/\1/')
check "its epsilon ($shares_eps) is starling-sim privacy's for fixed sampling ($shares_ref)" \
  awk -v a="$shares_eps" -v b="$shares_ref" 'BEGIN { exit !(a > 0 && (a - b) ^ 2 < (1e-3 * b) ^ 2) }'

# ---- 1c. FedBuff under privacy: every client's spending on its own -----------------
# sigma 4, a target of epsilon 5: each client has room for about three updates of
# weight 1 (stale ones weigh less), then trains no more; the run ends when none may.
port=""
launch_coordinator fedbuff "${model[@]}" --rounds 100 --mode async --clients-per-round 2 --concurrency 3 \
  --update-clip-norm 1 --noise-multiplier 4 --target-epsilon 5 --db "$work/fedbuff.db" || exit 1
for i in 0 1 2; do start_client "$i" "fedbuff-client-$i.log"; done
wait_exit "$coord_pid" 240
check "the private FedBuff task finishes" test $? -eq 0
for i in 0 1 2; do wait_exit "${client_pid[$i]}" 30 >/dev/null; done
steps=$(committed "$work/fedbuff.db")
check "the budget ended it after $steps steps, before its 100" test "$steps" -gt 1 -a "$steps" -lt 100
check "saying the budget is spent" grep -q "the privacy budget is spent" "$work/fedbuff.log"
fedbuff_eps=$(epsilons "$work/fedbuff.db")
check "every step's epsilon is within the target of 5, the last near it" \
  awk -v list="$(echo $fedbuff_eps)" 'BEGIN { n = split(list, e, " "); if (n < 2) exit 1;
    for (i = 1; i <= n; i++) if (!(e[i] > 0 && e[i] <= 5)) exit 1; exit !(e[n] > 3) }'

# ---- 2. one hostile client: the mean is ruined, the median learns -----------------
shards=4
for rule in mean median; do
  port=""
  launch_coordinator "$rule" "${model[@]}" --rounds 8 --clients-per-round 4 --aggregation "$rule" \
    --max-norm-ratio 0 --test-data "$data" --db "$work/$rule.db" || exit 1
  for i in 0 1 2; do start_client "$i" "$rule-client-$i.log"; done
  start_client 3 "$rule-client-3.log" --test-attack scale:1000
  wait_exit "$coord_pid" 240
  check "the $rule task with a hostile client finishes" test $? -eq 0
  for i in 0 1 2 3; do wait_exit "${client_pid[$i]}" 30 >/dev/null; done
done
mean_acc=$(accuracy "$work/mean.db")
median_acc=$(accuracy "$work/median.db")
check "under the mean the model is ruined (accuracy $mean_acc < 0.3)" awk -v a="$mean_acc" 'BEGIN { exit !(a != "" && a < 0.3) }'
check "under the median it learns (accuracy $median_acc > 0.6)" awk -v a="$median_acc" 'BEGIN { exit !(a > 0.6) }'

# ---- 3. refusals -------------------------------------------------------------------
refused() {  # refused EXPECTED_TEXT ARGS...
  local expect=$1
  shift
  local out
  out=$("$coord_bin" run --certs "$work/certs" --listen 127.0.0.1:0 --db "$work/refused.db" "$@" 2>&1)
  [ $? -ne 0 ] && grep -q "$expect" <<<"$out" || { echo "  said: $out"; return 1; }
}
check "distributed noise in the asynchronous mode is refused" refused "distributed noise in the asynchronous modes" \
  --update-clip-norm 1 --noise-multiplier 1 --noise distributed --mode async
check "privacy with a robust rule is refused" refused "robust" --update-clip-norm 1 --aggregation median
check "distributed noise over a sparse uplink is refused" refused "distributed noise over the topk uplink" \
  --update-clip-norm 1 --noise-multiplier 1 --noise distributed --uplink topk
check "a target epsilon without noise is refused" refused "target epsilon without noise" --update-clip-norm 1 \
  --target-epsilon 2
check "an unknown aggregation is refused by name" refused "unknown aggregation 'krum'" --aggregation krum
check "an unknown attack is refused by the client" \
  bash -c "'$client_bin' --coordinator 127.0.0.1:1 --certs '$work/certs' --id client-0 --data '$data' --test-attack flip 2>&1 | grep -q \"unknown attack 'flip'\""
finish
