//! `gavel policy set|get|list|delete` and `gavel approval votes`: approval
//! policies (quorum, docs/policies.md). Setting and deleting need `admin`;
//! reading policies any authenticated caller; an approval's votes whoever
//! may read the approval. Votes themselves are cast with `gavel approval
//! approve|reject`, which on a governed approval is one vote, and withdrawn
//! with `gavel approval withdraw`.

use clap::{Args, Subcommand};
use gavel_client::{pb, Client};
use gavel_core::ErrorCode;
use serde_json::{json, Value};

use super::output::{self, actor_text, or_dash, time, Table};
use super::{CommandError, GlobalArgs};

/// `gavel policy`.
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: PolicyCommand,
}

/// The verbs of `gavel policy`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Create or change a policy (admin): a new version, which voids the open
    /// approvals of the old one it no longer allows.
    Set {
        /// Policy name.
        name: String,
        /// Approval types it governs (comma-separated).
        #[arg(long, value_delimiter = ',', value_name = "TYPE")]
        types: Vec<String>,
        /// Capability ids it governs (comma-separated).
        #[arg(long, value_delimiter = ',', value_name = "ID")]
        capabilities: Vec<String>,
        /// Capability risks it governs, as the registry declares them
        /// (comma-separated: low, medium, high, critical).
        #[arg(long, value_delimiter = ',', value_name = "RISK", value_parser = parse_risk)]
        risks: Vec<i32>,
        /// Capability side effects it governs, as registered (comma-separated:
        /// none, read, write, destructive, external).
        #[arg(long = "side-effects", value_delimiter = ',', value_name = "SIDE_EFFECT", value_parser = parse_side_effect)]
        side_effects: Vec<i32>,
        /// A factor, repeatable, all required: `NAME=K/scope/SCOPE` (k
        /// principals whose approver grant names SCOPE) or
        /// `NAME=K/group/kind:id,kind:id,...` (k of these principals).
        #[arg(long = "factor", value_name = "FACTOR", value_parser = parse_factor, required = true)]
        factors: Vec<pb::PolicyFactor>,
        /// Distinct denials that reject (default 1).
        #[arg(long, value_name = "N")]
        deny_threshold: Option<u32>,
        /// Leave approved-but-unconsumed approvals of the old version standing.
        #[arg(long)]
        non_retroactive: bool,
        /// Refuse standing approvals this policy governs
        /// (APPROVAL_STANDING_FORBIDDEN): every "yes" covers one use.
        #[arg(long)]
        forbid_standing: bool,
    },
    /// Show one policy.
    Get {
        /// Policy name.
        name: String,
    },
    /// List every policy.
    List,
    /// Delete a policy (admin), voiding its open approvals.
    Delete {
        /// Policy name.
        name: String,
        /// Leave approved-but-unconsumed approvals standing.
        #[arg(long)]
        non_retroactive: bool,
    },
}

/// Parses `NAME=K/scope/SCOPE` or `NAME=K/group/P1,P2,...`.
pub fn parse_factor(text: &str) -> Result<pb::PolicyFactor, String> {
    let usage = || format!("factor {text:?} must be NAME=K/scope/SCOPE or NAME=K/group/kind:id,kind:id");
    let (name, rest) = text.split_once('=').ok_or_else(usage)?;
    let mut parts = rest.splitn(3, '/');
    let (Some(k), Some(kind), Some(who)) = (parts.next(), parts.next(), parts.next()) else { return Err(usage()) };
    let k: u32 = k.parse().map_err(|_| format!("factor {name}: k {k:?} is not a number"))?;
    let (scope, group) = match kind {
        "scope" => (Some(who.to_string()), Vec::new()),
        "group" => (None, who.split(',').map(str::to_string).collect()),
        _ => return Err(usage()),
    };
    Ok(pb::PolicyFactor { name: name.to_string(), k, scope, group })
}

