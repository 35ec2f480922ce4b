#!/usr/bin/env bash
# test_store_stall.sh - the lease holds when the store hangs (issue 35), on
# every store, with real processes and a real stalled path:
#   network stores (PostgreSQL, Redis unsharded and ?shards=4, MariaDB):
#     worker A reaches the
#     server through a TCP proxy this test owns (stallproxy.py) and
#     freezes with SIGSTOP, a partition; worker B reaches it directly;
#   SQLite: another process holds the write lock past the lease;
#   PostgreSQL and MariaDB also: another client holds a row lock on a task
#     A runs (SELECT ... FOR UPDATE), no fault at all.
# For each: A's attempt-1 handlers ignore SIGTERM (only the lease clock's
# SIGKILL can stop them in time); B runs attempt 2, whose handler records
# whether attempt 1's processes were still alive when it started.
# Checked: no attempt-1 handler alive when attempt 2 starts, every task
# DONE, A says "lease not confirmed" once per try and a handful of lines;
# a SIGTERM'd A under the frozen store is gone within grace + kill grace +
# the store bound; a CLI call through the frozen path fails within its
# timeout= with "no answer from the store at HOST:PORT in N s", exit 5; a
# freeze shorter than every timeout costs no lease.
# Deadlines are hang guards; the figures printed are measurements.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROXY=$ROOT/tests/cli/stallproxy.py
CLEANUP=()
bg=()
cleanup() {
	local p c
	for p in "${bg[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -KILL "$p" 2>/dev/null || true
	done
	for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
	# STALL_KEEP=1 keeps the workers' logs for a look
	if [ -n "${STALL_KEEP:-}" ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT

ms() { echo $(($(date +%s%N) / 1000000)); }

# The handler: attempt 1 ignores SIGTERM and sleeps (so only a SIGKILL
# stops it); a later attempt records whether an earlier attempt's
# processes still live (not zombies), then succeeds.
cat >"$T/handler.sh" <<'EOF'
#!/bin/sh
d=$STALL_DIR
# pstate PID: its state letter (R, S, D, Z...), nothing when gone, from ONE
# read of its stat: a test for the file and then a second read raced the
# reaping of a zombie (the read found nothing, and nothing is not Z), and
# a killed attempt-1 handler was once taken for a live one
pstate() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0; s=${s##*') '}; echo "${s%% *}"; }
echo "$DUE_TASK_ID $DUE_ATTEMPT start $(date +%s%N)" >>"$d/runs"
if [ "$DUE_ATTEMPT" -gt 1 ]; then
	for f in "$d"/pid."$DUE_TASK_ID".*; do
		[ -e "$f" ] || continue
		for p in $(cat "$f"); do
			st=$(pstate "$p")
			case $st in "" | Z | X) ;; *) echo "$DUE_TASK_ID $DUE_ATTEMPT overlaps $f: pid $p in state $st" >>"$d/overlap" ;; esac
		done
	done
	echo "ok $DUE_ATTEMPT"
	exit 0
fi
trap '' TERM
sleep 120 &
echo "$$ $!" >"$d/pid.$DUE_TASK_ID.$DUE_ATTEMPT"
wait
EOF
chmod +x "$T/handler.sh"

# via_proxy URL PORT: URL with its 127.0.0.1:PORT replaced by the proxy's
via_proxy() { sed -E "s#127\.0\.0\.1:[0-9]+#127.0.0.1:$2#" <<<"$1"; }
server_port() { sed -E 's#.*127\.0\.0\.1:([0-9]+).*#\1#' <<<"$1"; }
with_opt() { case "$1" in *\?*) echo "$1&$2" ;; *) echo "$1?$2" ;; esac; }

# start_proxy DIR URL: a proxy to URL's server; sets PROXY_PID, PROXY_PORT
start_proxy() {
	rm -f "$1/proxy.port"
	python3 "$PROXY" "$(server_port "$2")" "$1/proxy.port" &
	PROXY_PID=$!
	bg+=("$PROXY_PID")
	wait_for "the proxy listens" 10 test -s "$1/proxy.port" || return 1
	PROXY_PORT=$(cat "$1/proxy.port")
}

