#!/usr/bin/env bash
# test_retain.sh - retention (`due work --retain DUR`, issue 15 point 3) on
# every store this run has: SQLite always, PostgreSQL, Redis and MariaDB
# when scripts/test started them (under CI=true each must be there).
#
# Per store: 1,200 DONE tasks (more than one 1,000-task batch), a
# CANCELLED one, a DEAD one, a SCHEDULED one due in an hour, and a CLAIMED
# one whose handler is still running (its worker keeps everything:
# `--retain 0`, which its start line says).  Then three workers with
# `--retain 1s` start: the DONE and CANCELLED tasks go, with nothing else;
# exactly one of the three pruned (the store's "prune" lease), its log
# names the count, and /metrics shows due_tasks_pruned_total.
#
# No timing assertion: "older than 1 s" is waited for as the pruning
# itself (a deadline is only a hang guard).
. "$(dirname "$0")/lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export OUT="$T/out"
mkdir -p "$OUT"
CLEANUP=()
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT

n_state() { # KIND STATE: how many tasks of KIND are in STATE
	"$DUE" ls --kind "$1" --state "$2" --limit 5000 --json |
		python3 -c 'import json, sys; print(len(json.load(sys.stdin)))'
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# retain_on LABEL URL: the whole scenario on one store.
retain_on() {
	local label=$1 url=$2 w
	export DUE_DB=$url
	echo "== $label"
	"$DUE" init >/dev/null && ok || { bad "$label: init"; return; }

	for i in $(seq 1 1200); do echo '{"kind":"fin"}'; done | "$DUE" add --batch - >/dev/null
	"$DUE" work -q --once --kinds fin --concurrency 8 --exec true 2>"$T/$label.once.log" ||
		bad "$label: drain of fin"
	expect_eq "$label: 1200 DONE" 1200 "$(n_state fin DONE)"
	cid=$("$DUE" add gone --in 1h) && "$DUE" cancel "$cid" >/dev/null
	did=$("$DUE" add dead --max-attempts 1)
	"$DUE" work -q --once --kinds dead --exec false 2>/dev/null || true
	expect_eq "$label: a DEAD task" 1 "$(n_state dead DEAD)"
	fid=$("$DUE" add later --in 1h)
	hid=$("$DUE" add hold)
	"$DUE" work --kinds hold --retain 0 --lease 30s \
		--exec 'touch "$OUT/hold.started"; until [ -e "$OUT/hold.release" ]; do sleep 0.05; done' \
		2>"$T/$label.hold.log" &
	local holder=$!
	wait_for "$label: hold task running" 60 test -e "$OUT/hold.started"
	grep -q "retention off" "$T/$label.hold.log" && ok ||
		bad "$label: --retain 0 is named in the start line: $(head -2 "$T/$label.hold.log")"

	local pids=()
	for w in 1 2 3; do
		"$DUE" work --kinds none --retain 1s --owner "p$w" --exec true \
			2>"$T/$label.p$w.log" &
		pids+=($!)
	done
	wait_for "$label: the DONE tasks pruned" 120 bash -c "[ \"\$(\"$DUE\" ls --kind fin --state DONE --limit 5 --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')\" = 0 ]"
	wait_for "$label: the CANCELLED task pruned" 60 bash -c "! \"$DUE\" show $cid >/dev/null 2>&1"
	expect_eq "$label: DEAD kept" DEAD "$("$DUE" show "$did" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"
	expect_eq "$label: SCHEDULED kept" SCHEDULED "$("$DUE" show "$fid" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"
	expect_eq "$label: CLAIMED kept" CLAIMED "$("$DUE" show "$hid" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"

	# /metrics: the pruned count, reported by the worker within 10 s
	local port
	port=$(free_port)
	"$DUE" serve --listen "127.0.0.1:$port" 2>"$T/$label.serve.log" &
	local spid=$!
	wait_for "$label: serve up" 30 curl -s "http://127.0.0.1:$port/health" -o /dev/null
	wait_for "$label: /metrics shows 1201 pruned" 60 bash -c "[ \"\$(curl -sf http://127.0.0.1:$port/metrics | awk '\$1 == \"due_tasks_pruned_total\" {print \$2}')\" = 1201 ]"
	kill -TERM "$spid"; wait "$spid" 2>/dev/null || true

	for p in "${pids[@]}"; do kill -TERM "$p"; done
	for p in "${pids[@]}"; do wait "$p" || bad "$label: pruner worker $p exit"; done
	# one pruner at a time: exactly one worker logged pruning, 1201 in all
	# (a worker logs what it pruned at most once a minute, and at exit)
	local pruners=0 total=0
	for w in 1 2 3; do
		if grep -q "retention: pruned" "$T/$label.p$w.log"; then
			pruners=$((pruners + 1))
			for k in $(sed -n 's/.*retention: pruned \([0-9]*\) .*/\1/p' "$T/$label.p$w.log"); do
				total=$((total + k))
			done
		fi
	done
	expect_eq "$label: one worker pruned" 1 "$pruners"
	expect_eq "$label: the log counts every pruned task" 1201 "$total"

	if grep -h "store unavailable\|error" "$T/$label".p*.log >/dev/null 2>&1; then
		bad "$label: errors in the pruners' logs: $(grep -h "store unavailable\|error" "$T/$label".p*.log | head -3)"
	else
		ok
	fi
	touch "$OUT/hold.release"
	wait_for "$label: hold done" 60 bash -c "[ \"\$(\"$DUE\" show $hid --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"state\"])')\" = DONE ]"
	kill -TERM "$holder"; wait "$holder" || bad "$label: holder exit"
	rm -f "$OUT"/hold.*
}

on_each_store retain_on retain
finish
