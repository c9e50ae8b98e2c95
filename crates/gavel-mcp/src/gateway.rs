//! [`Gateway`]: the MCP server agents talk to. It lists the upstream tools,
//! forwards ungoverned calls as they are, and turns a governed call into a
//! Gavel execution submitted with the calling agent's own Gavel token; its
//! `tasks/get` and `tasks/cancel` answer from the cluster alone, so any
//! gateway instance answers for any task.
//!
//! Identity: the agent's Gavel token is its bearer token on the HTTP
//! transport (`Authorization: Bearer ...`), or the token the gateway was
//! given for its one stdio client. The gateway forwards it to the cluster,
//! which authenticates, authorizes and records the agent as the requester;
//! the gateway itself holds no power over the agent's records. A task is
//! answered only to the principal whose record it is: anyone else, and a
//! client without a token, is told the task is unknown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gavel_client::{pb, Client, ClientConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock, CreateTaskResult,
    DetailedTask, ErrorData, GetTaskParams, GetTaskResult, Implementation, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::ServerHandler;
use sha2::Digest;

use crate::config::{Config, Governed};
use crate::tasks;
use crate::upstream::Upstream;
use crate::worker::CallInput;

/// The most agents' cluster clients the gateway keeps (each holds its
/// channels); past it the cache starts again.
const AGENT_CLIENTS_MAX: usize = 1024;

/// The longest a call from a client without the Tasks extension waits for
/// an execution that needs no approval (ms), beyond the tool's own timeout.
const UNTASKED_WAIT_MARGIN_MS: u64 = 5_000;

/// One tool as the gateway lists it.
#[derive(Debug, Clone)]
pub struct Exposed {
    /// The name agents call: the upstream's own when there is one upstream,
    /// `<server>.<tool>` when there are several.
    pub name: String,
    /// The index of its upstream.
    pub upstream: usize,
    /// Its definition, renamed.
    pub tool: Tool,
    /// Its name upstream.
    pub upstream_name: String,
    /// How Gavel governs it; `None` passes it through.
    pub governed: Option<Governed>,
}

/// Where the cluster is and how to reach it as an agent.
#[derive(Clone)]
pub struct ClusterAccess {
    /// The node addresses.
    pub endpoints: Vec<String>,
    /// Timings and TLS (the CA; no client identity: an agent's token is
    /// added per agent).
    pub config: ClientConfig,
}

/// The MCP server the agents see. Cheap to clone.
#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

struct Shared {
    upstreams: Arc<Vec<Upstream>>,
    exposed: Vec<Exposed>,
    cluster: ClusterAccess,
    console_url: Option<String>,
    stdio_token: Option<String>,
    agents: Mutex<HashMap<String, Agent>>,
}

/// An authenticated agent: its cluster client and principal.
#[derive(Clone)]
struct Agent {
    client: Client,
    principal: String,
}

