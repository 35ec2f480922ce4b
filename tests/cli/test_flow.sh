#!/usr/bin/env bash
# test_flow.sh - flow control (issue 21) black box, with several real
# `due work` processes, on SQLite and on PostgreSQL: each "Done when" line
# of the issue - priority, pause, rate, max-running, the group limit, time
# limits, and kill -9 of a worker holding a group's only slot.
#
# Every assertion reads the store: the attempts' claimed_at and ended_at
# (store clock, microseconds) and the tasks' states.  A limit is checked on
# those intervals - how many tries overlap, how many claims fall in one
# window - and where it can be, that it was reached too.  No durations are
# asserted: the deadlines of wait_for only bound a wait.
#
# PostgreSQL runs when DUE_TEST_PG_URL is set (in a schema of its own);
# under CI=true a store that cannot run is a failure, never a skip.
. "$(dirname "$0")/lib.sh"

# q SQL: a query on the current store, rows as a|b|c
q() {
	if [ "$STORE" = sqlite ]; then
		sqlite3 -cmd ".timeout 10000" "$T/due.db" "$1"
	else
		psql -qXAt "$DUE_DB" -c "$1"
	fi
}
# us COLUMN: the column as integer microseconds since the epoch
us() {
	if [ "$STORE" = sqlite ]; then echo "$1"; else
		echo "(extract(epoch FROM $1) * 1000000)::int8"
	fi
}
# tries KIND: every attempt of the kind's tasks, in claim order:
# task|attempt|claimed_us|ended_us (0: running)|group (-: none)|priority|outcome
tries() {
	q "SELECT a.task_id, a.attempt, $(us a.claimed_at),
	   coalesce($(us a.ended_at), 0), coalesce(t.grp, '-'), t.priority,
	   a.outcome FROM due_attempt a JOIN due_task t ON t.id = a.task_id
	   WHERE t.kind = '$1' ORDER BY a.claimed_at, a.task_id"
}
n_state() { q "SELECT count(*) FROM due_task WHERE kind = '$1' AND state = '$2'"; }
is_state() { [ "$(q "SELECT state FROM due_task WHERE id = $1")" = "$2" ]; }
has_state() { [ "$(n_state "$1" "$2")" -ge "$3" ]; }

# The analyses, on the output of tries (file in $1).
cat >"$T/flow.py" <<'EOF'
import sys
what, path = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("|") for l in open(path) if l.strip()]
claims = sorted(int(r[2]) for r in rows)
INF = 1 << 62
spans = [(int(r[2]), int(r[3]) or INF, r[4]) for r in rows]
def sweep():
    # ends before claims at one instant: [claimed, ended) is half-open
    ev = sorted([(s, 1, g) for s, e, g in spans] + [(e, -1, g) for s, e, g in spans],
                key=lambda x: (x[0], x[1]))
    cur = best = best_g = best_groups = 0
    per = {}
    for _, d, g in ev:
        cur += d
        per[g] = per.get(g, 0) + d
        best = max(best, cur)
        best_g = max(best_g, per[g])
        best_groups = max(best_groups, sum(1 for v in per.values() if v > 0))
    return best, best_g, best_groups
if what == "window":  # most claims in any window (t, t + width]
    width, best, i = int(sys.argv[3]), 0, 0
    for j in range(len(claims)):
        while claims[i] <= claims[j] - width:
            i += 1
        best = max(best, j - i + 1)
    print(best)
elif what == "overlap":  # most tries at once
    print(sweep()[0])
elif what == "groups":  # most tries of one group at once, most groups at once
    _, g, n = sweep()
    print(g, n)
elif what == "first":  # the priorities of the first N claims, distinct
    n = int(sys.argv[3])
    print(",".join(sorted({r[5] for r in rows[:n]})))
EOF
an() { python3 "$T/flow.py" "$@"; }

WORKERS=()
# workers N KINDS CONCURRENCY CMD [ARGS...]: start N workers in the background
workers() {
	local n=$1 kinds=$2 conc=$3 cmd=$4 i
	shift 4
	for i in $(seq 1 "$n"); do
		"$DUE" work -q --kinds "$kinds" --concurrency "$conc" --poll 20ms \
			--owner "$kinds-$i" "$@" --exec "$cmd" 2>>"$T/$STORE-work.log" &
		WORKERS+=($!)
	done
}
stop_workers() {
	local p
	for p in "${WORKERS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${WORKERS[@]}"; do wait "$p" 2>/dev/null || true; done
	WORKERS=()
}
batch() { # batch KIND N [JSON fields...]: N tasks through add --batch
	local kind=$1 n=$2 extra=${3:-} i
	for i in $(seq 1 "$n"); do echo "{\"kind\":\"$kind\"$extra}"; done |
		"$DUE" add --batch - >/dev/null
}

