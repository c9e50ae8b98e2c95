//! The gateway as the worker of its governed tools: it polls their queues
//! with its own credentials (a principal holding the `worker` grant), and
//! runs each leased attempt as one upstream `tools/call`, under the lease.
//!
//! Which upstream tool runs is decided by the execution's capability (the
//! configuration maps each capability to one tool), never by the input: an
//! input naming another tool than its capability's is refused unrun, so a
//! submitter cannot borrow one tool's approval rules for another.

use std::collections::BTreeMap;
use std::sync::Arc;

use gavel_client::{CancellationToken, ClientConfig, HandlerError, TaskContext, Worker};
use rmcp::model::{CallToolRequestParams, CallToolResponse, JsonObject, MetaObject, RequestMetaObject};
use serde::{Deserialize, Serialize};

use crate::upstream::Upstream;

/// The failure code of an upstream that answered the call with a JSON-RPC
/// error: the tool refused the call, so a retry would not help.
pub const UPSTREAM_REFUSED: &str = "UPSTREAM_REFUSED";
/// The failure code of an upstream that could not be reached or broke
/// mid-call: the tool may have run.
pub const UPSTREAM_UNAVAILABLE: &str = "UPSTREAM_UNAVAILABLE";

/// The `_meta` key carrying the idempotency key on every governed upstream call.
pub const META_IDEMPOTENCY_KEY: &str = "io.gavel/idempotencyKey";
/// The `_meta` key carrying the lease's fencing token.
pub const META_FENCING_TOKEN: &str = "io.gavel/fencingToken";
/// The `_meta` key carrying the execution id.
pub const META_EXECUTION_ID: &str = "io.gavel/executionId";

/// A governed call's execution input, canonicalized by the cluster: what an
/// approver sees in the console and what the worker runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallInput {
    /// The upstream server's configured name.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The call's arguments, exactly as the agent sent them.
    pub arguments: JsonObject,
}

/// What the worker needs of one governed tool.
#[derive(Debug, Clone)]
pub struct Route {
    /// The index of its upstream in the gateway's list.
    pub upstream: usize,
    /// The tool's name there.
    pub tool: String,
    /// The argument that carries the idempotency key, if the tool takes one.
    pub idempotency_key_argument: Option<String>,
}

/// Runs the worker until `shutdown` fires.
pub async fn run(
    endpoints: Vec<String>,
    config: ClientConfig,
    upstreams: Arc<Vec<Upstream>>,
    routes: Arc<BTreeMap<String, Route>>,
    worker_id: String,
    shutdown: CancellationToken,
) -> Result<(), gavel_client::Error> {
    let mut builder = Worker::builder(&endpoints).client_config(config).worker_id(&worker_id).concurrency(8);
    for capability in routes.keys() {
        builder = builder.queue(capability);
    }
    let worker = builder
        .handler(move |context| {
            let (upstreams, routes) = (upstreams.clone(), routes.clone());
            async move { run_attempt(&upstreams, &routes, context).await }
        })
        .build()?;
    worker.run(shutdown).await
}

/// The arguments of the upstream call of one attempt: the input's, with
/// the idempotency key where the tool takes one. An input naming another
/// server or tool than the capability's route is refused unrun.
fn upstream_arguments(
    capability_id: &str,
    server: &str,
    route: &Route,
    context: &TaskContext,
) -> Result<JsonObject, HandlerError> {
    let input: CallInput = context.input()?;
    if input.server != server || input.tool != route.tool {
        return Err(HandlerError::fatal(
            "INPUT_INVALID",
            format!("{capability_id} runs {server}.{}, not {}.{}", route.tool, input.server, input.tool),
        ));
    }
    let mut arguments = input.arguments;
    if let Some(name) = &route.idempotency_key_argument {
        arguments.insert(name.clone(), serde_json::Value::String(context.idempotency_key.clone()));
    }
    Ok(arguments)
}