# pstate PID: as the handler's (one read of the stat)
pstate() {
	local s
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	s=${s##*') '}
	echo "${s%% *}"
}
started() { [ "$(grep -c " $2 start" "$1/runs" 2>/dev/null || true)" -ge "$3" ]; }
attempt1_gone() {
	local f p
	for f in "$1"/pid.*.1; do
		[ -e "$f" ] || return 1
		for p in $(cat "$f"); do
			case $(pstate "$p") in "" | Z | X) ;; *) return 1 ;; esac
		done
	done
	return 0
}
n_done() {
	"$DUE" ls --db "$1" --kind "$2" --json 2>/dev/null |
		python3 -c "import json,sys; print(sum(1 for t in json.load(sys.stdin) if t['state']=='DONE'))"
}
all_done() { [ "$(n_done "$1" "$2")" = "$3" ]; }
attempts_of() {
	"$DUE" ls --db "$1" --kind "$2" --json |
		python3 -c "import json,sys; print(' '.join(sorted('%s/%d' % (t['state'], t['attempt']) for t in json.load(sys.stdin))))"
}
worker_gone() { ! kill -0 "$1" 2>/dev/null; }

# overlap_report DIR: A's handlers outlived the wait: say what A logged
overlap_report() {
	echo "A's log: $(sed -n 1,15p "$1/a.log")" >&2
	echo "overlaps: $(cat "$1/overlap" 2>/dev/null || echo none yet)" >&2
}

# check_round LABEL DIR URL KIND N: after a stall round
check_round() {
	local label=$1 d=$2 url=$3 kind=$4 n=$5
	wait_for "$label: every $kind task DONE" 90 all_done "$url" "$kind" "$n" || true
	expect_eq "$label: no attempt-1 handler alive when attempt 2 started" "" \
		"$(cat "$d/overlap" 2>/dev/null || true)"
	# an overlap: what A said of its stops and kills (a late one says by
	# how much), and when each try started (ns since the epoch)
	if [ -s "$d/overlap" ]; then
		grep -E "lease not confirmed|SIGKILL" "$d/a.log" >&2 || true
		sort -k4 "$d/runs" >&2
		echo "B: $(sed -n 1,3p "$d/b.log")" >&2
	fi
	expect_eq "$label: A stopped each try once, saying why" "$n" \
		"$(grep -c "lease not confirmed for" "$d/a.log" || true)"
	echo "$label: tasks $(attempts_of "$url" "$kind")"
}

