// dashboard.test.js - the `due serve` dashboard in headless Chromium, end to
// end: a real store, a real `due serve`, a real `due work` whose handler
// fails for kind "flaky" until a flag file exists.
//
//   1. the failing task becomes a dead letter and /health turns 503;
//   2. the page shows the counts the API reports, the dead letter with its
//      last error, the lateness and throughput charts and the schedule;
//   3. clicking the task id shows its attempt history;
//   4. the handler is switched to succeed, Retry is clicked on the page: the
//      row leaves the dead-letter list and /health returns to 200 UP;
//   5. with 205 dead letters the page says 205, shows the newest first, 50
//      a page, and pages back to the 5 oldest;
//   6. a kind's settings are listed; Pause and Resume on the page reach the
//      store; a task of the paused kind shows its priority, group, time
//      limit and why it waits.
// Screenshots: ${TMPDIR:-/tmp}/due-dashboard.png (with the dead letter) and
// due-dashboard-after.png (after the retry); their paths are printed.
//
// Run by tests/cli/test_browser.sh (DUE_BIN = the due binary,
// CHROMIUM = the browser).  Prints "N passed, N failed"; exit 1 on failure.
"use strict";
const { chromium } = require("playwright-core");
const { spawn, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");

const DUE = process.env.DUE_BIN || path.resolve(__dirname, "../../build/due");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const OUT = process.env.TMPDIR || "/tmp";
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "due-browser-"));
const env = { ...process.env, DUE_DB: "sqlite:" + path.join(tmp, "due.db") };
const children = [];
let passed = 0, failed = 0;

