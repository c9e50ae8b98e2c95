//! docs/ARCHITECTURE.md against the code: its crate-graph table lists, for
//! every crate of the workspace, exactly the workspace crates that crate's
//! manifest takes as normal (not dev, not build) dependencies, as `cargo
//! metadata` reads them; and the document stays a map (500 lines at most,
//! issue #38).
//!
//! The table is the fenced block whose info string is `crate-graph`, one
//! line per crate: `crate -> dep, dep` (or `crate -> (none)`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The workspace root (this package is `tests/`).
const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The document the table is read from.
const ARCHITECTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/ARCHITECTURE.md");

/// The most lines ARCHITECTURE.md may have (issue #38: a map, not a diary).
const ARCHITECTURE_LINES_MAX: usize = 500;

/// Crate name → the workspace crates it depends on.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Each workspace member's normal dependencies on workspace members, from
/// `cargo metadata`. `--no-deps` reads the manifests alone: the table is
/// about what our manifests declare, and resolving every platform's
/// packages would need ones an offline machine does not hold.
fn cargo_graph() -> Graph {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--offline", "--no-deps", "--format-version", "1"])
        .current_dir(WORKSPACE)
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .expect("workspace_members")
        .iter()
        .map(|id| id.as_str().expect("a package id"))
        .collect();
    let packages: Vec<&serde_json::Value> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|package| members.contains(package["id"].as_str().expect("a package id")))
        .collect();
    let names: BTreeSet<String> =
        packages.iter().map(|package| package["name"].as_str().expect("a package name").to_string()).collect();
    packages
        .iter()
        .map(|package| {
            let dependencies = package["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                // `kind` is null for a normal dependency, "dev" or "build" otherwise.
                .filter(|dependency| dependency["kind"].is_null())
                .map(|dependency| dependency["name"].as_str().expect("a dependency name").to_string())
                .filter(|name| names.contains(name))
                .collect();
            (package["name"].as_str().expect("a package name").to_string(), dependencies)
        })
        .collect()
}

/// The `crate-graph` block of `document`, or every reason it cannot be read.
fn documented_graph(document: &str) -> Result<Graph, Vec<String>> {
    let mut lines = document.lines().enumerate();
    if !lines.by_ref().any(|(_, line)| line.trim() == "```crate-graph") {
        return Err(vec!["docs/ARCHITECTURE.md has no ```crate-graph block".to_string()]);
    }
    let mut graph = Graph::new();
    let mut problems = Vec::new();
    let mut closed = false;
    for (index, line) in lines {
        let line = line.trim();
        if line == "```" {
            closed = true;
            break;
        }
        if line.is_empty() {
            continue;
        }
        let Some((name, dependencies)) = line.split_once("->") else {
            problems.push(format!("line {}: `{line}` is not `crate -> dep, dep`", index + 1));
            continue;
        };
        let name = name.trim().to_string();
        let dependencies: BTreeSet<String> = match dependencies.trim() {
            "(none)" => BTreeSet::new(),
            list => list.split(',').map(|dependency| dependency.trim().to_string()).collect(),
        };
        if name.is_empty() || dependencies.iter().any(String::is_empty) {
            problems.push(format!("line {}: `{line}` has an empty crate name", index + 1));
        } else if graph.insert(name.clone(), dependencies).is_some() {
            problems.push(format!("line {}: {name} is listed twice", index + 1));
        }
    }
    if !closed {
        problems.push("the ```crate-graph block is not closed".to_string());
    }
    if problems.is_empty() {
        Ok(graph)
    } else {
        Err(problems)
    }
}

/// Every difference between the documented graph and the manifests'.
fn differences(documented: &Graph, actual: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for (name, dependencies) in actual {
        let Some(listed) = documented.get(name) else {
            found.push(format!("{name} is a workspace crate but has no line (it depends on {dependencies:?})"));
            continue;
        };
        for missing in dependencies.difference(listed) {
            found.push(format!("{name} depends on {missing}, which its line does not list"));
        }
        for extra in listed.difference(dependencies) {
            found.push(format!("{name}'s line lists {extra}, which is not a normal dependency of it"));
        }
    }
    for name in documented.keys().filter(|name| !actual.contains_key(*name)) {
        found.push(format!("{name} has a line but is not a workspace crate"));
    }
    found
}

#[test]
fn the_crate_graph_table_matches_cargo_metadata() {
    let actual = cargo_graph();
    // The manifests are read, so the comparison can fail.
    assert!(
        actual.get("gavel-store").is_some_and(|dependencies| dependencies.contains("gavel-core")),
        "cargo metadata is read: {actual:?}"
    );
    let document = std::fs::read_to_string(ARCHITECTURE).expect("read docs/ARCHITECTURE.md");
    let documented = documented_graph(&document).unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    let found = differences(&documented, &actual);
    assert!(
        found.is_empty(),
        "docs/ARCHITECTURE.md's crate-graph table differs from the manifests:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn the_comparison_names_every_kind_of_difference() {
    let document = "text\n```crate-graph\na -> b, c\nb -> (none)\nd -> a\n```\n";
    let documented = documented_graph(document).expect("a well-formed table");
    let actual: Graph = [
        ("a".to_string(), ["b".to_string(), "e".to_string()].into()),
        ("b".to_string(), BTreeSet::new()),
        ("e".to_string(), BTreeSet::new()),
    ]
    .into();
    let found = differences(&documented, &actual);
    assert_eq!(
        found,
        [
            "a depends on e, which its line does not list",
            "a's line lists c, which is not a normal dependency of it",
            "e is a workspace crate but has no line (it depends on {})",
            "d has a line but is not a workspace crate",
        ],
    );
    let problems = documented_graph("```crate-graph\na -> b\na -> c\nnonsense\n").expect_err("malformed");
    assert_eq!(problems.len(), 3, "{problems:?}");
}

#[test]
fn the_architecture_document_stays_a_map() {
    let document = std::fs::read_to_string(ARCHITECTURE).expect("read docs/ARCHITECTURE.md");
    let lines = document.lines().count();
    assert!(
        lines <= ARCHITECTURE_LINES_MAX,
        "docs/ARCHITECTURE.md has {lines} lines, more than {ARCHITECTURE_LINES_MAX}"
    );
}
