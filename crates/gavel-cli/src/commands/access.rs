//! `gavel access grant|revoke|list|whoami|quota`: who may do what, and how
//! much. Grants and quotas live in the replicated state; changing them
//! needs the `admin` grant.

use clap::{Args, Subcommand};
use gavel_client::pb;
use gavel_pki::{GrantName, Principal};
use serde_json::{json, Value};

use super::output::{self, or_dash, Table};
use super::{CommandError, GlobalArgs};

/// `gavel access`.
#[derive(Debug, Args)]
pub struct AccessArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: AccessCommand,
}

/// The verbs of `gavel access`.
#[derive(Debug, Subcommand)]
pub enum AccessCommand {
    /// Bind a grant to a principal (replacing a grant of the same name).
    Grant {
        /// Who (kind:id, e.g. user:bob, worker:refunds-1).
        #[arg(value_parser = parse_principal)]
        principal: Principal,
        /// What: submitter, approver, worker, auditor, admin, delegate-decide,
        /// act-for, clock or self-approval.
        #[arg(value_parser = parse_grant)]
        grant: GrantName,
        /// For approver: the approval types it may decide; for worker: the
        /// queues it may poll (comma-separated). Default: all.
        #[arg(long, value_delimiter = ',')]
        scope: Vec<String>,
        /// For clock: how far caller_now_ms may be from cluster time (ms).
        #[arg(long)]
        skew_ms_max: Option<u64>,
    },
    /// Remove a grant from a principal.
    Revoke {
        /// Who (kind:id).
        #[arg(value_parser = parse_principal)]
        principal: Principal,
        /// Which grant.
        #[arg(value_parser = parse_grant)]
        grant: GrantName,
    },
    /// List grants, of every principal or of one.
    List {
        /// Only this principal's grants (kind:id).
        #[arg(value_parser = parse_principal)]
        principal: Option<Principal>,
    },
    /// Who the cluster authenticates you as, and your grants.
    Whoami,
    /// Per-principal quotas: pending approvals, non-final executions, write rate.
    #[command(subcommand)]
    Quota(QuotaCommand),
}

/// The verbs of `gavel access quota`.
#[derive(Debug, Subcommand)]
pub enum QuotaCommand {
    /// Change a principal's quotas (admin); limits not given keep their value.
    Set {
        /// Whose (kind:id).
        #[arg(value_parser = parse_principal)]
        principal: Principal,
        /// Most pending approvals it may have requested.
        #[arg(long)]
        pending_approvals: Option<u64>,
        /// Most non-final executions it may own.
        #[arg(long)]
        active_executions: Option<u64>,
        /// Its sustained write rate, per second.
        #[arg(long)]
        writes_per_second: Option<u64>,
        /// Writes it may send at once after being idle.
        #[arg(long)]
        write_burst: Option<u64>,
        /// Back to the defaults first (then apply any limit given).
        #[arg(long)]
        reset: bool,
    },
    /// One principal's quota and usage (default: your own).
    Get {
        /// Whose (kind:id); reading another's needs admin.
        #[arg(value_parser = parse_principal)]
        principal: Option<Principal>,
    },
    /// Every principal with an override or usage (admin).
    List,
}

fn parse_principal(text: &str) -> Result<Principal, String> {
    Principal::parse(text)
}

fn parse_grant(text: &str) -> Result<GrantName, String> {
    GrantName::parse(text).ok_or_else(|| {
        let names: Vec<&str> = GrantName::ALL.iter().map(|grant| grant.as_str()).collect();
        format!("unknown grant {text:?}; one of {}", names.join(", "))
    })
}

