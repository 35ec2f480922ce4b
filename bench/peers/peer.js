#!/usr/bin/env node
// bench/peers/peer.js - the Node queues due is compared with, measured the way
// `due bench` measures due: on the same private servers, in one run.
//
//   node bench/peers/peer.js --queue bullmq|graphile-worker|pg-boss
//        --url URL [--n 20000] [--concurrency 4,16] [--no-enqueue]
//
// For each concurrency C, in a scratch namespace of its own (BullMQ: a Redis
// key prefix; graphile-worker and pg-boss: a PostgreSQL schema), dropped at
// the end:
//   enqueue  (once, before the first drain; not part of the drain's time)
//            n/4 single adds, one awaited call each (one commit / one
//            round trip per job, as due's W1), then n bulk adds in batches
//            of 1000 (BullMQ addBulk, graphile-worker addJobs, pg-boss
//            insert); the single-add jobs are removed again, not run
//   drain    n no-op jobs due now, already in the store, then one worker in
//            this process with the peer's own concurrency option at C; the
//            clock runs from the worker's start until the store says every
//            job is complete (read every 5 ms on a separate connection,
//            since graphile-worker and pg-boss complete without awaiting
//            the handler's caller; until the handlers have run n jobs only
//            every 500 ms); every job must have run exactly once
//            (the handler counts runs per job index).
// One JSON line per figure on stdout, shaped like due bench's:
//   {"queue","workload","variant","concurrency","n","seconds","tasks_per_s",
//    "cpu_us_per_task","duplicates","missing","durability","version"}
// cpu_us_per_task is this process's user + system CPU over the phase
// (process.cpuUsage), per job: the worker's side only, as due bench's.
//
// Durability: each peer's documented defaults, stated in "durability".
// BullMQ keeps completed jobs (removeOnComplete false) and is as durable as
// its Redis (bench/peers/run: appendfsync everysec, as due's Redis row).
// graphile-worker and pg-boss commit every change to PostgreSQL with the
// server's defaults (synchronous_commit on); graphile-worker deletes a
// job when it completes, pg-boss keeps it as 'completed'.
//
// pg-boss 10 (the newest that runs on Node 20) has no concurrency option:
// work() fetches batchSize jobs, runs the handler on the array, then waits
// out the rest of its polling interval (default 2 s, at least 0.5 s) even
// when it found work.  Its rows are therefore two: "fetch-loop", C
// async loops of fetch(batchSize 1) -> handler -> complete() (pg-boss's
// own manual-worker API: the store path at C in flight), and "work",
// work({batchSize: C, pollingIntervalSeconds: 0.5}) over 20*C jobs (the
// worker as documented, bounded by C per 0.5 s by construction).
"use strict";

const path = require("path");
const fs = require("fs");

function die(msg) {
  process.stderr.write("peer.js: " + msg + "\n");
  process.exit(2);
}

function parseArgs(argv) {
  const o = { n: 20000, conc: [4, 16], enqueue: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const val = () => {
      if (i + 1 >= argv.length) die(a + " needs a value");
      return argv[++i];
    };
    if (a === "--queue") o.queue = val();
    else if (a === "--url") o.url = val();
    else if (a === "--n") o.n = Number(val());
    else if (a === "--concurrency") o.conc = val().split(",").map(Number);
    else if (a === "--no-enqueue") o.enqueue = false;
    else if (a === "-h" || a === "--help") {
      process.stdout.write(fs.readFileSync(__filename, "utf8").split("\n")
        .slice(1, 44).map((l) => l.replace(/^\/\/ ?/, "")).join("\n") + "\n");
      process.exit(0);
    } else die("unknown option '" + a + "'");
  }
  if (!["bullmq", "graphile-worker", "pg-boss"].includes(o.queue))
    die("--queue bullmq|graphile-worker|pg-boss");
  if (!o.url) die("--url is required");
  if (!Number.isInteger(o.n) || o.n < 4) die("--n must be an integer >= 4");
  if (o.conc.some((c) => !Number.isInteger(c) || c < 1)) die("bad --concurrency");
  return o;
}

