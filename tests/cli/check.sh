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
