# store_proc.sh - the process-level checks test_redis.sh and test_mysql.sh
# share (sourced after lib.sh): a private server of the backend, `due
# verify`, three workers over 300 tasks, kill -9 of a worker, a SIGSTOPped
# worker's late commit, the worker's connections dropped by the server,
# and kill -9 of the server mid-drain.
#
# Everything is read back through the due CLI (`due ls --json` carries
# every task's attempts), so the checks are the same on every store; a
# backend's own faults (how its connections are dropped, a Redis without
# an AOF) stay in its test file.
#
# No timing assertions: handlers that must still be running block on a
# file; "the worker met the outage" is a line in its log; deadlines are
# hang guards only.

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export OUT="$T/handler-out"
mkdir -p "$OUT"
SP_DIR=
SP_SERVER=

# sp_require NAME ENVVAR: exit (after finish) unless the build has
# backend NAME and ENVVAR names a server.  Under CI=true that is a
# failure, never a silent skip.
sp_require() {
	local name=$1 var=$2 why=
	if ! has_backend "$name"; then
		why="this build of due has no $name store"
	elif [ -z "${!var:-}" ]; then
		why="$var is not set"
	fi
	[ -z "$why" ] && return 0
	if [ "${CI:-}" = true ]; then
		bad "CI=true but the $name process tests cannot run: $why"
		finish
		exit 1
	fi
	echo "NOTE: $name process tests not run: $why"
	finish
	exit 0
}

# sp_start SCRIPT: start a private server of our own (this test kills and
# restarts it, which must not hit the suites sharing the run's server);
# prints nothing, sets SP_URL.  Stopped and removed on exit.
sp_start() {
	SP_SERVER=$ROOT/scripts/$1
	SP_DIR=$(mktemp -d "/tmp/due-$1-XXXXXX")
	trap 'kill $(jobs -p) 2>/dev/null || true; "$SP_SERVER" stop "$SP_DIR" >/dev/null 2>&1; rm -rf "$T" "$SP_DIR"' EXIT
	if ! SP_URL=$("$SP_SERVER" start "$SP_DIR"); then
		bad "cannot start a private server with scripts/$1"
		finish
		exit 1
	fi
}

# sp_tasks KIND EXPR: EXPR (python, over the list `t` of KIND's tasks as
# `due ls --json` prints them, attempts included) printed
sp_tasks() {
	"$DUE" ls --kind "$1" --limit 10000 --json |
		python3 -c "import json, sys; t = json.load(sys.stdin); print($2)"
}
sp_count() { sp_tasks "$1" "sum(1 for x in t if x['state'] == '$2')"; }
sp_all_done() { [ "$(sp_count "$1" DONE)" = "$2" ]; }
sp_left() { local d; d=$(sp_count "$1" DONE) && echo $(($2 - d)); }
lines() { if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi; }
has_lines() { [ "$(lines "$1")" -ge "$2" ]; }

# sp_verify URL SKIPPABLE...: `due verify` passes every case but the named
# ones, which may only be skipped, each with its reason printed.
sp_verify() {
	local url=$1 c line
	shift
	"$DUE" verify --db "$url" >"$T/verify.out" 2>"$T/verify.err" || true
	cat "$T/verify.out"
	grep -q "^[0-9]* passed, 0 failed$" "$T/verify.out" && ok ||
		bad "verify: closing line (stderr: $(tail -3 "$T/verify.err"))"
	for c in $("$DUE" verify --list); do
		line=$(grep "^CASE $c " "$T/verify.out" || true)
		case " $* " in
		*" $c "*)
			case $line in
			"CASE $c PASS"* | "CASE $c SKIP reason="?*) ok ;;
			*) bad "verify: case $c neither passed nor said why it was skipped: '$line'" ;;
			esac
			;;
		*)
			case $line in
			"CASE $c PASS"*) ok ;;
			*) bad "verify: case $c did not pass: '$line'" ;;
			esac
			;;
		esac
	done
	echo "verify: $(grep -c "^CASE .* PASS" "$T/verify.out" || true) passed," \
		"$(grep -c "^CASE .* SKIP" "$T/verify.out" || true) skipped"
}