# stall_network LABEL URL [LAYOUT]: the partition round, SIGTERM under it,
# the CLI bound, a short freeze, then a slow one (not for a second LAYOUT
# of a store: the call watch is the worker's, the same on every layout)
stall_network() {
	local label=$1 url=$2 d=$T/$1 purl t0 t1 rc a b
	mkdir -p "$d"
	"$DUE" init --db "$url" >/dev/null
	start_proxy "$d" "$url" || return 0
	purl=$(via_proxy "$url" "$PROXY_PORT")
	for i in 1 2 3 4; do "$DUE" add st --db "$url" >/dev/null; done
	STALL_DIR=$d "$DUE" work --db "$purl" --kinds st --lease 6s --concurrency 4 \
		--grace 2s --kill-grace 30s --exec "$T/handler.sh" 2>"$d/a.log" &
	a=$!
	bg+=("$a")
	wait_for "$label: A runs 4 tries" 60 started "$d" 1 4 || return 0
	kill -STOP "$PROXY_PID"
	t0=$(ms)
	STALL_DIR=$d "$DUE" work --db "$url" --kinds st --lease 6s --concurrency 4 \
		--exec "$T/handler.sh" 2>"$d/b.log" &
	b=$!
	bg+=("$b")
	wait_for "$label: A's attempt-1 handlers gone" 30 attempt1_gone "$d" || overlap_report "$d"
	t1=$(ms)
	echo "$label: partition to A's handlers killed: $((t1 - t0)) ms (lease 6 s)"
	check_round "$label partition" "$d" "$url" st 4
	grep -q "store unavailable: .* failed: no answer from the store at 127.0.0.1:$PROXY_PORT in 2 s" "$d/a.log" && ok ||
		bad "$label: A did not say its calls went unanswered: $(sed -n 1,12p "$d/a.log")"

	# SIGTERM under the still frozen store: gone within grace 2 s + kill
	# grace (its handlers are already gone) + the store bound (2 s), and
	# a hang guard of a few seconds more for a loaded machine
	t0=$(ms)
	kill -TERM "$a"
	wait_for "$label: SIGTERM'd A exits under the frozen store" 15 worker_gone "$a" || true
	echo "$label: SIGTERM to exit under the partition: $(($(ms) - t0)) ms (grace 2 s, store bound 2 s)"
	echo "$label: A logged $(wc -l <"$d/a.log") lines"
	[ "$(wc -l <"$d/a.log")" -lt 40 ] && ok || bad "$label: A's log is $(wc -l <"$d/a.log") lines"

	# the CLI on the frozen path: the URL's timeout=, exit 5, the words
	t0=$(ms)
	expect_err 5 "no answer from the store at 127.0.0.1:$PROXY_PORT in 2 s" \
		"$DUE" add st --db "$(with_opt "$purl" timeout=2s)"
	echo "$label: due add on the frozen path failed after $(($(ms) - t0)) ms (timeout=2s)"
	t0=$(ms)
	rc=0
	"$DUE" health --db "$purl" >/dev/null 2>"$d/health.err" || rc=$?
	expect_eq "$label: due health on the frozen path (default bound) exits 5" 5 "$rc"
	echo "$label: due health on the frozen path failed after $(($(ms) - t0)) ms (default 10 s): $(cat "$d/health.err")"
	kill -CONT "$PROXY_PID"
	kill "$b" 2>/dev/null || true
	wait "$b" 2>/dev/null || true

	# a freeze shorter than every timeout: no lease lost, no overlap
	for i in 1 2 3; do "$DUE" add sf --db "$url" >/dev/null; done
	SF=$d "$DUE" work --db "$purl" --kinds sf --lease 6s --concurrency 4 \
		--exec 'touch "$SF/sf.$DUE_TASK_ID"; sleep 3' 2>"$d/c.log" &
	a=$!
	bg+=("$a")
	wait_for "$label: short round runs" 30 sh -c "ls '$d'/sf.* >/dev/null 2>&1" || true
	kill -STOP "$PROXY_PID"
	sleep 0.4
	kill -CONT "$PROXY_PID"
	wait_for "$label: short round DONE" 60 all_done "$url" sf 3 || true
	expect_eq "$label: a short freeze: every task DONE at attempt 1" "DONE/1 DONE/1 DONE/1" \
		"$(attempts_of "$url" sf)"
	expect_eq "$label: a short freeze stops nothing" 0 \
		"$(grep -c "lease not confirmed" "$d/c.log" || true)"
	kill "$a"
	wait "$a" 2>/dev/null || true

	# (the rest is the same on every layout of a store: once per store)
	if [ -n "${3:-}" ]; then
		kill "$PROXY_PID" 2>/dev/null || true
		return 0
	fi

	# a call unanswered for 3 s is logged once, and its end once: a 12 s
	# lease gives calls a 4 s bound; the path freezes after the claim, the
	# renewal due at 4 s hangs, and the path thaws at 8.3 s, while the
	# lease clock (10.2 s) still waits for a confirmation: nothing stopped
	# (the freeze starts as the handler does, a few ms after the claim: a
	# `due ls` poll for the claim took up to 1.5 s, and a thaw at 10.2 s
	# is too late)
	"$DUE" add sd --db "$url" >/dev/null
	SD=$d/sd.started "$DUE" work --db "$purl" --kinds sd --lease 12s \
		--exec 'touch "$SD"; sleep 11' 2>"$d/d.log" &
	a=$!
	bg+=("$a")
	wait_for "$label: the slow round runs" 30 test -e "$d/sd.started" || true
	kill -STOP "$PROXY_PID"
	sleep 8.3
	kill -CONT "$PROXY_PID"
	wait_for "$label: slow round DONE" 60 all_done "$url" sd 1 || true
	local said ended
	said=$(grep -c "store call .* has had no answer for [3-9]" "$d/d.log" || true)
	ended=$(grep -Ec "store call .* (answered|failed) after [3-9]" "$d/d.log" || true)
	echo "$label: calls said to have had no answer for 3 s: $said, their ends: $ended"
	[ "$said" -ge 1 ] && ok || bad "$label: no call unanswered for 3 s was said: $(cat "$d/d.log")"
	expect_eq "$label: each such call's end is said once" "$said" "$ended"
	expect_eq "$label: an 8.3 s freeze under a 12 s lease stops nothing" "DONE/1 0" \
		"$(attempts_of "$url" sd) $(grep -c "lease not confirmed" "$d/d.log" || true)"
	kill "$a"
	wait "$a" 2>/dev/null || true
	kill "$PROXY_PID" 2>/dev/null || true
}

