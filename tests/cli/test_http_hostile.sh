#!/usr/bin/env bash
# test_http_hostile.sh - `due serve` against hostile clients and a bad
# store (issue 22, points 13-18), with real processes: huge payloads
# (bounded replies and memory), a second process holding the SQLite lock
# while /health is probed, a full queue, 1,000 slowloris connections,
# malformed and ambiguous HTTP from raw sockets, and log floods.  With
# DUE_TEST_PG_URL set (PostgreSQL tests wanted), the store-outage checks
# run on PostgreSQL too, on a private cluster of their own: test_pg.sh
# restarts the shared one while tests run in parallel.
#
# No timing is asserted beyond what the issue demands: "/health answers
# within 1 s while the store is locked" is checked with curl --max-time 3
# while the lock is held for up to 10 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null
	if [ -n "${PG_OWN:-}" ]; then
		"$ROOT/scripts/pg-test-cluster" stop "$PG_OWN" >/dev/null 2>&1 || true
		rm -rf "$PG_OWN"
	fi
	rm -rf "$T"
}
trap cleanup EXIT

# stop_server : SIGTERM $SPID and wait for it
stop_server() {
	kill -TERM "$SPID"
	wait "$SPID" || bad "server $SPID did not exit 0"
}


# expect_error STATUS CODE WHAT : a JSON {"error","detail"} reply
expect_error() {
	expect_eq "$3: status" "$1" "$STATUS"
	expect_eq "$3: error" "$2" "$(jf 'j["error"]' 2>/dev/null || echo not-json)"
}

# rss_peak PID : the process's peak resident set, in MiB
rss_peak() { awk '/^VmHWM:/ {print int($2 / 1024)}' "/proc/$1/status"; }

# raw PYBYTES : send the bytes (a Python expression) over a raw socket;
# print the reply as JSON {status, statuses (status lines seen), ctype,
# body}
raw() {
	python3 - "$PORT" "$1" <<'PY'
import json, re, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(eval(sys.argv[2]))
data = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
except (socket.timeout, ConnectionResetError):
    pass
head, _, body = data.partition(b"\r\n\r\n")
lines = head.decode("latin-1").split("\r\n")
ctype = [l.split(":", 1)[1].strip() for l in lines if l.lower().startswith("content-type:")]
print(json.dumps({"status": int(lines[0].split()[1]) if lines[0] else 0,
                  "statuses": len(re.findall(rb"HTTP/1\.[01] \d\d\d ", data)),
                  "ctype": ctype[0] if ctype else "",
                  "body": body.decode("latin-1")}))
PY
}

# expect_raw WHAT STATUS CODE PYBYTES : exactly one reply, JSON, with that
# status and error code (the request ends with "Connection: close" or is
# refused, so the server closes after one reply)
expect_raw() {
	local what=$1 st=$2 code=$3
	raw "$4" >"$T/raw.json" 2>&1 || true
	if python3 - "$T/raw.json" "$st" "$code" >"$T/raw.check" 2>&1 <<'PY'; then ok; else bad "$what: $(cat "$T/raw.check")"; fi
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except ValueError:
    print("no reply: " + open(sys.argv[1]).read()[:300]); sys.exit(1)
problems = []
if r["status"] != int(sys.argv[2]): problems.append("status %s" % r["status"])
if r["statuses"] != 1: problems.append("%d status lines" % r["statuses"])
if r["ctype"] != "application/json": problems.append("content type %r" % r["ctype"])
try:
    if json.loads(r["body"])["error"] != sys.argv[3]: problems.append("error %r" % r["body"])
except ValueError:
    problems.append("body not JSON: %r" % r["body"][:200])
print("; ".join(problems))
sys.exit(1 if problems else 0)
PY
}

# hold_lock DB MODE : a second process holds the SQLite store's lock until
# $T/release exists (10 s at most).  MODE writers: BEGIN EXCLUSIVE (WAL
# readers go on); readers: also locking_mode=EXCLUSIVE (nobody reads).
hold_lock() {
	rm -f "$T/ready" "$T/release"
	python3 - "$1" "$2" "$T/ready" "$T/release" <<'PY' &
import os, sqlite3, sys, time
path, mode, ready, release = sys.argv[1:5]
c = sqlite3.connect(path, isolation_level=None, timeout=30)
if mode == "readers":
    c.execute("PRAGMA locking_mode=EXCLUSIVE")
c.execute("BEGIN EXCLUSIVE")
if mode == "readers":
    c.execute("SELECT count(*) FROM due_task").fetchone()
open(ready, "w").close()
# held until released: a hang guard only (a loaded machine took over 10 s
# to send the 200 requests of section 14, and one of them was then served)
end = time.monotonic() + 300
while time.monotonic() < end and not os.path.exists(release):
    time.sleep(0.05)
c.execute("COMMIT")
c.close()
PY
	LOCKER=$!
	PIDS+=("$LOCKER")
	wait_for "the lock is held" 20 test -e "$T/ready"
}

