//! `gavel exec submit|resume|get|list|wait|cancel|events`: executions.

use clap::{Args, Subcommand, ValueEnum};
use gavel_client::{pb, Client};
use gavel_core::ErrorCode;
use serde_json::json;

use super::output::{self, actor_text, key_values, or_dash, time, Table};
use super::paging::{self, PageArgs};
use super::{approval, CommandError, GlobalArgs};

/// Longest wait the cluster grants one `WaitExecution` call (ms); `exec wait`
/// asks for at most this much per call and calls again for longer timeouts.
const WAIT_CALL_MS_MAX: u64 = 60_000;

/// `gavel exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: ExecCommand,
}

/// The verbs of `gavel exec`.
#[derive(Debug, Subcommand)]
pub enum ExecCommand {
    /// Submit a capability call as the `--as` actor. When the capability needs
    /// approval this creates a pending approval instead; resume it once approved.
    Submit {
        /// Capability id.
        capability: String,
        /// Input as JSON text, or `@PATH` to read it from a file.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        input: String,
        /// Execution id of your choice; repeating a submit with the same id and
        /// input returns the existing execution instead of a second one.
        #[arg(long = "id", value_name = "EXECUTION_ID")]
        execution_id: Option<String>,
        /// Where the call comes from (free text recorded on the execution).
        #[arg(long, default_value = "cli")]
        surface: String,
        /// Application correlation id, echoed in audit events.
        #[arg(long, value_name = "X")]
        correlation_id: Option<String>,
    },
    /// Consume an approved approval and create its execution.
    Resume {
        /// Approval id (printed by `exec submit`).
        approval_id: String,
        /// The input as the caller sees it now, JSON text or @PATH. Checked
        /// against the approved input's hash; required for a standing
        /// approval bound to JSON pointers (`approval standing create
        /// --bind`), whose use runs this input.
        #[arg(long, value_name = "JSON|@PATH")]
        input: Option<String>,
        /// Id of the execution to create when the approval names none (a
        /// standing approval's uses); the cluster assigns one otherwise.
        #[arg(long, value_name = "ID")]
        execution_id: Option<String>,
        /// Then wait (up to this many ms) until the execution is final and show it.
        #[arg(long, value_name = "MS")]
        wait: Option<u64>,
        /// While the approval is pending, wait (within --wait) for its
        /// decision and resume on it: the decision spends the approval and
        /// starts the execution in the same log entry.
        #[arg(long, requires = "wait")]
        await_decision: bool,
    },
    /// Show an execution.
    Get {
        /// Execution id.
        id: String,
    },
    /// List the executions you may read, newest submission first, one page
    /// at a time (filters compose; the footer prints the token of the next
    /// page).
    List {
        /// Only executions in this state.
        #[arg(long, value_enum)]
        status: Option<StateFilter>,
        /// Only executions of this capability id.
        #[arg(long, value_name = "ID")]
        capability: Option<String>,
        /// Only executions requested by this principal (kind:id, as `gavel
        /// whoami` prints it) or actor id.
        #[arg(long, value_name = "PRINCIPAL")]
        principal: Option<String>,
        /// Paging.
        #[command(flatten)]
        page: PageArgs,
    },
    /// Wait until an execution is final and show it; exit code 1 when the
    /// timeout passes first.
    Wait {
        /// Execution id.
        id: String,
        /// How long to wait (ms).
        #[arg(long, value_name = "N", default_value_t = 60_000)]
        timeout_ms: u64,
    },
    /// Cancel an execution (terminal; the running attempt's lease is revoked).
    Cancel {
        /// Execution id.
        id: String,
    },
    /// List an execution's audit events.
    Events {
        /// Execution id.
        id: String,
    },
}

/// The states `exec list --status` accepts.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StateFilter {
    /// Waiting for a worker.
    Queued,
    /// Leased to a worker, running an attempt.
    Leased,
    /// Waiting out a backoff before its next attempt.
    Backoff,
    /// Final: an attempt completed.
    Completed,
    /// Final: failed, no retry left.
    Failed,
    /// Final: cancelled, or timed out with no retry allowed.
    Cancelled,
}

