#!/usr/bin/env bash
# starling-sim under mpirun (docs/simulation.md "On MPI"): the rows of every strategy,
# model checksums included, are the same bytes with 1, 2 and 4 ranks as without mpirun,
# also with examples drawn with replacement and Learners evicted.
# Skipped (77) without mpirun, without MPI in this build, or without Fashion-MNIST.
#   mpi_test.sh STARLING_SIM
set -euo pipefail
sim=$1
data=/usr/share/datasets/fashion-mnist
command -v mpirun >/dev/null || { echo "SKIP: mpirun is missing (openmpi-bin)"; exit 77; }
[[ -d $data ]] || { echo "SKIP: $data is missing (dataset-fashion-mnist)"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# Three strategies that reach every path a rank takes: verdicts sent on to the owners,
# error feedback's memories, federated evaluation's held-out examples, dropouts, clients
# leaving at the end of their windows (their updates back into their memories).
cat >"$dir/run.toml" <<TOML
[task]
model = "mlp:784-32-10"
rounds = 5
clients-per-round = 8
over-selection = 1.3
deadline-ms = 300000
max-staleness = 2
seed = 3
[train]
lr = 0.05
tau = 8
batch-size = 32
[eval]
eval-every = 1
[sim]
clients = 24
train-examples = 3000
test-examples = 500
dropout = 0.15
fleet-seed = 5
[[strategy]]
name = "fedavg"
compression = { uplink = "identity", downlink = "identity", error-feedback = false }
[[strategy]]
name = "topk-ef"
compression = { uplink = "topk-sampled", uplink-density = 0.05, downlink = "topk", downlink-density = 0.05, fp16-values = true, error-feedback = true }
train = { adaptive-tau = true, priority-sampling = true }
[[strategy]]
name = "fed-eval-trace"
compression = { uplink = "topk-sampled", uplink-density = 0.02, downlink = "identity", error-feedback = true }
eval = { federated-every = 1 }
TOML

# Windows shorter than a few rounds (a round takes about half a virtual second here).
cat >"$dir/windows.txt" <<TRACE
0 0 1.3
1 0.6 2.0
2 0 0.7
2 1.1 1.9
3 0 2.0
TRACE
common=(--config "$dir/run.toml" --quiet)
fedeval=(--eval-fraction 0.2 --availability-trace "$dir/windows.txt" --availability-period-s 2 --rounds 12)
mpi=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)

"$sim" "${common[@]}" --out "$dir/alone" >/dev/null
# Not an MPI build: mpirun starts R whole simulations; say so and skip.
if "${mpi[@]}" -n 2 "$sim" "${common[@]}" --out "$dir/probe" 2>&1 >/dev/null | grep -q "this build has no MPI"; then
  echo "SKIP: starling-sim was built without MPI (meson -Dmpi)"
  exit 77
fi
"$sim" "${common[@]}" "${fedeval[@]}" --only fed-eval-trace --out "$dir/alone-trace" >/dev/null
# Clients drawing their examples with replacement, and a Learner bound below the clients
# that train: rank 0's evictions reach the ranks that hold them (docs/simulation.md, "A
# million clients").
drawn=(--client-examples 40 --only topk-ef,fed-eval-trace --eval-fraction 0.2)
bounded=("${drawn[@]}" --learner-clients 6)
"$sim" "${common[@]}" "${bounded[@]}" --out "$dir/alone-bounded" >/dev/null
"$sim" "${common[@]}" "${drawn[@]}" --out "$dir/alone-unbounded" >/dev/null
if cmp -s "$dir/alone-bounded/topk-ef.csv" "$dir/alone-unbounded/topk-ef.csv"; then
  echo "FAIL: sim.learner-clients 6 evicted nothing (the rows equal the unbounded run's)"
  exit 1
fi

status=0
for r in 1 2 4; do
  "${mpi[@]}" -n "$r" "$sim" "${common[@]}" --out "$dir/r$r" >/dev/null
  "${mpi[@]}" -n "$r" "$sim" "${common[@]}" "${fedeval[@]}" --only fed-eval-trace --out "$dir/r$r-trace" >/dev/null
  for s in fedavg topk-ef fed-eval-trace; do
    if cmp -s "$dir/alone/$s.csv" "$dir/r$r/$s.csv"; then
      echo "ok: $r ranks, $s: $(($(wc -l <"$dir/r$r/$s.csv") - 1)) rounds identical"
    else
      echo "FAIL: $r ranks, $s differs from one process:"
      diff "$dir/alone/$s.csv" "$dir/r$r/$s.csv" | head -6
      status=1
    fi
  done
  "${mpi[@]}" -n "$r" "$sim" "${common[@]}" "${bounded[@]}" --out "$dir/r$r-bounded" >/dev/null
  for s in topk-ef fed-eval-trace; do
    if cmp -s "$dir/alone-bounded/$s.csv" "$dir/r$r-bounded/$s.csv"; then
      echo "ok: $r ranks, $s drawn with replacement, 6 Learners at most: identical"
    else
      echo "FAIL: $r ranks, $s with sim.learner-clients 6 differs from one process:"
      diff "$dir/alone-bounded/$s.csv" "$dir/r$r-bounded/$s.csv" | head -6
      status=1
    fi
  done
  if cmp -s "$dir/alone-trace/fed-eval-trace.csv" "$dir/r$r-trace/fed-eval-trace.csv"; then
    echo "ok: $r ranks, fed-eval-trace with federated evaluation and availability windows identical"
  else
    echo "FAIL: $r ranks, fed-eval-trace with availability windows differs:"
    diff "$dir/alone-trace/fed-eval-trace.csv" "$dir/r$r-trace/fed-eval-trace.csv" | head -6
    status=1
  fi
done
# The rows are real: rounds committed, accuracy recorded, checksums that change.
rows=$(tail -n +2 "$dir/alone/topk-ef.csv")
[[ $(wc -l <<<"$rows") -ge 5 ]] || { echo "FAIL: fewer than 5 rounds"; status=1; }
[[ $(cut -d, -f36 <<<"$rows" | sort -u | wc -l) -ge 5 ]] || { echo "FAIL: the model checksum did not change every round"; status=1; }
[[ -n $(cut -d, -f7 <<<"$rows" | head -1) ]] || { echo "FAIL: no accuracy"; status=1; }
exit $status
