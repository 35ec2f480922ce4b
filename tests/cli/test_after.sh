#!/usr/bin/env bash
# test_after.sh - `due add --after ID[,ID...]` (run-after, issue 38 point
# 3) with real workers, on every store (Redis sharded too):
#   - the command: a task after two parents is held (show says "waiting:
#     after task A (SCHEDULED), B (SCHEDULED): 2 of 2 still to be DONE",
#     --json has after, after_left and held "after", `ls --state HELD`
#     lists it); reschedule keeps it held; cancel cancels it; bad input
#     (id 0, not a number, the same id twice, --after-any-end alone, with
#     --on-key replace, a missing parent, a DEAD parent, a batch line) is
#     refused naming it, with nothing written;
#   - a worker (--exec and --pipe handlers): a chain runs in order, a
#     fan-in of 5 runs its child once after the last parent, each child's
#     handler gets its parents' results ($DUE_PARENT_RESULTS, the pipe's
#     "parent_results"); a parent that ends DEAD cancels its child and
#     grandchild (last_error naming each one's parent), never run, and an
#     --after-any-end child runs, told the parent is DEAD;
#   - HTTP: POST /v1/tasks with "after" (held; a bad list 400, a missing
#     parent 404), GET /v1/tasks?state=HELD, and a claim over HTTP of a
#     released child carries "parent_results";
#   - `due verify`'s after_parent_kill9_releases_once (a parent's worker
#     killed -9; its child and grandchild run once each, after the retry)
#     and after_dead_parent_cancels_children.
# Deadlines are hang guards only.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
CLEANUP=()
PIDS=()
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1; done; rm -rf "$T"' EXIT

# field URL ID EXPR: a Python expression over the task's show --json (t)
field() {
	"$DUE" show "$2" --json --db "$1" | python3 -c "import json,sys; t=json.load(sys.stdin); print($3)"
}
state_is() { [ "$(field "$1" "$2" 't["state"]')" = "$3" ]; }
ended() { [ "$(field "$1" "$2" 't["state"] in ("DONE", "DEAD", "CANCELLED")')" = True ]; }
count() { "$DUE" ls --db "$1" --limit 10000 | sed 1d | wc -l; }

