#!/usr/bin/env bash
# test_demo_deps.sh - scripts/demo installs and builds only what the SQLite
# store needs (issue 36, point 18); scripts/test keeps installing the rest.
#
# `scripts/deps --demo --print` is the demo's list: no database server, no
# other store's client library, no test tool, and every package of it is
# in the full list (scripts/test installs what the demo does).  The
# demo's own CMake options (read from scripts/demo) configure a build that
# asks pkg-config for SQLite, jansson and libmicrohttpd only, and no
# test framework: what the listed -dev packages give.  Configure only (a
# few seconds): the demo itself builds and runs in scripts/demo.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

"$ROOT/scripts/deps" --demo --print >"$T/demo" && ok || bad "deps --demo --print"
"$ROOT/scripts/deps" --print >"$T/full" && ok || bad "deps --print"
for p in postgresql mariadb-server galera-4 redis-server pgbouncer chromium nodejs \
	valgrind clang libpq-dev libhiredis-dev libmariadb-dev libcmocka-dev; do
	grep -qx "$p" "$T/demo" && bad "the demo installs $p" || ok
	grep -qx "$p" "$T/full" && ok || bad "scripts/test no longer installs $p"
done
expect_eq "every demo package is in the full list" "" "$(grep -vxFf "$T/full" "$T/demo")"
for p in cmake pkg-config libsqlite3-dev libjansson-dev libmicrohttpd-dev; do
	grep -qx "$p" "$T/demo" && ok || bad "the demo does not install $p"
done

# the demo's cmake options, as scripts/demo writes them
opts=$(sed -n '/^cmake -S \. -B build-demo/,/[^\\]$/p' "$ROOT/scripts/demo" |
	tr -d '\\\n' | grep -o -- '-D[A-Z_]*=[A-Za-z]*' | tr '\n' ' ')
for o in DUE_WITH_PG=OFF DUE_WITH_REDIS=OFF DUE_WITH_MYSQL=OFF DUE_BUILD_TESTS=OFF DUE_BUILD_BENCH=OFF; do
	[[ " $opts " == *" -D$o "* ]] && ok || bad "scripts/demo lacks -D$o (has: $opts)"
done
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$T/b" $opts >"$T/cfg.log" 2>&1 && ok || bad "the demo's configure failed: $(tail -5 "$T/cfg.log")"
asked=$(sed -n 's/^\([A-Z0-9]*\)_FOUND:INTERNAL=1$/\1/p' "$T/b/CMakeCache.txt" | sort | tr '\n' ' ')
expect_eq "pkg-config modules the demo's build needs" "JANSSON MHD SQLITE3 " "$asked"
grep -q "CMOCKA_LIB" "$T/b/CMakeCache.txt" && bad "the demo's build looks for cmocka" || ok
finish
