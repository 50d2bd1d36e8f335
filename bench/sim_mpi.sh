#!/usr/bin/env bash
# bench/sim_mpi.sh: starling-sim with 1 and 2 MPI ranks on bench/sim_mpi.toml (training
# dominates): rounds per second of each, median of RUNS runs each, alternating, and
# whether every round's row (model checksum, bytes, accuracy) is the same bytes; then a
# million clients (below).
#   bench/sim_mpi.sh STARLING_SIM [RUNS]    (scripts/bench scale runs it; RUNS 0: the million only)
set -euo pipefail
sim=$1
runs=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
command -v mpirun >/dev/null || { echo "bench/sim_mpi.sh: mpirun is missing (scripts/setup installs openmpi-bin)" >&2; exit 1; }
mpi=(mpirun)
[[ $(id -u) == 0 ]] && mpi+=(--allow-run-as-root)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Rounds per second of a run: every strategy's rounds over their wall seconds (wall.txt:
# the event loops only, not the data loading), and over rank 0's CPU seconds. On a busy
# machine the wall rate measures the share the scheduler gave the run (with autogroup
# scheduling all ranks of one mpirun share one); rank 0 does the serial work and its
# share of the training and sleeps while it waits, so its CPU rate is the rate an idle
# machine would give.
rate() { awk 'NR > 1 { n += $2; s += $3 } END { printf "%.4f", n / s }' "$1/wall.txt"; }
cpurate() { awk 'NR > 1 { n += $2; s += $4 } END { printf "%.4f", n / s }' "$1/wall.txt"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

identical=1
one=() two=() cpu1=() cpu2=()
[[ $runs -gt 0 ]] && printf '%-4s %-6s %12s %10s %16s %s\n' run ranks rounds/s wall_s "rounds/cpu-s r0" "load (1 min)"
for k in $(seq 1 "$runs"); do
  for r in 1 2; do
    dir=$out/r$r-$k
    load=$(cut -d' ' -f1 /proc/loadavg)
    if [[ $r == 1 ]]; then
      "$sim" --config "$here/sim_mpi.toml" --out "$dir" --quiet 2>&1 >/dev/null | { grep -v "^wrote " >&2 || true; }
    else
      "${mpi[@]}" -n "$r" "$sim" --config "$here/sim_mpi.toml" --out "$dir" --quiet 2>&1 >/dev/null | { grep -v "^wrote " >&2 || true; }
    fi
    v=$(rate "$dir")
    c=$(cpurate "$dir")
    printf '%-4s %-6s %12s %10s %16s %s\n' "$k" "$r" "$v" "$(awk 'NR > 1 { s += $3 } END { printf "%.1f", s }' "$dir/wall.txt")" \
      "$c" "$load"
    if [[ $r == 1 ]]; then
      one+=("$v")
      cpu1+=("$c")
    else
      two+=("$v")
      cpu2+=("$c")
    fi
    for csv in "$out/r1-1"/*.csv; do
      cmp -s "$csv" "$dir/$(basename "$csv")" || identical=0
    done
  done
done
mpi_keys="mpi_identical=- mpi_speedup_2=- mpi_speedup_2_cpu=-"  # RUNS=0: the million-client run only
if [[ $runs -gt 0 ]]; then
  m1=$(printf '%s\n' "${one[@]}" | median)
  m2=$(printf '%s\n' "${two[@]}" | median)
  c1=$(printf '%s\n' "${cpu1[@]}" | median)
  c2=$(printf '%s\n' "${cpu2[@]}" | median)
  speedup=$(awk -v a="$m1" -v b="$m2" 'BEGIN { printf "%.2f", b / a }')
  cpuspeedup=$(awk -v a="$c1" -v b="$c2" 'BEGIN { printf "%.2f", b / a }')
  echo "median rounds/s: 1 rank $m1, 2 ranks $m2; per CPU-second of rank 0: $c1, $c2" \
    "($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  mpi_keys="mpi_identical=$identical mpi_speedup_2=$speedup mpi_speedup_2_cpu=$cpuspeedup"
fi

# A million clients (docs/simulation.md, "A million clients"): the same config with
# 1,000,000 clients, each drawing 32 examples with replacement (dirichlet 0.5), 100 a
# round, FedAvg for 3 rounds, under mpirun -n 2. Peak RSS: /usr/bin/time's maximum
# resident set of each rank, summed; seconds per round: the event loop's wall time
# (wall.txt: after the fleet is built and the clients have joined) over its rounds.
# Bytes per idle client: one process, 1 round, at 1,000,000 and at 10,000 clients:
# (peak RSS at 1M - peak RSS at 10k) / 990,000.
[[ -x /usr/bin/time ]] || { echo "bench/sim_mpi.sh: /usr/bin/time is missing (Debian's 'time')" >&2; exit 1; }
million=(--config "$here/sim_mpi.toml" --rounds 3 --only fedavg-fp32 --quiet)
# Runs COMMAND... under /usr/bin/time, writing its peak RSS in KiB to FILE.RANK.
timed() { local file=$1; shift; /usr/bin/time -f %M -o "$file.${OMPI_COMM_WORLD_RANK:-0}" "$@"; }
export -f timed
kib() { awk '{ s += $1 } END { print s }' "$@"; }
"${mpi[@]}" -n 2 bash -c 'timed "$@"' _ "$out/m2-rss" "$sim" "${million[@]}" --clients 1000000 --out "$out/m2" \
  2>&1 >/dev/null | { grep -v "^wrote " >&2 || true; }
rss2=$(kib "$out"/m2-rss.*)
rounds2=$(awk 'NR > 1 { n += $2; s += $3 } END { printf "%.2f", s / n }' "$out/m2/wall.txt")
rss_gib=$(awk -v k="$rss2" 'BEGIN { printf "%.2f", k / 1048576 }')
idle=(--config "$here/sim_mpi.toml" --rounds 1 --only fedavg-fp32 --quiet)
timed "$out/i1m-rss" "$sim" "${idle[@]}" --clients 1000000 --out "$out/i1m" 2>&1 >/dev/null | { grep -v "^wrote " >&2 || true; }
timed "$out/i10k-rss" "$sim" "${idle[@]}" --clients 10000 --out "$out/i10k" 2>&1 >/dev/null | { grep -v "^wrote " >&2 || true; }
big=$(kib "$out/i1m-rss.0")
small=$(kib "$out/i10k-rss.0")
per_idle=$(awk -v a="$big" -v b="$small" 'BEGIN { printf "%.0f", (a - b) * 1024 / 990000 }')
cpu2=$(awk 'NR > 1 { n += $2; s += $4 } END { printf "%.2f", s / n }' "$out/m2/wall.txt")
echo "1M clients, 2 ranks: peak RSS $rss2 KiB in all ($(cat "$out"/m2-rss.* | paste -sd' ') KiB per rank)," \
  "$rounds2 s a round ($(awk 'NR > 1 { print $2 " rounds, " $3 " s wall, " $4 " s CPU of rank 0" }' "$out/m2/wall.txt"));" \
  "one process, 1 round: $big KiB at 1M clients, $small KiB at 10k"
echo "summary: $mpi_keys sim_1m_rss_gib=$rss_gib sim_1m_s_per_round=$rounds2 sim_1m_cpu_s_per_round=$cpu2 sim_idle_client_bytes=$per_idle"
