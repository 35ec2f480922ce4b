#!/usr/bin/env bash
# test_progress.sh - long commands say how far they are on a terminal, and
# nothing changes elsewhere (issue 36, point 19).
#
# `due add --batch`, `due prune` and `due init` run with stderr on a
# pseudo-terminal (Python's pty module) and again with stderr in a file:
# on the terminal stderr carries the progress line (redrawn with "\r",
# erased at the end, never on stdout); in a file, and under --json even on
# a terminal, stderr is empty and stdout is byte for byte what the
# terminal run printed.  SQLite, but for init's steps, which come from
# the library's migration walk and are checked on every store this run
# has; the prune loop's due_prune_max runs on every store in
# test_retain.sh (the worker's retention).  No timing assertion: rates and
# time left appear only after 0.2 s, so only the counts, which every frame
# has, are checked.
. "$(dirname "$0")/lib.sh"

# tty OUT ERR CMD...: CMD with stdin from /dev/null, stdout to OUT and
# stderr on a pseudo-terminal whose whole output goes to ERR; its exit code.
tty() {
	python3 - "$@" <<'EOF'
import os, pty, subprocess, sys
out, err, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
m, s = pty.openpty()
with open(out, "wb") as o:
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=o, stderr=s)
os.close(s)
got = b""
while True:
    try:
        d = os.read(m, 65536)
    except OSError:  # EIO: every writer of the terminal is gone
        break
    if not d:
        break
    got += d
open(err, "wb").write(got)
sys.exit(p.wait())
EOF
}

# erased ERR: the capture ends with the line erased (nothing but spaces
# after its last carriage return, or nothing at all)
erased() {
	[ -z "$(tail -c 300 "$1" | sed 's/\r$//' | tr '\r' '\n' | tail -1 | tr -d ' \n')" ]
}

n=10500 # more than one call of `due prune` (10,000 tasks)
python3 -c "
for i in range($n): print('{\"kind\": \"pr\", \"payload\": \"p%d\"}' % i)" >"$T/batch"
"$DUE" init >/dev/null

# add --batch on a terminal: the lines read, then the write's time
tty "$T/tty.out" "$T/tty.err" "$DUE" add --batch "$T/batch" && ok || bad "add --batch on a tty failed: $(cat "$T/tty.err")"
expect_eq "tty: every id on stdout" "$n" "$(wc -l <"$T/tty.out")"
grep -qF "due add: read $n lines (100%)" "$T/tty.err" && ok || bad "no 'read $n lines (100%)': $(cat -A "$T/tty.err" | tail -c 400)"
grep -qF "due add: writing $n tasks in one transaction" "$T/tty.err" && ok || bad "no write phase: $(cat -A "$T/tty.err" | tail -c 400)"
erased "$T/tty.err" && ok || bad "progress line left on the terminal: $(cat -A "$T/tty.err" | tail -c 200)"
if LC_ALL=C grep -q $'\r' "$T/tty.out"; then bad "a carriage return on stdout"; else ok; fi
# the same in a script: nothing on stderr, the same stdout (ids 1..n, then
# n+1..2n: compare the count and the form)
"$DUE" add --batch "$T/batch" >"$T/file.out" 2>"$T/file.err" && ok || bad "add --batch to a file failed"
expect_eq "no tty: stderr empty" "" "$(cat "$T/file.err")"
expect_eq "no tty: every id on stdout" "$n" "$(wc -l <"$T/file.out")"
expect_eq "no tty: first id follows the tty run's last" "$(($(tail -1 "$T/tty.out") + 1))" "$(head -1 "$T/file.out")"

# a refusal on a terminal: the line is erased before the message, which
# starts its own line
{ head -5 "$T/batch"; echo '{"kind": ""}'; } >"$T/bad"
rc=0; tty "$T/bad.out" "$T/bad.err" "$DUE" add --batch "$T/bad" || rc=$?
expect_eq "tty: a bad line still exits 2" 2 "$rc"
python3 -c '
import sys
t = open(sys.argv[1], "rb").read().replace(b"\r\n", b"\n")
segs = [s for s in t.replace(b"\r", b"\n").split(b"\n") if b"item 6" in s or b"line 6" in s]
sys.exit(0 if segs and all(s.startswith(b"due add: ") and b"read " not in s for s in segs) else 1)' "$T/bad.err" \
	&& ok || bad "error mixed with the progress line: $(cat -A "$T/bad.err")"

