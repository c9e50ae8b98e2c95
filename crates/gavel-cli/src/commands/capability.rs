//! `gavel capability register|get|list`: the capability registry.
//!
//! A capability file is TOML (`.toml`) or JSON (`.json`) with the camelCase
//! keys of orpc-agent's capability meta:
//!
//! ```toml
//! id = "payments.refund"
//! sideEffect = "external"       # none | read | write | destructive | external
//! risk = "high"                 # low | medium | high | critical
//! idempotent = true
//! timeoutMs = 30000
//! heartbeatTimeoutMs = 5000
//! queue = "payments"
//! tags = ["finance"]
//! [retry]
//! maxAttempts = 3
//! backoffMs = 250
//! nonRetryableCodes = ["CARD_DECLINED"]
//! [approval]
//! required = true
//! type = "finance"
//! expiresInMs = 900000
//! ```
//!
//! The CLI checks the shape of the file (known keys, types, enum words) and
//! reports every problem at once, as the cluster does for the rules it owns
//! (required fields, positive timeouts, retry of a write-like capability).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use gavel_client::pb;
use gavel_core::ErrorCode;
use serde_json::{json, Map, Value};

use super::output::{self, key_values, or_dash, time, Table};
use super::{CommandError, GlobalArgs};

/// `gavel capability`.
#[derive(Debug, Args)]
pub struct CapabilityArgs {
    /// Options shared by every command.
    #[command(flatten, next_help_heading = "Global options")]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: CapabilityCommand,
}

/// The verbs of `gavel capability`.
#[derive(Debug, Subcommand)]
pub enum CapabilityCommand {
    /// Register a capability from a TOML or JSON file (a new version when the id exists).
    Register {
        /// The capability file, ending in .toml or .json.
        file: PathBuf,
    },
    /// Show a capability (the latest version unless --version is given).
    Get {
        /// Capability id.
        id: String,
        /// A specific registry version.
        #[arg(long, value_name = "N")]
        version: Option<u64>,
    },
    /// List the latest version of every capability.
    List,
}

/// Runs one `gavel capability` command.
pub async fn run(args: CapabilityArgs) -> Result<(), CommandError> {
    let json = args.global.json;
    match args.command {
        CapabilityCommand::Register { file } => {
            // Read and check the file before touching the network.
            let spec = read_spec_file(&file)?;
            let client = args.global.client()?;
            let request =
                pb::RegisterCapabilityRequest { spec: Some(spec), ..pb::RegisterCapabilityRequest::default() };
            let response = client.register_capability(request).await?;
            let capability = response
                .capability
                .ok_or_else(|| CommandError::Other(anyhow::anyhow!("the cluster answered without the capability")))?;
            print_capability(&capability, json)
        }
        CapabilityCommand::Get { id, version } => {
            let client = args.global.client()?;
            let response = client.get_capability(pb::GetCapabilityRequest { id: id.clone(), version }).await?;
            let capability = response.capability.ok_or_else(|| match version {
                Some(version) => CommandError::refused(
                    ErrorCode::CapabilityNotFound,
                    format!("capability {id} has no version {version}"),
                ),
                None => {
                    CommandError::refused(ErrorCode::CapabilityNotFound, format!("capability {id} is not registered"))
                }
            })?;
            print_capability(&capability, json)
        }
        CapabilityCommand::List => {
            let client = args.global.client()?;
            let response = client.list_capabilities(pb::ListCapabilitiesRequest {}).await?;
            print_list(&response.capabilities, json)
        }
    }
}

/// Reads a capability file, choosing the syntax by its extension.
pub fn read_spec_file(path: &Path) -> Result<pb::CapabilitySpec, CommandError> {
    let extension = path.extension().and_then(|extension| extension.to_str()).map(str::to_ascii_lowercase);
    let text = || {
        std::fs::read_to_string(path)
            .map_err(|error| CommandError::Other(anyhow::anyhow!("reading {}: {error}", path.display())))
    };
    let value: Value = match extension.as_deref() {
        Some("json") => serde_json::from_str(&text()?).map_err(|error| {
            CommandError::refused(
                ErrorCode::CapabilityInvalid,
                format!("{} is not valid JSON: {error}", path.display()),
            )
        })?,
        Some("toml") => {
            let text = text()?;
            let table: toml::Table = toml::from_str(&text).map_err(|error| {
                let line = error.span().map_or(String::new(), |span| {
                    format!(" (line {})", text.bytes().take(span.start).filter(|byte| *byte == b'\n').count() + 1)
                });
                CommandError::refused(
                    ErrorCode::CapabilityInvalid,
                    format!("{} is not valid TOML{line}: {}", path.display(), error.message()),
                )
            })?;
            serde_json::to_value(table).map_err(anyhow::Error::from)?
        }
        _ => return Err(CommandError::Usage(format!("capability file {} must end in .toml or .json", path.display()))),
    };
    spec_from_value(&value).map_err(|problems| CommandError::Refused {
        code: "CAPABILITY_INVALID".to_string(),
        message: match problems.len() {
            1 => format!("capability file {}: {}", path.display(), problems[0]),
            count => format!("capability file {}: {count} problems", path.display()),
        },
        problems,
    })
}

