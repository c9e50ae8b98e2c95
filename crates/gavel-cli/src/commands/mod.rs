//! The operator and approver commands of the `gavel` binary, noun then verb:
//! `gavel approval|capability|exec|audit|cluster|access|policy|backup <verb>`, and the
//! offline credential commands `gavel cert|token <verb>` (and `gavel backup
//! restore|inspect`, which work on files only), and `gavel codes`, the
//! catalogue of stable codes.
//!
//! Each command is a thin shell over the `gavel-client` SDK: it builds one
//! request, prints the answer as an aligned table or, with `--json`, as a
//! stable JSON document ([`output`]), and turns the outcome into an exit code
//! ([`finish`]). The commands and exit codes are documented in `docs/cli.md`.

pub mod access;
pub mod approval;
pub mod audit;
mod audit_proof;
pub mod backup;
pub mod capability;
pub mod cert;
pub mod cluster;
pub mod codes;
pub mod exec;
pub mod mcp;
pub mod output;
pub mod paging;
pub mod policy;
pub mod token;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use gavel_client::{pb, Client, ClientConfig, Credentials};
use gavel_core::ErrorCode;

/// The endpoints of `gavel dev`, used when neither `--endpoints` nor
/// `GAVEL_ENDPOINTS` is given.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403";

/// Exit code: the command did what it was asked.
pub const EXIT_OK: u8 = 0;
/// Exit code: anything not covered by another code (local I/O, a wait that
/// timed out, an unexpected answer).
pub const EXIT_OTHER: u8 = 1;
/// Exit code: the command line is wrong (clap uses 2 for its own errors).
pub const EXIT_USAGE: u8 = 2;
/// Exit code: the request was refused with a domain code (by the cluster, or
/// by the CLI's own check of a capability file before sending it).
pub const EXIT_REFUSED: u8 = 3;
/// Exit code: no node could serve the request within the retry budget.
pub const EXIT_UNREACHABLE: u8 = 4;

/// Options shared by every operator command; they may appear before or after
/// the verb.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Cluster nodes to talk to, comma-separated `host:port`. Any node works;
    /// the client follows the leader.
    #[arg(long, env = "GAVEL_ENDPOINTS", default_value = DEFAULT_ENDPOINTS, global = true)]
    pub endpoints: String,
    /// Who you act as: `kind:id` with kind user, service, automation or
    /// anonymous (`user:alice`, `service:billing`); a bare `alice` is a user.
    /// Default over TLS: the principal your credentials name (naming another
    /// needs the act-for grant); with --insecure: `user:$USER`, or `user:cli`
    /// when USER is unset.
    #[arg(long = "as", env = "GAVEL_ACTOR", value_name = "ACTOR", value_parser = parse_actor, global = true)]
    pub actor: Option<pb::Actor>,
    /// Print JSON (one document; JSON Lines for `audit tail`) instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// How long a call keeps retrying while no node answers or no leader is
    /// elected, before giving up with exit code 4 (ms).
    #[arg(long, env = "GAVEL_RETRY_BUDGET_MS", default_value_t = 10_000, global = true)]
    pub retry_budget_ms: u64,
    /// The cluster CA certificate (PEM): with it the endpoints are dialled
    /// over TLS. `gavel dev` prints the export line that sets it.
    #[arg(long, env = "GAVEL_CA", value_name = "FILE", global = true)]
    pub ca: Option<PathBuf>,
    /// Your client certificate (PEM); its SAN URI gavel://kind/id is who you are.
    #[arg(long, env = "GAVEL_CERT", value_name = "FILE", global = true)]
    pub cert: Option<PathBuf>,
    /// The private key of --cert (PEM).
    #[arg(long, env = "GAVEL_KEY", value_name = "FILE", global = true)]
    pub key: Option<PathBuf>,
    /// A bearer token (JWT) to authenticate with instead of a certificate.
    #[arg(long, env = "GAVEL_TOKEN", value_name = "JWT", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the bearer token.
    #[arg(long, env = "GAVEL_TOKEN_FILE", value_name = "FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// Dial plaintext, for a node started with --insecure.
    #[arg(long, env = "GAVEL_INSECURE", global = true)]
    pub insecure: bool,
}

