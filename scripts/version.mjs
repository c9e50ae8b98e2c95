#!/usr/bin/env node
// Gavel's one version: `[workspace.package] version` in the workspace
// Cargo.toml (every crate takes it with `version.workspace = true`). This
// script stamps it into everything else that carries a version, or checks
// that nothing has drifted:
//
//   node scripts/version.mjs            prints the version
//   node scripts/version.mjs --stamp    writes it everywhere below
//   node scripts/version.mjs --check    exits 1 naming each file that differs
//   ... --root DIR                      works on another checkout (the tests)
//
// What carries it: the package.json of @gavel/client, @gavel/orpc-agent and
// examples/orpc-refund, the exact versions by which they depend on each
// other, their entries in clients/typescript/package-lock.json (npm ci
// refuses a lockfile that disagrees), and clients/python/pyproject.toml's
// static `version = "..."` when that client exists.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const args = process.argv.slice(2);
const rootAt = args.indexOf("--root");
const root = rootAt >= 0 ? resolve(args[rootAt + 1] ?? ".") : resolve(dirname(fileURLToPath(import.meta.url)), "..");
const mode = args.includes("--stamp") ? "stamp" : args.includes("--check") ? "check" : "print";

/** The workspace version: `version = "..."` in Cargo.toml's [workspace.package]. */
function workspaceVersion() {
  const cargo = readFileSync(join(root, "Cargo.toml"), "utf8");
  const section = cargo.split(/^\[/m).find((part) => part.startsWith("workspace.package]"));
  const match = section?.match(/^version\s*=\s*"([^"]+)"\s*$/m);
  if (match?.[1] === undefined) {
    throw new Error(`${join(root, "Cargo.toml")} has no [workspace.package] version`);
  }
  return match[1];
}

const version = workspaceVersion();
const OWN_PACKAGES = ["@gavel/client", "@gavel/orpc-agent"];
/** package.json files, relative to the root, with the lockfile key of each workspace. */
const PACKAGES = [
  { file: "clients/typescript/packages/client/package.json", lockKey: "packages/client" },
  { file: "clients/typescript/packages/orpc-agent/package.json", lockKey: "packages/orpc-agent" },
  { file: "examples/orpc-refund/package.json", lockKey: "../../examples/orpc-refund" },
];
const LOCKFILE = "clients/typescript/package-lock.json";
const PYPROJECT = "clients/python/pyproject.toml";

/** Sets a package manifest's (or lock entry's) version and its dependencies on our own packages. */
function stampManifest(manifest) {
  if (manifest.version !== undefined) {
    manifest.version = version;
  }
  for (const name of OWN_PACKAGES) {
    if (manifest.dependencies?.[name] !== undefined) {
      manifest.dependencies[name] = version;
    }
  }
  return manifest;
}

/** Each file's current text and its text with the version stamped. */
function stamped() {
  const files = [];
  const json = (file, change) => {
    const path = join(root, file);
    const before = readFileSync(path, "utf8");
    const after = `${JSON.stringify(change(JSON.parse(before)), null, 2)}\n`;
    files.push({ file, path, before, after });
  };
  for (const { file } of PACKAGES) {
    json(file, stampManifest);
  }
  json(LOCKFILE, (lock) => {
    for (const { lockKey } of PACKAGES) {
      if (lock.packages?.[lockKey] !== undefined) {
        stampManifest(lock.packages[lockKey]);
      }
    }
    return lock;
  });
  const pyproject = join(root, PYPROJECT);
  if (existsSync(pyproject)) {
    const before = readFileSync(pyproject, "utf8");
    // Only a static `version = "..."` line of the [project] table; a
    // dynamic version is read from elsewhere and left alone.
    const after = before.replace(/^\[project\][ \t]*$[\s\S]*?(?=^\[|(?![\s\S]))/m, (table) =>
      table.replace(/^(version\s*=\s*")[^"]*(")/m, `$1${version}$2`),
    );
    files.push({ file: PYPROJECT, path: pyproject, before, after });
  }
  return files;
}

if (mode === "print") {
  console.log(version);
} else if (mode === "stamp") {
  for (const { file, path, before, after } of stamped()) {
    if (before !== after) {
      writeFileSync(path, after);
      console.log(`stamped ${version} into ${file}`);
    }
  }
} else {
  const drifted = stamped().filter(({ before, after }) => before !== after);
  for (const { file } of drifted) {
    console.error(`${file} does not carry version ${version} (Cargo.toml's [workspace.package]); run node scripts/version.mjs --stamp`);
  }
  process.exitCode = drifted.length > 0 ? 1 : 0;
}
