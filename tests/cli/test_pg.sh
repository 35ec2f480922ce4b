#!/usr/bin/env bash
# test_pg.sh - PostgreSQL with real processes: `due verify` passes every
# case; three `due work` processes drain 300 tasks with each handler run
# exactly once; and a worker survives connections dropped mid-handler and
# a real server restart, losing no task and writing no result twice.
#
# Runs when DUE_TEST_PG_URL says PostgreSQL is there (scripts/test starts
# a cluster), but on a private cluster of its own: it drops every
# connection and restarts the server, which must not hit the other suites
# that use the shared one at the same time.  Under CI=true a missing
# server is a failure, never a silent skip.
#
# No timing assumptions: an outage is "met" when the worker has logged the
# store errors it caused, not after a sleep; handlers that must still be
# running block on a file instead of sleeping; deadlines are hang guards.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; finish; fi
	echo "NOTE: DUE_TEST_PG_URL not set: PostgreSQL process tests not run"
	finish
	exit 0
fi
pgdir=$(mktemp -d /tmp/due-pg-XXXXXX)
if ! PG_URL=$("$ROOT/scripts/pg-test-cluster" start "$pgdir"); then
	rm -rf "$pgdir"
	bad "cannot start a private PostgreSQL cluster"
	finish
	exit 1
fi
schema="due_cli_$$"
psql -qX "$PG_URL" -c "CREATE SCHEMA $schema" >/dev/null
trap 'kill $(jobs -p) 2>/dev/null || true; "$ROOT/scripts/pg-test-cluster" stop "$pgdir" >/dev/null 2>&1; rm -rf "$T" "$pgdir"' EXIT
sep='?'; case "$PG_URL" in *\?*) sep='&';; esac
export DUE_DB="$PG_URL${sep}options=-csearch_path%3D$schema"
export OUT="$T/handler-out"; mkdir -p "$OUT"
"$DUE" init >/dev/null && ok || bad "init on postgres"
count() { psql -qXAt "$DUE_DB" -c "$1"; }

# 1. due verify, every case, against PostgreSQL
"$DUE" verify --db "$PG_URL" >"$T/verify.out" 2>&1 || true
cat "$T/verify.out"
grep -q "^[0-9]* passed, 0 failed$" "$T/verify.out" && ok || bad "verify on postgres"
grep -q "^CASE boundary_partial_due_index PASS" "$T/verify.out" && ok || bad "partial index case"

# 2. three workers, 300 tasks due within 2 s, each handler run exactly once
for i in $(seq 0 299); do printf '{"kind":"three","in":"%dms"}\n' $((i * 2000 / 300)); done >"$T/b.jsonl"
"$DUE" add --batch "$T/b.jsonl" >/dev/null
pids=()
for w in 1 2 3; do
	"$DUE" work -q --kinds three --poll 20ms --owner "w$w" \
		--exec 'echo "$DUE_TASK_ID" >> "$OUT/three"' &
	pids+=($!)
done
wait_for "300 tasks done" 120 bash -c "[ \"\$(psql -qXAt '$DUE_DB' -c \"SELECT count(*) FROM due_task WHERE kind='three' AND state='DONE'\")\" = 300 ]"
for p in "${pids[@]}"; do kill -TERM "$p"; done
for p in "${pids[@]}"; do wait "$p" || bad "worker $p exit"; done
expect_eq "300 effects" 300 "$(wc -l <"$OUT/three")"
expect_eq "no handler ran twice" 300 "$(sort -u "$OUT/three" | wc -l)"
expect_eq "one attempt each" 300 "$(count "SELECT count(*) FROM due_attempt a JOIN due_task t ON t.id = a.task_id WHERE t.kind = 'three'")"

# 3. connections dropped mid-handler, then a real server restart
for i in $(seq 1 100); do echo '{"kind":"fault"}'; done | "$DUE" add --batch - >/dev/null
# -v: each paced retry during an outage is logged ("store still
# unavailable"), not only the start and end of the outage
"$DUE" work -v --kinds fault --concurrency 4 --lease 5s --poll 50ms --owner survivor \
	--exec 'echo "$DUE_TASK_ID" >> "$OUT/fault.start"; sleep 0.3; echo "$DUE_TASK_ID" >> "$OUT/fault"' 2>"$T/survivor.log" &
