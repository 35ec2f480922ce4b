#!/usr/bin/env bash
# test_frozen_worker.sh - a worker that cannot act (SIGSTOP: a debugger, a
# container frozen by its runtime, a process starved of CPU) must not let
# its handler run on beside the next attempt on another worker (CONTRACT
# §5, the lease clock).  The worker's own threads are stopped with it, so
# the guard process of each command holds the lease clock's kill time
# (src/worker/spawn.c): a command or pipe process still running then is
# SIGKILLed by its guard.
#
# Worker A runs attempt 1 (a handler that would run for a minute) and is
# SIGSTOPped; worker B takes the task at attempt 2 once A's lease has run
# out, and its handler records whether attempt 1's process is still alive.
# Then A is resumed: it lives on, says what became of its try, and stops
# cleanly.  For --exec and --pipe.  Before the guard held the clock, attempt
# 1 was alive beside attempt 2 for as long as A stayed stopped.
#
# SQLite: the kill is the worker runtime's, the same over every store.  No
# timing assertions: deadlines are hang guards.
. "$(dirname "$0")/lib.sh"
export OUT="$T/out"
mkdir -p "$OUT"
"$DUE" init >/dev/null

show() { "$DUE" show "$1" --json; }
field() { show "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }

# The command handler: attempt 1 records its pid and sleeps (exec: the
# pid is the sleep's); attempt 2 says whether that pid is alive.
cat >"$T/exec.sh" <<'EOF'
#!/bin/sh
if [ "$DUE_ATTEMPT" = 1 ]; then
	echo $$ >"$OUT/exec.pid1"
	exec sleep 60
fi
if kill -0 "$(cat "$OUT/exec.pid1")" 2>/dev/null; then
	echo alive >"$OUT/exec.seen"
else
	echo gone >"$OUT/exec.seen"
fi
echo "attempt $DUE_ATTEMPT"
EOF
chmod +x "$T/exec.sh"

# The pipe handler: the same, one JSON line a task.
cat >"$T/pipe.py" <<'EOF'
import json, os, sys, time
out = os.environ["OUT"]
for line in sys.stdin:
    t = json.loads(line)
    if t["attempt"] == 1:
        with open(out + "/pipe.pid1", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    pid = int(open(out + "/pipe.pid1").read())
    try:
        os.kill(pid, 0)
        seen = "alive"
    except ProcessLookupError:
        seen = "gone"
    with open(out + "/pipe.seen", "w") as f:
        f.write(seen + "\n")
    print(json.dumps({"id": t["id"], "attempt": t["attempt"], "ok": True,
                      "result": "attempt %d" % t["attempt"]}), flush=True)
EOF

# frozen MODE HANDLER-ARGS...: the run above with `due work HANDLER-ARGS`
frozen() {
	local mode=$1 id a b rc
	shift
	id=$("$DUE" add "$mode")
	"$DUE" work -v --kinds "$mode" --lease 2s --concurrency 1 --owner A \
		"$@" 2>"$T/$mode-a.log" &
	a=$!
	wait_for "$mode: attempt 1 running" 60 test -s "$OUT/$mode.pid1" || return 0
	kill -STOP "$a"
	"$DUE" work -q --kinds "$mode" --lease 2s --concurrency 1 --poll 100ms \
		--owner B "$@" &
	b=$!
	wait_for "$mode: attempt 2 ran" 60 test -s "$OUT/$mode.seen" || return 0
	expect_eq "$mode: attempt 1's handler, when attempt 2 ran" gone \
		"$(cat "$OUT/$mode.seen")"
	wait_for "$mode: DONE" 60 is_state "$id" DONE
	expect_eq "$mode: the result is attempt 2's" "attempt 2" \
		"$(field "$id" result | tr -d '\n')"
	kill -CONT "$a"
	# A lives on: it says what became of its try, and stops cleanly
	wait_for "$mode: A logged its stopped try" 60 grep -q "task $id" "$T/$mode-a.log"
	sleep 1
	# the stop is logged once and counted, whoever saw it first (the
	# keeper, the handler's thread seeing the guard's kill, or a renewal
	# the store answered: lost)
	expect_eq "$mode: one line says why attempt 1 stopped" 1 \
		"$(grep -cE "task $id( \($mode\))? attempt 1: (lease not confirmed|lease lost)" "$T/$mode-a.log")"
	if kill -0 "$a" 2>/dev/null; then ok; else bad "$mode: worker A died after SIGCONT"; fi
	kill -TERM "$a" "$b"
	rc=0
	wait "$a" || rc=$?
	expect_eq "$mode: worker A's exit" 0 "$rc"
	if grep -q "stopped: .* lease lost 1 " "$T/$mode-a.log"; then ok; else
		bad "$mode: A's summary does not count the lost lease: $(grep 'stopped:' "$T/$mode-a.log")"
	fi
	rc=0
	wait "$b" || rc=$?
	expect_eq "$mode: worker B's exit" 0 "$rc"
	expect_eq "$mode: still DONE at attempt 2" "DONE 2" \
		"$(field "$id" state) $(field "$id" attempt)"
}

frozen exec --exec "$T/exec.sh"
frozen pipe --pipe "python3 $T/pipe.py"

# A guard killed from outside (kill -9) takes its shell along
# (PR_SET_PDEATHSIG); what the shell started must not live on beside the
# next try, nor after the worker: the worker SIGKILLs the command's group
# when its guard ends with no word.
export mark="61.$$"
id=$("$DUE" add guard9 --max-attempts 2 --backoff 10ms)
"$DUE" work -q --kinds guard9 --lease 30s --concurrency 1 \
	--exec 'if [ "$DUE_ATTEMPT" = 1 ]; then echo $PPID >"$OUT/guard9.guard"; sleep "$mark" & sleep "$mark"; wait; fi; echo second' &
w=$!
wait_for "guard9: attempt 1 running" 60 pgrep -f "sleep $mark"
kill -9 "$(cat "$OUT/guard9.guard")"
gone() { ! pgrep -f "sleep $mark" >/dev/null; }
wait_for "guard9: attempt 1's processes gone after its guard's kill -9" 10 gone
pkill -f "sleep $mark" 2>/dev/null || true # (when they were not)
wait_for "guard9: DONE at attempt 2" 60 is_state "$id" DONE
kill -TERM "$w"
wait "$w" || bad "guard9: worker exit"

echo "test_frozen_worker: $PASS passed, $FAIL failed"
[ "$FAIL" -eq 0 ]
