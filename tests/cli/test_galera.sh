#!/usr/bin/env bash
# test_galera.sh - the MySQL store on a 3-node MariaDB Galera cluster
# (issue 23): the multi-host URL, a task added through one node seen at
# once through another (wsrep_sync_wait), 2,000 tasks drained by two
# workers writing through two different nodes while one of those nodes is
# killed -9 (every task DONE, none with two kept results, the worker on
# the dead node carries on through the next one), a cron schedule that
# both workers' schedulers run fires once per slot, and `due verify`
# passes through the multi-host URL.
#
# Starts its own cluster (scripts/galera-test-cluster) and stops it on
# every exit.  Runs when the build has the MySQL store and galera-4,
# mariadb-server and rsync are installed; under CI=true a missing one is a
# failure.  No timing assertions: the drain's tasks/s is printed only.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_proc.sh"

why=
probe=$("$DUE" init --db "mysql://root@127.0.0.1:1/due" 2>&1 || true)
if [[ $probe == *"unsupported scheme"* ]]; then
	why="this build of due has no mysql store"
elif [ ! -r "${GALERA_PROVIDER:-/usr/lib/galera/libgalera_smm.so}" ]; then
	why="no Galera provider (install galera-4)"
elif ! command -v mariadbd >/dev/null && [ ! -x /usr/sbin/mariadbd ]; then
	why="no mariadbd (install mariadb-server)"
elif ! command -v rsync >/dev/null; then
	why="no rsync (Galera's state transfer)"
fi
[ -z "$why" ] || cannot_test "the Galera test" "$why"

sp_start galera-test-cluster
URL=$SP_URL
GC=$SP_SERVER
port() { "$GC" port "$SP_DIR" "$1"; }
P1=$(port 1) P2=$(port 2) P3=$(port 3)
node_url() { echo "mysql://root@127.0.0.1:$1/due"; }
nsql() { mariadb --no-defaults -h 127.0.0.1 -P "$1" -u root -N -B -e "$2" due; }
expect_eq "multi-host URL" "mysql://root@127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3/due" "$URL"
export DUE_DB=$URL
"$DUE" init >"$T/init.out" 2>&1 && ok || bad "init on galera: $(cat "$T/init.out")"

# 1. read-your-writes across nodes: added through node 1, shown through 2
for i in 1 2 3 4 5; do
	id=$("$DUE" add ryw --db "$(node_url "$P1")")
	expect_eq "task $id added on node 1 is seen on node 2" "$id SCHEDULED" \
		"$("$DUE" show "$id" --json --db "$(node_url "$P2")" |
			python3 -c 'import json,sys; t=json.load(sys.stdin); print(t["id"], t["state"])')"
done
id=$("$DUE" add ryw --db "$URL?multi_writer=1") && ok || bad "add through multi_writer=1"
expect_eq "multi_writer=1 task seen on node 3" SCHEDULED \
	"$("$DUE" show "$id" --json --db "$(node_url "$P3")" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"

# 2. a cron schedule every second, run by both workers' schedulers
"$DUE" cron add tick '* * * * * *' tick >/dev/null && ok || bad "cron add"

# 3. 2,000 tasks; worker A writes through node 1, worker B through node 2
#    (each URL lists its own node first: the default one-writer mode
#    picks the first that answers)
N=2000
for i in $(seq 1 $N); do echo '{"kind":"g"}'; done >"$T/g.jsonl"
"$DUE" add --batch "$T/g.jsonl" >/dev/null && ok || bad "batch add of $N"
H='echo "$DUE_TASK_ID" >> "$OUT/$DUE_KIND.runs"; echo "r$DUE_TASK_ID"'
start=$(date +%s%N)
"$DUE" work -q --kinds g,tick --concurrency 4 --lease 5s --poll 200ms --owner A \
	--db "mysql://root@127.0.0.1:$P1,127.0.0.1:$P3,127.0.0.1:$P2/due" --exec "$H" 2>"$T/A.log" &
