"""Reachability: how many of a cluster's voters answer, and whether that is a quorum.

It turns "connection refused" into what a user can act on: "no leader:
quorum lost (1 of 3 nodes reachable)"; the same judgement as the Rust SDK's
crates/gavel-client/src/reach.rs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gavel.v1 import cluster_pb2


@dataclass(frozen=True)
class Reachability:
    """What a round of ClusterService/Status calls found."""

    #: Voters that answered.
    reachable: int
    #: Voters of the membership (as the newest answer knows it), or the number of endpoints asked.
    voters: int
    #: The node that reports itself leader at the highest term, if any.
    leader: int | None

    @staticmethod
    def of(answers: Sequence[cluster_pb2.StatusResponse], asked: int) -> Reachability:
        """Judges the answers of ``asked`` nodes (one per node that answered)."""
        newest = max(answers, key=lambda status: (status.term, status.last_applied_index), default=None)
        voter_ids = [member.node_id for member in newest.members if member.voter] if newest is not None else []
        if voter_ids:
            reachable = sum(1 for status in answers if status.node_id in voter_ids)
            voters = len(voter_ids)
        else:
            reachable, voters = len(answers), max(asked, len(answers))
        leaders = [status for status in answers if status.role == "Leader"]
        leader = max(leaders, key=lambda status: status.term).node_id if leaders else None
        return Reachability(reachable=reachable, voters=voters, leader=leader)

    @property
    def has_quorum(self) -> bool:
        """Whether a majority of the voters answered."""
        return self.reachable * 2 > self.voters

    def describe(self) -> str:
        """One line for an error message: why no leader can serve, or how many nodes answered."""
        counted = f"{self.reachable} of {self.voters} nodes reachable"
        if self.reachable == 0:
            return f"no node reachable (0 of {self.voters} nodes)"
        if not self.has_quorum:
            return f"no leader: quorum lost ({counted})"
        if self.leader is None:
            return f"no leader elected yet ({counted})"
        return counted
