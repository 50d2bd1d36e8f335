#!/usr/bin/env bash
# A verdict is a promise: a client forgets what it sent when it hears "accepted". This
# test kills the coordinator at named points of closing a round (its hidden
# --test-crash-at switch) and checks, after every restart and the end of training, that
# no client's update was lost or applied twice:
#   for every client, (what the coordinator applied from it) + (its error-feedback
#   memory) == (every difference it computed)                (ALGORITHMS.md §2)
# The coordinator keeps its per-client sums in each round's checkpoint and writes them
# at the end (--test-audit); each client writes its computed sum and its memory.
# Points: aggregated (nothing on disk), mid-persist (inside the round's transaction),
# persisted (on disk, nothing sent), verdict-1..3 (after each verdict of the round) and
# assigning (before the next round's first assignment). Each point is tried
# $STARLING_CRASH_TRIALS times (default 20), at its first or second occurrence after a
# restart (STARLING_CRASH_POINTS="..." tries only those). Two of the three clients close a round (over-selection 1.5) and a round
# starts only with all three (so all three are there at the end): the third is late,
# its update held and applied with the next round while it trains that one, so late
# updates, whose verdicts come with the round that applies them, are crashed on too.
# STARLING_CRASH_MODE=async (or ssp, dssp) runs it in that mode.
# Usage: crash_points_test.sh COORDINATOR_BIN CLIENT_BIN [DATA_DIR]
set -u
coord_bin=$1
client_bin=$2
data=${3:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"
trials=${STARLING_CRASH_TRIALS:-20}
tau=${STARLING_CRASH_TAU:-20}
read -r -a points <<<"${STARLING_CRASH_POINTS:-aggregated mid-persist persisted verdict-1 verdict-2 verdict-3 assigning}"

"$coord_bin" init --out "$work/certs" --clients 3 >/dev/null || exit 1
# A trial commits up to about three rounds before its crash (at the second time a point
# is reached): training must outlast every trial, so that the last restart finishes it.
rounds=$((4 * trials + 6))
task=(--model mlp:784-16-10 --lr 0.05 --tau "$tau" --uplink topk --uplink-density 0.05 --downlink topk
  --downlink-density 0.2 --clients-per-round 2 --over-selection 1.5 --min-clients 3 --max-staleness 3
  --deadline-ms 20000 --rounds "$rounds" --max-norm-ratio 0)
# STARLING_CRASH_MODE=async: the same under buffered asynchronous aggregation (FedBuff:
# the three clients all in flight, a server step every 2 updates, stale ones applied).
[ -n "${STARLING_CRASH_MODE:-}" ] && task+=(--mode "$STARLING_CRASH_MODE")

for point in "${points[@]}"; do
  dir="$work/$point"
  mkdir -p "$dir"
  db="$dir/crash.db"
  log="crash-$point"
  port=""
  crashes=0
  unexpected=0
  launch_coordinator "$log" "${task[@]}" --db "$db" --test-audit "$dir/coordinator.audit" \
    --test-crash-at "$point@1" || exit 1
  for i in 0 1 2; do start_client "$i" "$log-client-$i.log" --test-audit "$dir/client-$i.audit"; done
  for trial in $(seq "$trials"); do
    wait "$coord_pid" 2>/dev/null
    rc=$?
    if [ "$rc" -eq 86 ]; then crashes=$((crashes + 1)); else unexpected=$((unexpected + 1)); fi
    # At the first or the second time the point is reached after this restart.
    launch_coordinator "$log" "${task[@]}" --db "$db" --test-audit "$dir/coordinator.audit" \
      $([ "$trial" -lt "$trials" ] && echo "--test-crash-at $point@$((trial % 2 + 1))") || exit 1
  done
  wait "$coord_pid"
  rc=$?
  # The clients end with the coordinator's goodbye; one that does not within 60 s failed.
  for _ in $(seq 600); do
    running=0
    for i in 0 1 2; do kill -0 "${client_pid[$i]}" 2>/dev/null && running=$((running + 1)); done
    [ "$running" -eq 0 ] && break
    sleep 0.1
  done
  done_ok=0
  for i in 0 1 2; do
    kill -9 "${client_pid[$i]}" 2>/dev/null
    wait "${client_pid[$i]}" && done_ok=$((done_ok + 1))
  done
  rolled=$(cat "$work/$log"-client-*.log | grep -c "was not applied")
  echo "  $point: $crashes crashes, $(committed "$db") rounds committed, $rolled updates rolled back after a restart"
  check "$point: every crash was the test switch's ($crashes of $trials)" test "$crashes" -eq "$trials" -a "$unexpected" -eq 0
  check "$point: training completed after the last restart (coordinator and 3 clients)" \
    test "$rc" -eq 0 -a "$done_ok" -eq 3
  check "$point: applied + memory == computed for every client, nothing applied twice" check_sums "$dir" "$db"
  case $point in
    aggregated | mid-persist)
      check "$point: updates lost with the crash were rolled back by their clients" test "$rolled" -gt 0 ;;
  esac
done
finish