command_part() {
	local label=$1 db=$2 p1 p2 c d n
	p1=$("$DUE" add p --in 1h --db "$db")
	p2=$("$DUE" add p --in 1h --db "$db")
	c=$("$DUE" add c --after "$p1,$p2" --in 2s --db "$db")
	# parents are listed by id (a sharded store's ids do not ascend in the
	# order they were made)
	local lo=$((p1 < p2 ? p1 : p2)) hi=$((p1 < p2 ? p2 : p1))
	"$DUE" show "$c" --db "$db" >"$T/show"
	has -Fx "waiting: after task $lo (SCHEDULED), $hi (SCHEDULED): 2 of 2 still to be DONE" "$T/show" &&
		ok || bad "$label: show: $(grep waiting "$T/show")"
	expect_eq "$label: show --json" "[$lo, $hi] 2 2 after SCHEDULED" \
		"$(field "$db" "$c" '"%s %s %s %s %s" % (t["after"], t["after_n"], t["after_left"], t["held"], t["state"])')"
	expect_eq "$label: ls --state HELD" "$c" \
		"$("$DUE" ls --state held --db "$db" | sed 1d | awk '{print $1}')"
	has -F "held: 2/2 parents" <("$DUE" ls --state HELD --db "$db") && ok ||
		bad "$label: ls's held column"
	expect_eq "$label: reschedule of a held task" RESCHEDULED \
		"$("$DUE" reschedule "$c" --in 5s --db "$db")"
	expect_eq "$label: still held after it" "2 after" \
		"$(field "$db" "$c" '"%s %s" % (t["after_left"], t["held"])')"
	# bad input: refused, naming it, nothing written
	n=$(count "$db")
	expect_err 2 "--after: '0' is not a list of task ids" "$DUE" add c --after 0 --db "$db"
	expect_err 2 "--after: 'x,1' is not a list" "$DUE" add c --after x,1 --db "$db"
	expect_err 2 "--after: ' 1' is not a list" "$DUE" add c --after " 1" --db "$db"
	expect_err 2 "--after: '+1' is not a list" "$DUE" add c --after "+1" --db "$db"
	expect_err 2 "after lists task $p1 twice" "$DUE" add c --after "$p1,$p1" --db "$db"
	expect_err 2 "--after-any-end needs --after" "$DUE" add c --after-any-end --db "$db"
	expect_err 2 "after cannot be combined with on_key replace" \
		"$DUE" add c --after "$p1" --key k --on-key replace --db "$db"
	expect_err 3 "parent task 987654321 not found" "$DUE" add c --after "$p1,987654321" --db "$db"
	printf '{"kind":"c","after":[%s]}\n{"kind":"c","after":"%s"}\n' "$p1" "$p1" >"$T/b"
	expect_err 2 "line 2: 'after' must be an array of 1 to 1000 task ids" "$DUE" add --batch "$T/b" --db "$db"
	printf '{"kind":"c","after":[%s]}\n{"kind":"c","after":[987654321]}\n' "$p1" >"$T/b"
	expect_err 3 "987654321" "$DUE" add --batch "$T/b" --db "$db"
	d=$("$DUE" add p --in 1h --db "$db")
	"$DUE" kill "$d" --db "$db" >/dev/null
	expect_err 4 "parent task $d is DEAD" "$DUE" add c --after "$d" --db "$db"
	expect_eq "$label: the refusals wrote nothing" "$((n + 1))" "$(count "$db")"
	local any
	any=$("$DUE" add c --after "$d" --after-any-end --db "$db")
	expect_eq "$label: any-end after a DEAD parent: due at once" "0 None" \
		"$(field "$db" "$any" '"%s %s" % (t["after_left"], t["held"])')"
	expect_eq "$label: cancel of a held task" CANCELLED "$("$DUE" cancel "$c" --db "$db")"
	# a held task killed: DEAD, and no retry runs it before its parents
	# (the attack's defect 1: it ran at once)
	local k
	k=$("$DUE" add c --after "$p1" --db "$db")
	"$DUE" kill "$k" --db "$db" >/dev/null
	expect_err 4 "task $k runs after task $p1, which is SCHEDULED" "$DUE" retry "$k" --db "$db"
	expect_eq "$label: the refused retry left it DEAD" DEAD "$(field "$db" "$k" 't["state"]')"
	# a batch line's after
	printf '{"kind":"c","after":[%s, %s],"after_any_end":true}\n{"kind":"c","after":null,"after_any_end":null}\n' "$p1" "$p2" >"$T/b"
	local bid
	bid=$("$DUE" add --batch "$T/b" --db "$db" | head -1)
	expect_eq "$label: batch after" "[$lo, $hi] True after" \
		"$(field "$db" "$bid" '"%s %s %s" % (t["after"], t["after_any_end"], t["held"])')"
}

# The pipe handler: answers each request with its parent_results as result.
cat >"$T/pipe.py" <<'PY'
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    res = json.dumps(r.get("parent_results"), sort_keys=True)
    print(json.dumps({"id": r["id"], "attempt": r["attempt"], "ok": True, "result": res}), flush=True)
PY

