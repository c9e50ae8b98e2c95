// One spelling of a principal (docs/decisions/0090): an actor reads
// `kind:id` everywhere, and an actor id that already names a kind
// (`user:ts-alice`) is refused before anything is sent, with the cluster's
// INVALID_ARGUMENT and message. No cluster: the client points at a port
// nothing listens on, and the refusal must come before any attempt.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  ActorKind,
  Code,
  GavelError,
  Risk,
  SideEffect,
  actorIdProblem,
  actorText,
  createGavelClient,
} from "@gavel/client";
import { fromPbActor, toPbActor } from "@gavel/orpc-agent";

/** A client of nothing: any call it sends fails; the checks run first. */
const client = () => createGavelClient({ endpoints: ["127.0.0.1:9"], retryBudgetMs: 0 });

async function refusal(promise: Promise<unknown>): Promise<GavelError> {
  const outcome = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.ok(outcome instanceof GavelError, `expected a GavelError, got ${String(outcome)}`);
  return outcome;
}

describe("one spelling of a principal", () => {
  test("an actor id that names a kind is refused before sending, saying how to write it", async () => {
    const gavel = client();
    try {
      const submitted = await refusal(
        gavel.executions.submit({
          executionId: "refund-o-42",
          capabilityId: "orders.refund",
          inputJson: "{}",
          actor: { id: "user:ts-alice", kind: ActorKind.USER },
          surface: "direct",
        }),
      );
      assert.equal(submitted.code, "INVALID_ARGUMENT");
      assert.equal(submitted.grpcCode, Code.InvalidArgument);
      assert.equal(
        submitted.message,
        'INVALID_ARGUMENT: actor id "user:ts-alice" already names a kind; pass id "ts-alice" with kind user',
      );

      const created = await refusal(
        gavel.approvals.createApproval({
          id: "apr-1",
          capabilityId: "orders.refund",
          surface: "direct",
          actor: { id: "service:billing", kind: ActorKind.SERVICE },
          inputJson: "{}",
          risk: Risk.LOW,
          sideEffect: SideEffect.READ,
        }),
      );
      assert.match(created.message, /actor id "service:billing" already names a kind; pass id "billing" with kind service/);

      // A principal kind names the actor kind that principal acts as.
      const decided = await refusal(
        gavel.approvals.decideApproval({ id: "apr-1", approver: { id: "worker:w1", kind: ActorKind.AUTOMATION } }),
      );
      assert.match(decided.message, /approver id "worker:w1" already names a kind; pass id "w1" with kind automation/);
      assert.equal(gavel.attempts(), 0, "nothing was sent");
    } finally {
      gavel.close();
    }
  });

  test("colons that name no kind are the id's own", () => {
    for (const id of ["alice", "tenant:alice", "alice@example.com", "User:alice", "urn:user:alice"]) {
      assert.equal(actorIdProblem("actor", id), undefined, id);
    }
    assert.equal(
      actorIdProblem("actor", "node:2"),
      'actor id "node:2" already names a kind; pass id "2" with kind service',
    );
  });

  test("an outcome names its actors kind:id, from the proto and from orpc-agent alike", () => {
    const approver = { id: "bob-finance", kind: ActorKind.USER };
    assert.equal(actorText(approver), "user:bob-finance");
    assert.equal(actorText({ id: "agent-7", kind: ActorKind.AUTOMATION }), "automation:agent-7");
    const agentActor = fromPbActor(toPbActor({ id: "bob-finance", kind: "user" }));
    assert.equal(actorText(agentActor), "user:bob-finance");
  });
});
