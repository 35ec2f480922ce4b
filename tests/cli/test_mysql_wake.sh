#!/usr/bin/env bash
# test_mysql_wake.sh - the MySQL store's wake-ups from the binary log, or
# else the doorbell (issue 39; src/store/mysql_wake.c), on a MariaDB server
# of its own with log-bin on (ROW) that checks privileges:
#   a) a worker whose user may read the log (REPLICATION SLAVE, BINLOG
#      MONITOR) says "wake-ups: binlog", holds a Binlog Dump connection,
#      and claims a task another process submits.  It runs with --poll 60s,
#      and on the binlog path it never reads the due_wake counter: without
#      the binlog's wake-up the task would wait for the safety poll, past
#      the 20 s this allows;
#   b) a user without those grants falls back to the doorbell (the log says
#      why): its worker sleeps in a query that the submit of another
#      process KILLs (Com_kill counts it), and claims the task;
#   b2) KILLing the doorbell's connection: the loss is logged, the worker
#      polls meanwhile and claims, the doorbell comes back and is rung again;
#   b3) a submitter of another user may not list that sleeper (no PROCESS
#      privilege): it rings nobody, and the worker still claims its task at
#      the read that ends the sleep;
#   e) the doorbell under faults: a server-wide max_statement_time under its
#      sleep, due_wake dropped (and made again by due init), the server
#      restarted: the worker lives on, the doorbell comes back and rings;
#   c) KILLing the reader's connection: the worker says the link is lost,
#      claims the next task by polling, opens the link again (a new Binlog
#      Dump connection, "binlog again") and claims by the binlog again.
#   d) ?wake=poll forces the poll on the first user (no dump, no doorbell).
# Runs when DUE_TEST_MYSQL_URL says this run has MariaDB (CI=true: it must).
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true
	for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
	rm -rf "$T"' EXIT

need DUE_TEST_MYSQL_URL mariadb || { finish; exit $?; }
mydir=$(mktemp -d /tmp/due-wake-XXXXXX)
CLEANUP+=("'$ROOT/scripts/mariadb-test-server' stop '$mydir'" "rm -rf '$mydir'")
if ! url=$(MARIADB_TEST_GRANTS=1 MARIADB_TEST_BINLOG=1 \
	"$ROOT/scripts/mariadb-test-server" start "$mydir" 2>"$T/srv.err"); then
	bad "cannot start a MariaDB server with log-bin: $(cat "$T/srv.err")"
	finish
	exit 1
fi
mysql_url_parts "$url"
root() {
	mariadb --no-defaults -h "$myhost" -P "$myport" -u root -N -B due -e "$1"
}
root "CREATE USER waker@'%' IDENTIFIED BY 'pw';
	GRANT ALL ON due.* TO waker@'%';
	GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO waker@'%';
	CREATE USER plain@'%' IDENTIFIED BY 'pw';
	GRANT ALL ON due.* TO plain@'%'" && ok || bad "create users"
waker="mysql://waker:pw@$myhost:$myport/due"
plain="mysql://plain:pw@$myhost:$myport/due"
"$DUE" --db "$waker" init >/dev/null && ok || bad "init as a user without SUPER"

# dumps: ids of the server's Binlog Dump connections of user waker
dumps() {
	root "SELECT id FROM information_schema.PROCESSLIST
		WHERE user = 'waker' AND command LIKE 'Binlog Dump%' ORDER BY id" | paste -sd' '
}
# worker URL LOG: a worker in the background, its pid in $wpid
worker() {
	"$DUE" --db "$1" work --exec true --poll 60s --no-cron >"$2" 2>&1 &
	wpid=$!
	wait_for "$2: the worker has started" 20 grep -q "wake-ups:" "$2"
}
# submitted_runs URL WHAT: a task added by this shell (another process)
# is done well before the worker's 60 s safety poll
submitted_runs() {
	local id
	id=$("$DUE" --db "$1" add wake --json | sed -n 's/.*"id": *\([0-9]*\).*/\1/p')
	wait_for "$2: task $id done" 20 \
		sh -c "'$DUE' --db '$1' show $id | grep -q DONE"
}
stop_worker() {
	kill -TERM "$wpid"
	wait "$wpid" || true
}

echo "== a) binlog wake-ups"
worker "$waker" "$T/a.log"
has "wake-ups: binlog$" "$T/a.log" && ok || bad "a: not on the binlog: $(cat "$T/a.log")"
d1=$(dumps)
[ -n "$d1" ] && ok || bad "a: no Binlog Dump connection of waker"
sleep 1.5 # past the start-up tick: the worker idles
submitted_runs "$waker" "a: binlog"
submitted_runs "$waker" "a: binlog, a second one"

echo "== c) the link killed: the poll, then the binlog again"
root "KILL $d1" && ok || bad "c: kill $d1"
wait_for "c: the loss is logged" 20 grep -q "binlog link lost" "$T/a.log"
submitted_runs "$waker" "c: while the link is down"
# by the poll, not by the link back (opened 5 s after the loss)
if grep -q "wake-ups: binlog again" "$T/a.log"; then bad "c: the link was back first"; else ok; fi
wait_for "c: the link is back" 30 grep -q "wake-ups: binlog again" "$T/a.log"
d2=$(dumps)
[ -n "$d2" ] && [ "$d2" != "$d1" ] && ok ||
	bad "c: no new Binlog Dump connection (before: $d1, now: $d2)"
submitted_runs "$waker" "c: the binlog again"
stop_worker
# the server ends a dump whose reader went at its next heartbeat (1 s)
no_dumps() { [ -z "$(dumps)" ]; }
wait_for "c: the reader's connection ended with its worker" 20 no_dumps

