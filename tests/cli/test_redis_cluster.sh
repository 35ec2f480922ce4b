#!/usr/bin/env bash
# test_redis_cluster.sh - the Redis store on a Redis Cluster (issue 23):
# 3 masters and 3 replicas of our own (scripts/redis-test-cluster), a
# store of 4 shards (?shards=4: 4 hash slots, spread over at least 2 of
# the masters), the default ?wait=1 (each write acknowledged by a replica
# before it is acknowledged to the caller).  2,000 tasks added in batches,
# then 2 workers drain them while a producer adds more one at a time;
# meanwhile shard 0's slot is moved to another master (MIGRATE, by hand,
# only that slot) and then that master is killed -9 (its replica takes
# over; the killed node is started again and rejoins as a replica), and the
# workers' subscriptions are dropped (they subscribe again).  Every task
# whose add was acknowledged ends DONE, none has two committed results,
# every result is its own task's, every shard ran tasks, and `due verify`
# passes on a sharded store of the cluster.  Last, one master's replica
# is killed -9 (that master refuses writes): a killed worker's tasks on
# the other masters are taken back and run meanwhile, the refusing
# master's once the replica is back; and a master loses its replica while
# a worker's handlers end together: no REJECTED_STALE is heard for a try
# whose result was kept.  The cluster is stopped on every exit.
#
# Needs redis-server and redis-cli; without them it says so and passes,
# except under CI=true, where it fails.  Deadlines are hang guards only.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CL=$ROOT/scripts/redis-test-cluster
export OUT="$T/runs.d"
mkdir -p "$OUT"

missing=
command -v redis-server >/dev/null || missing="redis-server"
command -v redis-cli >/dev/null || missing="$missing redis-cli"
has_backend redis || missing="$missing (this due has no Redis store)"
[ -z "$missing" ] || cannot_test "the Redis Cluster test" "missing $missing"

