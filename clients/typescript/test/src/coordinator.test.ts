// Our own ApprovalCoordinator contract suite (written from orpc-agent's
// documented behaviour, no code from it), run against a real secured
// three-node cluster through the app's service principal.
import assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { ApprovalStatus, Code, type GavelClient, GavelError, inputHash } from "@gavel/client";
import {
  type ApprovalRecord,
  type ApprovalRequest,
  type GavelApprovalCoordinator,
  createGavelApprovalCoordinator,
  toPbActor,
} from "@gavel/orpc-agent";
import { TestCluster } from "./cluster.js";
import { readmeGrantsOf } from "./readme.js";

const APP = "service:orpc-app";
/** The grants the coordinator's principal needs (README of @gavel/orpc-agent). */
const APP_GRANTS = ["submitter", "approver", "act-for", "delegate-decide", "clock"];
const FIFTEEN_MINUTES = 15 * 60 * 1000;

let cluster: TestCluster;
/** One client per node, each talking to that node only. */
let perNode: GavelClient[];
/** The injected clock, starting at a whole second near real time. */
let clockMs = Math.floor(Date.now() / 1000) * 1000;
const now = () => new Date(clockMs);
let coordinators: GavelApprovalCoordinator[];
let coordinator: GavelApprovalCoordinator;
const run = randomUUID().slice(0, 8);

const alice = { id: "alice", kind: "user" as const, displayName: "Alice", attributes: { tenant: "acme", role: "agent" } };
const bob = { id: "bob", kind: "user" as const, attributes: { team: "finance" } };
const carol = { id: "carol", kind: "user" as const, displayName: "Carol" };

let serial = 0;
function request(overrides: Partial<ApprovalRequest> = {}): ApprovalRequest {
  serial += 1;
  const input = overrides.input ?? { orderId: `o-${serial}`, amountCents: 1250 + serial, note: "refund \u{1F4B8}" };
  const requestedAt = overrides.requestedAt ?? new Date(clockMs);
  return {
    id: `apr_${run}_${serial}`,
    capabilityId: `orders.refund.${run}`,
    surface: "aiSdk",
    actor: alice,
    input,
    inputHash: inputHash(input),
    reasons: ["amount over limit"],
    types: ["finance"],
    risk: "high",
    sideEffect: "write",
    requestedAt,
    expiresAt: new Date(requestedAt.getTime() + FIFTEEN_MINUTES),
    ...overrides,
  };
}

async function rejection(promise: Promise<unknown>): Promise<Error> {
  const outcome = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.ok(outcome instanceof Error, `expected a thrown Error, got ${String(outcome)}`);
  return outcome;
}

before(async () => {
  cluster = await TestCluster.start();
  await cluster.grant(APP, [...APP_GRANTS, "self-approval"]);
  perNode = await Promise.all(cluster.endpoints.map((endpoint) => cluster.tokenClient(APP, { endpoints: [endpoint] })));
  coordinators = perNode.map((client) => createGavelApprovalCoordinator({ client, now }));
  coordinator = coordinators[0]!;
});

after(async () => {
  await cluster?.stop();
});

