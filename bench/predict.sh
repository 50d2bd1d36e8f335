#!/usr/bin/env bash
# bench/predict.sh BUILD_DIR [--clients "10 30"] [--tau T] [--rounds R] [--data DIR] [--keep DIR]
#
# Round-time prediction against measured runs (docs/predict.md): profiles this machine
# with `starling-client --profile` for the run's compression setting just before each
# run (the CPU a step costs moves with what shares the machine's caches), twice: client 0
# alone, and the run's N clients at once (their mean), and measures a committed round's
# record on disk (bench-store) and the TLS CPU per byte (bench-transport); runs bench-federation
# (real coordinator and client processes on loopback) with 10 and 30 clients, sync and
# async, and compares its seconds per round with `starling-sim predict` for the same
# federation, from each profile (the summary's errors are the shared profile's). The
# clients share this machine's cores with whatever else runs on it: the CPU the other
# process groups used during each run is measured (bench/predict_load.py) and predict
# is given the cores left (--cores). --keep DIR keeps each run's profile and
# bench-federation log there. Prints a table and
#   summary: predict_median_err=... predict_max_err=...
# Every run is bounded (rounds, bench-federation --timeout).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: bench/predict.sh BUILD_DIR [--clients "10 30"] [--tau T] [--rounds R] [--data DIR] [--keep DIR]}
shift
clients_list="10 30"
tau=100
rounds=4
data=/usr/share/datasets/fashion-mnist
keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --clients) clients_list=$2; shift 2 ;;
    --tau) tau=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    *) echo "bench/predict.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
client=$build/client/starling-client
sim=$build/tests/harness/starling-sim
fed=$build/bench/bench-federation
transport=$build/bench/bench-transport
store=$build/bench/bench-store
for b in "$client" "$sim" "$fed" "$transport" "$store"; do
  [ -x "$b" ] || { echo "bench/predict.sh: $b is not built" >&2; exit 1; }
done
work=$(mktemp -d /tmp/starling-predict-XXXXXX)
trap 'rm -rf "$work"' EXIT
buffer=5  # bench-federation's async buffer (--hetero-buffer)
batch=32  # bench-federation's minibatch
eval_examples=10000  # the coordinator evaluates the test set every round
# Loopback over TLS: about 3.6 Gbit/s of wall-clock bandwidth, and each end spends CPU
# on every byte: the TLS record layer with the suite negotiated here, the cipher, the
# socket and the copies, measured now by bench-transport --wire-cpu (1 MiB frames, the
# busier end's CPU per byte; docs/transport.md).
wire_ns=$("$transport" --wire-cpu | sed -n 's/^summary: wire_cpu_ns_per_byte=\([0-9.]*\).*/\1/p')
[ -n "$wire_ns" ] || { echo "bench/predict.sh: bench-transport --wire-cpu printed no figure" >&2; exit 1; }
echo "TLS CPU per byte at each end, measured now: $wire_ns ns"
link="--uplink-mbps 3600 --downlink-mbps 3600 --coordinator-mbps 3600 --latency-ms 0.05 --wire-cpu-ns-per-byte $wire_ns"
# The coordinator records each committed round (SQLite, durable) before the next
# assignments leave: measured now by bench-store on the disk bench-federation's databases
# go to, for the MLP's checkpoint (fedavg) and with the server's error-feedback memory
# beside it (full).
declare -A store_ms
store_ms[fedavg]=$("$store" --params 199210 | sed -n 's/^summary: store_commit_ms=\([0-9.]*\).*/\1/p')
store_ms[full]=$("$store" --params 199210 --server-memory | sed -n 's/^summary: store_commit_ms=\([0-9.]*\).*/\1/p')
[ -n "${store_ms[fedavg]}" ] && [ -n "${store_ms[full]}" ] || { echo "bench/predict.sh: bench-store printed no figure" >&2; exit 1; }
echo "A committed round's record on disk, measured now: ${store_ms[fedavg]} ms (fedavg), ${store_ms[full]} ms (full)"

