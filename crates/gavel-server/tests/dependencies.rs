//! The node library stays a node: `cargo tree -p gavel-server` (normal
//! dependencies) lists none of the crates that belong to the binary, the SDK
//! or the test tools; and the product binary stays the product: `cargo tree
//! -p gavel-cli` lists none of the lab's crates (chaos, sim, bench, testkit,
//! turmoil), which only `gavel-lab` links, and enables none of the lab's
//! features (gavel-raft's `sim`, any crate's `mutants`), which compile the
//! simulator's seams and the planted bugs.

use std::process::Command;

/// Crates the node must never pull in, directly or transitively.
const FORBIDDEN: &[&str] = &["gavel-cli", "gavel-chaos", "gavel-bench", "gavel-client", "gavel-testkit", "nix"];

/// The crate names in `cargo tree -p <package> -e normal`.
fn dependency_tree(package: &str) -> Vec<String> {
    cargo_tree(package, &[])
}

/// The crate names in `cargo tree -p <package> -e normal` with `extra` arguments.
/// The lines `cargo tree` prints for `package`'s normal dependencies, one
/// per package in `format`.
fn cargo_tree_lines(package: &str, format: &str, extra: &[&str]) -> Vec<String> {
    let workspace = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let output = Command::new(env!("CARGO"))
        .args(["tree", "--offline", "--locked", "-p", package, "-e", "normal", "--prefix", "none", "--format", format])
        .args(extra)
        .current_dir(workspace)
        .output()
        .expect("run cargo tree");
    assert!(output.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).lines().map(str::to_string).collect()
}

