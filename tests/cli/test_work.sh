#!/usr/bin/env bash
# test_work.sh - `due work` with real processes: the handler protocol
# (stdin payload with binary bytes and quotes, environment (DUE_PRIORITY,
# no DUE_GROUP for a task without one), exit codes,
# result and error capture, the same idempotency key on every attempt),
# SIGKILL for a handler that ignores SIGTERM, graceful shutdown, pool
# isolation, and flow control in the worker (a resumed kind woken at once,
# no spinning while a running limit holds tasks back).
. "$(dirname "$0")/lib.sh"
"$DUE" init >/dev/null
export OUT="$T/handler-out"
mkdir -p "$OUT"
state() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(state "$1" state)" = "$2" ]; }

# 1. payload on stdin, byte for byte; environment
printf 'a\0b"c'"'"'d $(touch /tmp/pwned) `x` \377\n' >"$T/payload"
id=$("$DUE" add proto --payload-file "$T/payload")
"$DUE" work --once -q --exec 'cat > "$OUT/p.$DUE_TASK_ID"; env | grep "^DUE_" | sort > "$OUT/env.$DUE_TASK_ID"'
cmp -s "$T/payload" "$OUT/p.$id" && ok || bad "payload bytes differ"
[ ! -e /tmp/pwned ] && ok || bad "payload was interpreted by a shell"
grep -qx "DUE_TASK_ID=$id" "$OUT/env.$id" && ok || bad "DUE_TASK_ID"
grep -qx "DUE_KIND=proto" "$OUT/env.$id" && ok || bad "DUE_KIND"
grep -qx "DUE_ATTEMPT=1" "$OUT/env.$id" && ok || bad "DUE_ATTEMPT"
grep -qx "DUE_IDEMPOTENCY_KEY=task-$id" "$OUT/env.$id" && ok || bad "DUE_IDEMPOTENCY_KEY"
grep -q "^DUE_DUE_AT=20..-..-..T..:..:..\....Z$" "$OUT/env.$id" && ok || bad "DUE_DUE_AT"
grep -qx "DUE_PRIORITY=0" "$OUT/env.$id" && ok || bad "DUE_PRIORITY"
grep -q "^DUE_GROUP=" "$OUT/env.$id" && bad "DUE_GROUP without a group" || ok
expect_eq "done" DONE "$(state "$id" state)"

# 2. stdout is the result; non-zero exit fails with stderr's tail
ok_id=$("$DUE" add res --payload x)
bad_id=$("$DUE" add res --payload y --max-attempts 3)
"$DUE" work --once -q --exec 'if [ "$(cat)" = x ]; then printf "hello\n"; else echo partial; echo "it broke" >&2; exit 3; fi'
expect_eq "result" "hello" "$(state "$ok_id" result)"
expect_eq "failed back to SCHEDULED" SCHEDULED "$(state "$bad_id" state)"
expect_eq "error text" "exit 3: it broke" "$(state "$bad_id" last_error)"
# a flood of stderr keeps the status first, and the newest lines
flood_id=$("$DUE" add flood --max-attempts 1)
"$DUE" work --once -q --kinds flood \
	--exec 'head -c 50000000 /dev/zero | tr "\0" "e" >&2; echo LAST LINE >&2; exit 3'
err=$(state "$flood_id" last_error)
expect_eq "flooded error starts with the status" "exit 3: [...] eee" "${err:0:17}"
expect_eq "flooded error ends with the last line" "LAST LINE" "${err: -9}"
[ "${#err}" -le 4096 ] && ok || bad "flooded error is ${#err} bytes"

# 3. the same idempotency key on every attempt
kid=$("$DUE" add keyed --max-attempts 3 --backoff 10ms)
for i in 1 2 3; do
	"$DUE" work --once -q --kinds keyed --exec 'echo "$DUE_IDEMPOTENCY_KEY" >> "$OUT/keys"; [ "$DUE_ATTEMPT" = 2 ]'
	sleep 0.05
done
expect_eq "two attempts, one key" "task-$kid task-$kid" "$(tr '\n' ' ' <"$OUT/keys" | sed 's/ $//')"
expect_eq "keyed task done at attempt 2" "DONE/2" "$(state "$kid" state)/$(state "$kid" attempt)"

# 4. a handler that ignores SIGTERM is killed with SIGKILL after the grace
sid=$("$DUE" add stubborn)
# the lease (5 s) is well past the kill grace, so the kill is recorded
# before the lease could expire, however slow the machine
"$DUE" work -q --lease 5s --kill-grace 300ms --poll 20ms --kinds stubborn \
	--exec 'trap "" TERM; echo $$ > "$OUT/stubborn.pid"; sleep 30; echo never' &