# prune on a terminal: the first 2n tasks finished a day ago (SQL on the
# file: no worker needed), pruned in three calls
python3 -c "
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute(\"UPDATE due_task SET state = 'DONE', updated_at = updated_at - 86400000000\")
c.commit()" "$T/due.db"
tty "$T/pr.out" "$T/pr.err" "$DUE" prune --older-than 1h && ok || bad "prune on a tty failed: $(cat "$T/pr.err")"
expect_eq "tty: prune's stdout" "deleted $((2 * n)) tasks" "$(tr -d '\r' <"$T/pr.out")"
grep -qF "due prune: deleted $((2 * n)) of ~$((2 * n)) tasks" "$T/pr.err" && ok || bad "no prune progress: $(cat -A "$T/pr.err" | tail -c 400)"
erased "$T/pr.err" && ok || bad "prune: line left on the terminal"
# under --json (before the command, point 17) a terminal gets nothing
tty "$T/pj.out" "$T/pj.err" "$DUE" --json prune --older-than 1h && ok || bad "prune --json on a tty failed"
expect_eq "tty + --json: stderr empty" "" "$(cat "$T/pj.err")"
expect_eq "tty + --json: stdout as ever" "deleted 0 tasks" "$(tr -d '\r' <"$T/pj.out")"
"$DUE" prune --older-than 1h >"$T/pf.out" 2>"$T/pf.err"
expect_eq "no tty: prune's stderr empty" "" "$(cat "$T/pf.err")"

# init of an old store (schema 2, tests/cli/fixtures) on a terminal: each
# upgrade step is named; in a file nothing is
schema=$("$DUE" --version | sed 's/.*(schema \([0-9]*\)).*/\1/')
python3 -c "
import sqlite3, sys
for db in sys.argv[2:]: sqlite3.connect(db).executescript(open(sys.argv[1]).read())" \
	"$(dirname "$0")/fixtures/sqlite-schema2.sql" "$T/old-tty.db" "$T/old-file.db"
tty "$T/in.out" "$T/in.err" "$DUE" init --db "sqlite:$T/old-tty.db" && ok || bad "init on a tty failed: $(cat "$T/in.err")"
grep -qF "due init: upgrade schema to version 3 (step 1 of $((schema - 2)))" "$T/in.err" && ok || bad "no first step: $(cat -A "$T/in.err")"
grep -qF "due init: upgrade schema to version $schema (step $((schema - 2)) of $((schema - 2)))" "$T/in.err" && ok || bad "no last step: $(cat -A "$T/in.err")"
erased "$T/in.err" && ok || bad "init: line left on the terminal"
"$DUE" init --db "sqlite:$T/old-file.db" >"$T/if.out" 2>"$T/if.err"
expect_eq "no tty: init's stderr empty" "" "$(cat "$T/if.err")"
expect_eq "init: the same stdout" "$(sed "s/old-tty/old-file/" "$T/in.out" | tr -d '\r')" "$(cat "$T/if.out")"
# a current store: nothing to upgrade, no line
tty "$T/cur.out" "$T/cur.err" "$DUE" init && ok || bad "init of a current store"
expect_eq "tty: a current store's init writes no progress" "" "$(cat "$T/cur.err")"

# a new store on every server this run has: the SQL stores walk their steps
# (the hook is the library's, reported from the migration walk they
# share); a Redis store is written by one script, with no steps to name
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT
init_on() {
	local label=$1 url=$2
	tty "$T/$label.out" "$T/$label.err" "$DUE" init --db "$url" && ok || bad "$label: init on a tty: $(cat "$T/$label.err")"
	if [ "$label" = redis ]; then
		expect_eq "redis: no steps, no line" "" "$(cat "$T/$label.err")"
		return
	fi
	grep -qF "due init: create schema (step 1 of $schema)" "$T/$label.err" && ok || bad "$label: no create step: $(cat -A "$T/$label.err")"
	grep -qF "due init: upgrade schema to version $schema (step $schema of $schema)" "$T/$label.err" && ok || bad "$label: no last step: $(cat -A "$T/$label.err")"
	erased "$T/$label.err" && ok || bad "$label: line left on the terminal"
}
on_each_store init_on progress
finish
