//! `gavel cert create-ca|create-node|create-client`: the cluster's
//! certificates, in the directory layout `gavel node --certs-dir` reads
//! (`ca.pem`, `ca.key`, `node-<id>.pem`, `client-<kind>-<id>.pem`, ...).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use gavel_pki::{node_hosts, Authority, CertsDir, Principal, TokenKey, Validity};

use super::CommandError;

/// `gavel cert`.
#[derive(Debug, Args)]
pub struct CertArgs {
    /// The certificate directory.
    #[arg(long, env = "GAVEL_CERTS_DIR", value_name = "DIR", global = true, default_value = "certs")]
    pub certs_dir: PathBuf,
    /// Days the new certificate is valid: 1 to 36500.
    #[arg(long, global = true)]
    pub days: Option<u32>,
    /// What to create.
    #[command(subcommand)]
    pub command: CertCommand,
}

/// The verbs of `gavel cert`.
#[derive(Debug, Subcommand)]
pub enum CertCommand {
    /// Create the cluster CA (ca.pem, ca.key; default 3650 days) and, unless
    /// present, the token key pair (token.key, token.pub).
    #[command(name = "create-ca")]
    Ca {
        /// The CA's common name.
        #[arg(long, default_value = "Gavel CA")]
        name: String,
    },
    /// Issue node <id>'s certificate (node-<id>.pem, .key; default 365 days),
    /// server and client certificate at once, naming localhost, 127.0.0.1
    /// and every --host.
    #[command(name = "create-node")]
    Node {
        /// The node id.
        #[arg(long)]
        id: u64,
        /// A DNS name or IP address the node is reached at (its advertise
        /// host). Repeatable.
        #[arg(long = "host", value_name = "HOST")]
        hosts: Vec<String>,
    },
    /// Issue a client certificate (client-<kind>-<id>.pem, .key; default 365
    /// days) whose SAN URI gavel://kind/id names the principal.
    #[command(name = "create-client")]
    Client {
        /// The principal (kind:id, e.g. user:bob, worker:refunds-1).
        #[arg(long, value_parser = Principal::parse)]
        principal: Principal,
    },
}

/// Runs one `gavel cert` command.
pub fn run(args: CertArgs) -> Result<(), CommandError> {
    let certs = CertsDir::new(&args.certs_dir);
    match args.command {
        CertCommand::Ca { name } => {
            if certs.ca_cert().exists() || certs.ca_key().exists() {
                return Err(CommandError::Usage(format!(
                    "{} already holds a CA; remove ca.pem and ca.key first (every certificate it issued stops \
                     being trusted), or pick another --certs-dir",
                    certs.root().display()
                )));
            }
            let validity = validity(args.days, 3650)?;
            let authority = Authority::create(&name, validity).context("creating the CA")?;
            certs.write_authority(&authority).context("writing the CA")?;
            println!("wrote {} and {}", certs.ca_cert().display(), certs.ca_key().display());
            if !certs.token_key().exists() {
                let key = TokenKey::create().context("creating the token key")?;
                certs.write_token_key(&key).context("writing the token key")?;
                println!("wrote {} and {}", certs.token_key().display(), certs.token_public().display());
            }
            Ok(())
        }
        CertCommand::Node { id, hosts } => {
            if id == 0 {
                return Err(CommandError::Usage("node ids are non-zero".to_string()));
            }
            let principal = Principal::node(id);
            issue(&certs, &principal, &node_hosts(&hosts), args.days)
        }
        CertCommand::Client { principal } => issue(&certs, &principal, &[], args.days),
    }
}

/// `--days`, or `default_days`, as a validity window; 0 days (a certificate
/// expired when written) and more than `CERTIFICATE_DAYS_MAX` are refused
/// before any file is touched.
fn validity(days: Option<u32>, default_days: u32) -> Result<Validity, CommandError> {
    Validity::checked_days(days.unwrap_or(default_days))
        .map_err(|error| CommandError::Usage(format!("--days: {error}")))
}

fn issue(certs: &CertsDir, principal: &Principal, hosts: &[String], days: Option<u32>) -> Result<(), CommandError> {
    let validity = validity(days, 365)?;
    let authority = certs.load_authority().with_context(|| {
        format!("loading the CA from {} (create it with `gavel cert create-ca`)", certs.root().display())
    })?;
    let issued = authority.issue(principal, hosts, validity).map_err(|error| CommandError::Usage(error.to_string()))?;
    certs.write_certificate(principal, &issued).context("writing the certificate")?;
    println!("wrote {} and {} for {principal}", certs.cert(principal).display(), certs.key(principal).display());
    Ok(())
}