impl Gateway {
    /// A gateway over connected upstreams.
    pub fn new(
        config: &Config,
        upstreams: Arc<Vec<Upstream>>,
        cluster: ClusterAccess,
        stdio_token: Option<String>,
    ) -> Gateway {
        let exposed = expose(config, &upstreams);
        Gateway {
            shared: Arc::new(Shared {
                upstreams,
                exposed,
                cluster,
                console_url: config.console_url.clone(),
                stdio_token,
                agents: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The tools as listed, with their governance.
    pub fn exposed(&self) -> &[Exposed] {
        &self.shared.exposed
    }

    /// The caller's Gavel token: the HTTP request's bearer token, else the
    /// stdio client's configured one.
    fn token(&self, context: &RequestContext<RoleServer>) -> Option<String> {
        if let Some(parts) = context.extensions.get::<http::request::Parts>() {
            return parts
                .headers
                .get(http::header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer ")))
                .map(|token| token.trim().to_string())
                .filter(|token| !token.is_empty());
        }
        self.shared.stdio_token.clone()
    }

    /// The agent a token authenticates, asking the cluster once per token.
    async fn agent(&self, token: &str) -> Result<Agent, gavel_client::Error> {
        let key = hex::encode(sha2::Sha256::digest(token.as_bytes()));
        if let Some(agent) = self.lock_agents().get(&key) {
            return Ok(agent.clone());
        }
        let config = ClientConfig { token: Some(token.to_string()), ..self.shared.cluster.config.clone() };
        let client = Client::with_config(&self.shared.cluster.endpoints, config)?;
        let principal = client.who_am_i(pb::WhoAmIRequest {}).await?.principal;
        let agent = Agent { client, principal };
        let mut agents = self.lock_agents();
        if agents.len() >= AGENT_CLIENTS_MAX {
            agents.clear();
        }
        agents.insert(key, agent.clone());
        Ok(agent)
    }

    fn lock_agents(&self) -> std::sync::MutexGuard<'_, HashMap<String, Agent>> {
        // A panic elsewhere cannot leave the cache half-written: it is a map
        // of whole entries.
        self.shared.agents.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn governed_call(
        &self,
        exposed: &Exposed,
        governed: &Governed,
        arguments: rmcp::model::JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(token) = self.token(context) else {
            return Ok(text_error(format!(
                "{} is governed by Gavel and needs an authenticated agent: send your Gavel token as \
                 `Authorization: Bearer <token>` (over stdio, the gateway is started with \
                 --agent-token-file). Nothing was run.",
                exposed.name
            )));
        };
        let agent = match self.agent(&token).await {
            Ok(agent) => agent,
            Err(error) => return Ok(text_error(format!("the Gavel cluster did not accept your token: {error}"))),
        };
        let upstream = &self.shared.upstreams[exposed.upstream];
        let input = CallInput { server: upstream.name.clone(), tool: exposed.upstream_name.clone(), arguments };
        let input_json =
            serde_json::to_string(&input).map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
        let task_id = tasks::new_task_id();
        let request = pb::SubmitRequest {
            request_id: String::new(),
            execution_id: Some(task_id.clone()),
            capability_id: governed.spec.id.clone(),
            input_json,
            actor: None,
            surface: "mcp".to_string(),
            correlation_id: None,
        };
        let submitted = match agent.client.submit(request).await {
            Ok(submitted) => submitted,
            Err(error) => return Ok(text_error(format!("Gavel refused the call, nothing was run: {error}"))),
        };
        let tasks_client = context.client_capabilities().is_some_and(|capabilities| capabilities.supports_tasks());
        match submitted.outcome {
            Some(pb::submit_response::Outcome::ApprovalRequired(approval)) => {
                tracing::info!(task_id, approval_id = %approval.id, principal = %agent.principal, "governed call awaits approval");
                if tasks_client {
                    let task = tasks::approval_task(&approval, self.shared.console_url.as_deref(), &task_id);
                    Ok(CallToolResponse::Task(CreateTaskResult::new(task.task)))
                } else {
                    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                        "Not run yet: this call needs a person's approval. {}. It runs once approved; its Gavel \
                         execution id is {task_id}. A client with the MCP Tasks extension gets a task to poll instead.",
                        tasks::pending_message(&approval.id, self.shared.console_url.as_deref())
                    ))])
                    .into())
                }
            }
            Some(pb::submit_response::Outcome::Execution(execution)) => {
                if tasks_client {
                    return Ok(CallToolResponse::Task(CreateTaskResult::new(tasks::execution_task(&execution).task)));
                }
                let timeout_ms = governed.spec.timeout_ms.unwrap_or(30_000) + UNTASKED_WAIT_MARGIN_MS;
                let waited = agent
                    .client
                    .wait_execution(pb::WaitExecutionRequest { execution_id: task_id.clone(), timeout_ms })
                    .await;
                match waited.map(|waited| waited.execution) {
                    Ok(Some(execution)) => Ok(untasked_result(&tasks::execution_task(&execution))),
                    Ok(None) => Ok(text_error(format!("Gavel execution {task_id} has no record"))),
                    Err(error) => Ok(text_error(format!("waiting for Gavel execution {task_id}: {error}"))),
                }
            }
            None => Ok(text_error("the cluster answered the submit with nothing".to_string())),
        }
    }

