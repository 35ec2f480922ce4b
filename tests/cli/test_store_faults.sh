#!/usr/bin/env bash
# test_store_faults.sh - the store with real `due` processes under odd
# files, other users and failing disks (issue 22 points 6, 7, 10, 11;
# issue 17 point 4):
#
#  1. `--at 1970-01-01T00:00:00Z` keeps the epoch (SQLite; PostgreSQL when
#     DUE_TEST_PG_URL is set);
#  2. a task that completes DONE after a failed try shows no last_error;
#  3. a FIFO (or a symlink) at <db>-wake never blocks a command;
#  4. a store this user cannot write answers reads, and refuses writes with
#     one line naming the store and "read-only", exit 5.  Run as root, the
#     reads are made as `nobody` (setpriv), because root ignores file
#     modes; as another user, the store is made read-only with chmod;
#  5. `due add` in a loop under `ulimit -f` (SIGXFSZ ignored) until the
#     file cannot grow: exit 5, one line naming the store and the cause,
#     the file intact, every id printed before still there, nothing else;
#  6. an LD_PRELOAD shim (fixtures/failwrite.c) fails the n-th write or
#     sync, for n over a range, across init, add, add --batch and a
#     `due work --once` cycle: after each, the same.
#
# Under CI=true a part that cannot run here (no way to drop privileges, no
# shim, no PostgreSQL) is a failure, never a silent skip.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FW=${DUE_FAILWRITE_SO:-}
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

# cannot_run WHAT: a part that cannot run here (a failure under CI=true)
cannot_run() {
	if [ "${CI:-}" = true ]; then bad "CI=true but $1"; else echo "NOTE: $1"; fi
}

q() { sqlite3 "$1" "$2"; }
intact() { [ "$(q "$1" 'PRAGMA integrity_check')" = ok ]; }
"$DUE" init >/dev/null

# ---- 1. the epoch is an instant -------------------------------------------
id=$("$DUE" add k --at 1970-01-01T00:00:00Z)
expect_eq "due_at of --at 1970-01-01T00:00:00Z" 0 "$(q "$T/due.db" "SELECT due_at FROM due_task WHERE id = $id")"
id2=$("$DUE" add k --at 1970-01-01T01:00:00+01:00)
expect_eq "due_at of --at 1970-01-01T01:00:00+01:00" 0 "$(q "$T/due.db" "SELECT due_at FROM due_task WHERE id = $id2")"
"$DUE" ls | has "^$id .*1970-01-01T00:00:00.000Z" && ok || bad "ls shows the epoch: $("$DUE" ls)"
"$DUE" show "$id" | has -x "due_at            1970-01-01T00:00:00.000Z" && ok || bad "show shows the epoch: $("$DUE" show "$id")"
expect_eq "show --json: due_at is the epoch, not null" "1970-01-01T00:00:00.000Z" \
	"$("$DUE" show "$id" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['due_at'])")"
expect_err 2 "1970" "$DUE" add k --at 1970-01-01T00:59:59+01:00
expect_err 2 "invalid time" "$DUE" add k --at 1969-12-31T23:59:59Z
if [ -n "${DUE_TEST_PG_URL:-}" ]; then
	schema="due_faults_$$"
	psql -qX "$DUE_TEST_PG_URL" -c "CREATE SCHEMA $schema" >/dev/null
	trap 'psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1; chmod -R u+rwX "$T" 2>/dev/null; rm -rf "$T"' EXIT
	sep='?'; case "$DUE_TEST_PG_URL" in *\?*) sep='&';; esac
	pg="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
	"$DUE" init --db "$pg" >/dev/null
	id=$("$DUE" add k --db "$pg" --at 1970-01-01T00:00:00Z)
	expect_eq "due_at of --at the epoch (postgres)" 0 \
		"$(psql -qXAt "$pg" -c "SELECT extract(epoch FROM due_at)::int8 FROM due_task WHERE id = $id")"
else
	cannot_run "DUE_TEST_PG_URL is unset: the epoch on PostgreSQL not checked"
fi
trap 'chmod -R u+rwX "$T" 2>/dev/null; rm -rf "$T"; [ -z "${schema:-}" ] || psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1' EXIT

# ---- 2. DONE shows no old last_error --------------------------------------
id=$("$DUE" add lerr --max-attempts 3 --backoff 0 --backoff-cap 0)
run_once() {
	"$DUE" work --once -q --kinds lerr \
		--exec 'if [ "$DUE_ATTEMPT" = 1 ]; then echo boom >&2; exit 1; fi'
}
run_once
wait_for "task $id DONE after a failed try" 60 \
	sh -c "'$DUE' work --once -q --kinds lerr --exec true; '$DUE' show $id | grep -q '^state *DONE'" || true
