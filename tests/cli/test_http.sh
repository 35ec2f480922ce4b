#!/usr/bin/env bash
# test_http.sh - `due serve` over real HTTP (curl): every route and every
# error path, the Prometheus exposition parsed, token mode, Host/Origin
# checks, a slow client, 200 concurrent requests, and a clean stop.
#
# No timing assumptions: every deadline (wait_for, curl --max-time, the
# Python clients' timeouts) is a 60 s hang guard, and "answered while
# others stall" is shown by order, never by how fast an answer came.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$T"' EXIT
export DUE_MAX_PAYLOAD=4096 # body limit: 2 x 4096 + 65536 = 73728 bytes

# expect_error STATUS CODE WHAT [DETAIL] : an {"error","detail"} reply
expect_error() {
	local st=$1 code=$2 what=$3 sub=${4-}
	expect_eq "$what: status" "$st" "$STATUS"
	expect_eq "$what: error" "$code" "$(jf 'j["error"]' 2>/dev/null)"
	local detail
	detail=$(jf 'j["detail"]' 2>/dev/null || echo MISSING)
	if [ -z "$detail" ] || [ "$detail" = MISSING ]; then
		bad "$what: no detail: $(cat "$T/body")"
	elif [ -n "$sub" ] && ! grep -qF -- "$sub" <<<"$detail"; then
		bad "$what: detail '$detail' lacks '$sub'"
	else
		ok
	fi
}

count() { req GET /v1/stats; jf 'sum(j["counts"].values())'; }

"$DUE" init >/dev/null

echo "== command line"
rc=0
"$DUE" serve --help >"$T/out" || rc=$?
expect_eq "serve --help" 0 "$rc"
grep -q -- '--token-file' "$T/out" && ok || bad "--help lacks --token-file"
expect_err 2 "refusing to listen on 0.0.0.0:7070" "$DUE" serve --listen 0.0.0.0:7070
expect_err 2 "refusing to listen on [::]:0" "$DUE" serve --listen '[::]:0'
expect_err 2 "port must be 0..65535" "$DUE" serve --listen 127.0.0.1:99999
expect_err 2 "invalid --listen" "$DUE" serve --listen 127.0.0.1:
expect_err 2 "in brackets" "$DUE" serve --listen ::1:7070
expect_err 2 "invalid --listen 'no-such-host.invalid:80'" "$DUE" serve --listen no-such-host.invalid:80
expect_err 2 "cannot read '$T/none'" "$DUE" serve --token-file "$T/none"
echo short >"$T/short"
expect_err 2 "16 to 511 characters" "$DUE" serve --token-file "$T/short"
expect_err 2 "unknown option '--json'" "$DUE" serve --json
expect_err 2 "unexpected argument" "$DUE" serve extra
expect_err 2 "--threads" "$DUE" serve --threads 0
expect_err 2 "--timeout" "$DUE" serve --timeout 10ms
expect_err 6 "due init" env DUE_DB="sqlite:$T/fresh.db" "$DUE" serve --listen 127.0.0.1:0

