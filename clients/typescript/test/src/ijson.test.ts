// I-JSON before sending (docs/limits.md): the client refuses JSON that Gavel
// would refuse (numbers a double cannot hold exactly, bigints, lone
// surrogates) without sending it, naming the JSON Pointer; the edge of the
// safe integer range reaches a worker as written, against a real secured
// three-node cluster, and a worker output beyond it fails OUTPUT_INVALID.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import {
  type GavelClient,
  GavelError,
  Risk,
  SideEffect,
  UnserializableInputError,
  canonicalJson,
  createWorker,
  stringifyIJson,
} from "@gavel/client";
import { createGavelApprovalCoordinator, createGavelAuditSink } from "@gavel/orpc-agent";
import { TestCluster } from "./cluster.js";

const run = randomUUID().slice(0, 8);
let cluster: TestCluster;
let admin: GavelClient;
let workerClient: GavelClient;

before(async () => {
  cluster = await TestCluster.start();
  admin = cluster.adminClient();
  await cluster.grant("worker:ijson", ["worker"]);
  workerClient = await cluster.certClient("worker:ijson");
});

after(async () => {
  await cluster?.stop();
});

/** Awaits `call`, which must fail with a GavelError refused before anything was sent. */
async function refusedBeforeSending(client: GavelClient, call: () => Promise<unknown>): Promise<GavelError> {
  const attempts = client.attempts();
  const error = await call().then(
    () => assert.fail("the call was accepted"),
    (failure: unknown) => failure,
  );
  assert.ok(error instanceof GavelError, `expected a GavelError, got ${String(error)}`);
  assert.equal(client.attempts(), attempts, `nothing was sent: ${error.message}`);
  return error;
}

