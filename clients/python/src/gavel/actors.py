"""Actors: the one way people read them, and the cluster's rule on their ids.

An actor is written ``kind:id`` (``user:bob-finance``), as a principal is
(docs/decisions/0090-one-spelling-of-a-principal.md). So an actor id must
not name a kind itself: ``Actor(id="user:alice", kind=ACTOR_KIND_USER)``
would be read ``user:user:alice``. The cluster refuses such an id with
``INVALID_ARGUMENT`` (gavel-core's validate.rs, ``check_actor_id``); the
client refuses a request naming one before sending it, with the same code
and message. The Rust and TypeScript SDKs run the same rule.
"""

from __future__ import annotations

import json
from typing import Any

import grpc

from gavel.errors import GavelError
from gavel.v1 import common_pb2

#: The kind names an actor id may not start with (followed by ``:``), each
#: with the actor kind to pass instead: the actor kinds, and the principal
#: kinds ``worker`` and ``node`` (a worker acts as automation, a node as a
#: service).
_KIND_NAMES = {
    "user": "user",
    "service": "service",
    "automation": "automation",
    "anonymous": "anonymous",
    "worker": "automation",
    "node": "service",
}

_ACTOR = common_pb2.Actor.DESCRIPTOR.full_name


def actor_text(actor: common_pb2.Actor) -> str:
    """``kind:id``, the way people read an actor (``user:bob-finance``), as the CLI's ``--as`` takes it."""
    try:
        kind = common_pb2.ActorKind.Name(actor.kind).removeprefix("ACTOR_KIND_").lower()
    except ValueError:  # a kind this client does not know (a newer server)
        kind = "unknown"
    return f"{kind}:{actor.id}"


def actor_id_problem(field: str, actor_id: str) -> str | None:
    """The cluster's refusal of an actor id that names a kind (``field``: ``actor`` or ``approver``), or None."""
    prefix, colon, rest = actor_id.partition(":")
    kind = _KIND_NAMES.get(prefix) if colon else None
    if kind is None:
        return None
    quoted, rest_quoted = json.dumps(actor_id, ensure_ascii=False), json.dumps(rest, ensure_ascii=False)
    return f"{field} id {quoted} already names a kind; pass id {rest_quoted} with kind {kind}"


def check_actors(request: Any) -> None:
    """Raises the cluster's ``INVALID_ARGUMENT`` when the request names an actor whose id names a kind."""
    for field in request.DESCRIPTOR.fields:
        if field.message_type is None or field.message_type.full_name != _ACTOR or field.is_repeated:
            continue
        if not request.HasField(field.name):
            continue
        problem = actor_id_problem(field.name, getattr(request, field.name).id)
        if problem is not None:
            raise GavelError("INVALID_ARGUMENT", problem, grpc.StatusCode.INVALID_ARGUMENT)