fn cargo_tree(package: &str, extra: &[&str]) -> Vec<String> {
    cargo_tree_lines(package, "{p}", extra)
        .iter()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_node_library_depends_on_no_cli_sdk_or_test_tool_crate() {
    let tree = dependency_tree("gavel-server");
    for expected in ["gavel-core", "gavel-proto", "gavel-raft", "tonic"] {
        assert!(tree.iter().any(|name| name == expected), "the tree is read, so the check can fail: {tree:?}");
    }
    let found: Vec<&&str> =
        FORBIDDEN.iter().filter(|name| tree.iter().any(|crate_name| crate_name == **name)).collect();
    assert!(found.is_empty(), "gavel-server depends on {found:?}");
}

/// Crates of the test lab: the product binary must link none of them.
const LAB: &[&str] = &["gavel-chaos", "gavel-sim", "gavel-bench", "gavel-testkit", "turmoil"];

#[test]
fn the_product_binary_links_no_lab_crate() {
    // `gavel` (gavel-cli) is what the Dockerfile and scripts/release ship:
    // node, dev, console, notifier and the operator commands. The chaos
    // harness, the simulation and the benchmark are `gavel-lab`'s.
    let product = dependency_tree("gavel-cli");
    for expected in ["gavel-server", "gavel-console", "gavel-notify", "gavel-local", "gavel-client", "nix"] {
        assert!(product.iter().any(|name| name == expected), "the tree is read, so the check can fail: {product:?}");
    }
    let found: Vec<&&str> = LAB.iter().filter(|name| product.iter().any(|crate_name| crate_name == **name)).collect();
    assert!(found.is_empty(), "the product binary gavel-cli links lab crates {found:?}");
    // The same reading of the tree sees the lab crates where they belong.
    let lab = dependency_tree("gavel-lab");
    for expected in LAB {
        assert!(lab.iter().any(|name| name == expected), "gavel-lab should depend on {expected}: {lab:?}");
    }
}

/// Each package of `cargo tree -p <package> -e normal` with the features it
/// is built with, as `cargo build -p <package>` (a release build of it
/// included) resolves them: without dev-dependencies, and without the
/// features other workspace members would unify in.
fn enabled_features(package: &str) -> Vec<(String, Vec<String>)> {
    cargo_tree_lines(package, "{p}\t{f}", &[])
        .iter()
        .filter_map(|line| {
            let (package, features) = line.split_once('\t')?;
            let name = package.split_whitespace().next()?.to_string();
            // A package already printed ends in ` (*)`.
            let features = features.trim_end_matches(" (*)").trim();
            let features = features.split(',').filter(|feature| !feature.is_empty()).map(str::to_string).collect();
            Some((name, features))
        })
        .collect()
}

/// The lab's features on `package`'s build: gavel-raft's `sim` (the
/// simulator's seams) and any crate's `mutants` (the planted bugs), as
/// `crate/feature`.
fn lab_features(package: &str) -> Vec<String> {
    let mut found: Vec<String> = enabled_features(package)
        .into_iter()
        .flat_map(|(name, features)| features.into_iter().map(move |feature| (name.clone(), feature)))
        .filter(|(name, feature)| feature == "mutants" || (name == "gavel-raft" && feature == "sim"))
        .map(|(name, feature)| format!("{name}/{feature}"))
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_product_binary_compiles_no_simulation_seam_or_planted_bug() {
    // STYLE, "Product and lab": test seams and planted bugs compile only
    // under a feature a release build does not enable.
    let product = enabled_features("gavel-cli");
    assert!(
        product.iter().any(|(name, features)| name == "tokio" && features.iter().any(|feature| feature == "rt")),
        "the features are read, so the check can fail: {product:?}"
    );
    let found = lab_features("gavel-cli");
    assert!(found.is_empty(), "the product binary gavel-cli is built with the lab's features {found:?}");
    // The same reading sees them where they belong: the simulation's build.
    let lab = lab_features("gavel-sim");
    for expected in ["gavel-raft/sim", "gavel-raft/mutants", "gavel-core/mutants", "gavel-server/mutants"] {
        assert!(lab.iter().any(|feature| feature == expected), "gavel-sim should enable {expected}: {lab:?}");
    }
}

#[test]
fn the_sdk_depends_on_no_state_machine_consensus_or_storage_crate() {
    // STYLE: a worker written against the SDK is small. It shares the JSON
    // rules (gavel-json) with the cluster, and nothing else of the node.
    let tree = dependency_tree("gavel-client");
    for expected in ["gavel-proto", "gavel-json", "tonic"] {
        assert!(tree.iter().any(|name| name == expected), "the tree is read, so the check can fail: {tree:?}");
    }
    let found: Vec<&str> = ["gavel-core", "gavel-raft", "gavel-server", "openraft", "sled", "redb"]
        .into_iter()
        .filter(|name| tree.iter().any(|crate_name| crate_name == name))
        .collect();
    assert!(found.is_empty(), "gavel-client depends on {found:?}");
}

#[test]
fn library_crates_return_their_own_errors_not_anyhow() {
    // `anyhow` belongs to binaries (`gavel-cli`, the examples); a library
    // returns `thiserror` types its callers can match on. Only direct
    // dependencies count: prost's derive macro uses anyhow internally.
    for library in [
        "gavel-core",
        "gavel-json",
        "gavel-proto",
        "gavel-raft",
        "gavel-store",
        "gavel-server",
        "gavel-client",
        "gavel-testkit",
        "gavel-chaos",
        "gavel-pki",
        "gavel-bench",
        "gavel-console",
        "gavel-notify",
        "gavel-oidc",
    ] {
        let tree = cargo_tree(library, &["--depth", "1"]);
        assert!(tree.iter().any(|name| name == library), "the tree of {library} is read: {tree:?}");
        assert!(!tree.iter().any(|name| name == "anyhow"), "{library} depends on anyhow");
    }
    let cli = cargo_tree("gavel-cli", &["--depth", "1"]);
    assert!(cli.iter().any(|name| name == "anyhow"), "the check sees anyhow where it is: {cli:?}");
}

/// Asserts that `library` reaches the cluster through the SDK only: no
/// node, Raft, state machine or signing-key crate.
fn assert_sdk_only(library: &str) {
    let tree = dependency_tree(library);
    assert!(tree.iter().any(|name| name == "gavel-client"), "the tree is read: {tree:?}");
    for forbidden in ["gavel-server", "gavel-raft", "gavel-core", "gavel-pki", "openraft"] {
        assert!(!tree.iter().any(|name| name == forbidden), "{library} depends on {forbidden}");
    }
}

#[test]
fn the_console_reaches_the_cluster_through_the_sdk_only() {
    // The console holds no power of its own, only the SDK it calls the
    // cluster with as the signed-in person, and the ID-token verification
    // it shares with the nodes.
    assert_sdk_only("gavel-console");
    let tree = dependency_tree("gavel-console");
    assert!(tree.iter().any(|name| name == "gavel-oidc"), "the tree is read: {tree:?}");
}

#[test]
fn the_notifier_reaches_the_cluster_through_the_sdk_only() {
    // The notifier reads as the principal it is given and holds no power
    // of its own.
    assert_sdk_only("gavel-notify");
}

#[test]
fn the_mcp_gateway_reaches_the_cluster_through_the_sdk_only() {
    // `gavel mcp` acts with each agent's own token and its own worker
    // credentials: it keeps no state and decides no rule of Gavel's.
    assert_sdk_only("gavel-mcp");
    let tree = dependency_tree("gavel-mcp");
    assert!(tree.iter().any(|name| name == "rmcp"), "the tree is read: {tree:?}");
}

#[test]
fn the_oidc_verifier_depends_on_none_of_gavel_s_crates() {
    // Shared by the node and the console, it must not bring either's
    // dependencies to the other.
    let tree = dependency_tree("gavel-oidc");
    assert!(tree.iter().any(|name| name == "jsonwebtoken"), "the tree is read: {tree:?}");
    let ours: Vec<&String> = tree.iter().filter(|name| name.starts_with("gavel-") && *name != "gavel-oidc").collect();
    assert!(ours.is_empty(), "gavel-oidc depends on {ours:?}");
}

#[test]
fn the_storage_crate_depends_on_no_edge_or_api_crate() {
    // The state machine's storage sits under the edge: `gavel backup
    // restore` seeds a data directory through it without the gRPC server.
    // (tonic itself comes with gavel-raft, whose Raft transport it is.)
    let tree = dependency_tree("gavel-store");
    for expected in ["gavel-core", "gavel-raft", "redb"] {
        assert!(tree.iter().any(|name| name == expected), "the tree is read, so the check can fail: {tree:?}");
    }
    let found: Vec<&str> =
        ["gavel-server", "gavel-proto", "gavel-client", "gavel-pki", "gavel-oidc", "tonic-health", "prometheus-client"]
            .into_iter()
            .filter(|name| tree.iter().any(|crate_name| crate_name == name))
            .collect();
    assert!(found.is_empty(), "gavel-store depends on {found:?}");
}
