#!/usr/bin/env bash
# `meson install` of this build into a staging root (DESTDIR): every file in its
# conventional place; then, from the installed files only, a federation (coordinator,
# client), a C program built against the installed library through its pkg-config
# file (shared and static), the Python module imported from its installed place,
# the man pages and the systemd units (docs/install.md). scripts/package does the same
# with the Debian packages in a clean root.
# Usage: install_test.sh BUILD_DIR
set -u
build=$1
needs_fashion_mnist=0
data=""
source "$(dirname "$0")/lib.sh"

stage=$work/stage
require "meson install --destdir puts the build in a staging root" \
  bash -c "meson install -C '$build' --no-rebuild --destdir '$stage' >'$work/install.log' 2>&1"
prefix=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
libdir=$(meson introspect "$build" --buildoptions | python3 -c '
import json, sys
print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "libdir"))')
sysconfdir=$(meson introspect "$build" --buildoptions | python3 -c '
import json, os, sys
options = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(os.path.join(options["prefix"], options["sysconfdir"]))')
root=$stage$prefix
echo "  prefix $prefix, libdir $libdir, sysconfdir $sysconfdir"

for f in bin/starling-coordinator bin/starling-client bin/starling-relay bin/starling-sim include/starling_client.h \
  "$libdir/libstarling-client.so" "$libdir/libstarling-client.so.0" "$libdir/libstarling-client.a" \
  "$libdir/pkgconfig/starling-client.pc" share/man/man1/starling-coordinator.1 share/man/man1/starling-client.1 \
  share/man/man1/starling-relay.1 share/man/man1/starling-sim.1; do
  check "installed: $prefix/$f" test -e "$root/$f"
done
units=$(find "$stage" -name 'starling-*.service' | sort)
check "the coordinator's and relay's systemd units are installed" test "$(wc -l <<<"$units")" -eq 2
check "and the settings they read, under sysconfdir/starling" \
  bash -c "test -n \"\$(find '$stage' -path '*/starling/coordinator.toml')\" && test -n \"\$(find '$stage' -path '*/starling/relay.conf')\""
check "the Python module is installed" test -n "$(find "$stage" -path '*/starling/__init__.py')"

# ---- man pages ----------------------------------------------------------------------
check "starling-client(1) lists the client's options" grep -q -- 'shard' "$root/share/man/man1/starling-client.1"
check "starling-coordinator(1) documents each subcommand's options (run --clients-per-round)" \
  grep -q -- 'clients\\-per\\-round\|clients-per-round' "$root/share/man/man1/starling-coordinator.1"
check "the man pages name the installed program, not its place in the build directory" \
  bash -c "! grep -qE '(coordinator|client|relay|harness)/starling-|$build' '$root'/share/man/man1/*.1"
if command -v man >/dev/null; then
  check "man renders starling-coordinator(1) without warnings" \
    bash -c "MANWIDTH=80 man --warnings -l '$root/share/man/man1/starling-coordinator.1' 2>&1 >/dev/null | { ! grep -q .; }"
fi

# ---- a federation from the installed binaries ----------------------------------------
coord_bin=$root/bin/starling-coordinator
client_bin=$root/bin/starling-client
check "--version prints the version" bash -c "'$coord_bin' --version | grep -qx '[0-9]*\\.[0-9]*\\.[0-9]*'"
"$coord_bin" init --out "$work/certs" --clients 2 >/dev/null
regression_csv 3 1200 >"$work/train.csv"
regression_csv 4 300 >"$work/test.csv"
echo >"$work/empty-crl.pem"  # the systemd unit's stand-in (a newline) for a CA that revoked nothing yet
require "the installed coordinator starts" launch_coordinator installed --task regression --model mlp:3-8-1/mse \
  --crl "$work/empty-crl.pem" --rounds 3 --clients-per-round 2 --tau 20 --lr 0.05 --test-data "$work/test.csv" --db "$work/installed.db"
data=$work/train.csv
shards=2 start_client 0 installed-client-0.log --task regression
shards=2 start_client 1 installed-client-1.log --task regression
wait_exit "$coord_pid" 120
check "the installed coordinator trains 3 rounds to the end" test $? -eq 0
wait_exit "${client_pid[0]}" 30 && wait_exit "${client_pid[1]}" 30
check "the installed clients exit 0" test $? -eq 0
check "its report lists 3 committed rounds" test "$(committed "$work/installed.db")" -eq 3

# ---- the C API through pkg-config ----------------------------------------------------
cat >"$work/version.c" <<'EOF'
#include <stdio.h>
#include <starling_client.h>
int main(void) {
  starling_client_config config;
  starling_client_config_init(&config);
  printf("%s\n", starling_client_version());
  return config.coordinator == NULL ? 0 : 1;
}
EOF
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
version=$("$coord_bin" --version)
check "a C program builds with pkg-config --cflags --libs starling-client and runs on the shared library" \
  bash -c "cc -std=c99 -Wall -Werror '$work/version.c' \$(pkg-config --cflags --libs starling-client) -o '$work/v-shared' &&
           LD_LIBRARY_PATH='$root/$libdir' '$work/v-shared' | grep -qx '$version' &&
           LD_LIBRARY_PATH='$root/$libdir' ldd '$work/v-shared' | grep -q 'libstarling-client.so.0'"
check "... and with pkg-config --static on the static library, which it then does not need at run time" \
  bash -c "cc -std=c99 '$work/version.c' -o '$work/v-static' \$(pkg-config --cflags starling-client) '$root/$libdir/libstarling-client.a' \
             \$(pkg-config --libs-only-l --static starling-client | sed 's/-lstarling-client//') &&
           '$work/v-static' | grep -qx '$version' && ! ldd '$work/v-static' | grep -q starling"

# ---- the Python module from its installed place --------------------------------------
pydir=$(dirname "$(dirname "$(find "$stage" -path '*/starling/__init__.py' | head -n 1)")")
check "the installed Python module imports and reads the federation's database" \
  env PYTHONPATH="$pydir" LD_LIBRARY_PATH="$root/$libdir" /usr/bin/python3 -c "
import starling, sys
r = starling.read_database('$work/installed.db')
sys.exit(0 if starling.version == '$version' and sum(x['status'] == 'committed' for x in r['rounds']) == 3 else 1)"

# ---- the systemd units -----------------------------------------------------------------
if command -v systemd-analyze >/dev/null; then
  for u in $units; do
    check "$(basename "$u") runs the installed program and reads the installed settings and certificates" \
      bash -c "grep -q '^ExecStart=$prefix/bin/starling-' '$u' &&
               grep -q '^LoadCredential=ca.crt:$sysconfdir/starling/certs/ca.crt$' '$u' &&
               grep -q '^SetCredential=crl.pem:' '$u' &&
               grep -qE '^(ExecStart=.*--config |EnvironmentFile=)$sysconfdir/starling/' '$u'"
    # verify resolves ExecStart= against the real root: check the staged copy.
    sed "s|$prefix/bin/|$root/bin/|" "$u" >"$work/$(basename "$u")"
    check "systemd-analyze verify $(basename "$u")" \
      bash -c "systemd-analyze verify --man=no '$work/$(basename "$u")' 2>&1 | tee '$work/verify.log' | { ! grep -q .; }"
  done
  check "the coordinator's unit sandboxes it (DynamicUser, ProtectSystem=strict, no capabilities)" \
    bash -c "grep -q '^DynamicUser=yes' '$work/starling-coordinator.service' && grep -q '^ProtectSystem=strict' '$work/starling-coordinator.service' && grep -q '^CapabilityBoundingSet=$' '$work/starling-coordinator.service'"
else
  echo "skip - systemd-analyze is not installed: the units' syntax is not checked"
fi
finish
