#!/usr/bin/env bash
# test_http_stall.sh - no ghost claims from a frozen store (issue 36, the
# attack on the HTTP worker API): `due serve` reaches the store through a
# TCP proxy this test freezes (tests/cli/stallproxy.py, SIGSTOP); polls sent
# meanwhile get 503 (no answer within the claims threads' 2 s bound), yet
# their claim statements sit in the frozen path and the server runs them
# when it thaws, so tasks became CLAIMED for clients that were told they
# got nothing, for the whole lease (60 s here).  Checked on every store
# reached over TCP (on_each_store: PostgreSQL, Redis, MySQL; a store in
# files, SQLite, has no path to freeze): within a few
# seconds of the thaw no task is CLAIMED for a poll that did not receive
# it, each such task was given back (REQUEUED, then claimable), and the
# server says so in its log.  Deadlines are hang guards.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PROXY=$ROOT/tests/cli/stallproxy.py
PIDS=()
CLEANUP=()
trap 'for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done; rm -rf "$T"' EXIT

via_proxy() { sed -E "s#127\.0\.0\.1:[0-9]+#127.0.0.1:$2#" <<<"$1"; }
server_port() { sed -E 's#.*127\.0\.0\.1:([0-9]+).*#\1#' <<<"$1"; }

cat >"$T/polls.py" <<'PY'
# polls.py URL KIND PROXY_PID OUT: warm the claims threads, freeze the
# path, send polls (each its own owner) that get no answer, thaw; write
# what each poll received as JSON to OUT.
import http.client, json, os, signal, sys, threading, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); kind = sys.argv[2]; proxy = int(sys.argv[3])
got = {}
lock = threading.Lock()
def poll(owner, kinds, wait):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", "/v1/claims", json.dumps({"kinds": kinds, "wait": wait, "owner": owner, "lease": "60s"}),
              {"Content-Type": "application/json"})
    r = c.getresponse(); body = json.loads(r.read() or b"null")
    with lock:
        got[owner] = {"status": r.status, "ids": [t["id"] for t in body] if r.status == 200 else []}
# both claims threads hold a connection before the freeze
warm = [threading.Thread(target=poll, args=("warm%d" % i, ["nothing"], "0s")) for i in range(4)]
[t.start() for t in warm]; [t.join() for t in warm]
os.kill(proxy, signal.SIGSTOP)
th = [threading.Thread(target=poll, args=("p%d" % i, [kind], "0s")) for i in range(6)]
[t.start() for t in th]
time.sleep(5)
os.kill(proxy, signal.SIGCONT)
[t.join() for t in th]
json.dump(got, open(sys.argv[4], "w"))
PY

cat >"$T/check.py" <<'PY'
# check.py GOT TASKS: no task CLAIMED for an owner that did not receive it
import json, sys
got = json.load(open(sys.argv[1])); tasks = json.load(open(sys.argv[2]))
ghosts = [(t["id"], t["lease_owner"]) for t in tasks if t["state"] == "CLAIMED"
          and t["id"] not in got.get(t["lease_owner"] or "", {}).get("ids", [])]
print(" ".join("%d:%s" % g for g in ghosts))
PY

no_ghosts() { # URL KIND
	"$DUE" ls --db "$1" --kind "$2" --json >"$T/tasks.json" &&
		[ -z "$(python3 "$T/check.py" "$T/got.json" "$T/tasks.json")" ]
}

run_store() { # LABEL URL
	local label=$1 url=$2 kind=hs$$ purl
	echo "== $label"
	if [[ $url != *127.0.0.1:[0-9]* ]]; then
		echo "  $label: not reached over TCP on loopback, no path to freeze"
		return 0
	fi
	"$DUE" init --db "$url" >/dev/null
	rm -f "$T/proxy.port"
	python3 "$PROXY" "$(server_port "$url")" "$T/proxy.port" &
	local proxy=$!
	PIDS+=("$proxy")
	wait_for "$label: the proxy listens" 10 test -s "$T/proxy.port"
	purl=$(via_proxy "$url" "$(cat "$T/proxy.port")")
	for _ in 1 2 3 4 5 6; do "$DUE" add "$kind" --db "$url" >/dev/null; done
	start_server "serve-$label" --db "$purl" --listen 127.0.0.1:0 --threads 1 --timeout 5s
	local spid=$SPID
	python3 "$T/polls.py" "$URL" "$kind" "$proxy" "$T/got.json" ||
		bad "$label: the polls"
	expect_eq "$label: every poll in the freeze got 503" "503 503 503 503 503 503" \
		"$(python3 -c "import json,sys; g=json.load(open(sys.argv[1])); print(' '.join(str(g['p%d' % i]['status']) for i in range(6)))" "$T/got.json")"
	if wait_for "$label: no task CLAIMED for a poll that got 503" 15 no_ghosts "$url" "$kind"; then
		ok
	else
		bad "$label: ghosts (id:owner): $(python3 "$T/check.py" "$T/got.json" "$T/tasks.json")"
	fi
	# the claims that ran after the thaw were given back, and said so; a
	# store whose claim takes several round trips (MySQL's transaction)
	# may instead have run none of them (the client's timeout closed the
	# connection mid-transaction, the server rolled back): then no task
	# was ever claimed
	local given tried
	given=$(grep -c "by a call that got no answer: given back" "$T/serve-$label.err" || true)
	tried=$("$DUE" ls --db "$url" --kind "$kind" --json |
		python3 -c "import json,sys; print(sum(1 for t in json.load(sys.stdin) if t['attempt'] > 0))")
	if [ "$given" -ge 1 ]; then
		ok
	elif [ "$tried" = 0 ]; then
		echo "  $label: the claims sent in the freeze never ran (none tried)"
		ok
	else
		bad "$label: $tried task(s) tried but no claim given back: $(tail -5 "$T/serve-$label.err")"
	fi
	echo "  $label: $given claim(s) made in the freeze given back"
	kill -TERM "$spid"
	wait "$spid" || bad "$label: the server did not exit 0"
	kill "$proxy" 2>/dev/null || true
	wait "$proxy" 2>/dev/null || true
}

on_each_store run_store hstall
finish
