// Records as plain JSON values (decision 0105). protobuf-es decodes every
// 64-bit integer field (ids, Unix-ms times, durations, cursors) as a
// bigint, which JSON.stringify refuses and `+` will not mix with a number.
// The client returns each record with those fields as numbers instead, as
// Temporal's TypeScript SDK and a JSON API would, so `JSON.stringify(record)`
// works and the record can go straight into an oRPC or HTTP answer:
//
// - responses: every bigint of magnitude at most 2^53 - 1 becomes a number,
//   in place (the decoded message belongs to the call). A larger one stays a
//   bigint, so no digit is ever lost; the cluster produces none (ids count
//   from 1, times stop at year 9999, durations and quotas have bounds in
//   docs/limits.md), and the types say `number`.
// - requests: a 64-bit field takes a number or a bigint. A number that is
//   not a safe integer is refused before sending: it has already been
//   rounded, or it is not an integer; pass a bigint for a larger value.
import {
  type DescField,
  type DescMessage,
  type DescMethodServerStreaming,
  type DescMethodUnary,
  type DescService,
  type MessageInitShape,
  type MessageShape,
  ScalarType,
} from "@bufbuild/protobuf";
import type { CallOptions } from "@connectrpc/connect";

/** `T` as the client returns it: every 64-bit integer a `number`. */
export type Plain<T> = T extends bigint
  ? number
  : T extends Uint8Array
    ? T
    : T extends object
      ? { [K in keyof T]: Plain<T[K]> }
      : T;

/** A request shape `T` whose 64-bit integers may be given as a `number` or a `bigint`. */
export type PlainInit<T> = T extends bigint
  ? bigint | number
  : T extends Uint8Array
    ? T
    : T extends object
      ? { [K in keyof T]: PlainInit<T[K]> }
      : T;

/** The client of one gavel.v1 service: Connect's, with plain records in and out. */
export type GavelServiceClient<S extends DescService> = {
  [P in keyof S["method"]]: S["method"][P] extends DescMethodUnary<infer I, infer O>
    ? (request: PlainInit<MessageInitShape<I>>, options?: CallOptions) => Promise<Plain<MessageShape<O>>>
    : S["method"][P] extends DescMethodServerStreaming<infer I, infer O>
      ? (request: PlainInit<MessageInitShape<I>>, options?: CallOptions) => AsyncIterable<Plain<MessageShape<O>>>
      : never;
};

const SAFE_MAX = BigInt(Number.MAX_SAFE_INTEGER);

/** Turns every safe bigint under `value` into a number, in place; returns `value`. */
export function toPlain<T>(value: T): Plain<T> {
  plainInPlace(value);
  return value as Plain<T>;
}

function plainInPlace(value: unknown): void {
  if (value === null || typeof value !== "object" || value instanceof Uint8Array) {
    return;
  }
  const record = value as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    const field = record[key];
    if (typeof field === "bigint") {
      if (field <= SAFE_MAX && field >= -SAFE_MAX) {
        record[key] = Number(field);
      }
    } else if (field !== null && typeof field === "object") {
      plainInPlace(field);
    }
  }
}

const INTEGER_64: ReadonlySet<ScalarType> = new Set([
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

/** Whether a message of `desc` can hold a 64-bit integer anywhere, memoized per descriptor. */
const holdsInteger64 = new WeakMap<DescMessage, boolean>();

function mayHoldInteger64(desc: DescMessage, visiting = new Set<DescMessage>()): boolean {
  const known = holdsInteger64.get(desc);
  if (known !== undefined) {
    return known;
  }
  if (visiting.has(desc)) {
    return false; // a cycle: the answer comes from the other fields
  }
  visiting.add(desc);
  const holds = desc.fields.some((field) => {
    switch (field.fieldKind) {
      case "scalar":
        return INTEGER_64.has(field.scalar);
      case "list":
        return field.listKind === "scalar"
          ? INTEGER_64.has(field.scalar)
          : field.listKind === "message" && mayHoldInteger64(field.message, visiting);
      case "map":
        return field.mapKind === "scalar"
          ? INTEGER_64.has(field.scalar)
          : field.mapKind === "message" && mayHoldInteger64(field.message, visiting);
      case "message":
        return mayHoldInteger64(field.message, visiting);
      default:
        return false;
    }
  });
  visiting.delete(desc);
  if (visiting.size === 0) {
    holdsInteger64.set(desc, holds);
  }
  return holds;
}

/**
 * Why `message` (a message of `desc`) cannot be sent as the caller meant
 * it: a number in a 64-bit field that is not a safe integer, named by its
 * path. Undefined when there is none.
 */
export function integerProblem(desc: DescMessage, message: Record<string, unknown>, path = ""): string | undefined {
  if (!mayHoldInteger64(desc)) {
    return undefined;
  }
  for (const member of desc.members) {
    let problem: string | undefined;
    if (member.kind === "oneof") {
      const selected = message[member.localName] as { case?: string; value?: unknown } | undefined;
      const field = member.fields.find((candidate) => candidate.localName === selected?.case);
      problem = field === undefined ? undefined : fieldProblem(field, selected!.value, `${path}${field.localName}`);
    } else {
      problem = fieldProblem(member, message[member.localName], `${path}${member.localName}`);
    }
    if (problem !== undefined) {
      return problem;
    }
  }
  return undefined;
}

function fieldProblem(field: DescField, value: unknown, path: string): string | undefined {
  if (value === undefined || value === null) {
    return undefined;
  }
  switch (field.fieldKind) {
    case "scalar":
      return INTEGER_64.has(field.scalar) ? numberProblem(value, path) : undefined;
    case "message":
      return integerProblem(field.message, value as Record<string, unknown>, `${path}.`);
    case "list":
      for (const [index, item] of (value as unknown[]).entries()) {
        const problem =
          field.listKind === "message"
            ? integerProblem(field.message, item as Record<string, unknown>, `${path}[${index}].`)
            : field.listKind === "scalar" && INTEGER_64.has(field.scalar)
              ? numberProblem(item, `${path}[${index}]`)
              : undefined;
        if (problem !== undefined) {
          return problem;
        }
      }
      return undefined;
    case "map":
      for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
        const at = `${path}[${JSON.stringify(key)}]`;
        const problem =
          field.mapKind === "message"
            ? integerProblem(field.message, item as Record<string, unknown>, `${at}.`)
            : field.mapKind === "scalar" && INTEGER_64.has(field.scalar)
              ? numberProblem(item, at)
              : undefined;
        if (problem !== undefined) {
          return problem;
        }
      }
      return undefined;
    default:
      return undefined;
  }
}

function numberProblem(value: unknown, path: string): string | undefined {
  return typeof value === "number" && !Number.isSafeInteger(value)
    ? `${path} is ${value}, not an integer within ±9007199254740991 (2^53 - 1); give a larger value as a bigint`
    : undefined;
}
