#!/usr/bin/env bash
# bench/scale.sh: every measurement of the scale goals in one run, one summary line
# (scripts/bench scale runs it; docs/transport.md, docs/simulation.md, docs/predict.md):
#   1. starling-sim on 1 and 2 MPI ranks, and a population of 1,000,000 clients (bench/sim_mpi.sh);
#   2. TLS: full and resumed handshakes beside openssl s_server, bulk beside the AEADs (bench-transport);
#   3. 10,000 connections on one coordinator, then SIGKILL, restart and a reconnect storm (bench-soak);
#   4. round time predicted from one device's profile against real processes (bench/predict.sh).
# Each part prints its own table and summary line as it goes; the last line gathers their keys.
#   bench/scale.sh BUILD_DIR [--quick]
# --quick shortens the parts that take minutes (2,000 connections for 3 minutes, one MPI run each) to
# check the pipeline; the goals are judged on a run without it.
set -euo pipefail
build=$1
quick=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

runs=3
# 10,000 connections that stay (no churn), a small model so the load generator holds them
# in one process, connecting over 4 minutes (full handshakes), then the storm.
soak=(--clients 10000 --minutes 10 --steady --storm --model linear:784-10 --group-size 100 --ramp-s 240)
if [[ $quick == --quick ]]; then
  runs=1
  soak=(--clients 2000 --minutes 3 --steady --storm --model linear:784-10 --group-size 100 --ramp-s 90)
fi

part() {  # part NAME COMMAND...: runs a part, keeps its output, never stops the others
  local name=$1
  shift
  echo "== scale: $name ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))"
  "$@" 2>&1 | tee "$logs/$name.txt" || echo "bench/scale.sh: $name failed (exit ${PIPESTATUS[0]})" >&2
}
part mpi "$here/sim_mpi.sh" "$build/tests/harness/starling-sim" "$runs"
part transport "$build/bench/bench-transport"
part soak "$build/bench/bench-soak" "${soak[@]}"
part predict "$here/predict.sh" "$build"

# A key's value from the last summary line of a part that printed it, or "-".
value() {
  local v
  v=$(sed -n "s/^summary:.*[ :]$1=\([^ ]*\).*/\1/p" "$logs/$2.txt" 2>/dev/null | tail -n 1)
  echo "${v:--}"
}
line="summary:"
for key in mpi_identical mpi_speedup_2 sim_1m_rss_gib sim_1m_s_per_round; do line+=" $key=$(value $key mpi)"; done
for key in handshakes_per_s openssl_handshakes_per_s resumed_per_s tls_mb_s mbedtls_gcm_mb_s openssl_gcm_mb_s; do
  line+=" $key=$(value $key transport)"
done
for key in soak10k_rss_growth kib_per_idle_conn storm10k_recover_s rounds_lost; do line+=" $key=$(value $key soak)"; done
for key in predict_median_err predict_max_err; do line+=" $key=$(value $key predict)"; done
echo "$line"
