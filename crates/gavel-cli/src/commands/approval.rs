//! `gavel approval list|get|approve|reject|withdraw|cancel|votes`: what an
//! approver runs; and `gavel approval standing create`: a bounded standing
//! approval.
//!
//! `approve` and `reject` decide on the terms the person saw (SPEC §13):
//! they read the approval, print its terms (`terms_text`), and send the
//! terms hash the person confirmed — at a terminal by answering the prompt,
//! otherwise with `--yes` (the hash just read) or `--terms-hash` (a hash the
//! console or the notifier showed). The cluster refuses the decision with
//! `APPROVAL_TERMS_CHANGED` when the terms no longer hash to it.

use std::io::{BufRead, IsTerminal, Write};

use clap::{Args, Subcommand, ValueEnum};
use gavel_client::{pb, Client};
use gavel_core::ErrorCode;
use serde_json::{json, Value};

use super::output::{self, actor_text, key_values, or_dash, time, Table};
use super::paging::{self, PageArgs};
use super::{CommandError, GlobalArgs};

/// `gavel approval`.
#[derive(Debug, Args)]
pub struct ApprovalArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: ApprovalCommand,
}

/// The verbs of `gavel approval`.
#[derive(Debug, Subcommand)]
pub enum ApprovalCommand {
    /// List approvals, newest request first, one page at a time (filters
    /// compose; the footer prints the token of the next page).
    List {
        /// Only approvals in this status (a pending approval past its expiry reads as expired).
        #[arg(long, value_enum)]
        status: Option<StatusFilter>,
        /// Only approvals for this capability id.
        #[arg(long, value_name = "ID")]
        capability: Option<String>,
        /// Only approvals requested by this actor id.
        #[arg(long = "actor", value_name = "ID")]
        requester: Option<String>,
        /// Paging.
        #[command(flatten)]
        page: PageArgs,
        /// Only approvals whose ids break the id rule (SPEC §13), stored
        /// before it: for an admin to review. Nothing is rewritten.
        #[arg(long)]
        unsafe_ids: bool,
    },
    /// Show one approval.
    Get {
        /// Approval id.
        id: String,
    },
    /// Approve a pending approval, as the `--as` actor (who must not be the
    /// requester), after reading and confirming its terms.
    Approve {
        /// Approval id.
        id: String,
        /// Justification recorded with the decision.
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
        /// How the terms are confirmed.
        #[command(flatten)]
        confirmation: Confirmation,
    },
    /// Reject a pending approval, as the `--as` actor, after reading and
    /// confirming its terms.
    Reject {
        /// Approval id.
        id: String,
        /// Justification recorded with the decision.
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
        /// How the terms are confirmed.
        #[command(flatten)]
        confirmation: Confirmation,
    },
    /// Withdraw your own vote from a pending governed approval (to vote
    /// again, or not at all).
    Withdraw {
        /// Approval id.
        id: String,
    },
    /// Withdraw a pending approval (the application no longer needs it).
    Cancel {
        /// Approval id.
        id: String,
    },
    /// The policy governing an approval, each factor's progress and every
    /// vote (on a governed approval, approve and reject each cast one vote).
    Votes {
        /// Approval id.
        id: String,
    },
    /// Bounded standing approvals: one decision for up to N resumes.
    Standing {
        /// What to do.
        #[command(subcommand)]
        command: StandingCommand,
    },
}

/// The verbs of `gavel approval standing`.
#[derive(Debug, Subcommand)]
pub enum StandingCommand {
    /// Request a standing approval (pending until decided, like any
    /// approval): once approved, up to `--uses` resumes within `--window`
    /// of the decision, each spending one use (`gavel exec resume ID`).
    Create(Box<StandingCreate>),
}