wpid=$!
wait_for "work started" 60 test -s "$OUT/fault"
errors() { grep -c "store unavailable\|store still unavailable" "$T/survivor.log" || true; }
more_errors() { [ "$(errors)" -ge "$1" ]; }
starts() { cat "$OUT/fault.start" 2>/dev/null | wc -l; }
more_starts() { [ "$(starts)" -ge "$1" ]; }
for k in 1 2; do
	n=$(errors)
	psql -qXAt "$PG_URL" -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'" >/dev/null
	wait_for "the worker met dropped connections ($k)" 60 more_errors $((n + 1))
	# Before the next drop, a claim made after this one: five more
	# handlers started than now (at most four were claimed before the
	# drop), so the worker is on a new connection for the next drop to
	# hit.  Without it a drop could land before the worker reconnected
	# (on a slow machine), kill nothing of its, and never be met.
	s=$(starts)
	wait_for "the worker claimed again after drop $k" 60 more_starts $((s + 5))
done
if [ -n "$pgdir" ]; then
	n=$(errors)
	"$ROOT/scripts/pg-test-cluster" stop "$pgdir" >/dev/null
	# met the outage and retried at least once while it lasted
	wait_for "the worker retried while the server was down" 60 more_errors $((n + 2))
	kill -0 "$wpid" && ok || bad "worker died while the server was down"
	"$ROOT/scripts/pg-test-cluster" start "$pgdir" >"$T/newurl"
	expect_eq "server came back on the same URL" "$PG_URL" "$(cat "$T/newurl")"
fi
wait_for "100 fault tasks done" 60 bash -c "[ \"\$(psql -qXAt '$DUE_DB' -c \"SELECT count(*) FROM due_task WHERE kind='fault' AND state='DONE'\" 2>/dev/null)\" = 100 ]"
kill -0 "$wpid" && ok || bad "worker survived"
kill -TERM "$wpid"; rc=0; wait "$wpid" || rc=$?
expect_eq "survivor exits 0" 0 "$rc"
expect_eq "no task lost" 100 "$(sort -u "$OUT/fault" | wc -l)"
expect_eq "each task one DONE result" 100 "$(count "SELECT count(*) FROM due_task WHERE kind = 'fault' AND state = 'DONE' AND result IS NOT NULL")"
stale=$(count "SELECT count(*) FROM due_attempt a JOIN due_task t ON t.id = a.task_id WHERE t.kind = 'fault' AND a.outcome = 'DONE' AND a.attempt <> t.attempt")
expect_eq "no commit with a stale attempt" 0 "$stale"
grep -q "store error\|cannot open store\|failed" "$T/survivor.log" && ok || bad "the outage was noticed in the log"
echo "fault run: $(wc -l <"$OUT/fault") handler runs for 100 tasks (re-runs after an unknown commit are allowed: at least once)"

# 4. SIGTERM while the server is down: the worker still exits 0 (its try is
#    left to lease expiry), and another worker finishes the task at attempt 2
if [ -n "$pgdir" ]; then
	did=$("$DUE" add down)
	"$DUE" work --kinds down --lease 3s --grace 1s --kill-grace 300ms --poll 50ms \
		--exec 'touch "$OUT/down.started"; until [ -e "$OUT/down.release" ]; do sleep 0.05; done; echo late' \
		2>"$T/down.log" &
	wpid=$!
	wait_for "down task running" 60 test -e "$OUT/down.started"
	"$ROOT/scripts/pg-test-cluster" stop "$pgdir" >/dev/null
	kill -TERM "$wpid"
	wait_for "worker exits while the server is down" 60 bash -c "! kill -0 $wpid 2>/dev/null"
	rc=0; wait "$wpid" || rc=$?
	expect_eq "exit 0 with the store down" 0 "$rc"
	grep -q "leaving them to lease expiry" "$T/down.log" && ok || bad "abandonment logged: $(tail -3 "$T/down.log")"
	"$ROOT/scripts/pg-test-cluster" start "$pgdir" >/dev/null
	"$DUE" work -q --kinds down --poll 100ms --exec 'echo rescued' &
	rpid=$!
	wait_for "down task finished by another worker" 60 bash -c \
		"[ \"\$(psql -qXAt '$DUE_DB' -c \"SELECT state || '/' || attempt FROM due_task WHERE id = $did\")\" = DONE/2 ]"
	kill -TERM "$rpid"; wait "$rpid" || true
	touch "$OUT/down.release" # in case the handler outlived its worker
fi
finish
