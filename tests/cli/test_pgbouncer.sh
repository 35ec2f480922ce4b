#!/usr/bin/env bash
# test_pgbouncer.sh - the PostgreSQL store behind a real PgBouncer in
# transaction pooling mode (?pooler=transaction): `due init` through the
# pooler; three `due work` processes through it run every task exactly
# once and log no store error, both with ?listen= (wake-ups on a direct
# connection of their own) and without it (the once-a-second read); and a
# submit or a schedule put from another process wakes an idle worker
# either way.
#
# The pooler is started by this test (scripts/pgbouncer-test-server) in
# front of DUE_TEST_PG_URL's server and stopped on exit; the test works in
# a database of its own there (PgBouncer refuses the startup `options`
# that other tests use to pick a schema), dropped on exit.  Under CI=true
# a missing server or pgbouncer is a failure, never a silent skip.
#
# `due verify` does not run here: its scratch stores are schemas chosen
# with the startup parameter `options=-csearch_path=...`, which PgBouncer
# refuses ("unsupported startup parameter: options"), so no case can make
# its scratch store through the pooler (docs/internals/discovery.md).
#
# No timing assertions.  An idle worker's safety poll is an hour, so a
# task submitted while it idles is run only if a wake-up reached it; the
# deadline of that wait is a hang guard, not a measurement.
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
skip() {
	if [ "${CI:-}" = true ]; then bad "CI=true but $1"; finish; exit 1; fi
	echo "NOTE: $1: PgBouncer tests not run"
	finish
	exit 0
}
[ -n "${DUE_TEST_PG_URL:-}" ] || skip "DUE_TEST_PG_URL is unset"
[ -x "${PGBOUNCER:-/usr/sbin/pgbouncer}" ] || command -v pgbouncer >/dev/null ||
	skip "pgbouncer is not installed (Debian package pgbouncer)"
command -v psql >/dev/null || skip "psql is not installed"

db="due_pgb_$$"
base=${DUE_TEST_PG_URL%%\?*}
DIRECT="${base%/*}/$db"
bdir=$(mktemp -d /tmp/due-pgb-XXXXXX)
cleanup() {
	kill $(jobs -p) 2>/dev/null || true
	wait 2>/dev/null || true
	"$ROOT/scripts/pgbouncer-test-server" stop "$bdir" >/dev/null 2>&1 || true
	psql -qX "$DUE_TEST_PG_URL" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
	rm -rf "$T" "$bdir"
}
trap cleanup EXIT
psql -qX "$DUE_TEST_PG_URL" -c "CREATE DATABASE $db" >/dev/null ||
	{ bad "cannot create database $db"; finish; exit 1; }
if ! pooled=$("$ROOT/scripts/pgbouncer-test-server" start "$bdir" "$base"); then
	bad "cannot start pgbouncer"
	finish
	exit 1
fi
POOLED="${pooled%/*}/$db?pooler=transaction"
ENC=$(printf '%s' "$DIRECT" | od -An -tx1 -v | tr -d ' \n' | sed 's/../%&/g')
export OUT="$T/effects"
mkdir -p "$OUT"
direct() { psql -qXAt "$DIRECT" -c "$1"; }

# 1. the URL's own options: a clear error naming each
expect_err 2 "invalid pooler 'sometimes'" "$DUE" stats --db "${POOLED%%\?*}?pooler=sometimes"
expect_err 2 "invalid listen URL" "$DUE" stats --db "$POOLED&listen=mysql%3A%2F%2Fx"
expect_err 2 "invalid listen URL" "$DUE" stats --db "$POOLED&listen=postgres%3A%2F%2Fh%2Fd%3Fbogus%3D1"
expect_err 2 "option 'pooler' given twice" "$DUE" stats --db "$POOLED&pooler=transaction"

# 2. init through the pooler (the migration's transactions and its
#    transaction-scoped advisory lock pass a transaction pooler whole)
"$DUE" init --db "$POOLED" >/dev/null && ok || bad "init through pgbouncer"

