// The input hash: SHA-256 (lower-case hex) of the canonical JSON of a value,
// equal to Gavel's RFC 8785 hash (crates/gavel-json) and to orpc-agent's:
// keys sorted by UTF-16 code units, numbers and strings written as
// JSON.stringify writes them, `toJSON` honoured, undefined members dropped.
// A value Gavel refuses as not I-JSON (ijson.ts) has no hash.
import { createHash } from "node:crypto";
import { iJsonProblem, keyProblem, location, pointerToken } from "./ijson.js";

/** Why a value has no canonical JSON form. */
export class UnserializableInputError extends Error {
  readonly code = "APPROVAL_UNSERIALIZABLE_INPUT";
  constructor(message: string) {
    super(message);
    this.name = "UnserializableInputError";
  }
}

/**
 * The canonical JSON text of `value`. Throws UnserializableInputError for
 * what JSON cannot hold and for what Gavel refuses as not I-JSON (a number a
 * double cannot hold exactly, a bigint, a lone surrogate), naming the JSON
 * Pointer of the culprit.
 */
export function canonicalJson(value: unknown): string {
  const seen = new Set<object>();
  const write = (current: unknown, path: string): string | undefined => {
    if (current !== null && typeof current === "object" && typeof (current as { toJSON?: unknown }).toJSON === "function") {
      current = (current as { toJSON: (key: string) => unknown }).toJSON("");
    }
    const problem = iJsonProblem(current, path);
    if (problem !== undefined) {
      throw new UnserializableInputError(`input is not I-JSON (RFC 7493): ${problem}`);
    }
    switch (typeof current) {
      case "string":
        return JSON.stringify(current);
      case "boolean":
        return current ? "true" : "false";
      case "number":
        return JSON.stringify(current);
      case "undefined":
        return undefined;
      case "function":
      case "symbol":
        throw new UnserializableInputError(`input at ${location(path)} is a ${typeof current}, which JSON cannot represent`);
      default:
        break;
    }
    if (current === null) {
      return "null";
    }
    const object = current as object;
    if (seen.has(object)) {
      throw new UnserializableInputError(`input at ${location(path)} is a cycle`);
    }
    seen.add(object);
    try {
      if (Array.isArray(object)) {
        return `[${object.map((item, index) => write(item, `${path}/${index}`) ?? "null").join(",")}]`;
      }
      const prototype = Object.getPrototypeOf(object);
      if (prototype !== Object.prototype && prototype !== null) {
        throw new UnserializableInputError(`input at ${location(path)} is not a plain object`);
      }
      const members: string[] = [];
      for (const key of Object.keys(object).sort()) {
        const problem = keyProblem(key, path);
        if (problem !== undefined) {
          throw new UnserializableInputError(`input is not I-JSON (RFC 7493): ${problem}`);
        }
        const written = write((object as Record<string, unknown>)[key], `${path}/${pointerToken(key)}`);
        if (written !== undefined) {
          members.push(`${JSON.stringify(key)}:${written}`);
        }
      }
      return `{${members.join(",")}}`;
    } finally {
      seen.delete(object);
    }
  };
  const written = write(value, "");
  if (written === undefined) {
    throw new UnserializableInputError("input is undefined, which JSON cannot represent");
  }
  return written;
}

/** SHA-256, lower-case hex, of the canonical JSON of `value`. */
export function inputHash(value: unknown): string {
  return createHash("sha256").update(canonicalJson(value), "utf8").digest("hex");
}
