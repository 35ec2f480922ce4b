#!/usr/bin/env bash
# test_sql_submit_grants.sh - what docs/INTERFACE.md tells a producer of
# due_schedule() (issue 36, point 11), checked on real servers with their
# own clients (psql, mariadb):
#   - a role / user given exactly the GRANT lines of the docs (read from
#     docs/INTERFACE.md, so the docs cannot drift from what works) submits,
#     keyed too; one with INSERT alone is refused;
#   - same-key transactions: PostgreSQL READ COMMITTED returns the first
#     one's task, REPEATABLE READ and SERIALIZABLE fail with 40001 and the
#     retry returns it; MariaDB at REPEATABLE READ (its default) returns
#     it, and a rollback of the first while two wait ends one of them with
#     1213 (40001), the other adding the task.
# PostgreSQL: DUE_TEST_PG_URL, a schema and two roles of its own.  MariaDB:
# a server of its own that checks privileges (the shared test server runs
# with skip-grant-tables), started with scripts/mariadb-test-server when
# DUE_TEST_MYSQL_URL says this run has MariaDB.  Under CI=true a missing
# server is a failure, never a skip.  Sessions are put in order by the
# servers' own views (pg_stat_activity, information_schema.innodb_trx),
# never by sleeping.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DOC="$ROOT/docs/INTERFACE.md"
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true
	for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
	rm -rf "$T"' EXIT

# open_a CMD...: session A, a client reading its statements from a FIFO
# that this script writes through fd 3 (so A holds its transaction open
# while other sessions run); close_a SQL: send SQL, end A's input, wait
open_a() {
	rm -f "$T/a"
	mkfifo "$T/a"
	"$@" <"$T/a" >"$T/a.out" 2>&1 &
	apid=$!
	exec 3>"$T/a"
}
close_a() {
	echo "$1" >&3
	exec 3>&-
	wait "$apid" || true
}
# refused WHAT SUBSTRING CMD...: CMD fails and its stderr says SUBSTRING
refused() {
	local what=$1 sub=$2
	shift 2
	if "$@" >"$T/out" 2>"$T/err"; then
		bad "$what: accepted"
	elif grep -qF -- "$sub" "$T/err"; then
		ok
	else
		bad "$what: the error lacks '$sub': $(cat "$T/err")"
	fi
}

