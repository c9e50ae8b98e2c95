//! The deployment files in deploy/ are checked, not just shipped.
//!
//! - Every Kubernetes manifest (deploy/k8s/*.yaml) validates strictly (no
//!   unknown fields) against the Kubernetes 1.30 and 1.37 schemas with
//!   `kubernetes-validate`, and deploy/compose.yaml against the compose-spec
//!   schema with `check-jsonschema`'s bundled copy; both validators come
//!   from PyPI and are installed by this test into a venv under
//!   `target/tmp/deploy-venv` (once, then reused). A broken copy of each file
//!   must fail, so a validator that passes everything would be caught.
//! - The StatefulSet, its headless Service and its PodDisruptionBudget agree
//!   with each other (names, selectors, ports, mounts, probes).
//! - A real secure three-node cluster starts on loopback with exactly the
//!   command, arguments and environment the StatefulSet gives each pod, and
//!   another with exactly those the compose file gives each service (after
//!   running the compose file's certificate step, twice: it must keep what
//!   it made). Only what must differ on one machine is substituted: each
//!   node's host name (`gavel-<ordinal>.gavel`, `gavel-<i>`) and port become
//!   127.0.0.1 and a free port, the metrics address `0.0.0.0:7501` becomes
//!   127.0.0.1 and a free port, and container paths become directories of
//!   the test (for compose, the host directory of the volume mounted
//!   there). The nodes must elect a leader, be the node ids the files mean,
//!   answer the readiness probe's health check SERVING (made in-process with
//!   the probe's address, CA and TLS server name: `grpc_health_probe` is not
//!   installable here) and serve metrics.
//! - deploy/gavel.service passes `systemd-analyze verify` and runs three
//!   nodes from deploy/node.env.example; a node stops on the unit's
//!   KillSignal within its TimeoutStopSec.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use gavel_client::ClientTls;
use serde_json::Value;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// The validators, pinned.
const PIP_PACKAGES: [&str; 2] = ["kubernetes-validate==1.37.0", "check-jsonschema==0.39.0"];
/// Kubernetes versions the manifests must validate against.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.30.0", "1.37.0"];
/// Longest wait for a leader, health or an exit.
const WAIT: Duration = Duration::from_secs(60);
/// Deadline of one status or health call.
const CALL: Duration = Duration::from_secs(5);

fn deploy_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Runs `command` to completion: whether it succeeded, and its output.
fn run_capture(command: &mut Command) -> (bool, String) {
    let output = command.output().unwrap_or_else(|error| panic!("running {command:?}: {error}"));
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), text)
}

/// Runs `command` to completion; panics with its output unless it succeeds.
fn run_ok(command: &mut Command) -> String {
    let (succeeded, text) = run_capture(command);
    assert!(succeeded, "{command:?} failed:\n{text}");
    text
}

/// The venv with the validators and PyYAML, installed on first use.
fn venv() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("deploy-venv");
        let marker = dir.join(format!("installed {}", PIP_PACKAGES.join(" ")));
        if !marker.exists() {
            run_ok(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&dir));
            run_ok(
                Command::new(dir.join("bin/pip"))
                    .args(["install", "--quiet", "--disable-pip-version-check", "--timeout", "60"])
                    .args(PIP_PACKAGES),
            );
            std::fs::write(&marker, "").expect("write the venv marker");
        }
        dir
    })
}

/// Every YAML document of `path` as JSON (PyYAML: anchors and merge keys resolved).
fn yaml_documents(path: &Path) -> Vec<Value> {
    let script = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let output = run_ok(Command::new(venv().join("bin/python")).args(["-c", script]).arg(path));
    serde_json::from_str(&output).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn k8s_manifests() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join("k8s"))
        .expect("deploy/k8s")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "yaml"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 3, "the StatefulSet, Service and PodDisruptionBudget: {paths:?}");
    paths
}

/// Runs `kubernetes-validate --strict` on `path` for `version`: (passed, output).
fn kubernetes_validate(path: &Path, version: &str) -> (bool, String) {
    run_capture(Command::new(venv().join("bin/kubernetes-validate")).args(["--strict", "-k", version]).arg(path))
}

