// examples/orpc-refund, as the workspace builds it, runs the orpc-refund
// walk-through of docs/walkthroughs.md, which README.md links (refund-flow.ts).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { TestCluster } from "./cluster.js";
import { repoRoot } from "./readme.js";
import { runRefundWalkthrough } from "./refund-flow.js";

const example = join(repoRoot, "examples/orpc-refund");
let cluster: TestCluster;
let scratch: string;

before(async () => {
  cluster = await TestCluster.start();
  scratch = mkdtempSync(join(tmpdir(), "orpc-refund-"));
});

after(async () => {
  await cluster?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

test("the orpc-refund example: submit, approve from the CLI as another principal, one result", async () => {
  await runRefundWalkthrough(cluster, { program: (name) => join(example, "dist", `${name}.js`), cwd: scratch, orderId: "o-42" });
});
