// Reachability: how many of a cluster's voters answer, and whether that is a
// quorum, so "connect error" becomes "no leader: quorum lost (1 of 3 nodes
// reachable)" (the Rust SDK's crates/gavel-client/src/reach.rs).
import type { StatusResponse } from "./gen/gavel/v1/cluster_pb.js";
import type { Plain } from "./plain.js";

/** What a round of ClusterService/Status calls found. */
export class Reachability {
  constructor(
    /** Voters that answered. */
    readonly reachable: number,
    /** Voters of the membership, or the endpoints asked when no answer names one. */
    readonly voters: number,
    /** The node that reports itself leader at the highest term, if any. */
    readonly leader: number | undefined,
  ) {}

  /** Judges the answers of `asked` nodes (one per node that answered). */
  static of(answers: readonly Plain<StatusResponse>[], asked: number): Reachability {
    let newest: Plain<StatusResponse> | undefined;
    for (const answer of answers) {
      if (
        newest === undefined ||
        answer.term > newest.term ||
        (answer.term === newest.term && answer.lastAppliedIndex > newest.lastAppliedIndex)
      ) {
        newest = answer;
      }
    }
    const voterIds = (newest?.members ?? []).filter((member) => member.voter).map((member) => member.nodeId);
    const [reachable, voters] =
      voterIds.length === 0
        ? [answers.length, Math.max(asked, answers.length)]
        : [answers.filter((answer) => voterIds.includes(answer.nodeId)).length, voterIds.length];
    let leader: Plain<StatusResponse> | undefined;
    for (const answer of answers) {
      if (answer.role === "Leader" && (leader === undefined || answer.term > leader.term)) {
        leader = answer;
      }
    }
    return new Reachability(reachable, voters, leader?.nodeId);
  }

  /** Whether a majority of the voters answered. */
  hasQuorum(): boolean {
    return this.reachable * 2 > this.voters;
  }

  /** One line for an error message. */
  describe(): string {
    const counted = `${this.reachable} of ${this.voters} nodes reachable`;
    if (this.reachable === 0) {
      return `no node reachable (0 of ${this.voters} nodes)`;
    }
    if (!this.hasQuorum()) {
      return `no leader: quorum lost (${counted})`;
    }
    if (this.leader === undefined) {
      return `no leader elected yet (${counted})`;
    }
    return counted;
  }
}
