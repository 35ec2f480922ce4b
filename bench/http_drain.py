#!/usr/bin/env python3
"""http_drain.py - drain a store through the HTTP worker API (python3
standard library only; part of bench/run's W5).

  http_drain.py --db sqlite:PATH [--n 20000] [--clients 4] [--limit 16]
                [--one-by-one] [--due build/due] [--worker examples/http_worker.py]

Fills a fresh SQLite store with n tasks due now (`due add --batch`, one
transaction), starts `due serve` on a free loopback port over it, then
--clients copies of the example worker:

  python3 examples/http_worker.py --url URL --limit 16 --noop --exit-when-idle

(batch completions, POST /v1/completions: its default; --one-by-one: one
POST /v1/tasks/ID/complete per task).  When they have all exited, it reads
the store's attempt history: tasks/s is n over the time from the first
claim to the last completion, both as the store recorded them, so neither
the processes' start nor the idle claim that ends each worker counts.
Exactly once: every task must be DONE at attempt 1 with one attempt row;
"duplicates" counts tries beyond the first, "missing" tasks not DONE.

Prints one JSON line on stdout (workload "http", variant "batch" or
"one-by-one") and a progress line a second on stderr.  Exits 2 on bad
arguments (a URL that is not a fresh SQLite file), 1 when the server or a
worker failed.
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def die(code, msg):
    print("http_drain.py: " + msg, file=sys.stderr)
    sys.exit(code)


def sqlite_path(url):
    if not url.startswith("sqlite:"):
        die(2, "--db must be a sqlite:PATH URL (the check reads the attempt "
            "history from the file), not '%s'" % url)
    return url[len("sqlite:"):].split("?", 1)[0]


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def count_done(path):
    try:
        con = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=0.2)
        try:
            return con.execute("SELECT count(*) FROM due_task WHERE state = 'DONE'").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return None


def check(path, n):
    """Times (store microseconds) and the exactly-once counts."""
    con = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)
    try:
        first, last, tries = con.execute(
            "SELECT min(claimed_at), max(ended_at), count(*) FROM due_attempt").fetchone()
        done1 = con.execute("SELECT count(*) FROM due_task WHERE state = 'DONE' AND attempt = 1"
                            ).fetchone()[0]
        done = con.execute("SELECT count(*) FROM due_task WHERE state = 'DONE'").fetchone()[0]
        extra = con.execute("SELECT coalesce(sum(attempt - 1), 0) FROM due_task WHERE attempt > 1"
                            ).fetchone()[0]
        total = con.execute("SELECT count(*) FROM due_task").fetchone()[0]
    finally:
        con.close()
    return {"first_claim_us": first, "last_end_us": last, "tries": tries,
            "done_at_attempt_1": done1, "done": done, "extra_tries": extra,
            "tasks": total, "missing": n - done,
            "duplicates": max(extra, tries - n if tries else 0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", required=True)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("--one-by-one", action="store_true")
    ap.add_argument("--due", default=os.path.join(ROOT, "build", "due"))
    ap.add_argument("--worker", default=os.path.join(ROOT, "examples", "http_worker.py"))
    args = ap.parse_args()
    if args.n < 1 or args.clients < 1 or not 1 <= args.limit <= 1000:
        die(2, "--n and --clients must be at least 1, --limit 1 to 1000")
    path = sqlite_path(args.db)
    if os.path.exists(path):
        die(2, "'%s' exists: give a fresh file (the check counts every task in it)" % path)
    for f in (args.due, args.worker):
        if not os.path.exists(f):
            die(2, "'%s' is missing" % f)
    env = dict(os.environ, DUE_DB=args.db)
    env.pop("DUE_TOKEN", None)

    subprocess.run([args.due, "init"], env=env, check=True, stdout=subprocess.DEVNULL)
    lines = "".join('{"kind": "bench", "payload": "%d"}\n' % i for i in range(args.n))
    r = subprocess.run([args.due, "add", "--batch", "-"], env=env, input=lines, text=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if r.returncode != 0:
        die(1, "due add --batch: " + r.stderr.strip())

    # Output goes to files beside the store: a pipe nobody reads while the
    # drain runs could fill and stop a process.
    logs = os.path.dirname(os.path.abspath(path))
    serve_out = open(os.path.join(logs, "serve.out"), "w+")
    serve_err = open(os.path.join(logs, "serve.err"), "w+")
    serve = subprocess.Popen([args.due, "serve", "--listen", "127.0.0.1:0"], env=env,
                             stdout=serve_out, stderr=serve_err)
    workers = []
    try:
        line, deadline = "", time.monotonic() + 30
        while time.monotonic() < deadline and serve.poll() is None:
            serve_out.seek(0)
            line = serve_out.readline()  # "listening on http://HOST:PORT/"
            if line.endswith("\n"):
                break
            time.sleep(0.05)
        if not line.startswith("listening on "):
            serve_err.seek(0)
            die(1, "due serve did not start: " + (line + serve_err.read()).strip())
        url = line.split()[-1].rstrip("/")
        load0 = loadavg()
        t0 = time.monotonic()
        argv = [sys.executable, args.worker, "--url", url, "--limit", str(args.limit),
                "--noop", "--exit-when-idle"] + (["--one-by-one"] if args.one_by_one else [])
        for i in range(args.clients):
            err = open(os.path.join(logs, "worker-%d.err" % (i + 1)), "w+")
            workers.append((subprocess.Popen(argv, env=env, stderr=err), err))
        last_t, last_n = t0, 0
        while any(w.poll() is None for w, _ in workers):
            time.sleep(0.2)
            now = time.monotonic()
            if now - last_t >= 1:
                n = count_done(path)
                if n is not None:
                    print("  [http %s] %4.0fs  %d/%d done, %.0f tasks/s"
                          % ("one-by-one" if args.one_by_one else "batch", now - t0, n,
                             args.n, (n - last_n) / (now - last_t)), file=sys.stderr)
                    last_n = n
                last_t = now
        wall = time.monotonic() - t0
        load1 = loadavg()
        errs = []
        for w, err in workers:
            err.seek(0)
            errs.append((w.returncode, err.read().strip()))
    finally:
        for w, _ in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        serve.terminate()
        try:
            serve.wait(10)
        except subprocess.TimeoutExpired:
            serve.kill()
    bad = [e for e in errs if e[0] != 0]
    for rc, err in errs:
        if err:
            print("  [worker] " + err.replace("\n", "\n  [worker] "), file=sys.stderr)
    if bad:
        die(1, "%d of %d workers failed (exit %s)" % (len(bad), len(errs), bad[0][0]))

    c = check(path, args.n)
    if c["first_claim_us"] is None or c["last_end_us"] is None:
        die(1, "no completed try in the store")
    secs = (c["last_end_us"] - c["first_claim_us"]) / 1e6
    out = {"workload": "http", "variant": "one-by-one" if args.one_by_one else "batch",
           "n": args.n, "concurrency": args.clients, "limit": args.limit,
           "seconds": secs, "tasks_per_s": args.n / secs if secs > 0 else None,
           "wall_s": wall, "duplicates": c["duplicates"], "missing": c["missing"],
           "done_at_attempt_1": c["done_at_attempt_1"], "tries": c["tries"],
           "load1_start": load0, "load1_end": load1}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
