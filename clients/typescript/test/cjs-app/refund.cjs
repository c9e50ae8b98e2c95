// examples/orpc-refund's refund as a CommonJS app writes it: @gavel/client
// and @gavel/orpc-agent by require(); @orpc/server, which ships only as an
// ES module, by import() (Node 20 cannot require() an ES module). The
// payment stand-in charges once per idempotency key, one JSON line a charge.
"use strict";
const { appendFileSync, existsSync, readFileSync } = require("node:fs");

/** The capability, as orpc-agent metadata (the example's, as JSON). */
const refundMeta = require("./capability.json");

/** Charges `input` under `idempotencyKey` in `ledger` unless that key was charged already. */
function charge(ledger, input, idempotencyKey) {
  const charges = existsSync(ledger) ? readFileSync(ledger, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line)) : [];
  const earlier = charges.find((line) => line.idempotencyKey === idempotencyKey);
  const reference = earlier?.reference ?? `ch_${String(charges.length + 1).padStart(4, "0")}`;
  if (earlier === undefined) {
    appendFileSync(ledger, `${JSON.stringify({ orderId: input.orderId, reference, idempotencyKey })}\n`);
  }
  return { orderId: input.orderId, reference, refunded: true };
}

/** The oRPC procedure (built once @orpc/server is loaded). */
async function refundProcedure(ledger) {
  const { os } = await import("@orpc/server");
  return os.handler(({ input, context }) => charge(ledger, input, context.agent.idempotencyKey));
}

/** Runs `main` with a client from the GAVEL_* environment, reporting a failure as exit code 1. */
function runWithClient(name, main) {
  const { createGavelClient, optionsFromEnv } = require("@gavel/client");
  const client = createGavelClient(optionsFromEnv());
  main(client).then(
    () => client.close(),
    (error) => {
      console.error(`orpc-refund ${name} (CommonJS): ${error?.stack ?? error}`);
      client.close();
      process.exitCode = 1;
    },
  );
}

module.exports = { refundMeta, refundProcedure, runWithClient };