/// `gavel approval standing create`'s flags.
#[derive(Debug, Args)]
pub struct StandingCreate {
    /// Approval id (default: `standing-<unix ms>`).
    #[arg(long)]
    pub id: Option<String>,
    /// The capability every use runs.
    #[arg(long, value_name = "ID")]
    pub capability: String,
    /// The one requester it covers, `kind:id` (default: the `--as` actor,
    /// or over TLS the principal of your credentials).
    #[arg(long, value_name = "ACTOR", value_parser = super::parse_actor)]
    pub requester: Option<pb::Actor>,
    /// Most uses (1 to 100, STANDING_USES_MAX).
    #[arg(long, value_name = "N")]
    pub uses: u32,
    /// How long after the decision uses are allowed: 90s, 30m, 1h, 7d
    /// (at most 7 days, STANDING_WINDOW_MS_MAX).
    #[arg(long, value_name = "DURATION", value_parser = super::token::parse_ttl)]
    pub window: std::time::Duration,
    /// The approved input as JSON text, or `@PATH` to read it from a file.
    #[arg(long, value_name = "JSON")]
    pub input: String,
    /// Bind the uses to equality at this JSON pointer (repeatable, e.g.
    /// `/order_id`): each resume gives its own input, equal to the
    /// approved one there. Without it every use runs exactly the
    /// approved input (its hash).
    #[arg(long = "bind", value_name = "POINTER")]
    pub bound_pointers: Vec<String>,
    /// Approval types (routing, and the policy that governs it).
    #[arg(long, value_delimiter = ',', value_name = "TYPE,..")]
    pub types: Vec<String>,
    /// Why it is needed (repeatable).
    #[arg(long = "reason", value_name = "TEXT")]
    pub reasons: Vec<String>,
    /// Where the request comes from.
    #[arg(long, default_value = "cli")]
    pub surface: String,
}

/// How `approve` and `reject` learn that the person saw the terms they
/// decide on. At a terminal, without either flag, they ask.
#[derive(Debug, Clone, Default, Args)]
pub struct Confirmation {
    /// Decide on the terms whose hash is HASH (as the console, the notifier
    /// or `gavel approval get` showed it): sent as is, and refused
    /// APPROVAL_TERMS_CHANGED unless the approval's terms hash to it.
    #[arg(long, value_name = "HASH", conflicts_with = "yes")]
    pub terms_hash: Option<String>,
    /// Decide on the terms this command reads and prints, without asking
    /// (for scripts; it sends their hash).
    #[arg(long, short = 'y')]
    pub yes: bool,
}

/// The statuses `approval list --status` accepts.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum StatusFilter {
    /// Waiting for a decision.
    Pending,
    /// Approved, not yet consumed.
    Approved,
    /// Rejected.
    Rejected,
    /// Withdrawn before a decision.
    Cancelled,
    /// Pending past its expiry.
    Expired,
    /// Approved and spent by an execution.
    Consumed,
    /// Voided by a change of the policy it was created under.
    Voided,
}

impl StatusFilter {
    fn proto(self) -> pb::ApprovalStatus {
        match self {
            StatusFilter::Pending => pb::ApprovalStatus::Pending,
            StatusFilter::Approved => pb::ApprovalStatus::Approved,
            StatusFilter::Rejected => pb::ApprovalStatus::Rejected,
            StatusFilter::Cancelled => pb::ApprovalStatus::Cancelled,
            StatusFilter::Expired => pb::ApprovalStatus::Expired,
            StatusFilter::Consumed => pb::ApprovalStatus::Consumed,
            StatusFilter::Voided => pb::ApprovalStatus::Voided,
        }
    }
}

