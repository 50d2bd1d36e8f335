#!/usr/bin/env bash
# starling-client --profile and starling-sim predict from the command line: a profile of
# a small CSV task is written with every figure present and positive, checked with
# Python's json module (independently of the C++ reader); predict reads it, and its
# seconds per round for one client on an idle link equal the profile's figures summed
# by Python; top-k at 10% makes a smaller update than the dense uplink. Then bad
# arguments and files are refused with what is wrong.
# Usage: predict_cli_test.sh STARLING_CLIENT STARLING_SIM
set -u
client=$1
sim=$2
python=/usr/bin/python3
if ! [ -x "$python" ]; then
  echo "skip: no $python"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../cli/check.sh"

"$python" - "$work/data.csv" <<'PY' || exit 1
import random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    f.write("a,b,c,d,label\n")
    for i in range(300):
        x = [rng.gauss(0, 1) for _ in range(4)]
        f.write(",".join(f"{v:.4f}" for v in x) + f",{int(x[0] + x[1] > 0) + int(x[2] > 1)}\n")
PY

profile() {  # profile OUT ARGS...
  local out=$1
  shift
  "$client" --profile "$out" --data "$work/data.csv" --model mlp:hidden:16 --profile-steps 5 --profile-repeats 3 \
    --profile-batches 8,16 --log-level warn "$@"
}
check "profile with the dense uplink" profile "$work/dense.json"
check "profile with top-k at 10% and error feedback" profile "$work/topk.json" --uplink topk --uplink-density 0.1 \
  --error-feedback true
check "the profile is JSON with every figure, units in the keys" "$python" -c "
import json, sys
p = json.load(open('$work/topk.json'))
assert p['format'] == 'starling-profile' and p['model'].startswith('mlp:4-16-3'), p['model']
assert [s['batch'] for s in p['steps']] == [8, 16], p['steps']
assert all(s['step_seconds'] > 0 for s in p['steps'])
for k in ['update_bytes', 'broadcast_bytes', 'params']:
    assert p[k] > 0, k
for k in ['run_overhead_seconds', 'compress_seconds', 'encode_seconds', 'decode_seconds', 'eval_seconds_per_example',
          'load_seconds']:
    assert p[k] >= 0, k
assert p['uplink'] == 'topk' and p['error_feedback'] is True
"
check "top-k at 10% sends a smaller update" "$python" -c "
import json
d, t = (json.load(open('$work/' + n + '.json')) for n in ('dense', 'topk'))
assert d['update_bytes'] >= 4 * d['params'], d
assert t['update_bytes'] * 3 < d['update_bytes'], (t['update_bytes'], d['update_bytes'])
"

# One client, 2 rounds, 1 Mbit/s both ways, 10 ms latency, no sharing: Python sums the
# same figures (256 bytes of frame per message; round 1's assignment has no broadcast,
# and round 1 carries the loading of the client's data).
"$sim" predict --profile "$work/topk.json" --clients 1 --tau 7 --batch-size 16 --rounds 2 --uplink-mbps 1 \
  --downlink-mbps 1 --latency-ms 10 >"$work/predict.txt" 2>"$work/predict.err"
check "predict prints seconds per round" grep -q "^s_per_round=" "$work/predict.txt"
check "predict equals the profile's figures summed" "$python" -c "
import json
p = json.load(open('$work/topk.json'))
link = lambda b: round(10e3 + (b + 256) * 8 / 1) / 1e6
step = [s['step_seconds'] for s in p['steps'] if s['batch'] == 16][0]
client = p['run_overhead_seconds'] + 7 * step + p['compress_seconds'] + p['encode_seconds']
coord = p['decode_seconds'] + p['broadcast_compress_seconds']
r1 = link(0) + p['load_seconds'] + client + link(p['update_bytes']) + coord
r2 = link(p['broadcast_bytes']) + client + link(p['update_bytes']) + coord
got = dict(kv.split('=') for kv in open('$work/predict.txt').read().split())
want = (r1 + r2) / 2
assert abs(float(got['s_per_round']) - want) <= 1e-4 * want + 1e-4, (got['s_per_round'], want)
"
"$sim" predict --profile "$work/topk.json" --clients 30 --tau 7 --cores 2 --rounds 3 >"$work/shared.txt"
"$sim" predict --profile "$work/topk.json" --clients 30 --tau 7 --rounds 3 >"$work/own.txt"
check "thirty clients on two cores take longer than on their own devices" "$python" -c "
v = lambda f: float(open(f).read().split()[0].split('=')[1])
assert v('$work/shared.txt') > 5 * v('$work/own.txt'), (v('$work/shared.txt'), v('$work/own.txt'))
"

check "profile without --model" refuses "--profile needs --model" "$client" --profile "$work/x.json" \
  --data "$work/data.csv"
check "profile without --data" refuses "--profile needs --data" "$client" --profile "$work/x.json" --model linear
check "profile with an unknown compressor" refuses "unknown" "$client" --profile "$work/x.json" \
  --data "$work/data.csv" --model linear --uplink nosuch
check "a client without --coordinator nor --profile" refuses "--coordinator is required" "$client" --id c
sed 's/"update_bytes": [0-9]*/"update_bytes": "many"/' "$work/topk.json" >"$work/bad.json"
line=$(grep -n '"update_bytes"' "$work/bad.json" | cut -d: -f1)
check "a profile with a string for a number" refuses "$work/bad.json:$line: \"update_bytes\" must be a number" "$sim" \
  predict --profile "$work/bad.json"
head -c 100 "$work/topk.json" >"$work/cut.json"
check "a truncated profile" refuses "$work/cut.json:" "$sim" predict --profile "$work/cut.json"
check "a missing profile" refuses "$work/missing.json" "$sim" predict --profile "$work/missing.json"
check "async with overlap" refuses "--overlap is a sync mode" "$sim" predict --profile "$work/topk.json" \
  --mode async --overlap
check "an unknown mode" refuses "--mode" "$sim" predict --profile "$work/topk.json" --mode later

[ "$failures" -eq 0 ]
