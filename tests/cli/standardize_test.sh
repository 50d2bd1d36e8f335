#!/usr/bin/env bash
# Feature scaling from a federated statistics round (--standardize) over mutual TLS: a
# coordinator and 3 starling-client processes, each with a CSV file of its own whose
# columns have very different scales (one x1000, one x0.01). The coordinator asks the
# clients for their per-feature sums before round 1; the stored mean and std must equal
# NumPy's over the union of the three files, a fourth client whose file has another
# number of features is refused and recorded, and a restarted coordinator reuses the
# stored statistics (no second statistics round).
# Usage: standardize_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"
python=/usr/bin/python3

"$coord_bin" init --out "$work/certs" --clients 4 >/dev/null || exit 1

# a ~ U(-1, 1) + shift, b ~ 1000 x U(0, 5) + 3000, c ~ U(-0.01, 0.01);
# y = 1.5 a - 0.002 (b - 5500) + 50 c + noise (sd about 0.1).
make_csv() {
  awk -v seed="$1" -v n="$2" -v shift="$3" 'BEGIN { srand(seed); print "a,b,c,target";
    for (i = 0; i < n; i++) { a = rand() * 2 - 1 + shift; b = 1000 * rand() * 5 + 3000; c = (rand() * 2 - 1) * 0.01;
      e = (rand() + rand() + rand() - 1.5) * 0.2;
      printf "%.5f,%.3f,%.7f,%.5f\n", a, b, c, 1.5 * a - 0.002 * (b - 5500) + 50 * c + e } }'
}
make_csv 11 400 0 >"$work/client-0.csv"
make_csv 12 650 0.5 >"$work/client-1.csv"
make_csv 13 900 -0.3 >"$work/client-2.csv"
make_csv 14 1000 0.1 >"$work/test.csv"
# A client with a fourth feature: its statistics have the wrong length.
awk -F, 'BEGIN { OFS = "," } NR == 1 { print "a,b,c,d,target"; next } { print $1, $2, $3, 1, $4 }' \
  "$work/client-0.csv" >"$work/client-3.csv"

start_own() {  # I LOG: client-I on its own file, all of it
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$1" --data "$work/client-$1.csv" \
    --task regression --seed "$1" >>"$work/$2" 2>&1 &
  client_pid[$1]=$!
  pids+=("${client_pid[$1]}")
}

# ---- 1. the statistics round, then training -------------------------------------
port=""
launch_coordinator std --task regression --model linear --test-data "$work/test.csv" --standardize true \
  --clients-per-round 3 --stats-min-clients 4 --rounds 4 --tau 30 --lr 0.1 --deadline-ms 20000 --db "$work/std.db" || exit 1
start_own 3 client-3.log
wait_for "$work/std.log" "client-3 joined .* waiting for the statistics round" 20
check "a client is held before its Welcome until the statistics round" \
  grep -q "client-3 joined .* waiting for the statistics round" "$work/std.log"
for i in 0 1 2; do start_own "$i" "client-$i.log"; done
wait "$coord_pid"
check "the standardized federation finishes" test $? -eq 0
check "the statistics round asked the 4 waiting clients" grep -q "asked 4 of 4 waiting clients" "$work/std.log"
check "the client with 4 features is rejected, naming the counts" \
  grep -q "rejected the feature statistics of client-3: feature statistics: 4 features, the task's model has 3" \
  "$work/std.log"
check "and recorded in the database" \
  bash -c "'$coord_bin' report --db '$work/std.db' | grep -q 'statistics round: feature statistics: 4 features'"
check "the round merged 3 clients' 1950 examples" \
  grep -q "statistics round: 3 clients, 1950 examples, 3 features; features become z-scores" "$work/std.log"
check "every client scaled its data" bash -c "grep -l 'features scaled by the statistics round' '$work'/client-[012].log | wc -l | grep -qx 3"
check "the report shows the task standardizes" \
  bash -c "'$coord_bin' report --db '$work/std.db' | grep -q 'Feature scaling: standardized (z-scores) by a statistics round of 3 clients, 1950 examples'"
check "the JSON report names the participants" \
  bash -c "'$coord_bin' report --db '$work/std.db' --format json | grep -q '\"participants\": 3, \"clients\": \[\"client-0\", \"client-1\", \"client-2\"\], \"examples\": 1950'"
rmse=$("$coord_bin" report --db "$work/std.db" --format csv | awk -F, '$2 == "committed" { v = $24 } END { print v }')
check "the test RMSE on the scaled test set ($rmse) is near the noise (< 0.2)" \
  awk -v x="$rmse" 'BEGIN { exit !(x != "" && x < 0.2) }'
wait "${client_pid[3]}"
check "the refused client gives up instead of reconnecting" test $? -ne 0
check "saying why" grep -q "the coordinator refused this client's feature statistics" "$work/client-3.log"
for i in 0 1 2; do wait "${client_pid[$i]}"; done

# The stored mean and std against NumPy over the union of the three files (float32
# features, as every loader reads them; population std).
if [ -x "$python" ] && "$python" -c "import numpy" 2>/dev/null; then
  check "the stored mean and std equal NumPy's over the union of the clients' files (1e-9 relative)" \
    "$python" - "$work/std.db" "$work"/client-[012].csv <<'PY'
import sqlite3, sys
import numpy as np
db = sqlite3.connect(sys.argv[1])
features, mean, std = db.execute("SELECT features, mean, std FROM feature_statistics").fetchone()
mean = np.frombuffer(mean, dtype="<f8")
std = np.frombuffer(std, dtype="<f8")
x = np.concatenate([np.loadtxt(f, delimiter=",", skiprows=1, dtype=np.float32)[:, :3] for f in sys.argv[2:]])
x = x.astype(np.float64)
ref_mean, ref_std = x.mean(axis=0), x.std(axis=0)
print("stored", mean, std, "numpy", ref_mean, ref_std)
assert features == 3 and x.shape[0] == 1950
assert np.allclose(mean, ref_mean, rtol=1e-9, atol=0), (mean, ref_mean)
assert np.allclose(std, ref_std, rtol=1e-9, atol=0), (std, ref_std)
PY
else
  echo "skip: /usr/bin/python3 with numpy is missing; the stored statistics are not compared"
fi

# ---- 2. a restart reuses the stored statistics -----------------------------------
port=""
launch_coordinator restart --task regression --model linear --test-data "$work/test.csv" --standardize true \
  --clients-per-round 3 --rounds 6 --tau 30 --lr 0.1 --deadline-ms 20000 --db "$work/std.db" || exit 1
for i in 0 1 2; do start_own "$i" "restart-client-$i.log"; done
wait "$coord_pid"
check "the restarted federation finishes" test $? -eq 0
check "it standardizes with the stored statistics" \
  grep -q "using the stored statistics round of 3 clients (1950 examples); no statistics round" \
  "$work/restart.log"
check "and runs no second statistics round" bash -c "! grep -q 'statistics round (attempt' '$work/restart.log'"
check "its clients were never asked" bash -c "! grep -q 'sent the feature statistics' '$work'/restart-client-*.log"
check "but scaled their data with the stored statistics" grep -q "features scaled by the statistics round" \
  "$work/restart-client-0.log"
check "training went on to round 6" test "$(committed "$work/std.db")" -eq 6
for i in 0 1 2; do wait "${client_pid[$i]}"; done
finish