#[test]
fn kubernetes_manifests_validate_strictly_against_the_schemas() {
    for path in k8s_manifests() {
        let documents = yaml_documents(&path);
        for version in KUBERNETES_VERSIONS {
            let (passed, output) = kubernetes_validate(&path, version);
            assert!(passed, "{} against {version}:\n{output}", path.display());
            assert_eq!(output.matches(" passed ").count(), documents.len(), "every resource passed: {output}");
        }
    }
    // A field the schema does not have must fail: the validator validates.
    let dir = tempfile::tempdir().expect("temp dir");
    let statefulset = std::fs::read_to_string(deploy_dir().join("k8s/statefulset.yaml")).expect("read");
    let broken = statefulset.replacen(
        "imagePullPolicy: IfNotPresent",
        "imagePullPolicy: IfNotPresent\n          restartAlways: true",
        1,
    );
    assert_ne!(broken, statefulset);
    let path = dir.path().join("broken.yaml");
    std::fs::write(&path, broken).expect("write");
    let (passed, output) = kubernetes_validate(&path, "1.37.0");
    assert!(!passed, "an unknown container field must fail strict validation:\n{output}");
}

fn check_compose(path: &Path) -> (bool, String) {
    run_capture(
        Command::new(venv().join("bin/check-jsonschema")).args(["--builtin-schema", "vendor.compose-spec"]).arg(path),
    )
}

#[test]
fn the_compose_file_validates_against_the_compose_spec() {
    let (passed, output) = check_compose(&deploy_dir().join("compose.yaml"));
    assert!(passed, "{output}");
    let dir = tempfile::tempdir().expect("temp dir");
    let compose = std::fs::read_to_string(deploy_dir().join("compose.yaml")).expect("read");
    let broken = compose.replacen("stop_grace_period: 15s", "stop_grace_period: 15s\n  restart_on_tuesdays: true", 1);
    assert_ne!(broken, compose);
    let path = dir.path().join("compose.yaml");
    std::fs::write(&path, broken).expect("write");
    let (passed, output) = check_compose(&path);
    assert!(!passed, "an unknown service field must fail:\n{output}");
}

/// The k8s documents by kind.
fn k8s_by_kind() -> BTreeMap<String, Value> {
    let mut kinds = BTreeMap::new();
    for path in k8s_manifests() {
        for document in yaml_documents(&path) {
            let kind = document["kind"].as_str().expect("kind").to_string();
            assert!(kinds.insert(kind.clone(), document).is_none(), "one {kind}");
        }
    }
    kinds
}

fn env_of(container: &Value) -> Vec<(String, Option<String>)> {
    container["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|var| (var["name"].as_str().expect("name").to_string(), var["value"].as_str().map(str::to_string)))
        .collect()
}

#[test]
fn the_statefulset_service_and_budget_agree() {
    let kinds = k8s_by_kind();
    let (sts, service, pdb) = (&kinds["StatefulSet"], &kinds["Service"], &kinds["PodDisruptionBudget"]);
    let labels = &sts["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&sts["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(&service["spec"]["selector"], labels, "the Service selects the pods");
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels, "the budget covers the pods");
    assert_eq!(sts["spec"]["serviceName"], service["metadata"]["name"]);
    assert_eq!(service["spec"]["clusterIP"], "None", "headless");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true, "peers resolve before Ready");
    assert_eq!(sts["spec"]["replicas"], 3);
    assert_eq!(sts["spec"]["podManagementPolicy"], "Parallel", "no pod is Ready before a quorum");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1, "two of three stay up: a quorum");

    let pod = &sts["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let env: BTreeMap<String, Option<String>> = env_of(container).into_iter().collect();
    let value = |name: &str| env[name].clone().unwrap_or_else(|| panic!("{name} has a value"));
    let service_name = service["metadata"]["name"].as_str().expect("name");
    let sts_name = sts["metadata"]["name"].as_str().expect("name");
    let peers = value("GAVEL_PEERS");
    for ordinal in 0..3 {
        assert!(peers.contains(&format!("{}={sts_name}-{ordinal}.{service_name}:7401", ordinal + 1)), "{peers}");
    }
    assert_eq!(value("GAVEL_LISTEN"), format!("$(POD_NAME).{service_name}:7401"));
    let mounts: BTreeMap<&str, &str> = container["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .map(|mount| (mount["mountPath"].as_str().expect("path"), mount["name"].as_str().expect("name")))
        .collect();
    let claim = sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"].as_str().expect("claim");
    assert_eq!(mounts[value("GAVEL_DATA_DIR").as_str()], claim, "the data directory is the persistent volume");
    let certs_volume = mounts[value("GAVEL_CERTS_DIR").as_str()];
    let volume = pod["volumes"].as_array().expect("volumes").iter().find(|volume| volume["name"] == certs_volume);
    assert!(volume.is_some_and(|volume| volume["secret"]["secretName"].is_string()), "certificates from a Secret");
    let grpc_port = container["ports"].as_array().expect("ports").iter().find(|port| port["name"] == "grpc");
    assert_eq!(grpc_port.map(|port| &port["containerPort"]), Some(&Value::from(7401)));
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "grpc");
    for probe in ["readinessProbe", "livenessProbe"] {
        let command = container[probe]["exec"]["command"].to_string();
        assert!(
            command.contains("grpc_health_probe") && command.contains("-addr=127.0.0.1:7401"),
            "{probe}: {command}"
        );
        assert!(command.contains(&format!("-tls-ca-cert={}/ca.pem", value("GAVEL_CERTS_DIR"))), "{probe}: {command}");
    }
}