# stall_lock LABEL URL LOCKCMD: a row lock on one task A runs, held by
# another client for LOCK_S seconds (LOCKCMD ID SECONDS runs it)
stall_lock() {
	local label=$1 url=$2 lock=$3 d=$T/$1-lock a b id t0
	mkdir -p "$d"
	id=$("$DUE" add sl --db "$url")
	STALL_DIR=$d "$DUE" work --db "$url" --kinds sl --lease 6s --concurrency 2 \
		--grace 2s --kill-grace 30s --exec "$T/handler.sh" 2>"$d/a.log" &
	a=$!
	bg+=("$a")
	wait_for "$label: A runs the task" 60 started "$d" 1 1 || return 0
	"$lock" "$id" 8 &
	bg+=("$!")
	t0=$(ms)
	STALL_DIR=$d "$DUE" work --db "$url" --kinds sl --lease 6s \
		--exec "$T/handler.sh" 2>"$d/b.log" &
	b=$!
	bg+=("$b")
	wait_for "$label: A's attempt-1 handler gone" 30 attempt1_gone "$d" || overlap_report "$d"
	echo "$label: row lock to A's handler killed: $(($(ms) - t0)) ms (lease 6 s)"
	check_round "$label row lock" "$d" "$url" sl 1
	kill "$a" "$b" 2>/dev/null || true
	wait "$a" "$b" 2>/dev/null || true
}

pg_lock() {
	psql -qX "$PG_LOCK_URL" -c "BEGIN" -c "SELECT 1 FROM $PG_SCHEMA.due_task WHERE id = $1 FOR UPDATE" \
		-c "SELECT pg_sleep($2)" -c "COMMIT" >/dev/null
}
my_lock() {
	MYSQL_PWD="$mypass" mariadb --no-defaults -h "$myhost" -P "$myport" -u "$myuser" "$MY_DB" \
		-e "BEGIN; SELECT id FROM due_task WHERE id = $1 FOR UPDATE; SELECT SLEEP($2); COMMIT;" >/dev/null
}

