#!/usr/bin/env bash
# test_http_work.sh - the worker API of `due serve`: POST /v1/claims (with
# its long poll woken by a submit, not by its deadline), complete, fail and
# extend fenced by the attempt (409 rejected_stale after a requeue, nothing
# changed), a batch of completions with a stale item, bad input (400 naming the field, nothing changed), the bearer
# token, and examples/http_worker.py against the server.
#
# No timing assertions: a long poll "woken by the submit" is shown by the
# poll asking for 50 s and the claimed task coming back, with a 40 s hang
# guard on the client.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; rm -rf "$T"' EXIT
EX=$(cd "$(dirname "$0")/../../examples" && pwd)
"$DUE" init >/dev/null
start_server main --listen 127.0.0.1:0
field() { "$DUE" show "$1" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['$2'])"; }

echo "== claim, complete"
a=$("$DUE" add w --payload hello)
req POST /v1/claims '{"kinds": ["w"], "limit": 16, "lease": "30s"}'
expect 200 "claim"
expect_eq "one task claimed" "$a 1 hello task-$a" "$(jf '" ".join(str(x) for x in (j[0]["id"], j[0]["attempt"], j[0]["payload"], j[0]["idempotency_key"]))')"
expect_eq "CLAIMED in the store" CLAIMED "$(field "$a" state)"
req POST /v1/claims '{"kinds": ["w"]}'
expect_eq "nothing more: []" "[]" "$(jf 'j')"
req POST "/v1/tasks/$a/extend" '{"attempt": 1, "lease": "1m"}'
expect_eq "extend" "200 OK" "$STATUS $(jf 'j["outcome"]')"
req POST "/v1/tasks/$a/complete" '{"attempt": 1, "result": "done!"}'
expect_eq "complete" "200 DONE" "$STATUS $(jf 'j["outcome"]')"
expect_eq "result stored" "DONE done!" "$(field "$a" state) $(field "$a" result)"
req POST "/v1/tasks/$a/complete" '{"attempt": 1, "result": "again"}'
expect_eq "a second complete is stale" "409 rejected_stale" "$STATUS $(jf 'j["error"]')"
expect_eq "result unchanged" "done!" "$(field "$a" result)"

echo "== fail"
f=$("$DUE" add w --max-attempts 2 --backoff 1h)
req POST /v1/claims '{"kinds": ["w"], "limit": 4}'
req POST "/v1/tasks/$f/fail" '{"attempt": 1, "error": "no stock"}'
expect_eq "fail with attempts left" "200 RETRY_SCHEDULED" "$STATUS $(jf 'j["outcome"]')"
expect_eq "last_error" "SCHEDULED no stock" "$(field "$f" state) $(field "$f" last_error)"

echo "== fencing after a requeue"
s=$("$DUE" add fence)
req POST /v1/claims '{"kinds": ["fence"]}'
expect_eq "claimed" "$s" "$(jf 'j[0]["id"]')"
"$DUE" requeue "$s" >/dev/null
req POST /v1/claims '{"kinds": ["fence"]}'
expect_eq "claimed again, attempt 2" "2" "$(jf 'j[0]["attempt"]')"
for op in 'complete {"attempt": 1, "result": "late"}' 'fail {"attempt": 1, "error": "late"}' \
	'extend {"attempt": 1, "lease": "1m"}'; do
	req POST "/v1/tasks/$s/${op%% *}" "${op#* }"
	expect_eq "stale ${op%% *}" "409 rejected_stale" "$STATUS $(jf 'j["error"]')"
done
expect_eq "the stale calls changed nothing" "CLAIMED 2 None None" \
	"$(field "$s" state) $(field "$s" attempt) $(field "$s" result) $(field "$s" last_error)"
req POST "/v1/tasks/$s/complete" '{"attempt": 2}'
expect_eq "the holder completes" "200 DONE" "$STATUS $(jf 'j["outcome"]')"

