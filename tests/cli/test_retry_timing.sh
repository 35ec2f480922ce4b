#!/usr/bin/env bash
# test_retry_timing.sh - work that becomes due again is as punctual as a
# new task, on every store (issue 36): a retry after a failed try (this
# worker's, and another process's), a retry after a try stopped at its
# time limit, a requeue, `due retry` of a dead letter, the expired lease
# of a worker killed with -9, and tasks a kind's running, group or rate
# limit held back, once the limit frees.
#
# Every worker runs with `--poll 30s`: a task that reaches no wheel waits
# for the safety poll, up to 30 s, and misses the bounds below by far.
# The bounds are functional and generous (LATE ms past the time the store
# made the task due again: a second for MariaDB's once-a-second wake-up
# counter, plus the claim, on a loaded machine), never a measurement.
#
# The cases run in phases, each alone on its store: a worker refills its
# wheel on any notification, so a submit or an operator's move made
# meanwhile would put a late task on the wheel by chance and hide what
# the case is about.  The processes, per store:
#   A       `--once --kinds fx`: claims fx's first try before W starts,
#           fails it in phase 2, and exits before the retry is due: the
#           retry reaches W through the store's notification of A's fail.
#   K1, K2  `--kinds rc --lease 2s`, phase 1 only: both fire for rc, one
#           claims it and is killed with -9; the other, which lost the
#           race and so never saw that lease at a refill, must take it
#           back when it ends.
#   W       every kind but rc, started after phase 1.
. "$(dirname "$0")/lib.sh"
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT

LATE=3000 # ms: the bound on how late a re-due try may be claimed
# the handlers sleep this long where a try must be stopped or killed:
# `pkill -f "sleep $mark"` finds them and nothing else
export mark="20.0$$"

cat >"$T/h.sh" <<'EOF'
#!/bin/sh
# the first try of these fails, or runs until it is stopped
case "$DUE_KIND:$DUE_ATTEMPT" in
fl:1 | dl:1) exit 1 ;;
to:1 | rq:1 | rc:1) exec sleep "$mark" ;;
lm:* | gp:*) sleep 0.5 ;;
esac
exit 0
EOF
chmod +x "$T/h.sh"

# (shell and awk while waiting: a python3 start takes 0.3 s on a loaded
# machine; one python3 checks everything at the end)
state() { "$DUE" show "$1" | awk '$1 == "state" { print $2 }'; }
is_state() { [ "$(state "$1")" = "$2" ]; }
try1() { "$DUE" show "$1" | grep '^  #1 '; } # the first try's line
# every task named (ids) is DONE
all_done() {
	local id
	for id; do is_state "$id" DONE || return 1; done
}
holder_pid() { # the pid of the rc worker holding ID's first try
	case "$(try1 "$1" | awk '{ print $3 }')" in
	k1) echo "$K1" ;;
	k2) echo "$K2" ;;
	esac
}
export DUE
export -f state is_state try1 all_done

# check LABEL JSON-DIR KILLED: every bound, from each task's `due show
# --json` (DIR/KEY.json) and the host time of the kill (KILLED: the test
# servers share this host's clock); prints "ok" or "FAIL: ..." a line each
check() {
	python3 - "$@" "$LATE" <<'PY'
import datetime, json, os, sys
label, d, killed, late = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
t = {f[:-5]: json.load(open(os.path.join(d, f))) for f in os.listdir(d)}
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
def att(k, n):
    a = [x for x in t[k]["attempts"] if x["attempt"] == n]
    return a[0] if a else {}
def within(what, ms, bound):
    if ms is not None and ms <= bound:
        print("ok")
    else:
        print(f"FAIL: {label}: {what}: {ms} ms, bound {bound} ms")
def eq(what, want, got):
    print("ok" if want == got else f"FAIL: {label}: {what}: expected {want!r}, got {got!r}")
def punctual(what, k, n=2):
    within(f"{what}: try {n} claimed after it was due",
           att(k, n).get("lateness_ms"), late)
def gap(a, b):
    return None if not a or not b else round((ts(b) - ts(a)) * 1000)

eq("rc's first try", "LEASE_EXPIRED", att("rc", 1).get("outcome"))
# the lease (2 s) ran out at most 2 s after the kill; then the bound
end = att("rc", 1).get("ended_at")
within("expired lease taken back after the kill",
       round((ts(end) - float(killed)) * 1000) if end and killed else None,
       2000 + late)
punctual("reclaimed task", "rc")
punctual("retry after a fail (this worker)", "fl")
punctual("retry after another worker's fail", "fx")
eq("fx's first try ran on A", "first", att("fx", 1).get("worker"))
eq("fx's second try ran on W", "main", att("fx", 2).get("worker"))
punctual("retry after TIMED_OUT", "to")
eq("to's first try", "TIMED_OUT", att("to", 1).get("outcome"))
punctual("requeue", "rq")
eq("rq's first try", "REQUEUED", att("rq", 1).get("outcome"))
punctual("retry of a dead letter", "dl")
# the second task of a held kind is claimed when the first one's try
# ends (running, group limits), or when the rate's window lets it
for p in ("lm", "gp"):
    first, second = sorted((att(p + "1", 1), att(p + "2", 1)),
                           key=lambda a: a.get("claimed_at") or "")
    within(f"{p}'s limit freed", gap(first.get("ended_at"),
                                     second.get("claimed_at")), late)
a, b = sorted((att("rt1", 1).get("claimed_at") or "",
               att("rt2", 1).get("claimed_at") or ""))
within("rt's rate freed", gap(a, b), 500 + late)
PY
}