async fn run_attempt(
    upstreams: &[Upstream],
    routes: &BTreeMap<String, Route>,
    context: TaskContext,
) -> Result<serde_json::Value, HandlerError> {
    let capability = context.capability.as_ref().and_then(|capability| capability.spec.as_ref());
    let capability_id = capability.map(|spec| spec.id.clone()).unwrap_or_default();
    let Some(route) = routes.get(&capability_id) else {
        return Err(HandlerError::fatal(UPSTREAM_REFUSED, format!("no tool is configured for {capability_id}")));
    };
    let upstream = &upstreams[route.upstream];
    let arguments = upstream_arguments(&capability_id, &upstream.name, route, &context)?;
    let mut meta = JsonObject::new();
    meta.insert(META_IDEMPOTENCY_KEY.to_string(), context.idempotency_key.clone().into());
    meta.insert(META_FENCING_TOKEN.to_string(), context.lease_id.into());
    meta.insert(META_EXECUTION_ID.to_string(), context.execution_id.clone().into());
    let mut params = CallToolRequestParams::new(route.tool.clone());
    params.arguments = Some(arguments);
    params.meta = Some(RequestMetaObject(MetaObject(meta)));
    tracing::info!(execution_id = %context.execution_id, attempt = context.attempt, lease_id = context.lease_id,
        tool = %route.tool, "calling the upstream tool");
    let response = tokio::select! {
        response = upstream.call(params) => response,
        // Cancelled, lease lost or past the deadline: the cluster decides
        // what the attempt was; a report now would be refused.
        _ = context.cancel.cancelled() => {
            return Err(HandlerError::retryable(UPSTREAM_UNAVAILABLE, "the attempt was stopped"));
        }
    };
    match response {
        Ok(CallToolResponse::Complete(result)) => serde_json::to_value(result).map_err(|error| {
            HandlerError::fatal("OUTPUT_INVALID", format!("the tool result does not encode: {error}"))
        }),
        Ok(_) => Err(HandlerError::fatal(
            UPSTREAM_REFUSED,
            "the upstream answered with a task or an input request, which a governed call does not follow",
        )),
        Err(rmcp::service::ServiceError::McpError(error)) => {
            Err(HandlerError::fatal(UPSTREAM_REFUSED, format!("the upstream refused the call: {}", error.message)))
        }
        Err(error) => Err(HandlerError::retryable(UPSTREAM_UNAVAILABLE, format!("the upstream call broke: {error}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn context(input: serde_json::Value) -> TaskContext {
        TaskContext {
            execution_id: "mcp-1".to_string(),
            attempt: 1,
            idempotency_key: "idk_1".to_string(),
            lease_id: 7,
            deadline_ms: 0,
            actor: None,
            approver: None,
            capability: None,
            input_json: input.to_string(),
            correlation_id: None,
            cancel: CancellationToken::new(),
        }
    }

    fn route(key_argument: Option<&str>) -> Route {
        Route { upstream: 0, tool: "write_file".to_string(), idempotency_key_argument: key_argument.map(String::from) }
    }

    #[test]
    fn an_input_naming_another_tool_than_its_capability_is_refused_unrun() {
        let borrowed = context(serde_json::json!({"server": "fs", "tool": "delete_all", "arguments": {}}));
        let refused = upstream_arguments("mcp.fs.write_file", "fs", &route(None), &borrowed);
        assert!(matches!(refused, Err(HandlerError { ref code, retryable: false, .. }) if code == "INPUT_INVALID"));
        let other_server = context(serde_json::json!({"server": "db", "tool": "write_file", "arguments": {}}));
        assert!(upstream_arguments("mcp.fs.write_file", "fs", &route(None), &other_server).is_err());
    }

    #[test]
    fn the_idempotency_key_is_set_where_the_tool_takes_one() {
        let input = context(serde_json::json!({"server": "fs", "tool": "write_file", "arguments": {"path": "a"}}));
        let plain = upstream_arguments("mcp.fs.write_file", "fs", &route(None), &input).ok();
        assert_eq!(plain.map(serde_json::Value::Object), Some(serde_json::json!({"path": "a"})));
        let keyed = upstream_arguments("mcp.fs.write_file", "fs", &route(Some("requestId")), &input).ok();
        assert_eq!(keyed.map(serde_json::Value::Object), Some(serde_json::json!({"path": "a", "requestId": "idk_1"})));
    }
}
