//! `gavel cluster status|add-node|promote|remove-node`: the nodes and the
//! membership (admin for the changes). `add-learner NODE_ID ADDR` and
//! `remove NODE_ID` are the older spellings: `add-learner` answers once the
//! learner is added, `add-node` once it has caught up.

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, Subcommand};
use gavel_client::{pb, Client, ClientConfig, Reachability};
use gavel_core::ErrorCode;
use serde_json::{json, Value};

use super::output::{self, or_dash, Table};
use super::{CommandError, GlobalArgs};

/// Deadline of one node's status answer: a node that takes longer is shown
/// as unreachable rather than holding up the whole table.
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How many characters of the state hash a table shows.
const HASH_PREFIX_CHARS: usize = 12;

/// `gavel cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// The verbs of `gavel cluster`.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Ask every endpoint (and every member they know of) for its status; one row per node.
    Status,
    /// Add a node as a learner and wait until it has caught up with the leader.
    AddNode {
        /// Id of the new node.
        #[arg(long = "id")]
        node_id: u64,
        /// Its gRPC address, host:port (where the cluster reaches it).
        #[arg(long)]
        addr: String,
    },
    /// Add a node as a learner (it replicates without voting); answers at once.
    AddLearner {
        /// Id of the new node.
        node_id: u64,
        /// Its gRPC address, host:port.
        addr: String,
    },
    /// Turn a caught-up learner into a voter (waits for it to catch up).
    Promote {
        /// Id of the learner (or give --id).
        #[arg(value_name = "NODE_ID", required_unless_present = "id")]
        node_id: Option<u64>,
        /// Id of the learner.
        #[arg(long, conflicts_with = "node_id")]
        id: Option<u64>,
    },
    /// Remove a node, voter or learner, from the membership.
    RemoveNode {
        /// Id of the node.
        #[arg(long = "id")]
        node_id: u64,
    },
    /// Remove a node, voter or learner, from the membership.
    Remove {
        /// Id of the node.
        node_id: u64,
    },
}

/// Runs one `gavel cluster` command.
pub async fn run(args: ClusterArgs) -> Result<(), CommandError> {
    let json = args.global.json;
    let status = match args.command {
        ClusterCommand::Status => return status(&args.global).await,
        ClusterCommand::AddNode { node_id, addr } => {
            let client = args.global.client()?;
            client.add_node(node_id, &addr).await?
        }
        ClusterCommand::AddLearner { node_id, addr } => {
            let client = args.global.client()?;
            client.add_learner(pb::AddLearnerRequest { node_id, addr, ..pb::AddLearnerRequest::default() }).await?
        }
        ClusterCommand::Promote { node_id, id } => {
            let node_id = node_id.or(id).ok_or_else(|| CommandError::Usage("give the node id".to_string()))?;
            let client = args.global.client()?;
            client.promote(pb::PromoteRequest { node_id, ..pb::PromoteRequest::default() }).await?
        }
        ClusterCommand::RemoveNode { node_id } => {
            let client = args.global.client()?;
            // Removing is idempotent in the API; the command says plainly
            // when there was nothing to remove.
            let before = client.status(pb::StatusRequest { without_state_hash: true }).await?;
            if !before.members.iter().any(|member| member.node_id == node_id) {
                let ids: Vec<String> = before.members.iter().map(|member| member.node_id.to_string()).collect();
                return Err(CommandError::refused(
                    ErrorCode::NotAMember,
                    format!("node {node_id} is not a member of the cluster (members: {})", ids.join(", ")),
                ));
            }
            client.remove_node(pb::RemoveNodeRequest { node_id, ..pb::RemoveNodeRequest::default() }).await?
        }
        ClusterCommand::Remove { node_id } => {
            let client = args.global.client()?;
            client.remove_node(pb::RemoveNodeRequest { node_id, ..pb::RemoveNodeRequest::default() }).await?
        }
    };
    print_membership(&status, json)
}

/// What one address answered.
struct Answer {
    addr: String,
    result: Result<pb::StatusResponse, String>,
    /// A client-side configuration problem the call found (a node that
    /// speaks TLS to a client without a CA), which no node can fix.
    configuration: Option<String>,
}

/// Asks one node, without following the leader: the row is that node's own
/// view. `base` carries the credentials.
async fn ask(addr: String, base: ClientConfig) -> Answer {
    let config = ClientConfig { call_timeout: STATUS_TIMEOUT, retry_budget: Duration::ZERO, ..base };
    let mut configuration = None;
    let result = match Client::with_config(std::slice::from_ref(&addr), config) {
        Ok(client) => client.status(pb::StatusRequest::default()).await.map_err(|error| match error {
            gavel_client::Error::Unavailable(reason) => reason,
            gavel_client::Error::Config(reason) => {
                configuration = Some(reason.clone());
                reason
            }
            other => other.to_string(),
        }),
        Err(error) => Err(error.to_string()),
    };
    Answer { addr, result, configuration }
}

fn bare(addr: &str) -> &str {
    addr.trim_start_matches("http://").trim_start_matches("https://")
}

