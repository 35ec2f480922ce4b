#!/usr/bin/env bash
# test_bench.sh - a quick smoke of `due bench`'s scale flags (issue 15):
# bad values of --pending, --rate, --duration and --retain are usage
# errors (exit 2) naming the option; `--workload drain --pending N` runs
# every due task once among N pending ones and reports the fill; `--workload
# soak` prints one JSON object with the keys scripts read, numbers that
# agree with each other (submitted = run + backlog, no early claim,
# percentiles in order); `--workload after` runs a chain and a fan-in,
# each task once and none early; on SQLite the store work per task.  SQLite, and PostgreSQL when DUE_TEST_PG_URL names
# a server.  No timing is asserted: a benchmark has no pass/fail.
. "$(dirname "$0")/lib.sh"

# bad input
expect_err 2 "invalid --pending '-1'" "$DUE" bench --workload drain --pending -1
expect_err 2 "invalid --pending 'x'" "$DUE" bench --workload drain --pending x
expect_err 2 "--pending applies to --workload drain" "$DUE" bench --workload enqueue --pending 10
expect_err 2 "--pending measures the C no-op" "$DUE" bench --workload drain --pending 10 --exec true
expect_err 2 "invalid --rate '0'" "$DUE" bench --workload soak --rate 0
expect_err 2 "--duration must be from 1s to 1d" "$DUE" bench --workload soak --duration 500ms
expect_err 2 "--duration:" "$DUE" bench --workload soak --duration soon
expect_err 2 "--retain:" "$DUE" bench --workload soak --retain forever
expect_err 2 "apply to --workload soak" "$DUE" bench --workload drain --rate 10
expect_err 2 "unknown workload" "$DUE" bench --workload soaky
expect_err 2 "--pg-autovacuum: 'x': default or due" "$DUE" bench --workload soak --pg-autovacuum x
expect_err 2 "--pg-autovacuum applies to a postgres:// store" "$DUE" bench --workload soak --pg-autovacuum default --db "sqlite:$T/x.db"
expect_err 2 "--warmup applies to --workload idle" "$DUE" bench --workload drain --warmup 6s
expect_err 2 "--warmup:" "$DUE" bench --workload idle --warmup -1s
expect_err 2 "--idle and --warmup must be at most 24h" "$DUE" bench --workload idle --warmup 25h
expect_err 2 "--idle and --warmup must be at most 24h" "$DUE" bench --workload idle --idle 30d

# --help names the new options
help=$("$DUE" bench --help)
for opt in --pending --rate --duration --retain soak --pg-autovacuum --no-wheel --inline \
	cycle depth memory --warmup; do
	if grep -q -- "$opt" <<<"$help"; then ok; else bad "--help lacks $opt"; fi
done

# --help's synopsis (up to the blank line) names every option (issue 37)
syn=$(sed '/^$/q' <<<"$help")
for opt in --pg-autovacuum --no-wheel --inline --pipe --keep; do
	grep -q -- "$opt" <<<"$syn" && ok || bad "--help synopsis lacks $opt"
done
# issue 37: bench speaks as itself, and --keep names the store it kept
"$DUE" bench --workload enqueue --n 10 --db "sqlite:/proc/nope/x.db" >/dev/null 2>"$T/name.err" &&
	bad "bench with no room for its scratch store: exit 0"
has "^due bench: cannot create /proc/nope/x.db.scratch-" "$T/name.err" && ! has "due verify" "$T/name.err" &&
	ok || bad "bench's errors: $(cat "$T/name.err")"
"$DUE" bench --workload enqueue --n 10 --keep --db "sqlite:$T/keep.db" >/dev/null 2>"$T/keep.err" || bad "bench --keep"
ku=$(sed -n 's/^due bench: kept scratch store due_verify_[0-9]*_1: //p' "$T/keep.err")
[ -n "$ku" ] && "$DUE" ls --db "$ku" >/dev/null && ok || bad "bench --keep: no usable URL: $(cat "$T/keep.err")"
rm -rf "$T"/keep.db.scratch-*
# SIGINT (Ctrl-C) and SIGTERM mid-workload: no figures, the scratch store
# dropped, exit 128 + signal, promptly.  The same code on every store
# (verify_util.c): SQLite, and PostgreSQL for a server's scratch store.
intr_bench() { # SIG URL SCRATCH-GONE-CHECK...
	local sig=$1 url=$2 bp rc t0 ms
	shift 2
	"$DUE" bench --workload drain --n 100000 --db "$url" >"$T/bi.out" 2>"$T/bi.err" &
	bp=$!
	wait_for "bench's drain under way" 60 grep -q "drain:" "$T/bi.err"
	t0=$(date +%s%N)
	rc=0; kill "-$sig" "$bp"; wait "$bp" || rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	expect_eq "bench $sig: exit" "$((128 + $(kill -l "$sig")))" "$rc"
	[ "$ms" -lt 5000 ] && ok || bad "bench $sig: $ms ms to stop"
	expect_eq "bench $sig: no figures" "" "$(cat "$T/bi.out")"
	has -x "due bench: interrupted by SIG$sig during drain; scratch stores dropped" "$T/bi.err" &&
		ok || bad "bench $sig: $(tail -2 "$T/bi.err")"
	"$@" "$bp" && ok || bad "bench $sig: scratch store left"
}
no_sqlite_scratch() { ! ls -d "$T"/bi.db.scratch-* >/dev/null 2>&1; }
intr_bench INT "sqlite:$T/bi.db" no_sqlite_scratch
if need DUE_TEST_PG_URL postgres; then
	no_pg_schema() { [ "$(psql -qXAt "$DUE_TEST_PG_URL" -c "SELECT count(*) FROM pg_namespace WHERE nspname = 'due_verify_${1}_1'")" = 0 ]; }
	intr_bench TERM "$DUE_TEST_PG_URL" no_pg_schema
