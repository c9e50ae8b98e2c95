// @gavel/client against a real secured three-node cluster: leader following
// via the gavel-leader header, domain codes on errors, request ids that
// deduplicate, retries through a leader SIGKILL, TLS and configuration
// failures that fail fast, and an unreachable cluster described by quorum;
// records with 64-bit integers as numbers (JSON.stringify works), inputs
// that take a number or a bigint, and `readFrom: "any"` spreading
// WatchEvents over the nodes.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { ActorKind, Code, type GavelClient, GavelError, Risk, SideEffect, createGavelClient, toPlain } from "@gavel/client";
import { TestCluster, eventually } from "./cluster.js";

const run = randomUUID().slice(0, 8);
let cluster: TestCluster;

async function failure(promise: Promise<unknown>): Promise<GavelError> {
  const outcome = await promise.then(
    () => undefined,
    (error: unknown) => error,
  );
  assert.ok(outcome instanceof GavelError, `expected a GavelError, got ${String(outcome)}`);
  return outcome;
}

const approval = (id: string) => ({
  id,
  capabilityId: "client.test",
  surface: "test",
  actor: { id: "agent", kind: ActorKind.AUTOMATION },
  inputJson: '{"a":1}',
  risk: Risk.LOW,
  sideEffect: SideEffect.READ,
});

/** WatchEvents calls a node has counted (its Prometheus metrics, gRPC port + 100; `gavel dev` serves them on plain HTTP). */
async function watchCalls(endpoint: string): Promise<number> {
  const colon = endpoint.lastIndexOf(":");
  const metricsUrl = `http://${endpoint.slice(0, colon)}:${Number(endpoint.slice(colon + 1)) + 100}/metrics`;
  const text = await (await fetch(metricsUrl)).text();
  let calls = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith('gavel_rpc_calls_total{method="AuditService/WatchEvents"')) {
      calls += Number(line.slice(line.lastIndexOf(" ") + 1));
    }
  }
  return calls;
}

/** Opens one WatchEvents stream from the beginning, reads its first event and closes the stream. */
async function firstEvent(client: GavelClient): Promise<{ cursor: number; type: string }> {
  for await (const event of client.audit.watchEvents({ afterCursor: 0 })) {
    return { cursor: event.cursor, type: event.type };
  }
  throw new Error("the stream ended without an event");
}

before(async () => {
  cluster = await TestCluster.start();
});

after(async () => {
  await cluster?.stop();
});

