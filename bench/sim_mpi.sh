#!/usr/bin/env bash
# bench/sim_mpi.sh: starling-sim with 1 and 2 MPI ranks on bench/sim_mpi.toml (training
# dominates): rounds per second of each, median of RUNS runs each, alternating, and
# whether every round's row (model checksum, bytes, accuracy) is the same bytes.
#   bench/sim_mpi.sh STARLING_SIM [RUNS]    (scripts/bench scale runs it)
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
# the event loops only, not the data loading).
rate() { awk 'NR > 1 { n += $2; s += $3 } END { printf "%.4f", n / s }' "$1/wall.txt"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

identical=1
one=() two=()
printf '%-4s %-6s %12s %10s %s\n' run ranks rounds/s wall_s "load (1 min)"
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
    printf '%-4s %-6s %12s %10s %s\n' "$k" "$r" "$v" "$(awk 'NR > 1 { s += $3 } END { printf "%.1f", s }' "$dir/wall.txt")" "$load"
    if [[ $r == 1 ]]; then one+=("$v"); else two+=("$v"); fi
    for csv in "$out/r1-1"/*.csv; do
      cmp -s "$csv" "$dir/$(basename "$csv")" || identical=0
    done
  done
done
m1=$(printf '%s\n' "${one[@]}" | median)
m2=$(printf '%s\n' "${two[@]}" | median)
speedup=$(awk -v a="$m1" -v b="$m2" 'BEGIN { printf "%.2f", b / a }')
echo "median rounds/s: 1 rank $m1, 2 ranks $m2 ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
echo "summary: mpi_identical=$identical mpi_speedup_2=$speedup"
