#!/usr/bin/env bash
# A federation of two architectures (scripts/cross runs it): the x86-64 coordinator and
# an x86-64 starling-client, with a starling-client built for ARM and run under
# qemu-user, over mutual TLS on 127.0.0.1, on Fashion-MNIST shards. The same
# federation with both clients x86-64 runs first, as the baseline.
#
# Checks that the mixed federation completes every round; that the ARM client's copy of
# the model matched the coordinator's bit for bit at every round it was assigned (the
# client checks the checksum the coordinator sends, and says "checksum mismatch"
# otherwise); and compares the committed models' checksums round by round with the
# baseline's. Two clients a round, so the coordinator's sum of their updates is the
# same bits whichever arrives first (floating-point addition commutes; with three it
# would not associate): any difference between the runs is the clients' arithmetic.
#
# Prints besides its checks (for scripts/cross):
#   mixed_checksums_equal=1|0          every committed round's model checksum the same
#   first_differing_round=N            (when 0) the first round whose checksums differ
#   arm_client_peak_rss_kib=N          the ARM client's peak RSS, qemu's own included
#   x86_client_peak_rss_kib=N          the x86-64 client's in the same run
#   coordinator_peak_rss_kib=N
#   mixed_test_accuracy=X baseline_test_accuracy=X   after the last round
# Usage: mixed_arch_test.sh COORDINATOR_BIN CLIENT_BIN ARM_CLIENT_BIN QEMU [DATA_DIR]
# STARLING_BASELINE_CLIENT0: another x86-64 build of starling-client for the baseline's
# client-0 (e.g. one built with the same arithmetic as the ARM one; docs/devices.md).
# STARLING_EXPECT_EQUAL=1: equal checksums are a check (cli-reproducible runs this
# script with the same binary on both sides and `env` for qemu: a two-client
# federation must reproduce bit for bit).
set -u
coord_bin=$1
x86_client=$2
arm_client=$3
qemu=$4
data=${5:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"
rounds=${STARLING_MIXED_ROUNDS:-6}
# Each client holds a tenth of the training set (6,000 images), as a device holds its own.
shards_total=10

"$coord_bin" init --out "$work/certs" --clients 2 >/dev/null || exit 1

# rss_wrapper NAME COMMAND...: a program that runs COMMAND with its arguments and, when
# it exits, writes its peak RSS in KiB (ru_maxrss of the waited-for child) to $work/NAME.rss.
# The child is killed when the wrapper dies (PR_SET_PDEATHSIG), so lib.sh's cleanup,
# which kills the wrappers, leaves nothing running.
rss_wrapper() {
  local name=$1
  shift
  local path="$work/$name-wrapper"
  {
    echo '#!/usr/bin/env bash'
    printf 'exec python3 -c %q %q' \
      'import ctypes, resource, signal, subprocess, sys
die_with_parent = lambda: ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
code = subprocess.call(sys.argv[2:], preexec_fn=die_with_parent)
open(sys.argv[1], "w").write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(code)' "$work/$name.rss"
    printf ' %q' "$@"
    echo ' "$@"'
  } >"$path"
  chmod +x "$path"
  echo "$path"
}

# federation NAME CLIENT0_COMMAND...: coordinator and clients 0 and 1 to the end; true
# when all three exit 0.
federation() {
  local name=$1
  shift
  local coord_real=$coord_bin
  coord_bin=$(rss_wrapper "$name-coordinator" "$coord_real")
  port=""
  launch_coordinator "$name" --model mlp:784-64-10 --clients-per-round 2 --rounds "$rounds" --tau 20 \
    --lr 0.05 --uplink topk --uplink-density 0.05 --downlink topk --downlink-density 0.05 \
    --deadline-ms 600000 --test-data "$data" --db "$work/$name.db" --model-file "$work/$name.model"
  local launched=$?
  coord_bin=$coord_real
  [ $launched -eq 0 ] || return 1
  local saved=$client_bin
  client_bin=$(rss_wrapper "$name-client-0" "$@")
  shards=$shards_total start_client 0 "$name-client-0.log"
  client_bin=$(rss_wrapper "$name-client-1" "$x86_client")
  shards=$shards_total start_client 1 "$name-client-1.log"
  client_bin=$saved
  local ok=0
  wait "$coord_pid" || ok=1
  wait "${client_pid[0]}" || ok=1
  wait "${client_pid[1]}" || ok=1
  return $ok
}

# checksums DB: "round checksum" per committed round.
checksums() {
  "$coord_bin" report --db "$1" --format json | python3 -c '
import json, sys
for r in json.load(sys.stdin)["rounds"]:
    if r["status"] == "committed":
        print(r["round"], r["model_checksum"])'
}

# accuracy DB: the test metric of the last round that has one.
accuracy() {
  "$coord_bin" report --db "$1" --format json | python3 -c '
import json, sys
values = [r["test_accuracy"] for r in json.load(sys.stdin)["rounds"] if r.get("test_accuracy") is not None]
print(f"{values[-1]:.4f}" if values else "nan")'
}

client_bin=$x86_client
echo "# baseline: both clients x86-64"
check "the all-x86 federation completes" federation x86 "${STARLING_BASELINE_CLIENT0:-$x86_client}"
echo "# mixed: client-0 is the ARM build under $qemu"
require "the mixed federation completes (ARM client-0 under qemu)" federation mixed "$qemu" "$arm_client"
check "the mixed federation committed all $rounds rounds" test "$(committed "$work/mixed.db")" -eq "$rounds"
arm_accepted=$(sed -n 's/.*training complete.* \([0-9]*\) accepted.*/\1/p' "$work/mixed-client-0.log" | tail -n 1)
check "the ARM client's update was accepted in every round (${arm_accepted:-0} of $rounds)" test "${arm_accepted:-0}" -eq "$rounds"
check "the ARM client's model matched the coordinator's at every round (no checksum mismatch)" \
  bash -c "! grep -q 'checksum mismatch' '$work/mixed-client-0.log'"

checksums "$work/x86.db" >"$work/x86.sums"
checksums "$work/mixed.db" >"$work/mixed.sums"
equal=0
cmp -s "$work/x86.sums" "$work/mixed.sums" && test -s "$work/mixed.sums" && equal=1
echo "  round checksum (all-x86) checksum (mixed):"
join "$work/x86.sums" "$work/mixed.sums" | sed 's/^/    /'
echo "mixed_checksums_equal=$equal"
if [ -n "${STARLING_EXPECT_EQUAL:-}" ]; then
  check "every committed round's model checksum is the baseline's" test "$equal" -eq 1
fi
if [ $equal -eq 0 ]; then
  echo "first_differing_round=$(join "$work/x86.sums" "$work/mixed.sums" | awk '$2 != $3 { print $1; exit }')"
fi
# How far apart the two final models are (the model file: magic, version, spec, count,
# little-endian floats, checksum).
python3 - "$work/x86.model" "$work/mixed.model" <<'EOF'
import struct, sys
def weights(path):
    raw = open(path, "rb").read()
    spec_len = struct.unpack_from("<I", raw, 12)[0]
    count = struct.unpack_from("<Q", raw, 16 + spec_len)[0]
    return struct.unpack_from(f"<{count}f", raw, 24 + spec_len)
a, b = weights(sys.argv[1]), weights(sys.argv[2])
diff = max(abs(x - y) for x, y in zip(a, b))
differing = sum(x != y for x, y in zip(a, b))
print(f"final_model_max_abs_diff={diff:.3g} final_model_max_abs={max(abs(x) for x in a):.3g} "
      f"final_model_weights_differing={differing}/{len(a)}")
EOF
echo "arm_client_peak_rss_kib=$(cat "$work/mixed-client-0.rss" 2>/dev/null || echo 0)"
echo "x86_client_peak_rss_kib=$(cat "$work/mixed-client-1.rss" 2>/dev/null || echo 0)"
echo "coordinator_peak_rss_kib=$(cat "$work/mixed-coordinator.rss" 2>/dev/null || echo 0)"
echo "mixed_test_accuracy=$(accuracy "$work/mixed.db") baseline_test_accuracy=$(accuracy "$work/x86.db")"
finish
