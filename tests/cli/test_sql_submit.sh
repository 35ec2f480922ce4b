#!/usr/bin/env bash
# test_sql_submit.sh - due_schedule(), the SQL submit `due init` creates on
# PostgreSQL (a function) and on MySQL/MariaDB (a procedure): inside the
# caller's transaction (rolled back: no task, no wake-up; committed: a
# running worker runs it, woken by the notification / the wake-up counter,
# its safety poll being far away), idempotent by key, the C API's
# validation (each bad input an error naming it, nothing written; due
# times bounded like `due add --at`: 1970 .. 9999, issue 36), and `due
# init` adding the routine to an existing store and replacing the one of a
# store of the previous schema version; due_reschedule() beside it (issue
# 38: its outcomes, in the caller's transaction, bad input, and a store of
# schema 8 given it by `due init`); PostgreSQL's due_schedule(..., on_key)
# (issue 38: keep, replace, later, a running holder giving up its key,
# bad on_key, the producer's extra GRANTs from the docs, a store of schema
# 9 given it by `due init`).  PostgreSQL: the function writes
# the store's due_task whatever the caller's path holds (a "$user" schema
# or a temporary table of that name: issue 36), also from a schema whose
# name needs quoting.  The producer's GRANTs and the isolation levels are
# test_sql_submit_grants.sh's.
#
# Needs DUE_TEST_PG_URL and DUE_TEST_MYSQL_URL (scripts/test starts both
# servers); uses a schema / a database of its own on each.  Under CI=true
# a missing server is a failure, never a skip.  No timing assertions: the
# worker's pick-up is waited for with a deadline (a hang guard), shorter
# than its 60 s safety poll so that only the wake-up can make it.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
field() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }

