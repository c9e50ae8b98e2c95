"""Session fixtures: one secured three-node cluster for the whole Python run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cluster import TestCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[TestCluster]:
    started = TestCluster.start()
    try:
        yield started
    finally:
        started.stop()
