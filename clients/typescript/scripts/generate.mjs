// Regenerates the gavel.v1 TypeScript code from proto/ with buf and
// protoc-gen-es (both shipped by npm packages, no system protoc).
//
//   node scripts/generate.mjs            writes packages/client/src/gen
//   node scripts/generate.mjs <outDir>   writes <outDir> instead (the staleness test)
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, cpSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const protoRoot = resolve(root, "../../proto");
const target = resolve(process.argv[2] ?? join(root, "packages/client/src/gen"));

const work = mkdtempSync(join(tmpdir(), "gavel-gen-"));
try {
  const template = readFileSync(join(root, "buf.gen.yaml"), "utf8").replace(
    "out: packages/client/src/gen",
    `out: ${work}/out`,
  );
  writeFileSync(join(work, "buf.gen.yaml"), template);
  const bin = join(root, "node_modules/.bin");
  execFileSync(join(bin, "buf"), ["generate", protoRoot, "--template", join(work, "buf.gen.yaml"), "--path", join(protoRoot, "gavel/v1")], {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}`, BUF_CACHE_DIR: join(work, "cache") },
  });
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  cpSync(join(work, "out"), target, { recursive: true });
} finally {
  rmSync(work, { recursive: true, force: true });
}