# ---- MySQL/MariaDB: CALL due_schedule(kind, payload, run_in_us, run_at_us,
# key, max_attempts, @id), NULL meaning the default
if [ -z "${DUE_TEST_MYSQL_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_MYSQL_URL is unset"; fi
	echo "NOTE: DUE_TEST_MYSQL_URL not set: the MySQL SQL submit is not tested"
else
	mysql_url_parts "$DUE_TEST_MYSQL_URL"
	mydb="due_sql_$$"
	mycli() {
		MYSQL_PWD="$mypass" mariadb --no-defaults --default-character-set=utf8mb4 \
			-h "$myhost" -P "$myport" ${mysock:+-S "$mysock"} -u "$myuser" -N -B "$@"
	}
	my() { mycli "$mydb" -e "$1"; }
	mycli -e "CREATE DATABASE $mydb CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
	trap 'kill $(jobs -p) 2>/dev/null || true; mycli -e "DROP DATABASE IF EXISTS $mydb" >/dev/null 2>&1; rm -rf "$T"' EXIT
	export DUE_DB="mysql://$myauth@$myhostport/$mydb$myquery"
	mytasks() { my "SELECT COUNT(*) FROM due_task"; }
	call() { echo "CALL due_schedule($1, @id); SELECT @id"; }

	"$DUE" init >/dev/null && ok || bad "mysql: init"
	my "CREATE TABLE orders (id INT PRIMARY KEY) ENGINE=InnoDB"

	echo "== mysql: rolled back: no task"
	my "START TRANSACTION; INSERT INTO orders VALUES (1);
	    $(call "'close-order', '1', NULL, NULL, NULL, NULL") ; ROLLBACK" >/dev/null
	expect_eq "mysql: rolled back: no order, no task" "0 0" "$(my 'SELECT COUNT(*) FROM orders') $(mytasks)"

	echo "== mysql: committed: a running worker runs it"
	"$DUE" work --poll 60s --no-cron --kinds close-order \
		--exec 'printf "closed %s" "$(cat)"' 2>"$T/mywork.err" &
	wpid=$!
	wait_for "mysql: worker listening" 30 grep -q "discovery: timing wheel" "$T/mywork.err"
	id=$(my "START TRANSACTION; INSERT INTO orders VALUES (2);
		 CALL due_schedule('close-order', 'héllo 2', NULL, NULL, NULL, NULL, @id);
		 COMMIT; SELECT @id")
	[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "mysql: due_schedule gave '$id'"
	wait_for "mysql: the committed task done by the worker" 30 is_state "$id" DONE
	expect_eq "mysql: result (payload as text, UTF-8)" "closed héllo 2" "$(field "$id" result)"
	kill "$wpid"
	wait "$wpid" || true

	echo "== mysql: options, idempotency by key"
	id=$(my "$(call "'later', 'x', 3600000000, NULL, NULL, 3")")
	expect_eq "mysql: max_attempts" 3 "$(field "$id" max_attempts)"
	expect_eq "mysql: run_in_us: due an hour after it was made" 3600000000 \
		"$(my "SELECT due_at - created_at FROM due_task WHERE id = $id")"
	at=$(my "$(call "'later', 'y', 0, 1925089445000000, NULL, NULL")")
	expect_eq "mysql: run_at_us" "2031-01-02T03:04:05.000Z" "$(field "$at" due_at)"
	expect_eq "mysql: NULLs are the defaults" "5 " \
		"$(field "$at" max_attempts) $(my "SELECT payload FROM due_task WHERE id = $(my "$(call "'later', NULL, NULL, NULL, NULL, NULL")")")"
	k1=$(my "$(call "'keyed', 'a', NULL, NULL, 'order-7', NULL")")
	k2=$(my "$(call "'keyed', 'b', NULL, NULL, 'order-7', NULL")")
	expect_eq "mysql: same key, same live task" "$k1" "$k2"
	expect_eq "mysql: the first payload kept" a "$(field "$k1" payload)"
	k4=$(my "$(call "'keyed', 'd', NULL, NULL, 'order-7 ', NULL")")
	[ "$k4" != "$k1" ] && ok || bad "mysql: 'order-7 ' is another key than 'order-7'"
	"$DUE" cancel "$k1" >/dev/null
	k3=$(my "$(call "'keyed', 'c', NULL, NULL, 'order-7', NULL")")
	[ "$k3" != "$k1" ] && ok || bad "mysql: a key whose task ended gives a new task"

	echo "== mysql: bad input: an error naming it, nothing written"
	before="$(my 'SELECT COUNT(*) FROM orders') $(mytasks)"
	my_err() { # WHAT ARGS
		if my "START TRANSACTION; INSERT INTO orders VALUES (99);
		       CALL due_schedule($2, @id); COMMIT" >"$T/out" 2>"$T/err"; then
			bad "mysql: $1: accepted"
		elif grep -qF -- "$1" "$T/err"; then
			ok
		else
			bad "mysql: $1: error does not name it: $(cat "$T/err")"
		fi
	}
	my_err "invalid kind 'bad kind'" "'bad kind', 'x', NULL, NULL, NULL, NULL"
	my_err "invalid kind '': empty" "'', 'x', NULL, NULL, NULL, NULL"
	my_err "invalid kind '': empty" "NULL, 'x', NULL, NULL, NULL, NULL"
	my_err "invalid kind: 129 characters" "REPEAT('k', 129), 'x', NULL, NULL, NULL, NULL"
	my_err "invalid delay (run_in_us): negative" "'k', 'x', -1, NULL, NULL, NULL"
	my_err "more than 100 years" "'k', 'x', 3162240000000001, NULL, NULL, NULL"
	my_err "not both" "'k', 'x', 60000000, 1925089445000000, NULL, NULL"
	my_err "before 1970" "'k', 'x', NULL, -1, NULL, NULL"
	my_err "invalid max_attempts 0" "'k', 'x', NULL, NULL, NULL, 0"
	my_err "invalid key '': empty" "'k', 'x', NULL, NULL, '', NULL"
	my_err "invalid key: 513 bytes" "'k', 'x', NULL, NULL, REPEAT('k', 513), NULL"
	my_err "over the limit" "'k', REPEAT('x', 1048577), NULL, NULL, NULL, NULL"
	# issue 36: what `due add --at` refuses (BIGINT reached year 294247),
	# and a kind ending in a newline (REGEXP's $ matched before it)
	my_err "invalid due time (run_at_us): after 9999-12-31T23:59:59Z" \
		"'k', 'x', NULL, 9223372036854775807, NULL, NULL"
	my_err "invalid due time (run_at_us): after 9999-12-31T23:59:59Z" \
		"'k', 'x', NULL, 253402300800000000, NULL, NULL"
	my_err "invalid kind 'k" "CONCAT('k', CHAR(10)), 'x', NULL, NULL, NULL, NULL"
	# a key that is not UTF-8 is refused, also from a session whose sql_mode
	# is not strict (it became 'k?', one key with 'k\xfe': deduplicated)
	my_err "invalid key: not UTF-8" "'k', 'x', NULL, NULL, x'6bff', NULL"
	if my "SET SESSION sql_mode = ''; START TRANSACTION; INSERT INTO orders VALUES (98);
	       CALL due_schedule('k', 'x', NULL, NULL, x'6bfe', NULL, @id); COMMIT" >"$T/out" 2>"$T/err"; then
		bad "mysql: non-strict session: a key that is not UTF-8 accepted"
	else
		grep -qF "invalid key: not UTF-8" "$T/err" && ok || bad "mysql: non-strict session: $(cat "$T/err")"
	fi
	expect_eq "mysql: bad calls wrote nothing (no order, no task)" "$before" \
		"$(my 'SELECT COUNT(*) FROM orders') $(mytasks)"
	last=$(my "$(call "'later', 'z', NULL, 253402300799999999, NULL, NULL")")
	expect_eq "mysql: the last instant --at reads is taken" \
		"9999-12-31T23:59:59.999Z" "$(field "$last" due_at)"

	bin=$(my "$(call "'bin', x'00ff41', NULL, NULL, NULL, NULL")")
	expect_eq "mysql: a binary payload kept byte for byte" AP9B \
		"$("$DUE" show "$bin" --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("payload_b64"))')"

	echo "== mysql: due init adds the procedure to an existing store"
	my "DROP PROCEDURE due_schedule"
	"$DUE" init >/dev/null && ok || bad "mysql: init again"
	id=$(my "$(call "'again', 'x', NULL, NULL, NULL, NULL")")
	[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "mysql: after a second init: '$id'"

	echo "== mysql: a store of schema 7 (procedure v1) is upgraded by due init"
	# the previous procedure, standing in: its COMMENT, and an answer no
	# real one gives
	my "DROP PROCEDURE due_schedule;
	    CREATE PROCEDURE due_schedule(IN a TEXT, IN b LONGTEXT, IN c BIGINT,
	      IN d BIGINT, IN e TEXT, IN f INT, OUT p_id BIGINT)
	      COMMENT 'due_schedule v1' SET p_id = -1;
	    UPDATE due_meta SET value = '7' WHERE name = 'schema_version'"
	expect_err 6 "run \`due init\` to upgrade" "$DUE" ls
	"$DUE" init >/dev/null && ok || bad "mysql: init of a store of schema 7"
	id=$(my "$(call "'again', 'x', NULL, NULL, NULL, NULL")")
	[[ "$id" =~ ^[1-9][0-9]*$ ]] && ok || bad "mysql: the old procedure kept: '$id'"
	my_err "after 9999-12-31T23:59:59Z" "'k', 'x', NULL, 9223372036854775807, NULL, NULL"

	echo "== mysql: due_reschedule in the caller's transaction (issue 38)"
	rid=$("$DUE" add later2 --in 1h --payload old)
	before=$(field "$rid" due_at)
	expect_eq "mysql: reschedule rolled back: nothing moved" "RESCHEDULED $before old" \
		"$(my "START TRANSACTION; CALL due_reschedule($rid, 1000000, NULL, 'new', @o); SELECT @o; ROLLBACK") $(field "$rid" due_at) $(field "$rid" payload)"
	expect_eq "mysql: reschedule committed" RESCHEDULED \
		"$(my "START TRANSACTION; CALL due_reschedule($rid, NULL, 4102444800000000, 'new', @o); COMMIT; SELECT @o")"
	expect_eq "mysql: moved, new payload" "2100-01-01T00:00:00.000Z new" "$(field "$rid" due_at) $(field "$rid" payload)"
	expect_eq "mysql: payload NULL keeps it" "RESCHEDULED new" \
		"$(my "CALL due_reschedule($rid, 5000000, NULL, NULL, @o); SELECT @o") $(field "$rid" payload)"
	out=$(my "CALL due_reschedule($rid, 1, 1, NULL, @o)" 2>&1 || true)
	has -F "not both" <<<"$out" && ok || bad "mysql: reschedule with both: $out"
	expect_eq "mysql: unknown task" NOT_FOUND "$(my "CALL due_reschedule(999999, 1, NULL, NULL, @o); SELECT @o")"
	"$DUE" cancel "$rid" >/dev/null
	expect_eq "mysql: finished task" ALREADY_FINISHED "$(my "CALL due_reschedule($rid, 1, NULL, NULL, @o); SELECT @o")"
	echo "== mysql: a store of schema 8 gets due_reschedule from due init"
	my "DROP PROCEDURE due_reschedule; UPDATE due_meta SET value = '8' WHERE name = 'schema_version'"
	expect_err 6 "run \`due init\` to upgrade" "$DUE" ls
	"$DUE" init >/dev/null && ok || bad "mysql: init of a store of schema 8"
	expect_eq "mysql: upgraded: due_reschedule there" NOT_FOUND \
		"$(my "CALL due_reschedule(999999, 1, NULL, NULL, @o); SELECT @o")"
	# ---- MySQL: due_schedule_on_key(..., on_key, @id) (issue 38 point 2)
	echo "== mysql: due_schedule_on_key: replace, later, keep"
	okey() { echo "CALL due_schedule_on_key($1, @id); SELECT @id"; }
	# a task's row read by SQL (cheaper here than due show + python)
	due_pay() { my "SELECT CONCAT(due_at, ' ', payload) FROM due_task WHERE id = $1"; }
	row() { my "SELECT CONCAT_WS(' ', state, attempt, payload, IFNULL(\`key\`, 'NULL')) FROM due_task WHERE id = $1"; }
	my_state() { [ "$(my "SELECT state FROM due_task WHERE id = $1")" = "$2" ]; }
	d1=$(my "$(okey "'deb', 'a', 3600000000, NULL, 'd1', NULL, 'replace'")")
	[[ "$d1" =~ ^[1-9][0-9]*$ ]] && ok || bad "mysql: on_key: first submit gave '$d1'"
	expect_eq "mysql: on_key replace: the holder moved, same id" "$d1" \
		"$(my "$(okey "'deb', 'b', NULL, 4102444800000000, 'd1', NULL, 'replace'")")"
	expect_eq "mysql: on_key replace: new time and payload" "4102444800000000 b" "$(due_pay "$d1")"
	expect_eq "mysql: on_key later, earlier: same id" "$d1" \
		"$(my "$(okey "'deb', 'c', NULL, 4102358400000000, 'd1', NULL, 'later'")")"
	expect_eq "mysql: on_key later, equal: same id" "$d1" \
		"$(my "$(okey "'deb', 'c', NULL, 4102444800000000, 'd1', NULL, 'later'")")"
	expect_eq "mysql: on_key later, not later: nothing moved" "4102444800000000 b" "$(due_pay "$d1")"
	expect_eq "mysql: on_key later, later: same id" "$d1" \
		"$(my "$(okey "'deb', 'd', NULL, 4102531200000000, 'd1', NULL, 'later'")")"
	expect_eq "mysql: on_key later: moved" "4102531200000000 d" "$(due_pay "$d1")"
	expect_eq "mysql: on_key keep and NULL: same id" "$d1 $d1" \
		"$(my "$(okey "'deb', 'e', 1, NULL, 'd1', NULL, 'keep'")") $(my "$(okey "'deb', 'e', 1, NULL, 'd1', NULL, NULL")")"
	expect_eq "mysql: on_key keep: nothing moved" "4102531200000000 d" "$(due_pay "$d1")"
	expect_eq "mysql: on_key replace rolled back: the holder's id" "$d1" \
		"$(my "START TRANSACTION; CALL due_schedule_on_key('deb', 'f', 1, NULL, 'd1', NULL, 'replace', @id); ROLLBACK; SELECT @id")"
	expect_eq "mysql: on_key replace rolled back: nothing moved" "4102531200000000 d" "$(due_pay "$d1")"
	expect_eq "mysql: on_key replace, a delay: from the server's clock" 60000000 \
		"$(my "CALL due_schedule_on_key('deb', 'g', 60000000, NULL, 'd1', NULL, 'replace', @id);
		       SELECT due_at - updated_at FROM due_task WHERE id = $d1 AND id = @id")"
	expect_eq "mysql: on_key with no live task: a new one" 1 \
		"$(my "SELECT COUNT(*) FROM due_task WHERE id = $(my "$(okey "'deb', 'h', NULL, NULL, 'd2', NULL, 'later'")") AND \`key\` = 'd2'")"

	echo "== mysql: due_schedule_on_key: a running holder gives up its key"
	"$DUE" work --poll 60s --no-cron --kinds deb-run \
		--exec "while [ ! -e '$T/my-go' ]; do sleep 0.1; done; echo ran" 2>"$T/debwork.err" &
	dwpid=$!
	r1=$("$DUE" add deb-run --key r1 --payload old)
	wait_for "mysql: on_key: the holder running" 30 my_state "$r1" CLAIMED
	r2=$(my "$(okey "'deb-run', 'new', 3600000000, NULL, 'r1', NULL, 'replace'")")
	[[ "$r2" =~ ^[1-9][0-9]*$ && "$r2" != "$r1" ]] && ok || bad "mysql: on_key replace of a running holder gave '$r2' (holder $r1)"
	expect_eq "mysql: the running task untouched but its key" "CLAIMED 1 old NULL" "$(row "$r1")"
	expect_eq "mysql: the new task holds the key" "SCHEDULED 0 new r1" "$(row "$r2")"
	touch "$T/my-go"
	wait_for "mysql: on_key: the old task done" 30 my_state "$r1" DONE
	expect_eq "mysql: its finish left the key with the new task" "$r2" \
		"$(my "$(okey "'deb-run', 'x', NULL, NULL, 'r1', NULL, 'keep'")")"
	kill "$dwpid"
	wait "$dwpid" || true

	echo "== mysql: due_schedule_on_key: 8 producers debounce one key"
	for p in 1 2 3 4 5 6 7 8; do
		( for r in 1 2 3 4 5 6 7 8 9 10; do
			n=$((r * 8 + p))
			echo "CALL due_schedule_on_key('deb8', 'p$n', NULL, $((4102444800000000 + n * 1000000)), 'k8', NULL, 'later', @id);"
		done | mycli "$mydb" ) &
	done
	wait
	expect_eq "mysql: 8 producers x 10 later: one task, at the latest time, its payload" \
		"1 4102444888000000 p88" \
		"$(my "SELECT COUNT(*) FROM due_task WHERE kind = 'deb8'") $(due_pay "$(my "SELECT id FROM due_task WHERE kind = 'deb8'")")"

	echo "== mysql: due_schedule_on_key: bad input, nothing written"
	before="$(my 'SELECT COUNT(*) FROM orders') $(mytasks) $(due_pay "$d1")"
	my_okey_err() { # WHAT ARGS
		if my "START TRANSACTION; INSERT INTO orders VALUES (97);
		       CALL due_schedule_on_key($2, @id); COMMIT" >"$T/out" 2>"$T/err"; then
			bad "mysql: on_key: $1: accepted"
		elif grep -qF -- "$1" "$T/err"; then
			ok
		else
			bad "mysql: on_key: $1: error does not name it: $(cat "$T/err")"
		fi
	}
	my_okey_err "due_schedule_on_key: invalid on_key 'bogus': must be keep, replace or later" \
		"'deb', 'x', NULL, NULL, 'd1', NULL, 'bogus'"
	my_okey_err "invalid on_key 'REPLACE'" "'deb', 'x', NULL, NULL, 'd1', NULL, 'REPLACE'"
	my_okey_err "invalid on_key 'later '" "'deb', 'x', NULL, NULL, 'd1', NULL, 'later '"
	my_okey_err "invalid on_key ''" "'deb', 'x', NULL, NULL, 'd1', NULL, ''"
	my_okey_err "due_schedule_on_key: on_key replace needs a key" "'deb', 'x', NULL, NULL, NULL, NULL, 'replace'"
	my_okey_err "on_key later needs a key" "'deb', 'x', NULL, NULL, NULL, NULL, 'later'"
	my_okey_err "due_schedule_on_key: invalid key '': empty" "'deb', 'x', NULL, NULL, '', NULL, 'replace'"
	my_okey_err "due_schedule_on_key: invalid delay (run_in_us): negative" "'deb', 'x', -1, NULL, 'd1', NULL, 'replace'"
	my_okey_err "due_schedule_on_key: invalid kind 'bad kind'" "'bad kind', 'x', NULL, NULL, 'd1', NULL, 'replace'"
	expect_eq "mysql: on_key: bad calls wrote nothing (no order, no task, the holder as it was)" "$before" \
		"$(my 'SELECT COUNT(*) FROM orders') $(mytasks) $(due_pay "$d1")"

	echo "== mysql: a store of schema 9 gets due_schedule_on_key from due init"
	my "DROP PROCEDURE due_schedule_on_key; UPDATE due_meta SET value = '9' WHERE name = 'schema_version'"
	expect_err 6 "run \`due init\` to upgrade" "$DUE" ls
	"$DUE" init >/dev/null && ok || bad "mysql: init of a store of schema 9"
	expect_eq "mysql: upgraded: due_schedule_on_key there" "$d1" \
		"$(my "$(okey "'deb', 'i', NULL, NULL, 'd1', NULL, 'keep'")")"
	expect_eq "mysql: upgraded: due_schedule kept" "$d1" \
		"$(my "$(call "'deb', 'i', NULL, NULL, 'd1', NULL")")"
	mycli -e "DROP DATABASE IF EXISTS $mydb" >/dev/null
fi

# ---- PostgreSQL: SELECT due_schedule(...)
if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; finish; fi
	echo "NOTE: DUE_TEST_PG_URL not set: the SQL submit is not tested"
	finish
	exit 0
fi
schema="due_sql_$$"
psql -qX "$DUE_TEST_PG_URL" -c "CREATE SCHEMA $schema" >/dev/null
trap 'kill $(jobs -p) 2>/dev/null || true; psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1; rm -rf "$T"' EXIT
sep='?'; case "$DUE_TEST_PG_URL" in *\?*) sep='&';; esac
export DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
sql() { psql -qXAt -v ON_ERROR_STOP=1 "$DUE_DB" "$@"; }
field() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }
is_state() { [ "$(field "$1" state)" = "$2" ]; }
tasks() { sql -c "SELECT count(*) FROM due_task"; }

"$DUE" init >/dev/null && ok || bad "init"
sql -c "CREATE TABLE orders (id int PRIMARY KEY)"

echo "== rolled back: no task"
sql -c "BEGIN" -c "INSERT INTO orders VALUES (1)" \
	-c "SELECT due_schedule('close-order', '1')" -c "ROLLBACK" >/dev/null
expect_eq "rolled back: no order, no task" "0 0" "$(sql -c 'SELECT count(*) FROM orders') $(tasks)"

echo "== committed: a running worker runs it"
"$DUE" work --poll 60s --no-cron --kinds close-order \
	--exec 'printf "closed %s" "$(cat)"' 2>"$T/work.err" &
wpid=$!
# the worker listens once its wheel is running; a task committed before
# would be found by its first refill anyway
wait_for "worker listening" 30 grep -q "discovery: timing wheel" "$T/work.err"
id=$(sql -c "BEGIN" -c "INSERT INTO orders VALUES (2)" \
	-c "SELECT due_schedule('close-order', 'héllo 2')" -c "COMMIT")
[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "due_schedule returned '$id'"
wait_for "the committed task done by the worker" 30 is_state "$id" DONE
expect_eq "result (payload as text, UTF-8)" "closed héllo 2" "$(field "$id" result)"
kill "$wpid"
wait "$wpid" || true

echo "== options, idempotency by key"
id=$(sql -c "SELECT due_schedule('later', 'x', run_in => interval '1 hour', max_attempts => 3)")
expect_eq "max_attempts" 3 "$(field "$id" max_attempts)"
expect_eq "run_in: due in about an hour" t \
	"$(sql -c "SELECT due_at > now() + interval '59 minutes' AND due_at < now() + interval '61 minutes' FROM due_task WHERE id = $id")"
at=$(sql -c "SELECT due_schedule('later', 'y', run_at => '2031-01-02T03:04:05Z')")
expect_eq "run_at" "2031-01-02T03:04:05.000Z" "$(field "$at" due_at)"
k1=$(sql -c "SELECT due_schedule('keyed', 'a', key => 'order-7')")
k2=$(sql -c "SELECT due_schedule('keyed', 'b', key => 'order-7')")
expect_eq "same key, same live task" "$k1" "$k2"
expect_eq "the first payload kept" a "$(field "$k1" payload)"
"$DUE" cancel "$k1" >/dev/null
k3=$(sql -c "SELECT due_schedule('keyed', 'c', key => 'order-7')")
[ "$k3" != "$k1" ] && ok || bad "a key whose task ended gives a new task"

echo "== bad input: an error naming it, nothing written"
before=$(tasks)
sql_err() { # WHAT CALL
	if sql -c "SELECT $2" >"$T/out" 2>"$T/err"; then
		bad "$1: accepted"
	elif grep -qF -- "$1" "$T/err"; then
		ok
	else
		bad "$1: error does not name it: $(cat "$T/err")"
	fi
}
sql_err "invalid kind 'bad kind'" "due_schedule('bad kind', 'x')"
sql_err "invalid kind '': empty" "due_schedule('', 'x')"
sql_err "invalid delay (run_in): negative" "due_schedule('k', 'x', run_in => interval '-1 second')"
sql_err "more than 100 years" "due_schedule('k', 'x', run_in => interval '200 years')"
sql_err "not both" "due_schedule('k', 'x', run_in => interval '1 minute', run_at => now())"
sql_err "before 1970" "due_schedule('k', 'x', run_at => '1960-01-01Z')"
sql_err "invalid max_attempts 0" "due_schedule('k', 'x', max_attempts => 0)"
sql_err "invalid key '': empty" "due_schedule('k', 'x', key => '')"
sql_err "over the limit" "due_schedule('k', repeat('x', 1048577))"
# issue 36: what `due add --at` refuses ('infinity' was stored, shown as
# 1970-01-01 and never claimed), in its words
sql_err "invalid due time (run_at): after 9999-12-31T23:59:59Z" \
	"due_schedule('k', 'x', run_at => 'infinity')"
sql_err "invalid due time (run_at): after 9999-12-31T23:59:59Z" \
	"due_schedule('k', 'x', run_at => '10000-01-01T00:00:00Z')"
sql_err "invalid due time (run_at): before 1970" "due_schedule('k', 'x', run_at => '-infinity')"
sql_err "invalid kind 'k" "due_schedule(E'k\\n', 'x')"
expect_eq "bad calls wrote nothing" "$before" "$(tasks)"
last=$(sql -c "SELECT due_schedule('later', 'z', run_at => '9999-12-31T23:59:59.999999Z')")
expect_eq "the last instant --at reads is taken" "9999-12-31T23:59:59.999Z" "$(field "$last" due_at)"

echo "== pinned to the store's schema, whatever the caller's path holds"
# A second store, installed the way the issue found it: `due init` with
# "$user" first in its path (its own schema does not exist, so the
# tables go to the next one), into a schema whose name needs quoting
# (format's %I).  A producer whose own schema ("$user") and session (a
# temporary table) each hold a due_task: the tasks still go to the
# store's table, where workers look (schema 7's function wrote the first
# to the role's schema, and both to the temporary table).
qs="Due_Q$$"
role="due_sql_r_$$"
pgsu() { psql -qXAt -v ON_ERROR_STOP=1 "$DUE_TEST_PG_URL" "$@"; }
trap 'kill $(jobs -p) 2>/dev/null || true
	pgsu -c "DROP SCHEMA IF EXISTS $schema, $role, \"$qs\" CASCADE" -c "DROP OWNED BY $role" \
		-c "DROP ROLE $role" >/dev/null 2>&1; rm -rf "$T"' EXIT
pgsu -c "CREATE SCHEMA \"$qs\""
DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D%22%24user%22%2C%22$qs%22" "$DUE" init >/dev/null &&
	ok || bad "init into \"\$user\",\"$qs\""
expect_eq "quoted schema: pinned to it, pg_temp last" "{\"search_path=\\\"$qs\\\", pg_temp\"}" \
	"$(pgsu -c "SELECT DISTINCT proconfig FROM pg_proc WHERE pronamespace = '\"$qs\"'::regnamespace AND proname = 'due_schedule'")"
# the producer has the GRANTs docs/INTERFACE.md gives (and its own schema)
pgsu -c "CREATE ROLE $role" -c "CREATE SCHEMA $role AUTHORIZATION $role" \
	-c "GRANT USAGE ON SCHEMA \"$qs\" TO $role" \
	-c "GRANT INSERT, SELECT (id, kind, key, state) ON \"$qs\".due_task TO $role"
got=$(pgsu -c "CREATE TABLE $role.due_task (LIKE \"$qs\".due_task INCLUDING ALL)" \
	-c "GRANT ALL ON $role.due_task TO $role" -c "SET ROLE $role" \
	-c "SELECT \"$qs\".due_schedule('pinned', 'user schema')" -c "RESET ROLE" \
	-c "CREATE TEMP TABLE due_task (LIKE \"$qs\".due_task INCLUDING ALL)" \
	-c "GRANT ALL ON pg_temp.due_task TO $role" -c "SET ROLE $role" \
	-c "SELECT \"$qs\".due_schedule('pinned', 'temp table')" \
	-c "SELECT (SELECT count(*) FROM $role.due_task), (SELECT count(*) FROM pg_temp.due_task)" 2>&1) ||
	bad "pinned: the calls failed: $got"
expect_eq "pinned: nothing in the role's schema or its temporary table" "0|0" "$(echo "$got" | tail -1)"
expect_eq "pinned: both tasks in the store's due_task, under the ids returned" \
	"$(echo "$got" | sed -n 1,2p | paste -sd' ')" \
	"$(pgsu -c "SELECT id FROM \"$qs\".due_task WHERE kind = 'pinned' ORDER BY id" | paste -sd' ')"
expect_eq "pinned: the main store's function too (pg_temp last)" \
	"{\"search_path=$schema, pg_temp\"}" \
	"$(sql -c "SELECT DISTINCT proconfig FROM pg_proc WHERE proname = 'due_schedule'
		AND pronamespace = '$schema'::regnamespace")"

echo "== due init adds the function to an existing store"
sql -c "DROP FUNCTION due_schedule(text, text, interval, timestamptz, text, integer)"
"$DUE" init >/dev/null && ok || bad "init again"
id=$(sql -c "SELECT due_schedule('again', 'x')")
[[ "$id" =~ ^[0-9]+$ ]] && ok || bad "after a second init: '$id'"

echo "== a store of schema 7 gets the pinned function from due init"
# the function of schema 7 followed the caller's path ("\$user", public
# as `due init` had it); standing in for it, one with that path and an
# answer no real one gives
sql -c "CREATE OR REPLACE FUNCTION due_schedule(kind text, payload text,
	run_in interval DEFAULT '0', run_at timestamptz DEFAULT NULL, key text DEFAULT NULL,
	max_attempts integer DEFAULT 5) RETURNS bigint LANGUAGE sql
	SET search_path = \"\$user\", public AS 'SELECT -1::bigint'" \
	-c "UPDATE due_meta SET value = '7' WHERE name = 'schema_version'"
expect_err 6 "run \`due init\` to upgrade" "$DUE" ls
"$DUE" init >/dev/null && ok || bad "init of a store of schema 7"
expect_eq "upgraded: pinned" "{\"search_path=$schema, pg_temp\"}" \
	"$(sql -c "SELECT DISTINCT proconfig FROM pg_proc WHERE proname = 'due_schedule'
		AND pronamespace = '$schema'::regnamespace")"
id=$(sql -c "SELECT due_schedule('again', 'x')")
[[ "$id" =~ ^[1-9][0-9]*$ ]] && ok || bad "upgraded: the old function kept: '$id'"

echo "== due_reschedule in the caller's transaction (issue 38)"
rid=$("$DUE" add later2 --in 1h --payload old)
before=$(field "$rid" due_at)
expect_eq "reschedule rolled back: nothing moved" "RESCHEDULED $before old" \
	"$(sql -c "BEGIN" -c "SELECT due_reschedule($rid, run_in => interval '1 s', payload => 'new')" -c "ROLLBACK") $(field "$rid" due_at) $(field "$rid" payload)"
expect_eq "reschedule committed" RESCHEDULED \
	"$(sql -c "BEGIN" -c "SELECT due_reschedule($rid, run_at => '2100-01-01T00:00:00Z', payload => 'new')" -c "COMMIT")"
expect_eq "moved, new payload" "2100-01-01T00:00:00.000Z new" "$(field "$rid" due_at) $(field "$rid" payload)"
expect_eq "payload NULL keeps it" "RESCHEDULED new" \
	"$(sql -c "SELECT due_reschedule($rid, run_in => interval '5 s')") $(field "$rid" payload)"
out=$(sql -c "SELECT due_reschedule($rid, run_in => interval '1 s', run_at => now())" 2>&1 || true)
has -F "not both" <<<"$out" && ok || bad "reschedule with both: $out"
expect_eq "unknown task" NOT_FOUND "$(sql -c "SELECT due_reschedule(999999, run_in => interval '1 s')")"
"$DUE" cancel "$rid" >/dev/null
expect_eq "finished task" ALREADY_FINISHED "$(sql -c "SELECT due_reschedule($rid, run_in => interval '1 s')")"
echo "== a store of schema 8 gets due_reschedule from due init"
sql -c "DROP FUNCTION due_reschedule(bigint, interval, timestamptz, text)" \
	-c "UPDATE due_meta SET value = '8' WHERE name = 'schema_version'"
expect_err 6 "run \`due init\` to upgrade" "$DUE" ls
"$DUE" init >/dev/null && ok || bad "init of a store of schema 8"
expect_eq "upgraded: due_reschedule there" NOT_FOUND \
	"$(sql -c "SELECT due_reschedule(999999, run_in => interval '1 s')")"

echo "== due_schedule(..., on_key) debounces by key (issue 38)"
# The overload takes all seven arguments.  Each check is one psql
# session: the call, then what it returned and that task's minutes to
# its due time and payload.
deb() { # KEY PAYLOAD RUN_IN ON_KEY [RUN_AT]
	sql -F ' ' <<-EOF
	SELECT due_schedule('deb', '$2', interval '$3', ${5:-NULL}, '$1', 5, '$4') AS id \gset
	SELECT :id, round(extract(epoch FROM due_at - now()) / 60), convert_from(payload, 'UTF8')
	  FROM due_task WHERE id = :id;
	EOF
}
d1=$(deb doc-7 p1 '1 hour' keep | cut -d' ' -f1)
expect_eq "keep: a new task, then the holder untouched" "$d1 60 p1" "$(deb doc-7 p2 '2 hours' keep)"
expect_eq "replace: the holder moved (earlier too)" "$d1 30 p3" "$(deb doc-7 p3 '30 minutes' replace)"
expect_eq "later, earlier: nothing changes" "$d1 30 p3" "$(deb doc-7 p4 '10 minutes' later)"
expect_eq "later, equal: nothing changes" "$d1 30 p3" \
	"$(deb doc-7 p4 '0 s' later "(SELECT due_at FROM due_task WHERE id = $d1)")"
expect_eq "later, later, by name: moved" "$d1 90 p5" "$(sql -F ' ' <<-EOF
	SELECT due_schedule(kind => 'deb', payload => 'p5', run_in => interval '90 minutes',
	  run_at => NULL, key => 'doc-7', max_attempts => 5, on_key => 'later') AS id \gset
	SELECT :id, round(extract(epoch FROM due_at - now()) / 60), convert_from(payload, 'UTF8')
	  FROM due_task WHERE id = :id;
	EOF
)"
expect_eq "rolled back: nothing moved; one task; without on_key: the six-argument one" \
	"$d1 90 p5 1 $d1" "$(sql -F ' ' <<-EOF | paste -sd' '
	BEGIN;
	SELECT due_schedule('deb', 'p6', interval '0', '2100-01-01Z', 'doc-7', 5, 'later') \gset
	ROLLBACK;
	SELECT id, round(extract(epoch FROM due_at - now()) / 60), convert_from(payload, 'UTF8')
	  FROM due_task WHERE id = $d1;
	SELECT count(*) FROM due_task WHERE kind = 'deb';
	SELECT due_schedule('deb', 'p7', key => 'doc-7', run_in => interval '5 hours');
	EOF
)"

echo "== on_key with a running holder: it gives up the key, a new task takes it"
"$DUE" work --poll 60s --no-cron --kinds debrun \
	--exec "while [ ! -f '$T/go' ]; do sleep 0.05; done; echo ran" 2>"$T/work2.err" &
wpid=$!
r1=$(sql -c "SELECT due_schedule('debrun', 'old', key => 'doc-8')")
sql_state() { [ "$(sql -c "SELECT state FROM due_task WHERE id = $1")" = "$2" ]; }
wait_for "the holder running" 30 sql_state "$r1" CLAIMED
sql -F ' ' >"$T/run.out" <<-EOF
	SELECT due_schedule('debrun', 'k', interval '1 hour', NULL, 'doc-8', 5, 'keep');
	SELECT due_schedule('debrun', 'new', interval '1 hour', NULL, 'doc-8', 5, 'later') AS r2 \gset
	SELECT :r2;
	SELECT state, attempt, convert_from(payload, 'UTF8'), coalesce(key, 'NULL') FROM due_task
	  WHERE id IN ($r1, :r2) ORDER BY id;
	EOF
r2=$(sed -n 2p "$T/run.out")
expect_eq "keep: the running task" "$r1" "$(sed -n 1p "$T/run.out")"
[[ "$r2" =~ ^[0-9]+$ ]] && [ "$r2" != "$r1" ] && ok || bad "later on a running holder: '$r2' (running $r1)"
expect_eq "the running task untouched but for its key; the new one holds it" \
	"CLAIMED 1 old NULL|SCHEDULED 0 new doc-8" "$(sed -n 3,4p "$T/run.out" | paste -sd'|')"
touch "$T/go"
wait_for "the running task done" 30 sql_state "$r1" DONE
expect_eq "its end left the key with the new task" "$r2" \
	"$(sql -c "SELECT due_schedule('debrun', 'k', key => 'doc-8')")"
kill "$wpid"
wait "$wpid" || true

echo "== on_key: bad input, an error naming it (SQLSTATE 22023), nothing written"
before=$(tasks)
# one session, each call failing on its own (autocommit, no ON_ERROR_STOP)
sql -v ON_ERROR_STOP=0 -v VERBOSITY=verbose >/dev/null 2>"$T/err" <<-EOF
	SELECT due_schedule('deb', 'x', interval '0', NULL, 'doc-7', 5, 'sometimes');
	SELECT due_schedule('deb', 'x', interval '0', NULL, 'doc-7', 5, 'Later');
	SELECT due_schedule('deb', 'x', interval '0', NULL, 'doc-7', 5, NULL);
	SELECT due_schedule('deb', 'x', interval '0', NULL, NULL, 5, 'replace');
	SELECT due_schedule('deb', 'x', interval '-1 s', NULL, 'doc-7', 5, 'replace');
	EOF
for m in "invalid on_key 'sometimes': must be keep, replace or later" "invalid on_key 'Later'" \
	"invalid on_key NULL" "on_key replace needs a key" "invalid delay (run_in): negative"; do
	has -F "ERROR:  22023: due_schedule: $m" "$T/err" && ok || bad "bad on_key: no 22023 '$m': $(cat "$T/err")"
done
expect_eq "five errors" 5 "$(grep -c '^ERROR:' "$T/err")"
expect_eq "bad on_key calls wrote nothing" "$before $d1 90 p5" "$(tasks) $(deb doc-7 x '0 s' keep)"

echo "== on_key privileges: the docs' extra GRANTs (UPDATE, EXECUTE on the overload)"
extra=$(grep -o '`GRANT [^`]*TO producer`' "$ROOT/docs/INTERFACE.md" | tr -d '`')
expect_eq "three extra GRANT lines in the docs (the third for a held holder)" 3 "$(grep -c GRANT <<<"$extra")"
pgsu -c "SET search_path = \"$qs\"" -c "REVOKE EXECUTE ON FUNCTION due_schedule(text, text, interval,
	timestamptz, text, integer, text) FROM PUBLIC"
as_role() { pgsu -c "SET ROLE $role" "$@"; }
refused_as() { # WHAT SUBSTRING SQL
	if as_role -c "$3" >"$T/out" 2>"$T/err"; then bad "$1: accepted"
	elif grep -qF -- "$2" "$T/err"; then ok
	else bad "$1: the error lacks '$2': $(cat "$T/err")"; fi
}
call7="SELECT \"$qs\".due_schedule('deb', 'x', interval '1 hour', NULL, 'g', 5, 'later')"
g1=$(as_role -c "SELECT \"$qs\".due_schedule('deb', 'x', key => 'g')") && ok ||
	bad "the producer's six-argument call"
refused_as "on_key without EXECUTE on the overload" "permission denied for function due_schedule" "$call7"
grant_doc() { pgsu -c "SET search_path = \"$qs\"" -c "$(grep -F "$1" <<<"$extra" | sed "s/ TO producer/ TO $role;/")"; }
grant_doc EXECUTE
refused_as "on_key with EXECUTE alone" "permission denied for table due_task" "$call7"
grant_doc "UPDATE (due_at"
expect_eq "on_key with the docs' GRANTs: the producer's task moved" "$g1 60" \
	"$(as_role -c "$call7" 2>&1) $(pgsu -c "SELECT round(extract(epoch FROM due_at - now()) / 60) FROM \"$qs\".due_task WHERE id = $g1")"
# a holder held by run after: its move is a statement of its own, which
# needs the third line (and only it)
hp=$(pgsu -c "SELECT \"$qs\".due_schedule('deb', 'p', interval '1 hour')")
hc=$(pgsu -c "SELECT \"$qs\".due_schedule_after('deb', 'h', ARRAY[$hp], run_in => interval '1 hour', key => 'gh')")
callh="SELECT \"$qs\".due_schedule('deb', 'y', interval '2 hours', NULL, 'gh', 5, 'later')"
refused_as "on_key on a held holder without the third GRANT" "permission denied for table due_task" "$callh"
grant_doc after_left
expect_eq "on_key on a held holder with it: moved, still held" "$hc 7200000000 1 y" \
	"$(as_role -c "$callh" 2>&1) $(pgsu -c "SELECT after_delay_us, after_left, convert_from(payload, 'UTF8') FROM \"$qs\".due_task WHERE id = $hc" | tr '|' ' ')"

echo "== due_schedule_after (run after): a chain runs in order, each release wakes the worker"
# --poll 60s: a release left to the poll would miss the 30 s bound
export OUT_CHAIN="$T/chain.out"
"$DUE" work --poll 60s --no-cron --kinds chainrun \
	--exec 'cat >>"$OUT_CHAIN"; echo >>"$OUT_CHAIN"' 2>"$T/work3.err" &
wpid=$!
wait_for "worker listening" 30 grep -q "discovery: timing wheel" "$T/work3.err"
sql -F ' ' >"$T/chain.ids" <<-EOF
	BEGIN;
	SELECT due_schedule('chainrun', 'c1', run_in => interval '1 second') AS c1 \gset
	SELECT due_schedule_after('chainrun', 'c2', ARRAY[:c1]) AS c2 \gset
	SELECT due_schedule_after('chainrun', 'c3', ARRAY[:c2, :c1]) AS c3 \gset
	COMMIT;
	SELECT :c1, :c2, :c3;
	EOF
read -r c1 c2 c3 <"$T/chain.ids"
expect_eq "held until its parents are DONE" "2 2" \
	"$(sql -F ' ' -c "SELECT after_left, after_n FROM due_task WHERE id = $c3")"
wait_for "the chain done by the worker" 30 is_state "$c3" DONE
expect_eq "ran in order" "c1 c2 c3" "$(paste -sd' ' "$OUT_CHAIN")"
expect_err 1 "parent task 999999999 not found" \
	sql -c "SELECT due_schedule_after('chainrun', 'x', ARRAY[999999999])"
kill "$wpid"
wait "$wpid" || true

echo "== a store of schema 9 gets due_schedule(..., on_key) from due init"
sql -c "DROP FUNCTION due_schedule(text, text, interval, timestamptz, text, integer, text)" \
	-c "UPDATE due_meta SET value = '9' WHERE name = 'schema_version'"
expect_err 6 "run \`due init\` to upgrade" "$DUE" ls
"$DUE" init >/dev/null && ok || bad "init of a store of schema 9"
expect_eq "upgraded: schema 11" 11 "$(sql -c "SELECT value FROM due_meta WHERE name = 'schema_version'")"
expect_eq "upgraded: on_key there" "$d1 90 p5" "$(deb doc-7 x '0 s' keep)"
finish
