#!/usr/bin/env python3
"""A due worker over HTTP (standard library only), for a service that
cannot be a child of `due work`.  It talks to `due serve`:

    POST /v1/claims            {"kinds": [...], "limit": 16, "lease": "30s", "wait": "20s"}
        -> [task, ...]         (long poll: [] after `wait` when nothing came)
    POST /v1/tasks/ID/complete {"attempt": N, "result": "..."}
    POST /v1/tasks/ID/fail     {"attempt": N, "error": "..."}
    POST /v1/tasks/ID/extend   {"attempt": N, "lease": "30s"}
        -> 409 {"error": "rejected_stale"} when this try lost its lease:
           the store changed nothing; drop the task, someone else has it.

Run:  python3 examples/http_worker.py --url http://127.0.0.1:8080 --kinds email
With a token (`due serve --token-file`), set DUE_TOKEN or --token.

Each try's lease is extended every lease/3 while its handler runs, from a
timer thread, so a slow handler keeps its task; a 409 there means the try
was taken back (requeued, killed, expired): the handler's work will not
commit.  Use task["idempotency_key"] (the same on every attempt) for
external effects.
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


def keep_lease(args, task, stop):
    """Extend the try's lease every lease/3 until `stop` is set."""
    c = Client(args.url, args.token)
    while not stop.wait(args.lease_s / 3):
        st, _ = c.post("/v1/tasks/%d/extend" % task["id"],
                       {"attempt": task["attempt"], "lease": "%ds" % args.lease_s})
        if st == 409:
            print("task %d: lease lost" % task["id"], file=sys.stderr)
            return


def run_one(args, c, task):
    stop = threading.Event()
    keeper = threading.Thread(target=keep_lease, args=(args, task, stop), daemon=True)
    keeper.start()
    try:
        path, body = "complete", {"result": handle(task)}
    except Exception as e:  # the try fails; due retries it with backoff
        path, body = "fail", {"error": "%s: %s" % (type(e).__name__, e)}
    stop.set()
    body["attempt"] = task["attempt"]
    st, reply = c.post("/v1/tasks/%d/%s" % (task["id"], path), body)
    if st == 409:
        print("task %d: stale, not committed" % task["id"], file=sys.stderr)
    elif st != 200:
        print("task %d: %s: %s" % (task["id"], st, reply), file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--token", default=os.environ.get("DUE_TOKEN"))
    p.add_argument("--kinds", default="", help="comma-separated; empty: every kind")
    p.add_argument("--limit", type=int, default=16)
    p.add_argument("--lease-s", type=int, default=30)
    p.add_argument("--exit-when-idle", action="store_true",
                   help="stop after a claim that found nothing (tests, drains)")
    args = p.parse_args()
    c = Client(args.url, args.token)
    claim = {"kinds": [k for k in args.kinds.split(",") if k],
             "limit": args.limit, "lease": "%ds" % args.lease_s,
             "wait": "1s" if args.exit_when_idle else "20s"}
    while True:
        st, tasks = c.post("/v1/claims", claim)
        if st != 200:
            sys.exit("claim: %s: %s" % (st, tasks))
        if not tasks and args.exit_when_idle:
            return
        for task in tasks:
            run_one(args, c, task)


if __name__ == "__main__":
    main()