    /// The task `task_id` as its owner sees it, or `None` when it is unknown
    /// or not the caller's. An approved approval is resumed here: the first
    /// `tasks/get` after the decision spends it, once, cluster-wide.
    async fn task_view(&self, agent: &Agent, task_id: &str) -> Result<Option<DetailedTask>, ErrorData> {
        if let Some(execution) = self.execution(agent, task_id).await? {
            return Ok(Some(tasks::execution_task(&execution)));
        }
        let approval_id = tasks::approval_id(task_id);
        let approval = match agent
            .client
            .get_approval(pb::GetApprovalRequest { id: approval_id.clone(), caller_now_ms: None })
            .await
        {
            Ok(response) => response.approval,
            Err(error) if error.code() == "NOT_FOUND" => None,
            Err(error) => return Err(cluster_error(error)),
        };
        let Some(approval) = approval.filter(|approval| owned_by(approval.actor.as_ref(), &agent.principal)) else {
            return Ok(None);
        };
        if approval.status != pb::ApprovalStatus::Approved as i32 {
            return Ok(Some(tasks::approval_task(&approval, self.shared.console_url.as_deref(), task_id)));
        }
        let resume = pb::ResumeRequest {
            request_id: String::new(),
            approval_id: approval_id.clone(),
            execution_id: Some(task_id.to_string()),
            input_json: None,
        };
        match agent.client.resume(resume).await {
            Ok(resumed) => {
                tracing::info!(task_id, approval_id, "approval spent; execution queued");
                Ok(resumed.execution.as_ref().map(tasks::execution_task))
            }
            // Another gateway (or another poll) resumed it first: the
            // execution exists now.
            Err(error) if error.code() == "APPROVAL_CONSUMED" => {
                Ok(self.execution(agent, task_id).await?.as_ref().map(tasks::execution_task))
            }
            // The cluster refused to spend it (expired after the decision,
            // ...): the call will never run, and the task says why.
            Err(gavel_client::Error::Domain { code, message, .. }) if code.starts_with("APPROVAL_") => {
                Ok(Some(tasks::refused_task(&approval, task_id, &code, &message)))
            }
            // Unreachable or overloaded: the next poll tries again.
            Err(error) => {
                tracing::warn!(task_id, %error, "resuming an approved call failed; the next tasks/get retries");
                let mut task = tasks::approval_task(&approval, self.shared.console_url.as_deref(), task_id);
                task.task.status_message = Some(format!("approved; starting it failed for now: {error}"));
                Ok(Some(task))
            }
        }
    }

    async fn execution(&self, agent: &Agent, task_id: &str) -> Result<Option<pb::Execution>, ErrorData> {
        match agent.client.get_execution(pb::GetExecutionRequest { execution_id: task_id.to_string() }).await {
            Ok(response) => {
                Ok(response.execution.filter(|execution| owned_by(execution.actor.as_ref(), &agent.principal)))
            }
            Err(error) if error.code() == "NOT_FOUND" => Ok(None),
            Err(error) => Err(cluster_error(error)),
        }
    }