release_lock() {
	touch "$T/release"
	wait "$LOCKER" || bad "lock holder failed"
}

# probe PATH : GET with a 3 s deadline -> $STATUS, body in $T/body
probe() {
	STATUS=$(curl -s -o "$T/body" -D "$T/hdr" -w '%{http_code}' --max-time 3 \
		"$URL$1") || STATUS=no-answer-within-3s
}

"$DUE" init >/dev/null

echo "== 13. bounded replies and memory"
# Default payload limit (1 MiB).  Payloads of byte 0x01: valid UTF-8, so
# shown as JSON strings where each byte takes 6 ("\u0001").
export DUE_DB="sqlite:$T/big.db"
"$DUE" init >/dev/null
python3 -c 'import base64, json; print(json.dumps({"kind": "huge", "in": "1h", "payload_b64": base64.b64encode(b"\x01" * 1048576).decode()}))' >"$T/huge.json"
start_server big --listen 127.0.0.1:0
# a path or query byte that is not UTF-8 is a 400 naming the input (escaped
# \xHH), never a 500: the message quotes what the client sent
for p in /v1/tasks/%FF '/v1/tasks?kind=k%FF' '/v1/tasks?state=%FF' /v1/kinds/k%FF; do
	req GET "$p"
	expect_error 400 bad_request "GET $p"
	grep -qF 'xff' "$T/body" || bad "GET $p: the detail does not name the byte: $(cat "$T/body")"
done
req DELETE /v1/schedules/n%C0%80
expect_error 400 bad_request "DELETE a schedule named by an overlong sequence"
req PUT /v1/kinds/k%ED%A0%80 '{"paused":true}'
expect_error 400 bad_request "PUT a kind named by a surrogate"
for i in $(seq 1 40); do
	req POST /v1/tasks "@$T/huge.json"
	[ "$STATUS" = 201 ] || { bad "POST 1 MiB payload #$i: $STATUS $(head -c 300 "$T/body")"; break; }
done
expect_eq "the create reply is cut" "True 1048576 4096" \
	"$(jf '"%s %s %s" % (j.get("payload_truncated"), j.get("payload_size"), len(j["payload"]))')"
HID=$(jf 'j["id"]')
req GET "/v1/tasks?limit=10"
expect 200 "list of ten 1 MiB payloads"
size=$(wc -c <"$T/body")
# docs/HTTP.md: 4 KiB of each value; a page stops before 4 MiB
[ "$size" -lt $((4 << 20)) ] && ok || bad "list of 10: $size bytes"
expect_eq "every payload cut and flagged" "10 10 4096" \
	"$(jf '"%d %d %d" % (len(j), sum(1 for t in j if t["payload_truncated"] and t["payload_size"] == 1048576), max(len(t["payload"]) for t in j))')"
req GET "/v1/tasks?limit=10000"
expect 200 "list of 40"
[ "$(wc -c <"$T/body")" -lt $((4 << 20)) ] && ok || bad "list of 40: $(wc -c <"$T/body") bytes"
expect_eq "list of 40: all there" 40 "$(jf 'len(j)')"
req GET "/v1/tasks/$HID"
expect 200 "one task"
expect_eq "one task: the whole payload, not flagged" "1048576 False" \
	"$(jf '"%d %s" % (len(j["payload"]), "payload_truncated" in j)')"
req POST "/v1/tasks/$HID/kill"
expect_eq "an action's reply is cut" "DEAD True 4096" \
	"$(jf '"%s %s %d" % (j["state"], j["payload_truncated"], len(j["payload"]))')"
# Memory: four lists of all 40 at once, twice; the old server held every
# payload rendered (40 x 6 MB per request).
before=$(rss_peak "$SPID")
python3 - "$URL" >"$T/par.out" 2>&1 <<'PY' && ok || bad "parallel lists: $(cat "$T/par.out")"
import sys, threading, urllib.request
url, sizes = sys.argv[1], []
def one():
    with urllib.request.urlopen(url + "/v1/tasks?limit=10000", timeout=60) as r:
        sizes.append(len(r.read()))
