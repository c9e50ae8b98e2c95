//! When the client retries a refused attempt, and how long it waits first.
//!
//! A node sheds load with `RESOURCE_EXHAUSTED` and a `retry_after_ms` in
//! the error detail (the server's overload protection). The client treats
//! that like `UNAVAILABLE`: it retries the same call with the same request id
//! after at least the hinted delay, within the call's retry budget. Every
//! pause gets random jitter, so that two thousand clients refused at the same
//! moment do not all come back at the same moment.

use std::time::Duration;

use gavel_proto::error_detail::read_error_detail;
use tonic::{Code, Status};

/// Whether `status` is a node's overload refusal, which a retry after its
/// hinted delay may get past: `RESOURCE_EXHAUSTED` with a `retry_after_ms`.
/// That includes a principal over its write rate (`QUOTA_EXCEEDED`,
/// `quota_kind` `write_rate`, the hint is when its bucket holds a token),
/// but not one over a count quota (`QUOTA_EXCEEDED` without a hint: only
/// finishing or cancelling records helps, so it is not retried).
/// Any other `RESOURCE_EXHAUSTED` (a message over a size limit, say) stays
/// refused however often it is sent.
pub(crate) fn is_overload(status: &Status) -> bool {
    status.code() == Code::ResourceExhausted
        && read_error_detail(status).is_some_and(|detail| detail.retry_after_ms.is_some())
}

/// The message tonic gives a status it made from an HTTP/2 error (a
/// `GOAWAY` or `RST_STREAM` from the peer), not from a gRPC answer.
const H2_ERROR_PREFIX: &str = "h2 protocol error:";

/// Whether `status` is the transport's `ENHANCE_YOUR_CALM`: the node's
/// HTTP/2 layer reset the stream or the connection (it limits how many
/// streams a client may reset, for example), and tonic reports that as
/// `RESOURCE_EXHAUSTED` with no Gavel error detail. No Gavel handler
/// answered, so it is retried like `UNAVAILABLE`, with the same request id
/// (a fill of `gavel-lab bench --scale` once failed on one). A
/// `RESOURCE_EXHAUSTED` with a detail, or from tonic's own message-size
/// checks, is not this.
pub(crate) fn is_transport_reset(status: &Status) -> bool {
    status.code() == Code::ResourceExhausted
        && read_error_detail(status).is_none()
        && status.message().starts_with(H2_ERROR_PREFIX)
}

/// `pause` plus a random extra of up to half of it: a retry never comes
/// earlier than the pause (which already honours the node's
/// `retry_after_ms`), and the retries of many clients spread out.
pub(crate) fn jittered(pause: Duration) -> Duration {
    // A v4 uuid is 122 random bits from the OS; the low 32 are plenty here,
    // and the SDK needs no random-number crate for them.
    jittered_by(pause, uuid::Uuid::new_v4().as_u128() as u32)
}

/// [`jittered`] with the random extra taken from `random`.
pub(crate) fn jittered_by(pause: Duration, random: u32) -> Duration {
    let extra = pause.mul_f64(f64::from(random) / f64::from(u32::MAX) / 2.0);
    pause + extra
}

/// A seeded sequence of jitter values (SplitMix64), for a client whose
/// retries a simulator replays ([`crate::ClientConfig::jitter_seed`]).
#[derive(Debug)]
pub(crate) struct SeededJitter(std::sync::Mutex<u64>);

impl SeededJitter {
    pub(crate) fn new(seed: u64) -> SeededJitter {
        SeededJitter(std::sync::Mutex::new(seed))
    }

    /// The next 32 random bits of the sequence.
    pub(crate) fn next(&self) -> u32 {
        let mut state = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 32) as u32
    }
}

/// A node's overload refusal, as the server makes it: `RESOURCE_EXHAUSTED`
/// with a 50 ms `retry_after_ms` (for the tests of this crate).
#[cfg(test)]
pub(crate) fn overload_refusal() -> Status {
    gavel_proto::error_detail::domain_status(
        Code::ResourceExhausted,
        "RESOURCE_EXHAUSTED",
        "this node is overloaded",
        Vec::new(),
        Some(50),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_with_a_retry_hint_is_an_overload() {
        assert!(is_overload(&overload_refusal()));
        assert!(!is_overload(&Status::resource_exhausted("message too large")));
        assert!(!is_overload(&Status::unavailable("no leader")));
    }

    #[test]
    fn a_write_rate_refusal_is_retried_after_its_hint_and_a_count_refusal_is_not() {
        let quota = |retry_after_ms: Option<u64>| {
            let detail = gavel_proto::v1::ErrorDetail {
                code: "QUOTA_EXCEEDED".to_string(),
                message: "over quota".to_string(),
                retry_after_ms,
                quota_kind: Some(if retry_after_ms.is_some() { "write_rate" } else { "pending_approvals" }.to_string()),
                ..Default::default()
            };
            gavel_proto::error_detail::detail_status(Code::ResourceExhausted, detail)
        };
        assert!(is_overload(&quota(Some(250))));
        assert!(!is_overload(&quota(None)));
        assert!(!is_transport_reset(&quota(None)));
    }

    #[test]
    fn only_an_http2_reset_without_a_gavel_detail_is_a_transport_reset() {
        let calm =
            Status::resource_exhausted("h2 protocol error: http2 error: connection error received: ENHANCE_YOUR_CALM");
        assert!(is_transport_reset(&calm));
        assert!(!is_transport_reset(&Status::resource_exhausted(
            "Error, decoded message length too large: found 5000000 bytes, the limit is: 4194304 bytes"
        )));
        let refusal = gavel_proto::error_detail::domain_status(
            Code::ResourceExhausted,
            "LIMIT_EXCEEDED",
            "h2 protocol error: a message that only looks like one",
            Vec::new(),
            None,
            None,
        );
        assert!(!is_transport_reset(&refusal));
        assert!(!is_transport_reset(&Status::internal("h2 protocol error: stream reset")));
    }

    #[test]
    fn jitter_never_shortens_a_pause_and_adds_at_most_half() {
        let pause = Duration::from_millis(100);
        let pauses: Vec<Duration> = (0..200).map(|_| jittered(pause)).collect();
        assert!(pauses.iter().all(|jittered| *jittered >= pause && *jittered <= pause * 3 / 2), "{pauses:?}");
        let distinct: std::collections::BTreeSet<Duration> = pauses.into_iter().collect();
        assert!(distinct.len() > 100, "jitter varies: {} distinct pauses", distinct.len());
    }
}
