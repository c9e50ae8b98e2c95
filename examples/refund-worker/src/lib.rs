//! The refund worker: orpc-agent's `refundOrder` handler, made real on Gavel.
//!
//! [`Gateway`] stands in for a payment provider. It records charges in a file,
//! one JSON line per charge, keyed by idempotency key, so a retried refund
//! with the same key is answered from the record instead of charging twice.
//! It can be made flaky (it records the charge, then "loses" the response on
//! a fraction of calls, the classic ambiguous failure) and slow.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gavel_client::{HandlerError, TaskContext, Worker};
use serde::{Deserialize, Serialize};

/// The refund request, as the agent's tool call sends it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RefundInput {
    /// Order to refund.
    pub order_id: String,
    /// Amount in cents.
    pub amount_cents: u64,
}

/// One recorded charge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Charge {
    /// The idempotency key it was made under.
    pub idempotency_key: String,
    /// Order refunded.
    pub order_id: String,
    /// Amount in cents.
    pub amount_cents: u64,
    /// Gateway's reference.
    pub reference: String,
}

/// How the stand-in gateway misbehaves.
#[derive(Debug, Clone, Default)]
pub struct GatewayBehaviour {
    /// Fraction of calls (0.0–1.0) whose response is lost after the charge is recorded.
    pub lose_response_fraction: f64,
    /// Call numbers (from 1) whose response is always lost, for scripted demos.
    pub lose_response_on_calls: Vec<u64>,
    /// How long each charge takes.
    pub latency: Duration,
}

/// A file-backed payment gateway that deduplicates by idempotency key.
#[derive(Clone)]
pub struct Gateway {
    ledger: PathBuf,
    behaviour: GatewayBehaviour,
    state: Arc<Mutex<GatewayState>>,
}

struct GatewayState {
    charges: BTreeMap<String, Charge>,
    calls: u64,
}

impl Gateway {
    /// Opens (or creates) the ledger file.
    pub fn open(ledger: PathBuf, behaviour: GatewayBehaviour) -> anyhow::Result<Gateway> {
        let mut charges = BTreeMap::new();
        if let Ok(text) = std::fs::read_to_string(&ledger) {
            for line in text.lines().filter(|line| !line.trim().is_empty()) {
                let charge: Charge = serde_json::from_str(line)?;
                charges.insert(charge.idempotency_key.clone(), charge);
            }
        }
        Ok(Gateway { ledger, behaviour, state: Arc::new(Mutex::new(GatewayState { charges, calls: 0 })) })
    }

    /// Every charge in the ledger file (read back from disk).
    pub fn charges(&self) -> anyhow::Result<Vec<Charge>> {
        let text = std::fs::read_to_string(&self.ledger).unwrap_or_default();
        text.lines().filter(|line| !line.trim().is_empty()).map(|line| Ok(serde_json::from_str(line)?)).collect()
    }

    /// Refunds once per idempotency key. Returns the charge, or an error when
    /// the response was "lost" (the charge is recorded anyway).
    pub async fn refund(
        &self,
        key: &str,
        input: &RefundInput,
        cancel: &gavel_client::CancellationToken,
    ) -> Result<Charge, HandlerError> {
        tokio::select! {
            _ = tokio::time::sleep(self.behaviour.latency) => {}
            _ = cancel.cancelled() => return Err(HandlerError::retryable("CANCELLED", "refund aborted before the gateway charged")),
        }
        let mut state =
            self.state.lock().map_err(|_| HandlerError::fatal("GATEWAY_BROKEN", "gateway state poisoned"))?;
        state.calls += 1;
        let call = state.calls;
        let charge = match state.charges.get(key) {
            Some(existing) => existing.clone(),
            None => {
                let charge = Charge {
                    idempotency_key: key.to_string(),
                    order_id: input.order_id.clone(),
                    amount_cents: input.amount_cents,
                    reference: format!("ch_{:04}", state.charges.len() + 1),
                };
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.ledger)
                    .map_err(|error| HandlerError::retryable("GATEWAY_UNAVAILABLE", error.to_string()))?;
                let line = serde_json::to_string(&charge)
                    .map_err(|error| HandlerError::fatal("GATEWAY_BROKEN", error.to_string()))?;
                writeln!(file, "{line}")
                    .map_err(|error| HandlerError::retryable("GATEWAY_UNAVAILABLE", error.to_string()))?;
                file.sync_data().map_err(|error| HandlerError::retryable("GATEWAY_UNAVAILABLE", error.to_string()))?;
                state.charges.insert(key.to_string(), charge.clone());
                charge
            }
        };
        if self.behaviour.lose_response_on_calls.contains(&call)
            || lose_response(call, self.behaviour.lose_response_fraction)
        {
            return Err(HandlerError::retryable("GATEWAY_TIMEOUT", "the gateway did not answer in time"));
        }
        Ok(charge)
    }
}

