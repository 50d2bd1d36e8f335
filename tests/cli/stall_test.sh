#!/usr/bin/env bash
# Fault injection on real processes: one peer stalls in the middle of the TLS
# handshake, another (a client with a valid certificate) in the middle of a
# frame. The coordinator cuts both off at its timeouts, and a well-behaved client
# that comes while they stall is served at once, not after them.
# Usage: stall_test.sh COORDINATOR_BIN CLIENT_BIN
set -u
coord_bin=$1
client_bin=$2
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT

source "$(dirname "$0")/check.sh"
eventually_logged() {  # eventually_logged PATTERN: in the coordinator's log within 10 s
  for _ in $(seq 100); do
    grep -q "$1" "$work/coord.log" && return 0
    sleep 0.1
  done
  return 1
}

"$coord_bin" init --out "$work/certs" --clients 2 >/dev/null || { echo "FAIL - init"; exit 1; }
"$coord_bin" run --certs "$work/certs" --db "$work/starling.db" --listen 127.0.0.1:0 \
  --handshake-timeout-ms 2000 --frame-timeout-ms 2000 >"$work/coord.log" 2>&1 &
pids+=($!)
port=""
for _ in $(seq 200); do
  port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/coord.log")
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { echo "FAIL - coordinator did not start"; cat "$work/coord.log"; exit 1; }

# The stalling peers, in one Python process that holds both sockets for 6 s.
python3 - "$port" "$work/certs" >"$work/stall.out" 2>&1 <<'PY' &
import socket, ssl, sys, time
port, certs = int(sys.argv[1]), sys.argv[2]
# Mid-handshake: the first 3 bytes of a TLS record header, then nothing.
a = socket.create_connection(("127.0.0.1", port))
a.sendall(b"\x16\x03\x01")
# Mid-frame: a full handshake as client-1, then a header announcing a 100-byte body
# (length u32 LE, version 1, flags 0) followed by 10 bytes of it.
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.load_cert_chain(certs + "/client-1.crt", certs + "/client-1.key")
b = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
b.sendall((100).to_bytes(4, "little") + (1).to_bytes(2, "little") + b"\0\0" + b"x" * 10)
print("stalling", flush=True)
time.sleep(6)
PY
pids+=($!)
for _ in $(seq 100); do
  grep -q stalling "$work/stall.out" && break
  sleep 0.05
done
check "both stalling peers are connected" grep -q stalling "$work/stall.out"

check "a well-behaved client joins while they stall" \
  "$client_bin" --coordinator "127.0.0.1:$port" --certs "$work/certs" --id client-0 --log-level warn
check "the peer stalled in the handshake is cut off at the handshake timeout" \
  eventually_logged "refused 127.0.0.1:[0-9]*: TLS handshake did not finish within 2000 ms"
check "the client stalled in a frame is cut off at the frame timeout" \
  eventually_logged "closing the connection to client-1 .*frame of 100 bytes not received within 2000 ms"
joined_before() {  # the good client was served before either stalled peer was cut off
  local joined cut
  joined=$(grep -n "client-0 joined" "$work/coord.log" | head -n 1 | cut -d: -f1)
  cut=$(grep -n "did not finish within\|not received within" "$work/coord.log" | head -n 1 | cut -d: -f1)
  [ -n "$joined" ] && [ -n "$cut" ] && [ "$joined" -lt "$cut" ]
}
check "the well-behaved client was served before the stalled ones timed out" joined_before

if [ $failures -ne 0 ]; then
  echo "--- coordinator log ---"
  cat "$work/coord.log"
  echo "--- stalling peers ---"
  cat "$work/stall.out"
fi
exit $((failures > 0))