echo "== completions in one transaction, each item fenced"
c1=$("$DUE" add batch --payload 1)
c2=$("$DUE" add batch --payload 2)
req POST /v1/claims '{"kinds": ["batch"], "limit": 2}'
expect_eq "both claimed" 2 "$(jf 'len(j)')"
"$DUE" requeue "$c2" >/dev/null
req POST /v1/completions "{\"items\": [{\"id\": $c1, \"attempt\": 1, \"result\": \"r1\"}, {\"id\": $c2, \"attempt\": 1, \"result\": \"r2\"}]}"
expect_eq "per-item outcomes" "200 DONE REJECTED_STALE" "$STATUS $(jf '" ".join(x["outcome"] for x in j)')"
expect_eq "the fresh one done, the stale one untouched" "DONE r1 SCHEDULED None" \
	"$(field "$c1" state) $(field "$c1" result) $(field "$c2" state) $(field "$c2" result)"

echo "== long poll woken by a submit"
python3 - "$URL" >"$T/poll.out" 2>&1 <<'PY' &
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/claims", method="POST",
    data=json.dumps({"kinds": ["late"], "wait": "50s"}).encode(),
    headers={"Content-Type": "application/json"})
print(json.dumps(json.load(urllib.request.urlopen(req, timeout=40))))
PY
ppid=$!
# the poll is waiting once the server has it on a claims thread: a
# submit made before that would be found by its first claim anyway
sleep 0.5
l=$("$DUE" add late --payload wake)
wait "$ppid" && ok || bad "long poll failed: $(cat "$T/poll.out")"
expect_eq "the long poll got the submitted task" "$l" \
	"$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[0]["id"])' "$T/poll.out" 2>&1)"
req POST /v1/claims '{"kinds": ["nothing"], "wait": "100ms"}'
expect_eq "a poll that finds nothing answers []" "200 []" "$STATUS $(jf 'j')"

echo "== bad input: 400 naming the field, nothing changed"
b=$("$DUE" add bad)
bad_req() { # PATH BODY FIELD
	req POST "$1" "$2"
	expect_eq "$1 $2: status" 400 "$STATUS"
	grep -qF -- "$3" "$T/body" && ok || bad "$1 $2: reply does not name $3: $(cat "$T/body")"
}
bad_req /v1/claims '{"kinds": "bad"}' "'kinds'"
bad_req /v1/claims '{"kinds": [1]}' "'kinds' item 0"
bad_req /v1/claims '{"kinds": []}' "'kinds' is an empty list"
bad_req /v1/claims '{"limit": 0}' "'limit'"
bad_req /v1/claims '{"limit": "3"}' "'limit'"
bad_req /v1/claims '{"lease": "soon"}' "'lease'"
bad_req /v1/claims '{"wait": "2h"}' "'wait'"
bad_req /v1/claims '{"kind": ["bad"]}' "unknown field 'kind'"
bad_req /v1/claims 'not json' "JSON"
expect_eq "bad claims claimed nothing" SCHEDULED "$(field "$b" state)"
req POST /v1/claims '{"kinds": ["bad"]}'
bad_req "/v1/tasks/$b/complete" '{"result": "x"}' "'attempt' is required"
bad_req "/v1/tasks/$b/complete" '{"attempt": "1"}' "'attempt'"
bad_req "/v1/tasks/$b/complete" '{"attempt": 1, "result": 5}' "'result'"
bad_req "/v1/tasks/$b/fail" '{"attempt": 1, "error": []}' "'error'"
bad_req "/v1/tasks/$b/extend" '{"attempt": 1, "lease": "0s"}' "'lease'"
bad_req "/v1/tasks/$b/extend" '{"attempt": 1, "lease": 5}' "'lease'"
bad_req "/v1/tasks/x/complete" '{"attempt": 1}' "id"
bad_req /v1/completions '{"items": []}' "'items'"
bad_req /v1/completions "{\"items\": [{\"id\": $b}]}" "'items' item 0 needs 'id' and 'attempt'"
bad_req /v1/completions "{\"items\": [{\"id\": $b, \"attempt\": 1, \"res\": 1}]}" "unknown field 'res'"
# each field's complaint names the field and what was wrong with it
bad_req /v1/completions "{\"items\": [{\"id\": $b, \"attempt\": 4294967296}]}" \
	"'items' item 0: 'attempt' must be from 1 to 2147483647, not 4294967296"