CD=$(mktemp -d /tmp/due-rcluster-XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; "$CL" stop "$CD" >/dev/null 2>&1; rm -rf "$T" "$CD"' EXIT
if ! URL=$("$CL" start "$CD"); then
	bad "cannot start a private Redis Cluster"
	finish
	exit 1
fi
echo "cluster: $URL"
# a store name whose 4 shards are on at least 2 masters (CRC16 decides;
# most names are)
shard_masters() {
	local i
	for i in 0 1 2 3; do
		"$CL" master "$CD" "$("$CL" slot "$CD" "{due:$1:$i}:meta")"
	done | sort -u | wc -l
}
n=0
until NAME=rc$$x$n && [ "$(shard_masters "$NAME")" -ge 2 ]; do n=$((n + 1)); done
ok # the store's shards are on at least 2 masters (its name is chosen so)
export DUE_DB="$URL?prefix=$NAME&shards=4"
SLOT=$("$CL" slot "$CD" "{due:$NAME:0}:meta")
echo "store $NAME: 4 shards on $(shard_masters "$NAME") masters"
"$DUE" init >"$T/init.out" 2>&1 && ok || bad "init on the cluster: $(cat "$T/init.out")"

# 1. the URL: a cluster has only database 0; wait= is a number
expect_err 5 "SELECT" "$DUE" ls --db "${URL%/0}/1?prefix=$NAME&shards=4"
expect_err 6 "made with shards=4" "$DUE" ls --db "$URL?prefix=$NAME&shards=2"
expect_err 2 "wait must be" "$DUE" ls --db "$URL?prefix=$NAME&wait=x"

nlines() { if [ -e "$1" ]; then wc -l <"$1"; else echo 0; fi; }
has_lines() { [ "$(nlines "$1")" -ge "$2" ]; }

# 2. the drain: 2,000 tasks in batches, 2 workers, a producer adding one
#    at a time through everything below
for b in 1 2 3 4; do
	for _ in $(seq 1 500); do echo '{"kind":"c"}'; done | "$DUE" add --batch - >>"$T/acked" ||
		bad "batch add $b"
done
expect_eq "2000 adds acknowledged" 2000 "$(nlines "$T/acked")"
for w in 1 2; do
	"$DUE" work --kinds c --concurrency 4 --lease 4s --poll 100ms --owner "w$w" \
		--exec 'echo "$DUE_TASK_ID" >> "$OUT/runs"; sleep 0.02; echo "r$DUE_TASK_ID"' \
		2>"$T/w$w.log" &
	eval "wpid$w=$!"
done
(while [ ! -e "$OUT/producer.stop" ]; do
	"$DUE" add c 2>>"$T/producer.err" >>"$T/acked" || sleep 0.05
done) &
ppid=$!

# 3. move the store's slot to another master while the workers drain
wait_for "drain under way" 60 has_lines "$OUT/runs" 150
from=$("$CL" master "$CD" "$SLOT")
to=$("$CL" move-slot "$CD" "$SLOT") && ok || bad "move slot $SLOT"
echo "slot $SLOT moved from :$from to :$to at $(nlines "$OUT/runs") runs (at ${SECONDS}s)"
expect_eq "the slot's master after the move" "$to" "$("$CL" master "$CD" "$SLOT")"

# 4. kill -9 the slot's (new) master; its replica takes over; the killed
#    node comes back as a replica (so WAIT 1 can be met again)
wait_for "drain goes on after the move" 60 has_lines "$OUT/runs" 450
killed=$("$CL" kill-master "$CD" "$SLOT")
t0=$(date +%s%N)
echo "killed the master :$killed at $(nlines "$OUT/runs") runs (at ${SECONDS}s)"
promoted() { p=$("$CL" master "$CD" "$SLOT") && [ "$p" != "$killed" ]; }
wait_for "a replica promoted for slot $SLOT" 60 promoted
echo "failover: a new master :$("$CL" master "$CD" "$SLOT") after $((($(date +%s%N) - t0) / 1000000)) ms"
"$CL" revive "$CD" "$killed" && ok || bad "revive :$killed"
"$CL" wait-ok "$CD" && ok || bad "cluster ok again"
# 4b. the workers' subscriptions dropped (CLIENT KILL TYPE pubsub on
#     every node): both subscribe again (listen() redials)
subs() {
	local p n=0
	for p in $("$CL" ports "$CD"); do
		n=$((n + $(redis-cli -h 127.0.0.1 -p "$p" client list 2>/dev/null | grep -c 'sub=[1-9]' || true)))
	done
	echo "$n"
}
killed_subs=0
for p in $("$CL" ports "$CD"); do
	killed_subs=$((killed_subs + $(redis-cli -h 127.0.0.1 -p "$p" client kill type pubsub 2>/dev/null || echo 0)))
done
expect_eq "both workers' subscriptions dropped" 2 "$killed_subs"
two_subs() { [ "$(subs)" -ge 2 ]; }
wait_for "both workers subscribed again" 60 two_subs

# 5. due verify on the cluster (its own prefixes, so other slots and
#    masters), run while the drain ends: it takes a minute on any Redis
"$DUE" verify -v --db "$URL?shards=4" >"$T/verify.out" 2>"$T/verify.err" &
vpid=$!
n=$(nlines "$T/acked")
wait_for "adds acknowledged again after the failover" 60 has_lines "$T/acked" $((n + 5))
echo "first add acknowledged after the kill: $((($(date +%s%N) - t0) / 1000000)) ms (upper bound)"
touch "$OUT/producer.stop"
wait "$ppid" || true

# 6. every acknowledged task DONE, none committed twice
acked=$(sort -u "$T/acked" | wc -l)
sp_tasks() {
	"$DUE" ls --kind c --limit 10000 --json |
		python3 -c "import json, sys; t = json.load(sys.stdin); print($1)"
}
sort -u "$T/acked" >"$T/acked.sorted"
undone() {
	sp_tasks "(lambda a: sum(1 for x in t if x['state'] != 'DONE' and x['id'] in a))({int(l) for l in open('$T/acked.sorted')})"
}
wait_drain "all $acked acknowledged tasks done" 60 undone ||
	sp_tasks "'\\n'.join('%d %s attempt %d %s' % (x['id'], x['state'], x['attempt'], x['attempts']) for x in t if x['state'] != 'DONE')" | sed -n 1,20p
for w in 1 2; do
	eval "p=\$wpid$w"
	kill -0 "$p" && ok || bad "worker w$w survived"
	kill -TERM "$p"
	rc=0
	wait "$p" || rc=$?
	expect_eq "worker w$w exits 0" 0 "$rc"
done
expect_eq "every acknowledged task is there" "$acked" \
	"$(sp_tasks "len({x['id'] for x in t} & {int(l) for l in open('$T/acked.sorted')})")"
expect_eq "every acknowledged task ran" "$acked" \
	"$(comm -12 "$T/acked.sorted" <(sort -u "$OUT/runs") | wc -l)"
expect_eq "no result committed twice" 0 \
	"$(sp_tasks "sum(1 for x in t if sum(a['outcome'] == 'DONE' for a in x['attempts']) != (x['state'] == 'DONE'))")"
expect_eq "each result is its own task's" 0 \
	"$(sp_tasks "sum(1 for x in t if x['state'] == 'DONE' and (x['result'] or '').strip() != 'r%d' % x['id'])")"
expect_eq "no commit with a stale attempt" 0 \
	"$(sp_tasks "sum(1 for x in t for a in x['attempts'] if a['outcome'] == 'DONE' and a['attempt'] != x['attempt'])")"
# every shard ran tasks (a task's shard is its id mod 4), so at least 2
# masters did
for i in 0 1 2 3; do
	ran=$(sp_tasks "sum(1 for x in t if x['state'] == 'DONE' and x['id'] % 4 == $i)")
	echo "shard $i (slot $("$CL" slot "$CD" "{due:$NAME:$i}:meta"), master :$("$CL" master "$CD" "$("$CL" slot "$CD" "{due:$NAME:$i}:meta")")): $ran tasks done"
	[ "$ran" -gt 0 ] && ok || bad "shard $i ran no task"
done
echo "drain (at ${SECONDS}s): $acked acknowledged tasks, $(sp_tasks "len(t)") in the store," \
	"$(nlines "$OUT/runs") handler runs, producer errors: $(nlines "$T/producer.err")"
# the store's errors, most frequent first (a log line's time and pid cut)
grep -h "WAIT\|redis store" "$T/producer.err" "$T/w1.log" "$T/w2.log" |
	sed -E 's/^[0-9T:.-]+Z due-work\[[0-9]+\] /  /; s/^due add/  due add/' |
	sort | uniq -c | sort -rn | sed -n 1,8p
# a store that answers claims but refuses reclaims (a shard whose master
# lost its replica) is one outage of the reclaim, logged when it starts
# and ends: not a failing reclaim after every claim round, each logged
# (the workers once did that ~50 times a second).  A worker has 3 such
# events here (the slot moves, its master dies, the new master waits for
# its replica): at most one opening each
for w in 1 2; do
	n=$(grep -c "claimer: store unavailable: reclaiming" "$T/w$w.log" || true)
	echo "worker w$w: $n reclaim outage(s) logged"
	[ "$n" -le 3 ] && ok || bad "worker w$w logged $n reclaim outages (3 events): one per claim round"
done

# what the nodes refused without running (printed, not asserted: the
# timing decides): TRYAGAIN is the script's migration guard or Redis'
for p in $("$CL" ports "$CD"); do
	redis-cli -h 127.0.0.1 -p "$p" info errorstats 2>/dev/null |
		grep -o 'errorstat_[A-Z]*:count=[0-9]*' | sed "s/^/  :$p /" || true
done

wait "$vpid" || true
grep -q "^[0-9]* passed, 0 failed$" "$T/verify.out" && ok ||
	{ bad "verify on the cluster: $(grep -v PASS "$T/verify.out" | head -5)"; grep -v 'scratch keys' "$T/verify.err" | tail -30; }
echo "verify: $(tail -1 "$T/verify.out") (at ${SECONDS}s)"
# verify drops its scratch stores on every master (the seeds of a
# multi-host URL, then CLUSTER NODES): none of their keys is left
left=0
for p in $("$CL" ports "$CD"); do
	left=$((left + $(redis-cli -h 127.0.0.1 -p "$p" --scan --pattern '*due_verify_*' 2>/dev/null | wc -l)))
done
expect_eq "verify's scratch keys dropped on every node" 0 "$left"
expect_eq "verify could drop every scratch store" 0 "$(grep -c 'could not delete' "$T/verify.err" || true)"

# 7. one master without its replica (killed -9): with ?wait=1 its shards
#    refuse writes; the other masters' shards carry on.  A worker killed
#    -9 holds tasks of every shard of a new store; a second worker takes
#    back and runs those on the other masters while the replica is down
#    (the reclaim asks every shard, not only those before the refusing
#    one), runs none of the refusing master's, and runs those once the
#    replica is back: every task DONE once
n=0
until N2=rd$$x$n && [ "$(shard_masters "$N2")" -ge 2 ]; do n=$((n + 1)); done
DB2="$URL?prefix=$N2&shards=4"
"$DUE" init --db "$DB2" >"$T/init2.out" 2>&1 && ok || bad "init $N2: $(cat "$T/init2.out")"
for i in $(seq 1 24); do echo "{\"kind\":\"d\",\"key\":\"k$i\"}"; done |
	"$DUE" add --db "$DB2" --batch - >"$T/d.ids" || bad "the adds of store $N2"
# the tasks of kind $1 of that store, through the Python expression $2
# (t: the list)
n2_tasks() {
	"$DUE" ls --db "$DB2" --kind "$1" --limit 100 --json |
		python3 -c "import json, sys; t = json.load(sys.stdin); print($2)"
}
claimed24() { [ "$(n2_tasks "$1" "sum(x['state'] == 'CLAIMED' for x in t)")" = 24 ]; }
all_done() { [ "$(n2_tasks "$1" "sum(x['state'] != 'DONE' for x in t)")" = 0 ]; }
# replica_back PORT KIND PID NAME: the killed replica back, the cluster
# ok, every task of KIND DONE with one DONE attempt, worker NAME stopped
replica_back() {
	local rc=0
	"$CL" revive "$CD" "$1" && ok || bad "revive the replica :$1"
	"$CL" wait-ok "$CD" && ok || bad "cluster ok with the replica :$1 back"
	wait_for "all 24 tasks of kind $2 DONE with the replica back" 60 all_done "$2"
	kill -TERM "$3"
	wait "$3" || rc=$?
	expect_eq "worker $4 exits 0" 0 "$rc"
	expect_eq "each task of kind $2 DONE, with one DONE attempt" 24 \
		"$(n2_tasks "$2" "sum(1 for x in t if x['state'] == 'DONE' and sum(a['outcome'] == 'DONE' for a in x['attempts']) == 1)")"
}
"$DUE" work --db "$DB2" --kinds d --concurrency 32 --lease 3s --poll 100ms \
	--owner wa --exec 'sleep 30' 2>"$T/wa.log" &
wa=$!
wait_for "worker wa holds all 24 tasks" 60 claimed24 d
kill -KILL "$wa"
wait "$wa" 2>/dev/null || true
m0=$("$CL" master "$CD" "$("$CL" slot "$CD" "{due:$N2:0}:meta")")
lost=$("$CL" kill-replica "$CD" "$("$CL" slot "$CD" "{due:$N2:0}:meta")") && ok ||
	bad "kill the replica of :$m0"
# the shards (id mod 4) on the other masters
others=
for i in 0 1 2 3; do
	m=$("$CL" master "$CD" "$("$CL" slot "$CD" "{due:$N2:$i}:meta")")
	[ "$m" = "$m0" ] || others="$others$i,"
done
echo "store $N2: worker wa killed holding 24 tasks; replica :$lost of :$m0 killed; shards on other masters: ${others%,}"
"$DUE" work --db "$DB2" --kinds d --concurrency 8 --lease 3s --poll 100ms \
	--owner wb --exec 'echo "$DUE_TASK_ID" >> "$OUT/druns"' 2>"$T/wb.log" &
wb=$!
others_done() {
	[ "$(n2_tasks d "sum(x['state'] != 'DONE' for x in t if x['id'] % 4 in ($others))")" = 0 ]
}
wait_for "the other masters' tasks DONE while :$m0 has no replica" 60 others_done
expect_eq "none of :$m0's tasks ran while it had no replica" 0 \
	"$(n2_tasks d "sum(x['state'] == 'DONE' for x in t if x['id'] % 4 not in ($others))")"
replica_back "$lost" d "$wb" wb
expect_eq "each task ran" 24 "$(sort -u "$OUT/druns" 2>/dev/null | wc -l)"
echo "store $N2 (at ${SECONDS}s): $(nlines "$OUT/druns") handler runs for 24 tasks;" \
	"worker wb logged $(grep -c "claimer: store unavailable: reclaiming" "$T/wb.log" || true) reclaim outage(s)"

# 8. shard 3's master loses its replica while a worker's handlers run
#    tasks of every shard; they end together, so their completions go in
#    calls that span the shards.  A call writes the completions of the
#    shards that answer and fails for the refusing one; its retries are
#    answered what was written (the worker never hears REJECTED_STALE for
#    a try whose result the store kept, as it did when a retry sent them
#    again, and as it did for a completion whose own WAIT fell short:
#    written, the call failed, the retry sent it again); the refusing
#    shard's complete once the replica is back
for i in $(seq 1 24); do echo "{\"kind\":\"e\",\"key\":\"k$i\"}"; done |
	"$DUE" add --db "$DB2" --batch - >"$T/e.ids" || bad "the adds of kind e"
"$DUE" work --db "$DB2" --kinds e --concurrency 32 --lease 5s --poll 100ms --owner wc \
	--exec 'while [ ! -e "$OUT/go" ]; do sleep 0.05; done; echo "$DUE_TASK_ID" >> "$OUT/eruns"' \
	2>"$T/wc.log" &
wpc=$!
wait_for "worker wc runs all 24 tasks" 60 claimed24 e
s3=$("$CL" slot "$CD" "{due:$N2:3}:meta")
m3=$("$CL" master "$CD" "$s3")
lost=$("$CL" kill-replica "$CD" "$s3") && ok || bad "kill the replica of :$m3"
# the handlers end once a renewal has met the lost replica: the WAIT of
# the first write after the loss falls short after 2 s, with that write
# made (the one unknown outcome any store has: a lost reply), and the
# writes after it are refused with nothing written; the completions are
# to meet the refusal (a completion meeting that first write is answered
# from the handle's memory too: test_wait_unmet_complete)
wait_for "a renewal met the lost replica" 60 grep -q "renewer: store unavailable: renewing" "$T/wc.log"
touch "$OUT/go"
wait_for "a commit of worker wc refused by :$m3" 60 \
	grep -Eq "(completer|claimer): store unavailable: (committing|claiming)" "$T/wc.log"
replica_back "$lost" e "$wpc" wc
# "task N (e) attempt A: REJECTED_STALE" lines against the attempts kept
sed -n 's/.* task \([0-9]*\) (e) attempt \([0-9]*\): REJECTED_STALE.*/\1 \2/p' "$T/wc.log" >"$T/wc.stale"
expect_eq "no REJECTED_STALE heard for a try whose result was kept" 0 \
	"$(n2_tasks e "(lambda s: sum(1 for x in t for a in x['attempts'] if a['outcome'] == 'DONE' and (x['id'], a['attempt']) in s))({tuple(map(int, l.split())) for l in open('$T/wc.stale')})")"
echo "store $N2 (at ${SECONDS}s): $(nlines "$OUT/eruns") handler runs for 24 tasks of kind e;" \
	"worker wc heard $(nlines "$T/wc.stale") REJECTED_STALE"
finish
