// An approval a Gavel policy governs, as @gavel/orpc-agent's coordinator
// records it (docs/policies.md): the record carries the quorum progress, and
// a voided approval, which orpc-agent has no name for, reads as cancelled
// (it can be neither decided nor consumed) with `quorum.voided` set. Pure
// mapping: no cluster.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { ApprovalSchema, ApprovalStatus } from "@gavel/client";
import { toRecord } from "@gavel/orpc-agent";

function governed(status: ApprovalStatus) {
  return create(ApprovalSchema, {
    id: "refund-1",
    capabilityId: "orders.refund",
    surface: "direct",
    inputJson: '{"order_id":"o-1"}',
    inputHash: "0".repeat(64),
    status,
    quorum: {
      policy: "refunds",
      policyVersion: 2n,
      factors: [
        { name: "finance", k: 1, counted: 1 },
        { name: "legal", k: 1, counted: 0 },
      ],
      denyThreshold: 1,
      denials: 0,
      votes: [{ principal: "user:fin", approve: true, factor: "finance", selfApproval: false, castAtMs: 1000n }],
    },
  });
}

test("a governed approval's record carries its quorum progress", () => {
  const record = toRecord(governed(ApprovalStatus.PENDING));
  assert.equal(record.status, "pending");
  assert.deepEqual(record.quorum?.factors, [
    { name: "finance", k: 1, counted: 1 },
    { name: "legal", k: 1, counted: 0 },
  ]);
  assert.equal(record.quorum?.policyVersion, 2);
  assert.equal(record.quorum?.votes[0]?.factor, "finance");
  assert.equal(record.quorum?.voided, false);
});

test("a voided approval reads as cancelled, with quorum.voided set", () => {
  const record = toRecord(governed(ApprovalStatus.VOIDED));
  assert.equal(record.status, "cancelled");
  assert.equal(record.quorum?.voided, true);
});

test("an ungoverned approval's record has no quorum", () => {
  const approval = governed(ApprovalStatus.APPROVED);
  approval.quorum = undefined;
  assert.equal("quorum" in toRecord(approval), false);
});