bad_req /v1/completions "{\"items\": [{\"id\": $b, \"attempt\": 1}, {\"id\": 0, \"attempt\": 1}]}" \
	"'items' item 1: 'id' must be from 1"
bad_req /v1/completions "{\"items\": [{\"id\": $b, \"attempt\": \"1\"}]}" "'items' item 0: 'attempt' must be an integer"
bad_req /v1/completions "{\"items\": [{\"id\": $b, \"attempt\": 1, \"result\": 7}]}" "'items' item 0: 'result' must be a string"
expect_eq "bad calls changed nothing" "CLAIMED 1" "$(field "$b" state) $(field "$b" attempt)"

echo "== the example worker"
for i in $(seq 1 40); do echo "{\"kind\": \"ex\", \"payload\": \"n$i\"}"; done >"$T/batch"
"$DUE" add --batch "$T/batch" >/dev/null
echo '{"kind": "ex", "payload": "fail me", "max_attempts": 1}' | "$DUE" add --batch - >/dev/null
python3 "$EX/http_worker.py" --url "$URL" --kinds ex --limit 16 --exit-when-idle >"$T/ex.out" 2>&1 &
expid=$!
wait "$expid" && ok || bad "http_worker.py failed: $(cat "$T/ex.out")"
for i in $(seq 1 10); do echo "{\"kind\": \"ex1\", \"payload\": \"m$i\"}"; done | "$DUE" add --batch - >/dev/null
python3 "$EX/http_worker.py" --url "$URL" --kinds ex1 --one-by-one --exit-when-idle >"$T/ex1.out" 2>&1 ||
	bad "http_worker.py --one-by-one failed: $(cat "$T/ex1.out")"
"$DUE" ls --limit 1000 --json >"$T/ex.json"
python3 - "$T/ex.json" <<'PY' && ok || bad "the example workers' tasks"
import json, sys
ts = json.load(open(sys.argv[1]))
ex = [t for t in ts if t["kind"] == "ex" and t["payload"] != "fail me"]
assert len(ex) == 40 and all(t["state"] == "DONE" and t["result"] == t["payload"].upper() for t in ex)
f = [t for t in ts if t["payload"] == "fail me"][0]
assert f["state"] == "DEAD" and "asked to fail" in f["last_error"], f
ex1 = [t for t in ts if t["kind"] == "ex1"]
assert len(ex1) == 10 and all(t["state"] == "DONE" for t in ex1)
PY

echo "== token"
TOKEN=0123456789abcdef-token-for-tests
printf '%s\n' "$TOKEN" >"$T/token"
chmod 600 "$T/token"
start_server tok --listen 127.0.0.1:0 --token-file "$T/token"
t=$("$DUE" add tok)
req POST /v1/claims '{"kinds": ["tok"]}'
expect_eq "claim without the token" 401 "$STATUS"
expect_eq "nothing claimed without the token" SCHEDULED "$(field "$t" state)"
req POST /v1/claims '{"kinds": ["tok"]}' -H "Authorization: Bearer $TOKEN"
expect_eq "claim with the token" "200 $t" "$STATUS $(jf 'j[0]["id"]')"
req POST "/v1/tasks/$t/complete" '{"attempt": 1}'
expect_eq "complete without the token" 401 "$STATUS"
req POST "/v1/tasks/$t/complete" '{"attempt": 1}' -H "Authorization: Bearer $TOKEN"
expect_eq "complete with the token" "200 DONE" "$STATUS $(jf 'j["outcome"]')"
finish
