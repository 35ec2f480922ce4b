#!/usr/bin/env bash
# test_http_kinds.sh - flow control over `due serve`: /v1/kinds read and
# changed (PUT round trip, pause, null removing a limit, DELETE), every bad
# body and path refused with a one-line JSON error that changes nothing,
# 404s and 405s, the per-kind /metrics families, and a task's priority,
# group and time limit through POST and GET /v1/tasks.
#
# No timing assumptions: waits are deadlines (wait_for, curl --max-time).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$T"' EXIT

# expect_error STATUS CODE WHAT [DETAIL] : an {"error","detail"} reply whose
# detail is one line and names DETAIL
expect_error() {
	local st=$1 code=$2 what=$3 sub=${4-} detail
	expect_eq "$what: status" "$st" "$STATUS"
	expect_eq "$what: error" "$code" "$(jf 'j["error"]' 2>/dev/null)"
	detail=$(jf 'j["detail"]' 2>/dev/null || echo MISSING)
	if [ -z "$detail" ] || [ "$detail" = MISSING ]; then
		bad "$what: no detail: $(cat "$T/body")"
	elif [ "$(printf '%s' "$detail" | wc -l)" -ne 0 ]; then
		bad "$what: detail is not one line: $detail"
	elif [ -n "$sub" ] && ! grep -qiF -- "$sub" <<<"$detail"; then
		bad "$what: detail '$detail' lacks '$sub'"
	else
		ok
	fi
}

# settings : the last reply's settings, one line (what a bad PUT must keep)
settings() {
	jf '"%s %s %s %s %s" % (j["paused"], j["rate"], j["max_running"], j["max_running_per_group"], j["timeout"])'
}

# prom NAME LABELS... : the value of one sample of the last /metrics reply
# (labels as k=v), or "none"
prom() {
	python3 - "$T/body" "$@" <<'PY'
import re, sys
name, want = sys.argv[2], dict(a.split("=", 1) for a in sys.argv[3:])
for line in open(sys.argv[1]):
    m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line.rstrip("\n"))
    if not m or m.group(1) != name:
        continue
    labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
    if labels == want:
        print(m.group(3)); sys.exit(0)
print("none")
PY
}

# family_has NAME TYPE : the last /metrics reply has HELP and TYPE for NAME
family_has() {
	if grep -q "^# HELP $1 " "$T/body" && grep -qx "# TYPE $1 $2" "$T/body"; then
		ok
	else
		bad "/metrics: no HELP/TYPE $2 for $1"
	fi
}

"$DUE" init >/dev/null
start_server main --listen 127.0.0.1:0 --threads 2

echo "== empty"
req GET /v1/kinds
expect 200 "GET /v1/kinds with none"
expect_eq "no kinds" "[]" "$(jf 'json.dumps(j)')"
req GET /v1/kinds/mail
expect_error 404 not_found "GET an unknown kind" "mail"
req DELETE /v1/kinds/mail
expect_error 404 not_found "DELETE an unknown kind" "mail"

echo "== PUT then GET"
req PUT /v1/kinds/mail '{"rate":"10/1s","max_running":3,"max_running_per_group":1,"timeout":"30s"}'
expect 200 "PUT /v1/kinds/mail"
expect_eq "PUT reply: the kind" mail "$(jf 'j["kind"]')"
expect_eq "PUT reply: settings" "False 10/1s 3 1 30s" "$(settings)"
expect_eq "PUT reply: live counts" "0 0" "$(jf '"%s %s" % (j["running"], j["rate_used"])')"
req GET /v1/kinds/mail
expect 200 "GET /v1/kinds/mail"
expect_eq "GET: settings as put" "False 10/1s 3 1 30s" "$(settings)"
"$DUE" kind ls --json >"$T/cli_kinds" 2>/dev/null || true
expect_eq "GET is an object of due kind ls --json" \
	"$(python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1]))[0]))' "$T/cli_kinds" 2>/dev/null || echo cli-failed)" \
	"$(jf 'str(sorted(j))')"
req GET /v1/kinds
expect 200 "GET /v1/kinds"
expect_eq "list: one kind" "mail" "$(jf '" ".join(k["kind"] for k in j)')"

echo "== pause, resume, null"
req PUT /v1/kinds/mail '{"paused":true}'
expect 200 "pause"
expect_eq "pause keeps the rest" "True 10/1s 3 1 30s" "$(settings)"
req GET /v1/kinds/mail
expect_eq "GET shows paused" true "$(jf 'j["paused"]')"
"$DUE" kind ls --json >"$T/cli_kinds" 2>/dev/null || true
expect_eq "due kind ls sees the pause" "True" \
	"$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["paused"])' "$T/cli_kinds" 2>/dev/null || echo cli-failed)"
