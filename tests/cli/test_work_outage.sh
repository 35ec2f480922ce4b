#!/usr/bin/env bash
# test_work_outage.sh - `due work` when the store stops answering, and the
# inline mode's claims, with real processes:
#   1. SQLite: another process holds the write lock (busy_ms=0) while
#      handlers run and finish: a handful of log lines, not thousands, a
#      store-error count of failed calls, every task DONE once;
#   2. --inline claims one task at a time: while one runs the others stay
#      SCHEDULED, and an idle second worker takes them;
#   3. --inline after SIGTERM: the running handler is stopped when the
#      grace runs out and nothing else starts;
#   4. PostgreSQL stopped and started under running handlers (as 1);
#   5. PostgreSQL: a renewal that meets its own task's commit is not
#      counted or logged as a lost lease (the keeper's renewal is held on
#      a row lock while the other task of its batch commits).
# 4 and 5 run on a private PostgreSQL cluster (scripts/pg-test-cluster):
# stopping the shared one would break the tests that run beside this one.
# They are skipped only when DUE_TEST_PG_URL is unset and CI is not true.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export OUT="$T/out"
mkdir -p "$OUT"
# A timed-out wait ends the script: leave no worker, lock holder or
# cluster behind (a worker killed with SIGKILL takes its handlers along).
bg=()
pgdir=
cleanup() {
	local p
	for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	if [ -n "$pgdir" ]; then
		"$ROOT/scripts/pg-test-cluster" stop "$pgdir" >/dev/null 2>&1 || true
		rm -rf "$pgdir"
	fi
	rm -rf "$T"
}
trap cleanup EXIT
"$DUE" init >/dev/null

state() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(state "$1" state)" = "$2" ]; }
all_state() {
	local s=$1 id
	shift
	for id in "$@"; do is_state "$id" "$s" || return 1; done
}
lines() { if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi; }
has_lines() { [ "$(lines "$1")" -ge "$2" ]; }
store_errors() {
	"$DUE" stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['workers']['store_errors'])"
}

# A worker's log is a handful of lines through an outage, and says it once
# when the outage starts and once when it ends.
quiet_log() {
	local log=$1 n
	n=$(wc -l <"$log")
	echo "$2: $n log lines through the outage"
	[ "$n" -lt 20 ] && ok || bad "$2: $n log lines (first: $(sed -n 3,4p "$log"))"
	grep -q "store unavailable: .* failed: " "$log" && ok || bad "$2: outage start not logged"
	grep -q "store answers again after .* failed call" "$log" && ok || bad "$2: outage end not logged"
}

# Each task DONE at attempt 1, its handler run once.
done_once() {
	local runs=$1 id
	shift
	for id in "$@"; do
		expect_eq "task $id DONE at its first attempt" DONE/1 "$(state "$id" state)/$(state "$id" attempt)"
	done
	expect_eq "each handler ran once" "$#" "$(sort -u "$runs" | wc -l)"
	expect_eq "no handler ran twice" "$#" "$(lines "$runs")"
}

# 1. SQLite: a second process holds the write lock; the worker's store
#    gives up at once (busy_ms=0), so every renewal and commit fails until
#    the lock is freed.  The test's own commands wait for the lock.
main_db=$DUE_DB
export DUE_DB="sqlite:$T/locked.db"
"$DUE" init >/dev/null
lk=()
for i in 1 2 3 4; do lk+=("$("$DUE" add lk)"); done
DUE_DB="$DUE_DB?busy_ms=0" "$DUE" work --kinds lk --concurrency 2 --lease 6s --poll 50ms \
	--exec 'echo "$DUE_TASK_ID" >> "$OUT/lk.runs"
		until [ -e "$OUT/lk.go" ]; do sleep 0.02; done; echo ok' 2>"$T/lk.log" &
wpid=$!
bg+=("$wpid")
wait_for "two handlers running" 20 has_lines "$OUT/lk.runs" 2
python3 - "$T/locked.db" "$OUT" <<'EOF' &
import os, sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute("BEGIN EXCLUSIVE")
open(sys.argv[2] + "/lk.locked", "w").close()
while not os.path.exists(sys.argv[2] + "/lk.unlock"):
    time.sleep(0.01)
