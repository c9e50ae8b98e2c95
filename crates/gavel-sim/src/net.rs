//! The simulated network seen from the nodes and the clients: a tonic
//! connector over turmoil's TCP (for every channel: Raft peers, leader
//! forwarding, the SDK) and a stream of accepted turmoil connections (for a
//! node's gRPC server).

use std::sync::Arc;

use futures::StreamExt;
use gavel_server::server::{IncomingConnections, InjectedConnection};
use hyper_util::rt::TokioIo;
use tonic::transport::{Endpoint, Uri};

/// The port every simulated node serves on.
pub const NODE_PORT: u16 = 7000;

/// How long a simulated client's h2 remembers a stream it reset, on the
/// machine's clock: longer than any run.
const H2_RESET_STREAM_MEMORY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// How many reset streams it remembers at once: more than a run resets.
const H2_RESET_STREAMS_REMEMBERED: usize = 1 << 20;

/// A channel maker for [`gavel_raft::Dial`] and [`gavel_client::Dial`] (the
/// same type): each connection is a turmoil TCP stream to the endpoint's
/// host and port.
pub fn dial() -> gavel_raft::Dial {
    Arc::new(|endpoint: Endpoint| {
        endpoint
            // h2 remembers a stream it reset (to ignore the frames still
            // on their way) for a while measured on the machine's clock:
            // 1 s by default, whatever simulated time passes meanwhile, so a
            // late frame met a remembered or a forgotten stream depending on
            // how fast the machine ran the simulation (a run starved of CPU
            // recorded two same-instant failures in the other order). Here
            // it remembers every stream for the whole run.
            .http2_reset_stream_duration(H2_RESET_STREAM_MEMORY)
            .http2_max_concurrent_reset_streams(H2_RESET_STREAMS_REMEMBERED)
            .connect_with_connector_lazy(tower::service_fn(|uri: Uri| async move {
                let host = uri.host().ok_or_else(|| std::io::Error::other(format!("no host in {uri}")))?.to_string();
                let port = uri.port_u16().unwrap_or(NODE_PORT);
                let stream = turmoil::net::TcpStream::connect((host, port)).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }))
    })
}

/// The connections accepted on `listener`, for a node's server.
pub fn incoming(listener: turmoil::net::TcpListener) -> IncomingConnections {
    futures::stream::unfold(listener, |listener| async move {
        let accepted = listener.accept().await.map(|(stream, _)| {
            InjectedConnection(Box::pin(stream) as std::pin::Pin<Box<dyn gavel_server::server::ByteStream>>)
        });
        Some((accepted, listener))
    })
    .boxed()
}