# --timeout: the stalled clients below must stay connected for as long as
# the test takes to show it is answered beside them, however slow the
# machine (the default idle timeout is 30 s).
start_server main --listen 127.0.0.1:0 --threads 4 --timeout 10m
PORT=${URL##*:}
expect_err 5 "cannot listen on 127.0.0.1:$PORT" "$DUE" serve --listen "127.0.0.1:$PORT"

echo "== health, stats, routing"
req GET /health
expect 200 "health UP"
expect_eq "health body" '{"status": "UP"}' "$(jf 'json.dumps(j)')"
STATUS=$(curl -s -I -o "$T/hdr" -w '%{http_code}' --max-time 60 "$URL/health")
expect 200 "HEAD /health"
expect_eq "HEAD has the GET length" 21 "$(header Content-Length)"
req GET /v1/stats
expect 200 "stats"
"$DUE" stats --json >"$T/cli_stats"
expect_eq "stats keys as due stats --json" \
	"$(python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1]))))' "$T/cli_stats")" \
	"$(jf 'str(sorted(j))')"
expect_eq "stats: workers keys as due stats --json" \
	"$(python3 -c 'import json,sys; print(sorted(json.load(open(sys.argv[1]))["workers"]))' "$T/cli_stats")" \
	"$(jf 'str(sorted(j["workers"]))')"
# A small SQLite store counts exactly and nothing was pruned.
expect_eq "stats: estimated [] and pruned 0" "[] 0" \
	"$(jf '"%s %s" % (json.dumps(j["estimated"]), j["workers"]["pruned"])')"
req GET /nope
expect_error 404 not_found "unknown route" "no route GET /nope"
req PATCH /v1/tasks
expect_error 405 method_not_allowed "PATCH /v1/tasks"
expect_eq "Allow header" "POST, GET, HEAD" "$(header Allow)"
req PUT /v1/stats
expect_error 405 method_not_allowed "PUT /v1/stats"
req GET "/v1/stats?x=1"
expect_error 400 bad_request "unknown query parameter" "unknown query parameter 'x'"
req GET "/v1/schedules/$(printf 'a%.0s' $(seq 300))"
expect_error 400 bad_request "overlong path segment"

echo "== POST /v1/tasks"
req POST /v1/tasks '{"kind":"email","payload":"hello","in":"1h","max_attempts":3,"backoff":"2s","backoff_cap":"1m","key":"k-1"}'
expect 201 "create"
ID=$(jf 'j["id"]')
expect_eq "Location" "/v1/tasks/$ID" "$(header Location)"
expect_eq "created fields" "email hello SCHEDULED 3 2000 60000 k-1 False" \
	"$(jf '" ".join(str(x) for x in [j["kind"], j["payload"], j["state"], j["max_attempts"], j["backoff_ms"], j["backoff_cap_ms"], j["key"], j["existed"]])')"
req POST /v1/tasks '{"kind":"email","payload":"again","key":"k-1"}'
expect 200 "same live key"
expect_eq "same key returns the live task" "$ID True hello" "$(jf '"%s %s %s" % (j["id"], j["existed"], j["payload"])')"
req POST /v1/tasks '{"kind":"bin","payload_b64":"AAEC/w==","at":"2030-01-01T00:00:00Z"}'
expect 201 "create with payload_b64 and at"
BIN=$(jf 'j["id"]')
expect_eq "binary payload round-trips" "AAEC/w== 2030-01-01T00:00:00.000Z" "$(jf 'j["payload_b64"] + " " + j["due_at"]')"
req POST /v1/tasks '{"kind":"plain"}'
expect 201 "create with defaults"
expect_eq "defaults" "5 1000 " "$(jf '"%s %s %s" % (j["max_attempts"], j["backoff_ms"], j["payload"])')"
before=$(count)

bad_post() { # BODY DETAIL [STATUS CODE]
	req POST /v1/tasks "$1"
	expect_error "${3:-400}" "${4:-bad_request}" "POST $1" "$2"
}
bad_post '{"kind":' "malformed JSON"
bad_post '[1,2]' "must be a JSON object"
bad_post '"email"' "must be a JSON object"
bad_post '{"kind":"a"} x' "malformed JSON"
bad_post '{"kind":"a","kind":"b"}' "duplicate"
bad_post '{"kind":"a","max_attemps":3}' "unknown field 'max_attemps'"
bad_post '{"payload":"x"}' "'kind' (a string) is required"
bad_post '{"kind":7}' "'kind' (a string) is required"
bad_post '{"kind":"bad kind!"}' "invalid kind"
bad_post '{"kind":"a","payload":5}' "'payload' must be a string"
bad_post '{"kind":"a","payload":"x","payload_b64":"eA=="}' "not both"
bad_post '{"kind":"a","payload_b64":"***"}' "not valid base64"
bad_post '{"kind":"a","payload":"nul\u0000byte"}' "malformed JSON"
bad_post '{"kind":"a","in":"1h","at":"2030-01-01T00:00:00Z"}' "'in' or 'at', not both"
bad_post '{"kind":"a","in":"soon"}' "'in':"
bad_post '{"kind":"a","in":"-5s"}' "'in':"
bad_post '{"kind":"a","in":5}' "'in' must be a string"
bad_post '{"kind":"a","at":"tomorrow"}' "'at':"
bad_post '{"kind":"a","max_attempts":"3"}' "'max_attempts' must be an integer"
bad_post '{"kind":"a","max_attempts":1.5}' "'max_attempts' must be an integer"
bad_post '{"kind":"a","max_attempts":0}' "from 1 to 1000"
bad_post '{"kind":"a","max_attempts":5000}' "from 1 to 1000"
bad_post '{"kind":"a","backoff":"fast"}' "'backoff':"
bad_post '{"kind":"a","backoff_cap":10}' "'backoff_cap' must be a duration"
bad_post '{"kind":"a","key":["k"]}' "'key' must be a string"
req POST /v1/tasks ''
expect_error 400 bad_request "empty body" "JSON object body is required"
python3 -c 'import json; print(json.dumps({"kind": "big", "payload": "x" * 5000}))' >"$T/big.json"
req POST /v1/tasks "@$T/big.json"
expect_error 413 too_large "payload over DUE_MAX_PAYLOAD"
head -c 100000 /dev/zero | tr '\0' 'x' >"$T/huge"
req POST /v1/tasks "@$T/huge"
expect_error 413 too_large "body over the limit (Content-Length)" "request body over 73728 bytes"
req POST /v1/tasks "@$T/huge" -H 'Transfer-Encoding: chunked'
expect_error 413 too_large "body over the limit (chunked)"
expect_eq "bad input changed nothing" "$before" "$(count)"

echo "== GET /v1/tasks/{id}"
req GET "/v1/tasks/$ID"
expect 200 "get"
"$DUE" show "$ID" --json >"$T/show.json"
if cmp -s "$T/body" "$T/show.json"; then ok; else bad "GET /v1/tasks/$ID differs from due show --json: $(diff "$T/body" "$T/show.json")"; fi
req GET /v1/tasks/999999
expect_error 404 not_found "unknown id"
for badid in abc 0 -1 1x 99999999999999999999 +5; do
	req GET "/v1/tasks/$badid"
	expect_error 400 bad_request "id '$badid'" "invalid task id"
done

echo "== GET /v1/tasks (paging)"
for i in 1 2 3 4 5; do
	req POST /v1/tasks "{\"kind\":\"page\",\"payload\":\"p$i\",\"in\":\"1h\"}"
done
req GET "/v1/tasks?kind=page&limit=2"
expect 200 "page 1"
expect_eq "page 1 payloads" "p1 p2" "$(jf '" ".join(t["payload"] for t in j)')"
NEXT=$(header X-Next-After)
expect_eq "X-Next-After" "$(jf 'j[1]["id"]')" "$NEXT"
expect_eq "Link" "</v1/tasks?kind=page&limit=2&after=$NEXT>; rel=\"next\"" "$(header Link)"
req GET "/v1/tasks?kind=page&limit=2&after=$NEXT"
expect_eq "page 2 payloads" "p3 p4" "$(jf '" ".join(t["payload"] for t in j)')"
req GET "/v1/tasks?kind=page&limit=2&after=$(header X-Next-After)"
expect_eq "page 3 payloads" "p5" "$(jf '" ".join(t["payload"] for t in j)')"
expect_eq "no next page" "" "$(header X-Next-After)"
req GET "/v1/tasks?state=scheduled&kind=page"
expect_eq "state filter, case-insensitive" 5 "$(jf 'len(j)')"
req GET "/v1/tasks?state=DONE&kind=page"
expect_eq "empty list" "[]" "$(jf 'json.dumps(j)')"
req GET "/v1/tasks?state=bogus"
expect_error 400 bad_request "bad state" "invalid state 'bogus'"
for q in limit=0 limit=10001 limit=abc after=-1 after=x; do
	req GET "/v1/tasks?$q"
	expect_error 400 bad_request "list $q" "invalid ${q%%=*}"
done
req GET "/v1/tasks?kind=bad%20kind"
expect_error 400 bad_request "list bad kind" "invalid kind"
req GET "/v1/tasks?sort=id"
expect_error 400 bad_request "list unknown parameter" "unknown query parameter 'sort'"

echo "== DELETE /v1/tasks/{id}"
req POST /v1/tasks '{"kind":"c","in":"1h"}'
CID=$(jf 'j["id"]')
req DELETE "/v1/tasks/$CID"
expect 200 "cancel"
expect_eq "cancel outcome" "CANCELLED $CID" "$(jf '"%s %s" % (j["outcome"], j["id"])')"
req DELETE "/v1/tasks/$CID"
expect_eq "cancel again" ALREADY_CANCELLED "$(jf 'j["outcome"]')"
req DELETE /v1/tasks/999999
expect_error 404 not_found "cancel unknown"
expect_eq "cancel unknown outcome" NOT_FOUND "$(jf 'j["outcome"]')"
req DELETE "/v1/tasks/$ID" '{"x":1}'
expect_error 400 bad_request "DELETE with a body" "takes no body"
req DELETE /v1/tasks/zero
expect_error 400 bad_request "cancel bad id"

echo "== operator actions"
req POST /v1/tasks '{"kind":"op","in":"1h"}'
OID=$(jf 'j["id"]')
req POST "/v1/tasks/$OID/kill"
expect 200 "kill"
expect_eq "killed" DEAD "$(jf 'j["state"]')"
req GET /health
expect 503 "health DOWN"
expect_eq "health DOWN body" "DOWN 1" "$(jf '"%s %s" % (j["status"], j["dead"])')"
req POST "/v1/tasks/$OID/retry" '{}'
expect 200 "retry"
expect_eq "retried" SCHEDULED "$(jf 'j["state"]')"
req GET /health
expect 200 "health UP again"
req POST "/v1/tasks/$OID/retry"
expect_error 409 wrong_state "retry SCHEDULED"
req POST "/v1/tasks/$OID/requeue"
expect_error 409 wrong_state "requeue SCHEDULED"
req POST "/v1/tasks/$CID/kill"
expect_error 409 wrong_state "kill CANCELLED"
for op in retry requeue kill; do
	req POST "/v1/tasks/999999/$op"
	expect_error 404 not_found "$op unknown"
	req POST "/v1/tasks/x/$op"
	expect_error 400 bad_request "$op bad id"
done
req POST "/v1/tasks/$OID/kill" '{"force":true}'
expect_error 400 bad_request "kill with unknown field" "unknown field 'force'"
req POST "/v1/tasks/$OID/kill" '{'
expect_error 400 bad_request "kill with malformed body" "malformed JSON"
req GET "/v1/tasks/$OID"
expect_eq "refused actions changed nothing" SCHEDULED "$(jf 'j["state"]')"
req DELETE "/v1/tasks/$OID"

# requeue needs a running try: a worker whose handler runs until the test
# releases it (never: the kill below stops it), so it is still running
# when requeued however slow the machine.
req POST /v1/tasks '{"kind":"slow"}'
SID=$(jf 'j["id"]')
"$DUE" work --kinds slow --exec "until [ -e '$T/release-slow' ]; do sleep 0.05; done" \
	--poll 100ms --no-cron --grace 1s --kill-grace 200ms -q >"$T/work.out" 2>&1 &
WPID=$!
PIDS+=("$WPID")
claimed() { req GET "/v1/tasks/$SID"; [ "$(jf 'j["state"]')" = CLAIMED ]; }
wait_for "slow task claimed" 60 claimed
req POST "/v1/tasks/$SID/requeue"
expect 200 "requeue CLAIMED"
expect_eq "requeue recorded" REQUEUED "$(jf 'j["attempts"][0]["outcome"]')"
req POST "/v1/tasks/$SID/kill"
expect 200 "kill live task"
expect_eq "killed live task" DEAD "$(jf 'j["state"]')"
kill "$WPID"
wait "$WPID" 2>/dev/null || true
touch "$T/release-slow" # in case a handler outlived its worker
req POST "/v1/tasks/$SID/retry"
expect 200 "retry after kill"
req DELETE "/v1/tasks/$SID"
expect_eq "cancel retried" CANCELLED "$(jf 'j["outcome"]')"

echo "== schedules"
req GET /v1/schedules
expect_eq "no schedules" "[]" "$(jf 'json.dumps(j)')"
req PUT /v1/schedules/nightly '{"expr":"0 2 * * *","kind":"report","tz":"Europe/Berlin","payload":"{}","misfire":"once","overlap":"wait","max_attempts":2,"backoff":"5s"}'
expect 201 "create schedule"
expect_eq "schedule fields" "nightly 0 2 * * * Europe/Berlin once wait 2 5000 {}" \
	"$(jf '" ".join(str(j[k]) for k in ["name","expr","tz","misfire","overlap","max_attempts","backoff_ms","payload"])')"
expect_eq "next fire at 02:00 Berlin" "02:00:00" "$(jf 'j["next_fire_local"][11:19]')"
req PUT /v1/schedules/nightly '{"name":"nightly","expr":"30 3 * * *","kind":"report"}'
expect 200 "replace schedule"
expect_eq "replaced" "30 3 * * * UTC" "$(jf 'j["expr"] + " " + j["tz"]')"
req GET /v1/schedules/nightly
expect 200 "get schedule"
req GET /v1/schedules
expect_eq "one schedule" 1 "$(jf 'len(j)')"
"$DUE" cron ls --json >"$T/cron.json"
missing=$(python3 - "$T/cron.json" "$T/body" <<'PY'
import json, sys
cli, http = json.load(open(sys.argv[1]))[0], json.load(open(sys.argv[2]))[0]
print(" ".join(k for k in cli if k not in http or http[k] != cli[k]))
PY
)
expect_eq "schedule JSON as due cron ls --json" "" "$missing"
bad_put() { # NAME BODY DETAIL
	req PUT "/v1/schedules/$1" "$2"
	expect_error 400 bad_request "PUT $1 $2" "$3"
}
bad_put x '{"expr":"0 2 * * *"}' "'kind' (a string) is required"
bad_put x '{"kind":"r"}' "'expr' (a string) is required"
bad_put x '{"expr":"61 * * * *","kind":"r"}' "invalid cron expression"
bad_put x '{"expr":"@hourly","kind":"r","tz":"Mars/Olympus"}' "Mars/Olympus"
bad_put x '{"expr":"@hourly","kind":"r","misfire":"sometimes"}' "'misfire' must be"
bad_put x '{"expr":"@hourly","kind":"r","overlap":1}' "'overlap' must be a string"
bad_put x '{"expr":"@hourly","kind":"r","every":"1h"}' "unknown field 'every'"
bad_put x '{"name":"y","expr":"@hourly","kind":"r"}' "differs from the name"
bad_put 'bad%20name' '{"expr":"@hourly","kind":"r"}' "invalid schedule name"
bad_put x '{"expr":"@hourly","kind":"r","max_attempts":0}' "from 1 to 1000"
bad_put x 'nope' "malformed JSON"
req GET /v1/schedules
expect_eq "bad schedules changed nothing" 1 "$(jf 'len(j)')"
req GET /v1/schedules/x
expect_error 404 not_found "get unknown schedule"
req DELETE /v1/schedules/nightly
expect 200 "delete schedule"
expect_eq "removed" nightly "$(jf 'j["removed"]')"
req DELETE /v1/schedules/nightly
expect_error 404 not_found "delete unknown schedule"

echo "== metrics"
# Some history: one done, one dead (a failing handler), for the histograms.
req POST /v1/tasks '{"kind":"m.ok","payload":"1"}'
req POST /v1/tasks '{"kind":"m.bad","max_attempts":1}'
MBAD=$(jf 'j["id"]')
"$DUE" work --kinds m.ok,m.bad --handler m.ok=cat --handler 'm.bad=exit 1' --once \
	--no-cron -q >/dev/null 2>&1 || true
req PUT /v1/schedules/hourly '{"expr":"@hourly","kind":"r"}'
req GET /v1/metrics
WINDOW=$(jf 'j["window_s"]')
req GET /metrics
expect 200 "GET /metrics"
expect_eq "metrics content type" "text/plain; version=0.0.4; charset=utf-8" "$(header Content-Type)"
if python3 - "$T/body" "$WINDOW" >"$T/prom.out" 2>&1 <<'PY'; then ok; else bad "exposition format: $(cat "$T/prom.out")"; fi
# A small parser of the Prometheus text format (0.0.4): HELP/TYPE before
# samples, one TYPE per family, valid names and labels, float values,
# histograms cumulative with +Inf == _count, and the families we promise.
import math, re, sys
name_re = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*$')
sample_re = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
label_re = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')
types, helps, samples, errors = {}, {}, [], []
for n, line in enumerate(open(sys.argv[1]).read().split("\n"), 1):
    if not line:
        continue
    if line.startswith("# HELP ") or line.startswith("# TYPE "):
        parts = line.split(" ", 3)
        if len(parts) < 4 or not name_re.match(parts[2]):
            errors.append("line %d: bad %s" % (n, line)); continue
        d = helps if parts[1] == "HELP" else types
        if parts[2] in d: errors.append("line %d: second %s for %s" % (n, parts[1], parts[2]))
        if parts[1] == "TYPE" and parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
            errors.append("line %d: bad type %s" % (n, parts[3]))
        d[parts[2]] = parts[3]
        continue
    if line.startswith("#"):
        continue
    m = sample_re.match(line)
    if not m:
        errors.append("line %d: bad sample %r" % (n, line)); continue
    name, labels, value = m.group(1), {}, m.group(4)
    body = m.group(3) or ""
    pos = 0
    while pos < len(body):
        lm = label_re.match(body, pos)
        if not lm: errors.append("line %d: bad labels %r" % (n, body)); break
        labels[lm.group(1)] = lm.group(2); pos = lm.end()
    try: v = float(value)
    except ValueError: errors.append("line %d: bad value %r" % (n, value)); continue
    base = re.sub(r'_(bucket|sum|count)$', '', name)
    fam = base if types.get(base) == "histogram" else name
    if fam not in types or fam not in helps:
        errors.append("line %d: %s has no TYPE/HELP before it" % (n, name))
    if types.get(fam) == "counter" and (v < 0 or math.isnan(v)):
        errors.append("line %d: negative counter" % n)
    samples.append((fam, name, labels, v))
for fam, t in types.items():
    if t != "histogram": continue
    buckets = [(s[2]["le"], s[3]) for s in samples if s[1] == fam + "_bucket"]
    count = [s[3] for s in samples if s[1] == fam + "_count"]
    total = [s[3] for s in samples if s[1] == fam + "_sum"]
    if not buckets or buckets[-1][0] != "+Inf" or len(count) != 1 or len(total) != 1:
        errors.append("%s: needs buckets ending in +Inf, one _sum, one _count" % fam); continue
    les = [float(b[0]) for b in buckets]
    if les != sorted(les): errors.append("%s: le not increasing" % fam)
    vals = [b[1] for b in buckets]
    if any(vals[i] > vals[i + 1] for i in range(len(vals) - 1)):
        errors.append("%s: buckets not cumulative: %s" % (fam, vals))
    if vals[-1] != count[0]: errors.append("%s: +Inf %s != _count %s" % (fam, vals[-1], count[0]))
want = {"due_tasks": "gauge", "due_tasks_by_state": "gauge", "due_dead_letters": "gauge",
        "due_oldest_due_unclaimed_seconds": "gauge", "due_lateness_seconds": "histogram",
        "due_handler_duration_seconds": "histogram", "due_attempts_total": "counter",
        "due_worker_empty_polls_total": "counter", "due_worker_claim_queries_total": "counter",
        "due_workers": "gauge", "due_schedules": "gauge",
        "due_tasks_pruned_total": "counter", "due_task_count_estimated": "gauge",
        "due_task_count_by_kind_estimated": "gauge"}
for k, t in want.items():
    if types.get(k) != t: errors.append("family %s: type %s, want %s" % (k, types.get(k), t))
outcomes = {s[2].get("outcome") for s in samples if s[1] == "due_attempts_total"}
for o in ("done", "failed", "lease_lost", "cancelled", "rejected_stale", "requeued", "killed", "timed_out"):
    if o not in outcomes: errors.append("no due_attempts_total{outcome=%s}" % o)
def val(name, **lab):
    return [s[3] for s in samples if s[1] == name and all(s[2].get(k) == v for k, v in lab.items())]
checks = [("dead letters", val("due_dead_letters"), [1.0]),
          ("m.bad dead", val("due_tasks", kind="m.bad", state="dead"), [1.0]),
          ("m.ok done", val("due_tasks", kind="m.ok", state="done"), [1.0]),
          ("schedules", val("due_schedules"), [1.0])]
for what, got, exp in checks:
    if got != exp: errors.append("%s: %s, expected %s" % (what, got, exp))
if val("due_lateness_seconds_count")[0] < 2: errors.append("lateness histogram empty")
# A small SQLite store: every count exact, nothing pruned by retention.
states = ["scheduled", "claimed", "done", "cancelled", "dead"]
for fam in ("due_task_count_estimated", "due_task_count_by_kind_estimated"):
    got = sorted((s[2].get("state"), s[3]) for s in samples if s[1] == fam)
    if got != sorted((st, 0.0) for st in states):
        errors.append("%s: %s, expected 0 for each state" % (fam, got))
if val("due_tasks_pruned_total") != [0.0]: errors.append("due_tasks_pruned_total: %s" % val("due_tasks_pruned_total"))
# The histograms and outcomes say their window (/v1/metrics window_s).
window = sys.argv[2]
want_help = ("the attempts history" if window == "null"
             else "claimed in the last %d minutes" % (int(window) // 60))
for fam in ("due_lateness_seconds", "due_handler_duration_seconds", "due_attempts_total"):
    if want_help not in helps.get(fam, ""):
        errors.append("%s HELP %r lacks %r" % (fam, helps.get(fam), want_help))
if val("due_attempts_total", outcome="done")[0] < 1: errors.append("no done attempts")
if val("due_attempts_total", outcome="failed")[0] < 1: errors.append("no failed attempts")
print("\n".join(errors) or "ok: %d samples in %d families" % (len(samples), len(types)))
sys.exit(1 if errors else 0)
PY
req GET /v1/metrics
expect 200 "GET /v1/metrics"
expect_eq "metrics JSON" "DOWN 1 15 15 False" \
	"$(jf '"%s %s %s %s %s" % (j["health"]["status"], j["health"]["dead"], len(j["lateness"]["buckets"]), len(j["done_per_min"]), j["auth_required"])')"
expect_eq "metrics JSON: nothing estimated, nothing pruned" "[] 0 True" \
	"$(jf '"%s %s %s" % (json.dumps(j["stats"]["estimated"]), j["pruned"], all(k["estimated"] == [] for k in j["kinds"]) and len(j["kinds"]) >= 2)')"
expect_eq "metrics JSON: window_s is 900 (or null: whole history)" true "$(jf 'j["window_s"] in (None, 900)')"
# Exact counts: each state's count is the number of tasks listed in it,
# and each kind's counts add up to the totals.
cp "$T/body" "$T/vmetrics"
for st in SCHEDULED CLAIMED DONE CANCELLED DEAD; do
	req GET "/v1/tasks?state=$st&limit=10000"
	expect_eq "exact count of $st" "$(jf 'len(j)')" \
		"$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["stats"]["counts"][sys.argv[2]])' "$T/vmetrics" "$st")"
done
expect_eq "per-kind counts add up to the totals" True \
	"$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(all(sum(k["counts"][s] for k in j["kinds"]) == j["stats"]["counts"][s] for s in j["stats"]["counts"]))' "$T/vmetrics")"
req POST "/v1/tasks/$MBAD/retry"
req DELETE "/v1/tasks/$MBAD"
req DELETE /v1/schedules/hourly

echo "== dashboard"
req GET /
expect 200 "GET /"
expect_eq "dashboard content type" "text/html; charset=utf-8" "$(header Content-Type)"
grep -q '<title>due dashboard</title>' "$T/body" && ok || bad "dashboard title missing"
header Content-Security-Policy | has "default-src 'none'" && ok || bad "no CSP header"
if grep -Eo '(src|href|action)="[^"]*"' "$T/body" | has .; then
	bad "dashboard loads assets: $(grep -Eo '(src|href|action)="[^"]*"' "$T/body")"
else ok; fi
if grep -Eo 'https?://[^" )]*' "$T/body" | grep -v '^http://www.w3.org/2000/svg$' | has .; then
	bad "dashboard names a network address"
else ok; fi

echo "== Host and Origin checks"
req GET /health "" -H 'Host: evil.example:7070'
expect_error 403 forbidden "foreign Host (DNS rebinding)" "not a loopback name"
req GET /health "" -H "Host: localhost:$PORT"
expect 200 "Host localhost"
req POST /v1/tasks '{"kind":"o"}' -H 'Origin: http://evil.example'
expect_error 403 forbidden "cross-origin POST" "cross-origin"
req POST /v1/tasks '{"kind":"o","in":"1h"}' -H "Origin: $URL"
expect 201 "same-origin POST"
req DELETE "/v1/tasks/$(jf 'j["id"]')" "" -H 'Origin: null'
expect_error 403 forbidden "opaque origin DELETE"

echo "== slow clients and concurrency"
python3 - "$PORT" "$URL" >"$T/slow.out" 2>&1 <<'PY' && ok || bad "slow clients blocked others: $(cat "$T/slow.out")"
# 50 clients each send half a request and stall (more than the threads);
# meanwhile complete requests must still be answered.  Shown by order, not
# by speed: each answer comes while every stalled request is still held
# open by the server (no reply, no close), so none had to end first.
import socket, sys, urllib.request
port, url = int(sys.argv[1]), sys.argv[2]
stalled = []
for i in range(50):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"ki")
    stalled.append(s)
half = socket.create_connection(("127.0.0.1", port))
half.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0")
stalled.append(half)
def still_pending(s):  # no reply, no close: the server still holds it
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)
        return False  # a reply or the end of the connection
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)
for i in range(20):
    with urllib.request.urlopen(url + "/v1/stats", timeout=60) as r:
        assert r.status == 200
    ended = [n for n, s in enumerate(stalled) if not still_pending(s)]
    assert not ended, "answer %d came after stalled requests %s ended" % (i, ended)
for s in stalled:
    s.close()
print("ok")
PY
before=$(count)
python3 - "$URL" >"$T/conc.out" 2>&1 <<'PY' && ok || bad "concurrent requests: $(cat "$T/conc.out")"
# 200 requests at once (half POSTs, half GETs), each on its own connection.
import json, sys, threading, urllib.request
url = sys.argv[1]
results, barrier = [], threading.Barrier(200)
def one(i):
    barrier.wait()
    try:
        if i % 2:
            req = urllib.request.Request(url + "/v1/tasks", method="POST",
                data=json.dumps({"kind": "conc", "payload": str(i), "in": "1h"}).encode())
        else:
            req = urllib.request.Request(url + "/v1/stats")
        with urllib.request.urlopen(req, timeout=60) as r:
            results.append(r.status)
    except Exception as e:
        results.append(repr(e))
threads = [threading.Thread(target=one, args=(i,)) for i in range(200)]
for t in threads: t.start()
for t in threads: t.join()
bad = [r for r in results if r not in (200, 201)]
print("%d ok, bad: %s" % (len(results) - len(bad), bad[:5]))
sys.exit(1 if bad or len(results) != 200 else 0)
PY
expect_eq "100 concurrent POSTs stored" "$((before + 100))" "$(count)"

echo "== token mode"
TOKEN=0123456789abcdef-token-for-tests
printf '%s\n' "$TOKEN" >"$T/token"
chmod 600 "$T/token"
MAIN_URL=$URL
start_server tok --listen 127.0.0.1:0 --token-file "$T/token"
req POST /v1/tasks '{"kind":"t","in":"1h"}'
expect_error 401 unauthorized "POST without token" "Authorization: Bearer"
header WWW-Authenticate | has Bearer && ok || bad "no WWW-Authenticate"
req POST /v1/tasks '{"kind":"t","in":"1h"}' -H "Authorization: Bearer wrong-token-0123456789"
expect_error 401 unauthorized "POST with a wrong token" "invalid bearer token"
req POST /v1/tasks '{"kind":"t","in":"1h"}' -H "Authorization: Bearer ${TOKEN}x"
expect_error 401 unauthorized "POST with a longer token"
req POST /v1/tasks '{"kind":"t","in":"1h"}' -H "Authorization: Basic $TOKEN"
expect_error 401 unauthorized "Basic instead of Bearer"
req POST /v1/tasks '{"kind":"t","in":"1h"}' -H "Authorization: Bearer $TOKEN"
expect 201 "POST with the token"
TID=$(jf 'j["id"]')
req GET "/v1/tasks/$TID"
expect 200 "GET needs no token"
req DELETE "/v1/tasks/$TID"
expect_error 401 unauthorized "DELETE without token"
req PUT /v1/schedules/s '{"expr":"@daily","kind":"r"}'
expect_error 401 unauthorized "PUT without token"
req POST "/v1/tasks/$TID/kill"
expect_error 401 unauthorized "kill without token"
req GET "/v1/tasks/$TID"
expect_eq "refused changes changed nothing" SCHEDULED "$(jf 'j["state"]')"
req DELETE "/v1/tasks/$TID" "" -H "Authorization: Bearer $TOKEN"
expect_eq "DELETE with the token" CANCELLED "$(jf 'j["outcome"]')"
req GET /v1/metrics
expect_eq "auth_required reported" true "$(jf 'json.dumps(j["auth_required"])')"
kill -TERM "$SPID"
rc=0
wait "$SPID" || rc=$?
expect_eq "token server exits 0 on SIGTERM" 0 "$rc"
start_server any --listen 0.0.0.0:0 --token-file "$T/token"
URL="http://127.0.0.1:${URL##*:}"
req GET /health "" -H 'Host: some.name.example'
expect 200 "non-loopback bind with a token serves (no Host check)"
req POST /v1/tasks '{"kind":"t"}'
expect_error 401 unauthorized "non-loopback bind: POST without token"
kill -TERM "$SPID"
wait "$SPID" || bad "non-loopback server exit"

echo "== stop"
URL=$MAIN_URL
MAIN_PID=${PIDS[0]}
kill -TERM "$MAIN_PID"
rc=0
wait "$MAIN_PID" || rc=$?
expect_eq "SIGTERM exits 0" 0 "$rc"
grep -q "stopping" "$T/main.err" && ok || bad "no stop message: $(cat "$T/main.err")"
if grep -v -e 'due serve: store ' -e 'stopping' "$T/main.err" | has .; then
	bad "unexpected server messages: $(cat "$T/main.err")"
else ok; fi
finish