# Three `due work` processes, 300 tasks due within 2 s: each handler run
# exactly once, each task DONE at attempt 1 with one attempt recorded.
sp_three_workers() {
	local pids=() p i
	for i in $(seq 0 299); do printf '{"kind":"three","in":"%dms"}\n' $((i * 2000 / 300)); done >"$T/b.jsonl"
	"$DUE" add --batch "$T/b.jsonl" >/dev/null && ok || bad "batch add of 300"
	for w in 1 2 3; do
		"$DUE" work -q --kinds three --poll 20ms --owner "w$w" \
			--exec 'echo "$DUE_TASK_ID" >> "$OUT/three"' &
		pids+=($!)
	done
	wait_for "300 tasks done" 120 sp_all_done three 300
	for p in "${pids[@]}"; do kill -TERM "$p"; done
	for p in "${pids[@]}"; do wait "$p" || bad "worker $p exit"; done
	expect_eq "300 effects" 300 "$(lines "$OUT/three")"
	expect_eq "no handler ran twice" 300 "$(sort -u "$OUT/three" | wc -l)"
	expect_eq "one attempt each, at attempt 1" 300 \
		"$(sp_tasks three "sum(1 for x in t if x['attempt'] == 1 and len(x['attempts']) == 1)")"
	expect_eq "all three workers claimed" 3 \
		"$(sp_tasks three "len({a['worker'] for x in t for a in x['attempts']})")"
}

# kill -9 of a worker mid-task: its lease runs out and another worker
# finishes the task at attempt 2; the dead try is LEASE_EXPIRED.
sp_kill9_worker() {
	local id a b rc=0
	id=$("$DUE" add k9)
	"$DUE" work -q --kinds k9 --lease 2s --owner A \
		--exec 'touch "$OUT/k9.started"; until [ -e "$OUT/k9.release" ]; do sleep 0.05; done; echo A' &
	a=$!
	wait_for "k9 handler running" 60 test -e "$OUT/k9.started"
	kill -9 "$a"
	wait "$a" || rc=$?
	expect_eq "worker A died by SIGKILL" 137 "$rc"
	"$DUE" work -q --kinds k9 --lease 2s --poll 50ms --owner B --exec 'echo B' &
	b=$!
	wait_for "k9 reclaimed and done" 60 sp_all_done k9 1
	kill -TERM "$b"; wait "$b" || bad "worker B exit"
	touch "$OUT/k9.release"
	expect_eq "reclaimed at attempt 2" "DONE 2 B" \
		"$(sp_tasks k9 "'%s %d %s' % (t[0]['state'], t[0]['attempt'], (t[0]['result'] or '').strip())")"
	expect_eq "the dead try expired, the second committed" "A:LEASE_EXPIRED B:DONE" \
		"$(sp_tasks k9 "' '.join('%s:%s' % (a['worker'], a['outcome']) for a in t[0]['attempts'])")"
	echo "kill -9 worker: task $id"
}

