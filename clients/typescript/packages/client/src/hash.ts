// The input hash: SHA-256 (lower-case hex) of the canonical JSON of a value,
// equal to Gavel's RFC 8785 hash (gavel-core canonical_json) and to
// orpc-agent's: keys sorted by UTF-16 code units, numbers and strings written
// as JSON.stringify writes them, `toJSON` honoured, undefined members dropped.
import { createHash } from "node:crypto";

/** Why a value has no canonical JSON form. */
export class UnserializableInputError extends Error {
  readonly code = "APPROVAL_UNSERIALIZABLE_INPUT";
  constructor(message: string) {
    super(message);
    this.name = "UnserializableInputError";
  }
}

/** The canonical JSON text of `value`. Throws UnserializableInputError for what JSON cannot hold. */
export function canonicalJson(value: unknown): string {
  const seen = new Set<object>();
  const write = (current: unknown, path: string): string | undefined => {
    if (current !== null && typeof current === "object" && typeof (current as { toJSON?: unknown }).toJSON === "function") {
      current = (current as { toJSON: (key: string) => unknown }).toJSON("");
    }
    switch (typeof current) {
      case "string":
        return JSON.stringify(current);
      case "boolean":
        return current ? "true" : "false";
      case "number":
        if (!Number.isFinite(current)) {
          throw new UnserializableInputError(`${path} is ${current}, which JSON cannot represent`);
        }
        return JSON.stringify(current);
      case "undefined":
        return undefined;
      case "bigint":
      case "function":
      case "symbol":
        throw new UnserializableInputError(`${path} is a ${typeof current}, which JSON cannot represent`);
      default:
        break;
    }
    if (current === null) {
      return "null";
    }
    const object = current as object;
    if (seen.has(object)) {
      throw new UnserializableInputError(`${path} is a cycle`);
    }
    seen.add(object);
    try {
      if (Array.isArray(object)) {
        return `[${object.map((item, index) => write(item, `${path}[${index}]`) ?? "null").join(",")}]`;
      }
      const prototype = Object.getPrototypeOf(object);
      if (prototype !== Object.prototype && prototype !== null) {
        throw new UnserializableInputError(`${path} is not a plain object`);
      }
      const members: string[] = [];
      for (const key of Object.keys(object).sort()) {
        const written = write((object as Record<string, unknown>)[key], `${path}.${key}`);
        if (written !== undefined) {
          members.push(`${JSON.stringify(key)}:${written}`);
        }
      }
      return `{${members.join(",")}}`;
    } finally {
      seen.delete(object);
    }
  };
  const written = write(value, "input");
  if (written === undefined) {
    throw new UnserializableInputError("input is undefined, which JSON cannot represent");
  }
  return written;
}

/** SHA-256, lower-case hex, of the canonical JSON of `value`. */
export function inputHash(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}