/// Runs one `gavel approval` command.
pub async fn run(args: ApprovalArgs) -> Result<(), CommandError> {
    let client = args.global.client()?;
    let json = args.global.json;
    match args.command {
        ApprovalCommand::List { status, capability, requester, page, unsafe_ids } => {
            let request = pb::ListApprovalsRequest {
                status: status.map(|status| status.proto() as i32),
                capability_id: capability,
                actor_id: requester,
                limit: page.limit(),
                page_token: page.page_token(),
                oldest_first: page.oldest_first,
                ..pb::ListApprovalsRequest::default()
            };
            if unsafe_ids {
                return list_unsafe_ids(&client, request, page.limit, json).await;
            }
            if page.all {
                return print_list(&list_all(&client, request).await?, "", json);
            }
            let listed = client.list_approvals(request).await?;
            print_list(&listed.approvals, &listed.next_page_token, json)
        }
        ApprovalCommand::Get { id } => {
            let response = client.get_approval(pb::GetApprovalRequest { id: id.clone(), caller_now_ms: None }).await?;
            let approval = response
                .approval
                .ok_or_else(|| CommandError::refused(ErrorCode::NotFound, format!("approval {id} was not found")))?;
            print_approval(&approval, json)
        }
        ApprovalCommand::Approve { id, comment, confirmation } => {
            let decision = Decision { status: pb::ApprovalStatus::Approved, approver: args.global.actor(), comment };
            decide(&client, id, decision, &confirmation, json).await
        }
        ApprovalCommand::Reject { id, comment, confirmation } => {
            let decision = Decision { status: pb::ApprovalStatus::Rejected, approver: args.global.actor(), comment };
            decide(&client, id, decision, &confirmation, json).await
        }
        ApprovalCommand::Withdraw { id } => {
            let request = pb::WithdrawVoteRequest {
                approval_id: id,
                approver: args.global.actor(),
                ..pb::WithdrawVoteRequest::default()
            };
            let response = client.withdraw_vote(request).await?;
            print_approval(&unwrap_approval(response.approval)?, json)
        }
        ApprovalCommand::Cancel { id } => {
            let response = client
                .cancel_approval(pb::CancelApprovalRequest { id, ..pb::CancelApprovalRequest::default() })
                .await?;
            print_approval(&unwrap_approval(response.approval)?, json)
        }
        ApprovalCommand::Votes { id } => super::policy::votes(&client, id, json).await,
        ApprovalCommand::Standing { command } => {
            let requester = args.global.actor();
            create_standing(&client, command, requester, json).await
        }
    }
}

/// `gavel approval standing create`: one `CreateApproval` with standing terms.
async fn create_standing(
    client: &Client,
    command: StandingCommand,
    caller: Option<pb::Actor>,
    json: bool,
) -> Result<(), CommandError> {
    let StandingCommand::Create(create) = command;
    let StandingCreate { id, capability, requester, uses, window, input, bound_pointers, types, reasons, surface } =
        *create;
    let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
    let id = id.unwrap_or_else(|| {
        let now_ms =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_millis());
        format!("standing-{now_ms}")
    });
    // The risk and side effect the approval shows are the capability's own.
    let answer = client.get_capability(pb::GetCapabilityRequest { id: capability.clone(), version: None }).await?;
    let spec = answer.capability.and_then(|capability| capability.spec).ok_or_else(|| {
        CommandError::refused(ErrorCode::CapabilityNotFound, format!("capability {capability} is not registered"))
    })?;
    let request = pb::CreateApprovalRequest {
        id,
        capability_id: capability,
        risk: spec.risk,
        side_effect: spec.side_effect,
        surface,
        actor: requester.or(caller),
        input_json: super::exec::read_input(&input)?,
        reasons,
        types,
        standing: Some(pb::StandingTerms { uses_max: uses, window_ms, bound_pointers }),
        ..pb::CreateApprovalRequest::default()
    };
    let response = client.create_approval(request).await?;
    print_approval(&unwrap_approval(response.approval)?, json)
}

/// Reads every page, from the request's token on.
async fn list_all(client: &Client, mut request: pb::ListApprovalsRequest) -> Result<Vec<pb::Approval>, CommandError> {
    let mut approvals = Vec::new();
    loop {
        let page = client.list_approvals(request.clone()).await?;
        approvals.extend(page.approvals);
        if page.next_page_token.is_empty() {
            return Ok(approvals);
        }
        request.page_token = page.next_page_token;
    }
}

