#!/usr/bin/env bash
# test_pipe.sh - `due work --pipe`: long-lived handler processes over the
# JSON line protocol, with both examples (examples/pipe_handler.py and
# examples/pipe_handler.js): results and failures, binary payloads, stderr
# in the log with the task id, one reused process per slot, a process that
# exits, is killed or writes a malformed line (the try fails naming why,
# a fresh process runs the next task), a cancel or a time limit while
# running (SIGTERM, fresh process), exactly once over a drain, and no process outliving its
# worker (SIGTERM or SIGKILL of the worker).
. "$(dirname "$0")/lib.sh"
EX=$(cd "$(dirname "$0")/../../examples" && pwd)
field() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }
pid_of() { field "$1" result | cut -d' ' -f1; }
gone() { ! kill -0 "$1" 2>/dev/null; }
# handlers WPID: the worker's handler processes (worker -> spawner -> guard
# -> the shell or what it exec'd); fails when there is none yet
handlers() {
	local s g
	for s in $(pgrep -P "$1"); do
		for g in $(pgrep -P "$s"); do pgrep -P "$g"; done
	done | grep .
}

# bad input
expect_err 2 "--pipe: empty command" "$DUE" work --pipe ' '
expect_err 2 "--handler k=pipe: empty command" "$DUE" work --handler k=pipe:
expect_err 2 "not both" "$DUE" work --pipe cat --exec cat

# A group that is not UTF-8 (written past due's checks, here by SQL) goes
# to the handler as group_b64, as every stored value does: the try runs
# (it used to fail every attempt with "out of memory", unable to make the
# request line)
"$DUE" init >/dev/null
ng=$("$DUE" add kg --group okg)
sqlite3 "$T/due.db" "UPDATE due_task SET grp = CAST(X'67fe' AS TEXT) WHERE id = $ng"
cat >"$T/echo_group.py" <<'PY'
import json, sys
for line in sys.stdin:
    t = json.loads(line)
    print(json.dumps({"id": t["id"], "attempt": t["attempt"], "ok": True,
                      "result": "group=%s group_b64=%s" % (t.get("group"), t.get("group_b64"))}), flush=True)
PY
"$DUE" work --once -q --concurrency 1 --pipe "python3 $T/echo_group.py"
expect_eq "a group that is not UTF-8 reaches the handler as group_b64" \
	"DONE group=None group_b64=Z/4=" "$(field "$ng" state) $(field "$ng" result)"
rm -f "$T/due.db"*

handlers=("python3 $EX/pipe_handler.py")
if command -v node >/dev/null; then
	handlers+=("node $EX/pipe_handler.js")
elif [ "${CI:-}" = true ]; then
	bad "node is not installed: the Node example is not tested"
fi

