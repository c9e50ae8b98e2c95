// A real secured three-node cluster with its console, started the way the
// TypeScript tests start one: `gavel dev` of GAVEL_BIN on free loopback
// ports, read from its printed export and console lines. Stopped by PID.
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const gavelBin = process.env.GAVEL_BIN ?? join(repoRoot, "target/debug/gavel");
const workerBin = process.env.GAVEL_REFUND_WORKER_BIN ?? join(dirname(gavelBin), "refund-worker");

/** How long `gavel dev` may take to print its console line. */
const START_TIMEOUT_MS = 60_000;

function portFree(port) {
  return new Promise((resolvePort) => {
    const server = createServer();
    server.once("error", () => resolvePort(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolvePort(true)));
  });
}

async function freeBasePort() {
  for (let tries = 0; tries < 50; tries += 1) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    const ports = [base, base + 1, base + 2, base + 99, base + 100, base + 101, base + 102];
    if ((await Promise.all(ports.map(portFree))).every(Boolean)) {
      return base;
    }
  }
  throw new Error("no free loopback ports for the test cluster");
}

/** A free loopback port (the OS picks; it may be taken again, rarely). */
export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

export class DevCluster {
  /** Starts `gavel dev`; `env` reaches its nodes too (e.g. GAVEL_OIDC_ISSUER). */
  static async start(extraEnv = {}) {
    const dataDir = mkdtempSync(join(tmpdir(), "gavel-browser-test-"));
    const base = await freeBasePort();
    const dev = spawn(gavelBin, ["dev", "--base-port", String(base), "--data-dir", join(dataDir, "dev")], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...extraEnv, RUST_LOG: "warn" },
    });
    let output = "";
    const ready = await new Promise((resolveReady, reject) => {
      const timer = setTimeout(() => reject(new Error(`gavel dev was not ready in time:\n${output}`)), START_TIMEOUT_MS);
      const onData = (chunk) => {
        output += chunk.toString();
        const exportLine = output.split("\n").find((line) => line.startsWith("export GAVEL_ENDPOINTS="));
        const console = /gavel dev: console (http:\/\/\S+)/.exec(output);
        if (exportLine && console) {
          clearTimeout(timer);
          resolveReady({ exportLine, consoleUrl: console[1] });
        }
      };
      dev.stdout.on("data", onData);
      dev.stderr.on("data", (chunk) => {
        output += chunk.toString();
      });
      dev.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`gavel dev exited (${code}):\n${output}`));
      });
    });
    dev.stdout.resume();
    dev.stderr.resume();
    const env = {};
    for (const assignment of ready.exportLine.slice("export ".length).split(" ")) {
      const [key, value] = assignment.split("=", 2);
      env[key] = value;
    }
    return new DevCluster(dataDir, dev, env, ready.consoleUrl);
  }

  constructor(dataDir, dev, env, consoleUrl) {
    this.dataDir = dataDir;
    this.dev = dev;
    this.env = env;
    this.consoleUrl = consoleUrl;
    this.children = [];
  }

  get certsDir() {
    return dirname(this.env.GAVEL_CA);
  }

  /** Runs the gavel CLI as the dev admin, or with a token for `principal`. */
  async gavel(args, principal) {
    const env = { ...process.env, ...this.env };
    if (principal !== undefined) {
      delete env.GAVEL_CERT;
      delete env.GAVEL_KEY;
      env.GAVEL_TOKEN = await this.token(principal);
    }
    const { stdout } = await execFileAsync(gavelBin, [...args, "--json"], { env, timeout: 60_000 });
    return JSON.parse(stdout);
  }

  async token(principal) {
    const { stdout } = await execFileAsync(gavelBin, ["token", "issue", "--certs-dir", this.certsDir, "--sub", principal]);
    return stdout.trim();
  }

  /** Starts examples/refund-worker as the dev admin (it holds the worker grant). */
  startWorker() {
    const worker = spawn(workerBin, ["--ledger", join(this.dataDir, "ledger.jsonl")], {
      stdio: ["ignore", "ignore", "pipe"],
      env: { ...process.env, ...this.env, RUST_LOG: "warn" },
    });
    worker.stderr.resume();
    this.children.push(worker);
    return worker;
  }

  async stop() {
    for (const child of this.children) {
      if (child.exitCode === null) {
        child.kill("SIGKILL");
      }
    }
    if (this.dev.exitCode === null) {
      const exited = new Promise((resolveExit) => this.dev.once("exit", resolveExit));
      this.dev.kill("SIGTERM");
      await Promise.race([exited, new Promise((resolveWait) => setTimeout(resolveWait, 15_000))]);
    }
    if (this.dev.exitCode !== null || this.dev.signalCode !== null) {
      // The cluster's files go with it; a cluster still running keeps them.
      rmSync(this.dataDir, { recursive: true, force: true });
    }
  }

  capabilityFile() {
    return readFileSync(join(repoRoot, "examples/refund-worker/capability.toml"), "utf8");
  }
}