    /// The caller's agent and the task, or the one "unknown task" answer
    /// for a missing token, a foreign task and an absent one alike.
    async fn owned_task(
        &self,
        task_id: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Agent, DetailedTask), ErrorData> {
        let Some(token) = self.token(context).filter(|_| tasks::is_task_id(task_id)) else {
            return Err(unknown_task(task_id));
        };
        let agent = self.agent(&token).await.map_err(|_| unknown_task(task_id))?;
        match self.task_view(&agent, task_id).await? {
            Some(task) => Ok((agent, task)),
            None => Err(unknown_task(task_id)),
        }
    }
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_tasks().build())
            .with_server_info(Implementation::new("gavel-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Tools Gavel governs answer with a task (MCP Tasks extension) while a person approves the call; \
                 poll tasks/get with the task id.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.shared.exposed.iter().map(|exposed| exposed.tool.clone()).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(exposed) = self.shared.exposed.iter().find(|exposed| exposed.name == request.name) else {
            return Err(ErrorData::invalid_params(format!("unknown tool {:?}", request.name), None));
        };
        if let Some(governed) = &exposed.governed {
            let arguments = request.arguments.clone().unwrap_or_default();
            return self.governed_call(exposed, governed, arguments, &context).await;
        }
        let mut forwarded = request;
        forwarded.name = exposed.upstream_name.clone().into();
        match self.shared.upstreams[exposed.upstream].call(forwarded).await {
            Ok(response) => Ok(response),
            Err(rmcp::service::ServiceError::McpError(error)) => Err(error),
            Err(error) => Err(ErrorData::internal_error(format!("upstream: {error}"), None)),
        }
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (_, task) = self.owned_task(&request.task_id, &context).await?;
        Ok(GetTaskResult::new(task))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let task_id = request.task_id;
        let (agent, task) = self.owned_task(&task_id, &context).await?;
        if task.status().is_terminal() {
            return Err(ErrorData::invalid_params(format!("task {task_id} is already {:?}", task.status()), None));
        }
        let cancelled = match self.execution(&agent, &task_id).await? {
            Some(_) => agent
                .client
                .cancel_execution(pb::CancelExecutionRequest {
                    request_id: String::new(),
                    execution_id: task_id.clone(),
                    actor: None,
                })
                .await
                .map(|_| ()),
            None => agent
                .client
                .cancel_approval(pb::CancelApprovalRequest {
                    request_id: String::new(),
                    caller_now_ms: None,
                    id: tasks::approval_id(&task_id),
                })
                .await
                .map(|_| ()),
        };
        cancelled.map_err(cluster_error)
    }
}

/// The tools agents see: every upstream tool, renamed `<server>.<tool>`
/// when there are several upstreams, with its governance.
fn expose(config: &Config, upstreams: &[Upstream]) -> Vec<Exposed> {
    let namespaced = upstreams.len() > 1;
    let mut exposed = Vec::new();
    for (index, upstream) in upstreams.iter().enumerate() {
        for tool in &upstream.tools {
            let name = if namespaced { format!("{}.{}", upstream.name, tool.name) } else { tool.name.to_string() };
            let governed = config.rule(&upstream.name, &tool.name).map(|rule| rule.governed(tool.annotations.as_ref()));
            let mut listed = tool.clone();
            listed.name = name.clone().into();
            exposed.push(Exposed {
                name,
                upstream: index,
                tool: listed,
                upstream_name: tool.name.to_string(),
                governed,
            });
        }
    }
    exposed
}

fn owned_by(actor: Option<&pb::Actor>, principal: &str) -> bool {
    actor.is_some_and(|actor| gavel_client::actor_text(actor) == principal)
}

fn unknown_task(task_id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown task {task_id:?}"), None)
}

fn cluster_error(error: gavel_client::Error) -> ErrorData {
    ErrorData::internal_error(format!("the Gavel cluster: {error}"), None)
}

fn text_error(message: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message)]).into()
}

/// A finished execution as a plain tool result, for a client without the
/// Tasks extension.
fn untasked_result(task: &DetailedTask) -> CallToolResponse {
    match &task.payload {
        rmcp::model::TaskPayload::Completed { result } => {
            match serde_json::from_value::<CallToolResult>(serde_json::Value::Object(result.clone())) {
                Ok(result) => result.into(),
                Err(error) => text_error(format!("the recorded result is not a tool result: {error}")),
            }
        }
        _ => text_error(task.task.status_message.clone().unwrap_or_else(|| format!("{:?}", task.status()))),
    }
}
