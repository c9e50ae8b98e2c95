//! The `gavel` binary: `gavel node` runs one cluster node (TLS and
//! authentication from its security flags, or `--insecure`); `gavel dev`
//! runs a secure local three-node cluster as three processes; `gavel
//! approval|capability|exec|audit|cluster|access|backup` are the operator
//! commands (see `docs/cli.md`), which take their credentials from `--ca
//! --cert --key --token --token-file --insecure` or the `GAVEL_*` variables
//! (`gavel backup restore|inspect` work on files only); `gavel cert`
//! and `gavel token` make certificates and tokens; `gavel codes` prints
//! the catalogue of stable error codes. The test lab (chaos,
//! simulation, benchmarks) is the other binary, `gavel-lab`
//! (`crates/gavel-lab`); this one links none of it. Logs are `tracing`
//! events as text or JSON lines (`--log-format`); `gavel node
//! --otlp-endpoint` also exports spans over OTLP ([`logging`]).

mod cli;
mod commands;
mod console;
mod dev;
mod logging;
mod node_security;
mod notify;
mod witness;

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use cli::{parse_peers, Cli, LogFormat, NodeArgs, TopCommand};
use commands::{finish, CommandError};
use gavel_server::node::ServerSettings;
use gavel_server::server::{start, NodeOptions};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let serving = matches!(
        cli.command,
        TopCommand::Node(_)
            | TopCommand::Dev(_)
            | TopCommand::Console(_)
            | TopCommand::Notify(_)
            | TopCommand::Witness(_)
    ) || matches!(&cli.command, TopCommand::Mcp(args) if args.command.is_none());
    // Operator commands keep standard error for their own messages.
    let default_filter = if serving { "info,openraft=warn" } else { "warn" };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let TopCommand::Node(args) = &cli.command {
        if let Some(threads) = args.worker_threads {
            builder.worker_threads(usize::from(threads));
        }
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return finish(Err(CommandError::Other(error.into()))),
    };
    let (log_format, otlp) = match &cli.command {
        TopCommand::Node(args) => (
            args.log_format,
            args.otlp_endpoint.as_deref().map(|endpoint| logging::Otlp { endpoint, node_id: args.id }),
        ),
        TopCommand::Dev(args) => (args.log_format, None),
        _ => (LogFormat::Text, None),
    };
    let tracer = {
        let _on_the_runtime = runtime.enter();
        match logging::init(default_filter, log_format, otlp) {
            Ok(tracer) => tracer,
            Err(error) => return served(Err(error)),
        }
    };
    let exit = run(cli, &runtime);
    if let Some(tracer) = tracer {
        // Flush the batched spans; the exporter runs on the runtime.
        let _on_the_runtime = runtime.enter();
        if let Err(error) = tracer.shutdown() {
            eprintln!("gavel: flushing trace spans: {error}");
        }
    }
    exit
}

/// Runs the parsed command on `runtime`.
fn run(cli: Cli, runtime: &tokio::runtime::Runtime) -> ExitCode {
    match cli.command {
        TopCommand::Node(args) => served(runtime.block_on(run_node(*args))),
        TopCommand::Dev(args) => served(runtime.block_on(dev::run(args))),
        TopCommand::Console(args) => served(runtime.block_on(console::run(args))),
        TopCommand::Notify(args) => served(runtime.block_on(notify::run(args))),
        TopCommand::Mcp(args) => served(runtime.block_on(commands::mcp::run(*args))),
        TopCommand::Witness(args) => served(runtime.block_on(witness::run(args))),
        TopCommand::Approval(args) => finish(runtime.block_on(commands::approval::run(args))),
        TopCommand::Capability(args) => finish(runtime.block_on(commands::capability::run(args))),
        TopCommand::Exec(args) => finish(runtime.block_on(commands::exec::run(args))),
        TopCommand::Audit(args) => finish(runtime.block_on(commands::audit::run(args))),
        TopCommand::Cluster(args) => finish(runtime.block_on(commands::cluster::run(args))),
        TopCommand::Backup(args) => finish(runtime.block_on(commands::backup::run(args))),
        TopCommand::Access(args) => finish(runtime.block_on(commands::access::run(args))),
        TopCommand::Policy(args) => finish(runtime.block_on(commands::policy::run(args))),
        TopCommand::Cert(args) => finish(commands::cert::run(args)),
        TopCommand::Token(args) => finish(commands::token::run(args)),
        TopCommand::Codes(args) => finish(commands::codes::run(args)),
    }
}

/// The exit of `node` and `dev`: as `main` returning `anyhow::Result` would,
/// except that a command line that cannot start a node exits 2, like a
/// usage error.
fn served(outcome: anyhow::Result<()>) -> ExitCode {
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.downcast_ref::<node_security::NodeUsageError>().is_some() => {
            eprintln!("Error: {}", commands::error_chain(&error));
            ExitCode::from(commands::EXIT_USAGE)
        }
        Err(error) => {
            eprintln!("Error: {}", commands::error_chain(&error));
            ExitCode::FAILURE
        }
    }
}

/// The planted bug `GAVEL_MUTANT` names (chaos harness only, in a build
/// with the `mutants` feature, which has the planted bugs' code).
#[cfg(feature = "mutants")]
fn planted_bug_from_env() -> anyhow::Result<Option<gavel_core::mutants::Mutant>> {
    let Ok(name) = std::env::var("GAVEL_MUTANT") else { return Ok(None) };
    let found = gavel_core::mutants::Mutant::from_name(&name);
    if found.is_none() {
        eprintln!("GAVEL_MUTANT={name} names no planted bug; none is active");
    }
    Ok(found)
}

