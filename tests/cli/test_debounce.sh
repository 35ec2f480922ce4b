#!/usr/bin/env bash
# test_debounce.sh - `due add --key K --on-key keep|replace|later` (issue
# 38, point 2) with real workers, on every store (Redis sharded too):
#   - the command: keep (the default) leaves the live task; replace moves
#     a waiting one to the new time and payload; later only to a later
#     time; stdout is the id that holds the key, stderr says whether it
#     moved; --json carries existed and moved; bad input (an unknown
#     mode, --on-key without --key, in a batch line) exits 2 naming it
#     and writes nothing;
#   - the wheel: a worker (--poll 30s: only the wheel and the store's
#     notifications deliver) runs a task moved earlier at its new time,
#     with the new payload, and a task moved later not before its new
#     time, each once;
#   - a running holder is never touched: a later add while it runs makes
#     a new task (another id), the running one finishes DONE with its own
#     payload and no key, and the new one runs after;
#   - POST /v1/tasks with on_key answers existed and moved; a bad on_key
#     is a 400 naming the field;
#   - `due verify --case debounce_racing_producers`: 8 processes x 1,250
#     later-submits of one key leave one task, due at the latest time.
# Timings are functional bounds only (LATE ms after the due time).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
CLEANUP=()
PIDS=()
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT
LATE=3000

# field URL ID EXPR: a Python expression over the task's show --json (t)
field() {
	"$DUE" show "$2" --json --db "$1" | python3 -c "import json,sys; t=json.load(sys.stdin); print($3)"
}
state_is() { [ "$("$DUE" show "$2" --db "$1" | awk '$1 == "state" { print $2 }')" = "$3" ]; }

command_part() {
	local label=$1 db=$2 id r
	id=$("$DUE" add d --key k --in 1h --payload a --db "$db")
	r=$("$DUE" add d --key k --in 2h --payload b --db "$db" 2>"$T/err")
	expect_eq "$label: keep answers the holder" "$id" "$r"
	has -F "nothing added" "$T/err" && ok || bad "$label: keep: $(cat "$T/err")"
	expect_eq "$label: keep changed nothing" a "$(field "$db" "$id" 't["payload"]')"
	r=$("$DUE" add d --key k --in 3h --payload c --on-key later --db "$db" 2>"$T/err")
	expect_eq "$label: later answers the holder" "$id" "$r"
	has -F "(moved)" "$T/err" && ok || bad "$label: later: $(cat "$T/err")"
	expect_eq "$label: later moved it" "c True" \
		"$(field "$db" "$id" 't["payload"], t["due_at"] > t["created_at"]')"
	local due
	due=$(field "$db" "$id" 't["due_at"]')
	r=$("$DUE" add d --key k --in 2h --payload e --on-key later --db "$db" 2>"$T/err")
	expect_eq "$label: an earlier later answers the holder" "$id" "$r"
	has -F "nothing changed" "$T/err" && ok || bad "$label: earlier later: $(cat "$T/err")"
	expect_eq "$label: an earlier later changed nothing" "c $due" \
		"$(field "$db" "$id" 't["payload"], t["due_at"]')"
	"$DUE" add d --key k --at 2031-01-01T00:00:00Z --payload f --on-key replace --json \
		--db "$db" 2>/dev/null >"$T/add.json"
	expect_eq "$label: replace --json" "$id True True 2031-01-01T00:00:00.000Z f" \
		"$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(t["id"], t["existed"], t["moved"], t["due_at"], t["payload"])' "$T/add.json")"
	expect_err 2 "needs --key" "$DUE" add d --on-key later --db "$db"
	expect_err 2 "must be keep, replace or later" "$DUE" add d --key k --on-key soon --db "$db"
	printf '{"kind":"d","key":"k","on_key":"later","in":"9h"}\n{"kind":"d","key":"k","on_key":"sooner"}\n' >"$T/b"
	expect_err 2 "line 2: 'on_key' must be \"keep\", \"replace\" or \"later\", not 'sooner'" "$DUE" add --batch "$T/b" --db "$db"
	# options of a single add beside --batch: refused, naming each (the
	# attack's defect: --in, --at, --key... were dropped without a word)
	local o
	for o in "--in 5h" "--at 2099-01-01T00:00:00Z" "--key y" "--payload z" \
		"--max-attempts 9" "--on-key later" "--backoff 1s"; do
		expect_err 2 "--batch takes no ${o%% *}:" "$DUE" add --batch "$T/b" --db "$db" $o
	done
	printf '{"kind":"d","key":"k","on_key":"later","in":"9h"}\n{"kind":"d","on_key":"later"}\n' >"$T/b"
	expect_err 2 "item 2: on_key later needs a key" "$DUE" add --batch "$T/b" --db "$db"
	expect_eq "$label: refusals changed nothing" "f 2031-01-01T00:00:00.000Z" \
		"$(field "$db" "$id" 't["payload"], t["due_at"]')"
	printf '{"kind":"d","key":"k2","in":"1h","payload":"x"}\n{"kind":"d","key":"k2","on_key":"replace","in":"2h","payload":"y"}\n' >"$T/b"
	"$DUE" add --batch "$T/b" --db "$db" >"$T/ids"
	expect_eq "$label: a batch's second line moves its first's task" "1 y" \
		"$(sort -u "$T/ids" | wc -l) $(field "$db" "$(head -1 "$T/ids")" 't["payload"]')"
	expect_eq "$label: one live task per key" 2 \
		"$("$DUE" ls --db "$db" --kind d --state SCHEDULED | sed 1d | wc -l)"
}

