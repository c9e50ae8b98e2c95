// The grants README.md gives each principal of the orpc-refund walk-through
// (its `$ gavel access grant <principal> <grant>` lines), so the tests run
// with exactly what a reader types, and a README change that under-grants
// fails them.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** Every `[principal, grant]` README.md's TypeScript walk-through grants, in order. */
export function readmeGrants(): [string, string][] {
  const readme = readFileSync(join(repoRoot, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## The same refund from TypeScript"));
  const grants = [...section.matchAll(/^\s*\$ gavel access grant (\S+) (\S+)\s*$/gm)].map(
    (match): [string, string] => [match[1]!, match[2]!],
  );
  if (grants.length === 0) {
    throw new Error("README.md's TypeScript walk-through grants nothing: the tests cannot follow it");
  }
  return grants;
}

/** The grants README.md gives `principal`. */
export function readmeGrantsOf(principal: string): string[] {
  return readmeGrants()
    .filter(([who]) => who === principal)
    .map(([, grant]) => grant);
}
