//! Starting and stopping one node: Raft, the public services, health,
//! reflection and the ticker on one gRPC port, all behind the routing layer
//! ([`crate::routing`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "mutants")]
use gavel_core::mutants::Mutant;
use gavel_proto::v1::access_service_server::AccessServiceServer;
use gavel_proto::v1::approval_service_server::ApprovalServiceServer;
use gavel_proto::v1::audit_service_server::AuditServiceServer;
use gavel_proto::v1::capability_service_server::CapabilityServiceServer;
use gavel_proto::v1::cluster_service_server::ClusterServiceServer;
use gavel_proto::v1::execution_service_server::ExecutionServiceServer;
use gavel_proto::v1::policy_service_server::PolicyServiceServer;
use gavel_proto::v1::worker_service_server::WorkerServiceServer;
use gavel_raft::{NodeConfig, RaftError, RaftNode, RaftTimings};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use gavel_core::{Caller, Command, GrantName, Principal};

use futures::StreamExt;

use crate::connections::StreamsLayer;
use crate::node::{Node, ServerSettings};
use crate::replies::GrantsReply;
use crate::routing::{RoutingLayer, REQUEST_BYTES_MAX};
use crate::security::Security;
use crate::services::{access::Access, approval::Approvals, audit::Audit, capability::Capabilities, cluster::Cluster};
use crate::services::{execution::Executions, worker::Workers};
use gavel_store::app::CoreApp;