for round in range(2):
    ts = [threading.Thread(target=one) for _ in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
print(sizes)
sys.exit(0 if len(sizes) == 8 and max(sizes) < 4 << 20 else 1)
PY
peak=$(rss_peak "$SPID")
# AddressSanitizer keeps freed memory in quarantine: a looser bound, still
# far below the old server's (1.8 GB here, every payload rendered).
bound=256
ldd "$DUE" 2>/dev/null | has libasan && bound=1024
echo "server peak RSS: ${before} MiB before the lists, ${peak} MiB after (bound $bound)"
[ "$peak" -lt "$bound" ] && ok || bad "server peak RSS ${peak} MiB with 8 lists of 40 x 1 MiB"
stop_server
export DUE_DB="sqlite:$T/due.db"

echo "== 14. a busy store does not freeze /health"
start_server busy --listen 127.0.0.1:0
hold_lock "$T/due.db" writers
for i in $(seq 1 8); do
	curl -s -o /dev/null -w '%{http_code}\n' --max-time 60 -X POST \
		--data-binary '{"kind":"queued","in":"1h"}' "$URL/v1/tasks" >"$T/post.$i" &
	PIDS+=($!)
done
wait_for "8 POSTs waiting for the lock" 20 bash -c "[ \$(ls '$T'/post.* | wc -l) = 8 ]"
for i in 1 2 3; do
	probe /health
	expect 200 "/health #$i while a writer holds the lock and 8 POSTs wait"
done
expect_eq "/health body" UP "$(jf 'j["status"]')"
probe /v1/stats
expect 200 "/v1/stats while the lock is held"
probe /
expect 200 "the dashboard while the lock is held"
release_lock
for i in $(seq 1 8); do
	wait_for "POST #$i answered" 60 test -s "$T/post.$i"
	expect_eq "POST #$i after the lock" 201 "$(cat "$T/post.$i")"
done
stop_server

# Nobody can read: /health says so within its deadline, a full queue is
# refused at once with Retry-After, a queued request gives up after
# --timeout.
DUE_DB="sqlite:$T/due.db?busy_ms=5000" start_server locked --listen 127.0.0.1:0 \
	--threads 1 --timeout 3s
hold_lock "$T/due.db" readers
for i in 1 2; do
	probe /health
	expect_error 503 store_timeout "/health #$i while nobody can read"
	expect_eq "/health #$i says DOWN" DOWN "$(jf 'j["status"]')"
done
python3 - "$URL" >"$T/flood.out" 2>&1 <<'PY' && ok || bad "requests on a locked store: $(cat "$T/flood.out")"
# 200 GETs at once on a server with one read thread (queue of 64)
import json, sys, threading, urllib.error, urllib.request
url, got = sys.argv[1], []
def one():
    try:
        with urllib.request.urlopen(url + "/v1/stats", timeout=30) as r:
            got.append((r.status, None, None))
    except urllib.error.HTTPError as e:
        try:
            code = json.loads(e.read())["error"]
        except ValueError:
            code = "not-json"
        got.append((e.code, code, e.headers.get("Retry-After")))
    except Exception as e:
        got.append((0, repr(e), None))
ts = [threading.Thread(target=one) for _ in range(200)]
for t in ts: t.start()
for t in ts: t.join()
full = [g for g in got if g[1] == "server_busy" and g[2]]
# a request whose store call hit the store's own busy timeout (5 s) before
# its 3 s deadline was seen (a loaded machine) is answered store_error: as
# good an answer, a 503 in JSON that says the store is the cause
waited = [g for g in got if g[1] == "store_busy" or (g[0] == 503 and g[1] == "store_error")]
other = [g for g in got if g not in full and g not in waited]
print("%d refused at once (queue full), %d gave up waiting, others: %s" % (len(full), len(waited), other[:5]))
sys.exit(0 if len(got) == 200 and full and waited and not other else 1)
PY
release_lock
wait_for "/health UP once the lock is gone" 30 bash -c "curl -sf --max-time 3 '$URL/health' | grep -q UP"
stop_server
if grep -q 'more like this' "$T/locked.err"; then ok; else bad "store errors not aggregated: $(cat "$T/locked.err")"; fi
[ "$(wc -l <"$T/locked.err")" -lt 20 ] && ok || bad "store errors flood the log: $(wc -l <"$T/locked.err") lines"

echo "== 14. the same on PostgreSQL"
if [ -z "${DUE_TEST_PG_URL:-}" ]; then
	if [ "${CI:-}" = true ]; then bad "CI=true but DUE_TEST_PG_URL is unset"; fi
	echo "NOTE: DUE_TEST_PG_URL not set: PostgreSQL checks not run"
else
	PG_OWN=$(mktemp -d /tmp/due-pg-XXXXXX) # postgres cannot enter $T
	PG_URL=$("$ROOT/scripts/pg-test-cluster" start "$PG_OWN")
	# A role of its own with room for 5 connections, owning the schema.
	PG_ROLE="due_hostile"
	psql -qX "$PG_URL" -c "CREATE ROLE $PG_ROLE LOGIN CONNECTION LIMIT 5" \
		-c "CREATE SCHEMA $PG_ROLE AUTHORIZATION $PG_ROLE" >/dev/null
	as_role=$(sed "s#://[^@/]*@#://$PG_ROLE@#" <<<"$PG_URL")
	sep='?'; case "$as_role" in *\?*) sep='&';; esac
	PG_DB="$as_role${sep}options=-csearch_path%3D$PG_ROLE"
	DUE_DB="$PG_DB" "$DUE" init >/dev/null
	DUE_DB="$PG_DB" start_server pg --listen 127.0.0.1:0 --threads 1
	probe /health
	expect 200 "PostgreSQL: /health"
	# Connections exhausted: sessions of the role take the free slots, the
	# server's own connection is cut (as a restart would), another session
	# takes its slot: the server cannot connect again.
	pg_q() { psql -qXAt "$PG_URL" -c "$1"; }
	sleepers() {
		for i in $(seq 1 "$1"); do
			# long enough to outlast the waits below on a loaded machine
			psql -qXAt "$as_role" -c "SELECT pg_sleep(120)" >/dev/null 2>&1 &
			PIDS+=($!)
		done
		wait_for "$2 sessions hold the role's connections" 60 bash -c "[ \"\$(psql -qXAt '$PG_URL' -c \"SELECT count(*) FROM pg_stat_activity WHERE usename = '$PG_ROLE' AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()\")\" = $2 ]"
	}
	sleepers 4 4
	pg_q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '$PG_ROLE' AND query NOT LIKE '%pg_sleep%'" >/dev/null
	sleepers 1 5
	probe /health
	expect_error 503 store_error "PostgreSQL connection cut: /health"
	probe /health
	expect_error 503 store_error "PostgreSQL connections exhausted: /health"
	jf 'j["detail"]' | has "connection" && ok || bad "the detail does not say why: $(cat "$T/body")"
	probe /v1/stats
	expect_error 503 store_error "PostgreSQL connections exhausted: /v1/stats"
	pg_q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = '$PG_ROLE' AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()" >/dev/null
	wait_for "/health UP once connections are free" 30 bash -c "curl -sf --max-time 3 '$URL/health' | grep -q UP"
	# a lock held: an ACCESS EXCLUSIVE lock on the task table (a migration,
	# VACUUM FULL) blocks even reads
	rm -f "$T/pg.locked"
	psql -qXAt "$PG_URL" -c "BEGIN" -c "LOCK TABLE $PG_ROLE.due_task IN ACCESS EXCLUSIVE MODE" \
		-c "\! touch $T/pg.locked" -c "SELECT pg_sleep(6)" -c "COMMIT" >/dev/null 2>&1 &
	PGLOCK=$!
	PIDS+=("$PGLOCK")
	wait_for "the table is locked" 20 test -e "$T/pg.locked"
	probe /health
	expect_error 503 store_timeout "PostgreSQL table locked: /health"
	probe /
	expect 200 "PostgreSQL table locked: the dashboard"
	wait "$PGLOCK" || bad "the locking session failed"
	wait_for "/health UP once the lock is gone" 30 bash -c "curl -sf --max-time 3 '$URL/health' | grep -q UP"
	stop_server
