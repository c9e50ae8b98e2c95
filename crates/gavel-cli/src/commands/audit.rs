//! `gavel audit tail`: read the audit trail a page at a time, newest first,
//! or follow it from a cursor;
//! `gavel audit get`: one event by its cursor; `gavel audit record`: append
//! an application event (`AuditService.RecordEvent`). The audit tree's
//! verbs (`checkpoint`, `proof`, `export`, `verify`, `verify-proof`) are in
//! `audit_proof.rs`; the last two need no cluster.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use gavel_client::{pb, Client};
use gavel_core::ErrorCode;
use serde_json::json;

use super::output::{self, Table};
use super::paging::{self, PageArgs};
use super::{CommandError, GlobalArgs};

/// `gavel audit`.
#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: AuditCommand,
}

/// The verbs of `gavel audit`.
#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Print the audit trail. Without --follow it prints one page of the
    /// events that exist, newest first, then the token of the next page and
    /// the last cursor to pass as --after to --follow; with --follow it
    /// streams every event after --after in order, then new ones as they
    /// are written, resuming across reconnects, until interrupted.
    Tail {
        /// Only events after this cursor (0: every retained event).
        #[arg(long, value_name = "CURSOR", default_value_t = 0)]
        after: u64,
        /// Only events of this execution.
        #[arg(long = "execution", value_name = "ID")]
        execution_id: Option<String>,
        /// Keep following new events.
        #[arg(long)]
        follow: bool,
        /// Paging (without --follow).
        #[command(flatten)]
        page: PageArgs,
    },
    /// Print the event at one cursor.
    Get {
        /// The event's cursor.
        #[arg(value_name = "CURSOR")]
        cursor: u64,
    },
    /// Append an application event to the audit trail as the `--as` actor
    /// (needs the submitter grant) and print it with its cursor.
    Record {
        /// The event type, e.g. policy.denied: lower-case letters, digits and
        /// . _ -, starting with a letter; Gavel's own types are refused.
        #[arg(value_name = "TYPE")]
        event_type: String,
        /// The execution the event is about.
        #[arg(long = "execution", value_name = "ID")]
        execution_id: Option<String>,
        /// The approval the event is about.
        #[arg(long = "approval", value_name = "ID")]
        approval_id: Option<String>,
        /// The capability the event is about.
        #[arg(long = "capability", value_name = "ID")]
        capability_id: Option<String>,
        /// An application correlation id.
        #[arg(long = "correlation", value_name = "ID")]
        correlation_id: Option<String>,
        /// A JSON payload.
        #[arg(long = "payload", value_name = "JSON")]
        payload_json: Option<String>,
        /// An attribute of the event, KEY=VALUE; repeatable.
        #[arg(long = "attribute", value_name = "KEY=VALUE", value_parser = parse_attribute)]
        attributes: Vec<(String, String)>,
    },
    /// Print the last checkpoint a quorum of the nodes cosigned: a C2SP
    /// tlog-checkpoint (origin, size, base64 root) as a signed note, signed
    /// by the log under its origin, cosigned by the nodes and by the
    /// witnesses that have cosigned it. Before the first is published it
    /// fails with AUDIT_CHECKPOINT_UNSIGNED. Save it to check a later export
    /// against it.
    Checkpoint,
    /// Print the nodes' note keys as C2SP verifier keys (name+hash+key), one
    /// per line: each as a log key (named as the origin), then as the node's
    /// cosigner key: the --keys file of `gavel audit verify`.
    Keys,
    /// Prove that the event at CURSOR is in the audit log: writes a
    /// C2SP tlog-proof with the event's canonical bytes, which
    /// `gavel audit verify-proof` checks with no cluster.
    Proof {
        /// The event's cursor (its leaf is cursor - 1).
        #[arg(value_name = "CURSOR")]
        cursor: u64,
        /// The tree size to prove against: that of the last cosigned
        /// checkpoint (the default, 0), which must cover the event.
        #[arg(long, value_name = "SIZE", default_value_t = 0)]
        size: u64,
        /// Write the proof here instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Export the whole audit tree to FILE: every leaf with its event's
    /// canonical bytes (null where retention dropped it), the checkpoint now,
    /// with --checkpoint the proof that an earlier checkpoint is a prefix,
    /// and which leaves retention dropped (its window, the checkpoint that
    /// holds their hashes), so a null past them reads as withheld.
    Export {
        /// The file to write (JSON lines, gavel-audit-export/1).
        #[arg(value_name = "FILE")]
        file: std::path::PathBuf,
        /// An earlier checkpoint (as `gavel audit checkpoint` printed it) to
        /// include, with the consistency proof from it to now; repeatable.
        #[arg(long = "checkpoint", value_name = "FILE")]
        checkpoints: Vec<std::path::PathBuf>,
    },
    /// Verify an export with no cluster, reading it once: recomputes the
    /// tree, checks every event against its leaf and every checkpoint and
    /// consistency proof, and names the index of any changed, dropped,
    /// reordered or withheld event (once per stretch). A file in another
    /// format than gavel-audit-export/1 is refused.
    Verify {
        /// The export to verify.
        #[arg(value_name = "FILE")]
        file: std::path::PathBuf,
        /// Verifier keys, one per line (`gavel audit keys`): every checkpoint
        /// must carry a signature by one of the log keys listed (named as
        /// the origin) and cosignatures by --quorum of the node keys listed.
        /// Without --keys or --policy the signatures are not checked (and
        /// the output says so).
        #[arg(long, value_name = "FILE")]
        keys: Option<std::path::PathBuf>,
        /// How many of the listed node (cosigner) keys must have cosigned
        /// each checkpoint (default: a majority of them).
        #[arg(long, value_name = "K")]
        quorum: Option<usize>,
        /// A witness policy (C2SP tlog-policy: `log`, `witness`, `group` and
        /// `quorum` lines): every checkpoint must carry a log key's signature
        /// and the cosignatures of the witnesses its quorum names.
        #[arg(long, value_name = "FILE")]
        policy: Option<std::path::PathBuf>,
    },
    /// Verify an event proof (from `gavel audit proof`) with no cluster.
    VerifyProof {
        /// The proof to verify.
        #[arg(value_name = "FILE")]
        file: std::path::PathBuf,
        /// Verifier keys, as for `verify`.
        #[arg(long, value_name = "FILE")]
        keys: Option<std::path::PathBuf>,
        /// How many of the listed node keys must have cosigned (default: a majority).
        #[arg(long, value_name = "K")]
        quorum: Option<usize>,
        /// A witness policy, as for `verify`.
        #[arg(long, value_name = "FILE")]
        policy: Option<std::path::PathBuf>,
    },
}

