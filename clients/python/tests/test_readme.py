"""The walk-through "The same refund from Python", run as docs/walkthroughs.md gives it.

README.md links that walk-through. Every command below is taken verbatim
from its section of docs/walkthroughs.md (the test fails if one is missing
there), run by bash in a work directory outside the repository, and its
output compared with the output the walk-through shows (``...`` matches
anything). The worker and the plain agent run from a fresh
virtual environment into which the wheel the suite built was installed,
outside the repository; the LangGraph and Agents SDK agents run from the
suite's environment, which has the frameworks.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import GAVEL_BIN, REPO_ROOT, TestCluster

#: The document that holds the walk-through, and its section.
WALKTHROUGHS = Path("docs") / "walkthroughs.md"
SECTION = "## The same refund from Python"
#: How long one agent may take from start to its last line, in seconds.
AGENT_TIMEOUT_S = 60.0
#: How long installing the wheel into a fresh venv may take.
INSTALL_TIMEOUT_S = 300


def readme_section() -> str:
    """The section, up to the next second-level heading or the end of the document."""
    text = (REPO_ROOT / WALKTHROUGHS).read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start:] if end == -1 else text[start:end]


def blocks(section: str) -> list[list[str]]:
    """The lines of every fenced code block of the section."""
    found = re.findall(r"```(?:console|sh)\n(.*?)```", section, re.DOTALL)
    return [[line.strip() for line in block.strip().splitlines()] for block in found]


def command(section: str, fragment: str) -> str:
    """The one ``$ `` command of the section that contains ``fragment``."""
    matches = [line[2:] for block in blocks(section) for line in block if line.startswith("$ ") and fragment in line]
    assert len(matches) == 1, f"{WALKTHROUGHS}'s {SECTION!r} has {len(matches)} commands with {fragment!r}"
    return matches[0]


def shown_output(section: str, fragment: str) -> list[str]:
    """The output lines the README shows under the command containing ``fragment``."""
    for block in blocks(section):
        for index, line in enumerate(block):
            if line.startswith("$ ") and fragment in line:
                output = []
                for following in block[index + 1 :]:
                    if following.startswith("$ "):
                        break
                    output.append(following)
                return output
    raise AssertionError(f"no command with {fragment!r}")


def matches(shown: str, actual: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, actual) is not None


class Shell:
    """Runs README commands with bash in a work directory, against the cluster."""

    def __init__(self, cluster: TestCluster, workdir: Path) -> None:
        self.workdir = workdir
        self.env = {
            **os.environ,
            **cluster.env,
            "PATH": f"{Path(GAVEL_BIN).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONUNBUFFERED": "1",
            "DECISION_WAIT_S": "60",
        }
        self.env.pop("PYTHONPATH", None)
        self.started: list[subprocess.Popen[str]] = []

    def script(self, line: str) -> str:
        return f"CERTS=$(dirname $GAVEL_CA)\n{line}"

    def run(self, line: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", self.script(line)],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def start(self, line: str) -> subprocess.Popen[str]:
        # A session of its own, so the test stops exactly the bash it started and its child.
        process = subprocess.Popen(
            ["bash", "-c", self.script(line)],
            cwd=self.workdir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.started.append(process)
        return process

    def stop_all(self) -> None:
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def read_line(process: subprocess.Popen[str], deadline: float, seen: list[str]) -> str | None:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    try:
        while time.monotonic() < deadline:
            if selector.select(timeout=0.2):
                line = process.stdout.readline()
                if not line:
                    return None
                seen.append(line.rstrip("\n"))
                return seen[-1]
        raise AssertionError("no output in time; so far:\n" + "\n".join(seen))
    finally:
        selector.unregister(process.stdout)


def wheel_path() -> Path:
    given = os.environ.get("GAVEL_PY_WHEEL")
    if given:
        return Path(given)
    wheels = sorted((REPO_ROOT / "target" / "python" / "dist").glob("gavel_client-*.whl"))
    assert wheels, "no wheel built: run clients/python/scripts/test.sh"
    return wheels[-1]


@pytest.fixture(scope="module")
def walkthrough(cluster: TestCluster) -> Iterator[dict[str, object]]:
    """Work directories, the wheel's fresh venv, the README's grants, and the running worker."""
    section = readme_section()
    with tempfile.TemporaryDirectory(prefix="gavel-py-readme-") as root:
        root_path = Path(root)
        fresh = root_path / "fresh-venv"
        venv.create(fresh, with_pip=True)
        installed = subprocess.run(
            [str(fresh / "bin" / "pip"), "install", "--quiet", "--prefer-binary", str(wheel_path())],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        assert installed.returncode == 0, installed.stdout + installed.stderr
        shells = {}
        for name, environment in (("wheel", fresh), ("frameworks", Path(sys.prefix))):
            workdir = root_path / name
            workdir.mkdir()
            (workdir / "clients").symlink_to(REPO_ROOT / "clients")
            (workdir / ".venv-gavel").symlink_to(environment)
            shells[name] = Shell(cluster, workdir)
        wheel_shell = shells["wheel"]
        for fragment in (
            "grant service:refund-app submitter",
            "grant worker:refunds worker",
            "grant user:bob-finance approver",
            "capability register clients/python/examples/capability.toml",
        ):
            done = wheel_shell.run(command(section, fragment))
            assert done.returncode == 0, done.stderr
        worker = wheel_shell.start(command(section, "refund_worker.py"))
        seen: list[str] = []
        first = read_line(worker, time.monotonic() + 30, seen)
        assert first is not None and first.startswith("refund worker: polling orders.refund.py at "), seen
        try:
            yield {"section": section, "shells": shells, "fresh": fresh}
        finally:
            for shell in shells.values():
                shell.stop_all()


def approve(section: str, shell: Shell, approval_id: str) -> None:
    """Step 5: Bob approves from the CLI, with his own token."""
    export = command(section, "export GAVEL_TOKEN=$(gavel token issue --certs-dir $CERTS --sub user:bob-finance)")
    approve_line = command(section, "gavel approval approve apr_refund-py-o-42")
    decided = shell.run(f"{export}\n{approve_line.replace('apr_refund-py-o-42', approval_id)}")
    assert decided.returncode == 0, decided.stderr
    assert "status         approved" in decided.stdout


def run_agent(section: str, shell: Shell, fragment: str) -> list[str]:
    """Runs the agent command, approves what it asks for, and returns all its output lines."""
    agent = shell.start(command(section, fragment))
    deadline = time.monotonic() + AGENT_TIMEOUT_S
    seen: list[str] = []
    while (line := read_line(agent, deadline, seen)) is not None:
        if line.startswith("approval required: "):
            approve(section, shell, line.removeprefix("approval required: "))
    assert agent.wait(timeout=10) == 0, "\n".join(seen)
    return seen


def assert_shown(shown: list[str], seen: list[str]) -> None:
    """Every line the README shows appears, in order, in what the command printed."""
    position = 0
    for expected in shown:
        while position < len(seen) and not matches(expected, seen[position]):
            position += 1
        assert position < len(seen), f"README shows {expected!r}; the command printed:\n" + "\n".join(seen)
        position += 1


def test_the_plain_refund_runs_from_the_wheel_in_a_fresh_venv_as_the_readme_gives_it(
    walkthrough: dict[str, object],
) -> None:
    section = str(walkthrough["section"])
    shell = walkthrough["shells"]["wheel"]  # type: ignore[index]
    fresh = Path(str(walkthrough["fresh"]))
    where = subprocess.run(
        [str(fresh / "bin" / "python"), "-c", "import gavel, sys; print(gavel.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=shell.workdir,
    ).stdout.strip()
    assert where.startswith(str(fresh)) and not where.startswith(str(REPO_ROOT)), where
    seen = run_agent(section, shell, "refund_agent.py o-42 1250")
    resumed_block = next(block for block in blocks(section) if block and block[0].startswith("approved; resumed"))
    assert_shown(shown_output(section, "refund_agent.py o-42 1250") + resumed_block, seen)
    again = shell.run(
        "export GAVEL_TOKEN=$(gavel token issue --certs-dir $CERTS --sub service:refund-app)\n"
        "env -u GAVEL_CERT -u GAVEL_KEY gavel exec resume apr_refund-py-o-42"
    )
    assert again.returncode == 3 and "APPROVAL_CONSUMED" in again.stderr, again.stderr


def test_the_langgraph_refund_runs_as_the_readme_gives_it(walkthrough: dict[str, object]) -> None:
    section = str(walkthrough["section"])
    seen = run_agent(section, walkthrough["shells"]["frameworks"], "langgraph_refund.py o-43 990")  # type: ignore[index]
    assert_shown(shown_output(section, "langgraph_refund.py o-43 990"), seen)


def test_the_openai_agents_refund_runs_as_the_readme_gives_it(walkthrough: dict[str, object]) -> None:
    section = str(walkthrough["section"])
    seen = run_agent(section, walkthrough["shells"]["frameworks"], "openai_agents_refund.py o-44 500")  # type: ignore[index]
    assert_shown(shown_output(section, "openai_agents_refund.py o-44 500"), seen)