echo "== b) no grant: the doorbell"
# bells: ids of the doorbell connections of user plain, sleeping now
bells() {
	root "SELECT id FROM information_schema.PROCESSLIST
		WHERE user = 'plain' AND info = 'SELECT SLEEP(2.5) AS due_doorbell'"
}
sleeping() { [ -n "$(bells)" ]; }
kills() { root "SHOW GLOBAL STATUS LIKE 'Com_kill'" | cut -f2; }
# rung URL WHAT: with the doorbell asleep, a task submitted by another
# process (as URL's user) runs, and its submit KILLed the sleep (Com_kill)
rung() {
	local k0 k1
	wait_for "$2: the doorbell sleeps" 20 sleeping
	k0=$(kills)
	submitted_runs "$1" "$2"
	k1=$(kills)
	[ "$k1" -gt "$k0" ] && ok || bad "$2: the submit rang nobody (Com_kill $k0 -> $k1)"
}
worker "$plain" "$T/b.log"
has "wake-ups: doorbell (binlog: " "$T/b.log" && ok ||
	bad "b: no doorbell line: $(cat "$T/b.log")"
rung "$plain" "b: rung"

echo "== b2) the doorbell's connection killed: the poll, then the doorbell again"
wait_for "b2: the doorbell sleeps" 20 sleeping
b1=$(bells)
root "KILL $b1" && ok || bad "b2: kill $b1"
wait_for "b2: the loss is logged" 20 grep -q "doorbell link lost" "$T/b.log"
submitted_runs "$plain" "b2: while the doorbell is down"
wait_for "b2: the doorbell is back" 30 grep -q "wake-ups: doorbell again" "$T/b.log"
wait_for "b2: the doorbell sleeps again" 20 sleeping
[ "$(bells)" != "$b1" ] && ok || bad "b2: the same connection sleeps ($b1)"
rung "$plain" "b2: rung again"

echo "== b3) another user's submit: not rung, read at the sleep's end"
wait_for "b3: the doorbell sleeps" 20 sleeping
k0=$(kills)
submitted_runs "$waker" "b3: another user's submit"
k1=$(kills)
[ "$k1" = "$k0" ] && ok || bad "b3: a KILL without the right to see the sleeper ($k0 -> $k1)"
stop_worker

echo "== e) the doorbell under faults (the attack on issue 39's doorbell)"
# e1) a server-wide statement time limit under the doorbell's 2.5 s sleep:
# its session lifts it (it cut every sleep: a link lost every 6 s)
root "SET GLOBAL max_statement_time = 1" && ok || bad "e1: set max_statement_time"
worker "$plain" "$T/e.log"
root "SET GLOBAL max_statement_time = 0"
wait_for "e1: the doorbell sleeps" 20 sleeping
sleep 2.5 # past a 1 s limit's cut of that sleep
rung "$plain" "e1: rung under max_statement_time"
if grep -q "link lost" "$T/e.log"; then bad "e1: $(grep "link lost" "$T/e.log")"; else ok; fi

# e2) due_wake dropped past the 5 s reopen (the reopen failed, and the
# thread read on a NULL connection: SIGSEGV); due init makes it again
root "DROP TABLE due_wake" && ok || bad "e2: drop due_wake"
wait_for "e2: the loss is logged" 20 grep -q "doorbell link lost" "$T/e.log"
sleep 7
kill -0 "$wpid" 2>/dev/null && ok || bad "e2: the worker died with due_wake gone"
"$DUE" --db "$waker" init >/dev/null && ok || bad "e2: init"
[ "$(root "SELECT COUNT(*) FROM information_schema.tables
	WHERE table_schema = 'due' AND table_name = 'due_wake'")" = 1 ] &&
	ok || bad "e2: due init did not make due_wake again"
wait_for "e2: the doorbell is back" 60 grep -q "wake-ups: doorbell again" "$T/e.log"
submitted_runs "$plain" "e2: after due_wake came back"

# e3) the server restarted, down past the reopen: the worker lives on, the
# doorbell comes back, and the first submit into the emptied MEMORY table
# rings (its bump inserted the counter's row and rang nobody)
n_again=$(grep -c "wake-ups: doorbell again" "$T/e.log")
"$ROOT/scripts/mariadb-test-server" stop "$mydir" >/dev/null 2>&1 && ok || bad "e3: stop the server"
sleep 7
MARIADB_TEST_GRANTS=1 MARIADB_TEST_BINLOG=1 "$ROOT/scripts/mariadb-test-server" \
	start "$mydir" >/dev/null 2>"$T/srv2.err" && ok || bad "e3: restart: $(cat "$T/srv2.err")"
kill -0 "$wpid" 2>/dev/null && ok || bad "e3: the worker died in the outage"
back() { [ "$(grep -c "wake-ups: doorbell again" "$T/e.log")" -gt "$n_again" ]; }
wait_for "e3: the doorbell is back" 90 back
rung "$plain" "e3: the first submit after the restart"
stop_worker

echo "== d) ?wake=poll"
worker "$waker?wake=poll" "$T/d.log"
has "wake-ups: polling due_wake (wake=poll)" "$T/d.log" && ok ||
	bad "d: wake=poll not obeyed: $(cat "$T/d.log")"
[ -z "$(dumps)" ] && ok || bad "d: a Binlog Dump connection with wake=poll"
[ -z "$(root "SELECT id FROM information_schema.PROCESSLIST
	WHERE info = 'SELECT SLEEP(2.5) AS due_doorbell'")" ] && ok ||
	bad "d: a doorbell with wake=poll"
submitted_runs "$waker?wake=poll" "d: polled"
stop_worker

finish