impl StateFilter {
    fn proto(self) -> pb::ExecutionState {
        match self {
            StateFilter::Queued => pb::ExecutionState::Queued,
            StateFilter::Leased => pb::ExecutionState::Leased,
            StateFilter::Backoff => pb::ExecutionState::Backoff,
            StateFilter::Completed => pb::ExecutionState::Completed,
            StateFilter::Failed => pb::ExecutionState::Failed,
            StateFilter::Cancelled => pb::ExecutionState::Cancelled,
        }
    }
}

/// Runs one `gavel exec` command.
pub async fn run(args: ExecArgs) -> Result<(), CommandError> {
    let json = args.global.json;
    match args.command {
        ExecCommand::Submit { capability, input, execution_id, surface, correlation_id } => {
            let input_json = read_input(&input)?;
            let client = args.global.client()?;
            let request = pb::SubmitRequest {
                execution_id,
                capability_id: capability,
                input_json,
                actor: args.global.actor(),
                surface,
                correlation_id,
                ..pb::SubmitRequest::default()
            };
            let response = client.submit(request).await?;
            print_submitted(&response, json)
        }
        ExecCommand::Resume { approval_id, input, execution_id, wait: wait_ms, await_decision } => {
            let input_json = input.as_deref().map(read_input).transpose()?;
            let client = args.global.client()?;
            let request = pb::ResumeRequest { approval_id, execution_id, input_json, ..pb::ResumeRequest::default() };
            let Some(timeout_ms) = wait_ms else {
                let response = client.resume(request).await?;
                return print_execution(&unwrap_execution(response.execution)?, json);
            };
            // The resume and the first wait are one call (ResumeAndWait); a
            // longer wait continues with WaitExecution.
            let started = std::time::Instant::now();
            let wait_ms = timeout_ms.min(WAIT_CALL_MS_MAX);
            let answer = client
                .resume_and_wait(pb::ResumeAndWaitRequest { resume: Some(request), wait_ms, await_decision })
                .await?;
            let execution = unwrap_execution(answer.execution)?;
            if !answer.timed_out || answer.wait_refused {
                return print_execution(&execution, json);
            }
            let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            wait(&client, execution.execution_id, timeout_ms.saturating_sub(elapsed_ms), json).await
        }
        ExecCommand::Get { id } => {
            let client = args.global.client()?;
            let response = client.get_execution(pb::GetExecutionRequest { execution_id: id.clone() }).await?;
            let execution = response.execution.ok_or_else(|| not_found(&id))?;
            print_execution(&execution, json)
        }
        ExecCommand::List { status, capability, principal, page } => {
            let client = args.global.client()?;
            let mut request = pb::ListExecutionsRequest {
                state: status.map(|status| status.proto() as i32),
                capability_id: capability,
                requester: principal,
                limit: page.limit(),
                page_token: page.page_token(),
                oldest_first: page.oldest_first,
            };
            let mut executions = Vec::new();
            loop {
                let listed = client.list_executions(request.clone()).await?;
                executions.extend(listed.executions);
                if !page.all || listed.next_page_token.is_empty() {
                    return print_list(&executions, &listed.next_page_token, json);
                }
                request.page_token = listed.next_page_token;
            }
        }
        ExecCommand::Wait { id, timeout_ms } => {
            let client = args.global.client()?;
            wait(&client, id, timeout_ms, json).await
        }
        ExecCommand::Cancel { id } => {
            let client = args.global.client()?;
            let request = pb::CancelExecutionRequest {
                execution_id: id,
                actor: args.global.actor(),
                ..pb::CancelExecutionRequest::default()
            };
            let response = client.cancel_execution(request).await?;
            print_execution(&unwrap_execution(response.execution)?, json)
        }
        ExecCommand::Events { id } => {
            let client = args.global.client()?;
            let events = all_events(&client, &id).await?;
            print_events(&events, json)
        }
    }
}

/// Prints one page of executions as a table (or JSON), and how to read the next.
fn print_list(executions: &[pb::Execution], next_page_token: &str, json: bool) -> Result<(), CommandError> {
    if json {
        let executions: Vec<_> = executions.iter().map(output::execution_json).collect();
        let next_page_token = paging::token_json(next_page_token);
        return output::print_json(&json!({ "executions": executions, "nextPageToken": next_page_token }));
    }
    if executions.is_empty() {
        eprintln!("no executions match");
        return paging::print_footer(next_page_token);
    }
    let mut table = Table::new(&["ID", "STATE", "CAPABILITY", "REQUESTER", "ATTEMPTS", "SUBMITTED", "FINALIZED"]);
    for execution in executions {
        table.row(vec![
            execution.execution_id.clone(),
            output::execution_state(execution.state),
            execution.capability_id.clone(),
            actor_text(execution.actor.as_ref()),
            execution.attempts.to_string(),
            time(execution.submitted_at_ms),
            or_dash(execution.finalized_at_ms.map(time)),
        ]);
    }
    output::print(&table.render())?;
    paging::print_footer(next_page_token)
}

