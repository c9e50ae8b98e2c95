//! The gateway's configuration file: the upstream servers and which of
//! their tools Gavel governs, as which capability. Pure: it reads no file
//! and dials nothing; [`Config::governed`] turns one rule and the tool's
//! MCP annotations into the capability spec the cluster registers.

use std::collections::BTreeMap;

use gavel_client::pb;
use rmcp::model::ToolAnnotations;
use serde::Deserialize;

use crate::error::McpError;

/// The whole file (`gavel-mcp.toml`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct Config {
    /// The console's base URL (`http://127.0.0.1:7400`), for the link a
    /// pending task's status message names.
    #[serde(default)]
    pub console_url: Option<String>,
    /// The upstream MCP servers, in order.
    #[serde(default, rename = "server")]
    pub servers: Vec<ServerConfig>,
    /// The governed tools; every other tool passes through ungoverned.
    #[serde(default, rename = "tool")]
    pub tools: Vec<ToolRule>,
}

/// One upstream MCP server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct ServerConfig {
    /// Its name: the namespace of its tools when there are several servers,
    /// and part of its governed tools' capability ids.
    pub name: String,
    /// A command speaking MCP over stdio (program and arguments).
    #[serde(default)]
    pub command: Vec<String>,
    /// Extra environment for the command.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A streamable-HTTP endpoint (`http://` or `https://`, ending in the
    /// server's MCP path) instead of a command.
    #[serde(default)]
    pub url: Option<String>,
}

/// How Gavel governs one upstream tool. Every field but `server` and `tool`
/// is optional: what the file leaves out comes from the tool's MCP
/// annotations, and what the file sets no annotation can weaken.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct ToolRule {
    /// The upstream server's name.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The capability id; default `mcp.<server>.<tool>`.
    #[serde(default)]
    pub capability: Option<String>,
    /// Whether a call needs an approval; default: yes unless the side effect
    /// is `none` or `read`.
    #[serde(default)]
    pub approval: Option<bool>,
    /// How long an approval request stays pending (ms).
    #[serde(default)]
    pub approval_expires_in_ms: Option<u64>,
    /// `none`, `read`, `write`, `destructive` or `external`; default from
    /// `readOnlyHint` (read) and `destructiveHint` (destructive, which MCP
    /// assumes when the hint is absent), else write.
    #[serde(default)]
    pub side_effect: Option<String>,
    /// `low`, `medium`, `high` or `critical`; default medium, high for a
    /// destructive tool.
    #[serde(default)]
    pub risk: Option<String>,
    /// Whether running it twice with one idempotency key runs it once;
    /// default from `idempotentHint`, false when absent.
    #[serde(default)]
    pub idempotent: Option<bool>,
    /// Runtime retries; none when absent. The cluster refuses retries of a
    /// write-like tool that is not idempotent.
    #[serde(default)]
    pub retry: Option<RetryRule>,
    /// Per-attempt deadline (ms); default 30000.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The approval policy that must govern the capability (checked by
    /// `gavel mcp check`, which refuses a missing one).
    #[serde(default)]
    pub policy: Option<String>,
    /// The argument that carries the idempotency key, when the tool takes
    /// one; the gateway sets it on every attempt.
    #[serde(default)]
    pub idempotency_key_argument: Option<String>,
}

/// Retry rules of one governed tool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct RetryRule {
    /// Attempts after the first.
    pub max_attempts: u32,
    /// Backoff before the second attempt (ms), doubling after.
    #[serde(default)]
    pub backoff_ms: Option<u64>,
}

/// A governed tool resolved against its upstream definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Governed {
    /// The capability spec the cluster registers and executions snapshot.
    pub spec: pb::CapabilitySpec,
    /// The argument that carries the idempotency key, if any.
    pub idempotency_key_argument: Option<String>,
    /// The policy that must govern the capability, if any.
    pub policy: Option<String>,
}

