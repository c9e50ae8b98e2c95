//! [`Reachability`]: how many of a cluster's voters answer, and whether that
//! is a quorum. It turns "tcp connect error" into what a user can act on:
//! "no leader: quorum lost (1 of 3 nodes reachable)".

use gavel_proto::v1 as pb;

/// What a round of `ClusterService/Status` calls found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reachability {
    /// Voters that answered.
    pub reachable: usize,
    /// Voters of the membership (as the most recent answer knows it), or the
    /// number of endpoints asked when no answer names a membership.
    pub voters: usize,
    /// The node that reports itself leader at the highest term, if any
    /// answering node does (a leader cut off from its quorum may still say
    /// so; see [`Reachability::has_quorum`]).
    pub leader: Option<u64>,
}

impl Reachability {
    /// Judges the answers of `asked` nodes (one per node that answered).
    pub fn of<'a>(answers: impl IntoIterator<Item = &'a pb::StatusResponse>, asked: usize) -> Reachability {
        let answers: Vec<&pb::StatusResponse> = answers.into_iter().collect();
        let newest = answers.iter().max_by_key(|status| (status.term, status.last_applied_index));
        let voter_ids: Vec<u64> = newest
            .map(|status| status.members.iter().filter(|member| member.voter).map(|member| member.node_id).collect())
            .unwrap_or_default();
        let (reachable, voters) = if voter_ids.is_empty() {
            (answers.len(), asked.max(answers.len()))
        } else {
            let reachable = answers.iter().filter(|status| voter_ids.contains(&status.node_id)).count();
            (reachable, voter_ids.len())
        };
        let leader = answers
            .iter()
            .filter(|status| status.role == "Leader")
            .max_by_key(|status| status.term)
            .map(|status| status.node_id);
        Reachability { reachable, voters, leader }
    }

    /// Whether a majority of the voters answered.
    pub fn has_quorum(&self) -> bool {
        self.reachable * 2 > self.voters
    }

    /// One line for an error message: why no leader can serve, or how many
    /// nodes answered.
    pub fn describe(&self) -> String {
        let counted = format!("{} of {} nodes reachable", self.reachable, self.voters);
        if self.reachable == 0 {
            format!("no node reachable (0 of {} nodes)", self.voters)
        } else if !self.has_quorum() {
            format!("no leader: quorum lost ({counted})")
        } else if self.leader.is_none() {
            format!("no leader elected yet ({counted})")
        } else {
            counted
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(node_id: u64, role: &str, term: u64) -> pb::StatusResponse {
        pb::StatusResponse {
            node_id,
            role: role.to_string(),
            term,
            members: (1..=3).map(|id| pb::Member { node_id: id, addr: format!("n{id}"), voter: true }).collect(),
            ..pb::StatusResponse::default()
        }
    }

    #[test]
    fn a_lone_node_that_still_calls_itself_leader_has_lost_quorum() {
        let lone = [status(1, "Leader", 3)];
        let reach = Reachability::of(&lone, 3);
        assert!(!reach.has_quorum());
        assert_eq!(reach.describe(), "no leader: quorum lost (1 of 3 nodes reachable)");
        let two = [status(1, "Leader", 3), status(2, "Follower", 3)];
        assert_eq!(Reachability::of(&two, 3).describe(), "2 of 3 nodes reachable");
        assert_eq!(Reachability::of([], 3).describe(), "no node reachable (0 of 3 nodes)");
    }
}
