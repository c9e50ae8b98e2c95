//! A rolling restart under load: `gavel-lab bench --rolling-restart` restarts
//! the three nodes of a local secure cluster of the real binary one at a
//! time (SIGTERM, wait for the exit, start again, wait until caught up),
//! followers first and the leader last, while closed-loop SDK clients run
//! approval lifecycles. No client may see a failed lifecycle (the SDK's
//! retries are allowed); each node's downtime is printed.

mod support;

use std::process::Command;
use std::time::Instant;

use serde_json::Value;

#[test]
fn a_rolling_restart_fails_no_lifecycle() {
    let started = Instant::now();
    let output = Command::new(support::lab_binary())
        .args(["bench", "--json", "--rolling-restart", "--clients=8", "--warmup=2s", "--duration=20s"])
        // The stopping leader's "handed leadership to node N" is at info.
        .env("GAVEL_LOG", "warn,gavel_server::server=info")
        .output()
        .expect("run gavel-lab bench --rolling-restart");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let tables = String::from_utf8_lossy(&output.stderr);
    eprintln!("gavel-lab bench --rolling-restart took {:.0?}\n{tables}", started.elapsed());
    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}")))
        .collect();
    assert_eq!(lines.len(), 2, "the rolling-restart report and the summary: {stdout}");
    let (report, summary) = (&lines[0], &lines[1]["summary"]);
    assert_eq!(output.status.code(), Some(0), "exit status; report {report:#}");
    assert_eq!(summary["ok"], true, "{summary:#}");
    assert_eq!(summary["tls"], true, "secure by default");

    let config = &report["config"];
    assert_eq!(config["errors"], 0, "no client saw a failed lifecycle: {:#}", config["error_samples"]);
    assert!(config["lifecycles"].as_u64().unwrap_or(0) > 0, "{config:#}");
    assert!(config["verified"].as_u64().unwrap_or(0) > 0, "sampled lifecycles re-read at the end: {config:#}");

    let nodes = report["nodes"].as_array().expect("one entry per node");
    let mut restarted: Vec<u64> = nodes.iter().filter_map(|node| node["node"].as_u64()).collect();
    restarted.sort_unstable();
    assert_eq!(restarted, vec![1, 2, 3], "every node restarted once: {nodes:#?}");
    assert_eq!(nodes.last().map(|node| &node["was_leader"]), Some(&Value::Bool(true)), "the leader goes last");
    assert!(nodes[..2].iter().all(|node| node["was_leader"] == false), "followers first: {nodes:#?}");
    // The leader hands over as it stops (pre-vote and leader transfer,
    // openraft 0.10): to a voter other than itself, with no election timeout.
    let leader = &nodes[2];
    let handed = leader["handed_over_to"].as_u64().unwrap_or_else(|| panic!("the leader handed over: {leader:#}"));
    assert!([1, 2, 3].contains(&handed) && Some(handed) != leader["node"].as_u64(), "{leader:#}");
    assert!(nodes[..2].iter().all(|node| node["handed_over_to"].is_null()), "followers hand nothing over: {nodes:#?}");
    for node in nodes {
        assert!(node["failure"].is_null(), "{node:#}");
        let downtime = node["downtime_s"].as_f64().expect("downtime");
        let parts = ["stop_s", "down_s", "start_s", "catch_up_s"].map(|part| node[part].as_f64().expect(part));
        assert!(parts[1] >= 1.0, "down for the whole pause: {node:#}");
        assert!((downtime - parts.iter().sum::<f64>()).abs() < 0.05, "the parts add up: {node:#}");
        eprintln!(
            "node {} ({}) downtime {downtime:.2} s",
            node["node"],
            if node["was_leader"] == true { "leader" } else { "follower" }
        );
    }
    assert!(tables.contains("rolling restart summary: 0 failed lifecycles; downtime node"), "{tables}");
}
