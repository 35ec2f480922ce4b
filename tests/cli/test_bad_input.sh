#!/usr/bin/env bash
# test_bad_input.sh - one table of bad input, command line and HTTP: each
# row is refused with exit 2 (HTTP 400), one line naming the problem, and
# nothing written to the store (issue 17, point 7).
. "$(dirname "$0")/lib.sh"
"$DUE" init >/dev/null
id=$("$DUE" add seed --in 1h --key seed-1)
"$DUE" cron add nightly '0 2 * * *' report --tz Europe/Berlin >/dev/null

# what the store holds, every column that a refused command could touch
fingerprint() {
	"$DUE" ls --json | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))"
	"$DUE" cron ls --json
}
before=$(fingerprint)

long() { printf "%${2}s" "" | tr ' ' "$1"; }
printf '{"kind":"k","payload":"\xff\xfe"}\n' >"$T/b-utf8"
printf '{"kind":"k","key":"a\\u0000b"}\n' >"$T/b-nul"
printf '{"kind":"k","bogus":1}\n' >"$T/b-field"
printf '{"kind":"k","in":"-1s"}\n' >"$T/b-neg"
printf '{"kind":"k","max_attempts":1e300}\n' >"$T/b-huge"
printf '{"kind":"k"}\n{"kind":""}\n' >"$T/b-second"
printf '{"kind":"k","at":"2026-02-30T00:00:00Z"}\n' >"$T/b-date"

