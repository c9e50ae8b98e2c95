"""A real secured three-node cluster for the tests.

``gavel dev`` on free loopback ports in a temporary data directory (it makes
a dev CA, node certificates and the admin's client certificate there),
stopped by PID at the end, the way clients/typescript/test/src/cluster.ts
starts one. Principals get credentials from ``gavel token issue`` /
``gavel cert create-client``, and grants through the client.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gavel

REPO_ROOT = Path(__file__).resolve().parents[3]
#: The gavel binary the tests start: GAVEL_BIN, or the workspace's debug build.
GAVEL_BIN = os.environ.get("GAVEL_BIN") or str(REPO_ROOT / "target" / "debug" / "gavel")
#: How long the cluster may take to elect a leader and print its export line.
START_TIMEOUT_S = 60.0
#: How long `gavel dev` gets to stop its nodes after SIGTERM.
STOP_GRACE_S = 10.0
#: How many base ports are tried when one is taken meanwhile.
PORT_TRIES = 5


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_base_port() -> int:
    for _ in range(50):
        base = 20_000 + random.randrange(30_000)
        if all(_port_free(port) for port in (base, base + 1, base + 2, base + 100, base + 101, base + 102)):
            return base
    raise RuntimeError("no free loopback ports found for the test cluster")


class TestCluster:
    """A running `gavel dev` cluster, with helpers to make principals."""

    __test__ = False  # a helper, not a test class

    def __init__(self, data_dir: Path, dev: subprocess.Popen[bytes], env: dict[str, str], node_pids: list[int]) -> None:
        self.data_dir = data_dir
        self.dev = dev
        self.env = env
        self.node_pids = node_pids
        self.endpoints = env["GAVEL_ENDPOINTS"].split(",")
        self.certs_dir = Path(env["GAVEL_CA"]).parent
        self.ca = Path(env["GAVEL_CA"]).read_bytes()
        self._clients: list[gavel.Client] = []
        self._own_nodes: list[subprocess.Popen[bytes]] = []

    @staticmethod
    def start() -> TestCluster:
        last: Exception | None = None
        for _ in range(PORT_TRIES):
            try:
                return TestCluster._start_once(_free_base_port())
            except RuntimeError as error:
                last = error
        assert last is not None
        raise last

    @staticmethod
    def _start_once(base_port: int) -> TestCluster:
        data_dir = Path(tempfile.mkdtemp(prefix="gavel-py-test-"))
        dev = subprocess.Popen(
            [GAVEL_BIN, "dev", "--base-port", str(base_port), "--data-dir", str(data_dir / "dev")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        assert dev.stdout is not None
        output: list[str] = []
        node_pids: list[int] = []
        export: list[str] = []

        def read() -> None:
            assert dev.stdout is not None
            for raw in dev.stdout:
                line = raw.decode(errors="replace")
                output.append(line)
                for pid in re.findall(r"node \d+ pid (\d+)", line):
                    node_pids.append(int(pid))
                if line.startswith("export GAVEL_ENDPOINTS="):
                    export.append(line.strip())
            # Keep draining until gavel dev exits, so it never blocks on a full pipe.

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not export:
            if dev.poll() is not None or time.monotonic() > deadline:
                _kill(dev.pid, signal.SIGKILL)
                for pid in node_pids:
                    _kill(pid, signal.SIGKILL)
                shutil.rmtree(data_dir, ignore_errors=True)
                raise RuntimeError(f"gavel dev was not ready (exit {dev.poll()}):\n{''.join(output)}")
            time.sleep(0.05)
        env = dict(assignment.split("=", 1) for assignment in export[0][len("export ") :].split(" "))
        return TestCluster(data_dir, dev, env, node_pids)

    def gavel(
        self, *args: str, env: dict[str, str] | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Runs the gavel CLI against this cluster (as the admin unless env says otherwise)."""
        merged = {**os.environ, **self.env, **(env or {})}
        merged = {key: value for key, value in merged.items() if value != ""}
        return subprocess.run([GAVEL_BIN, *args], env=merged, capture_output=True, text=True, timeout=30, check=check)

    def admin_options(self, **changes: Any) -> gavel.ClientOptions:
        """Client options as the dev admin (client certificate), which holds every grant."""
        tls = gavel.Tls(
            ca=self.ca, cert=Path(self.env["GAVEL_CERT"]).read_bytes(), key=Path(self.env["GAVEL_KEY"]).read_bytes()
        )
        changes.setdefault("endpoints", tuple(self.endpoints))
        return gavel.ClientOptions(tls=tls, **changes)

    def admin(self, **changes: Any) -> gavel.Client:
        """A sync client as the dev admin."""
        return self._track(gavel.Client(self.admin_options(**changes)))

    def token(self, principal: str) -> str:
        """A bearer token for ``principal`` (no grants unless given)."""
        issued = self.gavel("token", "issue", "--certs-dir", str(self.certs_dir), "--sub", principal, "--ttl", "2h")
        return issued.stdout.strip()

    def token_options(self, principal: str, **changes: Any) -> gavel.ClientOptions:
        """Client options with a bearer token for ``principal``."""
        changes.setdefault("endpoints", tuple(self.endpoints))
        return gavel.ClientOptions(tls=gavel.Tls(ca=self.ca), token=self.token(principal), **changes)

    def token_client(self, principal: str, **changes: Any) -> gavel.Client:
        """A sync client with a bearer token for ``principal``."""
        return self._track(gavel.Client(self.token_options(principal, **changes)))

    def cert_env(self, principal: str) -> dict[str, str]:
        """GAVEL_* variables for a fresh client certificate of ``principal``."""
        self.gavel("cert", "create-client", "--certs-dir", str(self.certs_dir), "--principal", principal)
        kind, name = principal.split(":", 1)
        base = self.certs_dir / f"client-{kind}-{name}"
        return {**self.env, "GAVEL_CERT": f"{base}.pem", "GAVEL_KEY": f"{base}.key"}

    def grant(self, principal: str, *grants: str) -> None:
        """Binds grants to a principal, as the admin."""
        admin = self.admin()
        for grant in grants:
            admin.access.grant(grant=gavel.v1.access_pb2.AccessGrant(principal=principal, grant=grant))

    def _track(self, client: gavel.Client) -> gavel.Client:
        self._clients.append(client)
        return client

    def take_over(self) -> None:
        """Replaces `gavel dev` by three `gavel node` processes of our own, with the
        same command lines, data and certificates, so that one node can be killed
        without `gavel dev` stopping the others. Waits for a leader."""
        commands = [
            (Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1], os.readlink(f"/proc/{pid}/cwd"))
            for pid in self.node_pids
        ]
        _stop_process(self.dev)
        # gavel dev may exit before its nodes have let go of their ports; a
        # node of ours started meanwhile could not bind, and the old node
        # would keep answering in its place (and survive the test's kill).
        for pid in self.node_pids:
            eventually(f"gavel dev's node (pid {pid}) gone", lambda pid=pid: _gone(pid), timeout=STOP_GRACE_S * 2)
        self.node_pids = []
        for index, (argv, cwd) in enumerate(commands):
            log = open(self.data_dir / f"own-n{index + 1}.log", "ab")  # noqa: SIM115 (the node writes it until stopped)
            node = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            self._own_nodes.append(node)
            self.node_pids.append(node.pid)
        self.leader()
        exited = [node.pid for node in self._own_nodes if node.poll() is not None]
        assert not exited, f"our own nodes {exited} exited (see own-n*.log in {self.data_dir})"

    def leader(self) -> str:
        """The leader's endpoint, once a node names one. Right after a start or a
        kill there may be none for a moment (an election), and a test that needs
        the leader must wait for it rather than read it once."""
        admin = self.admin(retry_budget=2.0)

        def named() -> str | None:
            try:
                leader = admin.cluster.status(without_state_hash=True).leader_addr
            except gavel.GavelError:
                return None
            return leader if leader in self.endpoints else None

        return eventually("a leader among the nodes", named, timeout=START_TIMEOUT_S, every=0.2)

    def stop(self) -> None:
        """Stops the cluster by PID (SIGTERM, SIGKILL after the grace) and removes its data."""
        for client in self._clients:
            client.close()
        if not _stop_process(self.dev) and not self._own_nodes:
            for pid in self.node_pids:  # gavel dev did not stop its nodes in time
                _kill(pid, signal.SIGKILL)
        for node in self._own_nodes:
            _stop_process(node)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _gone(pid: int) -> bool | None:
    """True once process ``pid`` has exited (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return True if state == "Z" else None


def _stop_process(process: subprocess.Popen[bytes]) -> bool:
    """SIGTERM, then SIGKILL after the grace; True when it exited within the grace."""
    if process.poll() is not None:
        return True
    _kill(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_GRACE_S)
        return True
    except subprocess.TimeoutExpired:
        _kill(process.pid, signal.SIGKILL)
        process.wait()
        return False


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def eventually(what: str, check: Any, timeout: float = 10.0, every: float = 0.05) -> Any:
    """Waits until ``check()`` returns something other than None."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)
