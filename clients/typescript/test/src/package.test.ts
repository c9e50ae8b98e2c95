// The packages as a new user gets them: `npm pack` of @gavel/client and
// @gavel/orpc-agent, installed into a fresh app outside the repository (a
// mktemp directory) with their public dependencies from the npm registry
// (or its cache), and README.md's orpc-refund walk-through run from there
// against a real secured cluster: once as an ES module app (the example's own
// sources, type-checked against the packed declarations) and once as a
// CommonJS app (test/cjs-app, which loads both packages with require()).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { TestCluster } from "./cluster.js";
import { repoRoot } from "./readme.js";
import { runRefundWalkthrough } from "./refund-flow.js";

const workspace = join(repoRoot, "clients/typescript");
/**
 * Node 20 before 20.19 cannot require() an ES module; later 20.x can, unless
 * told not to. The CommonJS app runs with this, so it proves the packages
 * work where require(esm) is missing.
 */
const WITHOUT_REQUIRE_ESM = ["--no-experimental-require-module"];
/** How long one npm or tsc run may take (an npm install from a cold cache fetches about 25 packages). */
const TOOL_TIMEOUT_MS = 180_000;

const version = execFileSync(process.execPath, [join(repoRoot, "scripts/version.mjs")], { encoding: "utf8" }).trim();
const workspaceManifest = JSON.parse(readFileSync(join(workspace, "package.json"), "utf8")) as {
  devDependencies: Record<string, string>;
};

let cluster: TestCluster;
let scratch: string;
let app: string;
const tarballs: Record<string, string> = {};

/** Runs a tool to completion; a failure carries its output (tsc reports on stdout). */
function run(command: string, args: string[], cwd: string): string {
  try {
    return execFileSync(command, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], timeout: TOOL_TIMEOUT_MS });
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string; stderr?: string };
    throw new Error(`${command} ${args.join(" ")} failed in ${cwd}:\n${stdout ?? ""}${stderr ?? ""}`, { cause: error });
  }
}

