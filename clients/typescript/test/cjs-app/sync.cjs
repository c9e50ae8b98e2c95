// Registers the refund capability (as the dev admin) from a CommonJS app.
"use strict";
const { syncCapabilities } = require("@gavel/orpc-agent");
const { refundMeta, runWithClient } = require("./refund.cjs");

runWithClient("sync", async (client) => {
  // Which build require() loaded: the test checks it is the CommonJS one.
  console.log(`loaded ${require.resolve("@gavel/client")} ${require.resolve("@gavel/orpc-agent")}`);
  const report = await syncCapabilities(client, [refundMeta]);
  for (const { id, version } of report.registered) {
    console.log(`registered ${id} version ${version}`);
  }
});
