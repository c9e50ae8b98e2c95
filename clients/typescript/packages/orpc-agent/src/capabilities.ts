// syncCapabilities: registers orpc-agent capability metadata (AgentMeta) as
// Gavel capabilities, and says what it could not carry over.
import {
  type CapabilitySpec,
  type GavelClient,
  type MessageInitShape,
  type PlainInit,
  Risk as PbRisk,
  SideEffect as PbSideEffect,
  type CapabilitySpecSchema,
} from "@gavel/client";
import { RISKS, SIDE_EFFECTS } from "./mapping.js";
import type { AgentMeta, ApprovalMeta } from "./types.js";

/** orpc-agent's default execution timeout when `timeoutMs` is absent. */
const ORPC_AGENT_DEFAULT_TIMEOUT_MS = 30_000;

/** A piece of metadata Gavel cannot enforce, and why. */
export interface UnmappedField {
  capabilityId: string;
  field: string;
  reason: string;
}

/** What syncCapabilities did. */
export interface SyncReport {
  /** Registered capabilities: id and the version Gavel gave it. */
  registered: { id: string; version: number }[];
  /** Metadata that was not carried over. */
  unmapped: UnmappedField[];
}

/** Options of syncCapabilities. */
export interface SyncOptions {
  /** Queue of each capability; default its id. */
  queue?: (meta: AgentMeta) => string;
  /** Only compute the specs and the report; register nothing. */
  dryRun?: boolean;
}

/** The Gavel capability spec of one AgentMeta, and what did not map. */
export function toCapabilitySpec(
  meta: AgentMeta,
  queue: string = meta.id,
): { spec: PlainInit<MessageInitShape<typeof CapabilitySpecSchema>>; unmapped: UnmappedField[] } {
  const unmapped: UnmappedField[] = [];
  const note = (field: string, reason: string) => unmapped.push({ capabilityId: meta.id, field, reason });
  const spec: PlainInit<MessageInitShape<typeof CapabilitySpecSchema>> & Partial<Pick<CapabilitySpec, "tags">> = {
    id: meta.id,
    sideEffect: SIDE_EFFECTS[meta.sideEffect] ?? PbSideEffect.UNSPECIFIED,
    risk: RISKS[meta.risk ?? "low"] ?? PbRisk.UNSPECIFIED,
    idempotent: meta.idempotent ?? false,
    timeoutMs: meta.timeoutMs ?? ORPC_AGENT_DEFAULT_TIMEOUT_MS,
    queue,
    tags: meta.tags ?? [],
  };
  if (meta.risk === undefined) {
    note("risk", "absent; registered as low");
  }
  if (meta.retry !== undefined) {
    spec.retry = { maxAttempts: meta.retry.maxAttempts };
    if (meta.retry.backoffMs !== undefined) {
      spec.retry.backoffMs = meta.retry.backoffMs;
    }
    if (meta.retry.retryOn !== undefined) {
      note("retry.retryOn", "a function deciding per error cannot run in the cluster; list the codes that must not be retried in the capability's non_retryable_codes, or throw a non-retryable error");
    }
  }
  if (meta.approval !== undefined && meta.approval !== false) {
    const approval: ApprovalMeta = meta.approval === true ? { required: true } : meta.approval;
    spec.approval = { required: approval.required ?? true };
    if (approval.type !== undefined) spec.approval.type = approval.type;
    if (approval.expiresInMs !== undefined) spec.approval.expiresInMs = approval.expiresInMs;
    if (approval.when !== undefined) {
      note("approval.when", "a per-call predicate cannot run in the cluster; Gavel's approval policy is static, so request approvals from the app through the coordinator instead");
    }
  }
  for (const field of Object.keys(meta)) {
    if (!["id", "sideEffect", "risk", "idempotent", "retry", "timeoutMs", "approval", "tags"].includes(field)) {
      note(field, "not part of a Gavel capability");
    }
  }
  return { spec, unmapped };
}

/** Registers every capability (a new version where the spec changed) and reports what did not map. */
export async function syncCapabilities(
  client: GavelClient,
  capabilities: readonly AgentMeta[] | Record<string, AgentMeta>,
  options: SyncOptions = {},
): Promise<SyncReport> {
  const metas = Array.isArray(capabilities) ? capabilities : Object.values(capabilities);
  const report: SyncReport = { registered: [], unmapped: [] };
  for (const meta of metas as AgentMeta[]) {
    const { spec, unmapped } = toCapabilitySpec(meta, options.queue?.(meta) ?? meta.id);
    report.unmapped.push(...unmapped);
    if (!options.dryRun) {
      const response = await client.capabilities.registerCapability({ spec });
      report.registered.push({ id: meta.id, version: response.capability?.version ?? 0 });
    }
  }
  return report;
}
