// Registers the refund capability from its orpc-agent metadata (needs the
// admin grant) and prints what could not be carried over.
import { createGavelClient, optionsFromEnv } from "@gavel/client";
import { syncCapabilities } from "@gavel/orpc-agent";
import { refundMeta } from "./refund.js";

const client = createGavelClient(optionsFromEnv());
try {
  const report = await syncCapabilities(client, [refundMeta]);
  for (const { id, version } of report.registered) {
    console.log(`registered ${id} version ${version}`);
  }
  for (const { capabilityId, field, reason } of report.unmapped) {
    console.log(`not mapped: ${capabilityId} ${field}: ${reason}`);
  }
} finally {
  client.close();
}