/// A node process the test started; SIGKILLed and reaped on drop.
struct Process {
    child: Child,
    log: PathBuf,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `argv` with exactly `env` added (and the directory of the gavel
/// binary first on PATH, where the image has it), logging to `log`.
fn spawn(argv: &[String], env: &[(String, String)], log: PathBuf) -> Process {
    let binary = support::gavel_binary();
    let path = format!("{}:{}", binary.parent().expect("bin dir").display(), std::env::var("PATH").unwrap_or_default());
    let file = std::fs::File::create(&log).expect("log file");
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .env("PATH", path)
        .env("GAVEL_LOG", "info")
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("dup"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|error| panic!("spawning {argv:?}: {error}"));
    Process { child, log }
}

/// Replaces every `from` with its `to`, longest first.
fn substitute(text: &str, substitutions: &[(String, String)]) -> String {
    let mut ordered: Vec<&(String, String)> = substitutions.iter().collect();
    ordered.sort_by_key(|(from, _)| std::cmp::Reverse(from.len()));
    let mut out = text.to_string();
    for (from, to) in ordered {
        out = out.replace(from.as_str(), to);
    }
    out
}

/// Expands `$(NAME)` references to earlier variables, as the kubelet does.
fn expand_kubelet(value: &str, defined: &[(String, String)]) -> String {
    let mut out = value.to_string();
    for (name, defined_value) in defined {
        out = out.replace(&format!("$({name})"), defined_value);
    }
    out
}

fn tls_of(certs: &Path, identity: Option<&str>) -> ClientTls {
    let read = |name: &str| std::fs::read_to_string(certs.join(name)).unwrap_or_else(|error| panic!("{name}: {error}"));
    ClientTls {
        ca_pem: read("ca.pem"),
        identity: identity.map(|name| (read(&format!("{name}.pem")), read(&format!("{name}.key")))),
    }
}

/// The probe's check: grpc.health.v1 Check of `""` over TLS trusting `ca`,
/// verifying the node's certificate for `server_name`, no client certificate.
async fn probe_health(addr: &str, ca_pem: &str, server_name: &str) -> Option<ServingStatus> {
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca_pem))
        .domain_name(server_name);
    let endpoint = tonic::transport::Endpoint::from_shared(format!("https://{addr}")).ok()?.tls_config(tls).ok()?;
    let channel = endpoint.connect_timeout(CALL).timeout(CALL).connect().await.ok()?;
    let response = HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await.ok()?;
    ServingStatus::try_from(response.into_inner().status).ok()
}

/// The value of `-name=` in a probe's arguments.
fn probe_flag(args: &[String], name: &str) -> String {
    args.iter()
        .find_map(|arg| arg.strip_prefix(&format!("-{name}=")))
        .unwrap_or_else(|| panic!("the probe has -{name}: {args:?}"))
        .to_string()
}

/// `GET /metrics` on `addr`: the status line.
fn get_metrics(addr: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics listener");
    stream.set_read_timeout(Some(CALL)).expect("timeout");
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("request");
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response.lines().next().unwrap_or_default().to_string()
}

