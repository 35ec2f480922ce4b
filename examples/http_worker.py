#!/usr/bin/env python3
"""A due worker over HTTP (standard library only), for a service that
cannot be a child of `due work`.  It talks to `due serve`:

    POST /v1/claims            {"kinds": [...], "limit": 16, "lease": "30s", "wait": "20s"}
        -> [task, ...]         (long poll: [] after `wait` when nothing came; each
                               task has "attempt", "idempotency_key" and "deadline":
                               the end of its time limit, or null)
    POST /v1/tasks/ID/complete {"attempt": N, "result": "..."}
    POST /v1/tasks/ID/fail     {"attempt": N, "error": "..."}
    POST /v1/tasks/ID/extend   {"attempt": N, "lease": "30s"}
        -> 409 {"error": "rejected_stale"} when this try lost its lease:
           the store changed nothing; drop the task, someone else has it.
        -> 409 {"error": "timed_out", "outcome": ...} past the try's deadline:
           nothing of the call was kept, the try ended TIMED_OUT (retried).
        A call repeated after a lost reply answers as the first one did, so
        retrying a POST once on a dropped connection (as post() does) is safe.
    POST /v1/completions       {"items": [{"id": ID, "attempt": N, "result": "..."}, ...]}
        -> [{"id": ID, "outcome": "DONE" | "REJECTED_STALE" | "TIMED_OUT" | ...}, ...]
           (one transaction; each item fenced on its own)

Run:  python3 examples/http_worker.py --url http://127.0.0.1:7070 --kinds email
With a token (`due serve --token-file`), set DUE_TOKEN or --token.

It claims up to --limit tasks, runs them one after the other, fails each
failed one at once and completes the others with one POST /v1/completions
(--one-by-one: one request each).  The leases of the claimed tries not yet
finished are extended every lease/3 from a keeper thread, so a slow
handler keeps its tasks; a 409 there means the try was taken back
(requeued, killed, expired): its work will not commit.  Use
task["idempotency_key"] (the same on every attempt) for external effects.
"""
import argparse
import http.client
import json
import os
import sys
import threading
import urllib.parse


class Client:
    """One keep-alive connection to due serve (not shared by threads)."""

    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = "Bearer " + token
        self.conn = None

    def post(self, path, body, timeout=90):
        """(status, decoded JSON reply); reconnects once on a dropped connection."""
        data = json.dumps(body).encode()
        for retry in (True, False):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
            try:
                self.conn.request("POST", path, data, self.headers)
                r = self.conn.getresponse()
                return r.status, json.loads(r.read() or b"null")
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if not retry:
                    raise


def handle(task):
    """The work.  Return the result text; raise to fail the try."""
    payload = task.get("payload")
    if payload is None:
        raise ValueError("binary payloads are not handled here")
    if payload.startswith("fail"):
        raise RuntimeError("asked to fail: " + payload)
    return payload.upper()


class LeaseKeeper(threading.Thread):
    """Extends the leases of the claimed, unfinished tries every lease/3,
    on its own connection; a 409 means that try was taken back (its work
    will not commit)."""

    def __init__(self, args):
        super().__init__(daemon=True)
        self.args, self.lock, self.tasks = args, threading.Lock(), {}
        self.client = Client(args.url, args.token)

    def add(self, tasks):
        with self.lock:
            self.tasks.update((t["id"], t) for t in tasks)

    def done(self, task):
        with self.lock:
            self.tasks.pop(task["id"], None)

    def run(self):
        while True:
            threading.Event().wait(self.args.lease_s / 3)
            with self.lock:
                tasks = list(self.tasks.values())
            for task in tasks:
                st, reply = self.client.post("/v1/tasks/%d/extend" % task["id"],
                                             {"attempt": task["attempt"],
                                              "lease": "%ds" % self.args.lease_s})
                with self.lock:
                    lost = st == 409 and self.tasks.pop(task["id"], None)
                if lost:  # not finished meanwhile: taken back, or past its limit
                    print("task %d: %s" % (task["id"], "past its time limit"
                                           if reply.get("error") == "timed_out"
                                           else "lease lost"), file=sys.stderr)


def report(task, st, reply):
    if (st == 409 and reply.get("error") == "timed_out") or \
            (st == 200 and reply.get("outcome") == "TIMED_OUT"):
        print("task %d: past its time limit, not committed" % task["id"], file=sys.stderr)
    elif st == 409 or (st == 200 and reply.get("outcome") == "REJECTED_STALE"):
        print("task %d: stale, not committed" % task["id"], file=sys.stderr)
    elif st != 200:
        print("task %d: %s: %s" % (task["id"], st, reply), file=sys.stderr)


def run_batch(args, c, keeper, tasks, work):
    """Run the claimed tasks one after the other; fail each failed one at
    once, complete the others together in one transaction at the end
    (POST /v1/completions), or one by one with --one-by-one."""
    done = []
    for task in tasks:
        try:
            result = work(task)
        except Exception as e:  # the try fails; due retries it with backoff
            keeper.done(task)
            st, reply = c.post("/v1/tasks/%d/fail" % task["id"],
                               {"attempt": task["attempt"],
                                "error": "%s: %s" % (type(e).__name__, e)})
            report(task, st, reply)
            continue
        if args.one_by_one:
            keeper.done(task)
            st, reply = c.post("/v1/tasks/%d/complete" % task["id"],
                               {"attempt": task["attempt"], "result": result})
            report(task, st, reply)
        else:
            done.append((task, result))
    if done:
        st, reply = c.post("/v1/completions", {"items": [
            {"id": t["id"], "attempt": t["attempt"], "result": r} for t, r in done]})
        for t, _ in done:
            keeper.done(t)
        if st != 200:
            sys.exit("completions: %s: %s" % (st, reply))
        for (t, _), out in zip(done, reply):
            report(t, 200, out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:7070")
    p.add_argument("--token", default=os.environ.get("DUE_TOKEN"))
    p.add_argument("--kinds", default="", help="comma-separated; empty: every kind")
    p.add_argument("--limit", type=int, default=16)
    p.add_argument("--lease-s", type=int, default=30)
    p.add_argument("--exit-when-idle", action="store_true",
                   help="stop after a claim that found nothing (tests, drains)")
    p.add_argument("--one-by-one", action="store_true",
                   help="complete each task with its own request")
    p.add_argument("--noop", action="store_true",
                   help="complete every task with an empty result (benchmarks)")
    args = p.parse_args()
    work = (lambda task: "") if args.noop else handle
    c = Client(args.url, args.token)
    keeper = LeaseKeeper(args)
    keeper.start()
    claim = {"limit": args.limit, "lease": "%ds" % args.lease_s,
             "wait": "1s" if args.exit_when_idle else "20s"}
    kinds = [k for k in args.kinds.split(",") if k]
    if kinds:  # no "kinds" claims every kind; an empty list is refused
        claim["kinds"] = kinds
    while True:
        st, tasks = c.post("/v1/claims", claim)
        if st != 200:
            sys.exit("claim: %s: %s" % (st, tasks))
        if not tasks and args.exit_when_idle:
            return
        keeper.add(tasks)
        run_batch(args, c, keeper, tasks, work)


if __name__ == "__main__":
    main()