/// `approval list --unsafe-ids`: every approval the filters select whose id
/// breaks the id rule. Which ids do is `gavel_core::validate`'s to say, the
/// same judge the cluster asks before storing one.
async fn list_unsafe_ids(
    client: &Client,
    request: pb::ListApprovalsRequest,
    limit: Option<u32>,
    json: bool,
) -> Result<(), CommandError> {
    let mut approvals = list_all(client, request).await?;
    approvals.retain(|approval| gavel_core::validate::is_unsafe_record_id(&approval.id));
    if let Some(limit) = limit {
        approvals.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    if approvals.is_empty() && !json {
        eprintln!("no approval id breaks the id rule");
        return Ok(());
    }
    print_list(&approvals, "", json)
}

/// What `approve` or `reject` asks for, apart from the terms.
struct Decision {
    status: pb::ApprovalStatus,
    approver: Option<pb::Actor>,
    comment: Option<String>,
}

/// Reads the approval, shows its terms on standard error (standard output
/// stays the decided approval, JSON with `--json`), and decides it naming
/// the terms hash the person confirmed.
async fn decide(
    client: &Client,
    id: String,
    decision: Decision,
    confirmation: &Confirmation,
    json: bool,
) -> Result<(), CommandError> {
    // A malformed hash is a usage error before anything is read.
    if let Some(hash) = &confirmation.terms_hash {
        gavel_core::terms::check_terms_hash_form(Some(hash))
            .map_err(|problem| CommandError::Usage(format!("--terms-hash {hash:?} is not a terms hash: {problem}")))?;
    }
    let approval = client.approval_terms(&id).await?;
    let verb = match decision.status {
        pb::ApprovalStatus::Rejected => "reject",
        _ => "approve",
    };
    eprint!("{}", terms_text(&approval));
    let terms_hash = confirmed_terms_hash(&approval, verb, confirmation)?;
    let request = pb::DecideApprovalRequest {
        id,
        status: decision.status as i32,
        approver: decision.approver,
        comment: decision.comment,
        terms_hash,
        ..pb::DecideApprovalRequest::default()
    };
    let response = client.decide_approval(request).await?;
    print_approval(&unwrap_approval(response.approval)?, json)
}

/// The terms hash to send: `--terms-hash` as given; with `--yes`, or once
/// the person answers yes at a terminal, the hash just read (none from a
/// cluster that computes no terms). Without a terminal and without either
/// flag nothing is decided.
fn confirmed_terms_hash(
    approval: &pb::Approval,
    verb: &str,
    confirmation: &Confirmation,
) -> Result<Option<String>, CommandError> {
    if let Some(hash) = &confirmation.terms_hash {
        return Ok(Some(hash.clone()));
    }
    let read = (!approval.terms_hash.is_empty()).then(|| approval.terms_hash.clone());
    if confirmation.yes {
        return Ok(read);
    }
    if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
        eprint!("{verb} these terms? [y/N] ");
        std::io::stderr().flush()?;
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        return match answer.trim().to_ascii_lowercase().as_str() {
            "y" | "yes" => Ok(read),
            _ => Err(CommandError::Other(anyhow::anyhow!(
                "nothing decided: the terms of approval {} were not confirmed",
                approval.id
            ))),
        };
    }
    let hash = if approval.terms_hash.is_empty() { "<HASH>" } else { approval.terms_hash.as_str() };
    Err(CommandError::Usage(format!(
        "nothing decided: `gavel approval {verb}` asks you to confirm the terms above, and there is no terminal \
         to ask on; rerun with --terms-hash {hash} (the terms hash you were shown) or --yes (decide on the \
         terms just printed)"
    )))
}

/// The terms of `approval` as a person reads them before deciding, from
/// the canonical JSON the cluster hashed (`terms_json`): id, capability as
/// registered, requester and subject, canonical input and its hash, the
/// uses a "yes" covers (loud for a standing approval), policy, expiry and
/// the terms hash.
pub fn terms_text(approval: &pb::Approval) -> String {
    let Ok(terms) = serde_json::from_str::<Value>(&approval.terms_json) else {
        return format!(
            "approval {}: the cluster sent no terms to show (a node older than SPEC §13?); its record:\n  input  {}\n",
            approval.id,
            output::compact_json(&approval.input_json)
        );
    };
    let text = |value: &Value| value.as_str().map_or_else(|| value.to_string(), str::to_string);
    let capability = &terms["capability"];
    let capability_line = if capability["registered"] == Value::Bool(true) {
        format!(
            "{} version {}, as registered: side effect {}, risk {}, {}",
            text(&capability["id"]),
            capability["version"],
            text(&capability["sideEffect"]),
            text(&capability["risk"]),
            if capability["idempotent"] == Value::Bool(true) { "idempotent" } else { "not idempotent" }
        )
    } else {
        format!("{} (not registered when requested)", text(&capability["id"]))
    };
    let rows = vec![
        ("approval", text(&terms["approvalId"])),
        ("capability", capability_line),
        ("requester", requester_text(&terms["requester"])),
        ("input", canonical(&terms["input"])),
        ("input hash", text(&terms["inputHash"])),
        ("uses", uses_text(&terms["uses"])),
        ("policy", policy_text(&terms["policy"])),
        ("expires", terms["expiresAtMs"].as_i64().map_or_else(|| "-".to_string(), time)),
        ("terms hash", approval.terms_hash.clone()),
    ];
    let mut rendered = match terms["uses"].get("windowMs") {
        Some(_) => format!(
            "the terms of approval {} (a STANDING approval: one \"yes\" covers up to {} uses):\n",
            approval.id, terms["uses"]["max"]
        ),
        None => format!("the terms of approval {}:\n", approval.id),
    };
    for line in key_values(&rows).lines() {
        rendered.push_str(&format!("  {line}\n"));
    }
    rendered
}