"$DUE" show --json "$id" >"$T/lerr.json"
expect_eq "last_error of a DONE task" "None" \
	"$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["last_error"])' "$T/lerr.json")"
python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["attempts"]; sys.exit(0 if "boom" in (a[0]["error"] or "") else 1)' \
	"$T/lerr.json" && ok || bad "the attempt history lost the error: $(cat "$T/lerr.json")"

# ---- 3. the wake file is never waited on ----------------------------------
w=$T/wake; mkdir -p "$w"
"$DUE" init --db "sqlite:$w/due.db" >/dev/null
rm -f "$w/due.db-wake"; mkfifo "$w/due.db-wake"
rc=0; out=$(timeout 30 "$DUE" add k --db "sqlite:$w/due.db") || rc=$?
expect_eq "add with a FIFO at <db>-wake: exit" 0 "$rc"
[[ "$out" =~ ^[0-9]+$ ]] && ok || bad "add with a FIFO wake file printed '$out'"
printf '{"kind":"k"}\n{"kind":"k"}\n' >"$T/two.jsonl"
rc=0; timeout 30 "$DUE" add --batch "$T/two.jsonl" --db "sqlite:$w/due.db" >/dev/null || rc=$?
expect_eq "add --batch with a FIFO wake file: exit" 0 "$rc"
rc=0; timeout 30 "$DUE" work --once -q --exec true --db "sqlite:$w/due.db" || rc=$?
expect_eq "work --once with a FIFO wake file: exit" 0 "$rc"
expect_eq "tasks done with a FIFO wake file" 3 "$(q "$w/due.db" "SELECT count(*) FROM due_task WHERE state = 'DONE'")"
rm -f "$w/due.db-wake"; : >"$T/target"; touch -d 2000-01-01 "$T/target"
ln -s "$T/target" "$w/due.db-wake"
timeout 30 "$DUE" add k --db "sqlite:$w/due.db" >/dev/null && ok || bad "add with a symlink wake file"
expect_eq "a symlinked wake file's target untouched" 2000 "$(date -r "$T/target" +%Y)"

# ---- 4. read-only stores ----------------------------------------------------
# as_other CMD...: run as a user that cannot write what `due init` made here
if [ "$(id -u)" != 0 ]; then
	as_other() { "$@"; }
	OTHER=self
elif command -v setpriv >/dev/null && getent passwd nobody >/dev/null; then
	as_other() { setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups -- "$@"; }
	OTHER=nobody
else
	OTHER=
	cannot_run "running as root without setpriv: read-only stores not checked"
fi

# ro_checks WHAT DB: reads work, writes fail "read-only", nothing is created
ro_checks() {
	local what=$1 db=$2 before after
	before=$(ls -a "$(dirname "$db")" | sort | tr '\n' ' ')
	as_other "$RODUE" ls --db "sqlite:$db" >"$T/ro.out" 2>"$T/ro.err" &&
		grep -q "^$ro1 " "$T/ro.out" && ok ||
		bad "$what: ls: $(cat "$T/ro.err" "$T/ro.out")"
	as_other "$RODUE" show "$ro1" --db "sqlite:$db" >"$T/ro.out" 2>"$T/ro.err" &&
		grep -q "^kind *ro$" "$T/ro.out" && ok ||
		bad "$what: show: $(cat "$T/ro.err" "$T/ro.out")"
	as_other "$RODUE" stats --db "sqlite:$db" >/dev/null 2>"$T/ro.err" && ok ||
		bad "$what: stats: $(cat "$T/ro.err")"
	expect_err 5 "read-only" as_other "$RODUE" add k --db "sqlite:$db"
	grep -qF "'$db'" "$T/err" && ok || bad "$what: the error does not name the store: $(cat "$T/err")"
	expect_err 5 "read-only" as_other "$RODUE" cancel "$ro1" --db "sqlite:$db"
	after=$(ls -a "$(dirname "$db")" | sort | tr '\n' ' ')
	expect_eq "$what: files next to the store" "$before" "$after"
}

# ro_store DIR: a store with one task ($ro1), closed, owned by whoever runs it
ro_store() {
	mkdir -p "$1"
	"${@:2}" "$RODUE" init --db "sqlite:$1/due.db" >/dev/null &&
		ro1=$("${@:2}" "$RODUE" add ro --db "sqlite:$1/due.db") || bad "ro_store $1"
}

