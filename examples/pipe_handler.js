#!/usr/bin/env node
// A due pipe handler in Node.js (standard library only).
//
// Run it with:  due work --pipe 'node examples/pipe_handler.js'
//
// due starts this program once per handler slot and keeps it.  It writes
// one JSON object per line on our stdin, one per task:
//
//   {"id": 42, "kind": "email", "attempt": 1, "due_at": "...",
//    "idempotency_key": "task-42", "payload": "..."}   (or "payload_b64")
//
// and reads one line back on our stdout:
//
//   {"id": 42, "attempt": 1, "ok": true, "result": "..."}
//   {"id": 42, "attempt": 1, "ok": false, "error": "..."}
//
// Anything written to stderr goes to the worker's log with the task id
// (whole lines, at most 1000 lines or 256 KiB a second: the rest is
// dropped and counted).  Never print anything else on stdout: exactly one
// line per task; a line written while no task is outstanding gets this
// process replaced.  Tasks come one at a time: the next line arrives after
// our answer.  At EOF on stdin the worker is stopping: exit (SIGTERM
// follows 2 s later, SIGKILL after the worker's --kill-grace).
//
// Payloads understood (the same as pipe_handler.py, for the tests):
//   "fail: TEXT"   answers ok: false with TEXT as the error
//   "sleep: SECS"  waits, then answers
//   "exit: CODE"   exits without answering
//   "garbage"      writes a line that is not JSON
//   "log: TEXT"    writes TEXT to stderr, then answers
//   anything else  answers ok: true with "<pid> <payload upper-cased>"
'use strict';
const readline = require('readline');

function answer(task, ok, text) {
  const a = {id: task.id, attempt: task.attempt, ok};
  a[ok ? 'result' : 'error'] = text;
  process.stdout.write(JSON.stringify(a) + '\n');
}

async function handle(task) {
  const payload = 'payload_b64' in task
    ? Buffer.from(task.payload_b64, 'base64').toString('latin1')
    : task.payload;
  if (payload.startsWith('fail: ')) return answer(task, false, payload.slice(6));
  if (payload.startsWith('sleep: '))
    await new Promise(r => setTimeout(r, parseFloat(payload.slice(7)) * 1000));
  else if (payload.startsWith('exit: ')) process.exit(parseInt(payload.slice(6), 10));
  else if (payload === 'garbage') return process.stdout.write('this is not JSON\n');
  else if (payload.startsWith('log: ')) process.stderr.write(payload.slice(5) + '\n');
  answer(task, true, `${process.pid} ${payload.toUpperCase()}`);
}

async function main() {
  const rl = readline.createInterface({input: process.stdin, terminal: false});
  for await (const line of rl) {  // ends at EOF: the worker is stopping
    const task = JSON.parse(line);
    try {
      await handle(task);
    } catch (e) {  // a bug in one task fails that task only
      answer(task, false, `${e.name}: ${e.message}`);
    }
  }
}

main();