describe("@gavel/client", () => {
  test("follows the leader a follower names in the gavel-leader header", async () => {
    const leader = await cluster.leader();
    const follower = cluster.endpoints.find((endpoint) => endpoint !== leader)!;
    const client = cluster.adminClient({ endpoints: [follower, ...cluster.endpoints.filter((e) => e !== follower)] });
    assert.equal(client.preferredEndpoint(), follower);
    await client.approvals.createApproval(approval(`follow_${run}`));
    assert.equal(client.preferredEndpoint(), leader, "the next call goes to the leader directly");
    const pinned = cluster.adminClient({ endpoints: [follower, leader], followLeader: false });
    await pinned.approvals.createApproval(approval(`pinned_${run}`));
    assert.equal(pinned.preferredEndpoint(), follower);
  });

  test("errors carry the stable domain code; reads of unknown records are NOT_FOUND", async () => {
    const client = cluster.adminClient();
    const unknown = await failure(client.approvals.getApproval({ id: `nope_${run}` }));
    assert.equal(unknown.code, "NOT_FOUND");
    assert.ok(unknown.message.endsWith(`approval nope_${run} was not found`), unknown.message);
    const notFound = await failure(client.approvals.consumeApproval({ id: `nope_${run}`, executionId: "exe" }));
    assert.equal(notFound.code, "NOT_FOUND");
    assert.equal(notFound.grpcCode, Code.NotFound);
    const invalid = await failure(client.approvals.createApproval({ ...approval(""), inputJson: "{not json" }));
    assert.equal(invalid.grpcCode, Code.InvalidArgument);
    assert.ok(invalid.problems.length >= 1, invalid.message);
    const stranger = await cluster.tokenClient(`user:stranger-${run}`);
    const denied = await failure(stranger.approvals.createApproval(approval(`denied_${run}`)));
    assert.equal(denied.code, "PERMISSION_DENIED");
    assert.ok(denied.accessRefused);
    assert.match(denied.message, /needs the submitter grant/);
  });

  test("records come back with numbers, so JSON.stringify works; 64-bit inputs take a number or a bigint", async () => {
    const client = cluster.adminClient();
    const id = `plain_${run}`;
    const created = (await client.approvals.createApproval({ ...approval(id), expiresInMs: 60_000 })).approval!;
    assert.equal(typeof created.requestedAtMs, "number");
    assert.equal(created.expiresAtMs - created.requestedAtMs, 60_000);
    assert.deepEqual(JSON.parse(JSON.stringify(created)).expiresAtMs, created.expiresAtMs);
    const byNumber = await client.approvals.waitApproval({ id, waitMs: 10 });
    const byBigint = await client.approvals.waitApproval({ id, waitMs: 10n });
    assert.equal(byNumber.timedOut, true);
    assert.deepEqual(byBigint, byNumber);
    const status = await client.cluster.status({ withoutStateHash: true });
    assert.equal(typeof status.term, "number");
    assert.doesNotThrow(() => JSON.stringify(status));
  });

  test("a number a double cannot hold exactly in a 64-bit field is refused before anything is sent", async () => {
    const client = cluster.adminClient();
    const unsafe = await failure(client.approvals.waitApproval({ id: `plain_${run}`, waitMs: 2 ** 53 }));
    assert.equal(unsafe.code, "INVALID_ARGUMENT");
    assert.equal(unsafe.grpcCode, Code.InvalidArgument);
    assert.match(unsafe.message, /waitMs is 9007199254740992, not an integer within ±9007199254740991/);
    const fraction = await failure(
      client.capabilities.registerCapability({
        spec: { id: `fraction_${run}`, queue: "q", sideEffect: SideEffect.READ, risk: Risk.LOW, timeoutMs: 1.5 },
      }),
    );
    assert.match(fraction.message, /^INVALID_ARGUMENT: spec\.timeoutMs is 1\.5/);
    assert.equal(client.attempts(), 0, "neither call was sent");
  });

  test("a bigint beyond 2^53 - 1 in a record stays a bigint: no digit is lost", () => {
    const record = toPlain({ small: 42n, negative: -7n, large: 2n ** 60n, list: [1n], nested: { at: 5n }, bytes: new Uint8Array([1]) });
    assert.deepEqual(record, { small: 42, negative: -7, large: 2n ** 60n, list: [1], nested: { at: 5 }, bytes: new Uint8Array([1]) });
  });

  test('readFrom "any" spreads WatchEvents over the nodes, which stream the same events; "leader" keeps them on the leader', async () => {
    const leader = await cluster.leader();
    const atLeader = cluster.adminClient({ endpoints: [leader, ...cluster.endpoints.filter((e) => e !== leader)] });
    await atLeader.approvals.createApproval(approval(`watch_${run}`));
    const spread = cluster.adminClient({ readFrom: "any" });
    const counted = () => Promise.all(cluster.endpoints.map(watchCalls));
    const before = await counted();
    const firsts = [];
    for (let stream = 0; stream < cluster.endpoints.length; stream += 1) {
      firsts.push(await firstEvent(spread));
    }
    assert.deepEqual(firsts, [firsts[0], firsts[0], firsts[0]], "every replica streams the same first event");
    await eventually("each node counting one WatchEvents call", async () => {
      const now = await counted();
      return now.every((calls, index) => calls === before[index]! + 1) ? true : undefined;
    });
    const onLeader = await counted();
    for (let stream = 0; stream < cluster.endpoints.length; stream += 1) {
      await firstEvent(atLeader);
    }
    await eventually("the leader counting three more WatchEvents calls", async () => {
      const now = await counted();
      const grown = now.map((calls, index) => calls - onLeader[index]!);
      return grown[cluster.endpoints.indexOf(leader)] === 3 ? grown : undefined;
    }).then((grown) => assert.deepEqual(grown.filter((calls) => calls > 0), [3], "only the leader served them"));
    assert.throws(() => cluster.adminClient({ readFrom: "nearest" as never }), /readFrom is "leader" or "any"/);
  });

  test("a request id makes a retried write return the first answer", async () => {
    const client = cluster.adminClient();
    const requestId = `req_${run}`;
    const first = await client.approvals.createApproval({ ...approval(`dedup_${run}`), requestId });
    const again = await client.approvals.createApproval({ ...approval(`dedup_${run}`), requestId });
    assert.deepEqual(again.approval, first.approval);
    const fresh = await failure(client.approvals.createApproval(approval(`dedup_${run}`)));
    assert.equal(fresh.code, "ALREADY_EXISTS");
  });

  test("a bad CA fails at once as UNAUTHENTICATED, not after the retry budget", async () => {
    const other = await TestCluster.start();
    try {
      const client = createGavelClient({ endpoints: cluster.endpoints, tls: { ca: other.ca }, retryBudgetMs: 20_000 });
      const started = Date.now();
      const error = await failure(client.cluster.status({}));
      assert.equal(error.code, "UNAUTHENTICATED");
      assert.match(error.message, /TLS/);
      assert.ok(Date.now() - started < 5000, `failed after ${Date.now() - started} ms`);
      client.close();
    } finally {
      await other.stop();
    }
  });

  test("bad configuration is refused at construction", () => {
    for (const endpoints of [[], ["garbage"], ["127.0.0.1"], ["host:0"], ["ftp://h:1"]]) {
      assert.throws(() => createGavelClient({ endpoints }), { code: "CONFIG" });
    }
    assert.throws(() => createGavelClient({ endpoints: ["http://127.0.0.1:1"], tls: { ca: cluster.ca } }), {
      code: "CONFIG",
    });
    assert.throws(() => createGavelClient({ endpoints: ["127.0.0.1:1"], token: "a\nb" }), { code: "CONFIG" });
  });

  test("calls keep working through a leader SIGKILL, retried with the same request id", async () => {
    await cluster.takeOver();
    const client = cluster.adminClient({ retryBudgetMs: 20_000 });
    const leader = await cluster.leader();
    const leaderIndex = cluster.endpoints.indexOf(leader);
    assert.ok(leaderIndex >= 0);
    await client.approvals.createApproval(approval(`before_${run}`));
    process.kill(cluster.nodePids[leaderIndex]!, "SIGKILL");
    const started = Date.now();
    const created = await client.approvals.createApproval(approval(`after_${run}`));
    assert.equal(created.approval?.id, `after_${run}`);
    assert.notEqual(client.preferredEndpoint(), leader, "it moved off the dead node");
    const survivors = cluster.endpoints.filter((_, index) => index !== leaderIndex);
    for (const endpoint of survivors) {
      const reader = cluster.adminClient({ endpoints: [endpoint] });
      await eventually(`the write on ${endpoint}`, async () => {
        try {
          return (await reader.approvals.getApproval({ id: `after_${run}` })).approval ? true : undefined;
        } catch (error) {
          if (error instanceof GavelError && error.code === "NOT_FOUND") {
            return undefined;
          }
          throw error;
        }
      });
    }
    console.log(`write after the leader SIGKILL took ${Date.now() - started} ms`);
    const reach = await client.reachability();
    assert.equal(reach.describe(), "2 of 3 nodes reachable");
  });

  test("an unreachable cluster is described, after the retry budget", async () => {
    const dead = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"];
    const client = createGavelClient({ endpoints: dead, tls: { ca: cluster.ca }, retryBudgetMs: 1000, callTimeoutMs: 300 });
    const started = Date.now();
    const error = await failure(client.cluster.status({}));
    assert.equal(error.code, "UNAVAILABLE");
    assert.match(error.message, /no node reachable \(0 of 3 nodes\)/);
    assert.ok(Date.now() - started < 5000);
    client.close();
  });
});