/// The input text: given inline, or read from the file after `@`.
pub(crate) fn read_input(input: &str) -> Result<String, CommandError> {
    match input.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|error| CommandError::Other(anyhow::anyhow!("reading input file {path}: {error}"))),
        None => Ok(input.to_string()),
    }
}

fn not_found(id: &str) -> CommandError {
    CommandError::refused(ErrorCode::NotFound, format!("execution {id} was not found"))
}

fn unwrap_execution(execution: Option<pb::Execution>) -> Result<pb::Execution, CommandError> {
    execution.ok_or_else(|| CommandError::Other(anyhow::anyhow!("the cluster answered without the execution")))
}

/// Waits in calls of at most [`WAIT_CALL_MS_MAX`] until the execution is final
/// or `timeout_ms` has passed.
async fn wait(client: &Client, id: String, timeout_ms: u64, json: bool) -> Result<(), CommandError> {
    let started = std::time::Instant::now();
    loop {
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let remaining_ms = timeout_ms.saturating_sub(elapsed_ms);
        let request =
            pb::WaitExecutionRequest { execution_id: id.clone(), timeout_ms: remaining_ms.min(WAIT_CALL_MS_MAX) };
        let response = client.wait_execution(request).await?;
        let execution = unwrap_execution(response.execution)?;
        if !response.timed_out {
            return print_execution(&execution, json);
        }
        if remaining_ms <= WAIT_CALL_MS_MAX {
            print_execution(&execution, json)?;
            return Err(CommandError::Other(anyhow::anyhow!(
                "execution {id} is still {} after {timeout_ms} ms",
                output::execution_state(execution.state)
            )));
        }
    }
}

/// Every event of one execution, page after page.
async fn all_events(client: &Client, id: &str) -> Result<Vec<pb::Event>, CommandError> {
    let mut events: Vec<pb::Event> = Vec::new();
    loop {
        let after_cursor = events.last().map_or(0, |event| event.cursor);
        let request = pb::ListExecutionEventsRequest { execution_id: id.to_string(), after_cursor, limit: 0 };
        let page = client.list_execution_events(request).await?.events;
        if page.is_empty() {
            break;
        }
        events.extend(page);
    }
    if events.is_empty() {
        // An unknown execution has no events; say so rather than print nothing.
        let response = client.get_execution(pb::GetExecutionRequest { execution_id: id.to_string() }).await?;
        if response.execution.is_none() {
            return Err(not_found(id));
        }
    }
    Ok(events)
}

fn print_events(events: &[pb::Event], json: bool) -> Result<(), CommandError> {
    if json {
        let events: Vec<_> = events.iter().map(output::event_json).collect();
        return output::print_json(&json!({ "events": events }));
    }
    let mut table = Table::new(&output::EVENT_HEADERS);
    for event in events {
        table.row(output::event_row(event));
    }
    output::print(&table.render())
}

fn print_submitted(response: &pb::SubmitResponse, json: bool) -> Result<(), CommandError> {
    use pb::submit_response::Outcome;
    match &response.outcome {
        Some(Outcome::Execution(execution)) => {
            if json {
                return output::print_json(&json!({
                    "outcome": "execution",
                    "created": response.created,
                    "execution": output::execution_json(execution),
                }));
            }
            if !response.created {
                eprintln!("execution {} already existed with this input", execution.execution_id);
            }
            print_execution(execution, false)
        }
        Some(Outcome::ApprovalRequired(pending)) => {
            if json {
                return output::print_json(&json!({
                    "outcome": "approvalRequired",
                    "created": response.created,
                    "approval": output::approval_json(pending),
                }));
            }
            output::print(&format!(
                "approval required: {} is {} until {}\n{}then:              gavel exec resume {}\n\n",
                pending.id,
                output::approval_status(pending.status),
                time(pending.expires_at_ms),
                approve_hint(pending),
                pending.id
            ))?;
            approval::print_approval(pending, false)
        }
        None => Err(CommandError::Other(anyhow::anyhow!("the cluster answered without an outcome"))),
    }
}

