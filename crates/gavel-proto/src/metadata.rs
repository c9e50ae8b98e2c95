//! The gRPC metadata keys (HTTP/2 headers) of Gavel's API, in one place: the
//! server sets and reads them, the SDK reads them.

/// Response header naming the leader that served a call a follower
/// forwarded (`host:port`), so a client can send its next calls there
/// directly (one hop instead of two).
pub const LEADER: &str = "gavel-leader";

/// Request header marking a call a follower forwarded to the leader. A
/// forwarded call is never forwarded again, so routing cannot loop: a node
/// that is no longer the leader answers it `UNAVAILABLE` with a leader hint.
pub const FORWARDED: &str = "gavel-forwarded";

/// Request header carrying the request id the first node assigned to a call
/// whose caller gave none in the message. It is set before any forwarding,
/// so the leader and every retry of the forward see the same id; a request
/// id in the message takes precedence.
pub const REQUEST_ID: &str = "gavel-request-id";

/// Request header carrying the authenticated caller of a call a follower
/// forwarded (`kind:id`, then `;grant,grant` when a token down-scoped it).
/// The leader honours it only on a connection authenticated by a peer
/// certificate (a current cluster member); from anyone else it is refused.
pub const FORWARDED_FOR: &str = "gavel-forwarded-for";

/// Request header carrying a bearer token: `authorization: Bearer <jwt>`.
pub const AUTHORIZATION: &str = "authorization";