/// Runs one `gavel access` command.
pub async fn run(args: AccessArgs) -> Result<(), CommandError> {
    let client = args.global.client()?;
    let json = args.global.json;
    match args.command {
        AccessCommand::Grant { principal, grant, scope, skew_ms_max } => {
            let grant = pb::AccessGrant {
                principal: principal.to_string(),
                grant: grant.as_str().to_string(),
                scope,
                skew_ms_max,
            };
            let answer = client.grant(pb::GrantRequest { grant: Some(grant), ..pb::GrantRequest::default() }).await?;
            print_grants(&answer.grants, json)
        }
        AccessCommand::Revoke { principal, grant } => {
            let request = pb::RevokeRequest {
                principal: principal.to_string(),
                grant: grant.as_str().to_string(),
                ..pb::RevokeRequest::default()
            };
            let answer = client.revoke(request).await?;
            print_grants(&answer.grants, json)
        }
        AccessCommand::List { principal } => {
            let request = pb::ListGrantsRequest { principal: principal.map(|principal| principal.to_string()) };
            let answer = client.list_grants(request).await?;
            print_grants(&answer.grants, json)
        }
        AccessCommand::Quota(QuotaCommand::Set {
            principal,
            pending_approvals,
            active_executions,
            writes_per_second,
            write_burst,
            reset,
        }) => {
            let request = pb::SetQuotaRequest {
                principal: principal.to_string(),
                pending_approvals_max: pending_approvals,
                active_executions_max: active_executions,
                writes_per_second,
                write_burst,
                reset,
                request_id: String::new(),
            };
            let answer = client.set_quota(request).await?;
            print_quotas(answer.quota.as_slice(), json)
        }
        AccessCommand::Quota(QuotaCommand::Get { principal }) => {
            let principal = principal.map(|principal| principal.to_string()).unwrap_or_default();
            let answer = client.get_quota(pb::GetQuotaRequest { principal }).await?;
            print_quotas(answer.quota.as_slice(), json)
        }
        AccessCommand::Quota(QuotaCommand::List) => {
            let answer = client.list_quotas(pb::ListQuotasRequest {}).await?;
            print_quotas(&answer.quotas, json)
        }
        AccessCommand::Whoami => {
            let answer = client.who_am_i(pb::WhoAmIRequest {}).await?;
            if json {
                return output::print_json(&json!({
                    "principal": (!answer.principal.is_empty()).then_some(&answer.principal),
                    "grants": answer.grants.iter().map(grant_json).collect::<Vec<_>>(),
                    "tokenScope": answer.token_scope,
                }));
            }
            let principal = if answer.principal.is_empty() {
                "- (the node runs --insecure: no authentication)".to_string()
            } else {
                answer.principal.clone()
            };
            let grants: Vec<String> = answer.grants.iter().map(grant_text).collect();
            let scope = if answer.token_scope.is_empty() { "-".to_string() } else { answer.token_scope.join(",") };
            output::print(&output::key_values(&[
                ("principal", principal),
                ("grants", if grants.is_empty() { "-".to_string() } else { grants.join(", ") }),
                ("token scope", scope),
            ]))
        }
    }
}

/// One grant as JSON.
fn grant_json(grant: &pb::AccessGrant) -> Value {
    json!({
        "principal": grant.principal,
        "grant": grant.grant,
        "scope": grant.scope,
        "skewMsMax": grant.skew_ms_max,
    })
}

/// One grant as `name` or `name[scope,...]`.
fn grant_text(grant: &pb::AccessGrant) -> String {
    if grant.scope.is_empty() {
        grant.grant.clone()
    } else {
        format!("{}[{}]", grant.grant, grant.scope.join(","))
    }
}

fn print_grants(grants: &[pb::AccessGrant], json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&json!({ "grants": grants.iter().map(grant_json).collect::<Vec<_>>() }));
    }
    let mut table = Table::new(&["PRINCIPAL", "GRANT", "SCOPE", "SKEW_MS_MAX"]);
    for grant in grants {
        let scope = if grant.scope.is_empty() { "*".to_string() } else { grant.scope.join(",") };
        table.row(vec![grant.principal.clone(), grant.grant.clone(), scope, or_dash(grant.skew_ms_max)]);
    }
    output::print(&table.render())
}

/// One quota as JSON.
fn quota_json(quota: &pb::Quota) -> Value {
    json!({
        "principal": quota.principal,
        "pendingApprovalsMax": quota.pending_approvals_max,
        "activeExecutionsMax": quota.active_executions_max,
        "writesPerSecond": quota.writes_per_second,
        "writeBurst": quota.write_burst,
        "overridden": quota.overridden,
        "pendingApprovals": quota.pending_approvals,
        "activeExecutions": quota.active_executions,
        "writeTokens": quota.write_tokens,
    })
}

fn print_quotas(quotas: &[pb::Quota], json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&json!({ "quotas": quotas.iter().map(quota_json).collect::<Vec<_>>() }));
    }
    let mut table = Table::new(&["PRINCIPAL", "PENDING_APPROVALS", "ACTIVE_EXECUTIONS", "WRITES_PER_SECOND", "SOURCE"]);
    for quota in quotas {
        table.row(vec![
            quota.principal.clone(),
            format!("{}/{}", quota.pending_approvals, quota.pending_approvals_max),
            format!("{}/{}", quota.active_executions, quota.active_executions_max),
            format!("{} (burst {}, {} left)", quota.writes_per_second, quota.write_burst, quota.write_tokens),
            if quota.overridden { "override" } else { "default" }.to_string(),
        ]);
    }
    output::print(&table.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_print_with_their_scope() {
        let grant = pb::AccessGrant {
            principal: "user:bob".to_string(),
            grant: "approver".to_string(),
            scope: vec!["finance".to_string()],
            skew_ms_max: None,
        };
        assert_eq!(grant_text(&grant), "approver[finance]");
        assert_eq!(
            grant_json(&grant),
            json!({"principal": "user:bob", "grant": "approver", "scope": ["finance"], "skewMsMax": null})
        );
        assert!(parse_grant("root").expect_err("unknown").contains("delegate-decide"));
        assert!(parse_principal("bob").is_err());
    }
}
