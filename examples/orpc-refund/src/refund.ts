// orpc-agent's refundOrder (its idempotency guide) as an oRPC procedure: a
// write that declares idempotency, may be retried once, and needs an
// approval. The payment gateway stand-in deduplicates by the idempotency key
// Gavel gives every attempt of one execution, and records each charge in a
// JSON Lines ledger.
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { type Schema, os } from "@orpc/server";
import type { AgentMeta, GavelAgentContext } from "@gavel/orpc-agent";

/** The refund's input. */
export interface RefundInput {
  orderId: string;
  amountCents: number;
}

/** The refund's result. */
export interface RefundResult {
  orderId: string;
  reference: string;
  refunded: boolean;
}

/** The input schema, as a Standard Schema (what zod or valibot would give). */
export const RefundInputSchema: Schema<RefundInput, RefundInput> = {
  "~standard": {
    version: 1,
    vendor: "orpc-refund",
    validate(value: unknown) {
      const input = value as Partial<RefundInput> | null;
      const issues: { message: string; path: string[] }[] = [];
      if (typeof input?.orderId !== "string" || input.orderId.length === 0) {
        issues.push({ message: "orderId must be a non-empty string", path: ["orderId"] });
      }
      if (!Number.isInteger(input?.amountCents) || (input?.amountCents ?? 0) <= 0) {
        issues.push({ message: "amountCents must be a positive integer", path: ["amountCents"] });
      }
      return issues.length > 0 ? { issues } : { value: input as RefundInput };
    },
  },
};

/** The capability's metadata, as orpc-agent declares it; syncCapabilities registers it. */
export const refundMeta: AgentMeta = {
  id: "orders.refund.ts",
  sideEffect: "write",
  risk: "high",
  idempotent: true,
  retry: { maxAttempts: 1, backoffMs: 200 },
  timeoutMs: 10_000,
  approval: { required: true, type: "human", expiresInMs: 900_000 },
};

/** A payment gateway stand-in that deduplicates by idempotency key. */
export class Payments {
  constructor(private readonly ledger: string) {}

  refund(input: RefundInput, options: { idempotencyKey: string; signal: AbortSignal }): RefundResult {
    options.signal.throwIfAborted();
    const charges = existsSync(this.ledger)
      ? readFileSync(this.ledger, "utf8")
          .split("\n")
          .filter((line) => line.length > 0)
          .map((line) => JSON.parse(line) as RefundResult & { idempotencyKey: string })
      : [];
    const seen = charges.find((charge) => charge.idempotencyKey === options.idempotencyKey);
    if (seen !== undefined) {
      return { orderId: seen.orderId, reference: seen.reference, refunded: seen.refunded };
    }
    const result = { orderId: input.orderId, reference: `ch_${String(charges.length + 1).padStart(4, "0")}`, refunded: true };
    appendFileSync(this.ledger, `${JSON.stringify({ ...result, idempotencyKey: options.idempotencyKey, amountCents: input.amountCents })}\n`);
    return result;
  }
}

/** The procedure: the same handler code orpc-agent's own runtime would run. */
export const refundOrder = os
  .$context<{ agent: GavelAgentContext; payments: Payments }>()
  .input(RefundInputSchema)
  .handler(({ input, context, signal }): RefundResult =>
    context.payments.refund(input, { idempotencyKey: context.agent.idempotencyKey, signal: signal ?? context.agent.signal }),
  );
