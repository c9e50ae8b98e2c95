// createGavelAuditSink: an orpc-agent AuditSink that appends each event to
// Gavel's replicated audit trail (AuditService.RecordEvent), next to the
// events Gavel writes itself. Events are recorded as the app's principal
// (`recorded_by_application`), under the type `<prefix><orpc-agent type>`,
// since the bare types (`capability.approved`, ...) are Gavel's own.
import { type GavelClient, type Plain, type RecordEventResponse, stringifyIJson } from "@gavel/client";
import { toPbActor } from "./coordinator.js";
import type { AuditEvent, AuditSink } from "./types.js";

/** The largest payload RecordEvent takes, in bytes of JSON text. */
export const MAX_PAYLOAD_BYTES = 16_384;

/** Options of createGavelAuditSink. */
export interface GavelAuditSinkOptions {
  /** A client whose principal holds `submitter` (and `act-for`, to name the event's actor). */
  client: GavelClient;
  /** Prefix of the recorded type. Default `"orpc."`. */
  typePrefix?: string;
  /** Which events to record. Default all. */
  include?: (event: AuditEvent) => boolean;
  /**
   * Called when an event cannot be recorded; the sink then resolves. Without
   * it the sink rejects, which orpc-agent's strict audit mode turns into a
   * failed execution.
   */
  onError?: (error: unknown, event: AuditEvent) => void;
}

/** The fields that travel in RecordEvent's own fields rather than in the payload. */
const ENVELOPE = new Set(["type", "actor", "executionId", "capabilityId", "correlationId"]);

/** JSON text of the event's other fields (Dates as ISO strings, as JSON.stringify writes them). */
function payloadOf(event: AuditEvent): string {
  const payload: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(event)) {
    if (!ENVELOPE.has(key) && value !== undefined) {
      payload[key] = value;
    }
  }
  // JSON.stringify, refusing what Gavel refuses (an integer beyond 2^53 - 1,
  // NaN, which JSON.stringify would write as null, ...), naming the pointer.
  return stringifyIJson(payload, { name: "payload", code: "INVALID_ARGUMENT" }) ?? "{}";
}

/** Creates an orpc-agent AuditSink writing to Gavel's trail. */
export function createGavelAuditSink(options: GavelAuditSinkOptions): AuditSink & {
  record(event: AuditEvent): Promise<Plain<RecordEventResponse> | undefined>;
} {
  const prefix = options.typePrefix ?? "orpc.";
  const record = async (event: AuditEvent): Promise<Plain<RecordEventResponse> | undefined> => {
    if (options.include !== undefined && !options.include(event)) {
      return undefined;
    }
    try {
      const payloadJson = payloadOf(event);
      if (Buffer.byteLength(payloadJson, "utf8") > MAX_PAYLOAD_BYTES) {
        throw new Error(
          `audit event ${event.type} has a payload of ${Buffer.byteLength(payloadJson, "utf8")} bytes, over Gavel's ${MAX_PAYLOAD_BYTES}`,
        );
      }
      const attributes: Record<string, string> = {};
      if (typeof event.surface === "string") attributes.surface = event.surface;
      if (typeof event.inputHash === "string") attributes.inputHash = event.inputHash;
      return await options.client.audit.recordEvent({
        type: `${prefix}${event.type}`,
        actor: toPbActor({ ...event.actor, attributes: {} }),
        executionId: event.executionId,
        capabilityId: event.capabilityId,
        correlationId: event.correlationId,
        approvalId: typeof event.approvalId === "string" ? event.approvalId : undefined,
        payloadJson,
        attributes,
      });
    } catch (error) {
      if (options.onError === undefined) {
        throw error;
      }
      options.onError(error, event);
      return undefined;
    }
  };
  const sink = async (event: AuditEvent): Promise<void> => {
    await record(event);
  };
  return Object.assign(sink, { record });
}