/// Runs one `gavel policy` command.
pub async fn run(args: PolicyArgs) -> Result<(), CommandError> {
    let client = args.global.client()?;
    let json = args.global.json;
    match args.command {
        PolicyCommand::Set {
            name,
            types,
            capabilities,
            risks,
            side_effects,
            factors,
            deny_threshold,
            non_retroactive,
            forbid_standing,
        } => {
            let request = pb::SetPolicyRequest {
                name,
                approval_types: types,
                capability_ids: capabilities,
                risks,
                side_effects,
                factors,
                deny_threshold,
                non_retroactive,
                forbid_standing,
                ..pb::SetPolicyRequest::default()
            };
            let answer = client.set_policy(request).await?;
            print_change(answer.policy, answer.voided, json)
        }
        PolicyCommand::Get { name } => {
            let answer = client.get_policy(pb::GetPolicyRequest { name: name.clone() }).await?;
            let policy = answer
                .policy
                .ok_or_else(|| CommandError::refused(ErrorCode::NotFound, format!("policy {name} was not found")))?;
            print_policies(&[policy], json)
        }
        PolicyCommand::List => print_policies(&client.list_policies(pb::ListPoliciesRequest {}).await?.policies, json),
        PolicyCommand::Delete { name, non_retroactive } => {
            let request = pb::DeletePolicyRequest { name, non_retroactive, ..pb::DeletePolicyRequest::default() };
            let answer = client.delete_policy(request).await?;
            print_change(answer.policy, answer.voided, json)
        }
    }
}

/// `gavel approval votes ID`: the approval's policy, progress and votes.
pub async fn votes(client: &Client, approval_id: String, json: bool) -> Result<(), CommandError> {
    let answer = client.list_votes(pb::ListVotesRequest { approval_id: approval_id.clone() }).await?;
    let Some(quorum) = answer.quorum else {
        if json {
            return output::print_json(&json!({ "quorum": null }));
        }
        eprintln!("approval {approval_id} is not governed by a policy: one decision decides it");
        return Ok(());
    };
    if json {
        return output::print_json(&json!({ "quorum": quorum_json(&quorum) }));
    }
    output::print(&output::key_values(&[
        ("policy", format!("{} (version {})", quorum.policy, quorum.policy_version)),
        ("factors", factors_text(&quorum)),
        ("denials", format!("{}/{}", quorum.denials, quorum.deny_threshold)),
    ]))?;
    let mut table = Table::new(&["PRINCIPAL", "VOTE", "COUNTS_FOR", "ELIGIBLE", "SELF", "CAST"]);
    for vote in &quorum.votes {
        table.row(vec![
            vote.principal.clone(),
            if vote.approve { "approve" } else { "deny" }.to_string(),
            or_dash(vote.factor.as_deref()),
            vote.eligible_factors.join(","),
            if vote.self_approval { "yes" } else { "no" }.to_string(),
            time(vote.cast_at_ms),
        ]);
    }
    output::print(&table.render())
}

/// Each factor's counted votes against its k: `finance 1/1, legal 0/1`.
pub fn factors_text(quorum: &pb::Quorum) -> String {
    let factors: Vec<String> =
        quorum.factors.iter().map(|factor| format!("{} {}/{}", factor.name, factor.counted, factor.k)).collect();
    factors.join(", ")
}

/// An approval's quorum as JSON.
pub fn quorum_json(quorum: &pb::Quorum) -> Value {
    json!({
        "policy": quorum.policy,
        "policyVersion": quorum.policy_version,
        "factors": quorum.factors.iter().map(|factor| json!({
            "name": factor.name, "k": factor.k, "counted": factor.counted,
        })).collect::<Vec<_>>(),
        "denyThreshold": quorum.deny_threshold,
        "denials": quorum.denials,
        "votes": quorum.votes.iter().map(|vote| json!({
            "principal": vote.principal,
            "approver": actor_text(vote.approver.as_ref()),
            "approve": vote.approve,
            "factor": vote.factor,
            "eligibleFactors": vote.eligible_factors,
            "inputHash": vote.input_hash,
            "selfApproval": vote.self_approval,
            "comment": vote.comment,
            "castAtMs": vote.cast_at_ms,
        })).collect::<Vec<_>>(),
    })
}

/// One factor as `NAME=K/scope/SCOPE` or `NAME=K/group/...`, as `--factor` takes it.
fn factor_text(factor: &pb::PolicyFactor) -> String {
    match &factor.scope {
        Some(scope) => format!("{}={}/scope/{scope}", factor.name, factor.k),
        None => format!("{}={}/group/{}", factor.name, factor.k, factor.group.join(",")),
    }
}