/** The file names inside a tarball, without npm's `package/` prefix. */
function entries(tarball: string): string[] {
  return run("tar", ["-tzf", tarball], scratch)
    .split("\n")
    .filter((line) => line.length > 0)
    .map((line) => line.replace(/^package\//, ""));
}

/** The package.json packed in a tarball. */
function packedManifest(tarball: string): Record<string, unknown> {
  return JSON.parse(run("tar", ["-xzOf", tarball, "package/package.json"], scratch)) as Record<string, unknown>;
}

/** Every file path an `exports` map points at (patterns with `*` left out). */
function exportTargets(exports: unknown): string[] {
  if (typeof exports === "string") {
    return exports.includes("*") ? [] : [exports.replace(/^\.\//, "")];
  }
  return Object.values((exports ?? {}) as Record<string, unknown>).flatMap(exportTargets);
}

before(async () => {
  scratch = mkdtempSync(join(tmpdir(), "gavel-pack-"));
  const packed = run("npm", ["pack", "--silent", "--pack-destination", scratch, "-w", "packages/client", "-w", "packages/orpc-agent"], workspace);
  for (const name of packed.split("\n").filter((line) => line.endsWith(".tgz"))) {
    tarballs[name.replace(new RegExp(`-${version.replace(/\./g, "\\.")}\\.tgz$`), "")] = join(scratch, name);
  }
  assert.deepEqual(Object.keys(tarballs).sort(), ["gavel-client", "gavel-orpc-agent"], packed);

  // A new app, outside the repository, that depends on the two tarballs and
  // the public packages it uses itself (the same versions as the workspace,
  // so a warm npm cache serves them).
  app = mkdtempSync(join(tmpdir(), "gavel-app-"));
  writeFileSync(
    join(app, "package.json"),
    JSON.stringify({
      name: "gavel-outside-app",
      private: true,
      type: "module",
      dependencies: {
        "@gavel/client": `file:${tarballs["gavel-client"]}`,
        "@gavel/orpc-agent": `file:${tarballs["gavel-orpc-agent"]}`,
        "@orpc/server": workspaceManifest.devDependencies["@orpc/server"],
      },
      devDependencies: {
        typescript: workspaceManifest.devDependencies.typescript,
        "@types/node": workspaceManifest.devDependencies["@types/node"],
      },
    }),
  );
  run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], app);
  cluster = await TestCluster.start();
});

after(async () => {
  await cluster?.stop();
  for (const dir of [app, scratch]) {
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  }
});

test("the tarballs carry both builds, the declarations and the generated code, and no workspace links", () => {
  const required: Record<string, string[]> = {
    "gavel-client": ["index", "client", "worker", "hash", "errors", "gen/gavel/v1/approval_pb", "gen/gavel/v1/worker_pb"],
    "gavel-orpc-agent": ["index", "coordinator", "worker", "audit", "capabilities"],
  };
  for (const [name, tarball] of Object.entries(tarballs)) {
    const files = entries(tarball);
    for (const module of required[name]!) {
      for (const build of ["esm", "cjs"]) {
        for (const suffix of [".js", ".d.ts"]) {
          assert.ok(files.includes(`dist/${build}/${module}${suffix}`), `${name}: dist/${build}/${module}${suffix} missing`);
        }
      }
    }
    assert.ok(files.includes("dist/cjs/package.json"), `${name}: dist/cjs/package.json marks the CommonJS build`);
    assert.ok(!files.some((file) => file.endsWith(".tsbuildinfo") || file.includes(".test.")), `${name}: ${files.join(" ")}`);
    const manifest = packedManifest(tarball);
    assert.equal(manifest.version, version, `${name} carries the workspace version`);
    for (const target of exportTargets(manifest.exports)) {
      assert.ok(files.includes(target), `${name}: exports points at ${target}, which is not packed`);
    }
    for (const field of ["main", "module", "types"]) {
      assert.ok(files.includes(String(manifest[field]).replace(/^\.\//, "")), `${name}: ${field} ${String(manifest[field])} is not packed`);
    }
    const dependencies = { ...(manifest.dependencies as object), ...(manifest.peerDependencies as object) };
    for (const [dependency, range] of Object.entries(dependencies as Record<string, string>)) {
      assert.doesNotMatch(range, /^(file|link|workspace):/, `${name} depends on ${dependency} as ${range}`);
    }
  }
});

test("an ES module app outside the repository type-checks and runs the README walk-through", async () => {
  cpSync(join(repoRoot, "examples/orpc-refund/src"), join(app, "src"), { recursive: true });
  // A CommonJS TypeScript module in the same app checks the packed
  // declarations of the require() entry points as well.
  writeFileSync(
    join(app, "src/require-types.cts"),
    [
      'import { type GavelClient, createGavelClient } from "@gavel/client";',
      'import { createGavelApprovalCoordinator, createGavelWorker } from "@gavel/orpc-agent";',
      "export const coordinatorOf = (client: GavelClient) => createGavelApprovalCoordinator({ client });",
      "export const parts = [createGavelClient, createGavelWorker];",
      "",
    ].join("\n"),
  );
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        rootDir: "src",
        outDir: "dist",
        types: ["node"],
        // As most apps (and this workspace) do: @orpc/shared's declarations name
        // @opentelemetry/api, an optional peer this app does not install.
        skipLibCheck: true,
      },
      include: ["src"],
    }),
  );
  run(process.execPath, [join(app, "node_modules/typescript/bin/tsc"), "-p", "."], app);
  const cwd = join(app, "esm-run");
  mkdirSync(cwd);
  await runRefundWalkthrough(cluster, { program: (name) => join(app, "dist", `${name}.js`), cwd, orderId: "o-42" });
});

test("a CommonJS app outside the repository require()s both packages and runs the README walk-through", async () => {
  const programs = join(app, "cjs");
  cpSync(join(workspace, "test/cjs-app"), programs, { recursive: true });
  assert.deepEqual(readdirSync(programs).sort(), ["agent.cjs", "capability.json", "refund.cjs", "sync.cjs", "worker.cjs"]);
  const loaded = run(process.execPath, [...WITHOUT_REQUIRE_ESM, "-e", 'console.log(require.resolve("@gavel/client"), require.resolve("@gavel/orpc-agent"))'], programs);
  assert.match(loaded, /^\S+\/node_modules\/@gavel\/client\/dist\/cjs\/index\.js \S+\/node_modules\/@gavel\/orpc-agent\/dist\/cjs\/index\.js$/m);
  const cwd = join(app, "cjs-run");
  mkdirSync(cwd);
  await runRefundWalkthrough(cluster, {
    program: (name) => join(programs, `${name}.cjs`),
    cwd,
    orderId: "o-43",
    nodeOptions: WITHOUT_REQUIRE_ESM,
  });
});