impl Config {
    /// Parses the file's text and checks what needs no upstream: unique
    /// server names, a command or a URL each, rules naming known servers
    /// once each, known enum values.
    pub fn parse(text: &str) -> Result<Config, McpError> {
        let config: Config = toml::from_str(text).map_err(|error| McpError::Config(error.to_string()))?;
        let mut problems = Vec::new();
        let mut names = std::collections::BTreeSet::new();
        for server in &config.servers {
            if !names.insert(server.name.as_str()) {
                problems.push(format!("server {:?} is configured twice", server.name));
            }
            if server.name.is_empty() || !server.name.chars().all(id_char) {
                problems
                    .push(format!("server name {:?} may hold only ASCII letters, digits, '-' and '_'", server.name));
            }
            match (server.command.is_empty(), &server.url) {
                (true, None) => problems.push(format!("server {:?} needs a command or a url", server.name)),
                (false, Some(_)) => problems.push(format!("server {:?} has both a command and a url", server.name)),
                (true, Some(url)) => {
                    if !(url.starts_with("http://") || url.starts_with("https://")) {
                        problems.push(format!("server {:?}: url {url:?} is not http:// or https://", server.name));
                    }
                    if !server.env.is_empty() {
                        problems.push(format!("server {:?}: env applies to a command, not a url", server.name));
                    }
                }
                (false, None) => {}
            }
        }
        let mut rules = std::collections::BTreeSet::new();
        for rule in &config.tools {
            if !names.contains(rule.server.as_str()) {
                problems.push(format!("tool {:?} names an unknown server {:?}", rule.tool, rule.server));
            }
            if !rules.insert((rule.server.as_str(), rule.tool.as_str())) {
                problems.push(format!("tool {:?} of server {:?} is governed twice", rule.tool, rule.server));
            }
            if let Some(side_effect) = &rule.side_effect {
                if side_effect_of(side_effect).is_none() {
                    problems.push(format!("tool {:?}: unknown side_effect {side_effect:?}", rule.tool));
                }
            }
            if let Some(risk) = &rule.risk {
                if risk_of(risk).is_none() {
                    problems.push(format!("tool {:?}: unknown risk {risk:?}", rule.tool));
                }
            }
            let capability = rule.capability_id();
            if capability.is_empty() || !capability.chars().all(|c| id_char(c) || c == '.') {
                problems.push(format!(
                    "tool {:?}: capability id {capability:?} may hold only ASCII letters, digits, '.', '-' and '_' \
                     (set `capability` to name it)",
                    rule.tool
                ));
            }
        }
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(McpError::Config(problems.join("; ")))
        }
    }

    /// The rule for `tool` of `server`, if Gavel governs it.
    pub fn rule(&self, server: &str, tool: &str) -> Option<&ToolRule> {
        self.tools.iter().find(|rule| rule.server == server && rule.tool == tool)
    }
}

impl ToolRule {
    /// The capability id of this tool's executions.
    pub fn capability_id(&self) -> String {
        self.capability.clone().unwrap_or_else(|| format!("mcp.{}.{}", self.server, self.tool))
    }

    /// The capability this rule and the tool's annotations make. The file
    /// decides; an annotation only fills what the file leaves out.
    pub fn governed(&self, annotations: Option<&ToolAnnotations>) -> Governed {
        let hint = |pick: fn(&ToolAnnotations) -> Option<bool>| annotations.and_then(pick);
        let side_effect = match self.side_effect.as_deref().and_then(side_effect_of) {
            Some(side_effect) => side_effect,
            None if hint(|a| a.read_only_hint) == Some(true) => pb::SideEffect::Read,
            // MCP's default for destructiveHint is true: a tool that does not
            // say otherwise may destroy.
            None if hint(|a| a.destructive_hint) != Some(false) => pb::SideEffect::Destructive,
            None => pb::SideEffect::Write,
        };
        let risk = self.risk.as_deref().and_then(risk_of).unwrap_or(match side_effect {
            pb::SideEffect::Destructive => pb::Risk::High,
            _ => pb::Risk::Medium,
        });
        let idempotent = self.idempotent.unwrap_or(hint(|a| a.idempotent_hint) == Some(true));
        let approval_required =
            self.approval.unwrap_or(!matches!(side_effect, pb::SideEffect::None | pb::SideEffect::Read));
        let capability_id = self.capability_id();
        Governed {
            spec: pb::CapabilitySpec {
                id: capability_id,
                side_effect: side_effect as i32,
                risk: risk as i32,
                idempotent,
                retry: self.retry.as_ref().map(|retry| pb::RetryConfig {
                    max_attempts: retry.max_attempts,
                    backoff_ms: retry.backoff_ms,
                    non_retryable_codes: vec![crate::worker::UPSTREAM_REFUSED.to_string()],
                }),
                timeout_ms: self.timeout_ms,
                heartbeat_timeout_ms: None,
                approval: approval_required.then(|| pb::ApprovalPolicy {
                    required: true,
                    r#type: Some("human".to_string()),
                    expires_in_ms: self.approval_expires_in_ms,
                }),
                queue: None,
                tags: vec!["mcp".to_string(), format!("mcp-server:{}", self.server)],
            },
            idempotency_key_argument: self.idempotency_key_argument.clone(),
            policy: self.policy.clone(),
        }
    }
}