function version(pkg) {
  const p = path.join(__dirname, "node_modules", pkg, "package.json");
  return JSON.parse(fs.readFileSync(p, "utf8")).version;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const nowS = () => Number(process.hrtime.bigint()) / 1e9;
const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

function emit(o, fields) {
  process.stdout.write(JSON.stringify({ queue: o.queue, ...fields }) + "\n");
}

// A timed phase: runs fn(), returns {seconds, cpu_us}.
async function timed(fn) {
  const c0 = cpuUs();
  const t0 = nowS();
  await fn();
  return { seconds: nowS() - t0, cpu_us: cpuUs() - c0 };
}

// Runs per job index: the exactly-once check.
class Tally {
  constructor(n) {
    this.runs = new Uint8Array(n);
    this.total = 0;
  }
  run(data) {
    this.total++;
    const i = data && data.i;
    if (Number.isInteger(i) && i >= 0 && i < this.runs.length && this.runs[i] < 255) this.runs[i]++;
  }
  check() {
    let dup = 0;
    let miss = 0;
    for (const r of this.runs) {
      if (r === 0) miss++;
      else if (r > 1) dup += r - 1;
    }
    return { duplicates: dup, missing: miss };
  }
}

// Waits until done() (a query of the store) says every job is complete,
// without loading the store while the worker runs: until the handlers have
// run n jobs it only reads the tally every 5 ms (and the store every 500 ms,
// so that a lost job cannot hang it), then the store every 5 ms, the last
// completions being in flight.  Gives up after limitS seconds.
async function waitDone(tally, done, limitS) {
  const t0 = nowS();
  let last = t0;
  while (tally.total < tally.runs.length) {
    if (nowS() - t0 > limitS) return false;
    if (nowS() - last > 0.5) {
      if (await done()) return true;
      last = nowS();
    }
    await sleep(5);
  }
  for (;;) {
    if (await done()) return true;
    if (nowS() - t0 > limitS) return false;
    await sleep(5);
  }
}

function chunks(n, size, make) {
  const out = [];
  for (let a = 0; a < n; a += size) {
    const batch = [];
    for (let i = a; i < Math.min(n, a + size); i++) batch.push(make(i));
    out.push(batch);
  }
  return out;
}

// Error handlers on a pg pool and its clients, as graphile-worker asks.
function quietPool(p) {
  const say = (e) => process.stderr.write("pg pool: " + e.message + "\n");
  p.on("error", say);
  p.on("connect", (client) => client.on("error", say));
}

// ------------------------------------------------------------------ BullMQ

function bullmqPeer(o) {
  const { Queue, Worker } = require("bullmq");
  const IORedis = require("ioredis");
  const prefix = "due-peer-" + process.pid;
  const conn = () => new IORedis(o.url, { maxRetriesPerRequest: null });
  const durability = "Redis as configured (bench/peers/run: appendonly yes, appendfsync " +
    "everysec); BullMQ defaults: removeOnComplete false, attempts 1";
  let admin, queue;
  return {
    durability,
    version: "bullmq " + version("bullmq") + ", ioredis " + version("ioredis"),
    async open() {
      admin = conn();
      queue = new Queue("q", { connection: admin, prefix });
      await queue.waitUntilReady();
    },
    async enqueueSingle(n) {
      const q = new Queue("single", { connection: admin, prefix });
      for (let i = 0; i < n; i++) await q.add("noop", { i });
      return async () => {
        await q.obliterate({ force: true });
        await q.close();
      };
    },
    async enqueueBulk(n) {
      for (const b of chunks(n, 1000, (i) => ({ name: "noop", data: { i } }))) await queue.addBulk(b);
    },
    async drain(c, tally, n) {
      const worker = new Worker("q", async (job) => { tally.run(job.data); }, {
        connection: conn(), prefix, concurrency: c, autorun: false,
      });
      worker.on("error", (e) => process.stderr.write("bullmq worker: " + e.message + "\n"));
      const ok = { v: false };
      const t = await timed(async () => {
        worker.run();
        ok.v = await waitDone(tally, async () => (await queue.getCompletedCount()) >= n, 600);
      });
      await worker.close();
      const counts = await queue.getJobCounts("completed", "failed", "wait", "active", "delayed");
      await queue.obliterate({ force: true });
      return { ...t, ok: ok.v && counts.completed === n, store: counts };
    },
    async close() {
      await queue.obliterate({ force: true }).catch(() => {});
      await queue.close();
      await admin.quit();
    },
  };
}

// --------------------------------------------------------- graphile-worker

function graphilePeer(o) {
  const { run, makeWorkerUtils, Logger } = require("graphile-worker");
  const { Pool } = require("pg");
  const schema = "due_peer_gw_" + process.pid;
  const quiet = new Logger(() => (level, message) => {
    if (level === "error") process.stderr.write("graphile-worker: " + message + "\n");
  });
  let pool, utils;
  // The worker's own pool: graphile-worker's default maxPoolSize is 10 and it
  // warns when concurrency is above it; C + 2 as that warning advises.
  const workPool = (c) => {
    const p = new Pool({ connectionString: o.url, max: Math.max(10, c + 2) });
    quietPool(p);
    return p;
  };
  const count = async () =>
    Number((await pool.query(`SELECT count(*) AS n FROM "${schema}"._private_jobs`)).rows[0].n);
  return {
    durability: "PostgreSQL with the server's defaults (synchronous_commit on); " +
      "graphile-worker defaults: a job is deleted when it completes, max_attempts 25, " +
      "pollInterval 2 s with LISTEN/NOTIFY, no local queue or batched completion; " +
      "its per-job success log off (NO_LOG_SUCCESS, the documented switch)",
    version: "graphile-worker " + version("graphile-worker") + ", pg " + version("pg"),
    async open() {
      pool = new Pool({ connectionString: o.url, max: 4 });
      quietPool(pool);
      utils = await makeWorkerUtils({ pgPool: pool, schema, logger: quiet });
      await utils.migrate();
    },
    async enqueueSingle(n) {
      const ids = [];
      for (let i = 0; i < n; i++) ids.push((await utils.addJob("single", { i })).id);
      return () => utils.completeJobs(ids); // deletes them: they are never run
    },
    async enqueueBulk(n) {
      for (const b of chunks(n, 1000, (i) => ({ identifier: "noop", payload: { i } })))
        await utils.addJobs(b);
    },
    async drain(c, tally, n) {
      let runner;
      const wp = workPool(c);
      const ok = { v: false };
      const t = await timed(async () => {
        runner = await run({
          pgPool: wp, schema, concurrency: c, noHandleSignals: true,
          logger: quiet, taskList: { noop: async (payload) => { tally.run(payload); } },
        });
        ok.v = await waitDone(tally, async () => (await count()) === 0, 600);
      });
      await runner.stop();
      await wp.end();
      const left = await count();
      return { ...t, ok: ok.v && left === 0, store: { left } };
    },
    async close() {
      await utils.release();
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

// ----------------------------------------------------------------- pg-boss

function pgbossPeer(o) {
  const PgBoss = require("pg-boss");
  const { Pool } = require("pg");
  const schema = "due_peer_pgboss_" + process.pid;
  let boss, pool, name;
  let seq = 0;
  const notDone = async () => Number((await pool.query(
    `SELECT count(*) AS n FROM "${schema}".job WHERE name = $1 AND state <> 'completed'`,
    [name])).rows[0].n);
  const fresh = async () => {
    name = "q" + ++seq;
    await boss.createQueue(name);
  };
  return {
    durability: "PostgreSQL with the server's defaults (synchronous_commit on); pg-boss " +
      "defaults: completed jobs kept (archived after 12 h), retryLimit 2, expireIn 15 min",
    version: "pg-boss " + version("pg-boss") + ", pg " + version("pg"),
    variants: { "fetch-loop": "C loops of fetch(batchSize 1), handler, complete()",
      work: "work({batchSize: C, pollingIntervalSeconds: 0.5}) over 20*C jobs" },
    async open() {
      pool = new Pool({ connectionString: o.url, max: 2 });
      boss = new PgBoss({ connectionString: o.url, schema, max: 20 });
      boss.on("error", (e) => process.stderr.write("pg-boss: " + e.message + "\n"));
      await boss.start();
      await fresh();
    },
    async enqueueSingle(n) {
      for (let i = 0; i < n; i++) await boss.send(name, { i });
      return fresh; // a queue of its own (pg-boss 10: a partition of its own), never worked
    },
    async enqueueBulk(n) {
      for (const b of chunks(n, 1000, (i) => ({ name, data: { i } }))) await boss.insert(b);
    },
    async drain(c, tally, n, variant) {
      const ok = { v: false };
      let wid = null;
      let stop = false;
      const loops = [];
      const t = await timed(async () => {
        if (variant === "work") {
          wid = await boss.work(name, { batchSize: c, pollingIntervalSeconds: 0.5 },
            async (jobs) => { for (const j of jobs) tally.run(j.data); });
        } else {
          for (let k = 0; k < c; k++) {
            loops.push((async () => {
              while (!stop) {
                const jobs = await boss.fetch(name, { batchSize: 1 });
                if (!jobs.length) return;
                for (const j of jobs) tally.run(j.data);
                await boss.complete(name, jobs.map((j) => j.id));
              }
            })());
          }
        }
        ok.v = await waitDone(tally, async () => (await notDone()) === 0, 600);
      });
      stop = true;
      await Promise.all(loops);
      if (wid) await boss.offWork({ id: wid });
      const left = await notDone();
      await fresh();
      return { ...t, ok: ok.v && left === 0, store: { not_completed: left } };
    },
    async close() {
      await boss.stop({ graceful: false, wait: true });
      await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await pool.end();
    },
  };
}

// -------------------------------------------------------------------- main

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const peer = { bullmq: bullmqPeer, "graphile-worker": graphilePeer, "pg-boss": pgbossPeer }[o.queue](o);
  const common = { durability: peer.durability, version: peer.version };
  await peer.open();
  let failed = false;
  try {
    if (o.enqueue) {
      const ns = Math.floor(o.n / 4);
      let cleanup;
      const s = await timed(async () => { cleanup = await peer.enqueueSingle(ns); });
      await cleanup();
      emit(o, { workload: "enqueue", variant: "single", n: ns, seconds: s.seconds,
        tasks_per_s: ns / s.seconds, cpu_us_per_task: s.cpu_us / ns, ...common });
    }
    const variants = peer.variants ? Object.keys(peer.variants) : ["default"];
    for (const c of o.conc) {
      for (const v of variants) {
        const n = v === "work" ? 20 * c : o.n;
        const b = await timed(() => peer.enqueueBulk(n));
        if (o.enqueue && v !== "work" && c === o.conc[0])
          emit(o, { workload: "enqueue", variant: "bulk", batch: 1000, n, seconds: b.seconds,
            tasks_per_s: n / b.seconds, cpu_us_per_task: b.cpu_us / n, ...common });
        const tally = new Tally(n);
        const d = await peer.drain(c, tally, n, v);
        const chk = tally.check();
        if (!d.ok || chk.duplicates || chk.missing) failed = true;
        emit(o, { workload: "drain", variant: v, concurrency: c, n, seconds: d.seconds,
          tasks_per_s: n / d.seconds, cpu_us_per_task: d.cpu_us / n, ...chk,
          complete: d.ok, store: d.store,
          ...(peer.variants ? { variant_means: peer.variants[v] } : {}), ...common });
      }
    }
  } finally {
    await peer.close();
  }
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  process.stderr.write("peer.js: " + (e && e.stack ? e.stack : e) + "\n");
  process.exit(1);
});
