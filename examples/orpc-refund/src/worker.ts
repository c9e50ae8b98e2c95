// The worker: runs refundOrder for every task of its queue, under Gavel's
// leases, until SIGINT or SIGTERM. Its principal needs the worker grant.
import { createGavelClient, optionsFromEnv } from "@gavel/client";
import { createGavelWorker } from "@gavel/orpc-agent";
import { Payments, refundMeta, refundOrder } from "./refund.js";

const ledger = process.env.REFUND_LEDGER ?? "orpc-refund-ledger.jsonl";
const payments = new Payments(ledger);
const client = createGavelClient(optionsFromEnv());
const worker = createGavelWorker({
  client,
  procedures: { [refundMeta.id]: refundOrder },
  createContext: () => ({ payments }),
  onError: (error, where) => console.error(`orpc-refund worker: ${where.stage} ${where.executionId ?? ""}: ${String(error)}`),
});
console.log(`orpc-refund worker: polling ${refundMeta.id} at ${client.endpoints.join(",")}; ledger ${ledger}`);
const stop = async () => {
  await worker.shutdown();
  client.close();
  console.log("orpc-refund worker: stopped");
};
process.once("SIGINT", stop);
process.once("SIGTERM", stop);
await worker.done;