/// A JSON value as canonical JSON (RFC 8785), as the cluster hashed it.
fn canonical(value: &Value) -> String {
    gavel_core::canonical_json::canonicalize(&value.to_string()).unwrap_or_else(|_| value.to_string())
}

/// `user:agent-alice ("Alice"), requested by user:admin on its behalf`.
fn requester_text(requester: &Value) -> String {
    let subject = &requester["subject"];
    let mut text = format!("{}:{}", subject["kind"].as_str().unwrap_or("?"), subject["id"].as_str().unwrap_or("?"));
    if let Some(name) = subject["displayName"].as_str() {
        text.push_str(&format!(" ({name:?})"));
    }
    match requester["principal"].as_str() {
        Some(principal) if principal != text.split(' ').next().unwrap_or_default() => {
            text.push_str(&format!(", requested by {principal} on its behalf"));
        }
        _ => {}
    }
    text
}

/// `one use`, or for a standing approval
/// `STANDING: up to 100 uses within 7d; bound: /order_id = "o-9"; other fields may differ per use`.
fn uses_text(uses: &Value) -> String {
    let max = uses["max"].as_u64().unwrap_or(1);
    let Some(window_ms) = uses["windowMs"].as_u64() else {
        return if max == 1 { "one use".to_string() } else { format!("{max} uses") };
    };
    let bound: Vec<String> = uses["bound"]
        .as_array()
        .map(|bound| {
            bound
                .iter()
                .map(|pair| {
                    // The core writes a pointer the input lacks as null.
                    let value = match &pair["value"] {
                        Value::Null => "null (or absent)".to_string(),
                        value => canonical(value),
                    };
                    format!("{} = {value}", pair["pointer"].as_str().unwrap_or("?"))
                })
                .collect()
        })
        .unwrap_or_default();
    let binding = if bound.is_empty() {
        "every use runs exactly this input".to_string()
    } else {
        format!("bound: {}; other fields may differ per use", bound.join(", "))
    };
    format!("STANDING: up to {max} uses within {} of the decision; {binding}", window_text(window_ms))
}

/// `none: one decision decides it`, or
/// `refunds version 2: finance 1, legal 1 (all required); 1 denial rejects`.
fn policy_text(policy: &Value) -> String {
    if policy.is_null() {
        return "none: one decision decides it".to_string();
    }
    let factors: Vec<String> = policy["factors"]
        .as_array()
        .map(|factors| {
            factors.iter().map(|factor| format!("{} {}", factor["name"].as_str().unwrap_or("?"), factor["k"])).collect()
        })
        .unwrap_or_default();
    format!(
        "{} version {}: {} (all required); {} denial(s) reject",
        policy["name"].as_str().unwrap_or("?"),
        policy["version"],
        factors.join(", "),
        policy["denyThreshold"]
    )
}

fn unwrap_approval(approval: Option<pb::Approval>) -> Result<pb::Approval, CommandError> {
    approval.ok_or_else(|| CommandError::Other(anyhow::anyhow!("the cluster answered without the approval")))
}

