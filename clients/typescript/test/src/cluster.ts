// A real three-node secured cluster for the tests: `gavel dev` on free
// loopback ports in a temporary data directory (it makes a dev CA, node
// certificates and the admin's client certificate there), stopped by PID at
// the end. Principals for the tests get credentials with `gavel cert
// create-client` / `gavel token issue` and grants through the TS client.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { type ClientOptions, type GavelClient, createGavelClient } from "@gavel/client";

const execFileAsync = promisify(execFile);
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** The gavel binary the tests start: GAVEL_BIN, or the workspace's debug build. */
export const gavelBin = process.env.GAVEL_BIN ?? join(repoRoot, "target/debug/gavel");

/** How long the cluster may take to elect a leader and print its export line. */
const START_TIMEOUT_MS = 60_000;
/** How long `gavel dev` gets to stop its nodes after SIGTERM. */
const STOP_GRACE_MS = 10_000;
/** How many base ports are tried when one is taken meanwhile. */
const PORT_TRIES = 5;

async function portFree(port: number): Promise<boolean> {
  return new Promise((resolvePort) => {
    const server = createServer();
    server.once("error", () => resolvePort(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolvePort(true)));
  });
}

/** A base port whose three ports and their metrics ports (+100) are free. */
async function freeBasePort(): Promise<number> {
  for (let tries = 0; tries < 50; tries += 1) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    const ports = [base, base + 1, base + 2, base + 100, base + 101, base + 102];
    const free = await Promise.all(ports.map(portFree));
    if (free.every(Boolean)) {
      return base;
    }
  }
  throw new Error("no free loopback ports found for the test cluster");
}

/** A running dev cluster. */
export class TestCluster {
  private constructor(
    readonly dataDir: string,
    readonly endpoints: string[],
    readonly ca: Buffer,
    readonly adminCert: Buffer,
    readonly adminKey: Buffer,
    readonly env: Record<string, string>,
    private readonly dev: ChildProcess,
    readonly nodePids: number[],
    private readonly clients: GavelClient[] = [],
    private readonly ownNodes: ChildProcess[] = [],
  ) {}

  /** Starts `gavel dev` and waits for its export line. */
  static async start(): Promise<TestCluster> {
    let lastError: unknown;
    for (let tries = 0; tries < PORT_TRIES; tries += 1) {
      try {
        return await TestCluster.startOnce(await freeBasePort());
      } catch (error) {
        lastError = error;
      }
    }
    throw lastError;
  }

