#!/usr/bin/env bash
# test_pipe_hostile.sh - `due work --pipe` against handlers (Python 3) that
# break the protocol or the worker's patience (issue 36, points 6-8):
#  6. output while no task is outstanding (a second answer, a forged
#     answer for the next task, written with the answer or while idle) is
#     never taken as a later task's answer: the process is replaced;
#  7. a stop gives pipe processes the stop of a command handler: a running
#     try's process gets SIGTERM on a forced stop and SIGKILL only after
#     --kill-grace; an idle process gets EOF first; a worker killed with
#     SIGKILL still leaves its handler --kill-grace (even one its shell
#     did not exec);
#  8. stderr floods are rate-limited per process, logged as whole lines,
#     and the log says how many lines were dropped (logged + dropped =
#     written, exactly).
# SQLite only: the pipe protocol does not touch the store.  No timing
# assertions but lower bounds the kill grace guarantees (a slow machine
# makes them later, never earlier); deadlines are hang guards.
. "$(dirname "$0")/lib.sh"
field() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }
gone() { ! kill -0 "$1" 2>/dev/null; }
"$DUE" init >/dev/null

# The handler: what it does is the payload's first word.
#   twice      answers twice (two lines, one write)
#   forge      answers, then forges an answer for the next id (same write)
#   forge-idle answers, then forges one for the next id 0.3 s later
#   sleep S    heartbeats on stderr (and in $HB) every 0.1 s for S seconds
#   flood N    writes N lines of 98 bytes (+ newline) to stderr
#   long N     writes one line of N bytes with no newline to stderr
#   else       answers "ok <pid>"
# SIGTERM is caught and noted in $HB; EOF on stdin is noted in $HB unless
# $IGNORE_EOF is set (then it keeps heart-beating until killed).
cat >"$T/h.py" <<'PY'
import json, os, signal, sys, threading, time
HB = os.environ.get("HB")
def note(what):
    if HB:
        with open(HB, "a") as f:
            f.write("%s %.3f %d\n" % (what, time.time(), os.getpid()))
signal.signal(signal.SIGTERM, lambda s, f: note("term"))
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
def out(obj, more=""):
    sys.stdout.write(json.dumps(obj) + "\n" + more)
    sys.stdout.flush()
def beat(secs):
    end = time.time() + secs
    while time.time() < end:
        note("beat")
        try:  # (the worker's end of stderr is gone once it is killed)
            sys.stderr.write("heartbeat\n"); sys.stderr.flush()
        except OSError:
            pass
        time.sleep(0.1)
for line in sys.stdin:
    t = json.loads(line)
    words = t["payload"].split()
    what = words[0] if words else ""
    ans = {"id": t["id"], "attempt": t["attempt"], "ok": True, "result": "ok %d" % os.getpid()}
    forged = {"id": t["id"] + 1, "attempt": 1, "ok": True, "result": "forged"}
    if what == "twice":
        out(ans, json.dumps(ans) + "\n")
    elif what == "forge":
        out(ans, json.dumps(forged) + "\n")
    elif what == "forge-idle":
        out(ans)
        time.sleep(0.3)
        out(forged)
    elif what == "sleep":
        beat(float(words[1]))
        out(ans)
    elif what == "flood":
        line98 = "x" * 86
        sys.stderr.write("".join("flood %06d %s\n" % (i, line98) for i in range(int(words[1]))))
        sys.stderr.flush()
        out(ans)
    elif what == "long":
        sys.stderr.write("L" * int(words[1])); sys.stderr.flush()
        out(ans)
    else:
        out(ans)
note("eof")
while os.environ.get("IGNORE_EOF"):
    beat(0.1)
PY
H="python3 $T/h.py"

# ---- 6. stray output -------------------------------------------------
# a second answer: each later task still runs once and succeeds
ids=()
for i in 1 2 3; do ids+=("$("$DUE" add s6 --payload twice --max-attempts 2)"); done
"$DUE" work --once --concurrency 1 --kinds s6 --pipe "$H" 2>"$T/s6.log"
for id in "${ids[@]}"; do
	expect_eq "answered twice: task $id" "DONE/1" "$(field "$id" state)/$(field "$id" attempt)"
done
[ "$(grep -c "wrote to stdout while no task was outstanding" "$T/s6.log")" -ge 2 ] && ok ||
	bad "stray answers not reported: $(cat "$T/s6.log")"