/// Deterministic "random" choice per call number, so runs are reproducible.
fn lose_response(call: u64, fraction: f64) -> bool {
    let mut x = call.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    x ^= x >> 31;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 29;
    ((x >> 11) as f64 / (1u64 << 53) as f64) < fraction
}

/// The handler: the gateway call, keyed by the execution's idempotency key
/// and bounded by the task's cancellation token.
pub async fn refund_handler(gateway: Gateway, context: TaskContext) -> Result<serde_json::Value, HandlerError> {
    let input: RefundInput = context.input()?;
    let charge = gateway.refund(&context.idempotency_key, &input, &context.cancel).await?;
    Ok(serde_json::json!({ "refunded": true, "reference": charge.reference, "orderId": charge.order_id }))
}

/// A worker on queue `orders.refund` running [`refund_handler`], with the
/// default (plaintext) client configuration.
pub fn worker(endpoints: &[String], gateway: Gateway, concurrency: usize) -> Result<Worker, gavel_client::Error> {
    worker_with(endpoints, gavel_client::ClientConfig::default(), gateway, concurrency)
}

/// [`worker`] whose client uses `config` (TLS and a token, from
/// [`gavel_client::Credentials::apply`], for a secure cluster).
pub fn worker_with(
    endpoints: &[String],
    config: gavel_client::ClientConfig,
    gateway: Gateway,
    concurrency: usize,
) -> Result<Worker, gavel_client::Error> {
    Worker::builder(endpoints)
        .client_config(config)
        .queue("orders.refund")
        .concurrency(concurrency)
        .handler(move |context| refund_handler(gateway.clone(), context))
        .build()
}

/// Checks that a node of the cluster at `endpoints` answers within `wait`,
/// so a worker pointed at nothing says so instead of polling in silence.
/// The error names the endpoints tried and what was found (no node, or a
/// lost quorum).
pub async fn check_cluster(endpoints: &[String], wait: Duration) -> Result<(), gavel_client::Error> {
    check_cluster_with(endpoints, gavel_client::ClientConfig::default(), wait).await
}

/// [`check_cluster`] with the client configuration `config` (credentials
/// for a secure cluster).
pub async fn check_cluster_with(
    endpoints: &[String],
    config: gavel_client::ClientConfig,
    wait: Duration,
) -> Result<(), gavel_client::Error> {
    let config = gavel_client::ClientConfig { retry_budget: wait, ..config };
    let client = gavel_client::Client::with_config(endpoints, config)?;
    client.status(gavel_client::pb::StatusRequest { without_state_hash: true }).await?;
    let reach = client.reachability().await;
    if reach.has_quorum() && reach.leader.is_some() {
        Ok(())
    } else {
        Err(gavel_client::Error::Unavailable(format!(
            "{}; endpoints tried: {}",
            reach.describe(),
            endpoints.join(", ")
        )))
    }
}