wpid=$!
wait_for "stubborn handler running" 30 test -s "$OUT/stubborn.pid"
expect_eq "cancel running" REQUESTED "$("$DUE" cancel "$sid")"
wait_for "stubborn task cancelled" 30 is_state "$sid" CANCELLED
hpid=$(cat "$OUT/stubborn.pid")
wait_for "stubborn handler gone" 30 bash -c "! kill -0 $hpid 2>/dev/null"
"$DUE" show "$sid" --json | has "killed by signal 9" && ok || bad "SIGKILL recorded"
kill -TERM "$wpid"; rc=0; wait "$wpid" || rc=$?
expect_eq "worker exit after SIGTERM" 0 "$rc"

# 4b. a handler never outlives its worker: kill -9 of the worker (nothing
#     else is signalled) ends the handler's whole process group, a child
#     that ignores SIGTERM included (SIGKILL after --kill-grace)
oid=$("$DUE" add orphan)
"$DUE" work -q --lease 30s --kill-grace 500ms --poll 20ms --kinds orphan \
	--exec 'cut -d" " -f5 /proc/$$/stat > "$OUT/orphan.pgid.tmp"
		mv "$OUT/orphan.pgid.tmp" "$OUT/orphan.pgid"
		(trap "" TERM; sleep 60) & sleep 60; echo never' &