/// Waits for a leader among `addrs` (as user:ops), then checks each node's
/// id, its readiness probe's health check and its metrics listener.
async fn check_cluster(
    nodes: &[Process],
    addrs: &[String],
    ids: &[u64],
    metrics: &[String],
    certs: &Path,
    probe_args: &[String],
) {
    let ops = tls_of(certs, Some("client-user-ops"));
    let leader = gavel_testkit::find_leader_with(addrs, CALL, WAIT, Some(&ops)).await;
    let logs = || {
        nodes
            .iter()
            .map(|node| format!("{}:\n{}", node.log.display(), std::fs::read_to_string(&node.log).unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(leader.is_ok(), "no leader: {leader:?}\n{}", logs());
    for (addr, id) in addrs.iter().zip(ids) {
        // A follower learns the membership from the leader's first entries.
        let started = Instant::now();
        let status = loop {
            let status = gavel_testkit::status_with(addr, CALL, Some(&ops)).await.expect("status as user:ops");
            if (status.leader_id.is_some() && status.members.len() == 3) || started.elapsed() > WAIT {
                break status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(status.node_id, *id, "{addr} is node {id}");
        assert_eq!(status.members.len(), 3, "three voters: {status:?}");
        let members: Vec<(u64, &str)> = status.members.iter().map(|m| (m.node_id, m.addr.as_str())).collect();
        for (other_addr, other_id) in addrs.iter().zip(ids) {
            assert!(members.contains(&(*other_id, other_addr.as_str())), "{other_id}={other_addr} in {members:?}");
        }
    }
    let ca = std::fs::read_to_string(certs.join("ca.pem")).expect("ca");
    let server_name = probe_flag(probe_args, "tls-server-name");
    assert!(probe_args.iter().any(|arg| arg == "-tls"), "the probe dials TLS: {probe_args:?}");
    for addr in addrs {
        let started = Instant::now();
        loop {
            match probe_health(addr, &ca, &server_name).await {
                Some(ServingStatus::Serving) => break,
                other if started.elapsed() > WAIT => panic!("{addr} health {other:?} after {WAIT:?}\n{}", logs()),
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    for addr in metrics {
        assert!(get_metrics(addr).contains("200"), "metrics at {addr}");
    }
}

/// What deploy/README.md makes with `gavel cert`: the CA, node `i + 1`'s
/// certificate naming `hosts[i]`, and the operator's (`user:ops`).
fn make_certs(certs: &Path, hosts: &[String]) {
    let gavel = support::gavel_binary();
    let cert = |args: &[&str]| run_ok(Command::new(&gavel).arg("cert").args(args).arg("--certs-dir").arg(certs));
    cert(&["create-ca"]);
    for (index, host) in hosts.iter().enumerate() {
        cert(&["create-node", "--id", &(index + 1).to_string(), "--host", host]);
    }
    cert(&["create-client", "--principal", "user:ops"]);
}

fn free_addr() -> String {
    format!("127.0.0.1:{}", support::free_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_statefulset_runs_a_secure_three_node_cluster() {
    let kinds = k8s_by_kind();
    let sts = &kinds["StatefulSet"];
    let service = kinds["Service"]["metadata"]["name"].as_str().expect("service name").to_string();
    let name = sts["metadata"]["name"].as_str().expect("name").to_string();
    let container = &sts["spec"]["template"]["spec"]["containers"][0];
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().expect("a list").iter().map(|item| item.as_str().expect("a string").to_string()).collect()
    };
    let argv: Vec<String> = strings(&container["command"]).into_iter().chain(strings(&container["args"])).collect();
    let env = env_of(container);

    let dir = tempfile::tempdir().expect("temp dir");
    let certs = dir.path().join("certs");
    // The certificates deploy/README.md makes for Kubernetes (then stored in the Secret).
    let hosts: Vec<String> = (0..3).map(|ordinal| format!("{name}-{ordinal}.{service}")).collect();
    make_certs(&certs, &hosts);

    let addrs: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let metrics: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let mut nodes = Vec::new();
    for (ordinal, metrics_addr) in metrics.iter().enumerate() {
        let mut substitutions: Vec<(String, String)> = addrs
            .iter()
            .enumerate()
            .map(|(other, addr)| (format!("{name}-{other}.{service}:7401"), addr.clone()))
            .collect();
        substitutions.push(("0.0.0.0:7501".to_string(), metrics_addr.clone()));
        substitutions
            .push(("/var/lib/gavel".to_string(), dir.path().join(format!("n{ordinal}")).display().to_string()));
        substitutions.push(("/etc/gavel/certs".to_string(), certs.display().to_string()));
        let mut defined: Vec<(String, String)> = Vec::new();
        for (variable, value) in &env {
            let value = match (variable.as_str(), value) {
                ("POD_NAME", None) => format!("{name}-{ordinal}"),
                (_, Some(value)) => expand_kubelet(value, &defined),
                (other, None) => panic!("{other} has no value and is not the pod name"),
            };
            defined.push((variable.clone(), value));
        }
        let env: Vec<(String, String)> =
            defined.iter().map(|(variable, value)| (variable.clone(), substitute(value, &substitutions))).collect();
        let argv: Vec<String> = argv.iter().map(|arg| substitute(arg, &substitutions)).collect();
        nodes.push(spawn(&argv, &env, dir.path().join(format!("n{ordinal}.log"))));
    }
    let probe = strings(&container["readinessProbe"]["exec"]["command"]);
    check_cluster(&nodes, &addrs, &[1, 2, 3], &metrics, &certs, &probe).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compose_file_runs_a_secure_three_node_cluster() {
    let compose = yaml_documents(&deploy_dir().join("compose.yaml")).remove(0);
    let services = compose["services"].as_object().expect("services");
    let dir = tempfile::tempdir().expect("temp dir");
    let strings = |value: &Value| -> Vec<String> {
        value.as_array().map_or_else(Vec::new, |items| {
            items.iter().map(|item| item.as_str().expect("a string").to_string()).collect()
        })
    };
    // A named volume is a directory of the test; a service's paths are the
    // volumes mounted there.
    let mounts = |service: &Value| -> Vec<(String, String)> {
        strings(&service["volumes"])
            .iter()
            .map(|volume| {
                let mut parts = volume.split(':');
                let (name, path) = (parts.next().expect("volume"), parts.next().expect("path"));
                assert!(compose["volumes"].get(name).is_some(), "{name} is a named volume");
                (path.to_string(), dir.path().join(name).display().to_string())
            })
            .collect()
    };

    // The certificate step, twice: the second run keeps what the first made.
    let certs_service = &services["certs"];
    let argv: Vec<String> =
        strings(&certs_service["entrypoint"]).into_iter().chain(strings(&certs_service["command"])).collect();
    let substitutions = mounts(certs_service);
    let argv: Vec<String> = argv.iter().map(|arg| substitute(arg, &substitutions)).collect();
    std::fs::create_dir_all(dir.path().join("certs")).expect("certs volume");
    let mut made = Vec::new();
    for run in 0..2 {
        let mut certs = spawn(&argv, &[], dir.path().join(format!("certs-{run}.log")));
        let status = certs.child.wait().expect("the certificate step");
        assert!(status.success(), "{}", std::fs::read_to_string(&certs.log).unwrap_or_default());
        made.push(std::fs::read(dir.path().join("certs/node-1.pem")).expect("node-1.pem"));
    }
    assert_eq!(made[0], made[1], "the certificate step keeps existing material");

    let node_names: Vec<&String> = services.keys().filter(|name| name.as_str() != "certs").collect();
    assert_eq!(node_names.len(), 3, "three nodes: {node_names:?}");
    let addrs: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let metrics: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let mut nodes = Vec::new();
    let mut ids = Vec::new();
    for (index, service_name) in node_names.iter().enumerate() {
        let service = &services[service_name.as_str()];
        assert_eq!(service["depends_on"]["certs"]["condition"], "service_completed_successfully");
        let mut substitutions: Vec<(String, String)> =
            node_names.iter().zip(&addrs).map(|(other, addr)| (format!("{other}:7401"), addr.clone())).collect();
        substitutions.push(("0.0.0.0:7501".to_string(), metrics[index].clone()));
        let data = format!("data-{}", index + 1);
        std::fs::create_dir_all(dir.path().join(&data)).expect("data volume");
        substitutions.extend(mounts(service));
        let env: Vec<(String, String)> = service["environment"]
            .as_object()
            .expect("environment")
            .iter()
            .map(|(name, value)| (name.clone(), substitute(value.as_str().expect("a string"), &substitutions)))
            .collect();
        ids.push(env.iter().find(|(name, _)| name == "GAVEL_ID").expect("GAVEL_ID").1.parse::<u64>().expect("an id"));
        let argv: Vec<String> =
            strings(&service["entrypoint"]).into_iter().chain(strings(&service["command"])).collect();
        nodes.push(spawn(&argv, &env, dir.path().join(format!("{service_name}.log"))));
    }
    let certs_dir = dir.path().join("certs");
    let probe = strings(&services[node_names[0].as_str()]["healthcheck"]["test"]);
    assert_eq!(probe.first().map(String::as_str), Some("CMD"));
    check_cluster(&nodes, &addrs, &ids, &metrics, &certs_dir, &probe[1..]).await;
}

/// `KEY=VALUE` lines of an environment file (comments and blanks skipped).
fn env_file(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (name, value) = line.split_once('=').expect("KEY=VALUE");
            (name.to_string(), value.to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_systemd_unit_runs_nodes_from_its_environment_file() {
    let unit = std::fs::read_to_string(deploy_dir().join("gavel.service")).expect("gavel.service");
    let setting = |key: &str| {
        unit.lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("the unit sets {key}"))
            .to_string()
    };
    let exec_start = setting("ExecStart");
    assert_eq!(setting("EnvironmentFile"), "/etc/gavel/node.env");
    assert_eq!(setting("KillSignal"), "SIGTERM");
    let stop_timeout = Duration::from_secs(setting("TimeoutStopSec").parse().expect("seconds"));
    let mut argv: Vec<String> = exec_start.split_whitespace().map(str::to_string).collect();
    assert_eq!(argv[0], "/usr/local/bin/gavel");
    argv[0] = support::gavel_binary().display().to_string();

    // systemd accepts the unit (with ExecStart pointing at the built binary).
    let dir = tempfile::tempdir().expect("temp dir");
    let verify_dir = dir.path().join("unit");
    std::fs::create_dir_all(&verify_dir).expect("mkdir");
    std::fs::write(verify_dir.join("gavel.service"), unit.replace("/usr/local/bin/gavel", &argv[0])).expect("write");
    run_ok(Command::new("systemd-analyze").arg("verify").arg(verify_dir.join("gavel.service")));

    // Node 1's environment file; nodes 2 and 3 differ in GAVEL_ID and GAVEL_LISTEN, as the file says.
    let example = env_file(&std::fs::read_to_string(deploy_dir().join("node.env.example")).expect("node.env.example"));
    let certs = dir.path().join("certs");
    make_certs(&certs, &["10.0.0.1", "10.0.0.2", "10.0.0.3"].map(str::to_string));
    let addrs: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let metrics: Vec<String> = (0..3).map(|_| free_addr()).collect();
    let mut nodes = Vec::new();
    for (index, metrics_addr) in metrics.iter().enumerate() {
        let id = index + 1;
        let mut substitutions: Vec<(String, String)> = addrs
            .iter()
            .enumerate()
            .map(|(other, addr)| (format!("10.0.0.{}:7401", other + 1), addr.clone()))
            .collect();
        substitutions.push(("10.0.0.1:7501".to_string(), metrics_addr.clone()));
        substitutions.push(("/var/lib/gavel".to_string(), dir.path().join(format!("n{id}")).display().to_string()));
        substitutions.push(("/etc/gavel/certs".to_string(), certs.display().to_string()));
        let env: Vec<(String, String)> = example
            .iter()
            .map(|(name, value)| {
                let value = match name.as_str() {
                    "GAVEL_ID" => id.to_string(),
                    "GAVEL_LISTEN" => format!("10.0.0.{id}:7401"),
                    _ => value.clone(),
                };
                (name.clone(), substitute(&value, &substitutions))
            })
            .collect();
        nodes.push(spawn(&argv, &env, dir.path().join(format!("n{id}.log"))));
    }
    let probe: Vec<String> = ["-tls", "-tls-server-name=localhost"].map(str::to_string).to_vec();
    check_cluster(&nodes, &addrs, &[1, 2, 3], &metrics, &certs, &probe).await;

    // systemctl stop: the unit's KillSignal, then up to TimeoutStopSec for a clean exit.
    let node = &mut nodes[2];
    let pid = nix::unistd::Pid::from_raw(node.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = node.child.try_wait().expect("wait") {
            break status;
        }
        assert!(started.elapsed() < stop_timeout, "node 3 still runs {stop_timeout:?} after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "a clean exit on SIGTERM: {status}");
}