req PUT /v1/kinds/mail '{"max_running_per_group":null,"timeout":null}'
expect 200 "null removes limits"
expect_eq "limits removed, the others kept" "True 10/1s 3 None None" "$(settings)"

echo "== bad bodies change nothing"
req GET /v1/kinds/mail
before=$(settings)
bad_put() { # WHAT BODY DETAIL
	req PUT /v1/kinds/mail "$2"
	expect_error 400 bad_request "$1" "$3"
	req GET /v1/kinds/mail
	expect_eq "$1: nothing changed" "$before" "$(settings)"
}
bad_put "unknown field" '{"paused":false,"bogus":1}' bogus
bad_put "rate without a window" '{"rate":"5"}' rate
bad_put "rate 0/1s" '{"rate":"0/1s"}' rate
bad_put "rate 5/0s" '{"rate":"5/0s"}' rate
bad_put "max_running 0" '{"max_running":0}' max_running
bad_put "max_running a string" '{"max_running":"3"}' max_running
bad_put "max_running negative" '{"max_running":-1}' max_running
bad_put "paused a string" '{"paused":"yes"}' paused
bad_put "rate a number" '{"rate":10}' rate
bad_put "timeout not a duration" '{"timeout":"soon"}' timeout
bad_put "empty object" '{}' ""
bad_put "duplicate key" '{"paused":true,"paused":false}' duplicate
bad_put "not JSON" 'pause it' "malformed JSON"
bad_put "an array" '[{"paused":true}]' "object"
req PUT /v1/kinds/mail
expect_error 400 bad_request "no body" "body"
req GET /v1/kinds/mail
expect_eq "no body: nothing changed" "$before" "$(settings)"
req PUT /v1/kinds/fresh '{"max_running":0}'
expect_error 400 bad_request "bad PUT of a new kind" max_running
req GET /v1/kinds/fresh
expect_error 404 not_found "a bad PUT creates nothing" fresh

echo "== paths and methods"
req PUT /v1/kinds/a%20b '{"paused":true}'
expect_error 400 bad_request "kind with a space" "invalid kind 'a b'"
req GET "/v1/kinds/$(printf 'k%.0s' $(seq 129))"
expect_error 400 bad_request "kind of 129 characters" "at most 128"
req DELETE /v1/kinds/a%2Fb
expect_error 400 bad_request "kind with a slash" "invalid kind"
req GET /v1/kinds/a%00b
expect_error 400 bad_request "kind with an escaped NUL" "NUL"
req GET /v1/kinds
expect_eq "bad paths created nothing" "mail" "$(jf '" ".join(k["kind"] for k in j)')"
req PATCH /v1/kinds/mail '{"paused":true}'
expect_error 405 method_not_allowed "PATCH /v1/kinds/mail"
expect_eq "Allow on a kind" "GET, HEAD, PUT, DELETE" "$(header Allow)"
req POST /v1/kinds '{"kind":"x"}'
expect_error 405 method_not_allowed "POST /v1/kinds"
expect_eq "Allow on the list" "GET, HEAD" "$(header Allow)"
req GET '/v1/kinds?limit=1'
expect_error 400 bad_request "unknown query argument" limit
req DELETE /v1/kinds/mail '{}'
expect_error 400 bad_request "DELETE with a body" "no body"

echo "== /metrics"
req PUT /v1/kinds/sms '{"rate":"100/1m"}'
expect 200 "PUT sms"
req GET /metrics
expect 200 "GET /metrics"
for f in due_kind_paused due_kind_running due_kind_max_running due_kind_rate_limit due_kind_rate_used; do
	family_has "$f" gauge
done
family_has due_kind_held_total counter
expect_eq "mail paused" 1 "$(prom due_kind_paused kind=mail)"
expect_eq "sms not paused" 0 "$(prom due_kind_paused kind=sms)"
expect_eq "mail running" 0 "$(prom due_kind_running kind=mail)"
expect_eq "mail max_running" 3 "$(prom due_kind_max_running kind=mail)"
expect_eq "sms has no max_running" none "$(prom due_kind_max_running kind=sms)"
expect_eq "mail rate limit" 10 "$(prom due_kind_rate_limit kind=mail)"
expect_eq "sms rate limit" 100 "$(prom due_kind_rate_limit kind=sms)"
expect_eq "sms rate used" 0 "$(prom due_kind_rate_used kind=sms)"
for reason in rate max_running group; do
	expect_eq "mail held $reason" 0 "$(prom due_kind_held_total kind=mail reason=$reason)"