fi

# check_json FILE PYTHON: run the checks (a python snippet over `j`, the
# one JSON object of FILE) and report what failed
check_json() {
	local out
	if out=$(python3 - "$1" "$2" <<'EOF'
import json, sys
lines = [l for l in open(sys.argv[1]) if l.strip()]
errs = []
if len(lines) != 1:
    print("expected one JSON line, got %d" % len(lines)); sys.exit(1)
j = json.loads(lines[0])
def need(cond, what):
    if not cond:
        errs.append(what)
def num(k):
    return isinstance(j.get(k), (int, float)) and not isinstance(j.get(k), bool)
def int_or_null(k):
    return k in j and (j[k] is None or (isinstance(j[k], int) and j[k] > 0))
exec(sys.argv[2])
if errs:
    print("; ".join(errs) + " in " + lines[0].strip()); sys.exit(1)
EOF
	); then ok; else bad "$out"; fi
}

run_store() { # NAME URL
	local st=$1 url=$2
	echo "--- $st"
	"$DUE" bench --workload drain --n 300 --pending 3000 --json --db "$url" >"$T/drain.json"
	check_json "$T/drain.json" '
need(j.get("workload") == "drain" and j.get("pending") == 3000, "pending 3000")
need(j.get("n") == 300 and j.get("missing") == 0 and j.get("duplicates") == 0,
     "every task once")
need(num("tasks_per_s") and j["tasks_per_s"] > 0, "tasks_per_s > 0")
need(num("pending_fill_s") and j["pending_fill_s"] > 0, "pending_fill_s > 0")
need(num("pending_per_s") and j["pending_per_s"] > 0, "pending_per_s > 0")
need(int_or_null("bytes_before_pending") and int_or_null("bytes_after_pending"),
     "bytes before/after: a positive integer or null")
if j.get("bytes_after_pending") and j.get("bytes_before_pending"):
    need(j["bytes_after_pending"] > j["bytes_before_pending"], "3000 tasks take room")
    need(num("bytes_per_pending_task"), "bytes_per_pending_task")
'
	# without --pending the drain says pending 0
	"$DUE" bench --workload drain --n 100 --json --db "$url" >"$T/drain0.json"
	check_json "$T/drain0.json" 'need(j.get("pending") == 0 and j.get("missing") == 0, "pending 0")'

	"$DUE" bench --workload soak --rate 200 --duration 3s --retain 1s --json \
		--db "$url" >"$T/soak.json" 2>"$T/soak.err"
	check_json "$T/soak.json" '
for k in ("tasks_per_s_last_minute", "p99_ms_first_minute", "p99_ms_last_minute",
          "bytes_at_60s", "bytes_at_end", "pruned", "rate", "duration_s", "retain_s",
          "submitted", "backlog_at_end", "store"):
    need(k in j, "key " + k)
need(j.get("workload") == "soak" and j.get("rate") == 200, "workload soak, rate 200")
need(j.get("duration_s") == 3 and j.get("retain_s") == 1, "duration 3 s, retain 1 s")
# paced: never more than 200/s x 3 s (a slow machine may submit fewer)
need(isinstance(j.get("submitted"), int) and 1 <= j["submitted"] <= 600,
     "at most 200/s x 3 s submitted")
need(j.get("handled_at_end", -1) + j.get("backlog_at_end", -1) == j.get("submitted"),
     "run + backlog = submitted")
need(num("tasks_per_s_last_minute") and j["tasks_per_s_last_minute"] > 0,
     "tasks_per_s_last_minute > 0")
for w in ("first", "last"):
    p50, p99, mx = (j.get("p50_ms_%s_minute" % w), j.get("p99_ms_%s_minute" % w),
                    j.get("max_ms_%s_minute" % w))
    need(all(isinstance(x, (int, float)) for x in (p50, p99, mx)) and 0 <= p50 <= p99 <= mx,
         "0 <= p50 <= p99 <= max (%s minute)" % w)
need(j.get("early") == 0, "no claim before due")
need(j.get("bytes_at_60s") is None, "no size at 60 s in a 3 s soak")
need(int_or_null("bytes_at_end"), "bytes_at_end: a positive integer or null")
need(isinstance(j.get("pruned"), int) and j["pruned"] >= 0, "pruned >= 0")
need(j.get("store_errors") == 0, "no store errors")
'
	"$DUE" bench --workload soak --rate 50 --duration 1s --retain 0 --json \
		--db "$url" >"$T/soak0.json" 2>/dev/null
	check_json "$T/soak0.json" 'need("retain_s" in j and j["retain_s"] is None, "--retain 0 keeps all: retain_s null")'
	# run-after: a chain and a fan-in, each task once, none early
	"$DUE" bench --workload after --n 40 --json --db "$url" >"$T/after.json"
	sed -n 1p "$T/after.json" >"$T/after1.json"
	sed -n 2p "$T/after.json" >"$T/after2.json"
	check_json "$T/after1.json" '
need(j.get("workload") == "after" and j.get("variant") == "chain" and j.get("n") == 40, "a chain of 40")
need(j.get("missing") == 0 and j.get("duplicates") == 0 and j.get("early") == 0, "each once, none early")
need(num("ms_per_link") and j["ms_per_link"] > 0, "ms_per_link > 0")
'
	check_json "$T/after2.json" '
need(j.get("variant") == "fan-in" and j.get("n") == 41, "a fan-in of 40 parents and its child")
need(j.get("missing") == 0 and j.get("duplicates") == 0 and j.get("early") == 0, "each once, none early")
need(num("child_release_ms") and j["child_release_ms"] >= 0, "child_release_ms >= 0")
'
}

