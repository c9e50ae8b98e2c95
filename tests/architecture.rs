//! docs/ARCHITECTURE.md against the code: its crate-graph table lists, for
//! every crate of the workspace, exactly the workspace crates that crate's
//! manifest takes as normal (not dev, not build) dependencies, as `cargo
//! metadata` reads them; and the document stays a map (500 lines at most,
//! issue #38).
//!
//! The table is the fenced block whose info string is `crate-graph`, one
//! line per crate: `crate -> dep, dep` (or `crate -> (none)`).
//!
//! And the modules of gavel-raft, gavel-core, gavel-store and gavel-server
//! form a DAG: no circle of imports (`module_graph`, issue #38).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

mod module_graph;

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

/// The crates whose modules must form a DAG: types at the leaves,
/// mechanisms above them, wiring at the top.
const DAG_CRATES: [&str; 4] = ["gavel-raft", "gavel-core", "gavel-store", "gavel-server"];

/// Each circle as lines `module -> its imports inside the circle`.
fn describe(circles: &[BTreeMap<String, BTreeSet<String>>]) -> String {
    circles
        .iter()
        .map(|circle| {
            circle
                .iter()
                .map(|(module, imports)| {
                    format!("  {module} -> {}", Vec::from_iter(imports.iter().cloned()).join(", "))
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n  --\n")
}

#[test]
fn the_modules_of_the_layered_crates_form_a_dag() {
    let mut found = Vec::new();
    for name in DAG_CRATES {
        let src = std::path::Path::new(WORKSPACE).join("crates").join(name).join("src");
        let modules = module_graph::read_crate(&src);
        assert!(modules.len() > 3, "{name}: read {} modules from {}", modules.len(), src.display());
        let circles = module_graph::circles(&module_graph::imports(&modules));
        if !circles.is_empty() {
            found.push(format!("{name}:\n{}", describe(&circles)));
        }
    }
    assert!(
        found.is_empty(),
        "import circles among modules (move the shared type to a leaf module):\n{}",
        found.join("\n")
    );
}

/// The reader finds a circle through each way a module names another:
/// a `use` with braces, a path in code, `super::`, and an item the root
/// re-exports; and it ignores comments, strings, test modules and a
/// submodule's use of its parent.
#[test]
fn the_module_reader_finds_a_planted_circle_and_ignores_what_is_not_an_import() {
    let crate_of = |files: &[(&str, &str)]| -> BTreeMap<String, String> {
        files.iter().map(|(name, source)| (name.to_string(), source.to_string())).collect()
    };
    let clean = crate_of(&[
        ("", "mod a; mod b; pub use a::Thing;"),
        ("a", "pub struct Thing; // crate::b::Other\nconst S: &str = \"crate::b::x\";"),
        ("b", "use crate::{a::Thing};\n#[cfg(test)]\nmod tests { use crate::b::c::Deep; }"),
        ("b::c", "use super::Other; use crate::b::Other2; pub struct Deep;"),
    ]);
    let circles = module_graph::circles(&module_graph::imports(&clean));
    assert!(circles.is_empty(), "{}", describe(&circles));

    for planted in ["use crate::{b::Other, a::Thing};", "fn f() { crate::b::g() }", "use crate::Other;"] {
        let mut files = clean.clone();
        files.insert("".into(), "mod a; mod b; pub use a::Thing; pub use b::Other;".into());
        files.insert("a".into(), format!("pub struct Thing; {planted}"));
        let circles = module_graph::circles(&module_graph::imports(&files));
        assert_eq!(circles.len(), 1, "{planted}: {}", describe(&circles));
        assert_eq!(Vec::from_iter(circles[0].keys().cloned()), ["a", "b"], "{planted}");
    }
    let mut files = clean;
    files.insert("b::c".into(), "pub struct Deep;".into());
    files.insert("a".into(), "pub struct Thing; use crate::b::c::Deep;".into());
    files.insert("b".into(), "use crate::{a::Thing};".into());
    files.insert("b::c".into(), "use super::super::a::Thing;".into());
    let imports = module_graph::imports(&files);
    assert_eq!(imports["b::c"], BTreeSet::from(["a".to_string()]), "super::super resolves from b::c to a");
    let circles = module_graph::circles(&imports);
    assert_eq!(circles.len(), 1, "a -> b::c -> a: {}", describe(&circles));
}

/// The modules of the layered crates that may read the machine's clock
/// (`std::time::Instant`), each with why. Everywhere else behind the node's
/// seams a deadline or a patience counts on tokio's clock, simulated time
/// under turmoil (docs/ARCHITECTURE.md): a deadline on the machine's clock
/// runs out while a starved simulation thread is parked, and the seed goes
/// another way (the finding of 2026-12-07, `gavel-raft` `batch.rs`).
const MACHINE_CLOCK_READERS: [(&str, &str, &str); 10] = [
    ("gavel-raft", "", "the `bench` measurement hooks of examples/log_cost"),
    ("gavel-raft", "network", "measures how long a snapshot took to send, for a log line"),
    ("gavel-raft", "storage::durability", "waits on an OS file lock (sled's), which is real time"),
    ("gavel-raft", "storage::state_machine", "measures apply and write times for the metrics"),
    ("gavel-raft", "storage::wal::writer", "measures fsync times for the metrics"),
    ("gavel-store", "app", "measures apply times for the metrics"),
    ("gavel-server", "connections", "the listener's connection limits; the simulation does not serve through it"),
    ("gavel-server", "metrics", "measures call latency for the metrics"),
    ("gavel-server", "routing", "measures call latency for the metrics"),
    ("gavel-server", "server", "measures a leadership handover, for a log line"),
];

/// Whether code (comments and test modules left out) reads the machine's
/// clock: names `std::time::Instant`, or imports `Instant` from `std::time`.
fn reads_machine_clock(code: &str) -> bool {
    let mut rest = code;
    while let Some(at) = rest.find("std::time::") {
        let after = &rest[at + "std::time::".len()..];
        let apart = |c: char| !c.is_alphanumeric() && c != '_';
        let names_it = match after.strip_prefix('{') {
            Some(group) => group[..group.find('}').unwrap_or(group.len())].split(apart).any(|word| word == "Instant"),
            None => after.split(apart).next() == Some("Instant"),
        };
        if names_it {
            return true;
        }
        rest = after;
    }
    false
}

#[test]
fn only_the_listed_modules_read_the_machines_clock() {
    let mut found = BTreeSet::new();
    for name in DAG_CRATES {
        let src = std::path::Path::new(WORKSPACE).join("crates").join(name).join("src");
        for (module, source) in module_graph::read_crate(&src) {
            let is_tests = module == "tests" || module.ends_with("::tests");
            if !is_tests && reads_machine_clock(&module_graph::code_of(&source)) {
                found.insert((name.to_string(), module));
            }
        }
    }
    let listed: BTreeSet<(String, String)> =
        MACHINE_CLOCK_READERS.iter().map(|(name, module, _)| (name.to_string(), module.to_string())).collect();
    let unlisted: Vec<_> = found.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&found).collect();
    assert!(
        unlisted.is_empty() && stale.is_empty(),
        "modules reading std::time::Instant that are not listed (use tokio::time::Instant, or list it with why): \
         {unlisted:?}; listed modules that no longer read it (take them off the list): {stale:?}"
    );
}

#[test]
fn the_clock_reader_check_finds_each_way_of_naming_the_machines_clock() {
    for reads in [
        "use std::time::Instant;",
        "use std::time::{Duration, Instant};",
        "let t = std::time::Instant::now();",
        "use std::time::{\n    Duration,\n    Instant,\n};",
    ] {
        assert!(reads_machine_clock(reads), "{reads}");
    }
    for clean in [
        "use tokio::time::Instant;",
        "use std::time::{Duration, SystemTime};\nuse tokio::time::Instant;",
        "use std::time::InstantLike;",
        "use std::time::Duration; fn f(_: Instant) {}",
    ] {
        assert!(!reads_machine_clock(clean), "{clean}");
    }
    let code = module_graph::code_of("// std::time::Instant\n#[cfg(test)]\nmod tests { use std::time::Instant; }\n");
    assert!(!reads_machine_clock(&code), "comments and test modules are left out: {code}");
}
