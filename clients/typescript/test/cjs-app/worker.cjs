// Runs the refund procedure under Gavel's leases, from a CommonJS app, until SIGTERM.
"use strict";
const { createGavelWorker } = require("@gavel/orpc-agent");
const { refundMeta, refundProcedure, runWithClient } = require("./refund.cjs");

runWithClient("worker", async (client) => {
  const procedure = await refundProcedure(process.env.REFUND_LEDGER ?? "orpc-refund-ledger.jsonl");
  const worker = createGavelWorker({ client, procedures: { [refundMeta.id]: procedure } });
  console.log(`orpc-refund worker (CommonJS): polling ${refundMeta.id}`);
  process.once("SIGTERM", () => worker.shutdown().then(() => console.log("orpc-refund worker (CommonJS): stopped")));
  await worker.done;
});
