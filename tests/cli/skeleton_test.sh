#!/usr/bin/env bash
# The walking skeleton through the real binaries: certificates from `init`, a
# coordinator process, client processes that join or are refused with a reason.
# Usage: skeleton_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
work=$(mktemp -d)
coord_pid=""
cleanup() {
  [ -n "$coord_pid" ] && kill "$coord_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

source "$(dirname "$0")/check.sh"

"$coord_bin" init --out "$work/certs" --clients 3 --relays 2 >/dev/null || { echo "FAIL - init"; exit 1; }
"$coord_bin" init --out "$work/other" --clients 1 >/dev/null || { echo "FAIL - init other"; exit 1; }
check "init writes a CA, the coordinator's and 3 clients' certificates" \
  test -f "$work/certs/ca.crt" -a -f "$work/certs/ca.key" -a -f "$work/certs/coordinator.crt" \
  -a -f "$work/certs/coordinator.key" -a -f "$work/certs/client-2.crt" -a -f "$work/certs/client-2.key"
check "private keys are readable by their owner only" \
  test "$(stat -c %a "$work/certs/client-0.key")" = 600
check "init --relays 2 writes two relay certificates" \
  test -f "$work/certs/relay-1.crt" -a "$(stat -c %a "$work/certs/relay-1.key")" = 600
relay_runs_coordinator() {
  local out
  out=$("$coord_bin" run --certs "$work/certs" --cert "$work/certs/relay-0.crt" --key "$work/certs/relay-0.key" \
    --db "$work/relay-as-coordinator.db" --listen 127.0.0.1:0 2>&1)
  [ $? -ne 0 ] && grep -q "relay-0.crt: the certificate of relay-0 states the role 'relay': only a coordinator certificate" <<<"$out" ||
    { echo "  said: $out"; return 1; }
}
check "a relay's certificate cannot run the coordinator" relay_runs_coordinator

"$coord_bin" run --certs "$work/certs" --db "$work/starling.db" --listen 127.0.0.1:0 --handshake-timeout-ms 2000 >"$work/coord.log" 2>&1 &
coord_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/coord.log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "FAIL - coordinator did not start"; cat "$work/coord.log"; exit 1; }

for i in 0 1 2; do
  check "client-$i joins and exits 0" \
    "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id "client-$i" --log-level warn
done
check "the coordinator logs each join with the certificate's identity" \
  bash -c "grep -q 'client-0 joined' '$work/coord.log' && grep -q 'client-1 joined' '$work/coord.log' && grep -q 'client-2 joined' '$work/coord.log'"
check "a relay's certificate authenticates it to the coordinator" \
  "$client_bin" --coordinator "127.0.0.1:$port" --ca "$work/certs/ca.crt" --cert "$work/certs/relay-1.crt" \
  --key "$work/certs/relay-1.key" --log-level warn
check "and the coordinator knows it for a relay by its certificate's role" grep -q "relay-1 (a relay) joined" "$work/coord.log"

refused() {  # refused EXPECTED_TEXT CLIENT_ARGS...: client exits non-zero naming the reason
  local expect=$1
  shift
  local out
  out=$("$client_bin" --coordinator "127.0.0.1:$port" --log-level off "$@" 2>&1)
  local rc=$?
  [ $rc -ne 0 ] && grep -q "$expect" <<<"$out" || { echo "  exit $rc, said: $out"; return 1; }
}
check "a client certificate from another CA is refused" \
  refused "refused the TLS handshake" --ca "$work/certs/ca.crt" --cert "$work/other/client-0.crt" --key "$work/other/client-0.key"
check "the coordinator logs why it refused that client" \
  grep -q "refused .*not signed by the trusted CA" "$work/coord.log"
check "a client refuses a coordinator signed by a CA it does not trust" \
  refused "coordinator certificate refused: the certificate is not signed by the trusted CA" \
  --certs "$work/other" --id client-0
check "a client refuses a coordinator certificate for another host name" \
  refused "another host name" --certs "$work/certs" --id client-0 --server-name coordinator.example
check "a missing certificate file is named" \
  refused "cannot open certificate '$work/certs/client-9.crt'" --certs "$work/certs" --id client-9
bad_address() {
  local out
  out=$("$client_bin" --coordinator nowhere --certs "$work/certs" --id client-0 2>&1)
  [ $? -ne 0 ] && grep -q "bad address 'nowhere': no port (expected HOST:PORT)" <<<"$out"
}
check "a bad address is explained" bad_address

config_error() {  # config_error FILE_TEXT EXPECTED [FLAGS...]
  printf '%s\n' "$1" >"$work/bad.toml"
  local expect=$2
  shift 2
  local out
  # timeout: a file that is wrongly accepted starts a coordinator that would not stop.
  out=$(timeout 20 "$coord_bin" run --config "$work/bad.toml" --certs "$work/certs" --db "$work/bad.db" "$@" 2>&1)
  [ $? -ne 0 ] && grep -q "$expect" <<<"$out" || { echo "  said: $out"; return 1; }
}
check "an unknown setting in the config file is named" \
  config_error $'[task]\nroundz = 3' "bad.toml: unknown setting 'task.roundz'"
