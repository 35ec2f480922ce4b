#!/usr/bin/env bash
# test_listen_restart.sh - an idle worker hears new tasks again soon after
# its store comes back from a restart, on every network store this run has
# (PostgreSQL, Redis, MariaDB; SQLite has no session to lose).
#
# The worker reaches its store through a TCP proxy this test owns
# (stallproxy.py); stopping the proxy closes every connection and refuses
# new ones, as a server restart does; it is started again on the same
# port 2 s later.  The worker's safety poll is an hour, so a task submitted
# (directly, by another process) once the store is back runs only if the
# worker listened again by itself.  Before, a worker whose first attempt to
# listen again failed (the store still down) waited for its safety poll:
# an hour here, 30 s by default; and a worker that did listen again on a
# new session refilled only after the wait it was in (an hour), so a task
# submitted before its LISTEN was missed (PostgreSQL: every run).
#
# The deadline (20 s) is a hang guard; nothing is timed.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROXY=$ROOT/tests/cli/stallproxy.py
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; [ -n "${KEEP:-}" ] && echo "kept $T" || rm -rf "$T"' EXIT
export OUT="$T/out"
mkdir -p "$OUT"

restart_on() { # BACKEND URL
	local b=$1 url=$2 port purl proxy w
	[ "$b" = sqlite ] && return 0
	echo "== $b"
	port=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlsplit(sys.argv[1]).port)' "$url")
	python3 "$PROXY" "$port" "$T/$b.port" &
	proxy=$!
	wait_for "$b: proxy up" 10 test -s "$T/$b.port"
	local pport
	pport=$(cat "$T/$b.port")
	purl=${url/:$port\//:$pport\/}
	"$DUE" init --db "$url" >/dev/null && ok || { bad "$b: init"; return; }
	"$DUE" work --db "$purl" --kinds back --poll 1h --no-cron ${VERB:-} \
		--exec 'echo "$DUE_TASK_ID" >> "$OUT/'"$b"'"' 2>"$T/$b.log" &
	w=$!
	wait_for "$b: worker listening" 30 grep -q "discovery: timing wheel" "$T/$b.log"
	sleep 1 # its first refill and claim are over: an idle worker
	# the store "restarts": every connection closed, none accepted for 2 s
	kill -TERM "$proxy"; wait "$proxy" 2>/dev/null || true
	sleep 2
	rm -f "$T/$b.port"
	python3 "$PROXY" "$port" "$T/$b.port" "$pport" &
	proxy=$!
	wait_for "$b: proxy back" 10 test -s "$T/$b.port"
	local id
	id=$("$DUE" add back --db "$url") || bad "$b: submit after the restart"
	wait_for "$b: the task submitted after the restart ran (not at the hourly poll)" 20 \
		test -s "$OUT/$b"
	expect_eq "$b: that task ran" "$id" "$(head -1 "$OUT/$b" 2>/dev/null)"
	kill -TERM "$w"; wait "$w" || bad "$b: worker exit"
	kill -TERM "$proxy"; wait "$proxy" 2>/dev/null || true
}

on_each_store restart_on listenrestart
finish
