// The grants the repository's orpc-refund walk-through gives each principal
// (its `$ gavel access grant <principal> <grant>` lines, in the section "The
// same refund from TypeScript" of docs/walkthroughs.md, which README.md
// links), so the tests run with exactly what a reader types, and a change to
// the walk-through that under-grants fails them.
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root. */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** The document that holds the TypeScript walk-through, from the repository root. */
export const walkthroughPath = "docs/walkthroughs.md";

/** The walk-through's heading. */
const SECTION = "## The same refund from TypeScript";

/** The TypeScript walk-through: its section, up to the next second-level heading. */
export function readmeSection(): string {
  const text = readFileSync(join(repoRoot, walkthroughPath), "utf8");
  const start = text.indexOf(SECTION);
  if (start === -1) {
    throw new Error(`${walkthroughPath} has no section "${SECTION}": the tests cannot follow it`);
  }
  const end = text.indexOf("\n## ", start + SECTION.length);
  return end === -1 ? text.slice(start) : text.slice(start, end);
}

/** Every `[principal, grant]` the TypeScript walk-through grants, in order. */
export function readmeGrants(): [string, string][] {
  const grants = [...readmeSection().matchAll(/^\s*\$ gavel access grant (\S+) (\S+)\s*$/gm)].map(
    (match): [string, string] => [match[1]!, match[2]!],
  );
  if (grants.length === 0) {
    throw new Error(`${walkthroughPath}'s TypeScript walk-through grants nothing: the tests cannot follow it`);
  }
  return grants;
}

/** The grants the TypeScript walk-through gives `principal`. */
export function readmeGrantsOf(principal: string): string[] {
  return readmeGrants()
    .filter(([who]) => who === principal)
    .map(([, grant]) => grant);
}
