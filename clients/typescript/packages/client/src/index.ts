// @gavel/client: a typed client for every gavel.v1 service (generated from
// proto/ by protoc-gen-es, in ./gen), with TLS, bearer tokens, leader
// following and safe retries (client.ts); the worker runtime (worker.ts); and
// the canonical input hash (hash.ts); deciding and voting by an approval's
// terms hash (decide.ts); the I-JSON check of JSON before it is
// sent (ijson.ts); actors written `kind:id` and the refusal of an actor id
// that names a kind (actors.ts); every stable code, generated from the server's catalogue
// (codes.ts); records with their 64-bit integers as numbers (plain.ts).
export {
  type ClientOptions,
  type GavelClient,
  type TlsOptions,
  LEADER_HEADER,
  createGavelClient,
  newRequestId,
  optionsFromEnv,
} from "./client.js";
export { type DecideOptions, type VoteOptions } from "./decide.js";
export { GavelError, readErrorDetail } from "./errors.js";
export { actorIdProblem, actorText } from "./actors.js";
export { type GavelCode, type GavelCodeClass, type GavelCodeInfo, GAVEL_CODES, isGavelCode } from "./codes.js";
export { Code } from "@connectrpc/connect";
export { Reachability } from "./reach.js";
export { type GavelServiceClient, type Plain, type PlainInit, toPlain } from "./plain.js";
export { UnserializableInputError, canonicalJson, inputHash } from "./hash.js";
export { type JsonField, checkJsonText, stringifyIJson } from "./ijson.js";
export {
  type AbortReason,
  type Handler,
  type TaskContext,
  type Worker,
  type WorkerOptions,
  HandlerError,
  createWorker,
} from "./worker.js";
export * from "./gen/gavel/v1/access_pb.js";
export * from "./gen/gavel/v1/approval_pb.js";
export * from "./gen/gavel/v1/audit_pb.js";
export * from "./gen/gavel/v1/capability_pb.js";
export * from "./gen/gavel/v1/cluster_pb.js";
export * from "./gen/gavel/v1/common_pb.js";
export * from "./gen/gavel/v1/error_pb.js";
export * from "./gen/gavel/v1/execution_pb.js";
export * from "./gen/gavel/v1/policy_pb.js";
export * from "./gen/gavel/v1/worker_pb.js";
export type { MessageInitShape } from "@bufbuild/protobuf";