# the wheel and a running holder, with one worker
worker_part() {
	local label=$1 db=$2
	: >"$T/ran-$label"
	"$DUE" work --db "$db" --kinds early,late,run --poll 30s --owner w \
		--exec "printf '%s %s\n' \"\$DUE_TASK_ID\" \"\$(cat)\" >> '$T/ran-$label'; [ \"\$DUE_KIND\" != run ] || sleep 3" \
		>"$T/w-$label.log" 2>&1 &
	local wpid=$!
	wait_for "$label: the worker's wheel" 60 has "discovery: timing wheel" "$T/w-$label.log"
	local e l
	e=$("$DUE" add early --key e --in 30s --payload old --db "$db")
	l=$("$DUE" add late --key l --in 5s --payload old --db "$db")
	sleep 0.3
	expect_eq "$label: moved earlier" "$e" \
		"$("$DUE" add early --key e --in 1s --payload new --on-key replace --db "$db" 2>/dev/null)"
	expect_eq "$label: moved later" "$l" \
		"$("$DUE" add late --key l --in 7s --payload new --on-key later --db "$db" 2>/dev/null)"
	wait_for "$label: the one moved earlier ran" 20 state_is "$db" "$e" DONE
	wait_for "$label: the one moved later ran" 20 state_is "$db" "$l" DONE
	ran_once_on_time "$label" "$db" "$e" "$LATE"
	ran_once_on_time "$label" "$db" "$l" "$LATE"
	expect_eq "$label: each ran once, with the new payload" "$e new
$l new" "$(grep -E "^($e|$l) " "$T/ran-$label" | sort -n)"

	# a running holder
	local h n
	h=$("$DUE" add run --key r --payload first --db "$db")
	wait_for "$label: the holder runs" 20 state_is "$db" "$h" CLAIMED
	n=$("$DUE" add run --key r --in 1s --payload second --on-key later --db "$db" 2>"$T/err")
	[ -n "$n" ] && [ "$n" != "$h" ] && ok ||
		bad "$label: a later add beside a running holder gave '$n' (holder $h): $(cat "$T/err")"
	expect_eq "$label: the running holder is untouched" "CLAIMED first None" \
		"$(field "$db" "$h" 't["state"], t["payload"], t["key"]')"
	wait_for "$label: the holder ends" 20 state_is "$db" "$h" DONE
	wait_for "$label: the new holder runs" 20 state_is "$db" "$n" DONE
	expect_eq "$label: both ran once, in order" "$h first
$n second" "$(grep -E "^($h|$n) " "$T/ran-$label")"
	kill "$wpid" 2>/dev/null || true
	wait "$wpid" 2>/dev/null || true
}

http_part() {
	local label=$1 db=$2
	start_server "serve-$label" --db "$db" --listen 127.0.0.1:0
	req POST /v1/tasks '{"kind":"h","key":"hk","in":"1h","payload":"1"}'
	expect 201 "$label: http add"
	local id
	id=$(jf 'j["id"]')
	req POST /v1/tasks '{"kind":"h","key":"hk","in":"2h","payload":"2","on_key":"later"}'
	expect 200 "$label: http later"
	expect_eq "$label: http later answer" "$id true true 2" \
		"$(jf '"%s %s %s %s" % (j["id"], json.dumps(j["existed"]), json.dumps(j["moved"]), j["payload"])')"
	req POST /v1/tasks '{"kind":"h","key":"hk","in":"1m","payload":"3","on_key":"later"}'
	expect_eq "$label: http later, earlier" "$id true false 2" \
		"$(jf '"%s %s %s %s" % (j["id"], json.dumps(j["existed"]), json.dumps(j["moved"]), j["payload"])')"
	req POST /v1/tasks '{"kind":"h","key":"hk","on_key":7}'
	expect 400 "$label: http bad on_key"
	has -F "on_key" "$T/body" && ok || bad "$label: http bad on_key: $(cat "$T/body")"
	kill "$SPID" 2>/dev/null || true
	wait "$SPID" 2>/dev/null || true
}

run() {
	local b=$1 url=$2 t0=$SECONDS
	echo "== $b"
	"$DUE" init --db "$url" >/dev/null && ok || { bad "$b: init"; return; }
	command_part "$b" "$url"
	worker_part "$b" "$url"
	http_part "$b" "$url"
	echo "   ($b: command, worker and HTTP parts in $((SECONDS - t0)) s)"
	t0=$SECONDS
	"$DUE" verify --db "$3" --case debounce_racing_producers >"$T/v-$b" 2>&1
	grep "^CASE" "$T/v-$b" || true
	has "^CASE debounce_racing_producers PASS" "$T/v-$b" && ok ||
		bad "$b: verify debounce_racing_producers: $(tail -3 "$T/v-$b")"
	echo "   ($b: the racing producers in $((SECONDS - t0)) s)"
}
# (verify makes its own scratch store beside the one it is given)
each() { run "$1" "$2" "$2"; }
on_each_store each debounce

if need DUE_TEST_REDIS_URL "sharded Redis"; then
	sh="$DUE_TEST_REDIS_URL?shards=3"
	if url=$("$DUE" scratch make --db "$sh" "due_debounce_sh_$$"); then
		CLEANUP+=("$(printf '%q ' "$DUE" scratch drop --db "$sh" "due_debounce_sh_$$")")
		run redis-sharded "$url" "$sh"
	else
		bad "no sharded Redis scratch store"
	fi
fi
finish
