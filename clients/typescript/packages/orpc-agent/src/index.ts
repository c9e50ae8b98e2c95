// @gavel/orpc-agent: Gavel behind orpc-agent's seams. A fleet-wide
// ApprovalCoordinator (coordinator.ts), an audit sink writing to Gavel's
// replicated trail (audit.ts), capability sync (capabilities.ts) and a
// worker adapter that runs oRPC procedures under Gavel leases (worker.ts).
export * from "./types.js";
export {
  type GavelApprovalCoordinator,
  type GavelApprovalCoordinatorOptions,
  createGavelApprovalCoordinator,
  fromPbActor,
  isWellFormedActor,
  toPbActor,
  toRecord,
} from "./coordinator.js";
export { inputHash, canonicalJson } from "@gavel/client";
