// The console's targets, measured (a benchmark, not a test; nothing here
// fails on a figure): inbox update latency after an approval is created
// (target ≤ 1 s p99), page load with many pending approvals (≤ 300 ms p95
// with 10,000), and the console's idle RSS (≤ 64 MiB). It runs a standalone
// `gavel console` (development sign-in) against a `gavel dev` cluster, so
// the RSS is the console's alone.
//
//   node tests/browser/bench.mjs            # 10,000 pending approvals
//   GAVEL_CONSOLE_BENCH_PENDING=2000 node tests/browser/bench.mjs
import { execFile, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { chromium } from "playwright-core";
import { DevCluster, gavelBin } from "./cluster.mjs";

const execFileAsync = promisify(execFile);
const PENDING = Number(process.env.GAVEL_CONSOLE_BENCH_PENDING ?? 10_000);
/** Approvals created one by one to time the inbox update. */
const UPDATES = 30;
/** Page loads timed per page. */
const LOADS = 40;
/** Parallel `gavel exec submit` processes while filling. */
const FILL_CONCURRENCY = 4;

const percentile = (values, p) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
};
const rssMiB = (pid) => {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith("VmRSS:"));
  return Number(line.split(/\s+/)[1]) / 1024;
};

const cluster = await DevCluster.start();
const port = 20_000 + Math.floor(Math.random() * 30_000);
const consoleUrl = `http://127.0.0.1:${port}`;
const consoleProcess = spawn(
  gavelBin,
  [
    "console", "--listen", `127.0.0.1:${port}`, "--endpoints", cluster.env.GAVEL_ENDPOINTS,
    "--ca", cluster.env.GAVEL_CA, "--dev-sign-in-key", join(cluster.certsDir, "token.key"),
  ],
  { stdio: ["ignore", "ignore", "inherit"], env: { ...process.env, RUST_LOG: "warn" } },
);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const capability = join(cluster.dataDir, "refund.toml");
  writeFileSync(capability, cluster.capabilityFile().replace('type = "human"', 'type = "finance"'));
  await cluster.gavel(["capability", "register", capability]);
  // The fill submits as the dev admin (acting for alice): past the default
  // quota of 10,000 pending approvals per principal without this.
  await cluster.gavel(["access", "quota", "set", "user:admin", "--pending-approvals", String(PENDING + 2 * UPDATES + 100)]);
  await new Promise((resolveWait) => setTimeout(resolveWait, 500));
  const rssStarted = rssMiB(consoleProcess.pid);

  const page = await browser.newPage();
  await page.goto(`${consoleUrl}/signin`);
  await page.fill("#principal", "user:carol");
  await page.click("button[type=submit]");
  await page.waitForURL(/\/inbox$/);
  await page.waitForTimeout(300);

  let serial = 0;
  const submit = async () => {
    serial += 1;
    const input = JSON.stringify({ order_id: `o-${serial}`, amount_cents: 100 + serial });
    const answer = await cluster.gavel(
      ["exec", "submit", "orders.refund", "--id", `bench-${serial}`, "--input", input, "--as", "user:alice"],
    );
    return answer.approval.id;
  };

  const updateMs = [];
  for (let index = 0; index < UPDATES; index += 1) {
    const id = await submit();
    const created = performance.now();
    await page.locator(`[data-approval-id="${id}"]`).waitFor({ timeout: 10_000 });
    updateMs.push(performance.now() - created);
  }

  const fillStarted = performance.now();
  await page.goto(`${consoleUrl}/history`); // no inbox re-reads while filling
  let next = UPDATES;
  const fillers = Array.from({ length: FILL_CONCURRENCY }, async () => {
    while (next < PENDING) {
      next += 1;
      await submit();
    }
  });
  await Promise.all(fillers);
  const fillSeconds = (performance.now() - fillStarted) / 1000;

  // The same, with the inbox full: each update re-reads every pending approval.
  await page.goto(`${consoleUrl}/inbox`);
  await page.waitForTimeout(300);
  const updateFullMs = [];
  for (let index = 0; index < UPDATES; index += 1) {
    next += 1;
    const id = await submit();
    const created = performance.now();
    await page.locator(`[data-approval-id="${id}"]`).waitFor({ timeout: 10_000 });
    updateFullMs.push(performance.now() - created);
  }

  const cookies = await page.context().cookies();
  const cookie = cookies.map((c) => `${c.name}=${c.value}`).join("; ");
  const timeLoads = async (path) => {
    const times = [];
    for (let index = 0; index < LOADS; index += 1) {
      const started = performance.now();
      const response = await fetch(`${consoleUrl}${path}`, { headers: { cookie } });
      await response.text();
      if (!response.ok) {
        throw new Error(`${path}: ${response.status}`);
      }
      times.push(performance.now() - started);
    }
    return times;
  };
  const inboxMs = await timeLoads("/inbox");
  const approvalMs = await timeLoads("/approvals/apr_bench-1");
  const historyMs = await timeLoads("/history?status=pending");
  await page.close();
  await new Promise((resolveWait) => setTimeout(resolveWait, 2_000));
  const rssIdle = rssMiB(consoleProcess.pid);

  const row = (name, values) =>
    `${name.padEnd(34)} p50 ${percentile(values, 50).toFixed(0).padStart(5)} ms  p95 ${percentile(values, 95).toFixed(0).padStart(5)} ms  p99 ${percentile(values, 99).toFixed(0).padStart(5)} ms  (n=${values.length})`;
  console.log(`console benchmark: ${PENDING} pending approvals (filled in ${fillSeconds.toFixed(0)} s), debug build: ${gavelBin}`);
  console.log(row("inbox update, inbox nearly empty", updateMs) + "   target p99 <= 1000 ms");
  console.log(row(`inbox update, ${PENDING} pending`, updateFullMs) + "   target p99 <= 1000 ms");
  console.log(row(`GET /inbox (${PENDING} pending)`, inboxMs) + "   target p95 <= 300 ms");
  console.log(row("GET /approvals/{id}", approvalMs));
  console.log(row("GET /history?status=pending", historyMs));
  console.log(`console RSS: ${rssStarted.toFixed(1)} MiB at start, ${rssIdle.toFixed(1)} MiB idle after the run   target <= 64 MiB`);
} finally {
  await browser.close();
  consoleProcess.kill("SIGTERM");
  await cluster.stop();
}