/// Parses `KEY=VALUE`; the value may be empty and may contain `=`.
fn parse_attribute(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("attribute {text:?} is not KEY=VALUE")),
    }
}

/// Runs one `gavel audit` command.
pub async fn run(args: AuditArgs) -> Result<(), CommandError> {
    let json = args.global.json;
    // The verifiers read files only: they need no endpoint, no credentials.
    let client = || args.global.client();
    match args.command {
        AuditCommand::Verify { file, keys, quorum, policy } => {
            let signers = super::audit_proof::Signers::read(keys.as_deref(), quorum, policy.as_deref())?;
            super::audit_proof::verify(&file, &signers, json)
        }
        AuditCommand::VerifyProof { file, keys, quorum, policy } => {
            let signers = super::audit_proof::Signers::read(keys.as_deref(), quorum, policy.as_deref())?;
            super::audit_proof::verify_proof(&file, &signers, json)
        }
        AuditCommand::Checkpoint => super::audit_proof::checkpoint(&client()?, json).await,
        AuditCommand::Keys => super::audit_proof::keys(&client()?, json).await,
        AuditCommand::Proof { cursor, size, out } => {
            super::audit_proof::proof(&client()?, cursor, size, out.as_deref(), json).await
        }
        AuditCommand::Export { file, checkpoints } => {
            super::audit_proof::export(&client()?, &file, &checkpoints, json).await
        }
        AuditCommand::Tail { after, execution_id, follow: false, page } => {
            tail(&client()?, after, execution_id, &page, json).await
        }
        AuditCommand::Tail { after, execution_id, follow: true, page } => {
            if page.limit.is_some() || page.page_token.is_some() || page.oldest_first || page.all {
                return Err(CommandError::Usage(
                    "--follow streams every event in order; --limit, --page-token, --oldest-first and --all \
                     page through what exists without it"
                        .to_string(),
                ));
            }
            follow(&client()?, after, execution_id, json).await
        }
        AuditCommand::Get { cursor } => get(&client()?, cursor, json).await,
        AuditCommand::Record {
            event_type,
            execution_id,
            approval_id,
            capability_id,
            correlation_id,
            payload_json,
            attributes,
        } => {
            let request = pb::RecordEventRequest {
                r#type: event_type,
                actor: args.global.actor(),
                execution_id,
                approval_id,
                correlation_id,
                capability_id,
                payload_json,
                attributes: attributes.into_iter().collect::<BTreeMap<_, _>>(),
                ..pb::RecordEventRequest::default()
            };
            let event = client()?.record_event(request).await?.event.ok_or_else(|| {
                CommandError::refused(
                    ErrorCode::Internal,
                    "the cluster recorded the event but returned none".to_string(),
                )
            })?;
            print_event(&event, json)
        }
    }
}

