#!/usr/bin/env bash
# The coordinator's dashboard (server.http; docs/dashboard.md) on a real federation: a
# coordinator and 3 starling-client processes over mutual TLS.
#  1. Headless Chromium loads the page twice while training runs: the round number
#     advances, participants and connected clients are listed, the plots are drawn; a
#     screenshot is saved. /metrics passes `promtool check metrics`. Hostile HTTP
#     requests (random bytes, bad methods, cut-short and oversized requests) hit the
#     port meanwhile, and the federation still commits every round. An operator
#     certificate is refused as a trainer. `report --html` from the database draws the
#     same plots; its screenshot is saved too.
#  2. With server.http-tls = on: operator-0 gets the state and /metrics over mutual TLS,
#     client-0's certificate gets 403, no certificate and plain HTTP get nothing.
# Screenshots go to $STARLING_SCREENSHOTS (docs/images holds the README's copies).
# Usage: dashboard_test.sh COORDINATOR_BIN CLIENT_BIN [DATA_DIR]
set -u
coord_bin=$1
client_bin=$2
data=${3:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/lib.sh"
checker=$(dirname "$0")/dashboard_check.py
shots=${STARLING_SCREENSHOTS:-$work}
mkdir -p "$shots"
tau=${STARLING_DASHBOARD_TAU:-800}
rounds=${STARLING_DASHBOARD_ROUNDS:-40}

for tool in chromium promtool; do
  if ! command -v "$tool" >/dev/null; then
    echo "skip: no $tool (scripts/setup installs chromium and prometheus)"
    exit 77
  fi
done
browser() {  # browser ARGS... URL: headless Chromium, its noise to a log
  timeout 60 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$work/chromium" \
    --virtual-time-budget=4000 "$@" 2>>"$work/chromium.log"
}

"$coord_bin" init --out "$work/certs" --clients 3 --operators 1 >/dev/null || exit 1

# ---- 1. the page, /metrics and hostile requests while a federation trains ----------
port=""
launch_coordinator dash --model mlp:784-64-10 --clients-per-round 3 --lr 0.05 --test-data "$data" \
  --rounds "$rounds" --tau "$tau" --deadline-ms 60000 --db "$work/dash.db" --http 0 --http-linger-ms 120000 || exit 1
http=$(sed -n 's|.*dashboard on http://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$work/dash.log" | tail -n 1)
require "the coordinator serves the dashboard on a port of its own (--http PORT: on 127.0.0.1)" test -n "$http"
url="http://127.0.0.1:$http"
check "before any client: status waiting, round 0" python3 "$checker" state "$url" status eq waiting
for i in 0 1 2; do start_client "$i" "client-$i.log"; done
require "a round is committed" python3 "$checker" wait "$url" rounds_committed 2 120
# Hostile requests from now on, beside the federation and the browser.
python3 "$checker" fuzz 127.0.0.1 "$http" 600 7 >"$work/fuzz.out" 2>&1 &
fuzz_pid=$!
pids+=("$fuzz_pid")

browser --dump-dom "$url/" >"$work/dom1.html"
check "Chromium: the page shows the round, its participants, connected clients and drawn plots" \
  python3 "$checker" dom "$work/dom1.html" 1
check "the round advances" \
  python3 "$checker" wait "$url" round "$(($(cat "$work/dom1.html.round" 2>/dev/null || echo 0) + 2))" 120
browser --dump-dom "$url/" >"$work/dom2.html"
check "Chromium, a few seconds later: the round number advanced" \
  python3 "$checker" dom "$work/dom2.html" "$(($(cat "$work/dom1.html.round" 2>/dev/null || echo 0) + 1))"
browser --window-size=1280,1900 --screenshot="$shots/dashboard.png" "$url/" >/dev/null
check "Chromium saved a screenshot of the dashboard" test -s "$shots/dashboard.png"

curl_metrics() { python3 -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" "$1"; }
curl_metrics "$url/metrics" >"$work/metrics.txt"
check "/metrics passes promtool check metrics" promtool check metrics <"$work/metrics.txt"
check "/metrics counts committed rounds, connected clients, handshakes and the round-time histogram" \
  python3 - "$work/metrics.txt" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
def value(pattern):
    m = re.search("^" + pattern + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None
want = {
    'starling_rounds_total{status="committed"}': lambda v: v >= 2,
    'starling_clients_connected{role="client"}': lambda v: v == 3,
    'starling_tls_handshakes_total{result="joined"}': lambda v: v >= 3,
    'starling_round_duration_seconds_count': lambda v: v >= 2,
    'starling_test_accuracy': lambda v: 0 < v <= 1,
    'starling_frame_errors_total{kind="malformed"}': lambda v: v == 0,
}
bad = [k for k, ok in want.items() if value(re.escape(k)) is None or not ok(value(re.escape(k)))]
for k in bad:
    print(f"  {k} = {value(re.escape(k))}")
sys.exit(1 if bad else 0)
EOF

wait "$fuzz_pid"
fuzz_status=$?
cat "$work/fuzz.out"
check "hostile HTTP requests during training are answered or dropped; the dashboard still serves" \
  test "$fuzz_status" -eq 0
# An operator certificate trains nothing: refused at Hello, recorded, shown on the page.
"$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id operator-0 --data "$data" \
  --shard 0/3 >"$work/operator-as-client.log" 2>&1 &
operator_pid=$!
pids+=("$operator_pid")
check "an operator certificate cannot join training: the refusal is on the dashboard" \
  python3 "$checker" wait "$url" refused.total 1 60
wait_exit "$operator_pid" 30
operator_status=$?
check "the refused client gives up at once (its role will not change) and exits non-zero" \
  test "$operator_status" -ne 0 -a "$operator_status" -ne 124
check "and says why" grep -q "cannot take part in training" "$work/operator-as-client.log"

check "training completes" wait_for "$work/dash.log" "training complete" 600
check "after training, the dashboard stays up (server.http-linger-ms) and says finished" \
  python3 "$checker" state "$url" status eq finished
kill -TERM "$coord_pid"
wait_exit "$coord_pid" 30
check "a signal ends the lingering dashboard; the coordinator exits 0" test $? -eq 0
check "every round is committed despite the hostile requests" test "$(committed "$work/dash.db")" -eq "$rounds"
check "no connection of the federation was closed for an error" \
  grep -q "stopped: .* 0 dropped" "$work/dash.log"

"$coord_bin" report --db "$work/dash.db" --html "$work/report.html" 2>/dev/null
check "report --html writes a page with the plots and tables" \
  python3 -c "import sys; t=open(sys.argv[1]).read(); sys.exit(0 if t.count('<polyline') >= 8 and \"id='rounds'\" in t and '<script' not in t else 1)" "$work/report.html"
browser --window-size=1280,1500 --screenshot="$shots/report.png" "file://$work/report.html" >/dev/null
check "Chromium saved a screenshot of the HTML report" test -s "$shots/report.png"

# ---- 2. beyond localhost: mutual TLS, operators only ----------------------------------
port=""
launch_coordinator tls --model mlp:784-64-10 --clients-per-round 3 --test-data "$data" --rounds 100 --tau 5 \
  --db "$work/tls.db" --http 127.0.0.1:0 --http-tls on || exit 1
https=$(sed -n 's|.*dashboard on https://127\.0\.0\.1:\([0-9]*\)/.*|\1|p' "$work/tls.log" | tail -n 1)
require "the dashboard listens with TLS" test -n "$https"
check "over TLS: operator-0 is served, client-0 gets 403, no certificate and plain HTTP nothing" \
  python3 "$checker" tls 127.0.0.1 "$https" "$work/certs"
check "the refusal of client-0 is logged" grep -q "dashboard: refused client-0 .*not an operator" "$work/tls.log"
kill "$coord_pid"
wait_exit "$coord_pid" 30 >/dev/null
check "plain HTTP beyond a loopback address is refused at start" \
  refuses "only over TLS to operator certificates" "$coord_bin" run --certs "$work/certs" --db "$work/x.db" \
  --listen 127.0.0.1:0 --http 0.0.0.0:0 --http-tls off
finish
