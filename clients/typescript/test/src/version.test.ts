// One version: Cargo.toml's [workspace.package] version, stamped into the
// TypeScript packages (and the Python client when it exists) by
// scripts/version.mjs. The repository carries it everywhere; and the check
// catches a drift, which the stamp repairs (on a copy, so nothing here changes).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { repoRoot } from "./readme.js";

const script = join(repoRoot, "scripts/version.mjs");
/** The files the script reads or stamps, relative to the root. */
const FILES = [
  "Cargo.toml",
  "clients/typescript/packages/client/package.json",
  "clients/typescript/packages/orpc-agent/package.json",
  "examples/orpc-refund/package.json",
  "clients/typescript/package-lock.json",
];

function version(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const outcome = spawnSync(process.execPath, [script, ...args], { encoding: "utf8", timeout: 30_000 });
  return { status: outcome.status, stdout: outcome.stdout, stderr: outcome.stderr };
}

const json = (root: string, file: string) => JSON.parse(readFileSync(join(root, file), "utf8")) as Record<string, any>;

test("every package carries Cargo.toml's workspace version", () => {
  const check = version("--check");
  assert.equal(check.status, 0, check.stderr);
  const current = version().stdout.trim();
  assert.match(current, /^\d+\.\d+\.\d+/);
  assert.equal(json(repoRoot, FILES[1]!).version, current);
  assert.equal(json(repoRoot, FILES[2]!).dependencies["@gavel/client"], current);
});

test("a version changed in Cargo.toml alone fails the check, and the stamp carries it everywhere", () => {
  const copy = mkdtempSync(join(tmpdir(), "gavel-version-"));
  try {
    for (const file of FILES) {
      mkdirSync(dirname(join(copy, file)), { recursive: true });
      cpSync(join(repoRoot, file), join(copy, file));
    }
    const cargo = readFileSync(join(copy, "Cargo.toml"), "utf8");
    const bumped = cargo.replace(/^(\[workspace\.package\]\s*\nversion\s*=\s*")[^"]+"/m, '$19.8.7"');
    assert.notEqual(bumped, cargo, "the workspace version line was found");
    writeFileSync(join(copy, "Cargo.toml"), bumped);
    // A Python client, as clients/python may have it.
    const pyproject = join(copy, "clients/python/pyproject.toml");
    mkdirSync(dirname(pyproject), { recursive: true });
    writeFileSync(pyproject, '[project]\nname = "gavel"\ndependencies = ["grpcio>=1.60"]\nversion = "0.0.1"\n\n[tool.x]\nversion = "keep"\n');

    const drifted = version("--check", "--root", copy);
    assert.equal(drifted.status, 1);
    for (const file of [...FILES.slice(1), "clients/python/pyproject.toml"]) {
      assert.ok(drifted.stderr.includes(`${file} does not carry version 9.8.7`), drifted.stderr);
    }

    assert.equal(version("--stamp", "--root", copy).status, 0);
    assert.equal(version("--check", "--root", copy).status, 0);
    assert.equal(json(copy, FILES[1]!).version, "9.8.7");
    assert.equal(json(copy, FILES[2]!).version, "9.8.7");
    assert.equal(json(copy, FILES[2]!).dependencies["@gavel/client"], "9.8.7");
    assert.equal(json(copy, FILES[3]!).dependencies["@gavel/orpc-agent"], "9.8.7");
    const lock = json(copy, FILES[4]!);
    assert.equal(lock.packages["packages/client"].version, "9.8.7");
    assert.equal(lock.packages["packages/orpc-agent"].dependencies["@gavel/client"], "9.8.7");
    assert.equal(lock.packages["../../examples/orpc-refund"].version, "9.8.7");
    assert.equal(
      readFileSync(pyproject, "utf8"),
      '[project]\nname = "gavel"\ndependencies = ["grpcio>=1.60"]\nversion = "9.8.7"\n\n[tool.x]\nversion = "keep"\n',
    );
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
});