function check(what, cond, detail) {
  if (cond) passed++;
  else { failed++; console.error("FAIL: " + what + (detail !== undefined ? " (" + detail + ")" : "")); }
}
function due(...args) {
  return execFileSync(DUE, args, { env, encoding: "utf8" }).trim();
}
function start(args, logName) {
  const log = fs.openSync(path.join(tmp, logName), "w");
  const p = spawn(DUE, args, { env, stdio: ["ignore", "pipe", log] });
  children.push(p);
  return p;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// Poll fn until it returns a truthy value, with a deadline.
async function until(what, fn, ms = 20000) {
  const end = Date.now() + ms;
  let last;
  while (Date.now() < end) {
    try { last = await fn(); if (last) return last; } catch (e) { last = e.message; }
    await sleep(100);
  }
  throw new Error("timed out waiting for " + what + " (last: " + JSON.stringify(last) + ")");
}
async function api(base, p, opts) {
  const r = await fetch(base + p, opts);
  return { status: r.status, body: await r.json() };
}

async function main() {
  due("init");
  const flag = path.join(tmp, "handler-ok");
  // Fails until the flag file exists; the error names the task.
  const flaky = `test -f '${flag}' || { echo "boom: payment gateway refused task $DUE_TASK_ID" >&2; exit 3; }; echo repaired`;

  const server = start(["serve", "--listen", "127.0.0.1:0"], "serve.log");
  const base = await new Promise((resolve, reject) => {
    let buf = "";
    const t = setTimeout(() => reject(new Error("due serve did not print its address")), 20000);
    server.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/listening on (http:\/\/\S+?)\/?\n/);
      if (m) { clearTimeout(t); resolve(m[1]); }
    });
    server.on("exit", (code) => reject(new Error("due serve exited " + code)));
  });
  await until("/health", async () => (await fetch(base + "/health")).status === 200);

  // Some work that succeeds (counts, lateness, throughput), one that dies.
  for (let i = 0; i < 8; i++)
    await api(base, "/v1/tasks", { method: "POST", body: JSON.stringify({ kind: "ok", payload: "job " + i }) });
  const dead = await api(base, "/v1/tasks", { method: "POST",
    body: JSON.stringify({ kind: "flaky", payload: '{"order": 42}', max_attempts: 2, backoff: "100ms" }) });
  check("POST /v1/tasks -> 201", dead.status === 201, dead.status);
  const id = dead.body.id;
  // A task held by run-after: its parent waits an hour (kind ok: no new kind row).
  const par = await api(base, "/v1/tasks", { method: "POST", body: JSON.stringify({ kind: "ok", in: "1h" }) });
  const held = await api(base, "/v1/tasks", { method: "POST",
    body: JSON.stringify({ kind: "ok", after: [par.body.id] }) });
  check("POST /v1/tasks with after -> 201, held", held.status === 201 && held.body.after_left === 1,
    JSON.stringify(held.body));
  const sched = await api(base, "/v1/schedules/nightly-report", { method: "PUT",
    body: JSON.stringify({ expr: "0 2 * * *", kind: "report", tz: "Europe/Berlin" }) });
  check("PUT /v1/schedules -> 201", sched.status === 201, sched.status);

  start(["work", "--handler", "ok=cat", "--handler", "flaky=" + flaky, "--poll", "200ms",
    "--no-cron", "--owner", "browser-test"], "work.log");
  await until("the dead letter", async () => (await api(base, "/v1/tasks/" + id)).body.state === "DEAD");
  await until("the ok tasks", async () => (await api(base, "/v1/stats")).body.counts.DONE === 8);
  const h1 = await api(base, "/health");
  check("/health 503 DOWN with a dead letter", h1.status === 503 && h1.body.status === "DOWN" && h1.body.dead === 1,
    JSON.stringify(h1));

  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "due-chromium-"));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, viewport: { width: 1280, height: 1100 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const foreign = [];
  try {
    const page = ctx.pages()[0] || await ctx.newPage();
    page.on("request", (req) => { if (!req.url().startsWith(base)) foreign.push(req.url()); });
    const pageErrors = [];
    page.on("pageerror", (e) => pageErrors.push(e.message));
    await page.goto(base + "/");
    await page.waitForSelector("body[data-loaded]", { timeout: 15000 });

    // Counts shown are the API's.
    const stats = (await api(base, "/v1/stats")).body;
    for (const st of ["SCHEDULED", "CLAIMED", "DONE", "CANCELLED", "DEAD"]) {
      const shown = await page.textContent(`#counts .card[data-state="${st}"] .n`);
      check("count " + st + " shown", shown === String(stats.counts[st]), shown + " vs " + stats.counts[st]);
    }
    check("health badge DOWN", (await page.textContent("#health")).startsWith("DOWN"));
    const row = `#dead tbody tr[data-id="${id}"]`;
    await page.waitForSelector(row);
    const err = await page.textContent(row + " td.err");
    check("dead letter shows its last error", err.includes("boom: payment gateway refused task " + id), err);
    check("lateness chart drawn", (await page.locator("#latechart rect").count()) === 15);
    check("throughput chart drawn", (await page.locator("#tputchart rect").count()) === 15);
    check("schedule listed", (await page.textContent('#schedules tr[data-name="nightly-report"]')).includes("0 2 * * *"));
    check("kinds listed", (await page.locator("#kinds tbody tr").count()) === 2);
    const hrow = `#held tbody tr[data-id="${held.body.id}"]`;
    await page.waitForSelector(hrow);
    const htext = await page.textContent(hrow);
    check("held task listed with its parents", htext.includes("1 parents") && htext.includes("ok"), htext);

    // Attempt history on click.
    await page.click(row + " a.id");
    await page.waitForSelector("#attempts tbody tr");
    const tries = await page.locator("#attempts tbody tr").allTextContents();
    check("attempt history has 2 failed tries", tries.length === 2 && tries.every((t) => t.includes("FAILED")),
      JSON.stringify(tries));
    const shot = path.join(OUT, "due-dashboard.png");
    await page.screenshot({ path: shot, fullPage: true });
    console.log("screenshot: " + shot);

    // Repair the handler, retry from the page: the row leaves, health is UP.
    fs.writeFileSync(flag, "");
    await page.click(`#dead button.retry[data-id="${id}"]`);
    await page.waitForSelector(row, { state: "detached", timeout: 20000 });
    check("dead letter left the list", (await page.locator(row).count()) === 0);
    await until("the retried task to finish", async () => (await api(base, "/v1/tasks/" + id)).body.state === "DONE");
    const h2 = await api(base, "/health");
    check("/health back to 200 UP", h2.status === 200 && h2.body.status === "UP", JSON.stringify(h2));
    await page.waitForFunction(() => document.querySelector("#health").textContent === "UP", null, { timeout: 10000 });
    check("health badge UP", (await page.textContent("#health")) === "UP");
    await page.waitForFunction(() =>
      document.querySelector('#counts .card[data-state="DONE"] .n').textContent === "9" &&
      document.querySelector('#counts .card[data-state="CLAIMED"] .n').textContent === "0", null, { timeout: 10000 });
    check("counts show the retried task done", true);
    const t = (await api(base, "/v1/tasks/" + id)).body;
    check("retried task DONE with its result", t.state === "DONE" && t.result === "repaired\n", JSON.stringify(t.result));
    // A dead letter that must never run is dismissed with Kill (confirmed).
    const doomed = (await api(base, "/v1/tasks", { method: "POST",
      body: JSON.stringify({ kind: "doomed", in: "1h" }) })).body.id;
    await api(base, "/v1/tasks/" + doomed + "/kill", { method: "POST" });
    const drow = `#dead tbody tr[data-id="${doomed}"]`;
    await page.waitForSelector(drow, { timeout: 20000 });
    page.once("dialog", (d) => d.accept());
    await page.click(`#dead button.kill[data-id="${doomed}"]`);
    await page.waitForSelector(drow, { state: "detached", timeout: 20000 });
    const dt = (await api(base, "/v1/tasks/" + doomed)).body;
    check("Kill dismissed the dead letter (CANCELLED)", dt.state === "CANCELLED", dt.state);
    check("/health UP after the dismissal", (await api(base, "/health")).status === 200);
    const shot2 = path.join(OUT, "due-dashboard-after.png");
    await page.screenshot({ path: shot2, fullPage: true });
    console.log("screenshot: " + shot2);

    // 205 dead letters: the true count, the newest first, 50 a page.
    const many = [];
    for (let i = 0; i < 205; i++) {
      const t = (await api(base, "/v1/tasks", { method: "POST",
        body: JSON.stringify({ kind: "many", in: "1h" }) })).body.id;
      await api(base, "/v1/tasks/" + t + "/kill", { method: "POST" });
      many.push(t);
    }
    const firstDead = () => page.evaluate(() => {
      const tr = document.querySelector("#dead tbody tr[data-id]");
      return tr ? Number(tr.dataset.id) : null;
    });
    await page.waitForFunction(() => document.querySelector("#deadsub").textContent.startsWith("205 waiting"),
      null, { timeout: 20000 });
    await until("the newest dead letter first", async () => (await firstDead()) === many[204]);
    check("205 dead letters: 50 rows on the first page", (await page.locator("#dead tbody tr").count()) === 50);
    check("205 dead letters: the badge says 205", (await page.textContent("#health")) === "DOWN · 205 dead",
      await page.textContent("#health"));
    check("205 dead letters: the page says which",
      (await page.textContent("#deadsub")).includes("newest first, 1–50"), await page.textContent("#deadsub"));
    for (let k = 1; k <= 4; k++) {
      await page.click("#deadpager button.older");
      await until("page " + (k + 1) + " of dead letters", async () => (await firstDead()) === many[204 - 50 * k]);
    }
    check("the last page holds the 5 oldest", (await page.locator("#dead tbody tr").count()) === 5);
    check("older is off on the last page", await page.isDisabled("#deadpager button.older"));
    await page.click("#deadpager button.newer");
    await until("back one page", async () => (await firstDead()) === many[204 - 150]);

    // Flow control: a kind's settings listed, paused and resumed from the
    // page; a held task's details say why it waits.
    const put = await api(base, "/v1/kinds/mailer", { method: "PUT",
      body: JSON.stringify({ max_running: 2, rate: "5/1s" }) });
    check("PUT /v1/kinds/mailer -> 200", put.status === 200, JSON.stringify(put));
    const krow = '#flow tbody tr[data-kind="mailer"]';
    await page.waitForSelector(krow + '[data-paused="0"]', { timeout: 20000 });
    check("kind row shows running / limit", (await page.textContent(krow + " td.run")) === "0 / 2",
      await page.textContent(krow + " td.run"));
    check("kind row shows the rate", (await page.textContent(krow + " td.rate")).includes("0 / 5 (5/1s)"),
      await page.textContent(krow + " td.rate"));
    await page.click(`#flow button.pause[data-kind="mailer"]`);
    await page.waitForSelector(krow + '[data-paused="1"]', { timeout: 20000 });
    check("Pause shown as paused", (await page.textContent(krow + " td.st")) === "paused");
    const paused = (await api(base, "/v1/kinds/mailer")).body;
    check("Pause reached the store", paused.paused === true && paused.max_running === 2, JSON.stringify(paused));
    const mail = (await api(base, "/v1/tasks", { method: "POST",
      body: JSON.stringify({ kind: "mailer", priority: -3, group: "cust-7", timeout: "10s" }) })).body.id;
    await page.fill("#lookup", String(mail));
    await page.click("#lookupbtn");
    await page.waitForSelector("#detail .held", { timeout: 20000 });
    const det = await page.textContent("#detail dl.kv");
    check("task details: priority, group, time limit",
      det.includes("priority-3") && det.includes("groupcust-7") && det.includes("time limit10s"), det);
    check("task details: held because paused", (await page.textContent("#detail .held")).includes("paused"),
      await page.textContent("#detail .held"));
    await page.click(`#flow button.resume[data-kind="mailer"]`);
    await page.waitForSelector(krow + '[data-paused="0"]', { timeout: 20000 });
    check("Resume reached the store", (await api(base, "/v1/kinds/mailer")).body.paused === false);
    check("no page errors", pageErrors.length === 0, pageErrors.join("; "));
    check("no request left the server", foreign.length === 0, foreign.join(", "));
  } finally {
    await ctx.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
}

function cleanup() {
  for (const p of children) if (p.exitCode === null) p.kill("SIGTERM");
}
process.on("exit", cleanup);
main().catch((e) => {
  failed++;
  console.error("FAIL: " + (e && e.stack || e));
  for (const f of ["serve.log", "work.log"])
    try { console.error("--- " + f + "\n" + fs.readFileSync(path.join(tmp, f), "utf8").slice(-3000)); } catch (_) { /* none */ }
}).finally(async () => {
  cleanup();
  await Promise.all(children.map((p) => p.exitCode === null ? new Promise((r) => p.on("exit", r)) : null));
  fs.rmSync(tmp, { recursive: true, force: true });
  console.log(`${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
});