/// A build without the `mutants` feature has no planted bugs: a node
/// started with `GAVEL_MUTANT` set is refused rather than run without the
/// bug the caller asked for.
#[cfg(not(feature = "mutants"))]
fn refuse_gavel_mutant() -> anyhow::Result<()> {
    match std::env::var_os("GAVEL_MUTANT") {
        None => Ok(()),
        Some(_) => anyhow::bail!(
            "GAVEL_MUTANT is set, but this gavel has no planted bugs (build it with `--features mutants` for the chaos \
             harness, or unset the variable)"
        ),
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (what Go
/// programs and most servers do at start) and returns the soft limit in
/// force afterwards; a limit that cannot be raised is left as it was.
fn raise_descriptor_limit() -> std::io::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(std::io::Error::from)?;
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return Ok(hard);
    }
    Ok(soft)
}

async fn run_node(args: NodeArgs) -> anyhow::Result<()> {
    let workers = tokio::runtime::Handle::current().metrics().num_workers();
    tracing::info!(workers, "node {} runs {workers} runtime worker thread(s)", args.id);
    #[cfg(feature = "mutants")]
    let planted_bug = planted_bug_from_env()?;
    #[cfg(not(feature = "mutants"))]
    refuse_gavel_mutant()?;
    let security = node_security::node_security(args.id, &args.security)?;
    if security.tls.is_none() {
        tracing::warn!(
            "node {} runs --insecure: plaintext, no authentication, identity self-declared; never expose it",
            args.id
        );
    } else {
        tracing::info!("node {} secured: {}", args.id, node_security::describe(&security));
    }
    let peers = parse_peers(&args.peers)?;
    if !args.join && !peers.is_empty() && !peers.contains_key(&args.id) {
        anyhow::bail!("--peers must include this node ({}) unless --join is given", args.id);
    }
    // The lowest id bootstraps, so exactly one node initializes a new cluster.
    let bootstrap = !args.join && peers.keys().next() == Some(&args.id);
    let timings = args.timings.timings();
    let listener =
        gavel_server::connections::bind(&args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    // Bound before the node starts, so a port in use fails the start.
    let metrics_listener = match &args.metrics_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding --metrics-listen {addr}"))?,
        ),
        None => None,
    };
    let connections_max = usize::try_from(args.connections_max).unwrap_or(usize::MAX);
    let descriptors = raise_descriptor_limit().unwrap_or_else(|error| {
        tracing::warn!(%error, "cannot read RLIMIT_NOFILE; assuming 1024 file descriptors");
        1024
    });
    let connections_max_kept = gavel_server::connections::connections_max_under(connections_max, descriptors);
    if connections_max_kept < connections_max {
        tracing::warn!(
            configured = connections_max,
            connections_max = connections_max_kept,
            descriptors,
            "--connections-max is lowered to stay under the file descriptor limit (RLIMIT_NOFILE)"
        );
    }
    let options = NodeOptions {
        id: args.id,
        advertise: args.listen.clone(),
        peers,
        data_dir: args.data_dir.clone(),
        timings,
        bootstrap,
        settings: ServerSettings {
            retention: gavel_core::Retention { records_ms: args.retention_ms, events_ms: args.event_retention_ms },
            #[cfg(feature = "mutants")]
            planted_bug,
            overload: gavel_server::overload::OverloadLimits {
                proposals_in_flight_max: usize::try_from(args.proposals_in_flight_max).unwrap_or(usize::MAX),
                long_polls_max: usize::try_from(args.long_polls_max).unwrap_or(usize::MAX),
                reads_in_flight_max: usize::try_from(args.reads_in_flight_max).unwrap_or(usize::MAX),
            },
            checkpoint_cold_writes: usize::try_from(args.checkpoint_cold_writes).unwrap_or(usize::MAX),
            audit_checkpoints: args.audit_checkpoints,
            audit_witnesses: match &args.audit_witness_policy {
                Some(path) => {
                    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                    gavel_core::witness::Policy::parse(&text)
                        .map_err(|problem| anyhow::anyhow!("{}: {problem}", path.display()))?
                        .witnesses
                }
                None => Vec::new(),
            },
            connections: gavel_server::connections::ConnectionLimits {
                auth_deadline: std::time::Duration::from_millis(args.auth_deadline_ms),
                idle_timeout: std::time::Duration::from_millis(args.idle_timeout_ms),
                connections_max: connections_max_kept,
                unauthenticated_max: usize::try_from(args.unauthenticated_connections_max).unwrap_or(usize::MAX),
                connections_per_source_max: usize::try_from(args.connections_per_source_max).unwrap_or(usize::MAX),
                connections_per_prefix_max: usize::try_from(args.connections_per_prefix_max).unwrap_or(usize::MAX),
            },
            ..ServerSettings::default()
        },
        security,
    };
    let running = start(options, listener).await?;
    let (stop_metrics, metrics_stopped) = tokio::sync::watch::channel(false);
    let metrics = metrics_listener.map(|listener| {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(%addr, "serving Prometheus metrics on http://{addr}/metrics");
            if args.audit_tiles != gavel_server::audit_tiles::AuditTiles::Off {
                tracing::info!(%addr, tiles = ?args.audit_tiles, "serving the audit tiles on http://{addr}/audit/");
            }
        }
        tokio::spawn(gavel_server::scrape::serve(listener, running.node.clone(), args.audit_tiles, metrics_stopped))
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    tracing::info!("shutting down");
    let _ = stop_metrics.send(true);
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    Ok(running.stop().await?)
}