impl GlobalArgs {
    /// The endpoints as a list.
    pub fn endpoint_list(&self) -> Vec<String> {
        self.endpoints.split(',').map(str::trim).filter(|endpoint| !endpoint.is_empty()).map(String::from).collect()
    }

    /// Where the credentials come from: the flags, or their `GAVEL_*` variables.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            ca: self.ca.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            token: self.token.clone(),
            token_file: self.token_file.clone(),
            insecure: self.insecure,
        }
    }

    /// The client timings and credentials these options ask for.
    pub fn client_config(&self) -> Result<ClientConfig, CommandError> {
        let timings =
            ClientConfig { retry_budget: Duration::from_millis(self.retry_budget_ms), ..ClientConfig::default() };
        self.with_credentials(timings)
    }

    /// `config` with these options' TLS and token.
    pub fn with_credentials(&self, config: ClientConfig) -> Result<ClientConfig, CommandError> {
        self.credentials().apply(config).map_err(|error| match error {
            gavel_client::Error::Config(reason) => CommandError::Usage(reason),
            other => other.into(),
        })
    }

    /// A client for the configured endpoints.
    pub fn client(&self) -> Result<Client, CommandError> {
        let endpoints = self.endpoint_list();
        if endpoints.is_empty() {
            return Err(CommandError::Usage("--endpoints names no endpoint".to_string()));
        }
        let config = self.client_config()?;
        Client::with_config(&endpoints, config).map_err(|error| match error {
            gavel_client::Error::Config(reason) => CommandError::Usage(format!("invalid --endpoints: {reason}")),
            other => other.into(),
        })
    }

    /// The actor to name: `--as` or `GAVEL_ACTOR` when given. Otherwise,
    /// against a TLS cluster (`--ca`), none: the cluster takes the
    /// authenticated principal (naming anyone else needs the `act-for`
    /// grant); against an `--insecure` one, `user:$USER`, else `user:cli`.
    pub fn actor(&self) -> Option<pb::Actor> {
        if let Some(actor) = &self.actor {
            return Some(actor.clone());
        }
        if self.ca.is_some() {
            return None;
        }
        let id = std::env::var("USER").ok().filter(|user| !user.is_empty()).unwrap_or_else(|| "cli".to_string());
        Some(pb::Actor { id, kind: pb::ActorKind::User as i32, ..pb::Actor::default() })
    }
}

/// Parses `kind:id` (or a bare id, taken as a user) into an actor.
pub fn parse_actor(text: &str) -> Result<pb::Actor, String> {
    let (kind, id) = match text.split_once(':') {
        Some((kind, id)) => {
            let kind = match kind {
                "user" => pb::ActorKind::User,
                "service" => pb::ActorKind::Service,
                "automation" => pb::ActorKind::Automation,
                "anonymous" => pb::ActorKind::Anonymous,
                other => {
                    return Err(format!(
                        "unknown actor kind {other:?}; use user, service, automation or anonymous (as in user:alice)"
                    ))
                }
            };
            (kind, id)
        }
        None => (pb::ActorKind::User, text),
    };
    if id.trim().is_empty() {
        return Err("the actor id is empty; write kind:id, as in user:alice".to_string());
    }
    Ok(pb::Actor { id: id.to_string(), kind: kind as i32, ..pb::Actor::default() })
}

/// Why a command failed; each kind has its own exit code.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The request was refused with a stable domain code (exit 3).
    #[error("{code}: {message}")]
    Refused {
        /// Stable domain code.
        code: String,
        /// What went wrong.
        message: String,
        /// Every validation problem, when there were several.
        problems: Vec<String>,
    },
    /// No node answered within the retry budget (exit 4).
    #[error("cluster unreachable: {0}")]
    Unreachable(String),
    /// The command line is wrong in a way clap cannot see (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Anything else (exit 1).
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl CommandError {
    /// A refusal found by the CLI itself, worded like the cluster's, with a
    /// code of the catalogue.
    pub fn refused(code: ErrorCode, message: impl Into<String>) -> CommandError {
        CommandError::Refused { code: code.as_str().to_string(), message: message.into(), problems: Vec::new() }
    }

    /// The exit code for this failure.
    pub fn exit_code(&self) -> u8 {
        match self {
            CommandError::Refused { .. } => EXIT_REFUSED,
            CommandError::Unreachable(_) => EXIT_UNREACHABLE,
            CommandError::Usage(_) => EXIT_USAGE,
            CommandError::Other(_) => EXIT_OTHER,
        }
    }
}