/// Prints one event: a JSON line, or a one-row table.
fn print_event(event: &pb::Event, json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json_line(&output::event_json(event));
    }
    let mut table = Table::new(&output::EVENT_HEADERS);
    table.row(output::event_row(event));
    output::print(&table.render())
}

/// Prints one event, or refuses with `NOT_FOUND` when no retained event has the cursor.
async fn get(client: &Client, cursor: u64, json: bool) -> Result<(), CommandError> {
    let response = client.get_event(pb::GetEventRequest { cursor }).await?;
    let event = response
        .event
        .ok_or_else(|| CommandError::refused(ErrorCode::NotFound, format!("no retained event has cursor {cursor}")))?;
    print_event(&event, json)
}

/// Prints one page of the events after `after` (every page with `--all`),
/// newest first unless `--oldest-first`, then the token of the next page
/// and the last cursor listed (the greatest; `after` when none was): as a
/// final `{"lastCursor": N, "nextPageToken": T}` line in JSON mode, as
/// sentences otherwise.
async fn tail(
    client: &Client,
    after: u64,
    execution_id: Option<String>,
    page: &PageArgs,
    json: bool,
) -> Result<(), CommandError> {
    let mut request = pb::ListEventsRequest {
        after_cursor: after,
        limit: page.limit(),
        execution_id,
        newest_first: !page.oldest_first,
        page_token: page.page_token(),
    };
    let mut cursor = after;
    let mut table = Table::new(&output::EVENT_HEADERS);
    let mut count = 0usize;
    let next_page_token = loop {
        let listed = client.list_events(request.clone()).await?;
        count += listed.events.len();
        for event in &listed.events {
            if json {
                output::print_json_line(&output::event_json(event))?;
            } else {
                table.row(output::event_row(event));
            }
        }
        cursor = listed.last_cursor.max(cursor);
        if !page.all || listed.next_page_token.is_empty() {
            break listed.next_page_token;
        }
        request.page_token = listed.next_page_token;
    };
    if json {
        let next_page_token = paging::token_json(&next_page_token);
        return output::print_json_line(&json!({ "lastCursor": cursor, "nextPageToken": next_page_token }));
    }
    if count > 0 {
        output::print(&table.render())?;
    }
    paging::print_footer(&next_page_token)?;
    output::print(&format!("last cursor: {cursor} (follow from it with: gavel audit tail --follow --after {cursor})\n"))
}

/// Streams events until interrupted; the SDK reconnects to any node and
/// resumes from the last cursor it delivered.
async fn follow(client: &Client, after: u64, execution_id: Option<String>, json: bool) -> Result<(), CommandError> {
    let mut events = client.watch_events(after, execution_id);
    let mut cursor = after;
    if !json {
        output::print(&format!("{}\n", follow_line(&output::EVENT_HEADERS.map(String::from))))?;
    }
    loop {
        tokio::select! {
            next = events.recv() => match next {
                Some(Ok(event)) => {
                    cursor = event.cursor;
                    if json {
                        output::print_json_line(&output::event_json(&event))?;
                    } else {
                        output::print(&format!("{}\n", follow_line(&output::event_row(&event))))?;
                    }
                }
                Some(Err(error)) => return Err(error.into()),
                None => return Ok(()),
            },
            _ = tokio::signal::ctrl_c() => {
                eprintln!("stopped after cursor {cursor} (continue with: gavel audit tail --follow --after {cursor})");
                return Ok(());
            }
        }
    }
}

/// A row with fixed column widths: rows of a stream cannot be aligned on
/// their widest cell, which is not known yet.
fn follow_line(cells: &[String]) -> String {
    // CURSOR, TIME, SOURCE, TYPE, ACTOR, PRINCIPAL, EXECUTION; DETAILS runs on.
    const WIDTHS: [usize; 7] = [8, 24, 6, 30, 24, 24, 40];
    let mut line = String::new();
    for (index, cell) in cells.iter().enumerate() {
        match WIDTHS.get(index) {
            Some(width) => line.push_str(&format!("{cell:<width$}  ")),
            None => line.push_str(cell),
        }
    }
    line.trim_end().to_string()
}
