#!/usr/bin/env bash
# test_cron_wake.sh - a schedule added while workers run fires from its
# first slots, on every store this run has.
#
# A worker that hears the store's notifications runs its scheduler pass
# every 5 minutes when idle (issues 13 and 39: the idle budget); `due cron add` and `due cron rm` notify, and the note brings the
# next pass forward.  A worker that polls (SQLite, MariaDB) passes every
# 5 s.  Here the worker starts on an empty store, its first pass finds no
# schedule, and 6 s later a schedule firing every second is added: its
# first task must be DONE well before the minute a missed note would cost.
# Then it is removed: no new slot task after the removal's note.
#
# The deadline (25 s) is a hang guard that also tells a missed note (5 min)
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

# A slot that waits for its previous run (--overlap wait) does not make
# the scheduler spin: its slot time has passed, and every worker used to
# pass again every 20 ms (a schedule list and the previous task's read,
# about 100 store calls a second) for as long as that run lasted.  The
# scheduler is the same code on every store; Redis lets this count one
# store's calls from outside (MONITOR, filtered by the scratch store's
# name).  A resource check, not a timing: a backoff to 1 s makes a few
# passes in the 3 s watched, the spin about 150.
spin_on() { # LABEL URL
	[ "$1" = redis ] || return 0
	local w n
	export DUE_DB=$2
	echo "== $1: a waiting slot"
	command -v redis-cli >/dev/null || { bad "redis-cli is not installed"; return; }
	"$DUE" init >/dev/null && ok || { bad "$1 spin: init"; return; }
	"$DUE" cron add slow '* * * * * *' slow --overlap wait >/dev/null ||
		bad "$1 spin: cron add"
	"$DUE" work --kinds slow --concurrency 2 \
		--exec 'touch "$OUT/slow.started"; sleep 8' 2>"$T/spin.log" &
	w=$!
	wait_for "$1 spin: the first slot's run started" 30 test -e "$OUT/slow.started"
	sleep 1 # the next slot is due now and waits for the running one
	timeout 3 redis-cli -u "$DUE_TEST_REDIS_URL" monitor >"$T/monitor.txt" 2>&1 || true
	n=$(grep -F "due_cronspin_$$" "$T/monitor.txt" | grep -c '"cron_list"' || true)
	[ "$n" -ge 1 ] && [ "$n" -le 12 ] && ok ||
		bad "$1 spin: $n scheduler passes in 3 s while a slot waited (expected 1..12)"
	"$DUE" cron rm slow >/dev/null || bad "$1 spin: cron rm"
	kill -TERM "$w"; wait "$w" || true
}
export OUT="$T/out"
mkdir -p "$OUT"
on_each_store spin_on cronspin
finish
