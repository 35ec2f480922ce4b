#!/usr/bin/env bash
# test_sql_submit.sh - due_schedule(), the SQL submit `due init` creates on
# PostgreSQL: inside the caller's transaction (rolled back: no task, no
# wake-up; committed: a running worker runs it, woken by the notification,
# its safety poll being far away), idempotent by key, the C API's
# validation (each bad input an error naming it, nothing written), and
# `due init` adding the function to an existing store.
#
# Needs DUE_TEST_PG_URL (scripts/test starts a cluster); uses a schema of
# its own.  Under CI=true a missing server is a failure, never a skip.
# No timing assertions: the worker's pick-up is waited for with a deadline
# (a hang guard), shorter than its 60 s safety poll so that only the
# notification can make it.
. "$(dirname "$0")/lib.sh"
if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; finish; fi
	echo "NOTE: DUE_TEST_PG_URL not set: the SQL submit is not tested"
	finish
	exit 0
fi
schema="due_sql_$$"
psql -qX "$DUE_TEST_PG_URL" -c "CREATE SCHEMA $schema" >/dev/null
trap 'kill $(jobs -p) 2>/dev/null || true; psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1; rm -rf "$T"' EXIT
sep='?'; case "$DUE_TEST_PG_URL" in *\?*) sep='&';; esac
export DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
sql() { psql -qXAt -v ON_ERROR_STOP=1 "$DUE_DB" "$@"; }
field() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }
tasks() { sql -c "SELECT count(*) FROM due_task"; }

"$DUE" init >/dev/null && ok || bad "init"
sql -c "CREATE TABLE orders (id int PRIMARY KEY)"

echo "== rolled back: no task"
sql -c "BEGIN" -c "INSERT INTO orders VALUES (1)" \
	-c "SELECT due_schedule('close-order', '1')" -c "ROLLBACK" >/dev/null
expect_eq "rolled back: no order, no task" "0 0" "$(sql -c 'SELECT count(*) FROM orders') $(tasks)"

echo "== committed: a running worker runs it"
"$DUE" work --poll 60s --no-cron --kinds close-order \
	--exec 'printf "closed %s" "$(cat)"' 2>"$T/work.err" &
wpid=$!
# the worker listens once its wheel is running; a task committed before
# would be found by its first refill anyway
wait_for "worker listening" 30 grep -q "discovery: timing wheel" "$T/work.err"
id=$(sql -c "BEGIN" -c "INSERT INTO orders VALUES (2)" \
	-c "SELECT due_schedule('close-order', 'héllo 2')" -c "COMMIT")
[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "due_schedule returned '$id'"
wait_for "the committed task done by the worker" 30 is_state "$id" DONE
expect_eq "result (payload as text, UTF-8)" "closed héllo 2" "$(field "$id" result)"
kill "$wpid"
wait "$wpid" || true

echo "== options, idempotency by key"
id=$(sql -c "SELECT due_schedule('later', 'x', run_in => interval '1 hour', max_attempts => 3)")
expect_eq "max_attempts" 3 "$(field "$id" max_attempts)"
expect_eq "run_in: due in about an hour" t \
	"$(sql -c "SELECT due_at > now() + interval '59 minutes' AND due_at < now() + interval '61 minutes' FROM due_task WHERE id = $id")"
at=$(sql -c "SELECT due_schedule('later', 'y', run_at => '2031-01-02T03:04:05Z')")
expect_eq "run_at" "2031-01-02T03:04:05.000Z" "$(field "$at" due_at)"
k1=$(sql -c "SELECT due_schedule('keyed', 'a', key => 'order-7')")
k2=$(sql -c "SELECT due_schedule('keyed', 'b', key => 'order-7')")
expect_eq "same key, same live task" "$k1" "$k2"
expect_eq "the first payload kept" a "$(field "$k1" payload)"
"$DUE" cancel "$k1" >/dev/null
k3=$(sql -c "SELECT due_schedule('keyed', 'c', key => 'order-7')")
[ "$k3" != "$k1" ] && ok || bad "a key whose task ended gives a new task"

echo "== bad input: an error naming it, nothing written"
before=$(tasks)
sql_err() { # WHAT CALL
	if sql -c "SELECT $2" >"$T/out" 2>"$T/err"; then
		bad "$1: accepted"
	elif grep -qF -- "$1" "$T/err"; then
		ok
	else
		bad "$1: error does not name it: $(cat "$T/err")"
	fi
}
sql_err "invalid kind 'bad kind'" "due_schedule('bad kind', 'x')"
sql_err "invalid kind '': empty" "due_schedule('', 'x')"
sql_err "invalid delay (run_in): negative" "due_schedule('k', 'x', run_in => interval '-1 second')"
sql_err "more than 100 years" "due_schedule('k', 'x', run_in => interval '200 years')"
sql_err "not both" "due_schedule('k', 'x', run_in => interval '1 minute', run_at => now())"
sql_err "before 1970" "due_schedule('k', 'x', run_at => '1960-01-01Z')"
sql_err "invalid max_attempts 0" "due_schedule('k', 'x', max_attempts => 0)"
sql_err "invalid key '': empty" "due_schedule('k', 'x', key => '')"
sql_err "over the limit" "due_schedule('k', repeat('x', 1048577))"
expect_eq "bad calls wrote nothing" "$before" "$(tasks)"

echo "== due init adds the function to an existing store"
sql -c "DROP FUNCTION due_schedule(text, text, interval, timestamptz, text, integer)"
"$DUE" init >/dev/null && ok || bad "init again"
id=$(sql -c "SELECT due_schedule('again', 'x')")
[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "after a second init: '$id'"
finish
