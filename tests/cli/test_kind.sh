#!/usr/bin/env bash
# test_kind.sh - flow control on the command line (issue 21): `due kind
# set|ls|rm`, `add --priority/--group/--timeout` and the same fields in
# --batch lines, the task and kind JSON shapes, `show` saying why a due
# task waits, and the per-kind part of `stats`.
#
# Every bad input of the issue is a row: exit 2, one line naming the
# problem (plus the --help hint), and the store exactly as before (kinds,
# tasks).  Runs on SQLite, and on PostgreSQL too when DUE_TEST_PG_URL is
# set (in a schema of its own, dropped at the end).
. "$(dirname "$0")/lib.sh"

# jq-less JSON reading: py EXPR evaluates EXPR with `d` the JSON on stdin
py() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)" 2>/dev/null || echo "(no answer)"; }
# the kinds and the tasks, as one canonical text
fingerprint() {
	"$DUE" kind ls --json | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))"
	"$DUE" ls --json --limit 10000 | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))"
}

# suite NAME: every check against the store in $DUE_DB
suite() {
	local s=$1 id out
	"$DUE" init >/dev/null
	"$DUE" add seed --in 1h --priority 3 --group g >/dev/null
	"$DUE" kind set seed --max-running 4 >/dev/null || bad "$s: kind set seed"
	local before
	before=$(fingerprint)

	printf '{"kind":"k","priority":"x"}\n' >"$T/b-pri"
	printf '{"kind":"k","priority":40000}\n' >"$T/b-pri-big"
	printf '{"kind":"k","priority":1.5}\n' >"$T/b-pri-real"
	printf '{"kind":"k","timeout":"0s"}\n' >"$T/b-tmo"
	printf '{"kind":"k","timeout":30}\n' >"$T/b-tmo-num"
	printf '{"kind":"k","group":""}\n' >"$T/b-grp"
	printf '{"kind":"k","group":5}\n' >"$T/b-grp-num"
	printf '{"kind":"k","priority":1}\n' >"$T/b-ok"
	#   substring of the one-line error                 command
	local rows=(
		"invalid --priority 'x'"                        "add k --priority x"
		"invalid --priority '40000'"                    "add k --priority 40000"
		"invalid --priority '-32769'"                   "add k --priority -32769"
		"invalid --timeout '0s': must be more than 0"   "add k --timeout 0s"
		"invalid --timeout '8d': must be more than 0 and at most 7d" "add k --timeout 8d"
		"invalid --timeout '8d': must be more than 0 and at most 7d" "kind set k --timeout 8d"
		"--timeout: invalid duration 'soon'"            "add k --timeout soon"
		"invalid group '': empty"                       "add k --group ''"
		"invalid kind '': empty"                        "add '' --priority 1"
		"--batch takes no --priority, --group or --timeout" "add --batch $T/b-ok --priority 1"
		"--batch line 1: 'priority' must be an integer" "add --batch $T/b-pri"
		"--batch line 1: 'priority' must be an integer" "add --batch $T/b-pri-big"
		"--batch line 1: 'priority' must be an integer" "add --batch $T/b-pri-real"
		"--batch line 1: 'timeout' must be more than 0" "add --batch $T/b-tmo"
		"--batch line 1: 'timeout' must be a duration"  "add --batch $T/b-tmo-num"
		"item 1: invalid group '': empty"               "add --batch $T/b-grp"
		"--batch line 1: 'group' must be a string"      "add --batch $T/b-grp-num"
		"kind set k: nothing to change"                 "kind set k"
		"invalid rate '0/1s'"                           "kind set k --rate 0/1s"
		"invalid rate '5': expected N/DUR"              "kind set k --rate 5"
		"invalid rate '5/0s': the window"               "kind set k --rate 5/0s"
		"invalid rate '5/2d': the window"               "kind set k --rate 5/2d"
		"invalid rate '1000001/1s'"                     "kind set k --rate 1000001/1s"
		"invalid rate '-1/1s'"                          "kind set k --rate -1/1s"
		"invalid --max-running '0'"                     "kind set k --max-running 0"
		"invalid --max-running '-1'"                    "kind set k --max-running -1"
		"invalid --max-running 'x'"                     "kind set k --max-running x"
		"invalid --max-running-per-group '0'"           "kind set k --max-running-per-group 0"
		"invalid --timeout '0s'"                        "kind set k --timeout 0s"
		"--pause and --resume are exclusive"            "kind set k --pause --resume"
		"--pause and --resume are exclusive"            "kind set k --resume --pause"
		"invalid kind '': empty"                        "kind set '' --pause"
		"invalid kind '': empty"                        "kind rm ''"
		"only letters, digits and"                      "kind set 'bad kind' --pause"
		"expected one KIND"                             "kind set --pause"
		"belong to \`kind set\`"                        "kind ls --pause"
		"kind ls takes no arguments"                    "kind ls x"
		"unknown kind command 'bogus'"                  "kind bogus"
		"expected set, ls or rm"                        "kind"
		"unknown option '--max-runing'"                 "kind set k --max-runing 2"
	)
	for ((i = 0; i < ${#rows[@]}; i += 2)); do
		eval "args=(${rows[i + 1]})"
		expect_err 2 "${rows[i]}" "$DUE" "${args[@]}"
	done
	expect_eq "$s: nothing changed by $((${#rows[@]} / 2)) refused commands" "$before" "$(fingerprint)"

	# not found, as `cron rm` of a missing schedule: exit 3, one line
	expect_err 3 "kind 'nokind' has no settings" "$DUE" kind rm nokind
	"$DUE" kind --help | has -- "--max-running-per-group" && ok || bad "$s: kind --help"

	# kind set / ls / rm round trip, and `none` removing one limit
	out=$("$DUE" kind set k1 --pause --rate 10/1s --max-running 2 \
		--max-running-per-group 1 --timeout 30s --json) || bad "$s: kind set k1"
	expect_eq "$s: kind set --json" "k1 True 10/1s 2 1 30s" \
		"$(echo "$out" | py "d['kind'], d['paused'], d['rate'], d['max_running'], d['max_running_per_group'], d['timeout']" | tr -d "(),'")"
	expect_eq "$s: kind ls --json holds k1" "True 10/1s 2 1 30s 0 0" \
		"$("$DUE" kind ls --json | py "[(k['paused'], k['rate'], k['max_running'], k['max_running_per_group'], k['timeout'], k['running'], k['held_rate']) for k in d if k['kind'] == 'k1'][0]" | tr -d "(),'")"
	expect_eq "$s: kind object fields" "due,held_group,held_rate,held_running,kind,max_running,max_running_per_group,paused,rate,rate_used,running,timeout,updated_at" \
		"$("$DUE" kind ls --json | py "','.join(sorted(d[0]))")"
	"$DUE" kind set k1 --resume --rate none --timeout none >/dev/null || bad "$s: kind set none"
	expect_eq "$s: none removes only what it names" "False None 2 1 None" \
		"$("$DUE" kind ls --json | py "[(k['paused'], k['rate'], k['max_running'], k['max_running_per_group'], k['timeout']) for k in d if k['kind'] == 'k1'][0]" | tr -d "(),'")"
	"$DUE" kind set k1 --max-running none --max-running-per-group none >/dev/null || bad "$s: kind set none, none"
	expect_eq "$s: a kind without limits is still listed" "k1" \
		"$("$DUE" kind ls --json | py "' '.join(k['kind'] for k in d if k['kind'] == 'k1')")"
	"$DUE" kind ls | has "^k1 " && ok || bad "$s: kind ls text: $("$DUE" kind ls)"
	expect_eq "$s: kind rm" "removed k1" "$("$DUE" kind rm k1 || true)"
	expect_eq "$s: gone after rm" "" "$("$DUE" kind ls --json | py "' '.join(k['kind'] for k in d if k['kind'] == 'k1')")"
	expect_err 3 "kind 'k1' has no settings" "$DUE" kind rm k1

	# a task's priority, group and timeout through show --json and ls --json
	id=$("$DUE" add t1 --in 1h --priority -5 --group cust-1 --timeout 1m30s)
	expect_eq "$s: show --json priority group timeout held" "-5 cust-1 1m30s None" \
		"$("$DUE" show "$id" --json | py "d['priority'], d['group'], d['timeout'], d['held']" | tr -d "(),'")"
	expect_eq "$s: ls --json the same" "-5 cust-1 1m30s" \
		"$("$DUE" ls --json --kind t1 | py "d[0]['priority'], d[0]['group'], d[0]['timeout']" | tr -d "(),'")"
	"$DUE" show "$id" | has -x "priority          -5" && ok || bad "$s: show text priority"
	"$DUE" show "$id" | has -x "group             cust-1" && ok || bad "$s: show text group"
	"$DUE" show "$id" | has -x "timeout           1m30s" && ok || bad "$s: show text timeout"
	id=$("$DUE" add t1 --in 1h)
	expect_eq "$s: defaults" "0 None None" \
		"$("$DUE" show "$id" --json | py "d['priority'], d['group'], d['timeout']" | tr -d "(),'")"
	"$DUE" add t1 --priority -32768 >/dev/null && ok || bad "$s: --priority -32768"
	"$DUE" add t1 --priority 32767 >/dev/null && ok || bad "$s: --priority 32767"

	# the same fields in --batch lines
	printf '%s\n' '{"kind":"t2","in":"1h","priority":7,"group":"g-7","timeout":"45s"}' \
		'{"kind":"t2","in":"1h","group":null,"timeout":null}' >"$T/b-good"
	"$DUE" add --batch "$T/b-good" >"$T/ids" || bad "$s: batch with flow fields"
	expect_eq "$s: batch line 1" "7 g-7 45s" \
		"$("$DUE" show "$(sed -n 1p "$T/ids")" --json | py "d['priority'], d['group'], d['timeout']" | tr -d "(),'")"
	expect_eq "$s: batch line 2" "0 None None" \
		"$("$DUE" show "$(sed -n 2p "$T/ids")" --json | py "d['priority'], d['group'], d['timeout']" | tr -d "(),'")"

	# show says why a due task waits: its kind is paused
	"$DUE" kind set pk --pause >/dev/null || bad "$s: pause pk"
	id=$("$DUE" add pk)
	expect_eq "$s: held paused" "paused" "$("$DUE" show "$id" --json | py "d['held']")"
	"$DUE" show "$id" | has -x "waiting: kind paused" && ok || bad "$s: show text: $("$DUE" show "$id")"
	id2=$("$DUE" add pk --in 1h)
	expect_eq "$s: not due, not held" "None" "$("$DUE" show "$id2" --json | py "d['held']")"
	expect_eq "$s: stats --json kinds" "True" \
		"$("$DUE" stats --json | py "[k['paused'] for k in d['kinds'] if k['kind'] == 'pk'][0]")"
	expect_eq "$s: stats --json keeps its fields" "True True True" \
		"$("$DUE" stats --json | py "'counts' in d, 'dead' in d, 'oldest_due_unclaimed_ms' in d")"
	"$DUE" stats | has "^  pk  *paused, running 0" && ok || bad "$s: stats text: $("$DUE" stats)"
	"$DUE" kind set pk --resume >/dev/null || bad "$s: resume pk"
	expect_eq "$s: resumed, not held" "None" "$("$DUE" show "$id" --json | py "d['held']")"
	"$DUE" show "$id" | has "^waiting:" && bad "$s: still waiting after resume" || ok

	# held by the rate: 1 claim an hour, one worker pass takes one of two
	"$DUE" kind set rk --rate 1/1h >/dev/null || bad "$s: rate rk"
	"$DUE" add rk >/dev/null
	"$DUE" add rk >/dev/null
	"$DUE" work -q --once --kinds rk --exec true >/dev/null 2>&1 || bad "$s: work --once"
	id=$("$DUE" ls --kind rk --state SCHEDULED --json | py "d[0]['id']")
	expect_eq "$s: held by rate" "rate" "$("$DUE" show "$id" --json | py "d['held']")"
	"$DUE" show "$id" | has -x "waiting: kind at its rate limit" && ok || bad "$s: show rate text"
}

export DUE_DB="sqlite:$T/due.db"
suite sqlite

if [ -n "${DUE_TEST_PG_URL:-}" ]; then
	schema="due_kind_$$"
	psql -qX "$DUE_TEST_PG_URL" -c "CREATE SCHEMA $schema" >/dev/null
	trap 'kill $(jobs -p) 2>/dev/null || true; psql -qX "$DUE_TEST_PG_URL" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null 2>&1; rm -rf "$T"' EXIT
	sep='?'; case "$DUE_TEST_PG_URL" in *\?*) sep='&';; esac
	export DUE_DB="$DUE_TEST_PG_URL${sep}options=-csearch_path%3D$schema"
	suite postgres
else
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; fi
	echo "NOTE: DUE_TEST_PG_URL not set: PostgreSQL checks not run"
fi
finish