run_store sqlite "sqlite:$T/bench.db"

# SQLite: the store work per task (due_store_work_read); a single submit
# is BEGIN, INSERT, COMMIT writing one row
"$DUE" bench --workload enqueue --n 400 --batch 100 --json \
	--db "sqlite:$T/work.db?sync=normal" >"$T/enq.json"
head -1 "$T/enq.json" >"$T/enq1.json"
check_json "$T/enq1.json" '
need(j.get("variant") == "single" and j.get("n") == 100, "single, n = 100")
need(j.get("statements_per_task") == 3, "3 statements per single submit")
need(j.get("rows_written_per_task") == 1, "1 row written per submit")
need(num("vm_steps_per_task") and j["vm_steps_per_task"] > 10, "vm_steps_per_task > 10")
'
if [ -n "${DUE_TEST_PG_URL:-}" ]; then
	run_store pg "$DUE_TEST_PG_URL"
	# the server's WAL written per submit (its insert position's move)
	"$DUE" bench --workload enqueue --n 200 --batch 50 --json \
		--db "$DUE_TEST_PG_URL" | sed -n 1p >"$T/pgenq.json"
	check_json "$T/pgenq.json" '
need(j.get("variant") == "single", "single")
need(num("wal_bytes_per_task") and j["wal_bytes_per_task"] > 0, "wal_bytes_per_task > 0")
need("statements_per_task" not in j, "no SQLite counters on PostgreSQL")
'
	# --pg-autovacuum default: the soak's tables lose due init's storage
	# settings (checked on the scratch schema, kept for it)
	"$DUE" bench --workload soak --rate 50 --duration 1s --retain 0 \
		--pg-autovacuum default --keep --json --db "$DUE_TEST_PG_URL" \
		>"$T/soakav.json" 2>"$T/soakav.err" &
	bpid=$!
	wait "$bpid" && ok || bad "soak --pg-autovacuum default: $(cat "$T/soakav.err")"
	sch=due_scratch_due_verify_${bpid}_1
	expect_eq "due_task without storage settings" "" \
		"$(psql -qXAt "$DUE_TEST_PG_URL" -c "SELECT coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = '$sch.due_task'::regclass")"
	psql -qXAt "$DUE_TEST_PG_URL" -c "DROP SCHEMA $sch CASCADE" >/dev/null 2>&1
	rm -rf "$(sed -n 's/.*scratch kept in \(.*\)/\1/p' "$T/soakav.err")"
	# and by default they stay as due init set them
	"$DUE" bench --workload soak --rate 50 --duration 1s --retain 0 \
		--keep --json --db "$DUE_TEST_PG_URL" >/dev/null 2>"$T/soakdue.err" &
	bpid=$!
	wait "$bpid" && ok || bad "soak: $(cat "$T/soakdue.err")"
	sch=due_scratch_due_verify_${bpid}_1
	psql -qXAt "$DUE_TEST_PG_URL" -c "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = '$sch.due_task'::regclass" |
		grep -q "autovacuum_vacuum_threshold" && ok || bad "due init's settings kept by default"
	psql -qXAt "$DUE_TEST_PG_URL" -c "DROP SCHEMA $sch CASCADE" >/dev/null 2>&1
	rm -rf "$(sed -n 's/.*scratch kept in \(.*\)/\1/p' "$T/soakdue.err")"
fi
finish