async fn status(global: &GlobalArgs) -> Result<(), CommandError> {
    // Refuses a malformed --endpoints (exit 2) before asking anything.
    global.client()?;
    let base = global.client_config()?;
    let endpoints: Vec<String> = global.endpoint_list().iter().map(|endpoint| bare(endpoint).to_string()).collect();
    let mut answers = futures::future::join_all(endpoints.iter().cloned().map(|addr| ask(addr, base.clone()))).await;
    // Members the endpoints know of but that were not listed get a row too.
    let mut unlisted: Vec<String> = answers
        .iter()
        .filter_map(|answer| answer.result.as_ref().ok())
        .flat_map(|status| status.members.iter().map(|member| member.addr.clone()))
        .filter(|addr| !endpoints.iter().any(|endpoint| endpoint == addr))
        .collect();
    unlisted.sort();
    unlisted.dedup();
    answers.extend(futures::future::join_all(unlisted.into_iter().map(|addr| ask(addr, base.clone()))).await);

    if answers.iter().all(|answer| answer.result.is_err()) {
        // Said once, as a usage error: the nodes are up, the client is not set up for them.
        if let Some(reason) = answers.iter().find_map(|answer| answer.configuration.clone()) {
            return Err(CommandError::Usage(reason));
        }
        let reasons: Vec<String> = answers
            .iter()
            .map(|answer| format!("{}: {}", answer.addr, answer.result.as_ref().err().map_or("", String::as_str)))
            .collect();
        return Err(CommandError::Unreachable(format!("no node answered ({})", reasons.join("; "))));
    }

    // The membership as the most up-to-date answering node knows it.
    let membership: BTreeMap<u64, pb::Member> = answers
        .iter()
        .filter_map(|answer| answer.result.as_ref().ok())
        .max_by_key(|status| (status.role == "Leader", status.term, status.last_applied_index))
        .map(|status| status.members.iter().map(|member| (member.node_id, member.clone())).collect())
        .unwrap_or_default();
    let node_id_of = |answer: &Answer| match &answer.result {
        Ok(status) => Some(status.node_id),
        Err(_) => membership.values().find(|member| member.addr == answer.addr).map(|member| member.node_id),
    };
    answers.sort_by_key(|answer| (node_id_of(answer).unwrap_or(u64::MAX), answer.addr.clone()));
    // A node cut off from its quorum may still call itself leader: the
    // command succeeds only when a majority of the voters answers and one
    // of them leads; otherwise it prints what it saw and exits 4.
    let reach = Reachability::of(answers.iter().filter_map(|answer| answer.result.as_ref().ok()), answers.len());
    let verdict = if reach.has_quorum() && reach.leader.is_some() {
        Ok(())
    } else {
        Err(CommandError::Unreachable(reach.describe()))
    };

    if global.json {
        let nodes: Vec<Value> = answers
            .iter()
            .map(|answer| {
                let node_id = node_id_of(answer);
                let voter = node_id.and_then(|id| membership.get(&id)).map(|member| member.voter);
                match &answer.result {
                    Ok(status) => json!({
                        "nodeId": status.node_id,
                        "addr": answer.addr,
                        "reachable": true,
                        "role": status.role.to_ascii_lowercase(),
                        "voter": voter,
                        "term": status.term,
                        "lastAppliedIndex": status.last_applied_index,
                        "lastLogIndex": status.last_log_index,
                        "snapshotIndex": status.snapshot_index,
                        "stateHash": status.state_hash,
                        "leaderId": status.leader_id,
                        "error": null,
                    }),
                    Err(error) => json!({
                        "nodeId": node_id,
                        "addr": answer.addr,
                        "reachable": false,
                        "role": null,
                        "voter": voter,
                        "term": null,
                        "lastAppliedIndex": null,
                        "lastLogIndex": null,
                        "snapshotIndex": null,
                        "stateHash": null,
                        "leaderId": null,
                        "error": error,
                    }),
                }
            })
            .collect();
        output::print_json(&json!({ "nodes": nodes }))?;
        return verdict;
    }

    let mut table = Table::new(&["NODE", "ADDR", "ROLE", "VOTER", "TERM", "APPLIED", "STATE", "LEADER"]);
    for answer in &answers {
        let node_id = node_id_of(answer);
        let voter = or_dash(node_id.and_then(|id| membership.get(&id)).map(|member| member.voter));
        match &answer.result {
            Ok(status) => table.row(vec![
                status.node_id.to_string(),
                answer.addr.clone(),
                status.role.to_ascii_lowercase(),
                voter,
                status.term.to_string(),
                status.last_applied_index.to_string(),
                status.state_hash.chars().take(HASH_PREFIX_CHARS).collect(),
                or_dash(status.leader_id),
            ]),
            Err(_) => table.row(vec![
                or_dash(node_id),
                answer.addr.clone(),
                "unreachable".to_string(),
                voter,
                "-".to_string(),
                "-".to_string(),
                "-".to_string(),
                "-".to_string(),
            ]),
        }
    }
    output::print(&table.render())?;
    verdict
}

/// Prints the membership after a change, as the answering node sees it.
fn print_membership(status: &pb::StatusResponse, json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&output::status_json(status));
    }
    let mut table = Table::new(&["NODE", "ADDR", "VOTER"]);
    for member in &status.members {
        table.row(vec![member.node_id.to_string(), member.addr.clone(), member.voter.to_string()]);
    }
    let leader = match (status.leader_id, &status.leader_addr) {
        (Some(id), Some(addr)) => format!("node {id} ({addr})"),
        (Some(id), None) => format!("node {id}"),
        _ => "unknown".to_string(),
    };
    output::print(&format!("{}leader: {leader}\n", table.render()))
}
