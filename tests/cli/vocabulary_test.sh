#!/usr/bin/env bash
# Categorical columns one-hot over a vocabulary agreed in the statistics round
# (task.categorical-vocabulary), over mutual TLS: a coordinator and 3 starling-client
# processes, each with a CSV file whose "city" column holds text. The clients send the
# counts of their values; the coordinator keeps the values seen on at least
# vocabulary-min-count examples, at most categorical-buckets - 1 of them (the most
# frequent), stores them and sends them in every Welcome. Checked: the stored
# vocabulary and counts equal an independent count over the union of the files, a
# value too rare to keep never reaches the clients, one-hot slots stay 0/1 under
# --standardize while the numeric column is scaled as NumPy says, the model learns the
# city's label (the rare values share the other slot), and a restart reuses it all.
# Usage: vocabulary_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
needs_fashion_mnist=0
source "$(dirname "$0")/lib.sh"
python=/usr/bin/python3

"$coord_bin" init --out "$work/certs" --clients 3 >/dev/null || exit 1

# make_csv SEED CITY:COUNT...: rows "city,x,label"; the label is the city's (A, C, E and
# Rare are 1, B and D 0); x ~ U(0, 1000) carries nothing.
make_csv() {
  local seed=$1
  shift
  awk -v seed="$seed" -v spec="$*" 'BEGIN { srand(seed); print "city,x,label";
    label["A"] = 1; label["B"] = 0; label["C"] = 1; label["D"] = 0; label["E"] = 1; label["Rare"] = 1;
    n = split(spec, parts, " ");
    for (p = 1; p <= n; p++) { split(parts[p], kv, ":");
      for (i = 0; i < kv[2]; i++) printf "%s,%.3f,%d\n", kv[1], rand() * 1000, label[kv[1]] } }'
}
make_csv 1 A:60 B:40 C:30 E:2 >"$work/client-0.csv"
make_csv 2 B:50 C:20 D:40 E:1 >"$work/client-1.csv"
make_csv 3 A:30 D:30 Rare:2 E:1 >"$work/client-2.csv"
make_csv 4 A:20 B:20 C:20 D:20 E:20 Rare:20 >"$work/test.csv"

data_opts=(--task binary --categorical city --categorical-buckets 5)
task=("${data_opts[@]}" --model linear --test-data "$work/test.csv" --categorical-vocabulary true --vocabulary-min-count 3
  --standardize true --clients-per-round 3 --tau 20 --lr 0.5 --batch-size 16 --deadline-ms 20000)
start_own() {  # I LOG
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$1" --data "$work/client-$1.csv" \
    "${data_opts[@]}" --seed "$1" >>"$work/$2" 2>&1 &
  client_pid[$1]=$!
  pids+=("${client_pid[$1]}")
}
last_accuracy() {
  "$coord_bin" report --db "$1" --format csv | awk -F, '$2 == "committed" { v = $18 } END { print v }'
}

# ---- 1. the statistics round agrees the vocabulary, then training ------------------
port=""
launch_coordinator vocab "${task[@]}" --rounds 8 --db "$work/vocab.db" || exit 1
for i in 0 1 2; do start_own "$i" "client-$i.log"; done
wait "$coord_pid"
check "the federation with a categorical vocabulary finishes" test $? -eq 0
check "the coordinator logs the vocabulary: 4 values, 6 examples in the other slot" \
  grep -q "column 'city' one-hot over 4 values (+ the other slot); 6 examples' values below vocabulary-min-count 3" \
  "$work/vocab.log"
check "every client re-encoded its data over it" \
  bash -c "grep -l 'categorical columns one-hot over the statistics round' '$work'/client-[012].log | wc -l | grep -qx 3"
check "the report lists the vocabulary, most examples first" \
  bash -c "'$coord_bin' report --db '$work/vocab.db' | grep -q 'Categorical vocabulary: city: 4 values + other: A (90), B (90), D (70), C (50)'"
check "and the JSON report with its counts" \
  bash -c "'$coord_bin' report --db '$work/vocab.db' --format json | grep -q '\"categorical_vocabulary\": {\"city\": {\"A\": 90, \"B\": 90, \"C\": 50, \"D\": 70}}'"
accuracy=$(last_accuracy "$work/vocab.db")
check "the model learns each city's label, E and Rare sharing the other slot (accuracy $accuracy > 0.97)" \
  awk -v x="$accuracy" 'BEGIN { exit !(x != "" && x > 0.97) }'
for i in 0 1 2; do wait "${client_pid[$i]}"; done

if [ -x "$python" ] && "$python" -c "import numpy" 2>/dev/null; then
  check "the stored vocabulary and counts equal a count over the union of the files; one-hot slots unscaled" \
    "$python" - "$work/vocab.db" "$work"/client-[012].csv <<'PY'
import collections, csv, sqlite3, sys
import numpy as np
db = sqlite3.connect(sys.argv[1])
rows = db.execute("SELECT column_name, value, count FROM categorical_vocabulary ORDER BY position").fetchall()
counts = collections.Counter()
xs = []
for path in sys.argv[2:]:
    for r in csv.DictReader(open(path)):
        counts[r["city"]] += 1
        xs.append(np.float32(r["x"]))
kept = [(v, n) for v, n in counts.items() if n >= 3]
kept = sorted(sorted(kept, key=lambda vn: (-vn[1], vn[0]))[:4])   # the 4 most frequent, then by value
print("stored", rows, "expected", kept)
assert rows == [("city", v, n) for v, n in kept], rows
mean, std = db.execute("SELECT mean, std FROM feature_statistics").fetchone()
mean, std = np.frombuffer(mean, dtype="<f8"), np.frombuffer(std, dtype="<f8")
x = np.array(xs, dtype=np.float64)
print("mean", mean, "std", std, "numpy x", x.mean(), x.std())
assert list(mean[:5]) == [0] * 5 and list(std[:5]) == [1] * 5, (mean, std)
assert abs(mean[5] - x.mean()) <= 1e-9 * abs(x.mean()) and abs(std[5] - x.std()) <= 1e-9 * x.std()
PY
else
  echo "skip: /usr/bin/python3 with numpy is missing; the stored vocabulary is not compared"
fi

# ---- 2. a restart reuses the vocabulary -------------------------------------------
port=""
launch_coordinator restart "${task[@]}" --rounds 10 --db "$work/vocab.db" || exit 1
for i in 0 1 2; do start_own "$i" "restart-client-$i.log"; done
wait "$coord_pid"
check "the restarted federation finishes" test $? -eq 0
check "it uses the stored statistics round" grep -q "using the stored statistics round of 3 clients" "$work/restart.log"
check "and runs no second one" bash -c "! grep -q 'statistics round (attempt' '$work/restart.log'"
check "its clients re-encoded their data with the stored vocabulary" \
  grep -q "categorical columns one-hot over the statistics round" "$work/restart-client-0.log"
check "training went on to round 10" test "$(committed "$work/vocab.db")" -eq 10
for i in 0 1 2; do wait "${client_pid[$i]}"; done
finish