/// Reads fields of one JSON object, recording every problem instead of
/// stopping at the first.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    prefix: &'a str,
    problems: &'a mut Vec<String>,
}

impl Fields<'_> {
    fn name(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn reject_unknown(&mut self, known: &[&str]) {
        for key in self.object.keys() {
            if !known.contains(&key.as_str()) {
                let name = self.name(key);
                self.problems.push(format!("{name} is not a capability field (known: {})", known.join(", ")));
            }
        }
    }

    fn string(&mut self, key: &str) -> Option<String> {
        match self.object.get(key)? {
            Value::String(text) => Some(text.clone()),
            _ => {
                let name = self.name(key);
                self.problems.push(format!("{name} must be a string"));
                None
            }
        }
    }

    fn boolean(&mut self, key: &str) -> Option<bool> {
        match self.object.get(key)? {
            Value::Bool(flag) => Some(*flag),
            _ => {
                let name = self.name(key);
                self.problems.push(format!("{name} must be true or false"));
                None
            }
        }
    }

    fn unsigned(&mut self, key: &str) -> Option<u64> {
        let value = self.object.get(key)?;
        match value.as_u64() {
            Some(number) => Some(number),
            None => {
                let name = self.name(key);
                self.problems.push(format!("{name} must be a non-negative integer"));
                None
            }
        }
    }

    fn small_unsigned(&mut self, key: &str) -> Option<u32> {
        let number = self.unsigned(key)?;
        match u32::try_from(number) {
            Ok(number) => Some(number),
            Err(_) => {
                let name = self.name(key);
                self.problems.push(format!("{name} {number} is too large"));
                None
            }
        }
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        match self.object.get(key) {
            None => Vec::new(),
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => {
                items.iter().filter_map(Value::as_str).map(String::from).collect()
            }
            Some(_) => {
                let name = self.name(key);
                self.problems.push(format!("{name} must be a list of strings"));
                Vec::new()
            }
        }
    }

    fn object(&mut self, key: &str) -> Option<&'_ Map<String, Value>> {
        match self.object.get(key)? {
            Value::Object(object) => Some(object),
            _ => {
                let name = self.name(key);
                self.problems.push(format!("{name} must be a table (an object)"));
                None
            }
        }
    }

    /// An enum word: `words[i]` maps to protobuf value `i + 1`.
    fn word(&mut self, key: &str, words: &[&str]) -> i32 {
        let Some(text) = self.string(key) else { return 0 };
        match words.iter().position(|word| *word == text) {
            Some(index) => i32::try_from(index + 1).unwrap_or(0),
            None => {
                let name = self.name(key);
                self.problems.push(format!("{name} {text:?} is not one of {}", words.join(", ")));
                0
            }
        }
    }
}

/// Builds a spec from the parsed file, or lists every shape problem. Missing
/// required fields are left for the cluster to report with its own rules.
pub fn spec_from_value(value: &Value) -> Result<pb::CapabilitySpec, Vec<String>> {
    let Value::Object(object) = value else {
        return Err(vec!["the file must hold one table (an object) of capability fields".to_string()]);
    };
    let mut problems = Vec::new();
    let mut fields = Fields { object, prefix: "", problems: &mut problems };
    fields.reject_unknown(&[
        "id",
        "sideEffect",
        "risk",
        "idempotent",
        "retry",
        "timeoutMs",
        "heartbeatTimeoutMs",
        "approval",
        "queue",
        "tags",
    ]);
    let mut spec = pb::CapabilitySpec {
        id: fields.string("id").unwrap_or_default(),
        side_effect: fields.word("sideEffect", &["none", "read", "write", "destructive", "external"]),
        risk: fields.word("risk", &["low", "medium", "high", "critical"]),
        idempotent: fields.boolean("idempotent").unwrap_or(false),
        timeout_ms: fields.unsigned("timeoutMs"),
        heartbeat_timeout_ms: fields.unsigned("heartbeatTimeoutMs"),
        queue: fields.string("queue"),
        tags: fields.strings("tags"),
        ..pb::CapabilitySpec::default()
    };
    if let Some(retry) = fields.object("retry") {
        let mut retry_problems = Vec::new();
        let mut retry_fields = Fields { object: retry, prefix: "retry.", problems: &mut retry_problems };
        retry_fields.reject_unknown(&["maxAttempts", "backoffMs", "nonRetryableCodes"]);
        spec.retry = Some(pb::RetryConfig {
            max_attempts: retry_fields.small_unsigned("maxAttempts").unwrap_or(0),
            backoff_ms: retry_fields.unsigned("backoffMs"),
            non_retryable_codes: retry_fields.strings("nonRetryableCodes"),
        });
        problems.extend(retry_problems);
    }
    let mut fields = Fields { object, prefix: "", problems: &mut problems };
    if let Some(approval) = fields.object("approval") {
        let mut approval_problems = Vec::new();
        let mut approval_fields = Fields { object: approval, prefix: "approval.", problems: &mut approval_problems };
        approval_fields.reject_unknown(&["required", "type", "expiresInMs"]);
        spec.approval = Some(pb::ApprovalPolicy {
            required: approval_fields.boolean("required").unwrap_or(false),
            r#type: approval_fields.string("type"),
            expires_in_ms: approval_fields.unsigned("expiresInMs"),
        });
        problems.extend(approval_problems);
    }
    if problems.is_empty() {
        Ok(spec)
    } else {
        Err(problems)
    }
}

