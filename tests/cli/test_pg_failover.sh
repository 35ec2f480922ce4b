#!/usr/bin/env bash
# test_pg_failover.sh - PostgreSQL failover with real processes: a primary
# and a synchronous streaming standby of its own (scripts/pg-test-pair),
# reached through the multi-host URL
#   postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/due?target_session_attrs=read-write
# 1. two `due work` processes drain 2,000 tasks while a producer adds more
#    one by one; the primary (its postmaster and every child) is killed
#    -9 once 300 are DONE
#    and the standby promoted at once (the step an HA manager takes; its
#    detection delay is not part of this): every task DONE, none with two
#    kept results (a task may RUN again after the failover: at least
#    once, CONTRACT 3.8), every add acknowledged is still there, and
#    `due verify` passes on the new primary through the same URL.  The
#    time from kill -9 to the first claim on the new primary is printed
#    (measured, never asserted).
# 2. a second pair.  A LISTEN that fails (listen= naming its hot standby):
#    the worker says so once and polls.  Then the trap of a promoted
#    standby that keeps synchronous_standby_names:
#    every commit waits for a standby that is gone.  The worker and a
#    producer say so once each, naming the setting; once it is cleared the
#    waiting commits finish and the worker says so.
#
# Runs when DUE_TEST_PG_URL says PostgreSQL is there (scripts/test starts
# a cluster), on private servers of its own; under CI=true a missing
# server is a failure, never a silent skip.  DUE_FAILOVER_VERIFY=all runs
# every verify case (about a minute more) instead of the store cases.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PAIR=$ROOT/scripts/pg-test-pair
[ -n "${DUE_TEST_PG_URL:-}" ] ||
	cannot_test "the PostgreSQL failover test" "DUE_TEST_PG_URL is unset"