wpid=$!
wait_for "orphan handler running" 30 test -s "$OUT/orphan.pgid"
pg=$(cat "$OUT/orphan.pgid")
# live (not zombie) processes of a process group; zombies are dead, only
# not yet reaped by init
group_size() { ps -eo pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/' | wc -l; }
group_alive() { [ "$(group_size "$1")" != 0 ]; }
# the pgid file is written before the shell forks the two sleeps: wait
wait_for "handler group running: guard, shell, two sleeps" 30 \
	bash -c "$(declare -f group_size); [ \$(group_size $pg) = 4 ]"
kill -KILL "$wpid"; wait "$wpid" 2>/dev/null || true
t0=$(date +%s%N)
wait_for "handler group gone after the worker's kill -9" 30 bash -c "$(declare -f group_size group_alive); ! group_alive $pg"
echo "handler group gone $(( ($(date +%s%N) - t0) / 1000000 )) ms after kill -9 (kill-grace 500ms)"
expect_eq "orphaned task left CLAIMED for lease expiry" CLAIMED "$(state "$oid" state)"
"$DUE" kill "$oid" >/dev/null

# 5. graceful shutdown: SIGTERM lets the running task finish, exit 0
gid=$("$DUE" add graceful)
"$DUE" work -q --poll 20ms --kinds graceful --exec 'touch "$OUT/g.started"; sleep 1; echo finished' &
wpid=$!
wait_for "graceful task started" 30 test -e "$OUT/g.started"
kill -TERM "$wpid"; rc=0; wait "$wpid" || rc=$?
expect_eq "exit 0 on SIGTERM" 0 "$rc"
expect_eq "in-flight task finished" DONE "$(state "$gid" state)"

# SIGHUP (a closed terminal) is a graceful stop too, not a kill
hid=$("$DUE" add hangup)
"$DUE" work -q --poll 20ms --kinds hangup \
	--exec 'touch "$OUT/h.started"; until [ -e "$OUT/h.release" ]; do sleep 0.02; done; echo finished' &
wpid=$!
wait_for "hangup task started" 30 test -e "$OUT/h.started"
kill -HUP "$wpid"
touch "$OUT/h.release"
rc=0; wait "$wpid" || rc=$?
expect_eq "exit 0 after SIGHUP" 0 "$rc"
expect_eq "task finished after SIGHUP" DONE "$(state "$hid" state)"

# ... and past the grace it stops the handler and leaves the lease to expire
xid=$("$DUE" add overdue)
"$DUE" work -q --poll 20ms --grace 200ms --kill-grace 100ms --lease 1s --kinds overdue \
	--exec 'touch "$OUT/x.started"; sleep 30' &
wpid=$!
wait_for "overdue task started" 30 test -e "$OUT/x.started"
kill -TERM "$wpid"; rc=0; wait "$wpid" || rc=$?
expect_eq "exit 0 after grace" 0 "$rc"
st=$(state "$xid" state)
[ "$st" = CLAIMED ] || [ "$st" = SCHEDULED ] && ok || bad "overdue task state $st"
if [ "$st" = SCHEDULED ]; then
	expect_eq "stopped after the grace: the error says shutdown" \
		"killed by signal 15 (worker shutdown)" "$(state "$xid" last_error)"
fi
wait_for "overdue task reclaimed and run" 30 bash -c \
	"'$DUE' work --once -q --kinds overdue --exec 'echo rescued' >/dev/null 2>&1; [ \"\$('$DUE' show $xid --json | grep -c '\"state\": \"DONE\"')\" = 1 ]"

# a second SIGTERM is a forced stop: the grace (10 min here) ends at once,
# the handler's group is stopped and its try committed as failed, so the
# task goes back to the store for any worker; the worker exits 0
fid=$("$DUE" add forced --max-attempts 3)
"$DUE" work --poll 20ms --grace 10m --kill-grace 200ms --kinds forced \
	--exec 'cut -d" " -f5 /proc/$$/stat > "$OUT/f.pgid.tmp"; mv "$OUT/f.pgid.tmp" "$OUT/f.pgid"; sleep 600' \
	2>"$T/forced.log" &
wpid=$!
wait_for "forced task started" 30 test -s "$OUT/f.pgid"
fpg=$(cat "$OUT/f.pgid")
kill -TERM "$wpid"
# two signals sent at once may arrive as one: send the second only once
# the worker says it is draining
wait_for "first SIGTERM taken: the worker drains" 60 grep -q "stopping: 1 running try" "$T/forced.log"
kill -0 "$wpid" && ok || bad "worker exited on the first SIGTERM with a task running"
kill -TERM "$wpid"
rc=0; wait "$wpid" || rc=$?
expect_eq "exit 0 after a forced stop" 0 "$rc"
if group_alive "$fpg"; then
	bad "forced stop left the handler group $fpg running"
else
	ok
fi
expect_eq "forced stop: the try failed, the task is back" SCHEDULED/1 "$(state "$fid" state)/$(state "$fid" attempt)"
expect_eq "forced stop: the error says why" "killed by signal 15 (worker shutdown)" "$(state "$fid" last_error)"

# 6. pool isolation: a slow kind with a pool of 1 does not delay the fast
#    kind.  No timing assumption: each slow handler records its start and
#    then blocks until the test releases it, so while it is held the fast
#    tasks can only finish if they do not queue behind it, and the second
#    slow task can only have started if the slow pool ran two at once.
s1=$("$DUE" add slow); s2=$("$DUE" add slow)
fast=()
for i in $(seq 1 10); do fast+=("$("$DUE" add fast)"); done
"$DUE" work -q --poll 20ms --concurrency 2 --pool slow=1 \
	--exec 'if [ "$DUE_KIND" = slow ]; then echo slow-start >> "$OUT/order"
		until [ -e "$OUT/release" ]; do sleep 0.02; done; fi
		echo "$DUE_KIND" >> "$OUT/order"' &
wpid=$!
all_fast_done() { for f in "${fast[@]}"; do is_state "$f" DONE || return 1; done; }
wait_for "fast tasks done while a slow one is held" 60 all_fast_done
wait_for "one slow task started" 30 grep -q slow-start "$OUT/order"
expect_eq "the slow pool runs one at a time" 1 "$(grep -c slow-start "$OUT/order")"
expect_eq "no slow task finished while held" 0 "$(grep -cx slow "$OUT/order" || true)"
expect_eq "fast tasks were not queued behind slow ones" 10 "$(grep -c fast "$OUT/order")"
touch "$OUT/release"
wait_for "slow tasks done" 30 bash -c "[ \"\$(grep -cx slow '$OUT/order')\" = 2 ]"
expect_eq "both slow tasks DONE" "DONE DONE" "$(state "$s1" state) $(state "$s2" state)"
kill -TERM "$wpid"; wait "$wpid" || true

# 7. a submit from another process wakes an idle worker at once: its
#    safety poll is an hour, so only the wake-up can find the task
"$DUE" work --poll 1h --kinds woken --exec 'echo woke' 2>"$T/woken.log" &
wpid=$!
wait_for "worker listening" 30 grep -q "discovery: timing wheel" "$T/woken.log"
wid=$("$DUE" add woken)
wait_for "woken task done (not at the hourly poll)" 60 is_state "$wid" DONE
later=$("$DUE" add woken --in 1500ms)
wait_for "delayed task done (not at the hourly poll)" 60 is_state "$later" DONE
kill -TERM "$wpid"; wait "$wpid" || bad "woken worker exit"
"$DUE" stats | has "workers reporting (last 5 min): [1-9]" && ok || bad "worker counters reported to the store"
"$DUE" stats --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['workers']['claim_queries'] > 0 and 'empty_polls' in d['workers'] else 1)" \
	&& ok || bad "stats --json workers"

