#!/usr/bin/env bash
# test_redis.sh - the Redis store with real processes (issue 13): `due
# verify` passes every case that does not speak SQL (those say why they
# are skipped); three `due work` processes drain 300 tasks with each
# handler run exactly once; kill -9 of a worker is reclaimed at attempt 2;
# a SIGSTOPped worker's late commit is refused; every client connection
# killed (CLIENT KILL) while handlers run and commit loses nothing and runs
# no handler twice; kill -9 of redis-server mid-drain and a restart from
# its append-only file lose no acknowledged task and commit none twice;
# and a server without appendonly is refused.
#
# Runs when DUE_TEST_REDIS_URL says Redis is there (scripts/test starts a
# server) and the build has the backend, on a private server of its own
# (it kills it).  Under CI=true a missing server or backend is a failure.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/store_proc.sh"
sp_require redis DUE_TEST_REDIS_URL
sp_start redis-test-server
port=${SP_URL##*:}
port=${port%%/*}
rcli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
export DUE_DB="$SP_URL?prefix=cli"
"$DUE" init >"$T/init.out" 2>&1 && ok || bad "init on redis: $(cat "$T/init.out")"

# 1. due verify: every case but the SQL ones, which say why they skip
sp_verify "$SP_URL" negative_naive_select_then_update negative_unfenced_late_commit \
	boundary_partial_due_index row_locks_honoured stalled_renewal_lease_clock
expect_eq "verify's scratch prefixes are gone" 0 \
	"$(rcli "$port" --scan --pattern '*due_verify_*' | wc -l)"
expect_eq "the SQL cases and the stalled renewal skip on Redis" 5 "$(grep -c "^CASE .* SKIP reason=redis_" "$T/verify.out" || true)"

# 2.-4. three workers; kill -9 of a worker; SIGSTOP past the lease
sp_three_workers
sp_kill9_worker
sp_sigstop

# 5. CLIENT KILL of every client (commands and subscriptions) while four
#    handlers run, and again while they commit: every task DONE once,
#    each handler run once
drop_clients() {
	echo $(($(rcli "$port" client kill type normal) + $(rcli "$port" client kill type pubsub)))
}
sp_dropped_connections drop_clients

# 6. kill -9 of redis-server mid-drain, restarted from its AOF
sp_server_crash "$SP_DIR/redis.pid"

# 7. a server without an append-only file is refused by `due init`, with
#    the setting named, and nothing is written; appendfsync everysec is
#    accepted with a warning that names it (the last second can be lost)
plain=$T/plain
mkdir -p "$plain"
pport=$(python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
redis-server --bind 127.0.0.1 --port "$pport" --dir "$plain" --appendonly no --save '' \
	--daemonize yes --pidfile "$plain/redis.pid" --logfile "$plain/redis.log"
wait_for "plain redis-server up" 30 bash -c "[ \"\$(redis-cli -h 127.0.0.1 -p $pport ping)\" = PONG ]"
trap 'kill $(jobs -p) 2>/dev/null || true; kill "$(cat "$plain/redis.pid" 2>/dev/null)" 2>/dev/null; "$SP_SERVER" stop "$SP_DIR" >/dev/null 2>&1; rm -rf "$T" "$SP_DIR"' EXIT
rc=0
"$DUE" init --db "redis://127.0.0.1:$pport/0?prefix=noaof" >"$T/noaof.out" 2>"$T/noaof.err" || rc=$?
[ "$rc" -ne 0 ] && ok || bad "init on a server without appendonly succeeded"
grep -q "appendonly" "$T/noaof.err" && ok || bad "the refusal does not name appendonly: $(cat "$T/noaof.err")"
[ "$(wc -l <"$T/noaof.err")" -le 2 ] && ok || bad "the refusal is not one line: $(cat "$T/noaof.err")"
expect_eq "nothing written by the refused init" 0 "$(rcli "$pport" dbsize)"
echo "no AOF: exit $rc: $(cat "$T/noaof.err")"
rcli "$pport" config set appendonly yes >/dev/null
rcli "$pport" config set appendfsync everysec >/dev/null
wait_for "AOF rewrite done" 30 bash -c "redis-cli -h 127.0.0.1 -p $pport info persistence | grep -q '^aof_rewrite_in_progress:0'"
"$DUE" init --db "redis://127.0.0.1:$pport/0?prefix=everysec" >"$T/es.out" 2>"$T/es.err" && ok ||
	bad "init with appendfsync everysec: $(cat "$T/es.err")"
grep -q "everysec" "$T/es.err" && ok || bad "no warning about appendfsync everysec: $(cat "$T/es.err")"
echo "everysec: init says: $(cat "$T/es.out" "$T/es.err")"
finish