# a forged answer for the next task, in the same write as the real one
a=$("$DUE" add f6 --payload forge)
b=$("$DUE" add f6 --payload plain)
expect_eq "consecutive ids" "$((a + 1))" "$b"
"$DUE" work --once --concurrency 1 --kinds f6 --pipe "$H" 2>"$T/f6.log"
expect_eq "forger's own task" DONE "$(field "$a" state)"
expect_eq "next task not forged" "DONE/1" "$(field "$b" state)/$(field "$b" attempt)"
field "$b" result | has "^ok [0-9]*$" && ok || bad "next task's result: $(field "$b" result)"
[ "$(field "$a" result)" != "$(field "$b" result)" ] && ok || bad "the next task ran on the forger's process"
grep "wrote to stdout while no task was outstanding" "$T/f6.log" | has '"result": "forged"' && ok ||
	bad "forged line not named in the log: $(cat "$T/f6.log")"

# ... and one written while the process is idle, before the next task
a=$("$DUE" add i6 --payload forge-idle)
"$DUE" work --concurrency 1 --kinds i6 --no-cron --poll 20ms --pipe "$H" 2>"$T/i6.log" &
wpid=$!
wait_for "forge-idle task done" 30 is_state "$a" DONE
sleep 1 # the forged line is written 0.3 s after the answer
b=$("$DUE" add i6 --payload plain)
expect_eq "consecutive ids (idle)" "$((a + 1))" "$b"
wait_for "next task done" 30 is_state "$b" DONE
field "$b" result | has "^ok [0-9]*$" && ok || bad "idle forgery taken as the answer: $(field "$b" result)"
kill -TERM "$wpid"
wait "$wpid" && ok || bad "worker exit (idle forgery)"

# ---- 7. the stop ------------------------------------------------------
# HB file: "what time pid" lines
since_term() { # seconds from the first "term" to the last "beat" in $1
	python3 - "$1" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
term = min(float(r[1]) for r in rows if r[0] == "term")
beat = max(float(r[1]) for r in rows if r[0] == "beat")
print("%.3f" % (beat - term))
PY
}
at_least() { python3 -c "import sys; sys.exit(0 if float('$2') >= float('$3') else 1)" && ok || bad "$1: $2 < $3"; }

# 7a. forced stop of a running try: SIGTERM, SIGKILL only after --kill-grace
export HB=$T/hb7a
t=$("$DUE" add s7 --payload "sleep 60" --max-attempts 3)
"$DUE" work --concurrency 1 --kinds s7 --no-cron --grace 60s --kill-grace 1s --pipe "$H" 2>"$T/s7a.log" &
wpid=$!
wait_for "heartbeats" 30 test -s "$HB"
hpid=$(awk 'NR==1 {print $3}' "$HB")
kill -TERM "$wpid"
wait_for "first TERM: the worker drains" 30 grep -q "stopping: 1 running try" "$T/s7a.log"
sleep 0.5
grep -q "^term" "$HB" && bad "the handler got SIGTERM within the grace" || ok
kill -TERM "$wpid"
rc=0; wait "$wpid" || rc=$?
expect_eq "7a: worker exit" 0 "$rc"
wait_for "7a: handler gone" 10 gone "$hpid"
at_least "7a: heart-beats after SIGTERM (kill grace 1s)" "$(since_term "$HB")" 0.7
expect_eq "7a: the try failed, the task is back" "SCHEDULED: stopped: worker shutdown" \
	"$(field "$t" state): $(field "$t" last_error)"
[ "$(grep -c "task $t: heartbeat" "$T/s7a.log")" -ge 8 ] && ok || bad "7a: heartbeats not in the log"
"$DUE" kill "$t" >/dev/null

# 7b. an idle process at a graceful stop: EOF, no signal
export HB=$T/hb7b
t=$("$DUE" add s7 --payload plain)
"$DUE" work --concurrency 1 --kinds s7 --no-cron --kill-grace 1s --pipe "$H" 2>"$T/s7b.log" &
wpid=$!
wait_for "7b: task done" 30 is_state "$t" DONE
kill -TERM "$wpid"
wait "$wpid" && ok || bad "7b: worker exit"
grep -q "^eof" "$HB" && ok || bad "7b: the idle handler got no EOF: $(cat "$HB" 2>/dev/null)"
grep -q "^term" "$HB" && bad "7b: the idle handler got SIGTERM: $(cat "$HB")" || ok

