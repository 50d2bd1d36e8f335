#!/usr/bin/env bash
# starling-coordinator placement on files: a synthetic community-structured fleet
# (make_row_sets.py, 120 clients in 4 communities) placed on 4 relays and 3 shards.
# Checked with Python sets, independently of the C++ code: the traffic the table prints
# for METIS, random and hash equals the union sizes of the written assignment (for
# each --method), METIS's is at least 2.5x below random's, relay sizes within 10%, every
# touched row on one shard with the printed max/mean load; then malformed files and
# arguments refused with file:line and what is wrong.
# Usage: cli_test.sh COORDINATOR_BIN MAKE_ROW_SETS_PY
set -u
coord_bin=$1
generator=$2
python=/usr/bin/python3
source "$(dirname "$0")/../cli/check.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! [ -x "$python" ]; then
  echo "skip: no $python"
  exit 77
fi
"$python" "$generator" --clients 120 --communities 4 --scatter --seed 3 --out "$work/rows.txt" || exit 1

# verify OUT TABLE METHOD: the written assignment's traffic (Python sets) equals the
# table's row for METHOD; sizes and shard loads as printed.
verify() {
  "$python" - "$work/rows.txt" "$1" "$2" "$3" <<'PY'
import sys
rows_file, out_file, table_file, method = sys.argv[1:]
rows = {}
for line in open(rows_file):
    line = line.split("#")[0].split()
    if line:
        rows[line[0]] = set(map(int, line[1:]))
relay_of, shard_of = {}, {}
for line in open(out_file):
    if line.startswith("#"):
        continue
    kind, key, value = line.split()
    (relay_of if kind == "client" else shard_of)[key if kind == "client" else int(key)] = int(value)
assert set(relay_of) == set(rows), "every client placed once"
unions = {}
for c, r in relay_of.items():
    unions.setdefault(r, set()).update(rows[c])
traffic = sum(len(u) for u in unions.values())
table = {}
lines = open(table_file).read().splitlines()
for line in lines:
    parts = line.split()
    if parts and parts[0] in ("metis", "random", "hash") and len(parts) >= 5 and parts[1].isdigit():
        table.setdefault(parts[0], parts)
assert int(table[method][1]) == traffic, f"{method}: table says {table[method][1]}, sets say {traffic}"
sizes = [sum(1 for r in relay_of.values() if r == k) for k in range(4)]
mean = len(rows) / 4
assert abs(float(table[method][3]) - max(sizes) / mean) < 1e-3, (table[method], sizes)
if method != "hash":
    assert max(sizes) <= 1.10 * mean, sizes
if shard_of:
    touched = set().union(*rows.values())
    assert set(shard_of) == touched, "every touched row on one shard"
    load = [0] * 3
    for c in rows.values():
        for r in c:
            load[shard_of[r]] += 1
    ratio = max(load) / (sum(load) / 3)
    shard_lines = [l.split() for l in lines if l.split()[:1] == ["metis"] and len(l.split()) >= 4
                   and not l.split()[1].isdigit()]
    assert abs(float(shard_lines[0][1]) - ratio) < 1e-3, (shard_lines, ratio)
    assert ratio <= 1.10, ratio
print(f"{method}: traffic {traffic}, sizes {sizes}")
PY
}

"$coord_bin" placement --row-sets "$work/rows.txt" --relays 4 --shards 3 --out "$work/metis.txt" >"$work/metis.log" 2>&1
check "placement runs" test $? -eq 0
cat "$work/metis.log"
check "METIS's traffic and the shard loads equal a count with Python sets" verify "$work/metis.txt" "$work/metis.log" metis
for m in random hash; do
  "$coord_bin" placement --row-sets "$work/rows.txt" --relays 4 --method "$m" --out "$work/$m.txt" >"$work/$m.log" 2>&1
  check "--method $m: its traffic equals a count with Python sets" verify "$work/$m.txt" "$work/$m.log" "$m"
done
check "METIS's traffic is at least 2.5x below random's (2.6x measured)" \
  awk '$1 == "metis" && $2 ~ /^[0-9]+$/ { m = $2 } $1 == "random" && $2 ~ /^[0-9]+$/ { r = $2 }
       END { exit !(m > 0 && r >= 2.5 * m) }' "$work/metis.log"
"$coord_bin" placement --row-sets "$work/rows.txt" --relays 4 --out "$work/again.txt" >/dev/null 2>&1
check "the same input and seed write the same client map" \
  cmp -s <(grep '^client' "$work/metis.txt") <(grep '^client' "$work/again.txt")

# refused NAME EXPECTED ARGS...: exits 1 and stderr holds EXPECTED.
refused() {
  local name=$1 expected=$2
  shift 2
  "$coord_bin" placement "$@" >"$work/err.out" 2>"$work/err.log"
  local rc=$?
  check "$name" bash -c "[ $rc -eq 1 ] && grep -qF -- \"\$1\" '$work/err.log'" _ "$expected"
  [ $rc -eq 1 ] && grep -qF -- "$expected" "$work/err.log" || cat "$work/err.log"
}
printf 'alice 1 2 3\n# a comment\nbob 4 five 6\n' >"$work/bad.txt"
refused "a malformed row is refused at file:line" \
  "$work/bad.txt:3: row 'five' of client 'bob' is not a number in 0..4294967295" --row-sets "$work/bad.txt" --relays 1
printf 'alice 1\nbob 2\nalice 3\n' >"$work/twice.txt"
refused "a client given twice is refused at file:line" \
  "$work/twice.txt:3: client 'alice' was already given on line 1" --row-sets "$work/twice.txt" --relays 1
printf 'alice 1\nbob 2000\n' >"$work/past.txt"
refused "a row past --universe is refused at file:line" \
  "$work/past.txt:2: row 2000 of client 'bob' is past the universe of 1000 rows" \
  --row-sets "$work/past.txt" --relays 1 --universe 1000
printf '# nobody\n' >"$work/empty.txt"
refused "a file without clients is refused" "$work/empty.txt: no clients" --row-sets "$work/empty.txt" --relays 1
refused "more relays than clients are refused" "more relays (3) than clients (2)" --row-sets "$work/past.txt" --relays 3
refused "no relays are refused" "the number of relays must be at least 1" --row-sets "$work/past.txt" --relays 0
refused "an unknown method is refused" "the placement method must be one of metis, random, hash, not 'best'" \
  --row-sets "$work/past.txt" --relays 1 --method best
refused "a missing file is refused" "cannot open row-set file '$work/none.txt'" --row-sets "$work/none.txt" --relays 1

[ "$failures" -eq 0 ] || { echo "$failures check(s) failed"; exit 1; }
