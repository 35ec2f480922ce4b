#!/usr/bin/env bash
# test_http_limits.sh - the promises of the HTTP worker API that depend on
# the store, on every store (SQLite, PostgreSQL, Redis, MariaDB), with two
# real `due serve` processes (--threads 1 --timeout 5s) and a client in
# Python (standard library: http.client and raw sockets):
#
#  - an empty POST /v1/claims body takes every default;
#  - long polls never queue behind each other: 24 polls of wait 2s on one
#    --threads are all answered [] within wait + 3 s (they took 10/20/30 s);
#  - no ghost claims: a poll whose client hung up claims nothing, and the
#    task goes to the live poller (attempt 1, its owner); on SQLite, a
#    claim that was waiting for the store's lock when its client left is
#    given back at once (REQUEUED);
#  - expired leases come back with only HTTP clients: a crashed client's
#    task (lease 1s) is claimed again by a wait:0 poll within seconds, its
#    old holder's complete is then 409 and marked as a late commit; a
#    cancel-requested task whose holder vanished ends CANCELLED, unasked;
#  - time limits: the claim reply carries the deadline (claim + timeout);
#    extends are 200 until it, then 409 timed_out and the try ends
#    TIMED_OUT (retried); a complete after the limit is 409 timed_out, its
#    result not stored, the task DEAD when out of attempts; a try claimed
#    through the other server is judged by the store's clock and the
#    kind's timeout; a batch item past its limit is TIMED_OUT; a client
#    that goes silent has its try ended TIMED_OUT at the limit;
#  - replies: a replayed complete or fail answers as the first did (200,
#    no late-commit mark), a different result is 409, extend and fail of a
#    finished try are 409 without marking it; an unknown id is 404, and
#    NOT_FOUND in a batch.
#
# Timings are functional bounds only (wait + 3 s, not 10 s).  The
# scenarios of one store run at once, in threads, so a store takes ~5 s.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/http_lib.sh"
PIDS=()
CLEANUP=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null; for c in "${CLEANUP[@]}"; do eval "$c" >/dev/null 2>&1 || true; done; rm -rf "$T"' EXIT

cat >"$T/client.py" <<'PY'
import http.client, json, socket, subprocess, sys, threading, time, urllib.parse
from datetime import datetime

URL1, URL2, DB, DUE = sys.argv[1:5]
fails = []
passed = [0]
lock = threading.Lock()


def check(what, cond, got=None):
    with lock:
        if cond:
            passed[0] += 1
        else:
            fails.append("%s (got %r)" % (what, got))


