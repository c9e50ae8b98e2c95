// Actors: the one way people read them, and the cluster's rule on their ids,
// run before sending (docs/decisions/0090-one-spelling-of-a-principal.md).
//
// An actor is written `kind:id` (`user:bob-finance`), as a principal is. So
// an actor id must not name a kind itself: `{ id: "user:alice", kind: USER }`
// would be read `user:user:alice`. The cluster refuses such an id with
// INVALID_ARGUMENT (gavel-core's validate.rs, `check_actor_id`); a request
// naming one is refused here with the same code and message, and costs no
// round trip. The Rust and Python SDKs run the same rule.
import type { DescMessage } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { GavelError } from "./errors.js";
import { ActorKind } from "./gen/gavel/v1/common_pb.js";

/**
 * The kind names an actor id may not start with (followed by `:`), each with
 * the actor kind to pass instead: the actor kinds, and the principal kinds
 * `worker` and `node` (a worker acts as automation, a node as a service).
 */
const KIND_NAMES: ReadonlyMap<string, string> = new Map([
  ["user", "user"],
  ["service", "service"],
  ["automation", "automation"],
  ["anonymous", "anonymous"],
  ["worker", "automation"],
  ["node", "service"],
]);

/**
 * `kind:id`, the way people read an actor (`user:bob-finance`), the same as
 * a principal and as the CLI's `--as` takes it. The kind may be the proto's
 * `ActorKind` or orpc-agent's name (`"user"`).
 */
export function actorText(actor: { readonly id: string; readonly kind: ActorKind | string }): string {
  const kind = typeof actor.kind === "string" ? actor.kind : (ActorKind[actor.kind]?.toLowerCase() ?? "unknown");
  return `${kind}:${actor.id}`;
}

/**
 * The refusal of an actor id that names a kind, in the cluster's words
 * (`field` is the request's field: `actor` or `approver`), or undefined.
 */
export function actorIdProblem(field: string, id: string): string | undefined {
  const colon = id.indexOf(":");
  if (colon < 0) {
    return undefined;
  }
  const kind = KIND_NAMES.get(id.slice(0, colon));
  if (kind === undefined) {
    return undefined;
  }
  return `${field} id ${JSON.stringify(id)} already names a kind; pass id ${JSON.stringify(id.slice(colon + 1))} with kind ${kind}`;
}

/** Refuses, as the cluster would, a request whose actor (or approver) id names a kind. */
export function checkActors(schema: DescMessage, message: Record<string, unknown>): void {
  for (const field of schema.fields) {
    if (field.fieldKind !== "message" || field.message.typeName !== "gavel.v1.Actor") {
      continue;
    }
    const actor = message[field.localName] as { id?: unknown } | undefined;
    const problem = typeof actor?.id === "string" ? actorIdProblem(field.name, actor.id) : undefined;
    if (problem !== undefined) {
      throw new GavelError("INVALID_ARGUMENT", problem, Code.InvalidArgument);
    }
  }
}
