//! `gavel approval list|get|approve|reject|cancel|votes`: what an approver
//! runs; and `gavel approval standing create`: a bounded standing approval.

use clap::{Args, Subcommand, ValueEnum};
use gavel_client::{pb, Client};
use serde_json::json;

use super::output::{self, actor_text, key_values, or_dash, time, Table};
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
    /// List approvals, oldest request first (filters compose).
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
        /// Print at most this many approvals (default: all).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
    },
    /// Show one approval.
    Get {
        /// Approval id.
        id: String,
    },
    /// Approve a pending approval, as the `--as` actor (who must not be the requester).
    Approve {
        /// Approval id.
        id: String,
        /// Justification recorded with the decision.
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
    },
    /// Reject a pending approval, as the `--as` actor.
    Reject {
        /// Approval id.
        id: String,
        /// Justification recorded with the decision.
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
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
        ApprovalCommand::List { status, capability, requester, limit } => {
            let request = pb::ListApprovalsRequest {
                status: status.map(|status| status.proto() as i32),
                capability_id: capability,
                actor_id: requester,
                ..pb::ListApprovalsRequest::default()
            };
            let approvals = list_all(&client, request, limit).await?;
            print_list(&approvals, json)
        }
        ApprovalCommand::Get { id } => {
            let response = client.get_approval(pb::GetApprovalRequest { id: id.clone(), caller_now_ms: None }).await?;
            let approval = response
                .approval
                .ok_or_else(|| CommandError::refused("NOT_FOUND", format!("approval {id} was not found")))?;
            print_approval(&approval, json)
        }
        ApprovalCommand::Approve { id, comment } => {
            decide(&client, id, pb::ApprovalStatus::Approved, args.global.actor(), comment, json).await
        }
        ApprovalCommand::Reject { id, comment } => {
            decide(&client, id, pb::ApprovalStatus::Rejected, args.global.actor(), comment, json).await
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
        CommandError::refused("CAPABILITY_NOT_FOUND", format!("capability {capability} is not registered"))
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

/// Reads every page (or up to `limit` approvals).
async fn list_all(
    client: &Client,
    mut request: pb::ListApprovalsRequest,
    limit: Option<u32>,
) -> Result<Vec<pb::Approval>, CommandError> {
    let mut approvals = Vec::new();
    loop {
        let taken = u32::try_from(approvals.len()).unwrap_or(u32::MAX);
        let remaining = limit.map(|limit| limit.saturating_sub(taken));
        if remaining == Some(0) {
            break;
        }
        // 0 asks for the server's default page size.
        request.limit = remaining.unwrap_or(0);
        let page = client.list_approvals(request.clone()).await?;
        let empty = page.approvals.is_empty();
        approvals.extend(page.approvals);
        if page.next_page_token.is_empty() || empty {
            break;
        }
        request.page_token = page.next_page_token;
    }
    if let Some(limit) = limit {
        approvals.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Ok(approvals)
}

async fn decide(
    client: &Client,
    id: String,
    status: pb::ApprovalStatus,
    approver: Option<pb::Actor>,
    comment: Option<String>,
    json: bool,
) -> Result<(), CommandError> {
    let request = pb::DecideApprovalRequest {
        id,
        status: status as i32,
        approver,
        comment,
        ..pb::DecideApprovalRequest::default()
    };
    let response = client.decide_approval(request).await?;
    print_approval(&unwrap_approval(response.approval)?, json)
}

fn unwrap_approval(approval: Option<pb::Approval>) -> Result<pb::Approval, CommandError> {
    approval.ok_or_else(|| CommandError::Other(anyhow::anyhow!("the cluster answered without the approval")))
}

fn print_list(approvals: &[pb::Approval], json: bool) -> Result<(), CommandError> {
    if json {
        let approvals: Vec<_> = approvals.iter().map(output::approval_json).collect();
        return output::print_json(&json!({ "approvals": approvals }));
    }
    if approvals.is_empty() {
        eprintln!("no approvals match");
        return Ok(());
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
    output::print(&table.render())
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
    use super::window_text;

    #[test]
    fn a_window_prints_in_its_largest_whole_unit() {
        assert_eq!(window_text(3_600_000), "1h");
        assert_eq!(window_text(90_000), "90s");
        assert_eq!(window_text(5_400_000), "90m");
        assert_eq!(window_text(604_800_000), "7d");
        assert_eq!(window_text(1_500), "1500ms");
    }
}