if [ -n "$OTHER" ]; then
	chmod 0711 "$T"
	mkdir -p "$T/bin"; cp "$DUE" "$T/bin/due"; chmod 0755 "$T/bin" "$T/bin/due"
	RODUE=$T/bin/due
	as_other "$RODUE" --help >/dev/null 2>&1 || bad "as $OTHER: cannot run $RODUE"
	# a) another user's store (as root) or a write-protected one (as a user),
	#    closed: no -wal, no -shm, and none may be created
	d=$T/ro-a; ro_store "$d"
	if [ "$OTHER" = self ]; then chmod 0444 "$d/due.db"; chmod 0555 "$d"; fi
	ro_checks "closed store ($OTHER)" "$d/due.db"
	# b) the same while a writer has it open, with a commit only in its -wal
	if [ "$OTHER" = self ]; then chmod 0644 "$d/due.db"; chmod 0755 "$d"; fi
	mkfifo "$T/hold"
	sqlite3 "$d/due.db" <"$T/hold" >/dev/null &
	holder=$!
	exec 7>"$T/hold"
	echo "SELECT count(*) FROM due_task;" >&7
	wait_for "the holder has the store open" 10 test -e "$d/due.db-wal" || true
	ro2=$("$RODUE" add ro2 --db "sqlite:$d/due.db")
	[ -s "$d/due.db-wal" ] && ok || bad "the commit is not in the -wal: the case is not exercised"
	if [ "$OTHER" = self ]; then chmod 0444 "$d/due.db" "$d/due.db-wal" "$d/due.db-shm"; chmod 0555 "$d"; fi
	as_other "$RODUE" show "$ro2" --db "sqlite:$d/due.db" >"$T/ro.out" 2>"$T/ro.err" &&
		grep -q "^kind *ro2$" "$T/ro.out" && ok ||
		bad "read-only reader misses a commit in the -wal: $(cat "$T/ro.err" "$T/ro.out")"
	expect_err 5 "read-only" as_other "$RODUE" add k --db "sqlite:$d/due.db"
	exec 7>&-
	wait "$holder" || true
	chmod -R u+w "$d"
	if [ "$OTHER" = nobody ]; then
		# c) one's own store, mode 0444, in one's own directory
		d=$T/ro-c; mkdir -p "$d"; chown nobody "$d"
		ro_store "$d" as_other
		chmod 0444 "$d/due.db"
		ro_checks "own store, mode 0444" "$d/due.db"
		# d) a file this user may write, in a directory it may not
		d=$T/ro-d; ro_store "$d"
		chown nobody "$d/due.db"
		ro_checks "writable file, read-only directory" "$d/due.db"
	else
		# d) a file this user may write, in a directory it may not
		d=$T/ro-d; ro_store "$d"; chmod 0555 "$d"
		ro_checks "writable file, read-only directory" "$d/due.db"
		chmod 0755 "$d"
	fi
fi

# ---- 5. a file that cannot grow (ulimit -f) ---------------------------------
u=$T/ulimit; mkdir -p "$u"; udb=$u/due.db
"$DUE" init --db "sqlite:$udb" >/dev/null
head -c 6000 /dev/urandom | base64 >"$T/pay"
: >"$u/ids"
(
	trap '' XFSZ
	ulimit -f 600 # KiB: the store stops growing after a few dozen adds
	for i in $(seq 1 3000); do
		rc=0
		out=$("$DUE" add k --payload-file "$T/pay" --db "sqlite:$udb" 2>"$u/err") || rc=$?
		if [ "$rc" != 0 ]; then echo "$rc" >"$u/rc"; exit 0; fi
		echo "$out" >>"$u/ids"
	done
)
expect_eq "add under ulimit -f: exit once the file cannot grow" 5 "$(cat "$u/rc" 2>/dev/null)"
expect_eq "add under ulimit -f: one error line" 1 "$(wc -l <"$u/err")"
grep -qF "sqlite store '$udb'" "$u/err" && grep -qE "disk is full|File too large|I/O error" "$u/err" &&
	ok || bad "the error names neither the store nor the cause: $(cat "$u/err")"