# 3. three workers through the pooler drain 300 tasks, each run once; an
#    idle worker is woken by a submit from another process
# drain KIND URL: the whole round for one way of waking
drain() {
	local kind=$1 url=$2 pids=() n
	for i in $(seq 0 299); do
		printf '{"kind":"%s","in":"%dms"}\n' "$kind" $((i * 2000 / 300))
	done >"$T/$kind.jsonl"
	"$DUE" add --db "$POOLED" --batch "$T/$kind.jsonl" >/dev/null || bad "$kind: submit"
	for w in 1 2 3; do
		"$DUE" work --db "$url" --kinds "$kind,$kind-wake,$kind-cron" --poll 1h \
			--concurrency 4 --owner "$kind-w$w" \
			--exec 'echo "$DUE_TASK_ID" >> "$OUT/$DUE_KIND"' \
			2>"$T/$kind-w$w.log" &
		pids+=($!)
	done
	wait_for "$kind: 300 tasks done" 120 bash -c \
		"[ \"\$(psql -qXAt '$DIRECT' -c \"SELECT count(*) FROM due_task WHERE kind='$kind' AND state='DONE'\")\" = 300 ]"
	# the workers idle now (their safety poll is an hour away)
	"$DUE" add --db "$POOLED" "$kind-wake" >/dev/null || bad "$kind: wake submit"
	wait_for "$kind: a submit from another process woke a worker" 60 \
		test -s "$OUT/$kind-wake"
	# a schedule put by another process is heard too: the workers'
	# scheduler passes are 5 minutes apart while they hear notes, so its
	# every-second slots run within the guard only if the put woke them
	# (without listen=: due_schedule is in the once-a-second read).  The
	# 6 s first let the pass that the wake submit's note brought (at most
	# 5 s after the last) go by: only a note of the put itself can bring
	# the next one forward
	sleep 6
	"$DUE" cron add "$kind-every" '* * * * * *' "$kind-cron" --db "$POOLED" >/dev/null ||
		bad "$kind: cron add"
	wait_for "$kind: a schedule put by another process was heard" 60 \
		test -s "$OUT/$kind-cron"
	"$DUE" cron rm "$kind-every" --db "$POOLED" >/dev/null || bad "$kind: cron rm"
	if [ "$kind" = listened ]; then
		# each worker LISTENs on a direct connection of its own (the
		# pooler's server connections never run LISTEN)
		n=$(direct "SELECT count(*) FROM pg_stat_activity WHERE datname = '$db' AND query IN ('LISTEN due_task_new', 'NOTIFY due_task_new')")
		[ "$n" -ge 3 ] && ok || bad "$kind: $n direct listening connections, expected 3"
	fi
	for p in "${pids[@]}"; do kill -TERM "$p"; done
	for p in "${pids[@]}"; do wait "$p" || bad "$kind: worker $p exit"; done
	expect_eq "$kind: 300 effects" 300 "$(wc -l <"$OUT/$kind")"
	expect_eq "$kind: no handler ran twice" 300 "$(sort -u "$OUT/$kind" | wc -l)"
	expect_eq "$kind: one attempt each" 301 "$(direct "SELECT count(*) FROM due_attempt a JOIN due_task t ON t.id = a.task_id WHERE t.kind IN ('$kind', '$kind-wake')")"
	expect_eq "$kind: the wake task ran once" 1 "$(wc -l <"$OUT/$kind-wake")"
	if grep -i "error\|does not exist\|unavailable" "$T/$kind"-w*.log; then
		bad "$kind: store errors in the workers' logs"
	else
		ok
	fi
	grep -q "stopped: claimed" "$T/$kind-w1.log" && ok || bad "$kind: no worker log"
}
drain listened "$POOLED&listen=$ENC"
drain polled "$POOLED"

# 4. nothing else went wrong in the pooler: no client was closed for a
#    protocol error
if grep -i "unsupported\|prepared statement\|ERROR" "$bdir/pgbouncer.log"; then
	bad "errors in pgbouncer's log"
else
	ok
fi
finish
