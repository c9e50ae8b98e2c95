//! The core must stay sans-IO: its dependency closure (from the committed
//! Cargo.lock) contains no async runtime, storage, transport, consensus or
//! randomness crate.

use std::collections::{BTreeMap, BTreeSet};

/// Crates the core must never pull in, directly or transitively.
const FORBIDDEN: &[&str] = &["tokio", "sled", "tonic", "openraft", "rand", "getrandom", "prost"];

/// Parses Cargo.lock into package name → dependency names.
fn lock_graph(lock: &str) -> BTreeMap<String, Vec<String>> {
    let mut graph: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_dependencies = false;
    for line in lock.lines() {
        let line = line.trim();
        if line == "[[package]]" {
            current = None;
            in_dependencies = false;
        } else if let Some(name) = line.strip_prefix("name = ") {
            let name = name.trim_matches('"').to_string();
            graph.entry(name.clone()).or_default();
            current = Some(name);
        } else if line.starts_with("dependencies = [") {
            in_dependencies = true;
        } else if in_dependencies && line == "]" {
            in_dependencies = false;
        } else if in_dependencies {
            let dependency = line.trim_matches(|c| c == '"' || c == ',').split(' ').next().unwrap_or("").to_string();
            if let Some(name) = &current {
                graph.entry(name.clone()).or_default().push(dependency);
            }
        }
    }
    graph
}

/// The normal dependencies the manifest of workspace crate `name` declares
/// (not its dev-dependencies).
fn normal_dependencies(name: &str) -> Vec<String> {
    let path = format!("{}/../{name}/Cargo.toml", env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
    let normal = manifest.split("[dev-dependencies]").next().unwrap_or("");
    normal.lines().filter_map(|line| line.split_once(".workspace").map(|(name, _)| name.trim().to_string())).collect()
}

#[test]
fn core_dependency_closure_has_no_runtime_storage_transport_consensus_or_randomness() {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock")).expect("Cargo.lock");
    let graph = lock_graph(&lock);
    assert!(graph.contains_key("tokio"), "the parser sees the workspace's tokio, so the check can fail");
    let mut closure = BTreeSet::new();
    let mut pending = normal_dependencies("gavel-core");
    while let Some(name) = pending.pop() {
        if closure.insert(name.clone()) {
            // A workspace crate's dev-dependencies are in the lock graph too
            // (proptest pulls rand), so its manifest says what it needs.
            let dependencies = if name.starts_with("gavel-") {
                normal_dependencies(&name)
            } else {
                graph.get(&name).cloned().unwrap_or_default()
            };
            pending.extend(dependencies);
        }
    }
    assert!(closure.contains("sha2") && closure.contains("gavel-json"), "the closure is computed: {closure:?}");
    let found: Vec<&&str> = FORBIDDEN.iter().filter(|name| closure.contains(**name)).collect();
    assert!(found.is_empty(), "gavel-core depends on {found:?}");
}
