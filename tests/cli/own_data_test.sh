#!/usr/bin/env bash
# Users' own data over mutual TLS: a coordinator and 3 starling-client processes train
# a linear regression on a CSV file, then a binary classifier on a LIBSVM file, each
# task's metrics evaluated on a test file of the same format and recorded in the
# database; then the regression again with no test set at the coordinator, evaluated
# by the clients on their held-out examples (federated evaluation). The data are made here with awk's seeded generator (no data set needed).
# Usage: own_data_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"

"$coord_bin" init --out "$work/certs" --clients 3 >/dev/null || exit 1

# y = 1.5 a - 2 b + 0.5 c + 0.7 + noise (sd about 0.1), with a header.
make_csv() {
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed); print "a,b,c,target";
    for (i = 0; i < n; i++) { a = rand() * 2 - 1; b = rand() * 2 - 1; c = rand() * 2 - 1;
      e = (rand() + rand() + rand() - 1.5) * 0.2;
      printf "%.5f,%.5f,%.5f,%.5f\n", a, b, c, 1.5 * a - 2 * b + 0.5 * c + 0.7 + e } }'
}
# +1 when a - b + 0.3 c > 0, else -1; LIBSVM indices from 1.
make_libsvm() {
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed);
    for (i = 0; i < n; i++) { a = rand() * 2 - 1; b = rand() * 2 - 1; c = rand() * 2 - 1;
      printf "%s 1:%.5f 2:%.5f 3:%.5f\n", (a - b + 0.3 * c > 0 ? "+1" : "-1"), a, b, c } }'
}
make_csv 7 3000 >"$work/train.csv"
make_csv 8 1000 >"$work/test.csv"
make_libsvm 9 3000 >"$work/train.libsvm"
make_libsvm 10 1000 >"$work/test.libsvm"

# The last committed round's COLUMN (1-based) of the report's round CSV.
last_value() {
  "$coord_bin" report --db "$1" --format csv | awk -F, -v col="$2" '$2 == "committed" { v = $col } END { print v }'
}
below() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x != "" && x < y) }'; }
above() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x != "" && x > y) }'; }

# ---- 1. regression on CSV --------------------------------------------------------
data="$work/train.csv"
check "a client reading regression targets as classes is refused, naming the line" \
  bash -c "'$client_bin' --coordinator 127.0.0.1:1 --certs '$work/certs' --id client-0 --data '$data' 2>&1 |
           grep -q 'train.csv:2'"
mkdir -p "$work/per-client"
head -n 101 "$data" >"$work/per-client/0.csv"
head -n 201 "$data" >"$work/per-client/1.csv"
check "--partition files:DIR with 2 files for 3 shards is refused, giving both numbers" \
  bash -c "'$client_bin' --coordinator 127.0.0.1:1 --certs '$work/certs' --id client-0 --shard 0/3 \
           --partition 'files:$work/per-client' 2>&1 | grep -q '2 data files for 3 clients'"
check "--partition files:DIR takes no --data" \
  bash -c "'$client_bin' --coordinator 127.0.0.1:1 --certs '$work/certs' --id client-0 --shard 0/2 --data '$data' \
           --partition 'files:$work/per-client' 2>&1 | grep -q 'data is not used with --partition files:DIR'"
check "--partition files:DIR: shard 1 of 2 trains on the second file's 200 examples" \
  bash -c "'$client_bin' --coordinator 127.0.0.1:1 --certs '$work/certs' --id client-0 --shard 1/2 --task regression \
           --partition 'files:$work/per-client' --handshake-timeout-ms 500 2>&1 | grep -q 'training data: 200 examples from .*1.csv'"
port=""
launch_coordinator regression --task regression --model linear --test-data "$work/test.csv" --clients-per-round 3 \
  --rounds 6 --tau 30 --lr 0.1 --deadline-ms 20000 --db "$work/regression.db" || exit 1
for i in 0 1 2; do start_client "$i" "regression-client-$i.log" --task regression; done
wait "$coord_pid"
check "the regression federation finishes" test $? -eq 0
check "the model spec was completed from the data" grep -q "linear:3-1/mse" "$work/regression.log"
rmse=$(last_value "$work/regression.db" 24)
r2=$(last_value "$work/regression.db" 26)
accuracy=$(last_value "$work/regression.db" 18)
check "the test RMSE ($rmse) is near the noise (< 0.2)" below "$rmse" 0.2
check "R^2 ($r2) is above 0.95" above "$r2" 0.95
check "a regression round has no accuracy" test -z "$accuracy"
for i in 0 1 2; do wait "${client_pid[$i]}"; done

# ---- 2. binary classification on LIBSVM ------------------------------------------
data="$work/train.libsvm"
port=""
launch_coordinator binary --task binary --model mlp:hidden:8 --test-data "$work/test.libsvm" --clients-per-round 3 \
  --rounds 6 --tau 30 --lr 0.2 --deadline-ms 20000 --db "$work/binary.db" || exit 1
for i in 0 1 2; do start_client "$i" "binary-client-$i.log" --task binary; done
wait "$coord_pid"
check "the binary federation finishes" test $? -eq 0
auc=$(last_value "$work/binary.db" 23)
accuracy=$(last_value "$work/binary.db" 18)
check "the test AUC ($auc) is above 0.95" above "$auc" 0.95
check "the test accuracy ($accuracy) is above 0.9" above "$accuracy" 0.9
for i in 0 1 2; do wait "${client_pid[$i]}"; done

# ---- 3. federated evaluation: no test set at the coordinator ----------------------
data="$work/train.csv"
port=""
launch_coordinator federated --task regression --model linear:3-1 --federated-every 1 --clients-per-round 3 \
  --rounds 6 --tau 30 --lr 0.1 --deadline-ms 20000 --db "$work/federated.db" || exit 1
for i in 0 1 2; do start_client "$i" "federated-client-$i.log" --task regression --eval-fraction 0.2; done
wait "$coord_pid"
check "the federated-evaluation federation finishes" test $? -eq 0
check "each client holds out a fifth of its shard" grep -q "holding out 200 of 1000 examples" "$work/federated-client-0.log"
check "and joins with the 800 it trains on (the aggregation weight)" grep -q "client-0 joined from .* (800 examples" "$work/federated.log"
check "the clients' sums are merged (600 held-out examples of 3 clients)" \
  grep -q "federated evaluation of round 5's model: .* on 600 held-out examples of 3 clients" "$work/federated.log"
rmse=$("$coord_bin" report --db "$work/federated.db" --format csv | awk -F, '$1 == 5 && $2 == "committed" { print $24 }')
check "round 5's RMSE ($rmse), from the clients alone, is near the noise (< 0.2)" below "$rmse" 0.2
for i in 0 1 2; do wait "${client_pid[$i]}"; done
finish