fn print_list(approvals: &[pb::Approval], next_page_token: &str, json: bool) -> Result<(), CommandError> {
    if json {
        let approvals: Vec<_> = approvals.iter().map(output::approval_json).collect();
        let next_page_token = paging::token_json(next_page_token);
        return output::print_json(&json!({ "approvals": approvals, "nextPageToken": next_page_token }));
    }
    if approvals.is_empty() {
        eprintln!("no approvals match");
        return paging::print_footer(next_page_token);
    }
    let mut table = Table::new(&["ID", "STATUS", "CAPABILITY", "REQUESTER", "RISK", "REQUESTED", "EXPIRES"]);
    for approval in approvals {
        table.row(vec![
            approval.id.clone(),
            output::approval_status(approval.status),
            approval.capability_id.clone(),
            actor_text(approval.actor.as_ref()),
            output::risk(approval.risk),
            time(approval.requested_at_ms),
            time(approval.expires_at_ms),
        ]);
    }
    output::print(&table.render())?;
    paging::print_footer(next_page_token)
}

/// Prints one approval as a record (or JSON).
pub fn print_approval(approval: &pb::Approval, json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&output::approval_json(approval));
    }
    let capability = match approval.capability_version {
        Some(version) => format!("{} (version {version})", approval.capability_id),
        None => approval.capability_id.clone(),
    };
    let decision = approval.decision.as_ref().map(|decision| {
        let mut text = format!(
            "{} by {} at {}",
            output::approval_status(decision.status),
            actor_text(decision.approver.as_ref()),
            time(decision.decided_at_ms)
        );
        if let Some(comment) = &decision.comment {
            text.push_str(&format!(": {comment}"));
        }
        text
    });
    let list = |items: &[String]| if items.is_empty() { "-".to_string() } else { items.join(", ") };
    let mut rows = vec![
        ("id", approval.id.clone()),
        ("status", output::approval_status(approval.status)),
        ("capability", capability),
        ("execution", or_dash(approval.execution_id.as_deref())),
        ("requester", actor_text(approval.actor.as_ref())),
        ("surface", approval.surface.clone()),
        ("risk", output::risk(approval.risk)),
        ("side effect", output::side_effect(approval.side_effect)),
        ("input", output::compact_json(&approval.input_json)),
        ("input hash", approval.input_hash.clone()),
        ("reasons", list(&approval.reasons)),
        ("types", list(&approval.types)),
        ("requested", time(approval.requested_at_ms)),
        ("expires", time(approval.expires_at_ms)),
        ("self-approval", if approval.allow_self_approval { "allowed" } else { "refused" }.to_string()),
        ("decision", or_dash(decision)),
        ("consumed by", or_dash(approval.consumed_by_execution_id.as_deref())),
        ("terms hash", or_dash((!approval.terms_hash.is_empty()).then_some(&approval.terms_hash))),
    ];
    // Only on a governed or a standing approval: the others print as before.
    if let Some(quorum) = &approval.quorum {
        rows.push(("policy", format!("{} (version {})", quorum.policy, quorum.policy_version)));
        rows.push(("quorum", quorum_text(quorum)));
    }
    if let Some(standing) = &approval.standing {
        rows.push(("standing", standing_text(standing)));
    }
    output::print(&key_values(&rows))
}

/// Each factor's votes against its k, all required, and the denials:
/// `finance 1/1, legal 0/1 (all required); denials 0/1`.
fn quorum_text(quorum: &pb::Quorum) -> String {
    let met = quorum.factors.iter().filter(|factor| factor.counted >= factor.k).count();
    format!(
        "{} ({met} of {} factors met, all required); denials {}/{}",
        super::policy::factors_text(quorum),
        quorum.factors.len(),
        quorum.denials,
        quorum.deny_threshold
    )
}

/// `2 of 3 uses spent (ex-1, ex-2); window 1h; bound to /order_id`.
fn standing_text(standing: &pb::StandingProgress) -> String {
    let terms = standing.terms.clone().unwrap_or_default();
    let used = if standing.used_by.is_empty() { String::new() } else { format!(" ({})", standing.used_by.join(", ")) };
    let binding = if terms.bound_pointers.is_empty() {
        "every use runs the approved input".to_string()
    } else {
        format!("bound to {}", terms.bound_pointers.join(", "))
    };
    format!(
        "{} of {} uses spent{used}; window {} after the decision; {binding}",
        standing.used_by.len(),
        terms.uses_max,
        window_text(terms.window_ms)
    )
}

