"""The Python input hash equals the server's for 10,000 generated values.

For every value the test asks the server for its hash of the value's JSON
text without storing anything: a CreateApproval whose inputHash is
deliberately wrong is refused before the Raft log by the edge's precheck
(crates/gavel-core/src/precheck.rs), and the refusal names the server's
canonical hash. Half of the values travel as Python's canonical text, half
as json.dumps text (unsorted keys, whitespace, ASCII escapes), which the
server canonicalizes on its own. A sample is also really created with the
Python hash, which the server must accept and store.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import struct
import time
import uuid
from typing import Any

import pytest

import gavel
from cluster import TestCluster
from gavel.v1 import approval_pb2, common_pb2

VALUES = 10_000
#: Calls in flight at once; well under the node's READS/PROPOSALS limits.
CONCURRENCY = 32
CREATED_SAMPLE = 200
WRONG_HASH = "0" * 64
SERVER_HASH = re.compile(r"its canonical hash is ([0-9a-f]{64})")
PRINCIPAL = "service:py-hash"

_STRINGS = [
    "",
    "a",
    "é",
    "😀",
    "\u2028",
    "\x00",
    "\x1f",
    "\x7f",
    '"',
    "\\",
    "/",
    "\ud800",
    "\udfff",
    "\ue000",
    "\U00010000",
    "\t\n\r\b\f",
    "日本",
    "\ufeff",
    "z",
]


def random_double(rng: random.Random) -> float:
    while True:
        kind = rng.randrange(6)
        if kind == 0:  # any finite bit pattern
            (value,) = struct.unpack(">d", rng.getrandbits(64).to_bytes(8, "big"))
        elif kind == 1:
            value = rng.uniform(-1e6, 1e6)
        elif kind == 2:
            value = rng.choice([0.0, -0.0, 5e-324, 1e21, 1e-7, 1e-6, 9.999999999999999e20, 1.7976931348623157e308])
        elif kind == 3:
            value = float(rng.randrange(-(2**53), 2**53))
        elif kind == 4:
            value = rng.randrange(1, 10**6) / 10 ** rng.randrange(0, 12)
        else:
            value = rng.random() * 10 ** rng.randrange(-30, 30)
        if value == value and abs(value) != float("inf"):
            return value


def random_string(rng: random.Random) -> str:
    return "".join(rng.choice(_STRINGS) for _ in range(rng.randrange(0, 5)))


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 4 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randrange(-(2**53), 2**53 + 1)
    if kind == 3:
        return rng.randrange(-1000, 1000)
    if kind == 4:
        return random_double(rng)
    if kind in (5, 6):
        return random_string(rng)
    if kind == 7:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))}


def wire_text(value: Any, rng: random.Random) -> str:
    if rng.random() < 0.5:
        try:
            return gavel.canonical_json(value)
        except gavel.UnserializableInputError:
            pass  # not I-JSON: sent as json.dumps writes it, for the server to refuse
    return json.dumps(value, ensure_ascii=True, indent=rng.choice([None, 1]))


#: What both sides answer for a value that is not I-JSON (RFC 7493): a lone
#: surrogate, an integer beyond 2**53 - 1.
REFUSED = "refused"


def python_hash(value: Any) -> str:
    try:
        return gavel.input_hash(value)
    except gavel.UnserializableInputError:
        return REFUSED


@pytest.fixture(scope="module")
def hash_options(cluster: TestCluster) -> gavel.ClientOptions:
    cluster.grant(PRINCIPAL, "submitter")
    return cluster.token_options(PRINCIPAL)


def test_ten_thousand_generated_values_hash_as_the_server_hashes_them(hash_options: gavel.ClientOptions) -> None:
    rng = random.Random(20261203)
    values = [random_value(rng) for _ in range(VALUES)]
    texts = [wire_text(value, rng) for value in values]

    async def server_hash(client: gavel.AsyncClient, text: str) -> str:
        request = approval_pb2.CreateApprovalRequest(
            id=f"apr_hash_{uuid.uuid4().hex}",
            capability_id="py.hash",
            surface="python-hash",
            input_json=text,
            input_hash=WRONG_HASH,
            risk=common_pb2.RISK_LOW,
            side_effect=common_pb2.SIDE_EFFECT_NONE,
        )
        try:
            await client.approvals.create_approval(request)
        except gavel.GavelError as error:
            if "is not I-JSON" in error.message:
                return REFUSED
            found = SERVER_HASH.search(error.message)
            assert found is not None, error
            return found.group(1)
        raise AssertionError("a wrong inputHash was accepted")

    async def run() -> list[str]:
        async with gavel.AsyncClient(hash_options) as client:
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one(text: str) -> str:
                async with gate:
                    return await server_hash(client, text)

            return await asyncio.gather(*(one(text) for text in texts))

    started = time.monotonic()
    server = asyncio.run(run())
    elapsed = time.monotonic() - started
    mismatches = [
        (value, text, theirs)
        for value, text, theirs in zip(values, texts, server, strict=True)
        if python_hash(value) != theirs
    ]
    refused = server.count(REFUSED)
    print(f"{VALUES} values cross-checked in {elapsed:.1f}s ({VALUES / elapsed:.0f}/s), {refused} refused by both")
    assert not mismatches, f"{len(mismatches)} of {VALUES} differ; first: {mismatches[0]!r}"
    assert refused < VALUES // 2, "most generated values are I-JSON and hashed"


def test_a_sample_created_with_the_python_hash_is_accepted_and_stored(hash_options: gavel.ClientOptions) -> None:
    rng = random.Random(7)
    values = [value for value in (random_value(rng) for _ in range(CREATED_SAMPLE)) if python_hash(value) != REFUSED]
    run_id = uuid.uuid4().hex[:8]

    async def run() -> list[approval_pb2.CreateApprovalResponse]:
        async with gavel.AsyncClient(hash_options) as client:
            return await asyncio.gather(
                *(
                    client.approvals.create_approval(
                        id=f"apr_hash_{run_id}_{index}",
                        capability_id="py.hash",
                        surface="python-hash",
                        input_json=gavel.canonical_json(value),
                        input_hash=gavel.input_hash(value),
                        risk=common_pb2.RISK_LOW,
                        side_effect=common_pb2.SIDE_EFFECT_NONE,
                    )
                    for index, value in enumerate(values)
                )
            )

    created = asyncio.run(run())
    for value, response in zip(values, created, strict=True):
        assert response.approval.input_hash == gavel.input_hash(value)
        assert response.approval.input_json == gavel.canonical_json(value)