wa=$!
"$DUE" work -q --kinds g,tick --concurrency 4 --lease 5s --poll 200ms --owner B \
	--db "mysql://root@127.0.0.1:$P2,127.0.0.1:$P3,127.0.0.1:$P1/due" --exec "$H" 2>"$T/B.log" &
wb=$!
due_conns() { nsql "$1" "SELECT COUNT(*) FROM information_schema.processlist WHERE db = 'due' AND id <> CONNECTION_ID()"; }
wait_for "300 tasks run" 120 has_lines "$OUT/g.runs" 300 || true
c1=$(due_conns "$P1") c2=$(due_conns "$P2")
echo "before the kill: due connections on node 1: $c1, node 2: $c2"
[ "$c1" -ge 1 ] && [ "$c2" -ge 1 ] && ok || bad "workers not on two nodes (node 1: $c1, node 2: $c2)"
"$GC" kill "$SP_DIR" 2 && ok || bad "kill -9 of node 2"
killed_at=$(lines "$OUT/g.runs")
echo "node 2 killed -9 after $killed_at handler runs"
wait_drain "$N tasks done" 60 sp_left g $N || true
end=$(date +%s%N)
echo "drain: $N tasks through 2 nodes, one killed: $(((end - start) / 1000000)) ms," \
	"$((N * 1000000000 / (end - start))) tasks/s"
kill -0 "$wa" && kill -0 "$wb" && ok || bad "a worker died (A: $(tail -2 "$T/A.log"); B: $(tail -2 "$T/B.log"))"
c3=$(due_conns "$P3")
[ "$c3" -ge 1 ] && ok || bad "worker B did not move to node 3"
echo "after the kill: due connections on node 3: $c3"
# the schedulers fire a few more slots through the surviving nodes
slot_tasks() { sp_tasks tick "len(t)"; }
ticks_at_least() { [ "$(slot_tasks)" -ge "$1" ]; }
first_ticks=$(slot_tasks)
wait_for "3 more cron slots" 30 ticks_at_least $((first_ticks + 3)) || true
kill -TERM "$wa" "$wb"
rc=0; wait "$wa" || rc=$?
expect_eq "worker A exits 0" 0 "$rc"
rc=0; wait "$wb" || rc=$?
expect_eq "worker B exits 0" 0 "$rc"

expect_eq "every task DONE with its own result, exactly one DONE attempt" $N \
	"$(sp_tasks g "sum(1 for x in t if x['state'] == 'DONE' and (x['result'] or '').strip() == 'r%d' % x['id'] and [a['outcome'] for a in x['attempts']].count('DONE') == 1)")"
expect_eq "every handler ran (at least once)" $N "$(sort -u "$OUT/g.runs" | wc -l)"
echo "handler runs: $(lines "$OUT/g.runs") for $N tasks;" \
	"attempt 2+: $(sp_tasks g "sum(1 for x in t if x['attempt'] > 1)");" \
	"workers: $(sp_tasks g "sorted({a['worker'] for x in t for a in x['attempts']})")"
echo "worker logs: A $(wc -l <"$T/A.log") lines, B $(wc -l <"$T/B.log") lines; B's last: $(tail -2 "$T/B.log" | tr '\n' ' ')"
expect_eq "both workers claimed" 2 "$(sp_tasks g "len({a['worker'] for x in t for a in x['attempts'] if a['outcome'] == 'DONE'})")"

# 4. cron: one task per slot (its key names the slot), the count the
#    schedule itself recorded
ticks=$(slot_tasks)
expect_eq "one task per cron slot" "$ticks" "$(sp_tasks tick "len({x['key'] for x in t})")"
expect_eq "schedule's fired count = its tasks" "$ticks" \
	"$("$DUE" cron ls --json | python3 -c 'import json,sys; print([s for s in json.load(sys.stdin) if s["name"] == "tick"][0]["fired"])')"
echo "cron: $ticks slots fired, $(sp_tasks tick "sum(1 for x in t if x['state'] == 'DONE')") done"

# 5. due verify through the multi-host URL (node 2 still down: node 1 serves)
sp_verify "$URL"
finish