c.execute("COMMIT")
EOF
lpid=$!
bg+=("$lpid")
wait_for "the lock taken" 20 test -e "$OUT/lk.locked"
# renewals are due lease/3 after the claim; once one has met the lock, let
# the handlers finish, so that commits and claims meet it too
wait_for "a renewal met the lock" 20 grep -q "renewer: store unavailable" "$T/lk.log"
touch "$OUT/lk.go"
wait_for "a commit met the lock" 20 grep -Eq "(completer|claimer): store unavailable" "$T/lk.log"
touch "$OUT/lk.unlock"
wait "$lpid" && ok || bad "lock holder"
wait_for "all four tasks done" 30 all_state DONE "${lk[@]}"
kill -TERM "$wpid"
rc=0
wait "$wpid" || rc=$?
expect_eq "worker exit" 0 "$rc"
quiet_log "$T/lk.log" "sqlite lock"
done_once "$OUT/lk.runs" "${lk[@]}"
n=$(store_errors)
echo "sqlite lock: store errors counted: $n"
[ "$n" -ge 2 ] && [ "$n" -lt 100 ] && ok || bad "store errors count failed calls: $n"
export DUE_DB=$main_db

# 2. --inline claims one task at a time (default concurrency 4): while the
#    first runs, held on a file, the others stay SCHEDULED and a second,
#    idle worker can take them
il=()
for i in 1 2 3; do il+=("$("$DUE" add il)"); done
handler='echo "$DUE_TASK_ID" >> "$OUT/il.runs"; until [ -e "$OUT/il.go" ]; do sleep 0.02; done'
"$DUE" work --inline --kinds il --poll 50ms --exec "$handler" 2>"$T/il.log" &
ipid=$!
bg+=("$ipid")
wait_for "the first inline task running" 20 test -s "$OUT/il.runs"
first=$(cat "$OUT/il.runs")
claimed=0
for id in "${il[@]}"; do
	if is_state "$id" CLAIMED; then claimed=$((claimed + 1)); fi
done
expect_eq "one claim at a time in inline mode" 1 "$claimed"
expect_eq "the running one is the claimed one" CLAIMED "$(state "$first" state)"
"$DUE" work --kinds il --poll 50ms --exec "$handler" 2>"$T/il2.log" &
ppid2=$!
bg+=("$ppid2")
wait_for "the second worker runs the other two" 20 has_lines "$OUT/il.runs" 3
touch "$OUT/il.go"
wait_for "all three done" 30 all_state DONE "${il[@]}"
kill -TERM "$ipid" "$ppid2"
wait "$ipid" || bad "inline worker exit"
wait "$ppid2" || bad "second worker exit"
expect_eq "each task ran once" 3 "$(sort -u "$OUT/il.runs" | wc -l)"

# 3. --inline and SIGTERM: the running handler gets the grace, then is
#    stopped; the tasks still due do not start
ig=()
for i in 1 2 3; do ig+=("$("$DUE" add ig)"); done
"$DUE" work --inline --kinds ig --poll 50ms --grace 1s --kill-grace 300ms \
	--exec 'echo "$DUE_TASK_ID" >> "$OUT/ig.runs"; until [ -e "$OUT/ig.go" ]; do sleep 0.02; done' \
	2>"$T/ig.log" &
gpid=$!
bg+=("$gpid")
wait_for "the first inline task running" 20 test -s "$OUT/ig.runs"
kill -TERM "$gpid"
if wait_for "the worker exits after the grace" 20 bash -c "! kill -0 $gpid 2>/dev/null"; then
	rc=0
	wait "$gpid" || rc=$?
	expect_eq "inline worker exit after SIGTERM" 0 "$rc"
else
	kill -KILL "$gpid"
	wait "$gpid" 2>/dev/null || true
fi
touch "$OUT/ig.go"
expect_eq "nothing started after SIGTERM" 1 "$(lines "$OUT/ig.runs")"
grep -q "grace period over" "$T/ig.log" && ok || bad "grace end not logged: $(tail -3 "$T/ig.log")"
first=$(cat "$OUT/ig.runs")
for id in "${ig[@]}"; do
	if [ "$id" = "$first" ]; then
		expect_eq "the stopped task failed back to SCHEDULED" SCHEDULED/1 "$(state "$id" state)/$(state "$id" attempt)"
	else
		expect_eq "task $id never claimed" SCHEDULED/0 "$(state "$id" state)/$(state "$id" attempt)"
	fi
done

# 4 and 5 need PostgreSQL
if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; fi
	echo "NOTE: DUE_TEST_PG_URL not set: PostgreSQL outage tests not run"
	finish
	exit $?
fi
pgdir=$(mktemp -d /tmp/due-pg-XXXXXX)
if ! url=$("$ROOT/scripts/pg-test-cluster" start "$pgdir"); then
	bad "cannot start a private PostgreSQL cluster"
	finish
	exit 1
