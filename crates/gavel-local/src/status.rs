//! Talking to nodes by address: `ClusterService.Status`, the leader among
//! answers, and waits over bare endpoints (nodes this process did not start).

use std::time::{Duration, Instant};

use gavel_client::ClientTls;
use gavel_proto::v1::cluster_service_client::ClusterServiceClient;
use gavel_proto::v1::{StatusRequest, StatusResponse};
use tonic::transport::{Channel, Endpoint};

use crate::Error;

/// Longest connection attempt of one call.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause between two rounds of a wait.
const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// `http://host:port` (`https://` with TLS) for a bare `host:port`; a URI
/// is kept as it is.
fn uri(addr: &str, tls: bool) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else if tls {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    }
}

/// A lazily connected plaintext channel to `addr` (`host:port` or a URI)
/// whose calls time out after `call_timeout`, with `TCP_NODELAY` and a 1 s
/// connect timeout.
pub fn channel(addr: &str, call_timeout: Duration) -> Result<Channel, Error> {
    channel_with(addr, call_timeout, None)
}

/// [`channel`] over TLS when `tls` is given: the node's certificate must
/// chain to its CA, and its identity (if any) is presented.
pub fn channel_with(addr: &str, call_timeout: Duration, tls: Option<&ClientTls>) -> Result<Channel, Error> {
    let address = |source| Error::Address { addr: addr.to_string(), source };
    let mut endpoint = Endpoint::from_shared(uri(addr, tls.is_some())).map_err(address)?;
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls.tonic_config()).map_err(address)?;
    }
    Ok(endpoint.connect_timeout(CONNECT_TIMEOUT).timeout(call_timeout).tcp_nodelay(true).connect_lazy())
}

/// `ClusterService.Status` of the node at `addr`, connection included within `timeout`.
pub async fn status(addr: &str, timeout: Duration) -> Result<StatusResponse, Error> {
    status_with(addr, timeout, None).await
}

/// [`status`] over TLS when `tls` is given.
pub async fn status_with(addr: &str, timeout: Duration, tls: Option<&ClientTls>) -> Result<StatusResponse, Error> {
    let mut client = ClusterServiceClient::new(channel_with(addr, timeout, tls)?);
    let mut request = tonic::Request::new(StatusRequest::default());
    request.set_timeout(timeout);
    match tokio::time::timeout(timeout, client.status(request)).await {
        Ok(Ok(response)) => Ok(response.into_inner()),
        Ok(Err(status)) => Err(Error::Status { addr: addr.to_string(), detail: status.message().to_string() }),
        Err(_) => Err(Error::Status { addr: addr.to_string(), detail: format!("no answer within {timeout:?}") }),
    }
}

/// The key of the answer that reports itself leader at the highest term (a
/// deposed leader cut off from the others may still say `Leader`, but only
/// at an older term). `None` when no answer does.
pub fn leader_of<'a, K: Copy + 'a>(statuses: impl IntoIterator<Item = (K, &'a StatusResponse)>) -> Option<K> {
    statuses
        .into_iter()
        .filter(|(_, status)| status.role == "Leader")
        .max_by_key(|(_, status)| status.term)
        .map(|(key, _)| key)
}

/// The statuses of `addrs` that answer, asked concurrently, with their positions.
pub(crate) async fn answers(
    addrs: &[String],
    timeout: Duration,
    tls: Option<&ClientTls>,
) -> Vec<(usize, Result<StatusResponse, Error>)> {
    let calls = addrs.iter().map(|addr| status_with(addr, timeout, tls));
    futures::future::join_all(calls).await.into_iter().enumerate().collect()
}

/// The position in `endpoints` of the node that reports itself leader (see
/// [`leader_of`]), polling until `wait` has passed.
pub async fn find_leader(endpoints: &[String], status_timeout: Duration, wait: Duration) -> Result<usize, Error> {
    find_leader_with(endpoints, status_timeout, wait, None).await
}

/// [`find_leader`] over TLS when `tls` is given.
pub async fn find_leader_with(
    endpoints: &[String],
    status_timeout: Duration,
    wait: Duration,
    tls: Option<&ClientTls>,
) -> Result<usize, Error> {
    let started = Instant::now();
    let mut last = String::from("no endpoint answered");
    loop {
        let answered = answers(endpoints, status_timeout, tls).await;
        let ok: Vec<(usize, &StatusResponse)> =
            answered.iter().filter_map(|(index, status)| Some((*index, status.as_ref().ok()?))).collect();
        if let Some(index) = leader_of(ok.iter().copied()) {
            return Ok(index);
        }
        if let Some((_, Err(error))) = answered.iter().find(|(_, status)| status.is_err()) {
            last = error.to_string();
        } else if let Some((index, status)) = ok.first() {
            last = format!("{} is {}", endpoints[*index], status.role);
        }
        if started.elapsed() >= wait {
            return Err(Error::NoLeader {
                timeout: wait,
                logs: format!("(endpoints {}; {last})", endpoints.join(",")),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Waits until every one of `endpoints` has applied at least `index`, up to `wait`.
pub async fn wait_applied(
    endpoints: &[String],
    index: u64,
    status_timeout: Duration,
    wait: Duration,
) -> Result<(), Error> {
    wait_applied_with(endpoints, index, status_timeout, wait, None).await
}

/// [`wait_applied`] over TLS when `tls` is given.
pub async fn wait_applied_with(
    endpoints: &[String],
    index: u64,
    status_timeout: Duration,
    wait: Duration,
    tls: Option<&ClientTls>,
) -> Result<(), Error> {
    let started = Instant::now();
    loop {
        let answered = answers(endpoints, status_timeout, tls).await;
        let behind: Vec<String> = answered
            .iter()
            .filter_map(|(position, status)| match status {
                Ok(status) if status.last_applied_index >= index => None,
                Ok(status) => Some(format!("{} at {}", endpoints[*position], status.last_applied_index)),
                Err(error) => Some(error.to_string()),
            })
            .collect();
        if behind.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= wait {
            return Err(Error::NotConverged {
                timeout: wait,
                detail: format!("not yet at applied index {index}: {}", behind.join("; ")),
            });
        }
        tokio::time::sleep(POLL_INTERVAL * 4).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(role: &str, term: u64) -> StatusResponse {
        StatusResponse { role: role.to_string(), term, ..StatusResponse::default() }
    }

    #[test]
    fn the_leader_is_the_self_reported_one_at_the_highest_term() {
        let deposed = answer("Leader", 3);
        let current = answer("Leader", 4);
        let follower = answer("Follower", 4);
        assert_eq!(leader_of([(1, &deposed), (2, &current), (3, &follower)]), Some(2));
        assert_eq!(leader_of([(1, &follower)]), None);
        assert_eq!(leader_of(Vec::<(u64, &StatusResponse)>::new()), None);
    }

    #[test]
    fn bad_addresses_are_errors_not_panics() {
        assert!(matches!(channel("not a uri \u{0}", Duration::from_secs(1)), Err(Error::Address { .. })));
    }

    #[tokio::test]
    async fn a_closed_port_is_a_status_error() {
        let port = crate::free_port().expect("a port");
        let result = status(&format!("127.0.0.1:{port}"), Duration::from_millis(300)).await;
        assert!(matches!(result, Err(Error::Status { .. })), "{result:?}");
    }
}
