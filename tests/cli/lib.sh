# Shared by the real-process tests in tests/cli (sourced, not run). The caller sets
# coord_bin, client_bin and data; this makes $work, kills every started process on
# exit, and provides:
#   check NAME COMMAND...       (check.sh) runs COMMAND, prints "ok   - NAME" or "FAIL - NAME"
#   require NAME COMMAND...     check, and when it fails stop the test there (finish: the logs,
#                               exit 1): for expectations the rest of a test depends on
#   launch_coordinator LOG ARGS...  `run --certs $work/certs --listen 127.0.0.1:${port:-0} ARGS`,
#                                    output to $work/LOG.log; waits for the port, sets coord_pid and port
#   start_client I LOG [ARGS...]  client-I on shard I/${shards:-3}, sets client_pid[I]
#   wait_for FILE PATTERN SECONDS  true once grep finds PATTERN in FILE
#   wait_exit PID SECONDS       waits for PID (a child) to exit, returns its status; 124 and a
#                               line saying so when it still runs after SECONDS
#   committed DB                prints the number of committed rounds in DB's report
#   integrity_ok DB             true when PRAGMA integrity_check says ok
#   check_sums DIR DB           the uplink memory's invariant from the --test-audit files of the
#                               coordinator and client-0..2 in DIR, and no update applied twice in DB
#   regression_csv SEED N       N rows "a,b,c,target", y = 2 a - b + 0.5 c + noise (sd about 0.05)
#   community_libsvm SEED N C    N libsvm examples of feature community C (below)
#   finish                      prints the logs when a check failed; exits 0 or 1
# STARLING_KEEP_WORK=1 keeps $work (logs, databases) for a look afterwards.
if [ "${needs_fashion_mnist:-1}" = 1 ] && [ ! -f "$data/t10k-labels-idx1-ubyte.gz" ] && [ ! -f "$data/t10k-labels-idx1-ubyte" ]; then
  echo "skip: no Fashion-MNIST in $data (scripts/setup installs dataset-fashion-mnist)"
  exit 77