def call(method, path, body=None, url=URL1, timeout=30):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    c.request(method, path, data, {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, json.loads(raw) if raw else None


def post(path, body=None, url=URL1, timeout=30):
    return call("POST", path, body, url, timeout)


def task(tid):
    return call("GET", "/v1/tasks/%d" % tid)[1]


def add(kind, **kw):
    st, t = post("/v1/tasks", dict(kind=kind, **kw))
    assert st == 201, (st, t)
    time.sleep(0.02)  # see claim()
    return t["id"]


def ts(text):
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def claim(kind, **kw):
    # a short wait by default: on MariaDB a claim right after the submit
    # once found nothing (1 run in ~10; not investigated here)
    kw.setdefault("wait", "2s")
    return post("/v1/claims", dict(kinds=[kind], **kw), timeout=30)


def attempt_row(tid, n):
    return [a for a in task(tid)["attempts"] if a["attempt"] == n][0]


# -- an empty body takes every default (run alone: it claims any kind) ---
e = add("e5")
st, got = post("/v1/claims", b"")
ok = st == 200 and [t["id"] for t in got] == [e]
check("empty body: 200 with the task", ok, (st, got))
check("empty body: the default owner", ok and got[0]["lease_owner"] == "http", got)
post("/v1/tasks/%d/complete" % e, {"attempt": 1})



def give_back():
    """SQLite: a client that leaves while its claim waits for the store's
    lock gets nothing: what was claimed for it is given back at once."""
    import sqlite3
    g = add("gb")
    lockc = sqlite3.connect(DB[len("sqlite:"):].split("?")[0], isolation_level=None, timeout=10)
    lockc.execute("BEGIN IMMEDIATE")  # the claim below waits for this
    u = urllib.parse.urlsplit(URL1)
    s = socket.create_connection((u.hostname, u.port))
    body = json.dumps({"kinds": ["gb"], "lease": "30s", "owner": "leaver"}).encode()
    s.sendall(b"POST /v1/claims HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.4)
    s.close()  # gone while its claim waits
    time.sleep(0.2)
    lockc.execute("COMMIT")
    t0 = time.time()
    while time.time() - t0 < 5 and (task(g)["attempts"] or [{}])[0].get("outcome") in (None, "RUNNING"):
        time.sleep(0.1)
    tk = task(g)
    check("give back: the claim made for a client that left is given back at once",
          (tk["state"], [(a["worker"], a["outcome"]) for a in tk["attempts"]]) ==
          ("SCHEDULED", [("leaver", "REQUEUED")]), (tk["state"], tk["attempts"]))


if DB.startswith("sqlite:"):
    give_back()


def bound():
    """24 polls of wait 2s at once on --threads 1: each within wait + 3 s."""
    out = []

    def one():
        t0 = time.time()
        try:
            st, body = post("/v1/claims", {"kinds": ["qq"], "wait": "2s"}, timeout=30)
        except Exception as e:
            st, body = repr(e), None
        out.append((st, body, time.time() - t0))

    th = [threading.Thread(target=one) for _ in range(24)]
    [t.start() for t in th]
    [t.join() for t in th]
    check("24 polls: all 200 []", all(o[0] == 200 and o[1] == [] for o in out), [o[:2] for o in out if o[:2] != (200, [])])
    slowest = max(o[2] for o in out)
    check("24 polls: each answered within wait + 3 s", slowest < 5.0, slowest)
    check("24 polls: none before its wait", min(o[2] for o in out) > 1.8, min(o[2] for o in out))
    print("  24 polls of wait 2s: slowest %.2f s" % slowest)


def ghost():
    """A poll whose client hung up claims nothing; the live one gets it."""
    u = urllib.parse.urlsplit(URL1)
    s = socket.create_connection((u.hostname, u.port))
    body = json.dumps({"kinds": ["gh"], "wait": "20s", "lease": "1m", "owner": "ghost"}).encode()
    s.sendall(b"POST /v1/claims HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(0.5)
    s.close()  # gone while its poll waits
    res = {}
    live = threading.Thread(target=lambda: res.update(r=post("/v1/claims", {
        "kinds": ["gh"], "wait": "10s", "owner": "live"}, timeout=30)))
    live.start()
    time.sleep(0.5)
    g = add("gh")
    live.join()
    st, got = res["r"]
    check("ghost: the live poller got the task", st == 200 and [t["id"] for t in got] == [g], (st, got))
    check("ghost: as attempt 1 (no try for the departed client)",
          got and got[0]["attempt"] == 1 and got[0]["lease_owner"] == "live", got)
    check("ghost: no attempt owned by the departed client",
          all(a["worker"] != "ghost" for a in task(g)["attempts"]), task(g)["attempts"])
    post("/v1/tasks/%d/complete" % g, {"attempt": 1})


def reclaim():
    """A crashed client's lease (1s) comes back to wait:0 polls."""
    r = add("rc2")
    st, got = claim("rc2", lease="1s", owner="crashed")
    check("reclaim: claimed by the client that crashes", st == 200 and got and got[0]["id"] == r, got)
    again, t0 = None, time.time()
    while time.time() - t0 < 6 and not again:
        time.sleep(0.3)
        st, got = claim("rc2", wait="0s", lease="30s", owner="next")
        if st == 200 and got:
            again = got[0]
    check("reclaim: a wait:0 poll claims it again, attempt 2, within lease + 3 s",
          again and again["attempt"] == 2 and time.time() - t0 < 4.5, (again, time.time() - t0))
    check("reclaim: the first try LEASE_EXPIRED", attempt_row(r, 1)["outcome"] == "LEASE_EXPIRED", attempt_row(r, 1))
    st, body = post("/v1/tasks/%d/complete" % r, {"attempt": 1, "result": "late"})
    check("reclaim: the old holder's complete is 409 rejected_stale",
          st == 409 and body["error"] == "rejected_stale", (st, body))
    check("reclaim: and is marked as a late commit", attempt_row(r, 1)["late_commit"] == "REJECTED_STALE",
          attempt_row(r, 1))
    if again:
        st, body = post("/v1/tasks/%d/complete" % r, {"attempt": 2, "result": "ok"})
        check("reclaim: the new holder completes", (st, body["outcome"]) == (200, "DONE"), (st, body))


def cancel_vanished():
    """A cancel-requested task whose holder vanished ends CANCELLED."""
    c = add("rc2c")
    st, got = claim("rc2c", lease="1s")
    st, body = call("DELETE", "/v1/tasks/%d" % c)
    check("cancel: REQUESTED while claimed", body and body["outcome"] == "REQUESTED", body)
    t0 = time.time()
    while time.time() - t0 < 6 and task(c)["state"] != "CANCELLED":
        time.sleep(0.2)
    check("cancel: CANCELLED within lease + 3 s, with no claim at all",
          task(c)["state"] == "CANCELLED" and time.time() - t0 < 4.5, (task(c)["state"], time.time() - t0))


def extend_past_limit():
    """The issue's case: timeout 2s, lease 1s, extend every 0.4 s."""
    f = add("fx", timeout="2s", max_attempts=3, backoff="1h")
    st, got = claim("fx", lease="1s")
    t = got[0]
    check("limit: the claim reply has the deadline = claim + 2s",
          t.get("deadline") and abs(ts(t["deadline"]) - ts(t["lease_until"]) - 1.0) < 0.002, t)
    check("limit: and the timeout", t.get("timeout") == "2s", t.get("timeout"))
    codes = []
    t0 = time.time()
    while time.time() - t0 < 4:
        st, body = post("/v1/tasks/%d/extend" % f, {"attempt": 1, "lease": "1s"})
        codes.append((round(time.time() - t0, 2), st, body.get("outcome"), body.get("error")))
        if st != 200:
            break
        time.sleep(0.4)
    last = codes[-1]
    check("limit: extends granted before the deadline", all(c[1] == 200 for c in codes[:-1]) and len(codes) >= 4, codes)
    check("limit: the extend past it is 409 timed_out, RETRY_SCHEDULED",
          last[1:] == (409, "RETRY_SCHEDULED", "timed_out") and last[0] >= 1.8, codes)
    st, body = post("/v1/tasks/%d/complete" % f, {"attempt": 1, "result": "too late"})
    check("limit: the complete after it is 409 timed_out", st == 409 and body["error"] == "timed_out", (st, body))
    tk = task(f)
    a = attempt_row(f, 1)
    check("limit: the try ended TIMED_OUT, result not stored, retried",
          (a["outcome"], a["error"], tk["state"], tk["result"]) ==
          ("TIMED_OUT", "timed out after 2s", "SCHEDULED", None), (a, tk["state"], tk["result"]))


def late_complete():
    """A complete after the limit: 409, nothing stored, DEAD (1 attempt)."""
    f = add("fx1", timeout="1s", max_attempts=1)
    st, got = claim("fx1", lease="30s")
    time.sleep(1.3)
    st, body = post("/v1/tasks/%d/complete" % f, {"attempt": 1, "result": "late"})
    check("late complete: 409 timed_out, DEAD",
          (st, body.get("error"), body.get("outcome")) == (409, "timed_out", "DEAD"), (st, body))
    st2, body2 = post("/v1/tasks/%d/complete" % f, {"attempt": 1, "result": "late"})
    check("late complete: its replay answers the same", (st2, body2) == (st, body), (st2, body2))
    tk = task(f)
    check("late complete: DEAD, no result, TIMED_OUT, no late mark",
          (tk["state"], tk["result"], tk["attempts"][0]["outcome"], tk["attempts"][0]["late_commit"]) ==
          ("DEAD", None, "TIMED_OUT", None), tk)


def silent():
    """A client that goes silent past the limit: its try ends TIMED_OUT at
    the limit (not when its 30 s lease ends), and its late complete is
    409 timed_out."""
    f = add("fxs", timeout="1s", max_attempts=2, backoff="1h")
    st, got = claim("fxs", lease="30s")
    t0 = time.time()
    while time.time() - t0 < 5 and attempt_row(f, 1)["outcome"] == "RUNNING":
        time.sleep(0.1)
    tk = task(f)
    check("silent: TIMED_OUT within limit + 1.5 s, retried",
          (tk["attempts"][0]["outcome"], tk["state"]) == ("TIMED_OUT", "SCHEDULED") and time.time() - t0 < 2.5,
          (tk["attempts"][0], tk["state"], time.time() - t0))
    st, body = post("/v1/tasks/%d/complete" % f, {"attempt": 1, "result": "x"})
    check("silent: its complete is 409 timed_out", (st, body.get("error")) == (409, "timed_out"), (st, body))


def other_server():
    """A try claimed through server 1, ended through server 2: the kind's
    limit and the store's clock decide; a batch item past it TIMED_OUT."""
    st, _ = call("PUT", "/v1/kinds/fxk", {"timeout": "1s"})
    check("kind timeout set", st == 200, st)
    a, b = add("fxk", max_attempts=2, backoff="1h"), add("fxk", max_attempts=2, backoff="1h")
    st, got = claim("fxk", limit=2, lease="30s")
    check("kind limit: claimed with a deadline", st == 200 and len(got) == 2 and all(t.get("deadline") for t in got), got)
    time.sleep(1.3)
    st, body = post("/v1/tasks/%d/complete" % a, {"attempt": 1, "result": "x"}, url=URL2)
    check("kind limit, other server: 409 timed_out", st == 409 and body["error"] == "timed_out", (st, body))
    st, body = post("/v1/completions", {"items": [{"id": b, "attempt": 1, "result": "x"}]}, url=URL2)
    check("kind limit, batch on the other server: TIMED_OUT",
          st == 200 and body[0]["outcome"] == "TIMED_OUT", (st, body))
    for i in (a, b):
        tk = task(i)
        check("kind limit: task %d TIMED_OUT, not stored" % i,
              (tk["attempts"][0]["outcome"], tk["result"], tk["state"]) == ("TIMED_OUT", None, "SCHEDULED"), tk)


def replays():
    """A replayed complete/fail answers as the first; late calls on a
    finished try are 409 without a late mark; unknown ids 404."""
    d, f = add("rp"), add("rp", max_attempts=3, backoff="1h")
    st, got = claim("rp", limit=2)
    check("replay: both claimed", st == 200 and len(got) == 2, got)
    first = post("/v1/tasks/%d/complete" % d, {"attempt": 1, "result": "r1"})
    check("replay: the complete", first == (200, {"id": d, "outcome": "DONE"}), first)
    for url in (URL1, URL2):
        again = post("/v1/tasks/%d/complete" % d, {"attempt": 1, "result": "r1"}, url=url)
        check("replay: the same complete again answers as the first (%s)" % url, again == first, again)
    st, body = post("/v1/completions", {"items": [{"id": d, "attempt": 1, "result": "r1"}]})
    check("replay: in a batch, DONE", st == 200 and body[0]["outcome"] == "DONE", body)
    st, body = post("/v1/tasks/%d/complete" % d, {"attempt": 1, "result": "other"})
    check("replay: another result is 409 rejected_stale", st == 409 and body["error"] == "rejected_stale", (st, body))
    for op, b in (("extend", {"attempt": 1}), ("fail", {"attempt": 1, "error": "x"})):
        st, body = post("/v1/tasks/%d/%s" % (d, op), b)
        check("replay: %s of a finished try is 409" % op, st == 409, (st, body))
    tk = task(d)
    check("replay: result kept, the DONE try not marked late",
          (tk["state"], tk["result"], tk["attempts"][0]["late_commit"]) == ("DONE", "r1", None), tk)
    first = post("/v1/tasks/%d/fail" % f, {"attempt": 1, "error": "boom"})
    check("replay: the fail", first == (200, {"id": f, "outcome": "RETRY_SCHEDULED"}), first)
    again = post("/v1/tasks/%d/fail" % f, {"attempt": 1, "error": "boom"})
    check("replay: the same fail again answers as the first", again == first, again)
    st, body = post("/v1/tasks/%d/extend" % f, {"attempt": 1})
    check("replay: extend of a failed try is 409", st == 409, (st, body))
    check("replay: the failed try not marked late", attempt_row(f, 1)["late_commit"] is None, attempt_row(f, 1))
    st, body = post("/v1/tasks/999999999/complete", {"attempt": 1})
    check("unknown id: 404 not_found", (st, body["error"]) == (404, "not_found"), (st, body))
    st, body = post("/v1/completions", {"items": [{"id": 999999999, "attempt": 1}]})
    check("unknown id in a batch: NOT_FOUND", st == 200 and body[0]["outcome"] == "NOT_FOUND", (st, body))


threads = []
for fn in (bound, ghost, reclaim, cancel_vanished, extend_past_limit, late_complete, silent, other_server,
           replays):
    def run(fn=fn):
        try:
            fn()
        except Exception as e:
            import traceback
            with lock:
                fails.append("%s raised %s" % (fn.__name__, traceback.format_exc()))
    th = threading.Thread(target=run)
    th.start()
    threads.append(th)
[t.join() for t in threads]
for f in fails:
    print("FAIL: " + f)
print("%d checks passed, %d failed" % (passed[0], len(fails)))
sys.exit(1 if fails else 0)
PY

run_store() { # LABEL URL
	local label=$1 db=$2 u1 u2
	echo "== $label"
	"$DUE" init --db "$db" >/dev/null
	start_server "s1-$label" --db "$db" --listen 127.0.0.1:0 --threads 1 --timeout 5s
	u1=$URL
	local p1=$SPID
	start_server "s2-$label" --db "$db" --listen 127.0.0.1:0 --threads 1 --timeout 5s
	u2=$URL
	local p2=$SPID
	local t0=$SECONDS
	if python3 "$T/client.py" "$u1" "$u2" "$db" "$DUE"; then ok; else bad "$label: the HTTP limits scenarios"; fi
	echo "  $label: $((SECONDS - t0)) s"
	kill -TERM "$p1" "$p2"
	for p in "$p1" "$p2"; do
		wait "$p" || bad "$label: server $p did not exit 0: $(tail -5 "$T"/s*-"$label".err)"
	done
}
on_each_store run_store httplim

# A stop answers every waiting poll, and the reply reaches the client
# before the server closes its connections (the attack found 25 of 40 and
# 163 of 200 polls closed with no reply at all).  The server's own code,
# whatever the store: SQLite.
echo "== a stop answers the waiting polls"
export DUE_DB="sqlite:$T/stop.db"
"$DUE" init >/dev/null
start_server stop --listen 127.0.0.1:0 --threads 1 --timeout 30s
cat >"$T/stop.py" <<'PY'
import http.client, json, os, signal, sys, threading, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1]); pid = int(sys.argv[2]); n = 120
got = []; lock = threading.Lock()
def poll():
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        c.request("POST", "/v1/claims", json.dumps({"kinds": ["idle"], "wait": "20s"}),
                  {"Content-Type": "application/json"})
        r = c.getresponse(); body = r.read().decode()
        res = (r.status, body.strip()[:20])
    except Exception as e:
        res = ("no reply", type(e).__name__)
    with lock:
        got.append((res, time.time()))
th = [threading.Thread(target=poll) for _ in range(n)]
[t.start() for t in th]
time.sleep(2)
t0 = time.time(); os.kill(pid, signal.SIGTERM)
[t.join() for t in th]
bad = [r for r, _ in got if r[0] not in (200, 503)]
late = max(t for _, t in got) - t0
print("%d polls: %d without an HTTP reply %s, the last answered %.2f s after the signal"
      % (n, len(bad), bad[:3], late))
sys.exit(0 if not bad and late < 3 else 1)
PY
python3 "$T/stop.py" "$URL" "$SPID" && ok || bad "a stop: a waiting poll got no reply, or late"
wait "$SPID" && ok || bad "a stop with polls waiting: the server did not exit 0"
finish