/// Why a node could not start, or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listener's local address could not be read.
    #[error("reading the listener's address: {0}")]
    Listener(#[source] std::io::Error),
    /// The Raft layer did not start (its storage could not be opened, say).
    #[error("starting raft: {0}")]
    Raft(#[source] RaftError),
    /// The cold store file cannot be opened or cleared.
    #[error("opening the cold store: {0}")]
    ColdStore(#[source] gavel_core::ColdStoreError),
    /// The reflection service could not be built from the descriptors.
    #[error("building the reflection service: {0}")]
    Reflection(#[source] tonic_reflection::server::Error),
    /// The cluster could not be initialized with its first members.
    #[error("initializing the cluster: {0}")]
    Initialize(#[source] RaftError),
    /// The gRPC server task panicked.
    #[error("the server task panicked: {0}")]
    Panicked(#[source] tokio::task::JoinError),
    /// The TLS material or token keys could not be loaded.
    #[error("security settings: {0}")]
    Security(#[source] crate::security::SecurityError),
    /// The note key that signs audit checkpoints could not be loaded or made.
    #[error("the audit note key: {0}")]
    NoteKey(#[source] crate::checkpointer::NoteKeyError),
    /// A node given its connections from outside ([`Serving::Injected`])
    /// was configured with TLS, which it does not terminate.
    #[error("a node served over injected connections runs plaintext only; start it insecure")]
    InjectedTls,
}

/// Where a node's connections come from, and what its Raft layer runs on.
pub enum Serving {
    /// A bound TCP listener, served through [`crate::connections`]
    /// (connection caps, TLS, authentication deadline, idle timeout), with
    /// real peers and disks: production.
    Listener(TcpListener),
    /// Connections accepted by the caller and the Raft layer's IO handed in:
    /// the simulator (`gavel-sim`).
    Injected(InjectedIo),
}

/// The IO of a node run inside a simulator. Connections are served
/// plaintext, straight by tonic: the connection layer's caps and timeouts
/// measure the OS clock, which a simulation must not read.
pub struct InjectedIo {
    /// The address the node reports as bound.
    pub addr: SocketAddr,
    /// The accepted connections.
    pub incoming: IncomingConnections,
    /// The Raft layer's network, disk and threading.
    pub raft: gavel_raft::RaftIo,
    /// How this node dials other nodes' public ports (leader forwarding).
    pub dial: gavel_raft::Dial,
    /// This node's wall clock (simulated time, with the node's own skew).
    pub clock: crate::node::Clock,
}

/// A stream of connections accepted by the caller.
pub type IncomingConnections =
    std::pin::Pin<Box<dyn futures::Stream<Item = std::io::Result<InjectedConnection>> + Send>>;

/// Any byte stream a simulator hands in as one accepted connection.
pub trait ByteStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static> ByteStream for T {}

/// One connection accepted by the caller. Its requests carry no
/// [`crate::connections::ConnectionInfo`]: they come from an anonymous peer.
pub struct InjectedConnection(pub std::pin::Pin<Box<dyn ByteStream>>);

impl tonic::transport::server::Connected for InjectedConnection {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl tokio::io::AsyncRead for InjectedConnection {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.0.as_mut().poll_read(context, buf)
    }
}

impl tokio::io::AsyncWrite for InjectedConnection {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0.as_mut().poll_write(context, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.0.as_mut().poll_flush(context)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.0.as_mut().poll_shutdown(context)
    }
}

/// Everything needed to start a node.
#[derive(Debug, Clone)]
pub struct NodeOptions {
    /// Node id (non-zero, unique in the cluster).
    pub id: u64,
    /// Address other nodes and clients use to reach this node.
    pub advertise: String,
    /// Initial voters (id → address), used when this node bootstraps the cluster.
    pub peers: BTreeMap<u64, String>,
    /// Where sled keeps the log, votes and snapshots.
    pub data_dir: PathBuf,
    /// Raft timings.
    pub timings: RaftTimings,
    /// Initialize the cluster with `peers` if it has never been initialized.
    pub bootstrap: bool,
    /// Service settings.
    pub settings: ServerSettings,
    /// TLS, tokens and the first admin; [`Security::insecure`] for none.
    pub security: Security,
}

/// A started node.
pub struct RunningNode {
    /// The node's shared handle.
    pub node: Arc<Node>,
    /// The bound address.
    pub addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    ticker: JoinHandle<()>,
    health: JoinHandle<()>,
}

impl RunningNode {
    /// Hands leadership over if this node leads (so the cluster need not
    /// wait out an election timeout), then stops serving, stops the ticker
    /// and shuts Raft down.
    pub async fn stop(self) -> Result<(), ServerError> {
        let started = std::time::Instant::now();
        if let Some(leader) = self.node.raft.hand_over_leadership().await {
            tracing::info!(leader, "handed leadership to node {leader} in {} ms", started.elapsed().as_millis());
        }
        let _ = self.shutdown.send(true);
        let _ = self.ticker.await;
        let _ = self.health.await;
        let _ = self.node.raft.shutdown().await;
        match tokio::time::timeout(Duration::from_secs(5), self.server).await {
            Ok(joined) => joined.map_err(ServerError::Panicked)?,
            Err(_) => tracing::warn!("server did not stop within 5 s"),
        }
        Ok(())
    }
}

/// How long a node given a bootstrap admin keeps trying to name it: it
/// must first be the leader (the bootstrapping node normally wins the first
/// election within a second or two).
pub const BOOTSTRAP_ADMIN_WAIT: Duration = Duration::from_secs(120);

/// Pause between attempts to name the bootstrap admin.
const BOOTSTRAP_ADMIN_RETRY: Duration = Duration::from_millis(250);

/// Names the first admin once this node leads: `BootstrapAdmin` is accepted
/// while no admin exists and is a no-op for the same admin, so proposing it
/// again after a restart is harmless. Stops as soon as this node's replica
/// holds an admin (whoever named it), and gives up after
/// [`BOOTSTRAP_ADMIN_WAIT`], on a refusal, or at shutdown.
async fn bootstrap_admin(
    node: Arc<Node>,
    admin: Principal,
    caller: Option<Caller>,
    mut shutdown: watch::Receiver<bool>,
) {
    let deadline = tokio::time::Instant::now() + BOOTSTRAP_ADMIN_WAIT;
    while tokio::time::Instant::now() < deadline {
        // Another node led first and named an admin (this one, or another
        // given elsewhere): nothing left to do, and nothing to warn about.
        if node.reads.read(|state| state.bindings().iter().any(|(_, grant)| grant.name == GrantName::Admin)) {
            tracing::info!(%admin, "an admin is already named; not proposing the bootstrap admin");
            return;
        }
        if node.raft.leader_route() == gavel_raft::LeaderRoute::Here {
            let command = Command::BootstrapAdmin { admin: admin.clone() };
            match node.call::<GrantsReply>(caller.as_ref(), "", command).await {
                Ok(_) => {
                    tracing::info!(%admin, "bootstrap admin named");
                    return;
                }
                Err(status) if status.code() != tonic::Code::Unavailable => {
                    tracing::error!(%admin, error = %status.message(), "cannot name the bootstrap admin");
                    return;
                }
                Err(_) => {}
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(BOOTSTRAP_ADMIN_RETRY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
    tracing::warn!(%admin, wait = ?BOOTSTRAP_ADMIN_WAIT, "this node did not lead in time to name the bootstrap admin");
}

/// Starts a node on an already bound listener.
pub async fn start(options: NodeOptions, listener: TcpListener) -> Result<RunningNode, ServerError> {
    start_serving(options, Serving::Listener(listener)).await
}

/// Starts a node on the connections and IO `serving` gives.
pub async fn start_serving(options: NodeOptions, serving: Serving) -> Result<RunningNode, ServerError> {
    let (addr, raft_io, dial, clock) = match &serving {
        Serving::Listener(listener) => (
            listener.local_addr().map_err(ServerError::Listener)?,
            gavel_raft::RaftIo::default(),
            None,
            crate::node::Clock::system(),
        ),
        Serving::Injected(io) => (io.addr, io.raft.clone(), Some(io.dial.clone()), io.clock.clone()),
    };
    let secured = options.security.load().map_err(ServerError::Security)?;
    if secured.is_some() && matches!(serving, Serving::Injected(_)) {
        return Err(ServerError::InjectedTls);
    }
    // Bad TLS material is refused here, before Raft starts.
    let server_tls =
        secured.as_ref().map(|secured| secured.server_config()).transpose().map_err(ServerError::Security)?;
    let builder = tonic::transport::Server::builder();
    let app = CoreApp::open(&options.data_dir).map_err(ServerError::ColdStore)?;
    #[cfg(feature = "mutants")]
    let planted_bug = options.settings.planted_bug;
    #[cfg(feature = "mutants")]
    app.plant(planted_bug);
    app.set_cold_pending_max(options.settings.checkpoint_cold_writes);
    if raft_io.blocking_inline() {
        // The simulator runs blocking work inline: a restore starts no thread either.
        app.restore_on_one_thread();
    }
    let config = NodeConfig {
        node_id: options.id,
        addr: options.advertise.clone(),
        data_dir: options.data_dir.clone(),
        timings: options.timings.clone(),
        #[cfg(feature = "mutants")]
        planted: gavel_raft::PlantedLogBugs {
            early_ack: planted_bug == Some(Mutant::EarlyAck),
            unsynced_append: planted_bug == Some(Mutant::UnsyncedAppend),
            unsynced_vote: planted_bug == Some(Mutant::UnsyncedVote),
            leader_restore: planted_bug == Some(Mutant::LeaderRestore),
        },
        peer_tls: secured.as_ref().map(|secured| secured.peer_tls.clone()),
    };
    let raft = RaftNode::start_with_io(config, app.clone(), raft_io).await.map_err(ServerError::Raft)?;
    let node = Node::with_dial(options.id, raft.clone(), app, options.settings.clone(), secured.clone(), dial, clock);

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(gavel_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(ServerError::Reflection)?;
    // Older grpcurl and grpcui only speak the v1alpha reflection protocol.
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(gavel_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(ServerError::Reflection)?;

    let (shutdown, shutdown_rx) = watch::channel(false);
    // Health is judged from the start: NOT_SERVING until a leader is known.
    let health = tokio::spawn(crate::health::run(node.clone(), health_reporter, shutdown_rx.clone()));
    let router = builder
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .layer(StreamsLayer)
        .layer(RoutingLayer::new(node.clone()))
        .add_service(raft.service())
        .add_service(health_service)
        .add_service(reflection)
        .add_service(reflection_v1alpha)
        .add_service(
            ApprovalServiceServer::new(Approvals { node: node.clone() }).max_decoding_message_size(REQUEST_BYTES_MAX),
        )
        .add_service(
            CapabilityServiceServer::new(Capabilities { node: node.clone() })
                .max_decoding_message_size(REQUEST_BYTES_MAX),
        )
        .add_service(
            ExecutionServiceServer::new(Executions { node: node.clone() }).max_decoding_message_size(REQUEST_BYTES_MAX),
        )
        .add_service(
            WorkerServiceServer::new(Workers { node: node.clone() }).max_decoding_message_size(REQUEST_BYTES_MAX),
        )
        .add_service(AuditServiceServer::new(Audit { node: node.clone() }).max_decoding_message_size(REQUEST_BYTES_MAX))
        .add_service(
            ClusterServiceServer::new(Cluster { node: node.clone() }).max_decoding_message_size(REQUEST_BYTES_MAX),
        )
        .add_service(
            AccessServiceServer::new(Access { node: node.clone() }).max_decoding_message_size(REQUEST_BYTES_MAX),
        )
        .add_service(
            PolicyServiceServer::new(crate::services::policy::Policies { node: node.clone() })
                .max_decoding_message_size(REQUEST_BYTES_MAX),
        );
    let server = match serving {
        Serving::Listener(listener) => {
            let serve_one: crate::connections::ServeOne = Arc::new(move |connection, closed| {
                // One tonic server per connection, over a stream that yields it and
                // then waits: its shutdown signal closes this connection alone, with
                // `GOAWAY` (see `crate::connections`).
                let router = router.clone();
                Box::pin(async move {
                    let incoming = futures::stream::once(std::future::ready(Ok::<_, std::io::Error>(connection)))
                        .chain(futures::stream::pending());
                    let closed = async move {
                        let _ = closed.await;
                    };
                    if let Err(error) = router.serve_with_incoming_shutdown(incoming, closed).await {
                        tracing::debug!(%error, "serving a connection failed");
                    }
                })
            });
            let limits = options.settings.connections;
            let acceptor = crate::connections::Acceptor {
                limits,
                table: crate::connections::ConnectionTable::new(&limits, node.metrics.clone()),
                tls: server_tls,
                metrics: node.metrics.clone(),
                serve_one,
            };
            tokio::spawn(crate::connections::serve(listener, acceptor, shutdown_rx.clone()))
        }
        Serving::Injected(io) => {
            let mut stop = shutdown_rx.clone();
            tokio::spawn(async move {
                let stopped = async move {
                    let _ = stop.wait_for(|stop| *stop).await;
                };
                if let Err(error) = router.serve_with_incoming_shutdown(io.incoming, stopped).await {
                    tracing::debug!(%error, "serving injected connections failed");
                }
            })
        }
    };

    if options.bootstrap {
        raft.initialize(options.peers.clone()).await.map_err(ServerError::Initialize)?;
    }
    if let Some(admin) = options.security.bootstrap_admin.clone() {
        // On a secured node the proposal comes from this node's principal;
        // an insecure node stamps no caller.
        let caller = secured.is_some().then(|| Caller::of(Principal::node(options.id)));
        tokio::spawn(bootstrap_admin(node.clone(), admin, caller, shutdown_rx.clone()));
    }
    if options.settings.audit_checkpoints {
        let note_key = crate::checkpointer::load_or_create_note_key(&options.data_dir).map_err(ServerError::NoteKey)?;
        tokio::spawn(crate::checkpointer::run(node.clone(), note_key, shutdown_rx.clone()));
    }
    if !options.settings.audit_witnesses.is_empty() {
        let witnesses = options.settings.audit_witnesses.clone();
        tokio::spawn(crate::witnesses::run(node.clone(), witnesses, shutdown_rx.clone()));
    }
    let ticker = tokio::spawn(crate::ticker::run(node.clone(), shutdown_rx));
    tracing::info!(id = options.id, %addr, "gavel node serving");
    Ok(RunningNode { node, addr, shutdown, server, ticker, health })
}
