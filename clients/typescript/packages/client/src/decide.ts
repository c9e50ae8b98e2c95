// Deciding and voting on an approval by its terms (SPEC section 13): a
// person's "yes" binds exactly what they were shown. The cluster computes
// each approval's terms (`Approval.termsJson`) and their hash
// (`Approval.termsHash`); a decision or vote names the hash its author saw,
// and the cluster refuses another one with APPROVAL_TERMS_CHANGED.
//
// `client.decide` / `client.vote` send the terms hash the caller passes (the
// one the person was shown), or else read the approval first and send the
// hash of what they read.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { type CallOptions, Code } from "@connectrpc/connect";
import type { ActorSchema } from "./gen/gavel/v1/common_pb.js";
import { type Approval, ApprovalStatus } from "./gen/gavel/v1/approval_pb.js";
import type { GavelClient } from "./client.js";
import type { Plain } from "./plain.js";
import { GavelError } from "./errors.js";

/** A decision on an approval: `client.decide(id, decision)`. */
export interface DecideOptions {
  /** True approves, false rejects. */
  approve: boolean;
  /**
   * The terms hash (`Approval.termsHash`) of the terms the person deciding
   * was shown, sent as is. Absent: the approval is read first and the hash
   * of what was read is sent.
   */
  termsHash?: string;
  /** Free-text justification. */
  comment?: string;
  /** Who decides; defaults to the caller (naming another needs `delegate-decide`). */
  approver?: MessageInitShape<typeof ActorSchema>;
  /** The caller's clock (Unix epoch ms; needs the `clock` grant), for the read and the decision. */
  callerNowMs?: number | bigint;
  /** Idempotency token of the decision; a fresh one when absent. */
  requestId?: string;
}

/** One vote on an approval a policy governs: `client.vote(id, vote)`. */
export interface VoteOptions extends Omit<DecideOptions, "callerNowMs"> {
  /**
   * The input hash the voter saw. Absent: the approval's, read with its
   * terms (the terms hash binds the input, so it cannot differ unnoticed).
   */
  inputHash?: string;
}

/** The approval `id` as it is now; NOT_FOUND when there is none. */
async function read(
  client: GavelClient,
  id: string,
  callerNowMs: number | bigint | undefined,
  callOptions?: CallOptions,
): Promise<Plain<Approval>> {
  const response = await client.approvals.getApproval({ id, callerNowMs }, callOptions);
  if (response.approval === undefined) {
    throw new GavelError("NOT_FOUND", `approval ${id} was not found`, Code.NotFound);
  }
  return response.approval;
}

/** The terms hash a read approval carries (none from a cluster that predates terms). */
function hashOf(approval: Plain<Approval>): string | undefined {
  return approval.termsHash === "" ? undefined : approval.termsHash;
}

/** Approves or rejects approval `id`, naming the terms hash the decision was made on. */
export async function decide(
  client: GavelClient,
  id: string,
  decision: DecideOptions,
  callOptions?: CallOptions,
): Promise<Plain<Approval>> {
  const termsHash =
    decision.termsHash !== undefined ? decision.termsHash : hashOf(await read(client, id, decision.callerNowMs, callOptions));
  const response = await client.approvals.decideApproval(
    {
      id,
      status: decision.approve ? ApprovalStatus.APPROVED : ApprovalStatus.REJECTED,
      termsHash,
      comment: decision.comment,
      approver: decision.approver,
      callerNowMs: decision.callerNowMs,
      requestId: decision.requestId,
    },
    callOptions,
  );
  return response.approval!;
}

/** Casts one vote on approval `id`, naming the terms hash (and input hash) it was cast on. */
export async function vote(
  client: GavelClient,
  id: string,
  cast: VoteOptions,
  callOptions?: CallOptions,
): Promise<Plain<Approval>> {
  let { termsHash, inputHash } = cast;
  if (termsHash === undefined || inputHash === undefined) {
    const approval = await read(client, id, undefined, callOptions);
    termsHash ??= hashOf(approval);
    inputHash ??= approval.inputHash;
  }
  const response = await client.policies.castVote(
    {
      approvalId: id,
      approve: cast.approve,
      inputHash,
      termsHash,
      comment: cast.comment,
      approver: cast.approver,
      requestId: cast.requestId,
    },
    callOptions,
  );
  return response.approval!;
}