[ "$(wc -l <"$u/ids")" -gt 3 ] && ok || bad "ulimit -f: only $(wc -l <"$u/ids") adds before the failure"
intact "$udb" && ok || bad "ulimit -f: integrity_check: $(q "$udb" 'PRAGMA integrity_check')"
expect_eq "ulimit -f: every acknowledged task is there, nothing else" \
	"$(sort -n "$u/ids" | tr '\n' ' ')" "$(q "$udb" 'SELECT id FROM due_task ORDER BY id' | tr '\n' ' ')"
"$DUE" add k --db "sqlite:$udb" >/dev/null && ok || bad "ulimit -f: the store is not usable after"

# ---- 6. the n-th write or sync fails (LD_PRELOAD) --------------------------
if [ -z "$FW" ]; then
	FW=$T/failwrite.so
	cc -shared -fPIC -o "$FW" "$ROOT/tests/cli/fixtures/failwrite.c" -ldl 2>"$T/cc.err" ||
		{ FW=; cannot_run "the failwrite shim could not be built: $(cat "$T/cc.err")"; }
fi

# inject N ERRNO MODE CMD...: run CMD with the N-th counted write failing
# (MODE STICKY: and every one after; SYNC: syncs count too).  Sets RC and
# FIRED (1 when the fault was injected).
inject() {
	local n=$1 e=$2 mode=$3
	shift 3
	rm -f "$T/fired"
	RC=0
	timeout 60 env DUE_FAILWRITE_N="$n" DUE_FAILWRITE_ERRNO="$e" \
		${mode:+"DUE_FAILWRITE_$mode=1"} DUE_FAILWRITE_LOG="$T/fired" \
		LD_PRELOAD="$FW" "$@" >"$T/fout" 2>"$T/ferr" || RC=$?
	FIRED=0
	[ -s "$T/fired" ] && FIRED=1
	return 0
}

# failed_cleanly WHAT DB: exit 0, or 5 with one line naming DB and the cause
failed_cleanly() {
	case "$RC" in
	0) return 0 ;;
	5) ;;
	*) bad "$1: exit $RC, expected 0 or 5: $(cat "$T/ferr")"; return 1 ;;
	esac
	if [ "$FIRED" != 1 ]; then
		bad "$1: failed without an injected fault: $(cat "$T/ferr")"
	elif [ "$(wc -l <"$T/ferr")" != 1 ] || ! grep -qF "sqlite store '$2'" "$T/ferr" ||
		! grep -qE "disk is full|I/O error" "$T/ferr"; then
		bad "$1: not one line naming the store and the cause: $(cat "$T/ferr")"
	else
		ok
	fi
}

# store_ok WHAT DB ACKED [STRICT]: intact, every id in ACKED is there (and,
# STRICT, no other task: a failed write commits nothing)
store_ok() {
	local ids
	intact "$2" || { bad "$1: integrity_check: $(q "$2" 'PRAGMA integrity_check')"; return; }
	ids=$(paste -sd, "$3")
	[ -z "$ids" ] || [ "$(q "$2" "SELECT count(*) FROM due_task WHERE id IN ($ids)")" = "$(wc -l <"$3")" ] ||
		{ bad "$1: an acknowledged task is missing"; return; }
	[ -z "${4:-}" ] || [ "$(q "$2" 'SELECT count(*) FROM due_task')" = "$(wc -l <"$3")" ] ||
		{ bad "$1: a task that was not acknowledged is in the store"; return; }
	# a transition wrote its task and its attempt row together, or neither
	[ "$(q "$2" "SELECT count(*) FROM due_task t WHERE (state = 'DONE' AND NOT EXISTS
		(SELECT 1 FROM due_attempt a WHERE a.task_id = t.id AND a.attempt = t.attempt
		AND a.outcome = 'DONE')) OR (state = 'CLAIMED' AND (claimed_at IS NULL OR EXISTS
		(SELECT 1 FROM due_attempt a WHERE a.task_id = t.id AND a.attempt = t.attempt)))")" = 0 ] ||
		{ bad "$1: a task and its attempts disagree"; return; }
	ok
}