done
expect_eq "HELP/TYPE once per family" 0 \
	"$(grep '^# TYPE due_kind' "$T/body" | sort | uniq -d | wc -l)"
# The counts move: a claim that leaves due tasks of a max_running kind
# counts a hold, and the held task says why.
req PUT /v1/kinds/one '{"max_running":1}'
for i in 1 2; do req POST /v1/tasks "{\"kind\":\"one\",\"payload\":\"$i\"}"; done
"$DUE" work --kinds one --handler "one=until [ -f '$T/go' ]; do sleep 0.05; done" \
	--concurrency 2 --poll 50ms \
	--no-cron -q >"$T/work.out" 2>&1 &
WPID=$!
PIDS+=("$WPID")
running_one() { req GET /metrics && [ "$(prom due_kind_running kind=one)" = 1 ]; }
wait_for "one running" 60 running_one
held_one() { req GET /metrics && [ "$(prom due_kind_held_total kind=one reason=max_running)" != 0 ]; }
wait_for "a max_running hold counted" 60 held_one
req GET "/v1/tasks?kind=one&state=SCHEDULED"
WAITING=$(jf 'j[0]["id"]')
req GET "/v1/tasks/$WAITING"
expect_eq "the waiting task says why" max_running "$(jf 'j.get("held")')"
touch "$T/go" # the handlers end: both run, one after the other
both_done() { req GET "/v1/tasks?kind=one&state=DONE" && [ "$(jf 'len(j)')" = 2 ]; }
wait_for "both tasks of one done" 60 both_done
kill "$WPID" 2>/dev/null || true
wait "$WPID" 2>/dev/null || true
req POST /v1/tasks '{"kind":"sms"}'
SMS=$(jf 'j["id"]')
req GET "/v1/tasks/$SMS"
expect_eq "a due task its rate lets through has no held" null "$(jf 'j.get("held")')"
req PUT /v1/kinds/sms '{"paused":true}'
req GET "/v1/tasks/$SMS"
expect_eq "a task of a paused kind is held: paused" paused "$(jf 'j.get("held")')"
req PUT /v1/kinds/sms '{"paused":false}'
expect_eq "resumed" false "$(jf 'j["paused"]')"

echo "== DELETE"
req DELETE /v1/kinds/mail
expect 200 "DELETE /v1/kinds/mail"
expect_eq "DELETE reply" mail "$(jf 'j["removed"]')"
req GET /v1/kinds/mail
expect_error 404 not_found "GET after DELETE" mail
req DELETE /v1/kinds/mail
expect_error 404 not_found "DELETE again" mail
req GET /metrics
expect_eq "no mail series after DELETE" none "$(prom due_kind_paused kind=mail)"
expect_eq "sms series stay" 0 "$(prom due_kind_paused kind=sms)"

echo "== tasks: priority, group, timeout"
req POST /v1/tasks '{"kind":"pg","payload":"x","priority":-7,"group":"cust-42","timeout":"1m30s","in":"1h"}'
expect 201 "POST with priority, group, timeout"
TID=$(jf 'j["id"]')
expect_eq "POST reply" "-7 cust-42 1m30s" "$(jf '"%s %s %s" % (j["priority"], j["group"], j["timeout"])')"
req GET "/v1/tasks/$TID"
expect_eq "GET round trip" "-7 cust-42 1m30s" "$(jf '"%s %s %s" % (j["priority"], j["group"], j["timeout"])')"
req POST /v1/tasks '{"kind":"pg","in":"1h"}'
expect_eq "defaults: priority 0, no group, no timeout" "0 None None" \
	"$(jf '"%s %s %s" % (j["priority"], j.get("group"), j.get("timeout"))')"
req POST /v1/tasks '{"kind":"pg","priority":40000}'
expect_error 400 bad_request "priority out of range" priority
req POST /v1/tasks '{"kind":"pg","priority":"1"}'
expect_error 400 bad_request "priority a string" priority
req POST /v1/tasks '{"kind":"pg","group":""}'
expect_error 400 bad_request "empty group" group
req POST /v1/tasks '{"kind":"pg","timeout":"0s"}'
expect_error 400 bad_request "timeout 0s" timeout
req GET "/v1/tasks?kind=pg"
expect_eq "bad POSTs added nothing" 2 "$(jf 'len(j)')"

finish