/// Who may decide a pending approval and the command they run, so the hint
/// works as printed: the requester may not decide it, nor the principal
/// that requested it on the requester's behalf (`--as`), which is this
/// shell. In that case (the quick start of `gavel dev`, whose admin submits
/// for a persona) it also names how this shell approves as another persona,
/// unless a policy governs the approval (a vote may not name another).
fn approve_hint(pending: &pb::Approval) -> String {
    let requester = actor_text(pending.actor.as_ref());
    let principal = serde_json::from_str::<serde_json::Value>(&pending.terms_json)
        .ok()
        .and_then(|terms| terms["requester"]["principal"].as_str().map(str::to_string))
        .filter(|principal| *principal != requester);
    let approve = format!("gavel approval approve {}", pending.id);
    match principal {
        None => format!(
            "who may decide:    an approver other than {requester} (the requester)\n\
             an approver runs:  {approve}\n"
        ),
        Some(principal) => {
            let mut hint = format!(
                "who may decide:    an approver other than {requester} (the requester) and {principal} \
                 (who requested it for them)\n\
                 an approver runs:  {approve}\n"
            );
            // A vote (a governed approval) is always the voter's own: no `--as`.
            let persona = crate::dev::approver_persona(&requester).filter(|_| pending.quorum.is_none());
            if let Some(persona) = persona {
                hint.push_str(&format!("in gavel dev:      {approve} --as {persona}\n"));
            }
            hint
        }
    }
}

/// One line describing the final result.
fn result_text(result: Option<&pb::ResultEnvelope>) -> String {
    use pb::result_envelope::Outcome;
    match result.and_then(|result| result.outcome.as_ref()) {
        None => "-".to_string(),
        Some(Outcome::Completed(completed)) => format!(
            "completed after {} attempt(s) in {}ms: {}",
            completed.attempts,
            completed.duration_ms,
            output::compact_json(&completed.output_json)
        ),
        Some(Outcome::Failed(failed)) => {
            let mut text = format!(
                "failed after {} attempt(s): {}: {} (retryable: {})",
                failed.attempts, failed.code, failed.message, failed.retryable
            );
            if let Some(executed) = output::executed_before_failure(failed.executed_before_failure) {
                text.push_str(&format!(", executed before failure: {executed}"));
            }
            text
        }
        Some(Outcome::Cancelled(cancelled)) => format!(
            "cancelled ({}) after {} attempt(s) in {}ms",
            output::cancel_code(cancelled.code),
            cancelled.attempts,
            cancelled.duration_ms
        ),
    }
}

/// Prints one execution as a record (or JSON).
pub fn print_execution(execution: &pb::Execution, json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&output::execution_json(execution));
    }
    let lease = execution.current_lease.as_ref().map(|lease| {
        format!(
            "{} (attempt {}, worker {}, deadline {})",
            lease.lease_id,
            lease.attempt,
            lease.worker_id,
            time(lease.deadline_ms)
        )
    });
    output::print(&key_values(&[
        ("execution", execution.execution_id.clone()),
        ("state", output::execution_state(execution.state)),
        ("capability", format!("{} (version {})", execution.capability_id, execution.capability_version)),
        ("actor", actor_text(execution.actor.as_ref())),
        ("surface", execution.surface.clone()),
        ("correlation id", or_dash(execution.correlation_id.as_deref())),
        ("approval", or_dash(execution.approval_id.as_deref())),
        ("approver", actor_text(execution.approver.as_ref())),
        ("input", output::compact_json(&execution.input_json)),
        ("input hash", execution.input_hash.clone()),
        ("idempotency key", execution.idempotency_key.clone()),
        ("attempts", execution.attempts.to_string()),
        ("submitted", time(execution.submitted_at_ms)),
        ("finalized", or_dash(execution.finalized_at_ms.map(time))),
        ("lease", or_dash(lease)),
        ("backoff until", or_dash(execution.backoff_until_ms.map(time))),
        ("cancel requested", execution.cancel_requested.to_string()),
        ("result", result_text(execution.result.as_ref())),
    ]))
}
