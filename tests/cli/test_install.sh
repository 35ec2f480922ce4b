#!/usr/bin/env bash
# test_install.sh - `cmake --install` into a temporary prefix gives what a
# packager and a C user need: the binary, the shared and static library,
# due.h, a due.pc with which `pkg-config --cflags --libs due` alone builds
# a program that runs against a real store, the man page (generated from
# --help: every command has its section), and systemd units that
# systemd-analyze accepts.
. "$(dirname "$0")/lib.sh"
build=$(dirname "$DUE")
P=$T/prefix
cmake --install "$build" --prefix "$P" >"$T/install.log" 2>&1 && ok || bad "install: $(tail -5 "$T/install.log")"
for f in bin/due lib/libdue.a lib/libdue.so include/due.h lib/pkgconfig/due.pc \
	share/man/man1/due.1 lib/systemd/system/due-worker@.service \
	lib/systemd/system/due-serve.service; do
	[ -e "$P/$f" ] && ok || bad "not installed: $f"
done
ls "$P"/lib/libdue.so.0* >/dev/null 2>&1 && ok || bad "no versioned libdue.so.0"

# a C user: pkg-config alone gives the flags
cat >"$T/prog.c" <<'EOC'
#include <stdio.h>
#include <due.h>
int main(int argc, char **argv)
{
	due_db *db;
	due_open_opts oo = DUE_OPEN_OPTS_INIT;
	due_submitted s;
	due_task *t;
	oo.create = true;
	if (argc != 2 || due_open(&db, argv[1], &oo) < 0) {
		fprintf(stderr, "open: %s\n", due_error_last());
		return 1;
	}
	due_schedule_opts o = DUE_SCHEDULE_OPTS_INIT;
	if (due_schedule(db, &s, "installed", "hi", 2, &o) < 0 || due_get(db, &t, s.id) < 0) {
		fprintf(stderr, "schedule: %s\n", due_error_last());
		return 1;
	}
	printf("%lld %s %s\n", (long long)t->id, t->kind, due_state_name(t->state));
	due_task_free(t);
	due_close(db);
	return 0;
}
EOC
export PKG_CONFIG_PATH=$P/lib/pkgconfig
san=
grep -q '^DUE_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" && san="-fsanitize=address,undefined"
# shellcheck disable=SC2046
cc -std=c17 -Wall -Werror $san -o "$T/prog" "$T/prog.c" $(pkg-config --cflags --libs due) \
	2>"$T/cc.err" && ok || bad "compile with pkg-config: $(cat "$T/cc.err")"
out=$(LD_LIBRARY_PATH=$P/lib "$T/prog" "sqlite:$T/inst.db" 2>&1) || true
expect_eq "program against the installed library" "1 installed SCHEDULED" "$out"
# (to a file: with pipefail, grep -q closing the pipe early fails ldd)
LD_LIBRARY_PATH=$P/lib ldd "$T/prog" >"$T/ldd" 2>&1 || true
grep -q "$P/lib/libdue.so.0" "$T/ldd" && ok || bad "not linked to the installed libdue.so: $(cat "$T/ldd")"
# libdue.a with the system libraries it needs (Requires.private of due.pc)
# linked dynamically: Debian ships no static libpq dependencies
req=$(sed -n 's/^Requires.private: //p' "$P/lib/pkgconfig/due.pc")
cc -std=c17 $san -o "$T/prog-static" "$T/prog.c" -I"$P/include" "$P/lib/libdue.a" \
	$(pkg-config --libs $req) -pthread -lm 2>"$T/cc.err" \
	&& ok || bad "static link: $(cat "$T/cc.err")"
expect_eq "static program" "2 installed SCHEDULED" "$("$T/prog-static" "sqlite:$T/inst.db" 2>&1)"
"$P/bin/due" ls --db "sqlite:$T/inst.db" | grep -c installed | has -x 2 && ok || bad "installed due reads the store"

# the man page: a section per command of `due --help`, the same text
man -l "$P/share/man/man1/due.1" >"$T/man.txt" 2>"$T/man.err" && ok || bad "man: $(cat "$T/man.err")"
for c in $("$DUE" --help | sed -n '/^Commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z]*\) .*/\1/p'); do
	grep -q "^   due $c\$" "$T/man.txt" && ok || bad "man page lacks 'due $c'"
	# to a file: a help text over the 4 KiB stdio buffer is written twice,
	# and head closing the pipe after one line kills the second write
	"$DUE" "$c" --help >"$T/help.txt"
	first=$(head -1 "$T/help.txt")
	grep -qF -- "$first" "$T/man.txt" && ok || bad "man page differs from 'due $c --help'"
done

# systemd units
if command -v systemd-analyze >/dev/null; then
	for u in due-worker@.service due-serve.service; do
		systemd-analyze verify --man=no "$P/lib/systemd/system/$u" >"$T/sa.out" 2>&1 \
			&& ok || bad "systemd-analyze $u: $(cat "$T/sa.out")"
	done
else
	[ "${CI:-}" != true ] || bad "systemd-analyze missing under CI"
fi
grep -qx "ExecStart=$P/bin/due work \$DUE_WORK_ARGS" "$P/lib/systemd/system/due-worker@.service" \
	&& ok || bad "worker unit ExecStart"
grep -qx "KillMode=mixed" "$P/lib/systemd/system/due-worker@.service" && ok || bad "KillMode=mixed"
finish
