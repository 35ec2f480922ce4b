#!/usr/bin/env python3
"""A due pipe handler in Python (standard library only).

Run it with:  due work --pipe 'python3 examples/pipe_handler.py'

due starts this program once per handler slot and keeps it.  It writes one
JSON object per line on our stdin, one per task:

    {"id": 42, "kind": "email", "attempt": 1, "due_at": "...",
     "idempotency_key": "task-42", "payload": "..."}   (or "payload_b64")

and reads one line back on our stdout:

    {"id": 42, "attempt": 1, "ok": true, "result": "..."}
    {"id": 42, "attempt": 1, "ok": false, "error": "..."}

Anything written to stderr goes to the worker's log with the task id (whole
lines, at most 1000 lines or 256 KiB a second: the rest is dropped and
counted).  Never print anything else on stdout: exactly one line per task; a
line written while no task is outstanding gets this process replaced.  At EOF
on stdin the worker is stopping: exit (SIGTERM follows 2 s later, SIGKILL
after the worker's --kill-grace).

What this example does with a payload (so the tests can drive it):
    "fail: TEXT"   answers ok: false with TEXT as the error
    "sleep: SECS"  sleeps, then answers (to test cancel and time limits)
    "exit: CODE"   exits without answering (to test a dying process)
    "garbage"      writes a line that is not JSON (a malformed answer)
    "log: TEXT"    writes TEXT to stderr, then answers
    anything else  answers ok: true with "<pid> <payload upper-cased>"
"""
import base64
import json
import os
import sys
import time


def handle(task):
    """Return (ok, text) for one task; raise to fail it."""
    if "payload_b64" in task:
        payload = base64.b64decode(task["payload_b64"]).decode("latin-1")
    else:
        payload = task["payload"]
    if payload.startswith("fail: "):
        return False, payload[6:]
    if payload.startswith("sleep: "):
        time.sleep(float(payload[7:]))
    elif payload.startswith("exit: "):
        sys.exit(int(payload[6:]))
    elif payload == "garbage":
        sys.stdout.write("this is not JSON\n")
        sys.stdout.flush()
        return None
    elif payload.startswith("log: "):
        print(payload[5:], file=sys.stderr, flush=True)
    return True, "%d %s" % (os.getpid(), payload.upper())


def main():
    for line in sys.stdin:  # EOF on stdin: the worker is stopping
        task = json.loads(line)
        answer = {"id": task["id"], "attempt": task["attempt"]}
        try:
            out = handle(task)
        except Exception as e:  # a bug in one task fails that task only
            out = (False, "%s: %s" % (type(e).__name__, e))
        if out is None:
            continue
        ok, text = out
        answer["ok"] = ok
        answer["result" if ok else "error"] = text
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