# -- priority: the first 50 run are the -5 ones --------------------------
t_priority() {
	batch prio 50 ',"priority":10'
	batch prio 50 ',"priority":-5' # added later: due_at alone would lose
	expect_eq "$STORE priority: 100 tasks added" 100 "$(n_state prio SCHEDULED)"
	workers 1 prio 1 true
	wait_for "$STORE priority: 100 done" 120 has_state prio DONE 100
	stop_workers
	tries prio >"$T/prio"
	expect_eq "$STORE priority: the first 50 claimed are the -5 ones" -5 "$(an first "$T/prio" 50)"
}

# -- pause: 0 claims of a paused kind while another drains ----------------
t_pause() {
	"$DUE" kind set held --pause >/dev/null && ok || bad "$STORE kind set --pause"
	batch held 20 ',"priority":-5' # first in line, were they claimable
	batch drain 60
	workers 3 held,drain 4 'sleep 0.1'
	wait_for "$STORE pause: the other kind drained" 120 has_state drain DONE 60
	expect_eq "$STORE pause: claims of the paused kind during the drain" 0 \
		"$(q "SELECT coalesce(sum(attempt), 0) FROM due_task WHERE kind = 'held'")"
	"$DUE" kind set held --resume >/dev/null && ok || bad "$STORE kind set --resume"
	wait_for "$STORE pause: all of it done after resume" 60 has_state held DONE 20
	stop_workers
}

# -- rate 10/1s: no 1 s window of claims holds more than 10 ---------------
t_rate() {
	"$DUE" kind set rated --rate 10/1s >/dev/null && ok || bad "$STORE kind set --rate"
	batch rated 60
	workers 3 rated 4 true
	wait_for "$STORE rate: all 60 done" 120 has_state rated DONE 60
	stop_workers
	tries rated >"$T/rated"
	expect_eq "$STORE rate: 60 claims" 60 "$(wc -l <"$T/rated")"
	local most
	most=$(an window "$T/rated" 1000000)
	[ "$most" -le 10 ] && ok || bad "$STORE rate: $most claims in one 1 s window (limit 10)"
	echo "$STORE rate 10/1s: most claims in a 1 s window: $most"
}

# -- max-running 2: never more than 2 at once, and 2 do -------------------
t_max_running() {
	"$DUE" kind set capped --max-running 2 >/dev/null && ok || bad "$STORE kind set --max-running"
	batch capped 16
	workers 3 capped 4 'sleep 0.2'
	wait_for "$STORE max-running: all 16 done" 120 has_state capped DONE 16
	stop_workers
	tries capped >"$T/capped"
	expect_eq "$STORE max-running: most tries at once" 2 "$(an overlap "$T/capped")"
}

# -- max-running-per-group 1, 40 tasks over 4 groups ----------------------
t_group() {
	local g
	"$DUE" kind set grouped --max-running-per-group 1 >/dev/null && ok || bad "$STORE kind set --max-running-per-group"
	# group after group: a claim in (priority, due_at) order meets a held
	# group before the next one, so head-of-line blocking would show
	for g in ga gb gc gd; do batch grouped 10 ",\"group\":\"$g\""; done
	workers 3 grouped 4 'sleep 0.1'
	wait_for "$STORE group: all 40 done" 120 has_state grouped DONE 40
	stop_workers
	tries grouped >"$T/grouped"
	read -r per_group groups < <(an groups "$T/grouped")
	expect_eq "$STORE group: most tries of one group at once" 1 "$per_group"
	[ "$groups" -ge 3 ] && ok || bad "$STORE group: at most $groups groups ran at once (want >= 3)"
}

pids_gone() {
	local p
	for p in $(cat "$T/$STORE-pids"); do kill -0 "$p" 2>/dev/null && return 1; done
	return 0
}