if [ -n "$FW" ]; then
	f=$T/fault; mkdir -p "$f"
	fired_any=0
	# init: a failed init leaves a store a second init completes
	for spec in "ENOSPC STICKY" "EIO " "EIO SYNC"; do
		read -r e mode <<<"$spec"
		for n in $(seq 1 30); do
			db=$f/init.db
			rm -f "$db" "$db"-*
			inject "$n" "$e" "$mode" "$DUE" init --db "sqlite:$db"
			fired_any=$((fired_any + FIRED))
			failed_cleanly "init, write $n fails ($e $mode)" "$db"
			"$DUE" init --db "sqlite:$db" >/dev/null 2>"$T/err" &&
				"$DUE" add k --db "sqlite:$db" >/dev/null 2>>"$T/err" && intact "$db" &&
				ok || bad "init, write $n fails ($e $mode): store not usable after: $(cat "$T/err")"
		done
	done
	# add: every acknowledged id kept; a failed write commits nothing
	db=$f/add.db; "$DUE" init --db "sqlite:$db" >/dev/null; : >"$f/acked"
	for spec in "ENOSPC STICKY" "EIO " "EFBIG "; do
		read -r e mode <<<"$spec"
		for n in $(seq 1 40); do
			inject "$n" "$e" "$mode" "$DUE" add k --db "sqlite:$db"
			fired_any=$((fired_any + FIRED))
			failed_cleanly "add, write $n fails ($e $mode)" "$db"
			[ "$RC" != 0 ] || cat "$T/fout" >>"$f/acked"
			store_ok "add, write $n fails ($e $mode)" "$db" "$f/acked" strict
		done
	done
	# a failed sync is not strict: the commit's frames are in the log,
	# and SQLite may find them committed later although it reported the
	# failure (what fsync's failure means is not knowable); so its own store
	sdb=$f/sync.db; "$DUE" init --db "sqlite:$sdb" >/dev/null; : >"$f/sacked"
	for n in $(seq 1 40); do
		inject "$n" EIO SYNC "$DUE" add k --db "sqlite:$sdb"
		fired_any=$((fired_any + FIRED))
		failed_cleanly "add, sync or write $n fails (EIO)" "$sdb"
		[ "$RC" != 0 ] || cat "$T/fout" >>"$f/sacked"
		store_ok "add, sync or write $n fails (EIO)" "$sdb" "$f/sacked"
	done
	# add --batch: all or nothing
	for spec in "ENOSPC STICKY" "EIO "; do
		read -r e mode <<<"$spec"
		for n in $(seq 1 40); do
			kind="b$n$e"
			printf '{"kind":"%s"}\n{"kind":"%s","in":"1h"}\n{"kind":"%s","key":"x"}\n' \
				"$kind" "$kind" "$kind" >"$T/batch.jsonl"
			inject "$n" "$e" "$mode" "$DUE" add --batch "$T/batch.jsonl" --db "sqlite:$db"
			fired_any=$((fired_any + FIRED))
			failed_cleanly "add --batch, write $n fails ($e $mode)" "$db"
			got=$(q "$db" "SELECT count(*) FROM due_task WHERE kind = '$kind'")
			if [ "$RC" = 0 ]; then
				expect_eq "add --batch, write $n fails: ids printed" 3 "$(wc -l <"$T/fout")"
				cat "$T/fout" >>"$f/acked"
				expect_eq "add --batch, write $n fails ($e): tasks" 3 "$got"
			else
				expect_eq "add --batch, write $n fails ($e): nothing of a failed batch" 0 "$got"
			fi
			store_ok "add --batch, write $n fails ($e $mode)" "$db" "$f/acked" strict
		done
	done
	# a worker's cycle: claim, run, complete, in one process
	for spec in "EIO " "ENOSPC " "EIO SYNC"; do
		read -r e mode <<<"$spec"
		for n in $(seq 1 40); do
			"$DUE" add w --db "sqlite:$db" >>"$f/acked" && "$DUE" add w --db "sqlite:$db" >>"$f/acked"
			inject "$n" "$e" "$mode" "$DUE" work --once -q --lease 5s --exec 'cat >/dev/null' --db "sqlite:$db"
			fired_any=$((fired_any + FIRED))
			[ "$RC" != 124 ] && ok || bad "work --once, write $n fails ($e $mode): still running after 60 s"
			store_ok "work --once, write $n fails ($e $mode)" "$db" "$f/acked"
		done
	done
	# the loops above must have injected faults, or they proved nothing
	echo "faults injected: $fired_any"
	[ "$fired_any" -gt 200 ] && ok || bad "only $fired_any faults were injected"
	# and with no fault, every task of the worker's cycles ends DONE
	# (a lease a failed commit kept expires after 5 s and is reclaimed)
	all_w_done() {
		"$DUE" work --once -q --exec true --db "sqlite:$db" >/dev/null 2>&1
		[ "$(q "$db" "SELECT count(*) FROM due_task WHERE kind = 'w' AND state <> 'DONE'")" = 0 ]
	}
	wait_for "every task done once the disk works again" 30 all_w_done || true
fi

finish