# A worker SIGSTOPped past its lease, after its handler answered and
# before its commit (a pause, a GC): another worker runs the task at
# attempt 2; the stopped one, resumed, commits late and is refused
# (REJECTED_STALE on attempt 1); two runs in all.  (A handler still
# running when the lease clock runs out is killed by its guard even while
# the worker is stopped: test_frozen_worker.sh.)
sp_sigstop() {
	local a b
	"$DUE" add stall >/dev/null
	"$DUE" work -q --kinds stall --lease 3s --owner A \
		--exec 'echo "A $DUE_ATTEMPT" >> "$OUT/stall.runs"; touch "$OUT/stall.started"
			until [ -e "$OUT/stall.release" ]; do sleep 0.02; done; echo A; touch "$OUT/stall.finished"' \
		2>"$T/stall-a.log" &
	a=$!
	wait_for "stall handler running" 60 test -e "$OUT/stall.started"
	kill -STOP "$a"
	touch "$OUT/stall.release"
	wait_for "A's handler answered" 60 test -e "$OUT/stall.finished"
	"$DUE" work -q --kinds stall --lease 1s --poll 20ms --owner B \
		--exec 'echo "B $DUE_ATTEMPT" >> "$OUT/stall.runs"; echo B' &
	b=$!
	wait_for "stall done by B" 60 sp_all_done stall 1
	kill -CONT "$a"
	late() { [ "$(sp_tasks stall "t[0]['attempts'][0].get('late_commit')")" = REJECTED_STALE ]; }
	wait_for "A's late commit refused (REJECTED_STALE)" 60 late
	kill -TERM "$a" "$b"
	wait "$a" || true
	wait "$b" || bad "worker B exit"
	expect_eq "final: B's result at attempt 2" "DONE 2 B" \
		"$(sp_tasks stall "'%s %d %s' % (t[0]['state'], t[0]['attempt'], (t[0]['result'] or '').strip())")"
	expect_eq "the task ran once more, and only once" "A 1,B 2" "$(paste -sd, "$OUT/stall.runs")"
}

# A worker's log through an outage: a handful of lines, the start and the
# end of the outage said once each.
sp_quiet_log() {
	local n
	n=$(wc -l <"$1")
	echo "$2: $n log lines through the outage"
	[ "$n" -lt 20 ] && ok || bad "$2: $n log lines: $(head -5 "$1")"
	grep -q "store unavailable" "$1" && ok || bad "$2: outage start not logged: $(head -3 "$1")"
	grep -q "store answers again" "$1" && ok || bad "$2: outage end not logged: $(tail -3 "$1")"
}

# sp_dropped_connections DROP: the store's connections dropped by DROP (a
# function that drops every due connection and prints how many) while four
# handlers run, and again while they commit: the worker lives on and exits
# 0, each handler runs once, and every task is DONE once with its own
# result.  A claim whose commit reached the server but whose answer died
# with the connection is unknown to the worker: the task waits out its
# lease and is taken again at attempt 2 (its handler never ran at attempt
# 1, as the runs show).  So each task ends at attempt 1, or at attempt 2
# after exactly that.
sp_dropped_connections() {
	local drop=$1 wpid killed rc
	for i in $(seq 1 8); do echo '{"kind":"drop"}'; done | "$DUE" add --batch - >/dev/null
	"$DUE" work --kinds drop --concurrency 4 --lease 10s --poll 50ms \
		--exec 'echo "$DUE_TASK_ID" >> "$OUT/drop.runs"
			until [ -e "$OUT/drop.go" ]; do sleep 0.02; done; echo "r$DUE_TASK_ID"' 2>"$T/drop.log" &
	wpid=$!
	wait_for "four handlers running" 60 has_lines "$OUT/drop.runs" 4
	killed=$("$drop")
	echo "connections dropped mid-handler: $killed"
	[ "$killed" -ge 1 ] && ok || bad "no due connection found to drop"
	touch "$OUT/drop.go"
	echo "connections dropped while committing: $("$drop")"
	# (on a failure, go on: the server crash after says more)
	wait_for "8 drop tasks done" 60 sp_all_done drop 8 || true
	kill -0 "$wpid" && ok || bad "worker survived the dropped connections: $(tail -3 "$T/drop.log")"
	kill -TERM "$wpid" 2>/dev/null || true
	rc=0; wait "$wpid" || rc=$?
	expect_eq "worker exits 0" 0 "$rc"
	expect_eq "each handler ran once" "8 8" "$(lines "$OUT/drop.runs") $(sort -u "$OUT/drop.runs" | wc -l)"
	expect_eq "each task DONE once, its own result (attempt 1, or 2 after a claim whose answer was lost)" 8 \
		"$(sp_tasks drop "sum(1 for x in t if [a['outcome'] for a in x['attempts']] in (['DONE'], ['LEASE_EXPIRED', 'DONE']) and (x['result'] or '').strip() == 'r%d' % x['id'])")"
	echo "attempt 2 after a lost claim answer: $(sp_tasks drop "sum(1 for x in t if x['attempt'] == 2)") task(s)"
	echo "dropped connections: worker log: $(wc -l <"$T/drop.log") lines"
	grep -q "store unavailable" "$T/drop.log" && ok || bad "the worker never met a dropped connection: $(cat "$T/drop.log")"
}

