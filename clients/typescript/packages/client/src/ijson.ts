// I-JSON (RFC 7493) before sending: Gavel refuses JSON whose numbers a
// double cannot hold exactly, duplicated keys and lone surrogates, naming
// the JSON Pointer (docs/limits.md). A JavaScript value can break the rule
// only with its numbers (not finite, a bigint, an integer beyond
// ±(2^53 - 1)) and its strings (a lone surrogate); this module refuses them
// before anything is sent, with the code and the wording the cluster uses.
//
// JSON text given to the client (`inputJson`, ...) is read with JSON.parse,
// which has already rounded: 9007199254740993 reads as 9007199254740992 and
// is refused (an unsafe integer), but 1e-400 reads as 0 and a duplicated key
// as its last value, so those are left to the cluster, which sees the text.
import { Code } from "@connectrpc/connect";
import { GavelError } from "./errors.js";

/** Where JSON sits in a request: the field's name in refusals and the domain code the cluster refuses it with. */
export interface JsonField {
  readonly name: "input" | "output" | "payload";
  readonly code: "INPUT_INVALID" | "INVALID_ARGUMENT";
}

/** A JSON Pointer (RFC 6901) reference token for `key`: `~` as `~0`, `/` as `~1`. */
export function pointerToken(key: string): string {
  return key.replaceAll("~", "~0").replaceAll("/", "~1");
}

/** Where a refusal points: the pointer, or "the top level" for the whole value (as the cluster words it). */
export function location(pointer: string): string {
  return pointer === "" ? "the top level" : pointer;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** `\udXXX` of the first lone surrogate in `text`, if any. */
function loneSurrogate(text: string): string | undefined {
  const found = LONE_SURROGATE.exec(text);
  return found === null ? undefined : `\\u${found[0].charCodeAt(0).toString(16).padStart(4, "0")}`;
}

/**
 * Why `value` at `pointer` is not I-JSON, in the cluster's words, or
 * undefined. An integral number over 2^53 - 1 below 1e21 is refused (JCS
 * writes it as digits a reader cannot tell from its neighbours); from 1e21
 * on JCS writes exponent form, which the cluster accepts.
 */
export function iJsonProblem(value: unknown, pointer: string): string | undefined {
  switch (typeof value) {
    case "number":
      if (!Number.isFinite(value)) {
        return `number ${value} at ${location(pointer)} is beyond the range of a double`;
      }
      if (Number.isInteger(value) && !Number.isSafeInteger(value) && Math.abs(value) < 1e21) {
        return `number ${JSON.stringify(value)} at ${location(pointer)} is an integer beyond ±9007199254740991 (2^53 - 1), which a double cannot hold exactly`;
      }
      return undefined;
    case "bigint":
      return `number ${value}n at ${location(pointer)} is a bigint, which JSON cannot hold exactly`;
    case "string": {
      const escape = loneSurrogate(value);
      return escape === undefined
        ? undefined
        : `the string at ${location(pointer)} holds a lone surrogate (${escape}), which is not unicode text`;
    }
    default:
      return undefined;
  }
}

/** Why object key `key` of the object at `pointer` is not I-JSON, or undefined. */
export function keyProblem(key: string, pointer: string): string | undefined {
  const escape = loneSurrogate(key);
  return escape === undefined
    ? undefined
    : `a key of the object at ${location(pointer)} holds a lone surrogate (${escape}), which is not unicode text`;
}

/**
 * `JSON.stringify(value)`, refusing with a GavelError (the field's code,
 * `INVALID_ARGUMENT` status) what the cluster would refuse as not I-JSON,
 * naming the JSON Pointer, before anything is sent.
 */
export function stringifyIJson(value: unknown, field: JsonField): string | undefined {
  const refuse = (problem: string): never => {
    throw new GavelError(field.code, `${field.name} is not I-JSON (RFC 7493): ${problem}`, Code.InvalidArgument);
  };
  // The pointer of every container being written; the root's holder is not in it.
  const pointers = new Map<object, string>();
  return JSON.stringify(value, function (this: object, key: string, current: unknown): unknown {
    const parent = pointers.get(this);
    const pointer = parent === undefined ? "" : `${parent}/${pointerToken(key)}`;
    const problem = iJsonProblem(current, pointer);
    if (problem !== undefined) {
      refuse(problem);
    }
    if (current !== null && typeof current === "object") {
      pointers.set(current, pointer);
      if (!Array.isArray(current)) {
        for (const member of Object.keys(current)) {
          const problem = keyProblem(member, pointer);
          if (problem !== undefined) {
            refuse(problem);
          }
        }
      }
    }
    return current;
  });
}

/**
 * Refuses JSON text as the cluster would when the value JSON.parse reads
 * from it is not I-JSON. Text that does not parse is left to the cluster,
 * which names the offset.
 */
export function checkJsonText(text: string, field: JsonField): void {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return;
  }
  stringifyIJson(value, field);
}
