#!/usr/bin/env bash
# test_mysql.sh - the MySQL/MariaDB store with real processes (issue 14):
# `due verify` passes every case that applies (a skipped case says why);
# three `due work` processes drain 300 tasks with each handler run
# exactly once; kill -9 of a worker is reclaimed at attempt 2; a
# SIGSTOPped worker's late commit is refused; connections killed
# (KILL CONNECTION) while handlers run lose nothing; and kill -9 of
# mariadbd mid-drain and a restart lose no acknowledged task and commit
# none twice.
#
# Runs when DUE_TEST_MYSQL_URL says MariaDB is there (scripts/test starts
# a server) and the build has the backend, on a private server of its own
# (it kills it).  Under CI=true a missing server or backend is a failure.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_proc.sh"
sp_require mysql DUE_TEST_MYSQL_URL
sp_start mariadb-test-server
port=${SP_URL##*:}
port=${port%%/*}
sql() { mariadb -h 127.0.0.1 -P "$port" -u root -N -B -e "$1" due; }
export DUE_DB=$SP_URL
"$DUE" init >"$T/init.out" 2>&1 && ok || bad "init on mysql: $(cat "$T/init.out")"

# 1. due verify: every case, the raw-SQL controls and the index check too
sp_verify "$SP_URL"
expect_eq "verify's scratch databases are gone" "" "$(sql "SHOW DATABASES LIKE 'due\\_verify\\_%'")"

# 2.-4. three workers; kill -9 of a worker; SIGSTOP past the lease
sp_three_workers
sp_kill9_worker
sp_sigstop

# 5. KILL CONNECTION of every due connection while four handlers run, and
#    again while they commit: every task DONE once, each handler run once
kill_due() {
	local ids id n=0
	ids=$(sql "SELECT id FROM information_schema.processlist WHERE db = 'due' AND id <> CONNECTION_ID() AND command <> 'Daemon'")
	for id in $ids; do sql "KILL CONNECTION $id" 2>/dev/null && n=$((n + 1)); done
	echo "$n"
}
sp_dropped_connections kill_due

# 6. kill -9 of mariadbd mid-drain, then a restart (InnoDB recovery)
sp_server_crash "$SP_DIR/mysqld.pid"
finish
