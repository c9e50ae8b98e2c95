//! Every bound on credentials, one constant per bound, each with its reason.
//! The node checks the token bounds when it verifies a token
//! ([`crate::TokenVerifier::verify`]), before a call reaches any service, so
//! no command from a refused token is ever proposed.

use std::time::Duration;

/// How far the clocks of a token's issuer and of the node may disagree: a
/// token is still accepted this long after its `exp`, and already accepted
/// this long before its `nbf` or `iat`. Room for ordinary clock drift
/// between machines, small next to any sensible token lifetime.
pub const TOKEN_CLOCK_SKEW_SECONDS: u64 = 30;

/// The longest lifetime (`exp − iat`) a node accepts unless
/// `gavel node --token-lifetime-max` says otherwise, and the longest
/// `gavel token issue` mints unless told otherwise: a working day and then
/// some. A token cannot be revoked by itself (only its principal's grants
/// can), so a stolen one must stop working soon.
pub const TOKEN_LIFETIME_MAX_DEFAULT: Duration = Duration::from_secs(24 * 3600);

/// The most `--token-lifetime-max` may be set to: 366 days. A credential
/// meant to live longer should be a client certificate, which the cluster
/// CA can be rotated away from.
pub const TOKEN_LIFETIME_MAX_CEILING: Duration = Duration::from_secs(366 * 24 * 3600);

/// The most days a certificate may be valid for (`gavel cert --days`):
/// 100 years keeps its not-after date far inside X.509's year 9999 and the
/// date arithmetic from overflowing.
pub const CERTIFICATE_DAYS_MAX: u32 = 36_500;
