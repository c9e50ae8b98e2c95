//! How long a certificate is valid.

use time::{Duration, OffsetDateTime};

use crate::limits::CERTIFICATE_DAYS_MAX;
use crate::PkiError;

/// The validity window of a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// Not valid before this instant.
    pub not_before: OffsetDateTime,
    /// Not valid after this instant.
    pub not_after: OffsetDateTime,
}

/// How far before "now" a new certificate becomes valid, so that a peer
/// whose clock is a little behind accepts it at once.
const BACKDATE_MINUTES: i64 = 5;

impl Validity {
    /// Valid from (a few minutes before) now for `days` days.
    pub fn days(days: u32) -> Validity {
        let now = OffsetDateTime::now_utc();
        Validity { not_before: now - Duration::minutes(BACKDATE_MINUTES), not_after: now + Duration::days(days.into()) }
    }

    /// Valid for `days` days, refused ([`PkiError::Days`]) unless 1 to
    /// [`CERTIFICATE_DAYS_MAX`]: a 0-day certificate would be expired when
    /// written, and an unbounded count overflows the date.
    pub fn checked_days(days: u32) -> Result<Validity, PkiError> {
        if days == 0 || days > CERTIFICATE_DAYS_MAX {
            return Err(PkiError::Days(days));
        }
        Ok(Validity::days(days))
    }

    /// Expired yesterday: for tests that a handshake refuses expired certificates.
    pub fn expired() -> Validity {
        let now = OffsetDateTime::now_utc();
        Validity { not_before: now - Duration::days(2), not_after: now - Duration::days(1) }
    }

    /// The default for a CA: ten years.
    pub fn authority_default() -> Validity {
        Validity::days(3650)
    }

    /// The default for node and client certificates: one year.
    pub fn leaf_default() -> Validity {
        Validity::days(365)
    }
}
