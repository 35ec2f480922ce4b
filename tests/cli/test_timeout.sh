#!/usr/bin/env bash
# test_timeout.sh - time limits with real `due work` processes: a handler
# running past its task's --timeout, or its kind's (`due kind set K
# --timeout`), is stopped (SIGTERM to its process group, SIGKILL after the
# kill grace for one that ignores SIGTERM), each try fails with the outcome
# TIMED_OUT and the error "timed out after 1s", the task goes DEAD after its
# attempts, the worker logs each time-out, and no handler process is left.
# A handler that ends within its limit is DONE.
#
# On SQLite, and on PostgreSQL when DUE_TEST_PG_URL is set (a schema of its
# own on that cluster); under CI=true a missing server is a failure, never
# a silent skip.  No timing assertions: deadlines are hang guards.
. "$(dirname "$0")/lib.sh"
export OUT="$T/handler-out"
mkdir -p "$OUT"
# the handlers sleep this long: `pgrep -f "sleep $mark"` finds them and
# nothing else (the commands expand it, so the worker's own command line
# does not carry it)
export mark="30.0$$"

show() { "$DUE" show "$1" --json; }
field() { show "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }
# every attempt's outcome, then every attempt's error, one a line
attempts() {
	show "$1" | python3 -c '
import json, sys
a = json.load(sys.stdin)["attempts"]
print(" ".join(x["outcome"] for x in a))
print("|".join(x["error"] or "" for x in a))'
}
# a handler's sleep, or a command still under its guard (worker ->
# due-spawner -> due-guard -> the command: src/worker/spawn.c; an idle
# guard waits for its slot's next command)
handlers_left() {
	pgrep -f "sleep $mark" >/dev/null && return 0
	local s g
	for s in $(pgrep -P "$1"); do
		for g in $(pgrep -P "$s"); do pgrep -P "$g" >/dev/null && return 0; done
	done
	return 1
}

# check_dead LABEL ID LOG WORKER_PID: DEAD after two tries, both TIMED_OUT
# with the error, no handler left, a log line per time-out
check_dead() {
	local label=$1 id=$2 log=$3 wpid=$4 a
	wait_for "$label: DEAD" 60 is_state "$id" DEAD || return 0
	a=$(attempts "$id")
	expect_eq "$label: outcomes" "TIMED_OUT TIMED_OUT" "$(sed -n 1p <<<"$a")"
	expect_eq "$label: errors" "timed out after 1s|timed out after 1s" \
		"$(sed -n 2p <<<"$a")"
	expect_eq "$label: last error" "timed out after 1s" \
		"$(field "$id" last_error)"
	expect_eq "$label: no result" None "$(field "$id" result)"
	# a try is committed only once its handler's process has ended
	if handlers_left "$wpid"; then
		bad "$label: handler processes left: $(pgrep -af "$mark"; for s in $(pgrep -P "$wpid"); do for g in $(pgrep -P "$s"); do pgrep -aP "$g"; done; done)"
	else
		ok
	fi
	expect_eq "$label: logged time-outs" 2 \
		"$(grep -c "attempt [12]: timed out after 1s; stopping its handler" "$log")"
}

suite() {
	local s=$1 wpid id fast
	"$DUE" init >/dev/null && ok || bad "$s: init"

	# 1. the task's own limit; a task with a limit that ends in time is
	# DONE (5 s: a loaded machine can take over a second to fork and exec)
	id=$("$DUE" add own --timeout 1s --max-attempts 2 --backoff 10ms)
	fast=$("$DUE" add fast --timeout 5s --max-attempts 1)
	"$DUE" work --kinds own,fast --poll 50ms --kill-grace 2s \
		--handler 'own=sleep "$mark"; echo never' \
		--handler "fast=echo quick" 2>"$T/$s.own.log" &
	wpid=$!
	wait_for "$s: fast task done" 30 is_state "$fast" DONE
	check_dead "$s: own limit" "$id" "$T/$s.own.log" "$wpid"
	expect_eq "$s: fast result" "quick" "$(field "$fast" result)"
	kill "$wpid"
	wait "$wpid" || true

	# 2. the kind's limit, with a handler that ignores SIGTERM: SIGKILL
	# after the kill grace stops it
	"$DUE" kind set viakind --timeout 1s >/dev/null && ok || bad "$s: kind set"
	id=$("$DUE" add viakind --max-attempts 2 --backoff 10ms)
	"$DUE" work --kinds viakind --poll 50ms --kill-grace 300ms \
		--exec 'trap "" TERM; sleep "$mark"; echo never' \
		2>"$T/$s.kind.log" &
	wpid=$!
	check_dead "$s: kind's limit" "$id" "$T/$s.kind.log" "$wpid"
	kill "$wpid"
	wait "$wpid" || true
}

suite sqlite

if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; fi
	echo "NOTE: DUE_TEST_PG_URL not set: PostgreSQL time limits not tested"
else
	schema="due_timeout_$$"
	if psql -qX "$DUE_TEST_PG_URL" -c "CREATE SCHEMA $schema" >/dev/null; then
		trap 'kill $(jobs -p) 2>/dev/null || true; psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1; rm -rf "$T"' EXIT
		sep='?'
		case "$DUE_TEST_PG_URL" in *\?*) sep='&' ;; esac
		export DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
		suite postgres
	else
		bad "cannot create a schema on $DUE_TEST_PG_URL"
	fi
fi
finish
