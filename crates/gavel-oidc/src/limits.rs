//! Every bound on talking to an OpenID Provider, one constant per bound,
//! each with its reason. The token's own time rules use the clock skew the
//! caller passes in (the nodes and the console pass
//! `gavel_pki::limits::TOKEN_CLOCK_SKEW_SECONDS`, the bound Gavel's own
//! tokens use), so there is one skew for every token a node accepts; a node
//! also passes its `--token-lifetime-max` (see
//! [`ID_TOKEN_LIFETIME_MAX_DEFAULT`]).

use std::time::Duration;

/// The shortest time between two JWKS fetches. A token naming an unknown
/// `kid` makes the verifier fetch the provider's JWKS again (the provider
/// may have rotated its keys), but at most this often: otherwise anyone
/// could make a node hammer the provider by sending tokens with made-up
/// `kid`s. A rotation is picked up within this long.
pub const JWKS_REFRESH_INTERVAL_MIN: Duration = Duration::from_secs(10);

/// How long one HTTP exchange with the provider (discovery, JWKS, token
/// endpoint) may take, connect to last byte: a provider that does not answer
/// fails the sign-in or the token instead of holding a call.
pub const PROVIDER_HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest answer read from the provider: a discovery document or JWKS
/// is a few KiB; a larger one is refused rather than held in memory.
pub const PROVIDER_RESPONSE_BYTES_MAX: usize = 256 * 1024;

/// The longest bearer token the verifier parses. ID tokens are a few KiB;
/// the bound stops work on a huge header before any signature check.
pub const ID_TOKEN_BYTES_MAX: usize = 16 * 1024;

/// The most signing keys kept from one JWKS: providers publish a handful
/// (current and next); more is refused as a misconfiguration.
pub const JWKS_KEYS_MAX: usize = 64;

/// The longest lifetime (`exp − iat`) an ID token may have unless the
/// caller sets another ([`crate::Provider::with_lifetime_max`]; a node
/// passes its `--token-lifetime-max`). An ID token is a bearer like Gavel's
/// own tokens and no more revocable, so it gets the same bound: this is
/// `gavel_pki::limits::TOKEN_LIFETIME_MAX_DEFAULT` (24 h), written again
/// because this crate depends on none of Gavel's (gavel-server's tests
/// check that the two agree). Providers issue ID tokens for minutes to an
/// hour; one that lives for years is what a misconfigured provider or the
/// holder of a stolen signing key makes.
pub const ID_TOKEN_LIFETIME_MAX_DEFAULT: Duration = Duration::from_secs(24 * 3600);