# stall_sqlite LABEL URL: another process holds the write lock past the lease
stall_sqlite() {
	local label=$1 url=$2 d=$T/$1 file=${2#sqlite:} a b t0
	mkdir -p "$d"
	"$DUE" init --db "$url" >/dev/null
	for i in 1 2 3 4; do "$DUE" add st --db "$url" >/dev/null; done
	STALL_DIR=$d "$DUE" work --db "$url" --kinds st --lease 6s --concurrency 4 \
		--grace 2s --kill-grace 30s --exec "$T/handler.sh" 2>"$d/a.log" &
	a=$!
	bg+=("$a")
	wait_for "$label: A runs 4 tries" 60 started "$d" 1 4 || return 0
	python3 -c "
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
c.execute('BEGIN IMMEDIATE')
open(sys.argv[2], 'w').close()
time.sleep(8)
c.execute('COMMIT')" "$file" "$d/locked" &
	bg+=("$!")
	wait_for "$label: the write lock is held" 30 test -e "$d/locked"
	t0=$(ms)
	STALL_DIR=$d "$DUE" work --db "$url" --kinds st --lease 6s --concurrency 4 \
		--exec "$T/handler.sh" 2>"$d/b.log" &
	b=$!
	bg+=("$b")
	wait_for "$label: A's attempt-1 handlers gone" 30 attempt1_gone "$d" || overlap_report "$d"
	echo "$label: write lock to A's handlers killed: $(($(ms) - t0)) ms (lease 6 s)"
	check_round "$label write lock" "$d" "$url" st 4
	kill "$a" "$b" 2>/dev/null || true
	wait "$a" "$b" 2>/dev/null || true
	# A's last report counts the stops: due stats (and /metrics) see them
	expect_eq "$label: the stopped tries are counted as leases lost" 4 \
		"$("$DUE" stats --db "$url" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['workers']['lease_lost'])")"
}

# orphan_leftover LABEL URL: a stopped command whose shell died of SIGTERM
# leaves a child that ignores it ('cd DIR && sh child.sh': the shell does
# not exec the command); the worker is then killed with SIGKILL before
# its kill grace ends.  The child must not live on (the guard keeps
# guarding what the shell left and takes it along when the worker dies):
# a worker that dies must not leave a handler running beside attempt 2.
orphan_leftover() {
	local label=$1 url=$2 d=$T/$1-orphan w id c t0
	mkdir -p "$d"
	printf '%s\n' "trap '' TERM" 'echo $$ >"$ORPHAN_DIR/child.pid"' 'sleep 120' >"$d/child.sh"
	id=$("$DUE" add ol --db "$url")
	ORPHAN_DIR=$d "$DUE" work --db "$url" --kinds ol --lease 3s --kill-grace 30s \
		--exec 'cd "$ORPHAN_DIR" && sh ./child.sh; echo after' 2>"$d/w.log" &
	w=$!
	bg+=("$w")
	wait_for "$label: the child runs" 30 test -s "$d/child.pid" || return 0
	c=$(cat "$d/child.pid")
	"$DUE" cancel "$id" --db "$url" >/dev/null
	# the cancel is seen at the next renewal (1 s): the shell gets SIGTERM
	# and dies of it; the child ignores it and has 30 s of kill grace
	wait_for "$label: the worker stops the try" 30 grep -q "cancel requested" "$d/w.log" || true
	sleep 0.5
	kill -KILL "$w"
	t0=$(ms)
	child_gone() { ! { [ -r "/proc/$c/stat" ] && [ "$(cut -d' ' -f3 "/proc/$c/stat")" != Z ]; }; }
	wait_for "$label: the stopped command's child dies with its worker" 10 child_gone ||
		kill -KILL "$c" 2>/dev/null || true
	echo "$label: kill -9 of the worker to its stopped command's child gone: $(($(ms) - t0)) ms"
}

run_store() {
	local label=$1 url=$2
	echo "--- $label"
	case $label in
	sqlite)
		stall_sqlite "$label" "$url"
		orphan_leftover "$label" "$url"
		;;
	postgres)
		stall_network "$label" "$url"
		PG_LOCK_URL=$DUE_TEST_PG_URL
		PG_SCHEMA=$(sed -E 's#.*search_path%3D([A-Za-z0-9_]+).*#\1#' <<<"$url")
		stall_lock "$label" "$url" pg_lock
		;;
	redis)
		stall_network "$label" "$url"
		# the sharded layout: four slots behind the same frozen path
		stall_network redis-shards "$(sed -E 's#prefix=#prefix=sh#' <<<"$url")&shards=4" layout
		;;
	mysql)
		stall_network "$label" "$url"
		mysql_url_parts "$url"
		MY_DB=${myhostport#*/}
		MY_DB=$(sed -E 's#^mysql://[^/]*/([^?]*).*#\1#' <<<"$url")
		stall_lock "$label" "$url" my_lock
		;;
	esac
}
on_each_store run_store stall
finish
