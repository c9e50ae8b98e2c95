// The package's canonical input hash equals Gavel's (the server computes
// inputHash when CreateApproval leaves it out) for 10,000 generated values,
// astral characters and tricky numbers included, and equals the RFC 8785
// reference implementation (`canonicalize`) on every one. A value that is not
// I-JSON (an integer beyond 2^53 - 1, a lone surrogate) has no hash on either
// side: both refuse it.
import assert from "node:assert/strict";
import { createHash, randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import canonicalize from "canonicalize";
import {
  ActorKind,
  type GavelClient,
  GavelError,
  Risk,
  SideEffect,
  UnserializableInputError,
  canonicalJson,
  inputHash,
} from "@gavel/client";
import { TestCluster } from "./cluster.js";

const VALUES = 10_000;
const CONCURRENCY = 64;

/** A small seeded PRNG (mulberry32), so a failure names a reproducible seed. */
function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TRICKY_NUMBERS = [
  0, -0, 1, -1, 0.1, 0.2, 0.1 + 0.2, 1e21, 1e20, 1e-7, 1e-6, 123456789012345680000, 5e-324, -5e-324,
  1.7976931348623157e308, 2 ** 53, 2 ** 53 + 2, -(2 ** 53), 9007199254740991, 4.35, 0.000001, 1e300, 333333333.33333329,
  1.5e-9, 100, 1e2, 12.5e-3, 2 ** -1074, 2 ** 31, 2 ** 32 + 0.5,
];
const TRICKY_STRINGS = [
  "",
  "plain",
  "\u{1F600}",
  "\u{10000}",
  "\u{10FFFF}",
  "\uFFFF",
  "\uE000",
  "é",
  "e\u0301",
  "\u0000\u0001\u001f",
  "\u007f",
  '"quoted" \\ back',
  "\b\f\n\r\t",
  "\u2028\u2029",
  "</script>",
  "日本語",
  "\u{1D11E} clef",
];

function generate(random: () => number, depth: number): unknown {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const string = (): string => {
    if (random() < 0.5) {
      return pick(TRICKY_STRINGS);
    }
    let text = "";
    const length = Math.floor(random() * 8);
    for (let index = 0; index < length; index += 1) {
      const range = random();
      const codePoint =
        range < 0.5
          ? 0x20 + Math.floor(random() * 0x5f)
          : range < 0.7
            ? Math.floor(random() * 0x20)
            : range < 0.85
              ? 0x80 + Math.floor(random() * 0xd000)
              : 0x10000 + Math.floor(random() * 0xfffff);
      text += String.fromCodePoint(codePoint >= 0xd800 && codePoint < 0xe000 ? codePoint + 0x800 : codePoint);
    }
    return text;
  };
  const number = (): number => {
    const kind = random();
    if (kind < 0.4) return pick(TRICKY_NUMBERS) * (random() < 0.5 ? 1 : -1);
    if (kind < 0.6) return Math.floor(random() * 2 ** 53) * (random() < 0.5 ? 1 : -1);
    if (kind < 0.8) return (random() - 0.5) * 10 ** Math.floor(random() * 40 - 20);
    const buffer = new DataView(new ArrayBuffer(8));
    buffer.setUint32(0, Math.floor(random() * 2 ** 32));
    buffer.setUint32(4, Math.floor(random() * 2 ** 32));
    const value = buffer.getFloat64(0);
    return Number.isFinite(value) ? value : 0.5;
  };
  const kind = depth <= 0 ? random() * 0.6 : random();
  if (kind < 0.1) return pick([true, false, null]);
  if (kind < 0.3) return number();
  if (kind < 0.6) return random() < 0.02 ? `lone ${String.fromCharCode(0xd800 + Math.floor(random() * 0x800))}` : string();
  if (kind < 0.8) {
    return Array.from({ length: Math.floor(random() * 5) }, () => generate(random, depth - 1));
  }
  const object: Record<string, unknown> = {};
  const members = Math.floor(random() * 6);
  for (let index = 0; index < members; index += 1) {
    object[string()] = generate(random, depth - 1);
  }
  return object;
}

let cluster: TestCluster;
let client: GavelClient;
const run = randomUUID().slice(0, 8);
let serial = 0;

/** Gavel's hash of `value`, or its refusal's domain code when it is not I-JSON. */
async function serverHashOrRefusal(value: unknown): Promise<string> {
  return serverHash(value).catch((error: unknown) => {
    assert.ok(error instanceof GavelError, String(error));
    assert.match(error.message, /not I-JSON/);
    return `refused ${error.code}`;
  });
}

/** Our hash of `value`, or the refusal Gavel gives an approval input that is not I-JSON. */
function ourHashOrRefusal(value: unknown): string {
  try {
    return inputHash(value);
  } catch (error) {
    assert.ok(error instanceof UnserializableInputError, String(error));
    assert.match(error.message, /not I-JSON/);
    return "refused INVALID_ARGUMENT";
  }
}

/** Gavel's hash of `value`: the inputHash the server computes on CreateApproval. */
async function serverHash(value: unknown): Promise<string> {
  serial += 1;
  const response = await client.approvals.createApproval({
    id: `hash_${run}_${serial}`,
    capabilityId: "hash.check",
    surface: "test",
    actor: { id: "hasher", kind: ActorKind.USER },
    inputJson: JSON.stringify(value),
    risk: Risk.LOW,
    sideEffect: SideEffect.READ,
  });
  return response.approval!.inputHash;
}

before(async () => {
  cluster = await TestCluster.start();
  client = cluster.adminClient();
});

after(async () => {
  await cluster?.stop();
});

describe("canonical input hash", () => {
  test("shared vectors", () => {
    const vectors: [unknown, string][] = [
      [{ b: 1, a: [true, null, "x"] }, '{"a":[true,null,"x"],"b":1}'],
      [{ "\u{10000}": 1, "\uFFFF": 2, "\u00e9": 3, a: 4 }, '{"a":4,"é":3,"\u{10000}":1,"\uFFFF":2}'],
      [[1e21, 1e-7, -0, 5e-324, 0.1 + 0.2], "[1e+21,1e-7,0,5e-324,0.30000000000000004]"],
      [{ keep: 1, drop: undefined, date: new Date(0) }, '{"date":"1970-01-01T00:00:00.000Z","keep":1}'],
    ];
    for (const [value, expected] of vectors) {
      assert.equal(canonicalJson(value), expected);
      assert.equal(canonicalize(value), expected);
    }
    // A lone surrogate: not I-JSON, refused by Gavel, by canonicalJson and
    // by RFC 8785's reference.
    assert.throws(() => canonicalJson(["\ud800", "\udfff\ud800"]), { code: "APPROVAL_UNSERIALIZABLE_INPUT" });
    assert.throws(() => canonicalize("\ud800"));
    assert.equal(inputHash(""), createHash("sha256").update('""').digest("hex"));
    for (const bad of [Number.NaN, Infinity, 1n, () => 1, Symbol("s"), new Map()]) {
      assert.throws(() => canonicalJson({ bad }), { code: "APPROVAL_UNSERIALIZABLE_INPUT" });
    }
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    assert.throws(() => canonicalJson(cycle), { code: "APPROVAL_UNSERIALIZABLE_INPUT" });
  });

  test(`equals Gavel's hash for ${VALUES} generated values`, async () => {
    const seed = Number(process.env.GAVEL_HASH_SEED ?? Date.now() % 1_000_000);
    const random = prng(seed);
    const values = [
      ...TRICKY_NUMBERS.map((value) => ({ value })),
      ...TRICKY_STRINGS.map((value) => ({ [value]: value })),
    ];
    while (values.length < VALUES) {
      values.push(generate(random, 4) as never);
    }
    let next = 0;
    const mismatches: string[] = [];
    const started = Date.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (next < values.length) {
          const value = values[next++];
          const ours = ourHashOrRefusal(value);
          // The RFC 8785 reference refuses lone surrogates; everything else it writes as we do.
          const hasLoneSurrogate = /\\ud[89a-f][0-9a-f]{2}/i.test(JSON.stringify(value));
          if (!hasLoneSurrogate && !ours.startsWith("refused")) {
            assert.equal(canonicalJson(value), canonicalize(value), `canonical JSON of ${JSON.stringify(value)}`);
          }
          const theirs = await serverHashOrRefusal(value);
          if (ours !== theirs && mismatches.length < 10) {
            mismatches.push(`${JSON.stringify(value)}: ours ${ours}, Gavel's ${theirs}`);
          }
        }
      }),
    );
    console.log(`hashed ${values.length} values against the cluster in ${Date.now() - started} ms (seed ${seed})`);
    assert.deepEqual(mismatches, [], `seed ${seed}`);
  });

  test("lone surrogates and integers beyond 2^53 - 1 have no hash: Gavel and canonicalJson refuse them", async () => {
    for (const value of [{ text: "\ud800" }, { "\udc00key": ["a\udfffb", "\ud83d"] }, "\ud800\ud800", { n: 2 ** 53 }, [1e20]]) {
      assert.equal(await serverHashOrRefusal(value), "refused INVALID_ARGUMENT", JSON.stringify(value));
      assert.equal(ourHashOrRefusal(value), "refused INVALID_ARGUMENT", JSON.stringify(value));
    }
  });
});