#   substring of the one-line error          command
rows=(
	"negative durations are not allowed"   "add k --in -5s"
	"more than 100 years"                  "add k --in 999999999999d"
	"missing or unknown unit"              "add k --in 5x"
	"invalid duration '': empty"           "add k --in ''"
	"day out of range for that month"      "add k --at 2026-02-30T00:00:00Z"
	"year or month out of range"           "add k --at 2026-13-01T00:00:00Z"
	"before 1970-01-01T00:00:00Z"          "add k --at 1969-12-31T23:59:59Z"
	"after 9999-12-31T23:59:59Z"           "add k --at 9999-12-31T02:00:00-23:59"
	"hour, minute or second out of range"  "add k --at 2026-12-01T25:00:00Z"
	"missing UTC offset"                   "add k --at '2026-12-01 00:00:00'"
	"missing UTC offset"                   "add k --at 2026-12-01T00:00:00"
	"--in and --at are exclusive"          "add k --in 1s --at 2026-12-01T00:00:00Z"
	"invalid kind '': empty"               "add ''"
	"200 characters (at most 128)"         "add $(long k 200)"
	"only letters, digits and"             "add 'bad kind'"
	"invalid key '': empty"                "add k --key ''"
	"600 bytes (at most 512)"              "add k --key $(long x 600)"
	"--max-attempts '0'"                   "add k --max-attempts 0"
	"--max-attempts '99999999999999999999'" "add k --max-attempts 99999999999999999999"
	"negative durations are not allowed"   "add k --backoff -1s"
	"invalid backoff"                      "add k --backoff-cap 0s"
	"are exclusive"                        "add k --payload x --payload-file /etc/hostname"
	"No such file or directory"            "add k --payload-file $T/none"
	"is a directory"                       "add k --payload-file $T"
	"unknown option '--owner'"             "add k --owner x"
	"--batch line 1: malformed JSON"       "add --batch $T/b-utf8"
	"in a string is refused"               "add --batch $T/b-nul"
	"unknown field 'bogus'"                "add --batch $T/b-field"
	"negative durations are not allowed"   "add --batch $T/b-neg"
	"'max_attempts' must be an integer"    "add --batch $T/b-huge"
	"item 2: invalid kind '': empty"      "add --batch $T/b-second"
	"day out of range for that month"      "add --batch $T/b-date"
	"is a directory"                       "add --batch $T"
	"invalid task id '99999999999999999999'" "show 99999999999999999999"
	"invalid task id '-1'"                 "show -1"
	"invalid task id 'abc'"                "show abc"
	"invalid task id '1x'"                 "cancel 1x"
	"invalid task id '0'"                  "cancel 0"
	"invalid task id '99999999999999999999'" "retry 99999999999999999999"
	"unknown state 'BOGUS'"                "ls --state BOGUS"
	"--limit '0'"                          "ls --limit 0"
	"--limit '99999999999'"                "ls --limit 99999999999"
	"invalid --after '-5'"                "ls --after -5"
	"invalid kind '': empty"               "ls --kind ''"
	"expected 5 fields"                    "cron add r 'bad expr' k"
	"unknown time zone 'Mars/Olympus'"     "cron add r '0 2 * * *' k --tz Mars/Olympus"
	"unknown time zone '../../etc/passwd'" "cron add r '0 2 * * *' k --tz ../../etc/passwd"
	"invalid schedule name '': empty"      "cron add '' '0 2 * * *' k"
	"minute: 61 is out of range 0-59"      "cron next '61 * * * *'"
	"negative durations are not allowed"   "prune --older-than -1d"
	"invalid duration 'forever'"           "prune --older-than forever"
	"--concurrency '0'"                    "work --exec true --concurrency 0"
	"--lease must be at least 3ms"         "work --exec true --lease 1ms"
	"--lease must be at most 7d"           "work --once --exec true --lease 8d"
	"--poll must be at least 1ms"          "work --exec true --poll 0"
	"--horizon must be at least 1ms"       "work --exec true --horizon 0"
	"option '--poll' needs a value (got '--once')" "work --exec true --poll --once"
	"--kinds: empty list"                  "work --exec true --kinds ''"
	"--exec: empty command"                "work --exec '  '"
	"unknown option 'sync=norml'"          "ls --db 'sqlite:$T/due.db?sync=norml'"
	"option 'sync' given twice"   "ls --db 'sqlite:$T/due.db?sync=full&sync=off'"
	"option 'timeout' given twice" "ls --db 'sqlite:$T/due.db?timeout=1s&timeout=2s'"
	"unsupported scheme 'redis2'"          "ls --db redis2://x"
	"port must be 0..65535"                "serve --listen 127.0.0.1:99999"
)
for ((i = 0; i < ${#rows[@]}; i += 2)); do
	eval "args=(${rows[i + 1]})"
	expect_err 2 "${rows[i]}" "$DUE" "${args[@]}"
done
n_cli=$((${#rows[@]} / 2))

# HTTP: the same kinds of mistakes in POST /v1/tasks bodies and queries
"$DUE" serve --listen 127.0.0.1:0 >"$T/serve.out" 2>"$T/serve.err" &
spid=$!
trap 'kill $spid 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
wait_for "due serve listening" 30 grep -q '^listening on http://' "$T/serve.out"
URL=$(sed -n 's#^listening on \(http://[^ ]*\)/$#\1#p' "$T/serve.out")

# http_bad WHAT SUBSTRING METHOD PATH [BODY]: 400, JSON error naming it
http_bad() {
	local what=$1 sub=$2 method=$3 path=$4 body=${5-}
	local args=(-s -o "$T/body" -w '%{http_code}' --max-time 30 -X "$method")
	[ -n "$body" ] && args+=(--data-binary "$body" -H 'Content-Type: application/json')
	local st
	st=$(curl "${args[@]}" "$URL$path") || st=curl-failed
	if [ "$st" != 400 ]; then
		bad "$what: HTTP $st, expected 400 ($(head -c 200 "$T/body"))"
	elif ! python3 -c "import json,sys; d=json.load(open('$T/body')); sys.exit(0 if '''$sub''' in d['detail'] and d['error'] else 1)" 2>/dev/null; then
		bad "$what: reply lacks '$sub': $(head -c 300 "$T/body")"
	else
		ok
	fi
}
http_bad "negative delay" "negative" POST /v1/tasks '{"kind":"k","in":"-5s"}'
http_bad "absurd delay" "100 years" POST /v1/tasks '{"kind":"k","in":"999999999999d"}'
http_bad "impossible date" "day out of range" POST /v1/tasks '{"kind":"k","at":"2026-02-30T00:00:00Z"}'
http_bad "in and at" "not both" POST /v1/tasks '{"kind":"k","in":"1s","at":"2026-12-01T00:00:00Z"}'
http_bad "empty kind" "empty" POST /v1/tasks '{"kind":""}'
http_bad "long kind" "at most 128" POST /v1/tasks "{\"kind\":\"$(long k 200)\"}"
http_bad "empty key" "empty" POST /v1/tasks '{"kind":"k","key":""}'
http_bad "long key" "at most 512" POST /v1/tasks "{\"kind\":\"k\",\"key\":\"$(long x 600)\"}"
http_bad "NUL in kind" "" POST /v1/tasks '{"kind":"a\u0000b"}'
http_bad "invalid UTF-8" "" POST /v1/tasks "$(printf '{"kind":"k","payload":"\xff"}')"
http_bad "overflowing attempts" "too big integer" POST /v1/tasks '{"kind":"k","max_attempts":99999999999999999999}'
http_bad "unknown field" "bogus" POST /v1/tasks '{"kind":"k","bogus":1}'
http_bad "not an object" "" POST /v1/tasks '[1,2]'
http_bad "unknown state" "BOGUS" GET '/v1/tasks?state=BOGUS'
http_bad "limit zero" "limit" GET '/v1/tasks?limit=0'
http_bad "overflowing id" "id" GET '/v1/tasks/99999999999999999999'
http_bad "negative id" "id" GET '/v1/tasks/-1'
http_bad "bad after" "id" GET '/v1/tasks?after=abc'
n_http=18

after=$(fingerprint)
expect_eq "nothing was written by $n_cli command lines and $n_http HTTP requests" "$before" "$after"
finish
