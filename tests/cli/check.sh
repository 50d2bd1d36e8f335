# Sourced by the tests in tests/cli. check NAME COMMAND... runs COMMAND and prints
# "ok   - NAME" or "FAIL - NAME", counting failures in $failures.
failures=0
check() {
  local name=$1
  shift
  if "$@"; then
    echo "ok   - $name"
  else
    echo "FAIL - $name"
    failures=$((failures + 1))
  fi
}

# refuses WORDS COMMAND...: COMMAND exits non-zero and says WORDS on stderr.
refuses() {
  local words=$1 err
  shift
  err=$(mktemp)
  if "$@" >/dev/null 2>"$err"; then
    echo "  expected a failure: $*"
    rm -f "$err"
    return 1
  fi
  if ! grep -qF -- "$words" "$err"; then
    echo "  stderr lacks '$words':"
    cat "$err"
    rm -f "$err"
    return 1
  fi
  rm -f "$err"
}