fi
work=$(mktemp -d)
pids=()
cleanup_hooks=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for h in "${cleanup_hooks[@]}"; do eval "$h"; done
  if [ -n "${STARLING_KEEP_WORK:-}" ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
declare -a client_pid

source "$(dirname "${BASH_SOURCE[0]}")/check.sh"

launch_coordinator() {
  local name=$1
  shift
  # The log may hold earlier runs: wait for one more "listening on" line than it has.
  local before
  before=$(grep -c "listening on" "$work/$name.log" 2>/dev/null)
  "$coord_bin" run --certs "$work/certs" --listen "127.0.0.1:${port:-0}" "$@" >>"$work/$name.log" 2>&1 &
  coord_pid=$!
  pids+=("$coord_pid")
  for _ in $(seq 400); do
    local p=""
    if [ "$(grep -c "listening on" "$work/$name.log" 2>/dev/null)" -gt "${before:-0}" ]; then
      p=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/$name.log" | tail -n 1)
    fi
    if [ -n "$p" ]; then
      port=$p
      return 0
    fi
    kill -0 "$coord_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "coordinator did not start:"
  cat "$work/$name.log"
  return 1
}

start_client() {
  local i=$1 log=$2
  shift 2
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$i" --data "$data" \
    --shard "$i/${shards:-3}" --seed "$i" "$@" >>"$work/$log" 2>&1 &
  client_pid[$i]=$!
  pids+=("${client_pid[$i]}")
}

wait_for() {
  for _ in $(seq $(($3 * 10))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

wait_exit() {
  local pid=$1 limit=$2
  for _ in $(seq $((limit * 10))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      return
    fi
    sleep 0.1
  done
  echo "  process $pid still running after $limit s"
  return 124
}

committed() {
  "$coord_bin" report --db "$1" --format csv | grep -c ',committed,'
}

integrity_ok() {
  python3 -c "import sqlite3,sys; c=sqlite3.connect('file:$1?mode=ro', uri=True); sys.exit(0 if c.execute('pragma integrity_check').fetchone()[0]=='ok' else 1)"
}

# check_sums DIR DB: (applied + memory == computed) for client-0..2 from DIR/coordinator.audit and
# DIR/client-I.audit, and no (client, round) applied twice in DB.
check_sums() {
  python3 - "$1" "$2" <<'EOF'
import sqlite3, sys
d, db = sys.argv[1], sys.argv[2]
applied = {}
for line in open(f"{d}/coordinator.audit"):
    f = line.split()
    applied[f[0]] = [float(x) for x in f[1:]]
bad = 0
for i in range(3):
    rows = dict((l.split()[0], [float(x) for x in l.split()[1:]]) for l in open(f"{d}/client-{i}.audit"))
    comp, mem = rows["computed"], rows["memory"]
    app = applied.get(f"client-{i}", [0.0] * len(comp))
    scale = max(1.0, max(abs(x) for x in comp))
    worst = max(abs(a + m - c) for a, m, c in zip(app, mem, comp))
    print(f"  client-{i}: max |applied + memory - computed| = {worst:.3g} (largest |computed| {scale:.3g})")
    if worst > 1e-4 * scale:
        bad += 1
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
# A participant row names the round its update was for; an update applied on time and
# again late would have two rows.
twice = c.execute("""select count(*) from (select client_id, round from participants
                     where outcome in ('accepted', 'late-applied')
                     group by client_id, round having count(*) > 1)""").fetchone()[0]
print(f"  updates applied twice: {twice}")
sys.exit(1 if bad or twice else 0)
EOF
}

regression_csv() {
  awk -v seed="$1" -v n="$2" 'BEGIN { srand(seed); print "a,b,c,target";
    for (i = 0; i < n; i++) { a = rand() * 2 - 1; b = rand() * 2 - 1; c = rand() * 2 - 1;
      e = (rand() + rand() + rand() - 1.5) * 0.1;
      printf "%.5f,%.5f,%.5f,%.5f\n", a, b, c, 2 * a - b + 0.5 * c + e } }'
}

# community_libsvm SEED N COMMUNITY: N libsvm lines of a sparse binary task in which
# community c's examples hold 8 features of its own block [1 + 2000 c, 2000 + 2000 c]
# and 1 of 20 shared ones; the label is the parity of the smallest block feature. The
# first line of each file ends with "4096:0" (every file 4,096 features wide).
community_libsvm() {  # SEED N COMMUNITY
  awk -v seed="$1" -v n="$2" -v c="$3" 'BEGIN { srand(seed);
    for (i = 0; i < n; i++) {
      m = 0; line = "";
      for (k = 0; k < 8; k++) { j = 1 + 2000 * c + int(rand() * rand() * 2000);
        dup = 0; for (q = 1; q <= m; q++) if (a[q] == j) dup = 1;
        if (!dup) { m++; a[m] = j } }
      for (p = 2; p <= m; p++) { v = a[p]; q = p - 1; while (q >= 1 && a[q] > v) { a[q + 1] = a[q]; q-- } a[q + 1] = v }
      s = 4001 + int(rand() * 20); lo = a[1];
      for (q = 1; q <= m; q++) line = line " " a[q] ":1";
      line = line " " s ":1";
      if (i == 0) line = line " 4096:0";
      print (lo % 2 == 0 ? "+1" : "-1") line } }'
}

require() {
  local before=$failures
  check "$@"
  if [ "$failures" -ne "$before" ]; then
    echo "stopping: the rest of the test depends on '$1' ($SECONDS s into the test)"
    finish
  fi
}

finish() {
  if [ $failures -ne 0 ]; then
    for f in "$work"/*.log; do
      echo "--- $f"
      tail -n 30 "$f"
    done
  fi
  exit $((failures > 0))
}