for H in "${handlers[@]}"; do
	echo "--- $H"
	rm -f "$T/due.db"*
	"$DUE" init >/dev/null

	# 1. results, failures, binary payload, stderr, one process per slot
	a=$("$DUE" add k --payload hello)
	b=$("$DUE" add k --payload world)
	f=$("$DUE" add k --payload 'fail: no stock' --max-attempts 1)
	l=$("$DUE" add k --payload 'log: a line on stderr')
	printf 'x\377y' >"$T/bin"
	bin=$("$DUE" add k --payload-file "$T/bin")
	"$DUE" work --once --concurrency 1 --pipe "$H" 2>"$T/log"
	expect_eq "result" "HELLO" "$(field "$a" result | cut -d' ' -f2-)"
	expect_eq "failure" "DEAD: no stock" "$(field "$f" state): $(field "$f" last_error)"
	expect_eq "binary payload went as payload_b64" "DONE" "$(field "$bin" state)"
	expect_eq "one process for the slot" "$(pid_of "$a")" "$(pid_of "$b")"
	grep -q "task $l: a line on stderr" "$T/log" && ok || bad "stderr line with its task id not in the log: $(cat "$T/log")"

	# 2. a process that exits, and one that writes a malformed line
	x=$("$DUE" add k --payload 'exit: 3' --max-attempts 1)
	g=$("$DUE" add k --payload garbage --max-attempts 1)
	n=$("$DUE" add k --payload next)
	"$DUE" work --once -q --concurrency 1 --pipe "$H"
	expect_eq "dead process" "DEAD: pipe process exited with status 3 before answering" \
		"$(field "$x" state): $(field "$x" last_error)"
	expect_eq "malformed line" DEAD "$(field "$g" state)"
	field "$g" last_error | has "^pipe process wrote a malformed line (not JSON: .*): this is not JSON$" &&
		ok || bad "malformed line error: $(field "$g" last_error)"
	expect_eq "the next task runs on a fresh process" DONE "$(field "$n" state)"

	# 3. a killed process, then a cancel while running: a fresh process each time
	k1=$("$DUE" add k --payload 'sleep: 60' --max-attempts 1)
	"$DUE" work -q --concurrency 1 --poll 20ms --kill-grace 300ms --no-cron --pipe "$H" &
	wpid=$!
	wait_for "k1 claimed" 20 is_state "$k1" CLAIMED
	# the task is CLAIMED before the guard starts: wait for it
	wait_for "the handler under its guard" 20 handlers "$wpid"
	# the handler (its guard's child) is killed from outside
	kill -9 $(handlers "$wpid")
	wait_for "k1 dead" 20 is_state "$k1" DEAD
	field "$k1" last_error | has "was killed by signal 9" && ok || bad "killed: $(field "$k1" last_error)"
	r1=$("$DUE" add k --payload after-kill)
	wait_for "r1 done" 20 is_state "$r1" DONE
	c=$("$DUE" add k --payload 'sleep: 60')
	wait_for "c claimed" 20 is_state "$c" CLAIMED
	expect_eq "cancel running" REQUESTED "$("$DUE" cancel "$c")"
	wait_for "c cancelled" 20 is_state "$c" CANCELLED
	r2=$("$DUE" add k --payload after-cancel)
	wait_for "r2 done" 20 is_state "$r2" DONE
	[ "$(pid_of "$r1")" != "$(pid_of "$r2")" ] && ok || bad "the cancelled try's process ran on"
	# it may still be dying (or waiting for init to reap it) meanwhile
	wait_for "the cancelled process ends" 20 gone "$(pid_of "$r1")"
	# a try past its time limit is stopped the same way
	tl=$("$DUE" add k --payload 'sleep: 60' --timeout 1s --max-attempts 1)
	wait_for "the timed-out try dead" 30 is_state "$tl" DEAD
	field "$tl" last_error | has "timed out after 1s" && ok || bad "time limit: $(field "$tl" last_error)"
	r3=$("$DUE" add k --payload after-time-limit)
	wait_for "r3 done" 20 is_state "$r3" DONE
	[ "$(pid_of "$r2")" != "$(pid_of "$r3")" ] && ok || bad "the timed-out try's process ran on"
	r2=$r3
	# no process outlives a worker stopped by SIGTERM
	kill -TERM "$wpid"
	wait "$wpid" && ok || bad "worker exit after SIGTERM"
	wait_for "the pipe process ends with its worker" 20 gone "$(pid_of "$r2")"

	# 4. ... nor one killed by SIGKILL (the guard sees its lifeline close)
	s=$("$DUE" add k --payload 'sleep: 60')
	"$DUE" work -q --concurrency 1 --poll 20ms --kill-grace 300ms --no-cron --pipe "$H" &
	wpid=$!
	wait_for "s claimed" 20 is_state "$s" CLAIMED
	wait_for "the handler under its guard" 20 handlers "$wpid"
	hp=$(handlers "$wpid")
	kill -9 "$wpid"
	wait "$wpid" 2>/dev/null || true
	wait_for "the pipe process ends after kill -9 of its worker" 20 gone "$hp"
	"$DUE" kill "$s" >/dev/null

	# 5. exactly once over a drain, four slots
	for i in $(seq 1 300); do echo "{\"kind\": \"drain\", \"payload\": \"n$i\"}"; done >"$T/batch"
	"$DUE" add --batch "$T/batch" >/dev/null
	"$DUE" work --once -q --concurrency 4 --kinds drain --pipe "$H"
	"$DUE" ls --kind drain --limit 1000 --json >"$T/drain.json"
	python3 - "$T/drain.json" <<'PY' && ok || bad "drain not exactly once"
import json, sys
ts = json.load(open(sys.argv[1]))
assert len(ts) == 300, len(ts)
assert all(t["state"] == "DONE" and t["attempt"] == 1 for t in ts)
got = sorted(t["result"].split(" ", 1)[1] for t in ts)
assert got == sorted("N%d" % i for i in range(1, 301)), "results differ"
pids = {t["result"].split(" ")[0] for t in ts}
assert len(pids) <= 4, pids
PY
done

# due bench --pipe: the drain workload with a pipe handler, in a scratch store
expect_err 2 "give --exec or --pipe, not both" "$DUE" bench --workload drain --exec true --pipe cat
"$DUE" bench --workload drain --n 200 --json --pipe "python3 $EX/pipe_handler.py" >"$T/bench.json"
python3 - "$T/bench.json" <<'PY' && ok || bad "bench --pipe: $(cat "$T/bench.json")"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["variant"] == "pipe" and r["n"] == 200 and r["duplicates"] == 0, r
PY
# ... and lateness through a command and a pipe handler (bench/run's W3
# rows of issue 36): every task claimed, none early
for h in "--exec true" "--pipe python3 $EX/pipe_handler.py"; do
	"$DUE" bench --workload lateness --n 40 --spread 500ms --json ${h%% *} "${h#* }" >"$T/late.json"
	python3 - "$T/late.json" "${h%% *}" <<'PY' && ok || bad "bench lateness $h: $(cat "$T/late.json")"
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert r["workload"] == "lateness" and r["variant"] == sys.argv[2][2:], r
assert r["n"] == 40 and r["concurrency"] == 4 and r["early"] == 0, r
assert r["tasks_per_s"] > 0 and r["p99_ms"] >= r["p50_ms"] >= 0, r
PY
done
finish