fn print_list(capabilities: &[pb::Capability], json: bool) -> Result<(), CommandError> {
    if json {
        let capabilities: Vec<_> = capabilities.iter().map(output::capability_json).collect();
        return output::print_json(&json!({ "capabilities": capabilities }));
    }
    if capabilities.is_empty() {
        eprintln!("no capabilities are registered");
        return Ok(());
    }
    let mut table = Table::new(&["ID", "VERSION", "SIDE EFFECT", "RISK", "APPROVAL", "RETRY", "QUEUE", "TIMEOUT"]);
    for capability in capabilities {
        let spec = capability.spec.clone().unwrap_or_default();
        table.row(vec![
            spec.id.clone(),
            capability.version.to_string(),
            output::side_effect(spec.side_effect),
            output::risk(spec.risk),
            approval_text(&spec),
            retry_text(&spec),
            or_dash(spec.queue.as_deref()),
            or_dash(spec.timeout_ms.map(|timeout| format!("{timeout}ms"))),
        ]);
    }
    output::print(&table.render())
}

fn approval_text(spec: &pb::CapabilitySpec) -> String {
    match &spec.approval {
        Some(approval) if approval.required => match &approval.r#type {
            Some(kind) => format!("required ({kind})"),
            None => "required".to_string(),
        },
        _ => "-".to_string(),
    }
}

fn retry_text(spec: &pb::CapabilitySpec) -> String {
    match &spec.retry {
        Some(retry) => format!("{}x", retry.max_attempts),
        None => "-".to_string(),
    }
}

/// Prints one capability version as a record (or JSON).
fn print_capability(capability: &pb::Capability, json: bool) -> Result<(), CommandError> {
    if json {
        return output::print_json(&output::capability_json(capability));
    }
    let spec = capability.spec.clone().unwrap_or_default();
    let retry = match &spec.retry {
        Some(retry) => {
            let mut text = format!("{} more attempt(s), backoff {}", retry.max_attempts, or_dash(retry.backoff_ms));
            if !retry.non_retryable_codes.is_empty() {
                text.push_str(&format!(", never on {}", retry.non_retryable_codes.join(", ")));
            }
            text
        }
        None => "-".to_string(),
    };
    let approval = match &spec.approval {
        Some(approval) if approval.required => format!(
            "{}, expires after {}",
            approval_text(&spec),
            approval.expires_in_ms.map_or_else(|| "900000ms (default)".to_string(), |ms| format!("{ms}ms"))
        ),
        Some(_) => "not required".to_string(),
        None => "-".to_string(),
    };
    output::print(&key_values(&[
        ("id", spec.id.clone()),
        ("version", capability.version.to_string()),
        ("registered", time(capability.registered_at_ms)),
        ("side effect", output::side_effect(spec.side_effect)),
        ("risk", output::risk(spec.risk)),
        ("idempotent", spec.idempotent.to_string()),
        ("retry", retry),
        ("timeout", or_dash(spec.timeout_ms.map(|ms| format!("{ms}ms")))),
        ("heartbeat timeout", or_dash(spec.heartbeat_timeout_ms.map(|ms| format!("{ms}ms")))),
        ("approval", approval),
        ("queue", or_dash(spec.queue.as_deref())),
        ("tags", if spec.tags.is_empty() { "-".to_string() } else { spec.tags.join(", ") }),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_fields_map_to_the_spec() {
        let value = json!({
            "id": "payments.refund", "sideEffect": "external", "risk": "high", "idempotent": true,
            "retry": {"maxAttempts": 2, "backoffMs": 100, "nonRetryableCodes": ["DECLINED"]},
            "timeoutMs": 5000, "approval": {"required": true, "type": "finance"}, "tags": ["money"]
        });
        let spec = spec_from_value(&value).expect("valid");
        assert_eq!(spec.side_effect, pb::SideEffect::External as i32);
        assert_eq!(spec.risk, pb::Risk::High as i32);
        assert_eq!(spec.retry.as_ref().map(|retry| retry.max_attempts), Some(2));
        assert_eq!(spec.approval.as_ref().and_then(|approval| approval.r#type.clone()).as_deref(), Some("finance"));
        assert_eq!(spec.timeout_ms, Some(5000));
    }

    #[test]
    fn every_shape_problem_is_reported_together() {
        let value = json!({
            "id": 7, "sideEffect": "writes", "timeoutMs": -1, "colour": "red", "retry": {"maxAtempts": 1}
        });
        let problems = spec_from_value(&value).expect_err("invalid");
        assert_eq!(problems.len(), 5, "{problems:#?}");
        assert!(problems.iter().any(|problem| problem.starts_with("retry.maxAtempts is not a capability field")));
    }
}
