#!/usr/bin/env bash
# test_cron_wake.sh - a schedule added while workers run fires from its
# first slots, on every store this run has.
#
# A worker that hears the store's notifications (PostgreSQL, Redis) runs
# its scheduler pass about once a minute when idle (issue 13's idle
# budget); `due cron add` and `due cron rm` notify, and the note brings the
# next pass forward.  A worker that polls (SQLite, MariaDB) passes every
# 5 s.  Here the worker starts on an empty store, its first pass finds no
# schedule, and 6 s later a schedule firing every second is added: its
# first task must be DONE well before the minute a missed note would cost.
# Then it is removed: no new slot task after the removal's note.
#
# The deadline (25 s) is a hang guard that also tells a missed note (60 s)
# from a heard one; no timing is asserted beyond that.
. "$(dirname "$0")/lib.sh"
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT

n_tick() { # [STATE]: how many tick tasks there are (in STATE)
	"$DUE" ls --kind tick ${1:+--state "$1"} --limit 1000 --json |
		python3 -c 'import json, sys; print(len(json.load(sys.stdin)))'
}
n_done() { n_tick DONE; }
export DUE
export -f n_tick n_done

wake_on() { # LABEL URL
	local label=$1 w
	export DUE_DB=$2
	echo "== $label"
	"$DUE" init >/dev/null && ok || { bad "$label: init"; return; }
	"$DUE" work --exec true --concurrency 2 2>"$T/$label.log" &
	w=$!
	wait_for "$label: worker started" 20 grep -q "discovery:\|polling" "$T/$label.log"
	sleep 6 # the first scheduler pass is over; an idle one sleeps now
	"$DUE" cron add tick '* * * * * *' tick >/dev/null && ok || bad "$label: cron add"
	wait_for "$label: the new schedule's first slot ran" 25 \
		bash -c '[ "$(n_done)" -ge 1 ]'
	"$DUE" cron rm tick >/dev/null && ok || bad "$label: cron rm"
	sleep 3 # a slot materialized just before the removal may still run
	local before after
	before=$(n_tick)
	sleep 3
	after=$(n_tick)
	expect_eq "$label: no slot task after the removal" "$before" "$after"
	kill -TERM "$w"; wait "$w" || bad "$label: worker exit"
}

on_each_store wake_on cronwake
finish