impl From<gavel_client::Error> for CommandError {
    fn from(error: gavel_client::Error) -> CommandError {
        match error {
            gavel_client::Error::Domain { code, message, problems, .. } => {
                CommandError::Refused { code, message, problems }
            }
            gavel_client::Error::Unavailable(reason) => CommandError::Unreachable(reason),
            gavel_client::Error::Config(reason) => CommandError::Usage(reason),
        }
    }
}

impl From<std::io::Error> for CommandError {
    fn from(error: std::io::Error) -> CommandError {
        CommandError::Other(error.into())
    }
}

/// An error and its causes on one line, `outer: cause: root`, as anyhow's
/// `{:#}` prints them, except that a cause is left out when the text before
/// it already ends with it: our error types name their source in their own
/// message (`starting raft: {0}`) and mark it `#[source]` as well, so the
/// plain chain printed each reason twice.
pub fn error_chain(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.is_empty() {
            text = message;
        } else if !text.ends_with(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
    }
    text
}

/// Prints a failure to standard error and returns the command's exit code.
/// A closed standard output (`gavel audit tail --follow | head`) is a normal
/// way to stop reading, so it exits 0 quietly.
pub fn finish(outcome: Result<(), CommandError>) -> ExitCode {
    let error = match outcome {
        Ok(()) => return ExitCode::from(EXIT_OK),
        Err(error) => error,
    };
    if let CommandError::Other(other) = &error {
        if other.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
            return ExitCode::from(EXIT_OK);
        }
    }
    match &error {
        CommandError::Refused { code, .. } if code == ErrorCode::Unauthenticated.as_str() => {
            eprintln!("error: {error}");
            eprintln!(
                "hint: the cluster did not accept your credentials; set --ca/--cert/--key or --token \
                 (GAVEL_CA, GAVEL_CERT, GAVEL_KEY, GAVEL_TOKEN); `gavel dev` prints the export line for its admin"
            );
        }
        CommandError::Refused { problems, .. } => {
            eprintln!("error: {error}");
            for problem in problems {
                eprintln!("  - {problem}");
            }
        }
        CommandError::Other(other) => eprintln!("error: {}", error_chain(other)),
        CommandError::Unreachable(_) => {
            eprintln!("error: {error}");
            eprintln!(
                "hint: set --endpoints or GAVEL_ENDPOINTS to the cluster's nodes, and --ca (GAVEL_CA) when they \
                 run TLS; `gavel dev` prints the `export GAVEL_ENDPOINTS=... GAVEL_CA=...` line for its cluster"
            );
        }
        _ => eprintln!("error: {error}"),
    }
    ExitCode::from(error.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_chain_names_each_reason_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("starting raft: {0}")]
        struct Starting(#[source] std::io::Error);
        let root = std::io::Error::other("election_timeout_max_ms: at most 86400000");
        let error = anyhow::Error::new(Starting(root)).context("node n1");
        assert_eq!(error_chain(&error), "node n1: starting raft: election_timeout_max_ms: at most 86400000");
        // A cause its parent does not repeat is still printed, as `{:#}` would.
        let plain = anyhow::Error::new(std::io::Error::other("disk full")).context("writing the vote");
        assert_eq!(error_chain(&plain), format!("{plain:#}"));
        assert_eq!(error_chain(&plain), "writing the vote: disk full");
    }

    #[test]
    fn actor_parses_kind_and_id_and_defaults_to_user() {
        let alice = parse_actor("alice").expect("bare id");
        assert_eq!((alice.id.as_str(), alice.kind), ("alice", pb::ActorKind::User as i32));
        let billing = parse_actor("service:billing").expect("service");
        assert_eq!((billing.id.as_str(), billing.kind), ("billing", pb::ActorKind::Service as i32));
        let nested = parse_actor("automation:agent:7").expect("id with a colon");
        assert_eq!(nested.id, "agent:7");
        assert!(parse_actor("robot:x").is_err());
        assert!(parse_actor("user:").is_err());
    }
}