# -- timeout 1s, sleep 30, max-attempts 2: DEAD, both tries TIMED_OUT -----
t_timeout() {
	local own
	own=$("$DUE" add tmo --timeout 1s --max-attempts 2 --backoff 100ms)
	"$DUE" kind set tmk --timeout 1s >/dev/null && ok || bad "$STORE kind set --timeout"
	"$DUE" add tmk --max-attempts 2 --backoff 100ms >/dev/null
	workers 1 tmo,tmk 4 "echo \$\$ >> '$T/$STORE-pids'; exec sleep 30" --kill-grace 300ms
	wait_for "$STORE timeout: own limit, DEAD" 60 has_state tmo DEAD 1
	wait_for "$STORE timeout: kind's limit, DEAD" 60 has_state tmk DEAD 1
	wait_for "$STORE timeout: no handler process left" 30 pids_gone
	expect_eq "$STORE timeout: handlers started" 4 "$(wc -l <"$T/$STORE-pids")"
	stop_workers
	local k
	for k in tmo tmk; do
		expect_eq "$STORE timeout ($k): the tries' outcomes" "TIMED_OUT,TIMED_OUT" \
			"$(tries $k | cut -d'|' -f7 | paste -sd,)"
	done
	"$DUE" show "$own" | has "timed out after" && ok || bad "$STORE timeout: error 'timed out after' in show"
}

# -- kill -9 of a worker holding a group's only slot ----------------------
lease_end() { q "SELECT $(us lease_until) FROM due_task WHERE id = $1 AND state = 'CLAIMED' AND attempt = 1"; }
t_kill9() {
	local held next other a until=0 l end
	"$DUE" kind set slot --max-running-per-group 1 >/dev/null && ok || bad "$STORE kind set (slot)"
	held=$("$DUE" add slot --group g)
	# a 2 s lease: on a loaded machine a renewal can come well after a third
	# of a 1 s one, and A's lease would lapse while A lives
	"$DUE" work -q --kinds slot --concurrency 1 --lease 2s --owner A \
		--exec "echo \$\$ >> '$T/$STORE-slot.pid'; exec sleep 600" 2>>"$T/$STORE-work.log" &
	a=$!
	wait_for "$STORE kill9: A holds g's slot" 60 test -s "$T/$STORE-slot.pid"
	next=$("$DUE" add slot --group g)
	other=$("$DUE" add slot --group h)
	workers 1 slot 4 true --lease 2s
	wait_for "$STORE kill9: another group runs beside the held one" 60 is_state "$other" DONE
	# A lives on, renewing, for two leases: g's next task waits all along
	end=$(($(date +%s) + 4))
	while [ "$(date +%s)" -le "$end" ]; do
		l=$(lease_end "$held")
		[ -n "$l" ] && [ "$l" -gt "$until" ] && until=$l
		sleep 0.05
	done
	expect_eq "$STORE kill9: g's next task unclaimed while A lives" 0 \
		"$(q "SELECT attempt FROM due_task WHERE id = $next")"
	kill -9 "$a"
	wait "$a" 2>/dev/null || true
	l=$(lease_end "$held") # a renewal may have landed just before
	[ -n "$l" ] && [ "$l" -gt "$until" ] && until=$l
	wait_for "$STORE kill9: all three done" 60 has_state slot DONE 3
	stop_workers
	kill -9 "$(cat "$T/$STORE-slot.pid")" 2>/dev/null || true
	local claimed
	claimed=$(q "SELECT $(us claimed_at) FROM due_attempt WHERE task_id = $next AND attempt = 1")
	[ "$until" -gt 0 ] && [ "${claimed:-0}" -ge "$until" ] && ok ||
		bad "$STORE kill9: g's next task claimed at $claimed, before A's lease end $until"
}

run_store() {
	"$DUE" init >/dev/null && ok || { bad "$STORE: init"; return; }
	local t
	for t in t_priority t_pause t_rate t_max_running t_group t_timeout t_kill9; do
		"$t"
		stop_workers
	done
}

STORE=sqlite
run_store

if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; fi
	echo "NOTE: DUE_TEST_PG_URL not set: PostgreSQL flow tests not run"
else
	schema="due_flow_$$"
	if psql -qX "$DUE_TEST_PG_URL" -c "CREATE SCHEMA $schema" >/dev/null; then
		trap 'kill $(jobs -p) 2>/dev/null || true; psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA $schema CASCADE" >/dev/null 2>&1; rm -rf "$T"' EXIT
		sep='?'
		case "$DUE_TEST_PG_URL" in *\?*) sep='&' ;; esac
		export DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
		STORE=postgres
		run_store
	else
		bad "PostgreSQL at DUE_TEST_PG_URL cannot be used"
	fi
fi
finish