# 7b. a task due beyond the horizon, submitted before the worker started
#    (so no note will come), runs when due although the safety poll is an
#    hour: a refill reaches half a horizon past the next poll's refill.
#    Before, the refill loaded only the horizon (1 s here) and the task
#    waited for the hourly poll.
far=$("$DUE" add far --in 4s)
"$DUE" work --poll 1h --horizon 1s --kinds far --exec 'echo far' 2>"$T/far.log" &
wpid=$!
wait_for "task due beyond the horizon done (not at the hourly poll)" 40 is_state "$far" DONE
kill -TERM "$wpid"; wait "$wpid" || bad "far worker exit"

# 8. flow control (a store of its own, so the counters are this worker's):
#    a resumed kind is woken at once (the safety poll is an hour); tasks
#    held back by max-running 1 do not make the worker spin while one
#    handler holds the slot: its CPU time over the hold stays a small part
#    of the wall time, and its claim queries stay few (a spinning claimer
#    makes thousands).  Resource checks, not timings: the hold is a sleep.
main_db=$DUE_DB
export DUE_DB="sqlite:$T/flow.db"
"$DUE" init >/dev/null
"$DUE" kind set paused --pause >/dev/null
pid_=$("$DUE" add paused)
"$DUE" work --poll 1h --kinds paused,other --exec 'echo ran' 2>"$T/paused.log" &
wpid=$!
oid=$("$DUE" add other)
wait_for "other kind done beside the paused one" 60 is_state "$oid" DONE
expect_eq "paused kind not claimed" SCHEDULED "$(state "$pid_" state)"
"$DUE" kind set paused --resume >/dev/null
wait_for "resumed kind done (not at the hourly poll)" 60 is_state "$pid_" DONE
kill -TERM "$wpid"; wait "$wpid" || bad "paused worker exit"

"$DUE" kind set held --max-running 1 >/dev/null
for i in $(seq 20); do "$DUE" add held >/dev/null; done
"$DUE" work --kinds held --concurrency 4 \
	--exec 'echo run >> "$OUT/held.runs"; until [ -e "$OUT/held.go" ]; do sleep 0.05; done' \
	2>"$T/held.log" &
wpid=$!
wait_for "a held-kind handler running" 20 test -s "$OUT/held.runs"
cpu() { awk '{print $14 + $15}' "/proc/$wpid/stat"; }
c0=$(cpu); t0=$(date +%s%N)
sleep 3
c1=$(cpu); t1=$(date +%s%N)
cpu_ms=$(( (c1 - c0) * 1000 / $(getconf CLK_TCK) )); wall_ms=$(( (t1 - t0) / 1000000 ))
echo "held kind: worker CPU ${cpu_ms} ms over ${wall_ms} ms"
[ $((cpu_ms * 100)) -lt $((wall_ms * 20)) ] && ok || bad "worker spun: CPU ${cpu_ms} ms over ${wall_ms} ms"
expect_eq "one handler at a time" 1 "$(wc -l <"$OUT/held.runs")"
touch "$OUT/held.go"
all_held_done() { [ "$("$DUE" stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['counts']['DONE'])")" = 22 ]; }
wait_for "all held tasks done" 60 all_held_done
kill -TERM "$wpid"; wait "$wpid" || bad "held worker exit"
q=$("$DUE" stats --json | python3 -c "import json,sys; print(json.load(sys.stdin)['workers']['claim_queries'])")
echo "held kind: ${q} claim queries"
[ "$q" -lt 300 ] && ok || bad "claim queries while held: $q"
expect_eq "held tasks ran one by one" 20 "$(wc -l <"$OUT/held.runs")"
export DUE_DB=$main_db

# 9. bad arguments
expect_err 2 "give --exec CMD or --handler KIND=CMD" "$DUE" work
expect_err 2 "--pool expects KIND=VALUE" "$DUE" work --exec true --pool slow
expect_err 2 "--pool size" "$DUE" work --exec true --pool slow=0
expect_err 2 "--handler expects KIND=VALUE" "$DUE" work --handler =x
expect_err 2 "invalid duration" "$DUE" work --exec true --lease forever
# a blank command would mark every task DONE without running anything
bid=$("$DUE" add blank)
expect_err 2 "--exec: empty command" "$DUE" work --once --exec ""
expect_err 2 "--exec: empty command" "$DUE" work --once --exec "   "
expect_err 2 "--handler expects KIND=VALUE" "$DUE" work --once --handler "blank= "
expect_eq "blank command ran nothing" SCHEDULED "$(state "$bid" state)"
expect_err 2 "--pool b: no handler" "$DUE" work --handler a=true --pool b=2
finish