worker_part() {
	local label=$1 db=$2 i
	: >"$T/ran-$label"
	"$DUE" work --db "$db" --kinds a,f,fc,boom,x,y,pc --concurrency 8 --poll 200ms --owner w \
		--handler "pc=pipe:python3 $T/pipe.py" \
		--exec "case \$DUE_KIND in boom) exit 1;; a) sleep 0.5;; esac; printf '%s %s\n' \"\$DUE_TASK_ID\" \"\$DUE_PARENT_RESULTS\" >> '$T/ran-$label'; echo \"r\$DUE_TASK_ID\"" \
		>"$T/w-$label.log" 2>&1 &
	local wpid=$!
	local a1 a2 a3 fs=() fc boom x1 x2 y pc
	a1=$("$DUE" add a --db "$db")
	a2=$("$DUE" add a --after "$a1" --db "$db")
	a3=$("$DUE" add a --after "$a2" --db "$db")
	for i in 1 2 3 4 5; do fs+=("$("$DUE" add f --in 1s --db "$db")"); done
	fc=$("$DUE" add fc --after "$(IFS=,; echo "${fs[*]}")" --db "$db")
	pc=$("$DUE" add pc --after "${fs[0]}" --db "$db")
	boom=$("$DUE" add boom --in 1s --max-attempts 1 --db "$db")
	x1=$("$DUE" add x --after "$boom" --db "$db")
	x2=$("$DUE" add x --after "$x1" --db "$db")
	y=$("$DUE" add y --after "$boom" --after-any-end --db "$db")
	for i in "$a3" "$fc" "$pc" "$y" "$x2"; do
		wait_for "$label: task $i ended" 60 ended "$db" "$i"
	done
	kill "$wpid" 2>/dev/null || true
	wait "$wpid" 2>/dev/null || true
	# each child claimed after its parents' last end, once
	local ids="$a1 $a2 $a3 ${fs[*]} $fc $pc $boom $x1 $x2 $y"
	for i in $ids; do "$DUE" show "$i" --json --db "$db"; echo; done >"$T/tasks-$label.json"
	python3 - "$T/tasks-$label.json" "$T/ran-$label" "$label" "$a1 $a2 $a3" "${fs[*]}" "$fc" "$pc" "$boom $x1 $x2 $y" <<'PY'
import json, sys
dec = json.JSONDecoder()
text, tasks, i = open(sys.argv[1]).read(), {}, 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    t, i = dec.raw_decode(text, i)
    tasks[t["id"]] = t
ran = {}
for line in open(sys.argv[2]):
    tid, _, res = line.rstrip("\n").partition(" ")
    ran.setdefault(int(tid), []).append(res)
label = sys.argv[3]
chain = [int(x) for x in sys.argv[4].split()]
fs = [int(x) for x in sys.argv[5].split()]
fc, pc = int(sys.argv[6]), int(sys.argv[7])
boom, x1, x2, y = [int(x) for x in sys.argv[8].split()]
out = []
def check(ok, what):
    out.append("ok" if ok else "FAIL: %s: %s" % (label, what))
def ended(t):
    return max(a["ended_at"] for a in t["attempts"])
def after(c, parents):
    t = tasks[c]
    check(t["state"] == "DONE" and len(t["attempts"]) == 1 and len(ran.get(c, [])) == 1,
          "task %d: %s, %d tries, %d runs" % (c, t["state"], len(t["attempts"]), len(ran.get(c, []))))
    for p in parents:
        check(t["attempts"][0]["claimed_at"] >= ended(tasks[p]),
              "task %d claimed %s before its parent %d ended %s" % (c, t["attempts"][0]["claimed_at"], p, ended(tasks[p])))
after(chain[1], [chain[0]])
after(chain[2], [chain[1]])
after(fc, fs)
ran[pc] = ["(pipe)"]  # the pipe handler writes no line: its result is checked below
after(pc, [fs[0]])
res = json.loads(ran[fc][0]) if ran.get(fc) else {}
check(sorted(res) == sorted(str(f) for f in fs) and all(res[str(f)] == {"state": "DONE", "result": "r%d\n" % f} for f in fs),
      "fan-in child's DUE_PARENT_RESULTS: %r" % ran.get(fc))
r = json.loads(tasks[pc].get("result") or "null")
check(r == {str(fs[0]): {"state": "DONE", "result": "r%d\n" % fs[0]}}, "pipe parent_results: %r" % tasks[pc].get("result"))
check(tasks[boom]["state"] == "DEAD", "boom is %s" % tasks[boom]["state"])
for c, p in ((x1, boom), (x2, x1)):
    t = tasks[c]
    check(t["state"] == "CANCELLED" and not t["attempts"] and c not in ran and
          ("parent task %d ended" % p) in (t["last_error"] or ""),
          "task %d after %d: %s %r, %d runs" % (c, p, t["state"], t["last_error"], len(ran.get(c, []))))
after(y, [boom])
ry = json.loads(ran[y][0]) if ran.get(y) else {}
check(ry.get(str(boom), {}).get("state") == "DEAD", "any-end child's results: %r" % ran.get(y))
print("\n".join(out))
PY
} >"$T/verdict-$1"