describe("ApprovalCoordinator contract on Gavel", () => {
  test("create returns every field verbatim, and get reads the same record", async () => {
    const sent = request({ actor: { id: "agent-7", kind: "automation", displayName: "Agent 7" } });
    const created = await coordinator.create(sent);
    assert.deepEqual(created, { ...sent, status: "pending" });
    assert.deepEqual(await coordinator.get(sent.id), created);
  });

  test("actor attributes must be strings, refused before anything is stored", async () => {
    const sent = request({ actor: { ...alice, attributes: { roles: ["admin"] } } });
    const error = await rejection(coordinator.create(sent));
    assert.match(error.message, /actor\.attributes\.roles must be a string/);
    assert.equal(await coordinator.get(sent.id), null);
  });

  test("records are detached copies", async () => {
    const created = await coordinator.create(request());
    created.reasons.push("tampered");
    created.actor.id = "mallory";
    (created.input as Record<string, unknown>).amountCents = 1;
    const read = await coordinator.get(created.id);
    assert.deepEqual(read?.reasons, ["amount over limit"]);
    assert.equal(read?.actor.id, alice.id);
    assert.notEqual((read?.input as Record<string, unknown>).amountCents, 1);
  });

  test("a duplicate id is refused and the first record stays", async () => {
    const first = request();
    await coordinator.create(first);
    const error = await rejection(coordinator.create({ ...first, reasons: ["other"] }));
    assert.equal(error.message, `Approval "${first.id}" already exists`);
    assert.deepEqual((await coordinator.get(first.id))?.reasons, ["amount over limit"]);
  });

  test("an unknown id reads as null and throws on decide and markConsumed", async () => {
    const id = `apr_${run}_unknown`;
    assert.equal(await coordinator.get(id), null);
    const decided = await rejection(coordinator.decide(id, { status: "approved", approver: bob }));
    assert.equal(decided.message, `Approval "${id}" was not found`);
    const consumed = await rejection(coordinator.markConsumed(id, "exe_1"));
    assert.equal(consumed.message, `Approval "${id}" was not found`);
  });

  test("decide records the approver, the comment and decidedAt from the injected clock", async () => {
    const created = await coordinator.create(request());
    clockMs += 1234;
    const decided = await coordinator.decide(created.id, { status: "approved", approver: bob, comment: "verified" });
    assert.equal(decided.status, "approved");
    assert.deepEqual(decided.decision, { status: "approved", approver: bob, comment: "verified", decidedAt: now() });
    assert.deepEqual(await coordinator.get(created.id), decided);
  });

  test("decide records a rejection", async () => {
    const created = await coordinator.create(request());
    const decided = await coordinator.decide(created.id, { status: "rejected", approver: carol });
    assert.equal(decided.status, "rejected");
    assert.deepEqual(decided.decision, { status: "rejected", approver: carol, decidedAt: now() });
  });

  test("a malformed decision throws with the exact wording and changes nothing", async () => {
    const created = await coordinator.create(request());
    const badStatus = await rejection(
      coordinator.decide(created.id, { status: "maybe" as "approved", approver: bob }),
    );
    assert.equal(badStatus.message, 'Invalid decision status "maybe"');
    for (const approver of [{ id: "", kind: "user" }, { id: "x", kind: "robot" }, null, undefined, "bob"]) {
      const error = await rejection(
        coordinator.decide(created.id, { status: "approved", approver: approver as unknown as typeof bob }),
      );
      assert.equal(error.message, "Decision approver must be a well-formed actor");
    }
    const read = await coordinator.get(created.id);
    assert.equal(read?.status, "pending");
    assert.equal(read?.decision, undefined);
  });

  test("a decided record cannot be decided again", async () => {
    const created = await coordinator.create(request());
    await coordinator.decide(created.id, { status: "approved", approver: bob });
    const error = await rejection(coordinator.decide(created.id, { status: "rejected", approver: carol }));
    assert.equal(error.message, `Approval "${created.id}" is not pending (status: approved)`);
    assert.equal((await coordinator.get(created.id))?.decision?.approver.id, bob.id);
  });

  test("an expired pending record cannot be decided", async () => {
    const created = await coordinator.create(request());
    const saved = clockMs;
    clockMs = created.expiresAt.getTime() + 1;
    try {
      const error = await rejection(coordinator.decide(created.id, { status: "approved", approver: bob }));
      assert.equal(error.message, `Approval "${created.id}" is not pending (status: expired)`);
    } finally {
      clockMs = saved;
    }
  });

  test("expiry is lazy on the injected clock, through get and list", async () => {
    const capabilityId = `expiry.${run}`;
    const created = await coordinator.create(request({ capabilityId }));
    const saved = clockMs;
    try {
      clockMs = created.expiresAt.getTime() - 1;
      assert.equal((await coordinator.get(created.id))?.status, "pending");
      assert.deepEqual((await coordinator.list({ capabilityId, status: "pending" })).map((r) => r.id), [created.id]);
      clockMs = created.expiresAt.getTime() + 1;
      assert.equal((await coordinator.get(created.id))?.status, "expired");
      assert.deepEqual((await coordinator.list({ capabilityId, status: "expired" })).map((r) => r.id), [created.id]);
      assert.deepEqual(await coordinator.list({ capabilityId, status: "pending" }), []);
      clockMs = saved;
      assert.equal((await coordinator.get(created.id))?.status, "pending");
    } finally {
      clockMs = saved;
    }
  });

  test("an approved record past its expiry stays approved and can still be consumed", async () => {
    const created = await coordinator.create(request());
    await coordinator.decide(created.id, { status: "approved", approver: bob });
    const saved = clockMs;
    try {
      clockMs = created.expiresAt.getTime() + 60_000;
      assert.equal((await coordinator.get(created.id))?.status, "approved");
      const consumed = await coordinator.markConsumed(created.id, `exe_${run}_late`);
      assert.equal(consumed.status, "consumed");
      assert.equal(consumed.consumedByExecutionId, `exe_${run}_late`);
    } finally {
      clockMs = saved;
    }
  });

  test("an approval is consumed once and the first consumer is kept", async () => {
    const created = await coordinator.create(request());
    await coordinator.decide(created.id, { status: "approved", approver: bob });
    const first = await coordinator.markConsumed(created.id, "exe_first");
    assert.equal(first.status, "consumed");
    assert.equal(first.consumedByExecutionId, "exe_first");
    const error = await rejection(coordinator.markConsumed(created.id, "exe_second"));
    assert.equal(error.message, `Approval "${created.id}" cannot be consumed (status: consumed, consumed by exe_first)`);
    assert.equal((await coordinator.get(created.id))?.consumedByExecutionId, "exe_first");
    // The same execution asking again (a retry) is not a second consumption.
    assert.equal((await coordinator.markConsumed(created.id, "exe_first")).consumedByExecutionId, "exe_first");
  });

  test("pending and rejected records cannot be consumed", async () => {
    const pending = await coordinator.create(request());
    const error = await rejection(coordinator.markConsumed(pending.id, "exe_p"));
    assert.equal(error.message, `Approval "${pending.id}" cannot be consumed (status: pending)`);
    const rejected = await coordinator.create(request());
    await coordinator.decide(rejected.id, { status: "rejected", approver: bob });
    const refused = await rejection(coordinator.markConsumed(rejected.id, "exe_r"));
    assert.equal(refused.message, `Approval "${rejected.id}" cannot be consumed (status: rejected)`);
    assert.equal((await coordinator.get(pending.id))?.status, "pending");
    assert.equal((await coordinator.get(rejected.id))?.status, "rejected");
  });

  test("list filters by status, capability and actor, alone and combined", async () => {
    const capA = `list.a.${run}`;
    const capB = `list.b.${run}`;
    const dave = { id: `dave-${run}`, kind: "user" as const };
    const erin = { id: `erin-${run}`, kind: "user" as const };
    const made: ApprovalRecord[] = [];
    for (const [capabilityId, actor] of [
      [capA, dave],
      [capA, erin],
      [capB, dave],
      [capB, erin],
    ] as const) {
      clockMs += 1;
      made.push(await coordinator.create(request({ capabilityId, actor })));
    }
    await coordinator.decide(made[0]!.id, { status: "approved", approver: bob });
    await coordinator.decide(made[3]!.id, { status: "rejected", approver: bob });
    const ids = (records: ApprovalRecord[]) => records.map((record) => record.id).sort();
    const expect = (...indexes: number[]) => indexes.map((index) => made[index]!.id).sort();
    assert.deepEqual(ids(await coordinator.list({ capabilityId: capA })), expect(0, 1));
    assert.deepEqual(ids(await coordinator.list({ actorId: dave.id })), expect(0, 2));
    assert.deepEqual(
      ids((await coordinator.list({ status: "approved" })).filter((r) => made.some((m) => m.id === r.id))),
      expect(0),
    );
    assert.deepEqual(ids(await coordinator.list({ capabilityId: capB, actorId: erin.id })), expect(3));
    assert.deepEqual(ids(await coordinator.list({ capabilityId: capB, status: "pending" })), expect(2));
    assert.deepEqual(ids(await coordinator.list({ capabilityId: capA, actorId: erin.id, status: "pending" })), expect(1));
    assert.deepEqual(await coordinator.list({ capabilityId: capA, status: "rejected" }), []);
    const all = await coordinator.list();
    assert.ok(made.every((record) => all.some((listed) => listed.id === record.id)));
  });

  test("list pages through more records than one page", async () => {
    const client = perNode[0]!;
    const small = createGavelApprovalCoordinator({ client, now, pageSize: 2 });
    const capabilityId = `paging.${run}`;
    const made: string[] = [];
    for (let index = 0; index < 5; index += 1) {
      clockMs += 1;
      made.push((await small.create(request({ capabilityId }))).id);
    }
    assert.deepEqual((await small.list({ capabilityId })).map((record) => record.id), made);
  });

  test("racing decides spread over all three nodes: exactly one wins", async () => {
    for (let round = 0; round < 5; round += 1) {
      const created = await coordinator.create(request());
      const approvers = [bob, carol, { id: "dan", kind: "user" as const }];
      const outcomes = await Promise.allSettled(
        coordinators.flatMap((node, index) => [
          node.decide(created.id, { status: "approved", approver: approvers[index]! }),
          node.decide(created.id, { status: "rejected", approver: approvers[(index + 1) % 3]! }),
        ]),
      );
      const winners = outcomes.filter((outcome) => outcome.status === "fulfilled");
      assert.equal(winners.length, 1, `round ${round}: ${JSON.stringify(outcomes.map((o) => o.status))}`);
      const winner = (winners[0] as PromiseFulfilledResult<ApprovalRecord>).value;
      for (const outcome of outcomes) {
        if (outcome.status === "rejected") {
          assert.equal(
            (outcome.reason as Error).message,
            `Approval "${created.id}" is not pending (status: ${winner.status})`,
          );
        }
      }
      for (const node of coordinators) {
        assert.deepEqual((await node.get(created.id))?.decision, winner.decision);
      }
    }
  });

  test("racing consumes spread over all three nodes: exactly one wins", async () => {
    for (let round = 0; round < 5; round += 1) {
      const created = await coordinator.create(request());
      await coordinator.decide(created.id, { status: "approved", approver: bob });
      const outcomes = await Promise.allSettled(
        coordinators.flatMap((node, index) => [
          node.markConsumed(created.id, `exe_${round}_${index}_a`),
          node.markConsumed(created.id, `exe_${round}_${index}_b`),
        ]),
      );
      const winners = outcomes.filter((outcome) => outcome.status === "fulfilled");
      assert.equal(winners.length, 1, `round ${round}: ${JSON.stringify(outcomes.map((o) => o.status))}`);
      const consumer = (winners[0] as PromiseFulfilledResult<ApprovalRecord>).value.consumedByExecutionId;
      assert.ok(consumer !== undefined);
      for (const outcome of outcomes) {
        if (outcome.status === "rejected") {
          assert.equal(
            (outcome.reason as Error).message,
            `Approval "${created.id}" cannot be consumed (status: consumed, consumed by ${consumer})`,
          );
        }
      }
      for (const node of coordinators) {
        assert.equal((await node.get(created.id))?.consumedByExecutionId, consumer);
      }
    }
  });

  test("a write through one node is read through the others", async () => {
    for (const [writer, writing] of coordinators.entries()) {
      const created = await writing.create(request());
      const decided = await writing.decide(created.id, { status: "approved", approver: bob });
      for (const [reader, reading] of coordinators.entries()) {
        assert.deepEqual(await reading.get(created.id), decided, `written via node ${writer + 1}, read via ${reader + 1}`);
      }
    }
  });

  test("self-approval is refused at decide unless the coordinator allows it", async () => {
    const created = await coordinator.create(request());
    const error = await rejection(coordinator.decide(created.id, { status: "approved", approver: alice }));
    assert.match(error.message, /cannot be decided by its requester user:alice \(self-approval is refused\)/);
    assert.equal((await coordinator.get(created.id))?.status, "pending");
    const lenient = createGavelApprovalCoordinator({ client: perNode[1]!, now, allowSelfApproval: true });
    const own = await lenient.create(request());
    assert.equal((await lenient.decide(own.id, { status: "approved", approver: alice })).status, "approved");
  });

  test("an input hash that does not match the input is refused and nothing is stored", async () => {
    const sent = request();
    await rejection(coordinator.create({ ...sent, inputHash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" }));
    assert.equal(await coordinator.get(sent.id), null);
  });
});

describe("a decision names the terms it was made on (SPEC section 13)", () => {
  /** An approval and a decoy beside it, with the terms the cluster computed for each. */
  async function withDecoy() {
    const created = await coordinator.create(request());
    const decoy = await coordinator.create(request());
    const terms = (await coordinator.terms(created.id))!;
    const decoyTerms = (await coordinator.terms(decoy.id))!;
    return { created, terms, decoyHash: decoyTerms.termsHash };
  }

  test("terms reads the cluster's terms; decide on another approval's terms is refused, on its own it succeeds", async () => {
    const { created, terms, decoyHash } = await withDecoy();
    assert.match(terms.termsHash, /^[0-9a-f]{64}$/);
    assert.equal(createHash("sha256").update(terms.termsJson).digest("hex"), terms.termsHash);
    assert.equal(terms.terms.approvalId, created.id);
    assert.equal(terms.terms.inputHash, created.inputHash);
    assert.notEqual(decoyHash, terms.termsHash);
    assert.equal(await coordinator.terms(`apr_${run}_no_terms`), null);

    const error = await rejection(coordinator.decide(created.id, { status: "approved", approver: bob, termsHash: decoyHash }));
    assert.match(error.message, /cannot be decided on terms hash [0-9a-f]{64}: its terms are other ones/);
    assert.ok(error.cause instanceof GavelError && error.cause.code === "APPROVAL_TERMS_CHANGED", String(error.cause));
    assert.equal((await coordinator.get(created.id))?.status, "pending");
    const malformed = await rejection(coordinator.decide(created.id, { status: "approved", approver: bob, termsHash: "stale" }));
    assert.match(malformed.message, /termsHash must be 64 lower-case hex digits/);

    const decided = await coordinator.decide(created.id, { status: "approved", approver: bob, termsHash: terms.termsHash });
    assert.equal(decided.status, "approved");
    assert.deepEqual(decided.decision, { status: "approved", approver: bob, decidedAt: now() });
  });

  test("the client's decide sends the terms hash it is given, else the one it reads", async () => {
    const client = perNode[1]!;
    const { created, terms, decoyHash } = await withDecoy();
    const decision = { approver: toPbActor(bob), callerNowMs: BigInt(clockMs) };
    const error = await rejection(client.decide(created.id, { ...decision, approve: true, termsHash: decoyHash }));
    assert.ok(error instanceof GavelError && error.code === "APPROVAL_TERMS_CHANGED", String(error));
    assert.equal(error.grpcCode, Code.FailedPrecondition);
    const read = await client.decide(created.id, { ...decision, approve: false, comment: "read first" });
    assert.equal(read.status, ApprovalStatus.REJECTED);
    assert.equal(read.termsHash, terms.termsHash);
    const missing = await rejection(client.decide(`apr_${run}_no_terms`, { ...decision, approve: true }));
    assert.ok(missing instanceof GavelError && missing.code === "NOT_FOUND", String(missing));
  });

  test("the client's vote names the terms hash too; a decide on a governed approval is one vote", async () => {
    const capabilityId = `orders.refund.${run}.voted`;
    const voters = ["user:ts-vote-1", "user:ts-vote-2"];
    for (const voter of voters) {
      await cluster.grant(voter, ["approver"]);
    }
    await cluster.adminClient().policies.setPolicy({
      name: `ts-terms-${run}`,
      capabilityIds: [capabilityId],
      factors: [{ name: "pair", k: 2, group: voters }],
    });
    const created = await coordinator.create(request({ capabilityId }));
    const decoyHash = (await coordinator.terms((await coordinator.create(request())).id))!.termsHash;
    const [first, second] = await Promise.all(voters.map((voter) => cluster.tokenClient(voter)));
    const refused = await rejection(first!.vote(created.id, { approve: true, termsHash: decoyHash }));
    assert.ok(refused instanceof GavelError && refused.code === "APPROVAL_TERMS_CHANGED", String(refused));
    const once = await first!.vote(created.id, { approve: true });
    assert.equal(once.status, ApprovalStatus.PENDING);
    assert.equal(once.quorum?.votes.length, 1);
    const twice = await second!.decide(created.id, { approve: true, termsHash: once.termsHash });
    assert.equal(twice.status, ApprovalStatus.APPROVED);
  });
});

describe("a coordinator without an injected clock", () => {
  /** The README's app principal, with exactly the grants README.md gives it. */
  const README_APP = "service:refund-app";
  /** The README's approver, deciding as itself. */
  const README_APPROVER = "user:bob-finance";

  test("works with exactly README.md's app grants (no clock grant): create, get, list, markConsumed", async () => {
    const appGrants = readmeGrantsOf(README_APP);
    assert.ok(!appGrants.includes("clock"), `README.md grants ${README_APP} ${appGrants.join(", ")}`);
    await cluster.grant(README_APP, appGrants);
    await cluster.grant(README_APPROVER, readmeGrantsOf(README_APPROVER));
    const app = createGavelApprovalCoordinator({ client: await cluster.tokenClient(README_APP) });
    const approver = createGavelApprovalCoordinator({ client: await cluster.tokenClient(README_APPROVER) });

    // requestedAt far from the cluster's time: without a clock it is not
    // sent; the cluster stamps its own and keeps the request's window.
    const requestedAt = new Date(Date.now() - 3 * 24 * 3600 * 1000);
    const sent = request({
      capabilityId: `orders.refund.${run}.readme`,
      requestedAt,
      expiresAt: new Date(requestedAt.getTime() + FIFTEEN_MINUTES),
    });
    const before = Date.now();
    const created = await app.create(sent);
    assert.equal(created.status, "pending");
    assert.ok(Math.abs(created.requestedAt.getTime() - before) < 60_000, `stamped ${created.requestedAt.toISOString()}`);
    assert.equal(created.expiresAt.getTime() - created.requestedAt.getTime(), FIFTEEN_MINUTES);
    assert.deepEqual(await app.get(sent.id), created);
    assert.deepEqual(
      (await app.list({ capabilityId: sent.capabilityId, status: "pending" })).map((record) => record.id),
      [sent.id],
    );

    const decided = await approver.decide(sent.id, {
      status: "approved",
      approver: { id: "bob-finance", kind: "user" },
      comment: "customer verified",
    });
    assert.equal(decided.status, "approved");
    const consumed = await app.markConsumed(sent.id, `exe_${run}_readme`);
    assert.equal(consumed.status, "consumed");
    assert.equal(consumed.consumedByExecutionId, `exe_${run}_readme`);
    // A retry by the same execution gets the record back, as with a clock.
    assert.equal((await app.markConsumed(sent.id, `exe_${run}_readme`)).status, "consumed");
  });

  test("an injected clock needs the clock grant: refused for the README's app principal", async () => {
    await cluster.grant(README_APP, readmeGrantsOf(README_APP));
    const clocked = createGavelApprovalCoordinator({ client: await cluster.tokenClient(README_APP), now });
    const sent = request();
    const error = await rejection(clocked.create(sent));
    assert.ok(error instanceof GavelError && error.code === "PERMISSION_DENIED", String(error));
    assert.match(error.message, /needs the clock grant/);
    assert.equal(await clocked.get(sent.id), null);
  });

  test("a request whose expiresAt is not after requestedAt is refused before anything is sent", async () => {
    const app = createGavelApprovalCoordinator({ client: perNode[0]! });
    const sent = request({ requestedAt: new Date(clockMs), expiresAt: new Date(clockMs) });
    const error = await rejection(app.create(sent));
    assert.match(error.message, /expiresAt must be after requestedAt/);
    assert.equal(await coordinator.get(sent.id), null);
  });
});