describe("I-JSON", () => {
  test("the client refuses JSON text that is not I-JSON before sending, naming the JSON Pointer", async () => {
    const texts: [string, string][] = [
      ['{"order":{"lines":[{},{},{},{"qty":9007199254740993}]}}', "/order/lines/3/qty"],
      ['{"order_id":1234567890123456789}', "/order_id"],
      ['{"a/b":{"c~d":-9007199254740992}}', "/a~1b/c~0d"],
      ['{"amount":1e400}', "/amount"],
      ['{"s":["\\ud800"]}', "/s/0"],
    ];
    for (const [text, pointer] of texts) {
      const calls: [string, string, () => Promise<unknown>][] = [
        ["submit", "INPUT_INVALID", () => admin.executions.submit({ capabilityId: "x", inputJson: text, surface: "test" })],
        ["resume", "INPUT_INVALID", () => admin.executions.resume({ approvalId: "apr-x", inputJson: text })],
        [
          "createApproval",
          "INVALID_ARGUMENT",
          () =>
            admin.approvals.createApproval({
              id: `apr_${run}`,
              capabilityId: "x",
              surface: "test",
              inputJson: text,
              risk: Risk.LOW,
              sideEffect: SideEffect.READ,
            }),
        ],
        ["recordEvent", "INVALID_ARGUMENT", () => admin.audit.recordEvent({ type: "policy.checked", payloadJson: text })],
        [
          "report",
          "INVALID_ARGUMENT",
          () =>
            workerClient.workers.report({
              leaseId: 1,
              workerId: "worker:ijson",
              outcome: { case: "completed", value: { outputJson: text } },
            }),
        ],
      ];
      for (const [what, code, call] of calls) {
        const client = what === "report" ? workerClient : admin;
        const error = await refusedBeforeSending(client, call);
        assert.equal(error.code, code, `${what} ${text}: ${error.message}`);
        assert.match(error.message, /is not I-JSON \(RFC 7493\)/, `${what} ${text}`);
        assert.ok(error.message.includes(` at ${pointer}`), `${what} ${text}: ${error.message}`);
      }
    }
  });

  test("values: unsafe integers, non-finite numbers, bigints and lone surrogates are refused with their pointer", () => {
    const output = { name: "output", code: "INVALID_ARGUMENT" } as const;
    const refused: [unknown, string][] = [
      [{ total: 2 ** 53 }, "/total"],
      [{ lines: [{ qty: -(2 ** 53) - 2 }] }, "/lines/0/qty"],
      [{ n: 1e20 }, "/n"],
      [{ n: Number.NaN }, "/n"],
      [[Infinity], "/0"],
      [{ id: 12n }, "/id"],
      [{ "~/": "\udc00" }, "/~0~1"],
      [{ nested: { "\ud800": 1 } }, "/nested"],
    ];
    for (const [value, pointer] of refused) {
      assert.throws(
        () => stringifyIJson(value, output),
        (error: unknown) =>
          error instanceof GavelError && error.code === "INVALID_ARGUMENT" && error.message.includes(` at ${pointer}`),
        pointer,
      );
      assert.throws(
        () => canonicalJson(value),
        (error: unknown) => error instanceof UnserializableInputError && error.message.includes(` at ${pointer}`),
        pointer,
      );
    }
    const edge = { id: 9007199254740991, low: -9007199254740991, price: 0.1, big: 1.5e300, zero: -0 };
    assert.equal(stringifyIJson(edge, output), '{"id":9007199254740991,"low":-9007199254740991,"price":0.1,"big":1.5e+300,"zero":0}');
    assert.equal(canonicalJson(edge), '{"big":1.5e+300,"id":9007199254740991,"low":-9007199254740991,"price":0.1,"zero":0}');
  });

  test("orpc-agent's coordinator and audit sink refuse values that are not I-JSON before sending", async () => {
    const coordinator = createGavelApprovalCoordinator({ client: admin });
    const sink = createGavelAuditSink({ client: admin });
    const actor = { id: "alice", kind: "user" as const };
    const values: [unknown, string][] = [
      [{ order: { qty: 2 ** 53 } }, "/order/qty"],
      [{ lines: [Number.NaN] }, "/lines/0"],
    ];
    for (const [input, pointer] of values) {
      const attempts = admin.attempts();
      const created = coordinator.create({
        id: `apr_${run}_${pointer.replaceAll("/", "_")}`,
        capabilityId: "x",
        surface: "test",
        actor,
        input,
        inputHash: "0".repeat(64),
        reasons: [],
        types: [],
        risk: "low",
        sideEffect: "read",
        requestedAt: new Date(),
        expiresAt: new Date(Date.now() + 60_000),
      });
      await assert.rejects(created, (error: Error) => error.message.includes(`not I-JSON (RFC 7493)`) && error.message.includes(` at ${pointer}`));
      await assert.rejects(
        sink.record({ type: "checked", actor, executionId: "exe-x", detail: input } as never),
        (error: Error) => error.message.includes(`payload is not I-JSON (RFC 7493)`) && error.message.includes(` at /detail${pointer}`),
      );
      assert.equal(admin.attempts(), attempts, "nothing was sent");
    }
  });

  test("the edge of the safe range reaches a worker as written; an output beyond it fails OUTPUT_INVALID", async () => {
    const capabilityId = `ijson.${run}`;
    await admin.capabilities.registerCapability({
      spec: { id: capabilityId, queue: capabilityId, sideEffect: SideEffect.READ, risk: Risk.LOW, timeoutMs: 30_000 },
    });
    const seen: unknown[] = [];
    const worker = createWorker({
      client: workerClient,
      queues: [capabilityId],
      pollWaitMs: 1000,
      handlers: {
        [capabilityId]: async ({ input }) => {
          seen.push(input);
          const { id, overflow } = input as { id: number; overflow: boolean };
          return { total: overflow ? id + 1 : id };
        },
      },
    });
    try {
      const final = async (overflow: boolean) => {
        const executionId = `exe_${randomUUID()}`;
        const inputJson = `{"id":9007199254740991,"overflow":${overflow}}`;
        await admin.executions.submit({ executionId, capabilityId, inputJson, surface: "test" });
        for (;;) {
          const reply = await admin.executions.waitExecution({ executionId, timeoutMs: 5000 });
          if (!reply.timedOut) return reply.execution!;
        }
      };
      const exact = await final(false);
      assert.equal(exact.result?.outcome.case === "completed" ? exact.result.outcome.value.outputJson : "", '{"total":9007199254740991}');
      assert.deepEqual(seen[0], { id: 9007199254740991, overflow: false });
      const beyond = await final(true);
      assert.equal(beyond.result?.outcome.case, "failed");
      const failed = beyond.result?.outcome.case === "failed" ? beyond.result.outcome.value : undefined;
      assert.equal(failed?.code, "OUTPUT_INVALID");
      assert.ok(failed?.message.includes("output is not I-JSON (RFC 7493): number 9007199254740992 at /total"), failed?.message);
    } finally {
      await worker.shutdown();
    }
  });
});