http_part() {
	local label=$1 db=$2 p c
	start_server "serve-$label" --db "$db" --listen 127.0.0.1:0
	p=$("$DUE" add hp --db "$db")
	req POST /v1/tasks "{\"kind\":\"hc\",\"after\":[$p]}"
	expect 201 "$label: http add after"
	c=$(jf 'j["id"]')
	expect_eq "$label: http held (the 201 says why)" "1 [$p] after" "$(jf '"%s %s %s" % (j["after_left"], j["after"], j["held"])')"
	req POST /v1/tasks '{"kind":"hc","after":[0]}'
	expect 400 "$label: http after [0]"
	has -F "'after' item 1 must be a task id" "$T/body" && ok || bad "$label: http after [0]: $(cat "$T/body")"
	req POST /v1/tasks '{"kind":"hc","after":[987654321]}'
	expect 404 "$label: http missing parent"
	req GET "/v1/tasks?state=HELD&kind=hc"
	expect_eq "$label: http state=HELD" "[$c]" "$(jf '[t["id"] for t in j]')"
	# (a wait: the first claim of a fresh server connects first; test_http_stall
	# checks that path, this test the run-after semantics)
	req POST /v1/claims '{"kinds":["hp"],"lease":"30s","wait":"5s"}'
	expect 200 "$label: http claim of the parent"
	req POST "/v1/tasks/$p/complete" '{"attempt":1,"result":"from-hp"}'
	expect 200 "$label: http complete of the parent"
	req POST /v1/claims '{"kinds":["hc"],"lease":"30s","wait":"10s"}'
	expect_eq "$label: http claim of the child carries parent_results" \
		"$c {\"$p\": {\"result\": \"from-hp\", \"state\": \"DONE\"}}" \
		"$(jf '"%s %s" % (j[0]["id"], json.dumps(j[0]["parent_results"], sort_keys=True)) if j else "none"')"
	kill "$SPID" 2>/dev/null || true
	wait "$SPID" 2>/dev/null || true
}

run() {
	local b=$1 url=$2 t0=$SECONDS v
	echo "== $b"
	"$DUE" init --db "$url" >/dev/null && ok || { bad "$b: init"; return; }
	command_part "$b" "$url"
	worker_part "$b" "$url"
	while read -r v; do [ "$v" = ok ] && ok || bad "${v#FAIL: }"; done <"$T/verdict-$b"
	http_part "$b" "$url"
	echo "   ($b: command, worker and HTTP parts in $((SECONDS - t0)) s)"
	t0=$SECONDS
	"$DUE" verify --db "$3" \
		--case after_parent_kill9_releases_once,after_dead_parent_cancels_children >"$T/v-$b" 2>&1
	grep "^CASE" "$T/v-$b" || true
	for v in after_parent_kill9_releases_once after_dead_parent_cancels_children; do
		has "^CASE $v PASS" "$T/v-$b" && ok || bad "$b: verify $v: $(tail -3 "$T/v-$b")"
	done
	echo "   ($b: verify's two cases in $((SECONDS - t0)) s)"
}
# (verify makes its own scratch store beside the one it is given)
each() { run "$1" "$2" "$2"; }
on_each_store each after

if need DUE_TEST_REDIS_URL "sharded Redis"; then
	sh="$DUE_TEST_REDIS_URL?shards=3"
	if url=$("$DUE" scratch make --db "$sh" "due_after_sh_$$"); then
		CLEANUP+=("$(printf '%q ' "$DUE" scratch drop --db "$sh" "due_after_sh_$$")")
		run redis-sharded "$url" "$sh"
	else
		bad "no sharded Redis scratch store"
	fi
fi
finish