fi

echo "== 15. slowloris: 1,000 slow clients"
# --timeout 10s, not less: the three probes must all come before the first
# close, and under ASan on a slow machine opening the 1,000 takes seconds
start_server slow --listen 127.0.0.1:0 --timeout 10s
python3 - "$PORT" "$URL" >"$T/slow.out" 2>&1 <<'PY' && ok || bad "slow clients: $(cat "$T/slow.out")"
# 1,000 connections send a header byte every 0.5 s (10 of them a body
# byte); /health must answer meanwhile; the server must close each once
# its request is not in after --timeout (10 s), although bytes keep coming.
import resource, socket, sys, time, urllib.request
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
port, url = int(sys.argv[1]), sys.argv[2]
socks = []
for i in range(1000):
    s = socket.create_connection(("127.0.0.1", port))
    if i % 100 == 0:
        s.sendall(b"POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
    else:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    s.setblocking(False)
    socks.append(s)
start, closed, probes = time.monotonic(), set(), []
while time.monotonic() - start < 30 and len(closed) < len(socks):
    for i, s in enumerate(socks):
        if i in closed:
            continue
        try:
            if s.recv(4096) == b"":
                closed.add(i)
                continue
        except BlockingIOError:
            pass
        except OSError:
            closed.add(i)
            continue
        try:
            s.send(b"a")
        except OSError:
            closed.add(i)
    if len(probes) < 3 and len(closed) == 0:
        with urllib.request.urlopen(url + "/health", timeout=3) as r:
            probes.append((r.status, 1000 - len(closed)))
    time.sleep(0.5)
print("probes (status, slow clients connected): %s; closed by the server: %d "
      "after %.1f s" % (probes, len(closed), time.monotonic() - start))
sys.exit(0 if len(probes) == 3 and all(p[0] == 200 for p in probes)
         and len(closed) == len(socks) else 1)
PY
cat "$T/slow.out"
probe /health
expect 200 "/health after the slow clients"
stop_server
if grep -v -e 'due serve: store ' -e 'stopping' "$T/slow.err" | has .; then
	bad "slow clients were logged: $(head -5 "$T/slow.err")"
else ok; fi

echo "== 18. log floods"
DUE_DB="sqlite:$T/big.db" start_server flood --listen 127.0.0.1:0
python3 - "$PORT" >"$T/flood.out" 2>&1 <<'PY' && ok || bad "log flood clients: $(cat "$T/flood.out")"
# 1,000 requests with a header line lacking a colon; then 100 clients that
# ask for a 1 MB list and reset the connection while it is sent.
import socket, struct, sys, time
port, refused = int(sys.argv[1]), 0
for i in range(1000):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon\r\n\r\n")
    refused += s.recv(100).startswith(b"HTTP/1.1 400 ")
    s.close()
for i in range(100):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /v1/tasks?limit=10000 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    s.recv(1000)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
print("%d refused" % refused)
sys.exit(0 if refused == 1000 else 1)
PY
probe /health
expect_eq "/health after the floods (one dead letter, from 13)" "503 DOWN 1" \
	"$STATUS $(jf '"%s %s" % (j["status"], j["dead"])')"
stop_server
python3 - "$T/flood.err" >"$T/log.check" 2>&1 <<'PY' && ok || bad "log: $(cat "$T/log.check")"
# one line for the first refusal, then counts; nothing about the resets
import re, sys
lines = open(sys.argv[1]).read().splitlines()
other = [l for l in lines if "refused a request" not in l
         and not l.startswith("due serve: store ") and "stopping" not in l]
firsts = [l for l in lines if "refused a request" in l and "more like this" not in l]
counts = [int(m.group(1)) for l in lines for m in [re.search(r"(\d+) more like this", l)] if m]
print("%d lines: %d first, counts %s, other %s" % (len(lines), len(firsts), counts, other[:3]))
sys.exit(0 if len(firsts) + sum(counts) == 1000 and len(lines) <= 8 and not other else 1)
PY
cat "$T/log.check"

echo "== 17. strict HTTP"
start_server strict --listen 127.0.0.1:0
# libmicrohttpd's own refusals: JSON, one status line
expect_raw "header line without a colon" 400 bad_request \
	"b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nno colon here\r\n\r\n'"
expect_raw "Content-Length: -1" 400 bad_request \
	"b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n'"
expect_raw "Content-Length: 99999999999999999999999" 413 too_large \
	"b'POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999999999\r\n\r\n'"
expect_raw "HTTP/1.1 without Host" 400 bad_request \
	"b'GET /health HTTP/1.1\r\n\r\n'"
expect_raw "request line over the buffer" 414 uri_too_long \
	"b'GET /' + b'a' * 40000 + b' HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n'"
expect_raw "headers over the buffer" 431 headers_too_large \
	"b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ' + b'a' * 40000 + b'\r\n\r\n'"
expect_raw "HTTP/2.0 on an HTTP/1 server" 505 http_version_not_supported \
	"b'GET /health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n'"
# ambiguous framing (request smuggling behind a proxy): refused by us
expect_raw "two different Content-Length" 400 bad_request \
	"b'POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}'"
expect_raw "Content-Length and Transfer-Encoding" 400 bad_request \
	"b'POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n'"
expect_raw "Transfer-Encoding: gzip" 501 not_implemented \
	"b'POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n'"
expect_raw "space before the colon" 400 bad_request \
	"b'POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length : 2\r\nConnection: close\r\n\r\n{}'"
expect_raw "two Host headers" 400 bad_request \
	"b'GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n'"

# the path is routed as sent, then the {id} segment decoded
req POST /v1/tasks '{"kind":"strict","in":"1h"}'
SID=$(jf 'j["id"]')
req POST "/v1/tasks/$SID/kill"
expect_eq "task killed: DEAD" DEAD "$(jf 'j["state"]')"
req POST "/v1/tasks/$SID%2Fretry"
[ "$STATUS" != 200 ] && ok || bad "POST /v1/tasks/$SID%2Fretry retried task $SID"
req GET "/v1/tasks/$SID"
expect_eq "%2F did not retry the task" DEAD "$(jf 'j["state"]')"
req GET "/v1/tasks/$SID%00abc"
expect_error 400 bad_request "escaped NUL in an id"
req GET "/nope/%00"
expect_error 400 bad_request "escaped NUL on no route"
req GET "/v1/tasks/$SID%zz"
expect_error 400 bad_request "bad escape in the path"
req GET "/v1/tasks?kind=strict%00zzz"
expect_error 400 bad_request "escaped NUL in kind"
req GET "/v1/tasks?kind=strict%2"
expect_error 400 bad_request "bad escape in the query"
req GET "/v1/tasks?kind=stri%63t"
expect_eq "an escaped kind filters as decoded" "$SID" "$(jf '" ".join(str(t["id"]) for t in j)')"
req GET "/v1/tasks?after=99999999999999999999"
expect_error 400 bad_request "after out of range"
req GET "/v1/tasks?limit=1&limit=abc"
expect_error 400 bad_request "repeated parameter"
req GET "/v1/tasks?limit=1&limit=1"
expect_error 400 bad_request "repeated parameter, same value"

# Origin: scheme, host and port
req POST /v1/tasks '{"kind":"strict","in":"1h"}' -H "Origin: https://127.0.0.1:$PORT"
expect_error 403 forbidden "Origin with another scheme"
req POST /v1/tasks '{"kind":"strict","in":"1h"}' -H "Origin: http://127.0.0.1:$PORT"
expect 201 "same origin"
req POST /v1/tasks '{"kind":"strict","in":"1h"}' -H "Origin: https://127.0.0.1:$PORT" \
	-H 'X-Forwarded-Proto: https'
expect 201 "https origin behind a TLS proxy (X-Forwarded-Proto)"

# bodies: a \u escape weighs 2 bytes, like \n
python3 -c 'import json; print(json.dumps({"kind": "ctl", "in": "1h", "payload": "\x01" * 400000}))' >"$T/ctl.json"
req POST /v1/tasks "@$T/ctl.json"
expect 201 "400 KB of control bytes ($(wc -c <"$T/ctl.json") bytes of JSON)"
expect_eq "its reply is cut and says so" "True 400000 4096" \
	"$(jf '"%s %s %s" % (j.get("payload_truncated"), j.get("payload_size"), len(j["payload"]))')"
python3 -c 'import json; print(json.dumps({"kind": "big", "payload": "x" * 2300000}))' >"$T/big.json"
req POST /v1/tasks "@$T/big.json"
expect_error 413 too_large "2.3 MB of text"
stop_server

# the token: whitespace around it is not part of it (RFC 9110)
TOKEN=0123456789abcdef-hostile-token
printf '%s\n' "$TOKEN" >"$T/token"
chmod 600 "$T/token"
start_server tok --listen 127.0.0.1:0 --token-file "$T/token"
raw "b'POST /v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer $TOKEN  \t \r\nContent-Length: 24\r\nConnection: close\r\n\r\n{\"kind\":\"tok\",\"in\":\"1h\"}'" >"$T/raw.json"
expect_eq "Bearer token with trailing spaces" 201 "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["status"])' "$T/raw.json")"
req POST /v1/tasks '{"kind":"tok","in":"1h"}' -H "Authorization: Bearer ${TOKEN}x"
expect_error 401 unauthorized "a longer token"
stop_server

finish
