//! `gavel bench`: closed-loop load against a durable three-node cluster.