# The two compression settings of bench-federation: fedavg (identity, fp32) and full
# (top-k-sampled 7.2% up, top-k 4.8% down, ternary values, error feedback).
# The profile reads the data as bench-federation's clients do: inflated (bench-federation
# inflates the gzipped files once), client 0's shard of the run's N, so that its
# load_seconds is what a client's load costs.
mkdir -p "$work/data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  if [ -f "$data/$f" ]; then cp "$data/$f" "$work/data/$f"; else gzip -dc "$data/$f.gz" >"$work/data/$f"; fi
done
profile() {  # profile SETTING CLIENTS OUT [COPIES]: COPIES profiles at once (1 = alone), OUT their mean
  local flags=() pids=() i
  [ "$1" = full ] && flags=(--uplink topk-sampled --uplink-density 0.072 --uplink-ternary true --downlink topk
    --downlink-density 0.048 --downlink-ternary true --fp16-values true --error-feedback true)
  for ((i = 0; i < ${4:-1}; i++)); do
    "$client" --profile "$3.$i" --data "$work/data" --shard "$i/$2" --model mlp:784-200-200-10 "${flags[@]}" \
      --log-level warn &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || return 1; done
  # The mean of the copies' figures (each measured a step of the same model on its own
  # shard): one profile's figures move by several percent from copy to copy.
  /usr/bin/python3 - "$3" "$3".* <<'PY'
import json, sys
out, paths = sys.argv[1], sorted(sys.argv[2:])
profiles = [json.load(open(p)) for p in paths]
mean = dict(profiles[0])
for key, value in mean.items():
    if "seconds" in key and isinstance(value, float):
        mean[key] = sum(p[key] for p in profiles) / len(profiles)
for i, step in enumerate(mean["steps"]):
    mean["steps"][i] = dict(step, step_seconds=sum(p["steps"][i]["step_seconds"] for p in profiles) / len(profiles))
json.dump(mean, open(out, "w"), indent=2)
PY
  rm -f "$3".*
}

# load1: the machine's 1-minute load average when the run ended (everyone's runnable
# tasks, the federation's included), to tell a quiet run from a busy one.
printf '%-8s %-6s %-6s %7s %10s %11s %11s %7s %11s %7s %6s\n' clients comp mode rounds cores_left measured_s \
  alone_s alone_err predicted_s err load1
errs=()
for n in $clients_list; do
  for comp in fedavg full; do
    for mode in sync async; do
      r=$rounds
      # Async rounds are server steps of $buffer updates: two passes of the fleet.
      [ "$mode" = async ] && r=$((2 * n / buffer))
      log=$work/$n-$comp-$mode.log
      # Two profiles: client 0's alone, and the mean of the run's N clients profiling at
      # the same time on the same cores, as they will train (a step's CPU grows when the
      # processes take turns on a core and evict each other's caches).
      profile "$comp" "$n" "$work/$n-$comp-$mode-alone.json" 1
      profile "$comp" "$n" "$work/$n-$comp-$mode.json" "$n"
      "$fed" --only "$comp-iid" --clients "$n" --rounds "$r" --tau "$tau" --full-tau "$tau" --mode "$mode" \
        --timeout 600 >/dev/null 2>"$log" &
      left=$(/usr/bin/python3 "$here/predict_load.py" $!)
      wait $! || true
      load1=$(cut -d' ' -f1 /proc/loadavg)
      measured=$(sed -n 's/.* \([0-9.]*\) s per round.*/\1/p' "$log" | tail -n 1)
      if [ -z "$measured" ]; then
        echo "bench/predict.sh: $n clients, $comp, $mode: the run failed:" >&2
        tail -n 5 "$log" >&2
        continue
      fi
      predict() {  # predict PROFILE
        # shellcheck disable=SC2086
        "$sim" predict --profile "$1" --clients "$n" --tau "$tau" --batch-size "$batch" --rounds "$r" --mode "$mode" \
          --buffer-size "$buffer" --cores "$left" --eval-examples "$eval_examples" --store-ms "${store_ms[$comp]}" $link |
          sed -n 's/^s_per_round=\([^ ]*\).*/\1/p'
      }
      relerr() { awk -v p="$1" -v m="$measured" 'BEGIN { e = (p - m) / m; printf "%.3f", e < 0 ? -e : e }'; }
      alone=$(predict "$work/$n-$comp-$mode-alone.json")
      predicted=$(predict "$work/$n-$comp-$mode.json")
      [ -n "$keep" ] && mkdir -p "$keep" &&
        cp "$log" "$work/$n-$comp-$mode.json" "$work/$n-$comp-$mode-alone.json" "$keep/"
      err=$(relerr "$predicted")
      errs+=("$err")
      printf '%-8s %-6s %-6s %7s %10s %11s %11s %7s %11s %7s %6s\n' "$n" "$comp" "$mode" "$r" "$left" "$measured" \
        "$alone" "$(relerr "$alone")" "$predicted" "$err" "$load1"
    done
  done
done
[ ${#errs[@]} -gt 0 ] || { echo "summary: predict_median_err=- predict_max_err=-"; exit 1; }
printf '%s\n' "${errs[@]}" | sort -g | awk '{ v[NR] = $1 } END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "summary: predict_median_err=%.3f predict_max_err=%.3f\n", m, v[NR] }'
