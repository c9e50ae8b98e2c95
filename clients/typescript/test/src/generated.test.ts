// The checked-in generated code (packages/client/src/gen) is what the proto
// files generate now: regenerated into a temporary directory and compared
// file by file. Run `npm run generate` after changing proto/.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const checkedIn = join(root, "packages/client/src/gen");

function files(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)))
    .sort();
}

test("the checked-in generated code is up to date with proto/", () => {
  const fresh = mkdtempSync(join(tmpdir(), "gavel-gen-check-"));
  try {
    execFileSync(process.execPath, [join(root, "scripts/generate.mjs"), fresh], { cwd: root, stdio: "pipe", timeout: 120_000 });
    assert.deepEqual(files(checkedIn), files(fresh), "the same files; run `npm run generate` in clients/typescript");
    for (const file of files(fresh)) {
      assert.equal(
        readFileSync(join(checkedIn, file), "utf8"),
        readFileSync(join(fresh, file), "utf8"),
        `${file} is stale; run \`npm run generate\` in clients/typescript`,
      );
    }
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
});