# 7c. an idle process that ignores EOF, its shell not exec'ing it: a
#     second signal sends SIGTERM at once, SIGKILL after --kill-grace
export HB=$T/hb7c IGNORE_EOF=1
t=$("$DUE" add s7 --payload plain)
"$DUE" work --concurrency 1 --kinds s7 --no-cron --kill-grace 1s --pipe "$H; true" 2>"$T/s7c.log" &
wpid=$!
wait_for "7c: task done" 30 is_state "$t" DONE
kill -TERM "$wpid"
wait_for "7c: EOF sent" 30 grep -q "^eof" "$HB"
kill -TERM "$wpid"
rc=0; wait "$wpid" || rc=$?
expect_eq "7c: worker exit" 0 "$rc"
hpid=$(awk '$1 == "eof" {print $3}' "$HB")
wait_for "7c: handler gone" 10 gone "$hpid"
at_least "7c: heart-beats after SIGTERM (kill grace 1s)" "$(since_term "$HB")" 0.7

# 7d. kill -9 of the worker: the guard still gives the group --kill-grace
#     (the handler ignores the EOF its stdin then gets)
export HB=$T/hb7d IGNORE_EOF=1
t=$("$DUE" add s7 --payload plain)
"$DUE" work --concurrency 1 --kinds s7 --no-cron --kill-grace 1s --pipe "$H; true" 2>"$T/s7d.log" &
wpid=$!
wait_for "7d: task done" 30 is_state "$t" DONE
kill -KILL "$wpid"; wait "$wpid" 2>/dev/null || true
wait_for "7d: SIGTERM after the worker died" 10 grep -q "^term" "$HB"
hpid=$(awk '$1 == "term" {print $3}' "$HB")
wait_for "7d: handler gone" 10 gone "$hpid"
at_least "7d: heart-beats after SIGTERM (kill grace 1s)" "$(since_term "$HB")" 0.7
unset HB IGNORE_EOF

# ---- 8. stderr floods -------------------------------------------------
n=100000 # lines per task (9.9 MB)
ids=()
for i in 1 2 3; do ids+=("$("$DUE" add s8 --payload "flood $n")"); done
"$DUE" work --once --concurrency 1 --kinds s8 --pipe "$H" 2>"$T/s8.log"
# one 3 MB line with no newline (a fresh process: a rate window of its own)
ln=$("$DUE" add s8 --payload "long 3000000")
"$DUE" work --once --concurrency 1 --kinds s8 --pipe "$H" 2>>"$T/s8.log"
for id in "${ids[@]}" "$ln"; do expect_eq "flood task $id" DONE "$(field "$id" state)"; done
python3 - "$T/s8.log" "$n" "$ln" <<'PY' && ok || bad "stderr flood: see above"
import re, sys
log, n, ln = sys.argv[1], int(sys.argv[2]), sys.argv[3]
size = 0
logged = dropped = 0
bad = []
longs = []
for l in open(log, encoding="utf-8", errors="replace"):
    size += len(l)
    m = re.search(r": (?:task \d+|pipe process \d+): (.*)$", l)
    if not m:
        continue
    text = m.group(1)
    d = re.match(r"(\d+) stderr lines? \((\d+) bytes\) not logged", text)
    if d:
        dropped += int(d.group(1))
    elif text.startswith("flood "):
        if not re.fullmatch(r"flood \d{6} x{86}", text):
            bad.append(text[:80])
        logged += 1
    elif text.startswith("L"):
        longs.append(l)
print("log %d bytes, %d lines logged, %d dropped, %d partial" % (size, logged, dropped, len(bad)))
assert not bad, bad[:3]
assert logged + dropped == 3 * n, (logged, dropped)
assert dropped > 0 and logged < 3 * n
assert size < 4 * 1024 * 1024, size
# the long line: logged once, cut, saying how much was cut
assert len(longs) == 1, len(longs)
assert ("task %s: " % ln) in longs[0] or "pipe process" in longs[0], longs[0][:100]
assert longs[0].rstrip("\n").endswith("[... 2999000 more bytes]"), longs[0][-60:]
PY
finish