  private static async startOnce(basePort: number): Promise<TestCluster> {
    const dataDir = mkdtempSync(join(tmpdir(), "gavel-ts-test-"));
    const dev = spawn(gavelBin, ["dev", "--base-port", String(basePort), "--data-dir", join(dataDir, "dev")], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn" },
    });
    let output = "";
    const nodePids: number[] = [];
    const exportLine = await new Promise<string>((resolveLine, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`gavel dev printed no export line within ${START_TIMEOUT_MS} ms:\n${output}`));
      }, START_TIMEOUT_MS);
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        for (const match of output.matchAll(/node \d+ pid (\d+)/g)) {
          const pid = Number(match[1]);
          if (!nodePids.includes(pid)) {
            nodePids.push(pid);
          }
        }
        const line = output.split("\n").find((candidate) => candidate.startsWith("export GAVEL_ENDPOINTS="));
        if (line !== undefined) {
          clearTimeout(timer);
          resolveLine(line);
        }
      };
      dev.stdout?.on("data", onData);
      dev.stderr?.on("data", (chunk: Buffer) => {
        output += chunk.toString();
      });
      dev.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`gavel dev exited (${code}) before it was ready:\n${output}`));
      });
    }).catch((error: unknown) => {
      if (dev.pid !== undefined && dev.exitCode === null) {
        process.kill(dev.pid, "SIGKILL");
      }
      for (const pid of nodePids) {
        killQuietly(pid, "SIGKILL");
      }
      throw error;
    });
    dev.stdout?.resume();
    dev.stderr?.resume();
    const env: Record<string, string> = {};
    for (const assignment of exportLine.slice("export ".length).split(" ")) {
      const [key, value] = assignment.split("=", 2);
      if (key && value) {
        env[key] = value;
      }
    }
    const endpoints = env.GAVEL_ENDPOINTS!.split(",");
    return new TestCluster(
      dataDir,
      endpoints,
      readFileSync(env.GAVEL_CA!),
      readFileSync(env.GAVEL_CERT!),
      readFileSync(env.GAVEL_KEY!),
      env,
      dev,
      nodePids,
    );
  }

  /** The certificate directory of the dev cluster. */
  get certsDir(): string {
    return dirname(this.env.GAVEL_CA!);
  }

  /** A client as the dev admin (client certificate): admin and the quick start's roles, not clock or self-approval. */
  adminClient(options: Partial<ClientOptions> = {}): GavelClient {
    return this.track(
      createGavelClient({
        endpoints: this.endpoints,
        tls: { ca: this.ca, cert: this.adminCert, key: this.adminKey },
        ...options,
      }),
    );
  }

  /** A client with a bearer token for `principal` (no grants unless given). */
  async tokenClient(principal: string, options: Partial<ClientOptions> = {}): Promise<GavelClient> {
    const { stdout } = await this.gavel(["token", "issue", "--certs-dir", this.certsDir, "--sub", principal, "--ttl", "2h"]);
    return this.track(
      createGavelClient({ endpoints: this.endpoints, tls: { ca: this.ca }, token: stdout.trim(), ...options }),
    );
  }

  /** A client with a fresh client certificate for `principal`. */
  async certClient(principal: string, options: Partial<ClientOptions> = {}): Promise<GavelClient> {
    await this.gavel(["cert", "create-client", "--certs-dir", this.certsDir, "--principal", principal]);
    const [kind, id] = principal.split(":");
    const base = join(this.certsDir, `client-${kind}-${id}`);
    return this.track(
      createGavelClient({
        endpoints: this.endpoints,
        tls: { ca: this.ca, cert: readFileSync(`${base}.pem`), key: readFileSync(`${base}.key`) },
        ...options,
      }),
    );
  }

  /** Binds grants to a principal, as the admin. */
  async grant(principal: string, grants: readonly string[]): Promise<void> {
    const admin = this.adminClient();
    for (const grant of grants) {
      await admin.access.grant({ grant: { principal, grant } });
    }
  }

  /** Runs the gavel CLI against this cluster (as the admin unless env says otherwise). */
  async gavel(args: string[], env: Record<string, string | undefined> = {}): Promise<{ stdout: string; stderr: string }> {
    const merged: Record<string, string> = {};
    for (const [key, value] of Object.entries({ ...process.env, ...this.env, ...env })) {
      if (value !== undefined) {
        merged[key] = value;
      }
    }
    return execFileAsync(gavelBin, args, { env: merged, timeout: 30_000 });
  }

  private track(client: GavelClient): GavelClient {
    this.clients.push(client);
    return client;
  }

  /**
   * Replaces `gavel dev` by three `gavel node` processes of our own, with the
   * same command lines, data and certificates, so one node can be killed
   * without `gavel dev` stopping the others. Waits for a leader.
   */
  async takeOver(): Promise<void> {
    const commands = this.nodePids.map((pid) => ({
      argv: readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter((arg) => arg.length > 0),
      cwd: readlinkSync(`/proc/${pid}/cwd`),
    }));
    await stopProcess(this.dev);
    this.nodePids.length = 0;
    for (const [index, { argv, cwd }] of commands.entries()) {
      const log = openSync(join(this.dataDir, `own-n${index + 1}.log`), "a");
      const node = spawn(argv[0]!, argv.slice(1), { cwd, stdio: ["ignore", log, log], env: process.env });
      this.ownNodes.push(node);
      this.nodePids.push(node.pid!);
    }
    await this.leader();
  }

  /**
   * The leader's endpoint, once a node names one. Right after a start or a kill
   * there may be none for a moment (an election); a test that needs the leader
   * waits for it rather than reading it once.
   */
  async leader(): Promise<string> {
    const admin = this.adminClient({ retryBudgetMs: 2000 });
    return eventually(
      "a leader among the nodes",
      async () => {
        try {
          const status = await admin.cluster.status({ withoutStateHash: true });
          const leader = status.leaderAddr;
          return leader !== undefined && this.endpoints.includes(leader) ? leader : undefined;
        } catch {
          return undefined;
        }
      },
      START_TIMEOUT_MS,
      200,
    );
  }

  /** Stops the cluster by PID (SIGTERM, SIGKILL after the grace) and removes its data. */
  async stop(): Promise<void> {
    for (const client of this.clients) {
      client.close();
    }
    const devClean = await stopProcess(this.dev);
    const ownClean = await Promise.all(this.ownNodes.map(stopProcess));
    if (!devClean && this.ownNodes.length === 0) {
      // gavel dev did not stop its nodes in time: stop them by their PIDs.
      for (const nodePid of this.nodePids) {
        killQuietly(nodePid, "SIGKILL");
      }
    }
    void ownClean;
    rmSync(this.dataDir, { recursive: true, force: true });
  }
}

/** SIGTERM, then SIGKILL after the grace; true when it exited within the grace. */
async function stopProcess(child: ChildProcess): Promise<boolean> {
  const pid = child.pid;
  if (pid === undefined || child.exitCode !== null || child.signalCode !== null) {
    return true;
  }
  const exited = new Promise<"exited">((resolveExit) => child.once("exit", () => resolveExit("exited")));
  killQuietly(pid, "SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<"timeout">((resolveTimeout) => {
    timer = setTimeout(() => resolveTimeout("timeout"), STOP_GRACE_MS);
  });
  const outcome = await Promise.race([exited, timedOut]);
  clearTimeout(timer);
  if (outcome === "timeout") {
    killQuietly(pid, "SIGKILL");
    await exited;
    return false;
  }
  return true;
}

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

/** Waits until `check` holds, polling every `everyMs`, for at most `timeoutMs`. */
export async function eventually<T>(
  what: string,
  check: () => Promise<T | undefined>,
  timeoutMs = 10_000,
  everyMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) {
      return value;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((resolveWait) => setTimeout(resolveWait, everyMs));
  }
}