fi
export DUE_DB=$url
"$DUE" init >/dev/null
pgq() { psql -qXAt "$url" -c "$1"; }

# 4. PostgreSQL stopped, then started, under running handlers
pg=()
for i in 1 2 3 4; do pg+=("$("$DUE" add pg)"); done
"$DUE" work --kinds pg --concurrency 2 --lease 10s --poll 50ms \
	--exec 'echo "$DUE_TASK_ID" >> "$OUT/pg.runs"
		until [ -e "$OUT/pg.go" ]; do sleep 0.02; done; echo ok' 2>"$T/pg.log" &
wpid=$!
bg+=("$wpid")
wait_for "two handlers running" 20 has_lines "$OUT/pg.runs" 2
"$ROOT/scripts/pg-test-cluster" stop "$pgdir" >/dev/null
wait_for "a renewal met the outage" 30 grep -q "renewer: store unavailable" "$T/pg.log"
touch "$OUT/pg.go"
wait_for "a commit met the outage" 20 grep -Eq "(completer|claimer): store unavailable" "$T/pg.log"
expect_eq "the server came back on the same URL" "$url" "$("$ROOT/scripts/pg-test-cluster" start "$pgdir")"
wait_for "all four tasks done" 60 all_state DONE "${pg[@]}"
kill -TERM "$wpid"
rc=0
wait "$wpid" || rc=$?
expect_eq "worker exit" 0 "$rc"
quiet_log "$T/pg.log" "postgres stopped"
done_once "$OUT/pg.runs" "${pg[@]}"
n=$(store_errors)
echo "postgres stopped: store errors counted: $n"
[ "$n" -ge 2 ] && [ "$n" -lt 100 ] && ok || bad "store errors count failed calls: $n"

# 5. Tasks a and b are claimed together, so the renewer renews them in one
#    batch, b (the later of the claim) first.  A second session locks b's
#    row: the renewal of b waits on it (on the renewer's own connection,
#    at most its bound, lease/3, before it fails and is retried), while
#    a's handler finishes and a is committed on the shared connection.
#    The renewal of a and a's commit come in either order: if the renewal
#    comes second it meets the commit.  Either way no lease is lost:
#    nothing counted, nothing said at the default log level (-v says it
#    was not renewed).
a=$("$DUE" add fl)
b=$("$DUE" add fl)
"$DUE" work -v --kinds fl --concurrency 2 --lease 9s --poll 50ms \
	--exec 'echo "$DUE_TASK_ID" >> "$OUT/fl.runs"
		until [ -e "$OUT/fl.go.$DUE_TASK_ID" ]; do sleep 0.02; done
		touch "$OUT/fl.end.$DUE_TASK_ID"' 2>"$T/fl.log" &
wpid=$!
bg+=("$wpid")
wait_for "both handlers running" 20 has_lines "$OUT/fl.runs" 2
mkfifo "$T/lock.fifo"
psql -qXAt "$url" <"$T/lock.fifo" >/dev/null 2>&1 &
lpid=$!
bg+=("$lpid")
exec 7>"$T/lock.fifo"
echo "BEGIN; SELECT id FROM due_task WHERE id = $b FOR UPDATE;" >&7
in_tx() { [ "$(pgq "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'")" = 1 ]; }
waiting() { [ "$(pgq "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")" -ge 1 ]; }
wait_for "b's row locked" 10 in_tx
wait_for "the renewer's renewal waits on the lock" 20 waiting
touch "$OUT/fl.go.$a"
wait_for "a's handler finished while the renewal waits" 20 test -e "$OUT/fl.end.$a"
echo "COMMIT;" >&7
exec 7>&-
wait "$lpid" || true
wait_for "a committed DONE once the lock went" 20 is_state "$a" DONE
touch "$OUT/fl.go.$b"
wait_for "b done" 20 is_state "$b" DONE
kill -TERM "$wpid"
wait "$wpid" || bad "worker exit"
grep -q "task $a attempt 1: lease lost" "$T/fl.log" && bad "false lease lost: $(grep "lease lost" "$T/fl.log")" || ok
grep -q "stopped: .*, lease lost 0 (0 not confirmed in time)$" "$T/fl.log" && ok || bad "lease lost counted: $(grep stopped: "$T/fl.log")"
expect_eq "a DONE once" DONE/1 "$(state "$a" state)/$(state "$a" attempt)"
finish