check "a setting of the wrong type is named" config_error $'[task]\nrounds = "many"' "'task.rounds' must be an integer"
check "an integer beyond its setting's type is refused, not wrapped" \
  config_error $'[server]\nmax-frame-bytes = 4294967297' "'server.max-frame-bytes' must be at most 4294967295"
check "a number beyond a float setting is refused" \
  config_error $'[train]\nmomentum = 1e300' "'train.momentum' must be a finite number"
check "a TOML syntax error gives file, line and column" config_error $'[task\nrounds = 3' "bad.toml:1:"
check "flags override the file" \
  config_error $'[train]\ntau = 5\ntau-max = 100' "tau (5) <= tau-max (4)" --tau-max 4

kill -TERM "$coord_pid"
wait "$coord_pid"
rc=$?
coord_pid=""
check "the coordinator stops cleanly on SIGTERM" test $rc -eq 0
check "and reports what it saw" grep -q "stopped: .* 4 joined" "$work/coord.log"

# Revocation: revoke client-1, restart; client-1 is refused, client-0 still joins.
check "revoke writes the CA's revocation list" \
  bash -c "'$coord_bin' revoke --certs '$work/certs' --client client-1 | grep -q 'revoked client-1 (serial '"
check "revoking again keeps the list and adds to it" \
  bash -c "'$coord_bin' revoke --certs '$work/certs' --client client-2 >/dev/null && test -f '$work/certs/crl.pem'"
check "revoking a certificate of another CA is refused" \
  bash -c "! '$coord_bin' revoke --certs '$work/certs' --cert '$work/other/client-0.crt' 2>/dev/null"
"$coord_bin" run --certs "$work/certs" --db "$work/revoked.db" --listen 127.0.0.1:0 >"$work/coord2.log" 2>&1 &
coord_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/coord2.log")
  [ -n "$port" ] && break
  sleep 0.05
done
check "the restarted coordinator loads the list" grep -q "revocation list .*crl.pem: 2 certificate(s) revoked" "$work/coord2.log"
check "a revoked client is refused at the handshake" \
  refused "refused the TLS handshake" --certs "$work/certs" --id client-1
eventually_logged() {  # eventually_logged PATTERN FILE: within 5 s
  for _ in $(seq 50); do
    grep -q "$1" "$2" && return 0
    sleep 0.1
  done
  return 1
}
check "the coordinator logs that it was revoked" \
  eventually_logged "refused .*the certificate has been revoked" "$work/coord2.log"
check "a client that is not revoked still joins" \
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id client-0 --log-level warn
kill -TERM "$coord_pid"
wait "$coord_pid"
coord_pid=""
foreign_crl() {  # a list signed by another CA: the coordinator does not start
  "$coord_bin" revoke --certs "$work/other" >/dev/null || return 1
  local out
  out=$(timeout 10 "$coord_bin" run --certs "$work/certs" --crl "$work/other/crl.pem" --db "$work/x.db" 2>&1)
  [ $? -ne 0 ] && grep -q "crl.pem: the revocation list's signature is not the CA's" <<<"$out" ||
    { echo "  said: $out"; return 1; }
}
check "a revocation list of another CA stops the coordinator with a reason" foreign_crl

check "the coordinator keeps its TLS ticket keys beside the database, readable by its owner only" \
  test "$(stat -c %a "$work/starling.db.ticket-keys")" = 600
exposed_ticket_keys() {  # a key file others can read: the coordinator does not start
  cp -p "$work/starling.db.ticket-keys" "$work/exposed.keys" && chmod 644 "$work/exposed.keys" || return 1
  local out
  out=$(timeout 10 "$coord_bin" run --certs "$work/certs" --db "$work/y.db" --listen 127.0.0.1:0 \
    --tls-ticket-key-file "$work/exposed.keys" 2>&1)
  [ $? -ne 0 ] && grep -q "exposed.keys' may be read or written by others (mode 0644).*chmod 600" <<<"$out" ||
    { echo "  said: $out"; return 1; }
}
check "a ticket key file others may read stops the coordinator with a reason" exposed_ticket_keys
open_files_raised() {  # started with a soft limit of 256, the coordinator raises it to the hard limit
  local hard out
  hard=$(ulimit -Hn)
  if [ "$hard" != unlimited ] && [ "$hard" -le 256 ]; then
    echo "  (hard limit $hard: nothing to raise)"
    return 0
  fi
  out=$( (ulimit -Sn 256 && timeout -s TERM 3 "$coord_bin" run --certs "$work/certs" --db "$work/z.db" \
    --listen 127.0.0.1:0) 2>&1)
  grep -q "open files limit raised from 256 to $hard (the hard limit)" <<<"$out" || { echo "  said: $out"; return 1; }
}
check "the coordinator raises its open files limit to the hard limit and logs it" open_files_raised

if [ $failures -ne 0 ]; then
  echo "--- coordinator log ---"
  cat "$work/coord.log"
  [ -f "$work/coord2.log" ] && { echo "--- restarted coordinator log ---"; cat "$work/coord2.log"; }
fi
exit $((failures > 0))
