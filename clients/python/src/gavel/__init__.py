"""Gavel's Python client: typed sync and asyncio clients for every gavel.v1
service, the canonical input hash, and a worker runtime.

Key names:

- ``Client`` / ``AsyncClient``: ``client.approvals``, ``.executions``,
  ``.workers``, ``.capabilities``, ``.audit``, ``.cluster``, ``.access``,
  ``.policies``; ``Client.from_env()`` reads the ``GAVEL_*`` variables;
  ``client.decide(id, approve)`` / ``client.vote(...)`` name the approval's
  terms hash (the one given, else the one read first);
- ``GavelError``: every failure, with its stable domain ``code``;
  ``gavel.codes`` lists every code (``GavelCode``, ``CODES``: its gRPC class
  and when it happens), generated from the server's catalogue;
- ``actor_text``: an actor as people read it, ``kind:id``
  (``user:bob-finance``); a request naming an actor whose id already names
  a kind (``user:alice``) is refused before sending, ``INVALID_ARGUMENT``;
- ``canonical_json`` / ``input_hash``: RFC 8785, equal to the server's;
- ``Worker``: polls, heartbeats and reports; handlers get the idempotency key,
  the lease id (fencing token) and cancellation;
- ``gavel.v1``: the generated messages (``approval_pb2``, ...).
"""

from gavel._invoke import new_request_id
from gavel.actors import actor_id_problem, actor_text
from gavel.canonical import UnserializableInputError, canonical_json, input_hash
from gavel.client import AsyncClient, Client
from gavel.codes import CODES, CodeInfo, GavelCode
from gavel.config import ClientOptions, Tls
from gavel.errors import GavelError
from gavel.reach import Reachability
from gavel.worker import HandlerError, Task, Worker

__all__ = [
    "AsyncClient",
    "CODES",
    "Client",
    "ClientOptions",
    "CodeInfo",
    "GavelCode",
    "GavelError",
    "HandlerError",
    "Reachability",
    "Task",
    "Tls",
    "UnserializableInputError",
    "Worker",
    "actor_id_problem",
    "actor_text",
    "canonical_json",
    "input_hash",
    "new_request_id",
]
