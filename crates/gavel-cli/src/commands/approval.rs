//! `gavel approval list|get|approve|reject|cancel|votes`: what an approver runs.

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
    }
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
    output::print(&key_values(&[
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
    ]))
}