fn policy_json(policy: &pb::Policy) -> Value {
    json!({
        "name": policy.name,
        "version": policy.version,
        "approvalTypes": policy.approval_types,
        "capabilityIds": policy.capability_ids,
        "risks": policy.risks().map(|risk| risk.as_str_name().trim_start_matches("RISK_").to_lowercase()).collect::<Vec<_>>(),
        "sideEffects": policy
            .side_effects()
            .map(|side_effect| side_effect.as_str_name().trim_start_matches("SIDE_EFFECT_").to_lowercase())
            .collect::<Vec<_>>(),
        "factors": policy.factors.iter().map(|factor| json!({
            "name": factor.name, "k": factor.k, "scope": factor.scope, "group": factor.group,
        })).collect::<Vec<_>>(),
        "denyThreshold": policy.deny_threshold,
        "forbidStanding": policy.forbid_standing,
        "setAtMs": policy.set_at_ms,
    })
}

fn print_change(policy: Option<pb::Policy>, voided: u32, json: bool) -> Result<(), CommandError> {
    let policy =
        policy.ok_or_else(|| CommandError::Other(anyhow::anyhow!("the cluster answered without the policy")))?;
    if json {
        return output::print_json(&json!({ "policy": policy_json(&policy), "voided": voided }));
    }
    print_policies(&[policy], false)?;
    eprintln!("{voided} open approval(s) voided");
    Ok(())
}

fn print_policies(policies: &[pb::Policy], json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&json!({ "policies": policies.iter().map(policy_json).collect::<Vec<_>>() }));
    }
    let mut table = Table::new(&["NAME", "VERSION", "GOVERNS", "FACTORS (ALL REQUIRED)", "DENY"]);
    for policy in policies {
        let governs: Vec<String> = policy
            .approval_types
            .iter()
            .map(|kind| format!("type:{kind}"))
            .chain(policy.capability_ids.iter().map(|id| format!("capability:{id}")))
            .chain(
                policy
                    .risks()
                    .map(|risk| format!("risk:{}", risk.as_str_name().trim_start_matches("RISK_").to_lowercase())),
            )
            .chain(policy.side_effects().map(|side_effect| {
                format!("side-effect:{}", side_effect.as_str_name().trim_start_matches("SIDE_EFFECT_").to_lowercase())
            }))
            .collect();
        let factors: Vec<String> = policy.factors.iter().map(factor_text).collect();
        table.row(vec![
            policy.name.clone(),
            policy.version.to_string(),
            governs.join(","),
            factors.join(" AND "),
            policy.deny_threshold.to_string(),
        ]);
    }
    output::print(&table.render())
}

/// `--risks` item: a risk's name (`critical`) as its protobuf value.
fn parse_risk(text: &str) -> Result<i32, String> {
    pb::Risk::from_str_name(&format!("RISK_{}", text.to_uppercase()))
        .filter(|risk| *risk != pb::Risk::Unspecified)
        .map(|risk| risk as i32)
        .ok_or_else(|| format!("{text:?} is not a risk (low, medium, high, critical)"))
}

/// `--side-effects` item: a side effect's name (`write`) as its protobuf value.
fn parse_side_effect(text: &str) -> Result<i32, String> {
    pb::SideEffect::from_str_name(&format!("SIDE_EFFECT_{}", text.to_uppercase()))
        .filter(|side_effect| *side_effect != pb::SideEffect::Unspecified)
        .map(|side_effect| side_effect as i32)
        .ok_or_else(|| format!("{text:?} is not a side effect (none, read, write, destructive, external)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factors_parse_from_the_flag_and_print_back_the_same() {
        let scope = parse_factor("finance=1/scope/finance").expect("a scope factor");
        assert_eq!((scope.name.as_str(), scope.k, scope.scope.as_deref()), ("finance", 1, Some("finance")));
        assert_eq!(factor_text(&scope), "finance=1/scope/finance");
        let group = parse_factor("on-call=2/group/user:a,user:b,user:c").expect("a group factor");
        assert_eq!(group.group, ["user:a", "user:b", "user:c"]);
        assert_eq!(factor_text(&group), "on-call=2/group/user:a,user:b,user:c");
        assert!(parse_factor("finance").is_err());
        assert!(parse_factor("finance=x/scope/f").expect_err("k").contains("not a number"));
        assert!(parse_factor("finance=1/team/f").is_err());
    }
}
