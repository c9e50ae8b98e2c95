"""The client's leader following, retries and error reporting, on real clusters."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import pytest

import gavel
from cluster import GAVEL_BIN, TestCluster, eventually
from gavel.v1 import approval_pb2, common_pb2

RUN = uuid.uuid4().hex[:8]


def approval(approval_id: str) -> approval_pb2.CreateApprovalRequest:
    return approval_pb2.CreateApprovalRequest(
        id=approval_id,
        capability_id="py.client",
        surface="python",
        input_json=gavel.canonical_json({"id": approval_id}),
        risk=common_pb2.RISK_LOW,
        side_effect=common_pb2.SIDE_EFFECT_READ,
    )


def read_or_none(reader: gavel.Client, approval_id: str) -> bool | None:
    """True once `reader` reads the approval; None while the cluster answers NOT_FOUND."""
    try:
        return reader.approvals.get_approval(id=approval_id).HasField("approval") or None
    except gavel.GavelError as error:
        if error.code == "NOT_FOUND":
            return None
        raise


def test_follows_the_leader_a_follower_names_in_the_gavel_leader_header(cluster: TestCluster) -> None:
    leader = cluster.leader()
    follower = next(endpoint for endpoint in cluster.endpoints if endpoint != leader)
    client = cluster.admin(endpoints=(follower, *(e for e in cluster.endpoints if e != follower)))
    assert client.preferred_endpoint() == follower
    client.approvals.create_approval(approval(f"follow_{RUN}"))
    assert client.preferred_endpoint() == leader, "the next call goes to the leader directly"
    pinned = cluster.admin(endpoints=(follower, leader), follow_leader=False)
    pinned.approvals.create_approval(approval(f"pinned_{RUN}"))
    assert pinned.preferred_endpoint() == follower


def test_errors_carry_the_stable_domain_code_and_validation_problems(cluster: TestCluster) -> None:
    client = cluster.admin()
    with pytest.raises(gavel.GavelError) as caught:
        client.approvals.consume_approval(id=f"nope_{RUN}", execution_id="exe")
    assert (caught.value.code, caught.value.status) == ("NOT_FOUND", grpc.StatusCode.NOT_FOUND)
    bad = approval(f"bad_{RUN}")
    bad.input_json = "{not json"
    with pytest.raises(gavel.GavelError) as caught:
        client.approvals.create_approval(bad)
    assert caught.value.status == grpc.StatusCode.INVALID_ARGUMENT
    stranger = cluster.token_client(f"user:stranger-{RUN}")
    with pytest.raises(gavel.GavelError) as caught:
        stranger.approvals.create_approval(approval(f"denied_{RUN}"))
    assert caught.value.code == "PERMISSION_DENIED" and caught.value.access_refused
    assert "needs the submitter grant" in caught.value.message


def test_a_bad_ca_fails_at_once_as_unauthenticated_not_after_the_retry_budget(cluster: TestCluster) -> None:
    with tempfile.TemporaryDirectory() as other:
        subprocess.run([GAVEL_BIN, "cert", "create-ca", "--certs-dir", other], check=True, capture_output=True)
        client = gavel.Client(endpoints=cluster.endpoints, tls=gavel.Tls(ca=(Path(other) / "ca.pem").read_bytes()))
        started = time.monotonic()
        with pytest.raises(gavel.GavelError) as caught:
            client.cluster.status()
        client.close()
    assert caught.value.code == "UNAUTHENTICATED" and "TLS" in caught.value.message, caught.value
    assert time.monotonic() - started < 5


def test_bad_configuration_is_refused_at_construction(cluster: TestCluster) -> None:
    for endpoints in ([], ["garbage"], ["127.0.0.1"], ["host:0"], ["ftp://h:1"], ["127.0.0.1:70000"]):
        with pytest.raises(gavel.GavelError) as caught:
            gavel.Client(endpoints=endpoints)
        assert caught.value.code == "CONFIG", endpoints
    with pytest.raises(gavel.GavelError, match="plaintext but TLS is configured"):
        gavel.Client(endpoints=["http://127.0.0.1:1"], tls=gavel.Tls(ca=cluster.ca))
    with pytest.raises(gavel.GavelError, match="header"):
        gavel.Client(endpoints=["127.0.0.1:1"], tls=gavel.Tls(ca=cluster.ca), token="a\nb")


def test_credentials_come_from_the_gavel_variables_with_the_rust_sdks_rules(cluster: TestCluster) -> None:
    options = gavel.ClientOptions.from_env(cluster.env)
    assert list(options.endpoints) == cluster.endpoints and options.tls is not None and options.tls.cert is not None
    with gavel.Client(options) as client:
        assert client.access.who_am_i().principal == "user:admin"
    token = cluster.token(f"user:env-{RUN}")
    token_env = {"GAVEL_ENDPOINTS": cluster.env["GAVEL_ENDPOINTS"], "GAVEL_CA": cluster.env["GAVEL_CA"]}
    with gavel.Client.from_env({**token_env, "GAVEL_TOKEN": token}) as client:
        assert client.access.who_am_i().principal == f"user:env-{RUN}"
    with tempfile.NamedTemporaryFile("w", suffix=".jwt") as file:
        file.write(token + "\n")
        file.flush()
        assert gavel.ClientOptions.from_env({**token_env, "GAVEL_TOKEN_FILE": file.name}).token == token
    refused = [
        {"GAVEL_INSECURE": "1", "GAVEL_CA": cluster.env["GAVEL_CA"]},
        {"GAVEL_INSECURE": "true", "GAVEL_TOKEN": "t"},
        {"GAVEL_CA": cluster.env["GAVEL_CA"], "GAVEL_CERT": cluster.env["GAVEL_CERT"]},
        {"GAVEL_TOKEN": "t"},
        {"GAVEL_CA": cluster.env["GAVEL_CA"], "GAVEL_TOKEN": "t", "GAVEL_TOKEN_FILE": "/t"},
        {"GAVEL_CA": "/nonexistent/ca.pem"},
    ]
    for env in refused:
        with pytest.raises(gavel.GavelError) as caught:
            gavel.ClientOptions.from_env(env)
        assert caught.value.code == "CONFIG", env
    assert gavel.ClientOptions.from_env({"GAVEL_INSECURE": "1"}).tls is None
    assert gavel.ClientOptions.from_env({}).endpoints == ("127.0.0.1:7401", "127.0.0.1:7402", "127.0.0.1:7403")


def test_an_unreachable_cluster_is_described_after_the_retry_budget(cluster: TestCluster) -> None:
    dead = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"]
    client = gavel.Client(endpoints=dead, tls=gavel.Tls(ca=cluster.ca), retry_budget=1.0, call_timeout=0.3)
    started = time.monotonic()
    with pytest.raises(gavel.GavelError) as caught:
        client.cluster.status()
    client.close()
    assert caught.value.code == "UNAVAILABLE" and caught.value.retryable
    assert "no node reachable (0 of 3 nodes)" in caught.value.message
    assert time.monotonic() - started < 5


async def test_the_asyncio_client_follows_the_same_rules(cluster: TestCluster) -> None:
    async with gavel.AsyncClient(cluster.admin_options()) as client:
        created = await client.approvals.create_approval(approval(f"async_{RUN}"))
        assert created.approval.status == approval_pb2.APPROVAL_STATUS_PENDING
        with pytest.raises(gavel.GavelError) as caught:
            await client.approvals.create_approval(approval(f"async_{RUN}"))
        assert caught.value.code == "ALREADY_EXISTS"
        assert (await client.reachability()).describe() == "3 of 3 nodes reachable"


def test_calls_keep_working_through_a_leader_sigkill_retried_with_the_same_request_id() -> None:
    own = TestCluster.start()
    try:
        own.take_over()
        client = own.admin(retry_budget=20.0)
        leader = own.leader()
        leader_index = own.endpoints.index(leader)
        client.approvals.create_approval(approval(f"before_{RUN}"))
        os.kill(own.node_pids[leader_index], signal.SIGKILL)
        request = approval(f"after_{RUN}")
        request.request_id = gavel.new_request_id()
        created = client.approvals.create_approval(request)
        assert created.approval.id == f"after_{RUN}"
        assert client.preferred_endpoint() != leader, "it moved off the dead node"
        # The same request id after the failover gets the first answer, not ALREADY_EXISTS.
        assert client.approvals.create_approval(request) == created
        for index, endpoint in enumerate(own.endpoints):
            if index != leader_index:
                reader = own.admin(endpoints=(endpoint,))
                eventually(f"the write on {endpoint}", lambda reader=reader: read_or_none(reader, f"after_{RUN}"))
        assert client.reachability().describe() == "2 of 3 nodes reachable"
    finally:
        own.stop()


def test_server_streams_are_iterators_in_both_clients(cluster: TestCluster) -> None:
    client = cluster.admin()
    client.approvals.create_approval(approval(f"stream_{RUN}"))
    listed = client.audit.list_events(after_cursor=0, limit=5).events
    assert len(listed) == 5 and [event.cursor for event in listed] == sorted(event.cursor for event in listed)
    stream = client.audit.watch_events(after_cursor=0)
    watched = [next(stream) for _ in range(5)]
    stream.close()
    assert [event.cursor for event in watched] == [event.cursor for event in listed]

    async def watch_async() -> list[int]:
        async with gavel.AsyncClient(cluster.admin_options()) as async_client:
            cursors = []
            async for event in async_client.audit.watch_events(after_cursor=0):
                cursors.append(event.cursor)
                if len(cursors) == 5:
                    break
            return cursors

    assert asyncio.run(watch_async()) == [event.cursor for event in listed]
    with pytest.raises(gavel.GavelError) as caught:
        next(iter(client.audit.watch_events(after_cursor=10**12)))
    assert caught.value.code == "OUT_OF_RANGE"
