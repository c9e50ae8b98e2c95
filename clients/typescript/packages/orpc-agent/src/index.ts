// @gavel/orpc-agent: Gavel behind orpc-agent's seams. A fleet-wide
// ApprovalCoordinator (coordinator.ts), an audit sink writing to Gavel's
// replicated trail (audit.ts), capability sync (capabilities.ts) and a
// worker adapter that runs oRPC procedures under Gavel leases (worker.ts).
export * from "./types.js";
export {
  type ApprovalTerms,
  type GavelApprovalCoordinator,
  type GavelApprovalDecision,
  type GavelApprovalCoordinatorOptions,
  createGavelApprovalCoordinator,
  attributeProblems,
  fromPbActor,
  isWellFormedActor,
  toPbActor,
  toRecord,
  type GavelApprovalRecord,
  type QuorumProgress,
} from "./coordinator.js";
export { inputHash, canonicalJson } from "@gavel/client";
export { type GavelAuditSinkOptions, MAX_PAYLOAD_BYTES, createGavelAuditSink } from "./audit.js";
export { type SyncOptions, type SyncReport, type UnmappedField, syncCapabilities, toCapabilitySpec } from "./capabilities.js";
export { type GavelAgentContext, type GavelWorkerOptions, createGavelWorker, toHandlerError } from "./worker.js";