fn id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

fn side_effect_of(text: &str) -> Option<pb::SideEffect> {
    Some(match text {
        "none" => pb::SideEffect::None,
        "read" => pb::SideEffect::Read,
        "write" => pb::SideEffect::Write,
        "destructive" => pb::SideEffect::Destructive,
        "external" => pb::SideEffect::External,
        _ => return None,
    })
}

fn risk_of(text: &str) -> Option<pb::Risk> {
    Some(match text {
        "low" => pb::Risk::Low,
        "medium" => pb::Risk::Medium,
        "high" => pb::Risk::High,
        "critical" => pb::Risk::Critical,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(extra: &str) -> ToolRule {
        let text = format!(
            "[[server]]\nname = \"fs\"\ncommand = [\"x\"]\n[[tool]]\nserver = \"fs\"\ntool = \"write_file\"\n{extra}"
        );
        match Config::parse(&text) {
            Ok(config) => config.tools[0].clone(),
            Err(error) => panic!("{error}"),
        }
    }

    fn hints(read_only: Option<bool>, destructive: Option<bool>, idempotent: Option<bool>) -> ToolAnnotations {
        let mut annotations = ToolAnnotations::default();
        annotations.read_only_hint = read_only;
        annotations.destructive_hint = destructive;
        annotations.idempotent_hint = idempotent;
        annotations
    }

    #[test]
    fn annotations_fill_what_the_file_leaves_out() {
        let governed = rule("").governed(Some(&hints(None, Some(false), Some(true))));
        assert_eq!(governed.spec.side_effect, pb::SideEffect::Write as i32);
        assert!(governed.spec.idempotent);
        assert!(governed.spec.approval.is_some_and(|approval| approval.required));
        assert_eq!(governed.spec.id, "mcp.fs.write_file");
        let absent = rule("").governed(None);
        assert_eq!(absent.spec.side_effect, pb::SideEffect::Destructive as i32);
        assert!(!absent.spec.idempotent);
    }

    #[test]
    fn a_read_only_hint_never_removes_an_approval_or_side_effect_the_file_sets() {
        let governed = rule("approval = true\nside_effect = \"write\"\nidempotent = false").governed(Some(&hints(
            Some(true),
            Some(false),
            Some(true),
        )));
        assert_eq!(governed.spec.side_effect, pb::SideEffect::Write as i32);
        assert!(!governed.spec.idempotent);
        assert!(governed.spec.approval.is_some_and(|approval| approval.required));
        // Without the file saying so, a read-only tool needs no approval.
        let read = rule("").governed(Some(&hints(Some(true), None, None)));
        assert_eq!((read.spec.side_effect, read.spec.approval), (pb::SideEffect::Read as i32, None));
    }

    #[test]
    fn bad_files_are_refused_with_every_problem() {
        let text = "[[server]]\nname = \"a b\"\n[[tool]]\nserver = \"nope\"\ntool = \"t\"\nside_effect = \"maybe\"";
        let Err(McpError::Config(message)) = Config::parse(text) else { panic!("accepted") };
        for expected in ["may hold only", "needs a command or a url", "unknown server", "unknown side_effect"] {
            assert!(message.contains(expected), "{message}");
        }
    }

    #[test]
    fn a_url_server_needs_an_http_url_and_takes_no_env() {
        let good = "[[server]]\nname = \"tickets\"\nurl = \"https://tickets.example/mcp\"";
        assert!(Config::parse(good).is_ok());
        let bad = "[[server]]\nname = \"tickets\"\nurl = \"ftp://tickets.example/mcp\"\nenv = { A = \"b\" }";
        let Err(McpError::Config(message)) = Config::parse(bad) else { panic!("accepted") };
        for expected in ["is not http:// or https://", "env applies to a command"] {
            assert!(message.contains(expected), "{message}");
        }
    }
}