# kill -9 of the SERVER mid-drain (PIDFILE names it), then a restart on the
# same data: every task whose `due add` was acknowledged runs, none is
# committed twice, and the worker logs the outage quietly and recovers.
# A producer keeps adding through the crash; only its acknowledged ids
# count.
sp_server_crash() {
	local pidfile=$1 spid wpid ppid rc=0
	for i in $(seq 1 40); do echo '{"kind":"crash"}'; done | "$DUE" add --batch - >"$T/acked"
	"$DUE" work --kinds crash --concurrency 4 --lease 5s --poll 50ms \
		--exec 'echo "$DUE_TASK_ID" >> "$OUT/crash"; sleep 0.05; echo "r$DUE_TASK_ID"' \
		2>"$T/crash.log" &
	wpid=$!
	(while [ ! -e "$OUT/producer.stop" ]; do
		"$DUE" add crash 2>>"$T/producer.err" >>"$T/acked" || sleep 0.05
	done) &
	ppid=$!
	wait_for "drain under way" 60 has_lines "$OUT/crash" 10
	spid=$(cat "$pidfile")
	kill -9 "$spid"
	wait_for "server gone" 30 bash -c "! kill -0 $spid 2>/dev/null"
	wait_for "the worker met the outage" 60 grep -q "store unavailable" "$T/crash.log"
	kill -0 "$wpid" && ok || bad "worker died with the server"
	expect_eq "server back on the same URL" "$SP_URL" "$("$SP_SERVER" start "$SP_DIR")"
	n=$(lines "$T/acked")
	wait_for "adds acknowledged again after the restart" 60 has_lines "$T/acked" $((n + 5)) ||
		echo "the producer's last errors: $(tail -3 "$T/producer.err" 2>/dev/null)" \
			"adds running: $(pgrep -af "add crash" | head -3) server:" \
			"$("$SP_SERVER" url "$SP_DIR" 2>&1)" >&2
	touch "$OUT/producer.stop"
	wait "$ppid" || true
	acked=$(sort -u "$T/acked" | wc -l)
	sort -u "$T/acked" >"$T/acked.sorted"
	acked_left() {
		"$DUE" ls --kind crash --limit 10000 --json | python3 -c "import json, sys
done = {x['id'] for x in json.load(sys.stdin) if x['state'] == 'DONE'}
print(sum(1 for l in open('$T/acked.sorted') if int(l) not in done))"
	}
	wait_drain "all $acked acknowledged tasks done" 60 acked_left
	kill -0 "$wpid" && ok || bad "worker survived"
	kill -TERM "$wpid"; wait "$wpid" || rc=$?
	expect_eq "worker exits 0 after the outage" 0 "$rc"
	expect_eq "every acknowledged task ran" "$acked" \
		"$(sort -u "$T/acked" | comm -12 - <(sort -u "$OUT/crash") | wc -l)"
	expect_eq "no result committed twice" 0 \
		"$(sp_tasks crash "sum(1 for x in t if sum(a['outcome'] == 'DONE' for a in x['attempts']) != (x['state'] == 'DONE'))")"
	expect_eq "each result is its own task's" 0 \
		"$(sp_tasks crash "sum(1 for x in t if x['state'] == 'DONE' and (x['result'] or '').strip() != 'r%d' % x['id'])")"
	expect_eq "no commit with a stale attempt" 0 \
		"$(sp_tasks crash "sum(1 for x in t for a in x['attempts'] if a['outcome'] == 'DONE' and a['attempt'] != x['attempt'])")"
	sp_quiet_log "$T/crash.log" "server kill -9"
	echo "server crash: $acked acknowledged tasks, $(lines "$OUT/crash") handler runs" \
		"(a re-run after a commit the crash swallowed is allowed: at least once)"
}