pair1=$(mktemp -d /tmp/due-pair-XXXXXX)
pair2=$(mktemp -d /tmp/due-pair-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null
	"$PAIR" stop "$pair1" >/dev/null 2>&1; "$PAIR" stop "$pair2" >/dev/null 2>&1
	rm -rf "$T" "$pair1" "$pair2"' EXIT
if ! URL=$("$PAIR" start "$pair1" 2>"$T/pair.err"); then
	bad "cannot start a primary and a standby: $(tail -3 "$T/pair.err")"
	finish
	exit 1
fi
P1=$("$PAIR" port "$pair1" primary)
P2=$("$PAIR" port "$pair1" standby)
export DUE_DB=$URL OUT=$T/out
mkdir -p "$OUT"
ms() { echo $(($(date +%s%N) / 1000000)); }
# one statement on one node (not through the multi-host URL)
on() { psql -qXAt "postgres://postgres@127.0.0.1:$1/due" -c "$2"; }
"$DUE" init >/dev/null && ok || bad "init through the multi-host URL"
expect_eq "the standby is synchronous" sync "$(on "$P1" "SELECT sync_state FROM pg_stat_replication")"

# 1. kill -9 of the primary mid-drain, the standby promoted
for i in $(seq 2000); do echo '{"kind":"f"}'; done >"$T/b.jsonl"
"$DUE" add --batch "$T/b.jsonl" >/dev/null && ok || bad "2,000 adds"
# the producer: one add at a time, each acknowledged id with its time;
# adds that fail while no primary takes writes are not acknowledged
(
	while [ ! -e "$OUT/stop" ]; do
		if id=$("$DUE" add p 2>/dev/null); then echo "$(ms) $id" >>"$OUT/acked"; else sleep 0.05; fi
	done
) &
ppid_=$!
wpids=()
for w in 1 2; do
	"$DUE" work --kinds f,p --poll 50ms --owner "w$w" \
		--exec 'echo "$DUE_TASK_ID $DUE_ATTEMPT" >> "$OUT/runs"' 2>"$T/w$w.log" &
	wpids+=($!)
done
done_on() { on "$1" "SELECT count(*) FROM due_task WHERE state = 'DONE'" 2>/dev/null; }
at_least_300() { [ "$(done_on "$P1")" -ge 300 ]; }
wait_for "300 tasks DONE on the primary" 60 at_least_300
# the whole node (postmaster, backends, WAL sender) at one instant, as a
# lost machine: a backend left running could still finish a commit
"$PAIR" kill-primary "$pair1" --all >/dev/null && ok || bad "kill -9 of the primary"
# taken once the kill is sent: a claim the old primary committed (and the
# standby confirmed) in the instant before it is not counted as the new
# primary's; claimed_at is the claim's transaction start (now())
kill_ms=$(ms)
"$PAIR" promote "$pair1" && ok || bad "promote the standby"
promoted_ms=$(ms)
done_at_kill=$(done_on "$P2")
echo "kill -9 with $done_at_kill DONE on the standby"
[ "$done_at_kill" -lt 2000 ] && ok || bad "the drain was over before the kill: nothing was tested"
first_claim() { # ms since the epoch of the first claim after the kill, on the new primary
	on "$P2" "SELECT (extract(epoch FROM min(claimed_at)) * 1000)::int8 FROM due_attempt
		WHERE claimed_at > to_timestamp($kill_ms / 1000.0)"
}
has_first_claim() { [ -n "$(first_claim)" ]; }
wait_for "a claim on the new primary" 60 has_first_claim
# the producer stops once its adds are acknowledged by the new primary
acked_after() { [ "$(awk -v t="$1" '$1 > t' "$OUT/acked" 2>/dev/null | wc -l)" -ge 5 ]; }
wait_for "adds acknowledged by the new primary" 60 acked_after "$promoted_ms"
touch "$OUT/stop"
wait "$ppid_"
total=$((2000 + $(wc -l <"$OUT/acked")))
not_done() {
	local d n
	d=$(done_on "$P2") && n=$(on "$P2" "SELECT count(*) FROM due_task WHERE state <> 'DONE'") || return 1
	echo $((n + (d < total ? total - d : 0)))
}
wait_drain "every task DONE on the new primary" 60 not_done
first=$(first_claim)
echo "failover: kill -9 -> first claim on the new primary: $((first - kill_ms)) ms (the promote step, clearing synchronous_standby_names included, returned after $((promoted_ms - kill_ms)) ms; 2 workers, --poll 50ms)"
echo "FAILOVER_MS=$((first - kill_ms))" >"$T/measure"
for p in "${wpids[@]}"; do
	kill -0 "$p" && ok || bad "worker $p died in the failover"
	kill -TERM "$p"
done
for p in "${wpids[@]}"; do wait "$p" || bad "worker $p exit"; done
expect_eq "2,000 tasks, all DONE" 2000 "$(on "$P2" "SELECT count(*) FROM due_task WHERE kind = 'f' AND state = 'DONE'")"
expect_eq "no task with two kept results" 0 "$(on "$P2" "SELECT count(*) FROM (SELECT task_id FROM due_attempt
	WHERE outcome = 'DONE' GROUP BY task_id HAVING count(*) > 1) x")"
expect_eq "each DONE task kept the result of its last attempt" 0 "$(on "$P2" "SELECT count(*) FROM due_task t
	WHERE t.state = 'DONE' AND NOT EXISTS (SELECT 1 FROM due_attempt a WHERE a.task_id = t.id
	AND a.attempt = t.attempt AND a.outcome = 'DONE')")"
# acknowledged adds: every one there, before the kill and after it
before=$(awk -v t="$kill_ms" '$1 < t' "$OUT/acked" | wc -l)
[ "$before" -gt 0 ] && ok || bad "no add was acknowledged before the kill: nothing was tested"
missing=0
while read -r _ id; do
	echo "$id"
done <"$OUT/acked" >"$T/acked.ids"
on "$P2" "SELECT id FROM due_task WHERE kind = 'p'" | sort >"$T/there.ids"
missing=$(sort "$T/acked.ids" | comm -23 - "$T/there.ids" | wc -l)
expect_eq "acknowledged adds lost ($before before the kill, $(wc -l <"$T/acked.ids") in all)" 0 "$missing"
# handler side: every task ran, re-runs (at least once) only with a new attempt
expect_eq "every task's handler ran" "$(on "$P2" "SELECT count(*) FROM due_task")" "$(cut -d' ' -f1 "$OUT/runs" | sort -u | wc -l)"
expect_eq "no attempt ran twice" "$(sort -u "$OUT/runs" | wc -l)" "$(wc -l <"$OUT/runs")"
echo "handler runs: $(wc -l <"$OUT/runs") for $(cut -d' ' -f1 "$OUT/runs" | sort -u | wc -l) tasks (a try cut by the kill runs again: at least once)"
grep -q "store unavailable" "$T/w1.log" "$T/w2.log" && ok || bad "the outage was not logged"
# the contract cases on the new primary, through the same multi-host URL
cases=normal_three_workers,boundary_not_before_due,boundary_claim_limit,cancel_semantics,retry_exhausted_dead,crash_kill9_lease_retry,sigstop_late_commit_rejected,flow_max_running
[ "${DUE_FAILOVER_VERIFY:-}" = all ] && cases=
"$DUE" verify --db "$URL" ${cases:+--case "$cases"} >"$T/verify.out" 2>&1 || true
grep "^CASE\|passed" "$T/verify.out"
grep -q "^[1-9][0-9]* passed, 0 failed$" "$T/verify.out" && ok || bad "verify on the new primary: $(tail -3 "$T/verify.out")"

# 2. promoted without clearing synchronous_standby_names: commits wait
if ! URL2=$("$PAIR" start "$pair2" 2>"$T/pair.err"); then
	bad "cannot start the second pair: $(tail -3 "$T/pair.err")"
	finish
	exit 1
fi
export DUE_DB=$URL2
Q2=$("$PAIR" port "$pair2" standby)
"$DUE" init >/dev/null
# first, a LISTEN that fails on real PostgreSQL: listen= naming the hot
# standby ("cannot execute LISTEN during recovery").  The worker says so
# once and finds new tasks by polling; the statements go to the primary.
"$DUE" work --kinds l --poll 100ms --exec 'echo ran' 2>"$T/nolisten.log" \
	--db "$URL2&listen=postgres%3A%2F%2Fpostgres%40127.0.0.1%3A$Q2%2Fdue" &
lpid=$!
wait_for "the worker falls back to polling" 30 grep -q "cannot listen for new tasks" "$T/nolisten.log"
lids=()
for i in 1 2 3; do lids+=("$("$DUE" add l)"); done
done_l() { [ "$(on "$Q2" "SELECT count(*) FROM due_task WHERE kind = 'l' AND state = 'DONE'")" = 3 ]; }
wait_for "tasks found by polling" 30 done_l
kill -TERM "$lpid"; wait "$lpid" || bad "polling worker exit"
grep "cannot listen" "$T/nolisten.log"
expect_eq "the fallback is said once" 1 "$(grep -c "cannot listen\|not delivered" "$T/nolisten.log")"
grep -q "during recovery" "$T/nolisten.log" && ok || bad "the reason is not named: $(cat "$T/nolisten.log")"
# A commit that waits on a synchronous standby gets no answer: these two
# wait up to 60 s for one (timeout=, and a lease whose third is 60 s),
# longer than the test needs to clear the setting, so that the wait, its
# warning and its end are what this checks (not the store bound).
"$DUE" work --kinds h --poll 100ms --lease 3m --exec 'echo ran' \
	--db "$URL2&timeout=60s" 2>"$T/hang.log" &
hpid=$!
wait_for "worker started" 30 grep -q "discovery:" "$T/hang.log"
"$PAIR" kill-primary "$pair2" >/dev/null
"$PAIR" promote "$pair2" --keep-sync && ok || bad "promote without clearing"
expect_eq "the promoted standby still names a synchronous standby" "*" "$(on "$Q2" "SHOW synchronous_standby_names")"
"$DUE" add h --db "$URL2&timeout=60s" >"$T/hang.id" 2>"$T/hang-add.log" &
apid=$!
warned() { grep -q "warning: postgres store: .*synchronous_standby_names" "$1"; }
wait_for "the producer warns of its waiting commit" 60 warned "$T/hang-add.log"
wait_for "the worker warns of its waiting commits" 60 warned "$T/hang.log"
kill -0 "$apid" && ok || bad "the add did not wait"
grep "warning: postgres store" "$T/hang.log"
"$PAIR" clear-sync "$pair2"
rc=0; wait "$apid" || rc=$?
expect_eq "the waiting add finishes once the setting is cleared" 0 "$rc"
hid=$(cat "$T/hang.id")
done_h() { [ "$(on "$Q2" "SELECT state FROM due_task WHERE id = $hid")" = DONE ]; }
wait_for "its task DONE" 60 done_h
wait_for "the worker says commits are answered again" 60 grep -q "note: postgres store: statements are answered in time again" "$T/hang.log"
expect_eq "one warning for the episode" 1 "$(grep -c "warning: postgres store" "$T/hang.log")"
kill -TERM "$hpid"; wait "$hpid" || bad "worker exit"
cat "$T/measure"
finish
