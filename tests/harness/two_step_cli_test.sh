#!/usr/bin/env bash
# starling-sim two-step on a LIBSVM file, checked with Python sets, independently of the
# C++ code: a data set of 4 topics (each example draws most of its words from its
# topic's vocabulary) on 4 workers and 3 servers; the dumped placement of every
# combination is recounted from the file (rows a worker touches, (worker, server)
# pairs, bytes per iteration) and must equal the printed table; METIS/METIS moves at
# least 2x fewer bytes than random/hash; top-k pushes fewer rows. Then bad arguments
# and files are refused with what is wrong.
# Usage: two_step_cli_test.sh STARLING_SIM
set -u
sim=$1
python=/usr/bin/python3
if ! [ -x "$python" ]; then
  echo "skip: no $python"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/../cli/check.sh"

"$python" - "$work/topics.libsvm" <<'PY' || exit 1
import random, sys
rng = random.Random(5)
lines = []
for i in range(400):
    topic = i % 4
    words = set()
    for _ in range(20):
        if rng.random() < 0.95:
            words.add(1 + topic * 400 + rng.randrange(400))  # the topic's words
        else:
            words.add(1601 + rng.randrange(100))  # shared words
    label = "+1" if (topic + (rng.random() < 0.2)) % 2 else "-1"
    lines.append(label + " " + " ".join(f"{w}:1" for w in sorted(words)))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY

# verify TABLE DUMP ITERATIONS DENSITY: every combination's row of TABLE equals the
# recount of DUMP against the data file.
verify() {
  "$python" - "$work/topics.libsvm" "$1" "$2" "$3" "$4" <<'PY'
import sys
data_file, table_file, dump_file, iterations, density = sys.argv[1:]
iterations, density = int(iterations), float(density)
examples = []
for line in open(data_file):
    parts = line.split()
    examples.append({int(p.split(":")[0]) - 1 for p in parts[1:] if float(p.split(":")[1]) != 0})
table = {}
for line in open(table_file):
    p = line.split()
    if len(p) == 13 and p[0] in ("random", "metis"):
        table[(p[0], p[1])] = p
combos, current = {}, None
for line in open(dump_file):
    p = line.split()
    if p[0] == "combination":
        current = combos.setdefault((p[1], p[2]), {"worker": {}, "row": {}, "moves": {}})
    elif p[0] == "worker":
        current["worker"][int(p[1])] = int(p[2])
    elif p[0] == "row":
        current["row"][int(p[1])] = int(p[2])
    else:
        current["moves"][int(p[1])] = {int(a): (int(b), int(c)) for a, b, c in (x.split(":") for x in p[2:])}
assert set(combos) == set(table) and len(combos) == 6, (sorted(combos), sorted(table))
traffic = {}
for key, c in combos.items():
    assert sorted(c["worker"]) == list(range(len(examples))), "every example on one worker"
    touched = {}
    for i, w in c["worker"].items():
        touched.setdefault(w, set()).update(examples[i])
    assert set(c["row"]) == set().union(*touched.values()), "every touched row on one server"
    pairs, total, pulls, pushes = 0, 0.0, 0, 0
    for w, rows in touched.items():
        moves = c["moves"].get(w, {})
        assert set(moves) <= rows, "a worker moves only its rows"
        if density == 0:
            assert set(moves) == rows and all(m == (iterations, iterations) for m in moves.values())
        for s in {c["row"][r] for r in rows}:
            moved = sum(sum(moves.get(r, (0, 0))) for r in rows if c["row"][r] == s)
            pairs += 1
            total += moved / iterations * 8 + 2 * 64
        pulls += sum(m[0] for m in moves.values())
        pushes += sum(m[1] for m in moves.values())
    row = table[key]
    assert int(row[5]) == pairs, (key, row, pairs)
    assert abs(float(row[4]) - total / 1e6) < 1e-4, (key, row, total)
    assert abs(float(row[2]) - pulls / iterations) <= 0.5 and abs(float(row[3]) - pushes / iterations) <= 0.5, (key, row)
    traffic[key] = total
ratio = traffic[("random", "hash")] / traffic[("metis", "metis")]
print(f"recounted 6 combinations; random/hash over metis/metis: {ratio:.2f}x")
assert ratio >= 2, ratio
PY
}

# run_to FILE ARGS...: starling-sim two-step ARGS with its table in FILE.
run_to() {
  local out=$1
  shift
  "$sim" two-step "$@" >"$out"
}
check "two-step on a LIBSVM file prints a table and a summary" run_to "$work/table.txt" \
  --data "$work/topics.libsvm" --workers 4 --servers 3 --iterations 2 --dump "$work/dump.txt"
cat "$work/table.txt"
last_is_summary() { tail -1 "$1" | grep -q '^summary: twostep_traffic_ratio='; }
check "the last line is the summary" last_is_summary "$work/table.txt"
check "every combination recounted with Python sets" verify "$work/table.txt" "$work/dump.txt" 2 0

check "two-step with top-k" run_to "$work/table-topk.txt" \
  --data "$work/topics.libsvm" --workers 4 --servers 3 --iterations 3 --density 0.1 --dump "$work/dump-topk.txt"
check "top-k's combinations recounted" verify "$work/table-topk.txt" "$work/dump-topk.txt" 3 0.1
check "top-k moves fewer bytes" "$python" -c "
import sys
def traffic(f):
    return [float(l.split()[4]) for l in open(f) if l.startswith('metis   metis')][0]
sys.exit(0 if traffic('$work/table-topk.txt') * 2 < traffic('$work/table.txt') else 1)"

# refused NAME WORDS ARGS...: exits non-zero and says WORDS on stderr.
refused() {
  local words=$1
  shift
  if "$sim" two-step "$@" >"$work/out.txt" 2>"$work/err.txt"; then
    echo "  expected a failure: $*"
    return 1
  fi
  grep -qF -- "$words" "$work/err.txt" || {
    echo "  stderr lacks '$words':"
    cat "$work/err.txt"
    return 1
  }
}
check "no workers" refused "the number of workers must be at least 1" --data "$work/topics.libsvm" --workers 0
check "no servers" refused "the number of servers must be at least 1" --data "$work/topics.libsvm" --servers 0
check "more workers than examples" refused "more workers (401) than examples (400)" \
  --data "$work/topics.libsvm" --workers 401
check "a density out of range" refused "the density 2 is not in [0, 1]" --data "$work/topics.libsvm" --density 2
check "no data" refused "give --data FILE or --power-law"
check "an unknown METIS graph" refused "--graph: the METIS graph must be one of" --power-law --examples 100 --graph foo
printf 'a,b,label\n1,2,0\n3,4,1\n5,6,0\n' >"$work/dense.csv"
check "a dense data set" refused "the data set is dense" --data "$work/dense.csv" --workers 2 --servers 1
printf '+1 1:1 3:1\n-1 2:one\n' >"$work/bad.libsvm"
check "a malformed LIBSVM line" refused "bad.libsvm:2" --data "$work/bad.libsvm" --workers 1 --servers 1
check "a missing file" refused "$work/missing.libsvm" --data "$work/missing.libsvm"

[ "$failures" -eq 0 ]