# phase_reclaim LABEL: K1 and K2 race for rc's first try; its holder is
# killed with -9 and the survivor must take the lease back.
phase_reclaim() {
	local s=$1 l="$T/$1" k victim survivor
	t[rc]=$("$DUE" add rc --max-attempts 2)
	wait_for "$s: rc claimed" 10 is_state "${t[rc]}" CLAIMED || return 0
	victim=$(holder_pid "${t[rc]}")
	survivor=$K1 k=k1
	[ "$victim" = "$K1" ] && survivor=$K2 k=k2
	KILLED=$(date +%s.%N)
	kill -9 "$victim"
	wait "$victim" 2>/dev/null || true
	wait_for "$s: rc done" 10 is_state "${t[rc]}" DONE || true
	grep -q "reclaimed expired leases: 1 rescheduled" "$l.$k.log" && ok ||
		bad "$s: the survivor ($k) did not take the lease back"
	kill -TERM "$survivor"
	wait "$survivor" || bad "$s: $k's exit"
	pkill -f "sleep $mark" || true # the killed worker's handler
}

suite() {
	local s=$1 l="$T/$1" a w k r
	local -A t
	export DUE_DB=$2
	echo "== $s"
	"$DUE" init >/dev/null && ok || { bad "$s: init"; return; }
	"$DUE" kind set lm --max-running 1 >/dev/null &&
		"$DUE" kind set gp --max-running-per-group 1 >/dev/null &&
		"$DUE" kind set rt --rate 1/500ms >/dev/null && ok || bad "$s: kind set"

	# 1: an expired lease, alone on the store (no other worker: a
	# polling one, like A, reclaims every 2 s)
	"$DUE" work --kinds rc --lease 2s --owner k1 --poll 30s \
		--exec "$T/h.sh" 2>"$l.k1.log" &
	K1=$!
	"$DUE" work --kinds rc --lease 2s --owner k2 --poll 30s \
		--exec "$T/h.sh" 2>"$l.k2.log" &
	K2=$!
	for k in k1 k2; do
		wait_for "$s: worker $k listens" 10 grep -q "discovery: timing wheel" "$l.$k.log"
	done
	KILLED=
	phase_reclaim "$s"

	# A claims fx's first try before W starts (a start notifies: the
	# worker checks that notifications reach it)
	t[fx]=$("$DUE" add fx --max-attempts 2 --backoff 500ms)
	"$DUE" work --once --kinds fx --owner first --poll 30s --exec \
		"while [ ! -e '$l.go' ]; do sleep 0.05; done; exit 1" 2>"$l.a.log" &
	a=$!
	wait_for "$s: fx's first try claimed" 10 try1 "${t[fx]}"
	# a lease of 3 s: the requeued try's handler is told within 1 s
	"$DUE" work --kinds fl,to,rq,dl,lm,gp,rt,fx --owner main --poll 30s \
		--lease 3s --concurrency 8 --kill-grace 200ms --exec "$T/h.sh" \
		2>"$l.w.log" &
	w=$!
	wait_for "$s: worker W listens" 10 grep -q "discovery: timing wheel" "$l.w.log"
	# 2: retries after W's fail and after a time limit, then after A's
	# fail.  W hears of fl's and to's submits before they are due
	# (MariaDB: within its second), and claims nothing else while a
	# retry waits: only what the fail did can bring the retry in
	local soon=300ms
	[ "$s" = mysql ] && soon=1200ms
	t[fl]=$("$DUE" add fl --in $soon --max-attempts 2 --backoff 500ms)
	t[to]=$("$DUE" add to --in $soon --max-attempts 2 --backoff 500ms \
		--timeout 500ms)
	wait_for "$s: W's retries done" 10 all_done "${t[fl]}" "${t[to]}" || true
	touch "$l.go" # A fails fx; its retry is due 500 ms later
	wait_for "$s: fx done" 10 is_state "${t[fx]}" DONE || true
	wait "$a" || bad "$s: A's exit"
	# 3: the operator's moves, one after the other
	t[rq]=$("$DUE" add rq)
	wait_for "$s: rq claimed" 10 is_state "${t[rq]}" CLAIMED &&
		"$DUE" requeue "${t[rq]}" >/dev/null && ok || bad "$s: requeue"
	wait_for "$s: rq done" 10 is_state "${t[rq]}" DONE || true
	t[dl]=$("$DUE" add dl --max-attempts 1)
	wait_for "$s: dl dead" 10 is_state "${t[dl]}" DEAD &&
		"$DUE" retry "${t[dl]}" >/dev/null && ok || bad "$s: retry"
	wait_for "$s: dl done" 10 is_state "${t[dl]}" DONE || true
	# 4: limits that free: a running slot, a group's, a rate's window
	local -a ids
	mapfile -t ids < <(printf '{"kind":"%s"%s}\n' lm '' lm '' gp ',"group":"g"' \
		gp ',"group":"g"' rt '' rt '' | "$DUE" add --batch -)
	for k in lm1 lm2 gp1 gp2 rt1 rt2; do
		t[$k]=${ids[0]:-0} ids=("${ids[@]:1}")
	done
	wait_for "$s: the held tasks done" 10 all_done "${t[lm1]}" "${t[lm2]}" \
		"${t[gp1]}" "${t[gp2]}" "${t[rt1]}" "${t[rt2]}" || true

	mkdir -p "$l.json"
	for k in "${!t[@]}"; do
		"$DUE" show "${t[$k]}" --json >"$l.json/$k.json"
	done
	while read -r r; do
		if [ "$r" = ok ]; then ok; else bad "${r#FAIL: }"; fi
	done < <(check "$s" "$l.json" "$KILLED")
	kill -TERM "$w"
	wait "$w" || bad "$s: W's exit"
}

on_each_store suite retrytime
finish