/// A window in the largest whole unit: `1h`, `90s`, `1500ms`.
fn window_text(window_ms: u64) -> String {
    let units = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    match units.iter().find(|(unit_ms, _)| window_ms.is_multiple_of(*unit_ms)) {
        Some((unit_ms, unit)) => format!("{}{unit}", window_ms / unit_ms),
        None => format!("{window_ms}ms"),
    }
}

#[cfg(test)]
mod tests {
    use super::{terms_text, window_text};
    use gavel_client::pb;

    /// An approval carrying `terms` as its terms JSON.
    fn with_terms(terms: serde_json::Value) -> pb::Approval {
        pb::Approval {
            id: "apr-1".to_string(),
            terms_json: terms.to_string(),
            terms_hash: "ab".repeat(32),
            ..pb::Approval::default()
        }
    }

    #[test]
    fn a_standing_approvals_terms_say_so_before_anything_else() {
        let approval = with_terms(serde_json::json!({
            "approvalId": "apr-1",
            "capability": {"id": "orders.refund", "registered": true, "version": 2, "sideEffect": "write",
                           "risk": "high", "idempotent": true},
            "requester": {"principal": "user:admin", "subject": {"kind": "user", "id": "agent-alice"}},
            "input": {"order_id": "o-9", "amount_cents": 1},
            "inputHash": "cd".repeat(32),
            "uses": {"max": 100, "windowMs": 604_800_000u64, "bound": [{"pointer": "/order_id", "value": "o-9"}]},
            "policy": {"name": "refunds", "version": 3, "factors": [{"name": "finance", "k": 2}], "denyThreshold": 1},
            "expiresAtMs": 0,
        }));
        let text = terms_text(&approval);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "the terms of approval apr-1 (a STANDING approval: one \"yes\" covers up to 100 uses):");
        assert!(text.contains(
            "  uses        STANDING: up to 100 uses within 7d of the decision; bound: /order_id = \"o-9\"; other \
             fields may differ per use\n"
        ));
        assert!(text.contains(
            "  capability  orders.refund version 2, as registered: side effect write, risk high, idempotent\n"
        ));
        assert!(text.contains("  requester   user:agent-alice, requested by user:admin on its behalf\n"));
        assert!(text.contains("  input       {\"amount_cents\":1,\"order_id\":\"o-9\"}\n"));
        assert!(text.contains("  policy      refunds version 3: finance 2 (all required); 1 denial(s) reject\n"));
        assert!(text.contains("  expires     1970-01-01T00:00:00.000Z\n"));
        assert!(text.ends_with(&format!("  terms hash  {}\n", "ab".repeat(32))));
    }

    #[test]
    fn a_one_shots_terms_say_one_use() {
        let approval = with_terms(serde_json::json!({
            "approvalId": "apr-1",
            "capability": {"id": "orders.lookup", "registered": false},
            "requester": {"principal": null, "subject": {"kind": "user", "id": "alice", "displayName": "Alice"}},
            "input": {},
            "inputHash": "cd".repeat(32),
            "uses": {"max": 1},
            "policy": null,
            "expiresAtMs": 0,
        }));
        let text = terms_text(&approval);
        assert!(text.starts_with("the terms of approval apr-1:\n"), "{text}");
        assert!(text.contains("  uses        one use\n"), "{text}");
        assert!(text.contains("  capability  orders.lookup (not registered when requested)\n"), "{text}");
        assert!(text.contains("  requester   user:alice (\"Alice\")\n"), "{text}");
        assert!(text.contains("  policy      none: one decision decides it\n"), "{text}");
    }

    #[test]
    fn a_window_prints_in_its_largest_whole_unit() {
        assert_eq!(window_text(3_600_000), "1h");
        assert_eq!(window_text(90_000), "90s");
        assert_eq!(window_text(5_400_000), "90m");
        assert_eq!(window_text(604_800_000), "7d");
        assert_eq!(window_text(1_500), "1500ms");
    }
}