# ---- PostgreSQL
if need DUE_TEST_PG_URL postgres; then
	schema="due_sqlg_$$" prod="due_sqlg_p_$$" ins="due_sqlg_i_$$"
	pg() { psql -qXAt -v ON_ERROR_STOP=1 "$DUE_TEST_PG_URL" "$@"; }
	pg -c "CREATE SCHEMA $schema" -c "CREATE ROLE $prod" -c "CREATE ROLE $ins"
	CLEANUP+=("pg -c 'DROP SCHEMA $schema CASCADE'" "pg -c 'DROP OWNED BY $prod, $ins'"
		"pg -c 'DROP ROLE $prod, $ins'")
	sep='?'; case "$DUE_TEST_PG_URL" in *\?*) sep='&';; esac
	export DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
	"$DUE" init >/dev/null && ok || bad "postgres: init"

	echo "== postgres: the docs' GRANT lines are enough; INSERT alone is not"
	grants=$(sed -n 's/^ *\(GRANT .* TO producer;\)$/\1/p' "$DOC")
	expect_eq "postgres: GRANT lines in the docs" 2 "$(grep -c GRANT <<<"$grants")"
	pg -c "SET search_path = $schema" \
		-c "$(sed "s/ SCHEMA public / SCHEMA $schema /; s/ TO producer;/ TO $prod;/" <<<"$grants")" \
		-c "GRANT USAGE ON SCHEMA $schema TO $ins" -c "GRANT INSERT ON due_task TO $ins"
	as() { local r=$1; shift; pg -c "SET ROLE $r" -c "SET search_path = $schema" "$@"; }
	got=$(as "$prod" -c "SELECT due_schedule('g', 'x')" \
		-c "SELECT due_schedule('g', 'a', key => 'k')" \
		-c "SELECT due_schedule('g', 'b', key => 'k')" 2>&1 | paste -sd' ') || true
	[[ "$got" =~ ^[0-9]+\ ([0-9]+)\ ([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
		ok || bad "postgres: the producer's submits (new, keyed, same key again): '$got'"
	refused "postgres: INSERT alone" "permission denied for table due_task" \
		as "$ins" -c "SELECT due_schedule('g', 'x')"

	echo "== postgres: same key in two transactions, at each isolation level"
	pg_app() { # APPNAME COLUMN: that column of the session's pg_stat_activity row
		pg -c "SELECT $2 FROM pg_stat_activity WHERE application_name = '$1'"
	}
	a_holds() { [ "$(pg_app "$appa" state)" = "idle in transaction" ]; }
	b_waits() { [ "$(pg_app "$appb" wait_event_type)" = Lock ]; }
	# race ISOLATION KEY: A adds KEY and holds its transaction; B, at
	# ISOLATION, calls with KEY and waits for A; A commits.  A's id in
	# $T/a.out, B's answer (or error, with its SQLSTATE) in $T/b.out.
	race() {
		appa="due_sqlg_a_$$" appb="due_sqlg_b_$$"
		open_a env PGAPPNAME="$appa" psql -qXAt -v ON_ERROR_STOP=1 "$DUE_DB"
		echo "BEGIN; SELECT due_schedule('race', 'a', key => '$2');" >&3
		wait_for "postgres $1: A holds its task uncommitted" 30 a_holds
		PGAPPNAME="$appb" psql -qXAt -v VERBOSITY=verbose "$DUE_DB" -c "BEGIN ISOLATION LEVEL $1" \
			-c "SELECT due_schedule('race', 'b', key => '$2')" -c "COMMIT" >"$T/b.out" 2>&1 &
		local bpid=$!
		wait_for "postgres $1: B waits for A" 30 b_waits
		close_a "COMMIT;"
		wait "$bpid" || true
	}
	race "READ COMMITTED" rc
	expect_eq "postgres READ COMMITTED: B gets A's task" "$(cat "$T/a.out")" "$(cat "$T/b.out")"
	for iso in "REPEATABLE READ" SERIALIZABLE; do
		race "$iso" "${iso// /_}"
		if grep -q "^ERROR:  40001: could not serialize access" "$T/b.out"; then ok; else
			bad "postgres $iso: B did not fail with 40001: $(cat "$T/b.out")"
		fi
		expect_eq "postgres $iso: the retry gets A's task" "$(cat "$T/a.out")" \
			"$(psql -qXAt -v ON_ERROR_STOP=1 "$DUE_DB" -c "BEGIN ISOLATION LEVEL $iso" \
				-c "SELECT due_schedule('race', 'c', key => '${iso// /_}')" -c "COMMIT")"
	done
	expect_eq "postgres: one task per key" "1 1 1" \
		"$(pg -c "SELECT count(*) FROM $schema.due_task WHERE kind = 'race' GROUP BY key ORDER BY key" | paste -sd' ')"
fi

# ---- MariaDB, on a server of its own that checks privileges
if need DUE_TEST_MYSQL_URL mariadb; then
	mydir=$(mktemp -d /tmp/due-sqlg-XXXXXX)
	CLEANUP+=("'$ROOT/scripts/mariadb-test-server' stop '$mydir'" "rm -rf '$mydir'")
	if ! url=$(MARIADB_TEST_GRANTS=1 "$ROOT/scripts/mariadb-test-server" start "$mydir" 2>"$T/srv.err"); then
		bad "mariadb: cannot start a server that checks privileges: $(cat "$T/srv.err")"
		finish
		exit 1
	fi
	mysql_url_parts "$url"
	# as USER SQL: run SQL in database due as USER (password pw; root: none)
	as() {
		local pw=pw
		[ "$1" = root ] && pw=
		MYSQL_PWD=$pw mariadb --no-defaults --default-character-set=utf8mb4 -h "$myhost" \
			-P "$myport" -u "$1" -N -B due -e "$2"
	}
	export DUE_DB="$url"
	"$DUE" init >/dev/null && ok || bad "mariadb: init"

	echo "== mariadb: the docs' GRANT lines are enough; INSERT alone is not"
	# due_schedule's lines, then due_schedule_after's (they name "after")
	all=$(sed -n "s/^ *\(GRANT .* TO 'producer'@'%';\)$/\1/p" "$DOC")
	grants=$(grep -v after <<<"$all") after_grants=$(grep after <<<"$all")
	expect_eq "mariadb: GRANT lines in the docs" 3 "$(grep -c GRANT <<<"$grants")"
	expect_eq "mariadb: due_schedule_after's GRANT lines in the docs" 3 \
		"$(grep -c GRANT <<<"$after_grants")"
	as root "CREATE USER 'producer'@'%' IDENTIFIED BY 'pw';
		CREATE USER 'inserter'@'%' IDENTIFIED BY 'pw';
		${grants//app./due.}
		GRANT EXECUTE ON PROCEDURE due.due_schedule TO 'inserter'@'%';
		GRANT INSERT ON due.due_task TO 'inserter'@'%'"
	call() { echo "CALL due_schedule($1, @id); SELECT @id;"; }
	got=$(as producer "$(call "'g', 'x', NULL, NULL, NULL, NULL") $(call "'g', 'a', NULL, NULL, 'k', NULL")
		$(call "'g', 'b', NULL, NULL, 'k', NULL")" 2>&1 | paste -sd' ') || true
	[[ "$got" =~ ^[0-9]+\ ([0-9]+)\ ([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ] &&
		ok || bad "mariadb: the producer's submits (new, keyed, same key again): '$got'"
	refused "mariadb: INSERT alone" "command denied to user 'inserter'" \
		as inserter "$(call "'g', 'x', NULL, NULL, NULL, NULL")"

	echo "== mariadb: due_schedule_after with the docs' lines; without UPDATE (after_children) refused"
	# the procedure writes each parent's after_children (Galera: a parent's
	# finish through another node conflicts with the child's submit)
	as root "${after_grants//app./due.}
		CREATE USER 'noupd'@'%' IDENTIFIED BY 'pw';
		$(sed "s/'producer'/'noupd'/; s/app\./due./" <<<"$grants")
		$(sed "s/'producer'/'noupd'/; s/app\./due./; s/, UPDATE (after_children)//" <<<"$after_grants")"
	parent=$(as producer "$(call "'g', 'p', 3600000000, NULL, NULL, NULL")") && ok || bad "mariadb: parent"
	acall() { echo "START TRANSACTION; CALL due_schedule_after('g', '$1', NULL, NULL, NULL, NULL, '[$parent]', NULL, @id); COMMIT; SELECT @id;"; }
	child=$(as producer "$(acall c)" 2>&1) || true
	[[ "$child" =~ ^[0-9]+$ ]] && ok || bad "mariadb: the producer's due_schedule_after: '$child'"
	expect_eq "mariadb: the child is held on its parent, which was written" "1 $parent 1" \
		"$(as root "SELECT c.after_left, e.parent, p.after_children FROM due_task c JOIN due_after e ON e.child = c.id JOIN due_task p ON p.id = e.parent WHERE c.id = '$child'" | tr '\t' ' ')"
	refused "mariadb: due_schedule_after without UPDATE (after_children)" "command denied to user 'noupd'" \
		as noupd "$(acall d)"

	echo "== mariadb: same key in two transactions, REPEATABLE READ"
	# innodb_trx is a cache that InnoDB fills again only when it has not
	# been read for 100 ms (trx0i_s.cc, CACHE_MIN_IDLE_TIME_US): read
	# every 20 ms by wait_for, it kept what it held before A wrote, for
	# ever (the "A holds its task" timeouts). So each read waits first.
	trx() {
		sleep 0.15
		[ "$(as root "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE $1")" = "$2" ]
	}
	# N producer inserts held for over half a second: waiting for A's key.
	# (Not innodb_trx's LOCK WAIT: MariaDB 10.11 lists a transaction there
	# only once it has written, and a waiting insert may not have: seen
	# missing for 30 s while its INSERT waited in the process list.)
	waiting() {
		[ "$(as root "SELECT COUNT(*) FROM information_schema.processlist WHERE user = 'producer'
			AND command = 'Query' AND info LIKE 'INSERT INTO due_task%' AND time_ms > 500")" = "$1" ]
	}
	# B (and C) as the producer: `START TRANSACTION; CALL ...; COMMIT` on KEY
	side() {
		as producer "START TRANSACTION; $(call "'race', '$1', NULL, NULL, '$2', NULL") COMMIT" \
			>"$T/$1.out" 2>&1
	}
	open_a env MYSQL_PWD=pw mariadb --no-defaults -h "$myhost" -P "$myport" -u producer -N -B due
	echo "START TRANSACTION; $(call "'race', 'a', NULL, NULL, 'rr', NULL")" >&3
	wait_for "mariadb: A holds its task uncommitted" 30 trx "trx_rows_modified > 0" 1
	side b rr &
	bpid=$!
	wait_for "mariadb: B waits for A" 30 waiting 1
	close_a "COMMIT;"
	wait "$bpid" || true
	expect_eq "mariadb REPEATABLE READ: B gets A's task" "$(cat "$T/a.out")" "$(cat "$T/b.out")"

	echo "== mariadb: the first rolls back while two wait: one deadlock (40001)"
	open_a env MYSQL_PWD=pw mariadb --no-defaults -h "$myhost" -P "$myport" -u producer -N -B due
	echo "START TRANSACTION; $(call "'race', 'a', NULL, NULL, 'rb', NULL")" >&3
	wait_for "mariadb: A holds its task uncommitted" 30 trx "trx_rows_modified > 0" 1
	side b rb &
	bpid=$!
	side c rb &
	cpid=$!
	wait_for "mariadb: B and C wait for A" 30 waiting 2
	close_a "ROLLBACK;"
	wait "$bpid" || true
	wait "$cpid" || true
	expect_eq "mariadb: one of B and C ended by a deadlock" 1 \
		"$(cat "$T/b.out" "$T/c.out" | grep -c "ERROR 1213 (40001)")"
	expect_eq "mariadb: the other added the key's one task" \
		"$(cat "$T/b.out" "$T/c.out" | grep -x '[0-9][0-9]*')" \
		"$(as root "SELECT id FROM due_task WHERE \`key\` = 'rb'")"
fi
finish
