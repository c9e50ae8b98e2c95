//! The openraft type configuration and every openraft type alias the crate uses.
//!
//! This module (with `storage`, `network` and `service`, which build on it) is
//! the only place openraft appears. Nothing here is public: the server crate
//! talks to [`crate::RaftNode`] in terms of opaque byte strings and plain
//! structs, so it never needs openraft.

use std::fmt;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

openraft::declare_raft_types!(
    /// Gavel's Raft types: opaque commands in, opaque replies out, nodes known
    /// by their gRPC address. Everything else (term, leader id, vote, entry)
    /// is openraft's default: a `u64` term and the "advanced" leader id, whose
    /// bincode layout is the same as openraft 0.9's.
    pub(crate) TypeConfig:
        D = Command,
        R = Reply,
        NodeId = u64,
        Node = openraft::BasicNode,
        AsyncRuntime = crate::runtime::GavelRuntime,
);

/// A node id.
pub(crate) type NodeId = u64;
/// A node as stored in the membership: its gRPC address.
pub(crate) type Node = openraft::BasicNode;
/// The leader id a log id carries (term and node id).
pub(crate) type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, NodeId>;
/// A log entry.
pub(crate) type Entry = openraft::Entry<LeaderId, openraft::EntryPayload<Command, NodeId, Node>>;
/// A log id (term, leader and index).
pub(crate) type LogId = openraft::LogId<LeaderId>;
/// A vote (term and candidate).
pub(crate) type Vote = openraft::impls::Vote<LeaderId>;

/// The plain form of a vote, for the crate's users.
pub(crate) fn vote_mark(vote: &Vote) -> crate::VoteMark {
    crate::VoteMark { term: vote.leader_id.term, node_id: vote.leader_id.node_id, committed: vote.committed }
}
/// A membership with the log id that introduced it.
pub(crate) type StoredMembership = openraft::StoredMembership<LeaderId, NodeId, Node>;
/// Snapshot metadata: last included log id and membership.
pub(crate) type SnapshotMeta = openraft::SnapshotMeta<LeaderId, NodeId, Node>;
/// Raft metrics published by openraft.
pub(crate) type RaftMetrics = openraft::RaftMetrics<TypeConfig>;

/// An encoded application command: the payload of a normal log entry.
///
/// Serialized as one byte string (not a sequence of numbers) so bincode
/// copies it in one go.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct Command(pub(crate) Vec<u8>);

/// An encoded application reply, produced by applying a [`Command`].
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct Reply(pub(crate) Vec<u8>);

// Log lines must not dump whole commands: print their size only.
impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command({} bytes)", self.0.len())
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reply({} bytes)", self.0.len())
    }
}

macro_rules! serde_as_bytes {
    ($ty:ident) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_bytes(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                deserializer.deserialize_byte_buf(BytesVisitor).map($ty)
            }
        }
    };
}

serde_as_bytes!(Command);
serde_as_bytes!(Reply);

/// Accepts a byte string in any of the shapes a serde format may hand out.
struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte string")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(byte) = seq.next_element()? {
            bytes.push(byte);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_round_trips_through_bincode_as_a_length_prefixed_byte_string() {
        let command = Command(vec![1, 2, 3, 255]);
        let encoded = bincode::serialize(&command).expect("encode");
        // bincode 1: u64 length prefix, then the raw bytes.
        assert_eq!(encoded.len(), 8 + 4);
        let decoded: Command = bincode::deserialize(&encoded).expect("decode");
        assert_eq!(decoded, command);
    }

    /// openraft 0.10's vote request ends in a `leadership_transfer` flag
    /// that 0.9's did not have. bincode reads a struct as a fixed tuple, so
    /// `#[serde(default)]` does not help: a 0.9 node's vote request (the
    /// same bytes without the flag) does not decode. A cluster moves from 0.9
    /// to 0.10 all at once, never node by node.
    #[test]
    fn a_vote_request_without_the_0_10_transfer_flag_does_not_decode() {
        let request = openraft::raft::VoteRequest::<TypeConfig>::new(Vote::new(3, 1), None);
        let encoded = bincode::serialize(&request).expect("encode");
        let decoded: openraft::raft::VoteRequest<TypeConfig> = bincode::deserialize(&encoded).expect("decode");
        assert_eq!(decoded, request);
        let as_0_9 = &encoded[..encoded.len() - 1];
        assert!(bincode::deserialize::<openraft::raft::VoteRequest<TypeConfig>>(as_0_9).is_err());
    }
}
