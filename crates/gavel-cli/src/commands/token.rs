//! `gavel token issue`: a bearer token (JWT, EdDSA) signed with the
//! cluster's token key, for clients that authenticate without a certificate.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use gavel_pki::limits::{TOKEN_LIFETIME_MAX_CEILING, TOKEN_LIFETIME_MAX_DEFAULT};
use gavel_pki::{check_claims, CertsDir, GrantName, Principal, TokenClaims, TokenKey, DEFAULT_AUDIENCE};

use super::CommandError;

/// `gavel token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// The verbs of `gavel token`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a signed token for a principal on standard output.
    Issue {
        /// The principal (kind:id), the token's `sub`.
        #[arg(long, value_parser = Principal::parse)]
        sub: Principal,
        /// Limit the token to these grants (comma-separated); it can only
        /// narrow what the principal is granted.
        #[arg(long, value_delimiter = ',', value_parser = parse_role)]
        roles: Option<Vec<GrantName>>,
        /// How long the token is valid: 90s, 30m, 12h, 7d (a bare number is
        /// seconds); at most --lifetime-max.
        #[arg(long, default_value = "1h", value_parser = parse_ttl)]
        ttl: Duration,
        /// The nodes' --token-lifetime-max (default 24h): a token living longer
        /// would be refused by them, so it is not issued.
        #[arg(long, value_name = "DURATION", value_parser = parse_lifetime_max)]
        lifetime_max: Option<Duration>,
        /// The audience (`aud`), as the nodes' --token-audience.
        #[arg(long, default_value = DEFAULT_AUDIENCE)]
        audience: String,
        /// The signing key (Ed25519 PKCS#8 PEM). Default: token.key in --certs-dir.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// The certificate directory holding token.key.
        #[arg(long, env = "GAVEL_CERTS_DIR", value_name = "DIR", default_value = "certs")]
        certs_dir: PathBuf,
    },
}

fn parse_role(text: &str) -> Result<GrantName, String> {
    GrantName::parse(text).ok_or_else(|| format!("unknown grant {text:?}"))
}

/// Parses a token lifetime bound like [`parse_ttl`], at most
/// [`TOKEN_LIFETIME_MAX_CEILING`] (`--token-lifetime-max`, `--lifetime-max`).
pub(crate) fn parse_lifetime_max(text: &str) -> Result<Duration, String> {
    let lifetime = parse_ttl(text)?;
    if lifetime > TOKEN_LIFETIME_MAX_CEILING {
        return Err(format!(
            "{text:?} is over the ceiling of {} days: a credential meant to live longer should be a client certificate",
            TOKEN_LIFETIME_MAX_CEILING.as_secs() / 86_400
        ));
    }
    Ok(lifetime)
}

/// Parses `90s`, `30m`, `12h`, `7d` or a bare number of seconds.
pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit_seconds) = match text.char_indices().last() {
        Some((index, 's')) => (&text[..index], 1),
        Some((index, 'm')) => (&text[..index], 60),
        Some((index, 'h')) => (&text[..index], 3600),
        Some((index, 'd')) => (&text[..index], 86_400),
        _ => (text, 1),
    };
    let count: u64 = number.parse().map_err(|_| format!("ttl {text:?} is not like 90s, 30m, 12h or 7d"))?;
    let seconds = count.checked_mul(unit_seconds).filter(|seconds| *seconds > 0);
    seconds.map(Duration::from_secs).ok_or_else(|| format!("ttl {text:?} must be positive and reasonable"))
}

/// Runs one `gavel token` command.
pub fn run(args: TokenArgs) -> Result<(), CommandError> {
    match args.command {
        TokenCommand::Issue { sub, roles, ttl, lifetime_max, audience, key, certs_dir } => {
            let mut claims = TokenClaims::new(&sub, &audience, ttl);
            if let Some(roles) = roles {
                claims = claims.with_roles(&roles);
            }
            // The rules a node applies: refuse here what every node would refuse.
            check_claims(&claims, claims.iat, lifetime_max.unwrap_or(TOKEN_LIFETIME_MAX_DEFAULT))
                .map_err(|refusal| CommandError::Usage(format!("not issuing this token: {refusal}")))?;
            let path = key.unwrap_or_else(|| CertsDir::new(certs_dir).token_key());
            let key = TokenKey::load_file(&path).with_context(|| {
                format!("loading the token key {} (`gavel cert create-ca` creates one)", path.display())
            })?;
            let token = key.issue(&claims).context("signing the token")?;
            println!("{token}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_take_a_unit() {
        assert_eq!(parse_ttl("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_ttl("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_ttl("12h"), Ok(Duration::from_secs(43_200)));
        assert_eq!(parse_ttl("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_ttl("60"), Ok(Duration::from_secs(60)));
        for bad in ["", "h", "0s", "-1h", "1y", "99999999999999999999d"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn lifetime_bounds_stop_at_the_ceiling() {
        assert_eq!(parse_lifetime_max("7d"), Ok(Duration::from_secs(604_800)));
        assert_eq!(parse_lifetime_max("366d"), Ok(TOKEN_LIFETIME_MAX_CEILING));
        let refused = parse_lifetime_max("367d").expect_err("over the ceiling");
        assert!(refused.contains("client certificate"), "{refused}");
        assert!(parse_lifetime_max("0s").is_err());
    }
}
