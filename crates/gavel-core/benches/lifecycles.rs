//! Lifecycle throughput and state size of the pure state machine (not a test:
//! STYLE keeps timing claims in benchmarks).
//!
//! Drives `State::apply` on one thread with full lifecycles, every command
//! carrying a request id as the server's commands do (so deduplication is
//! part of the cost):
//!
//! - execution: submit → poll (one lease) → report ok;
//! - approval: create → decide (approved by another actor) → consume.
//!
//! Inputs and outputs are under 100 bytes. Each kind runs a fixed count per
//! repetition on a fresh state, five repetitions, and the program prints the
//! median and the spread (min/max) in lifecycles per second, over wall-clock
//! time and over the thread's on-CPU time (Linux; on a shared machine the
//! wall-clock figure includes time other processes ran). Envelopes are built
//! inside the timed loop, as a server builds them, so the figures slightly
//! underestimate `apply` alone.
//!
//! It then prints the bytes of state held per finalized execution: snapshot
//! size with N finalized executions minus the size without any, divided by N,
//! with their audit events and again after a tick that compacts events only.
//!
//! Run with `cargo bench -p gavel-core --bench lifecycles`. The environment
//! variable `GAVEL_BENCH_LIFECYCLES` overrides the count per repetition, and
//! `GAVEL_BENCH_ONLY=executions` (or `approvals`) runs one kind alone, for profiling.
//! `GAVEL_BENCH_SECURED=1` runs every command as an authenticated caller
//! holding the grant it needs (as a node started with TLS stamps them), so
//! the figures include authorization and the principal on every event.

use std::time::{Duration, Instant};

use gavel_core::limits::DEDUP_ENTRIES_MAX;
use gavel_core::{
    Actor, ActorKind, ApprovalStatus, Caller, CapabilitySpec, Command, CreateApproval, Envelope, Grant, GrantName,
    Principal, PrincipalKind, Reply, ReportOutcome, Retention, Risk, SideEffect, State, Submit,
};

/// Lifecycles of each kind per repetition.
const LIFECYCLES: usize = 200_000;
/// Repetitions per kind.
const REPETITIONS: usize = 5;
/// Finalized executions in the state-size measurement.
const SIZE_EXECUTIONS: usize = 20_000;
/// Target throughput per kind.
const TARGET_LIFECYCLES_PER_S: f64 = 200_000.0;
/// Target state per finalized execution, with its audit events.
const TARGET_BYTES_PER_EXECUTION: f64 = 2_048.0;

/// A 57-byte JSON input and a 44-byte output.
const INPUT: &str = r#"{"orderId":"ord_8f14e45f","amount":1250,"currency":"EUR"}"#;
const OUTPUT: &str = r#"{"status":"ok","refundId":"re_3c59dc048e88"}"#;

const QUEUE_CAPABILITY: &str = "orders.lookup";
const APPROVAL_CAPABILITY: &str = "orders.refund";
const WORKER: &str = "worker-7f3a";
/// A realistic leader clock (Unix milliseconds).
const START_MS: u64 = 1_760_000_000_000;

fn requester() -> Actor {
    Actor::new("user-4821", ActorKind::User)
}

fn approver() -> Actor {
    Actor::new("user-1093", ActorKind::User)
}

/// Who sends each command: nobody (`--insecure`), or in a secured run the
/// requester, the approver and the worker as principals, each holding the
/// one grant it needs, bound by an admin.
#[derive(Clone, Default)]
struct Callers {
    requester: Option<Caller>,
    approver: Option<Caller>,
    worker: Option<Caller>,
    admin: Option<Caller>,
}

impl Callers {
    fn secured() -> Callers {
        let principal = |kind, id: &str| Some(Caller::of(Principal::new(kind, id).expect("a well-formed id")));
        Callers {
            requester: principal(PrincipalKind::User, &requester().id),
            approver: principal(PrincipalKind::User, &approver().id),
            worker: principal(PrincipalKind::Worker, WORKER),
            admin: principal(PrincipalKind::User, "admin"),
        }
    }

    /// A state with the callers' grants bound (nothing without callers).
    fn state(&self) -> State {
        let mut state = State::new();
        let Some(admin) = &self.admin else { return state };
        let mut apply = |caller: &Caller, command: Command| {
            let envelope = Envelope { request_id: None, now_ms: START_MS, caller: Some(caller.clone()), command };
            let reply = state.apply(&envelope);
            assert!(matches!(reply, Reply::Grants { .. }), "binding failed: {reply:?}");
        };
        apply(&Caller::of(Principal::node(1)), Command::BootstrapAdmin { admin: admin.principal.clone() });
        let bindings = [
            (&self.requester, GrantName::Submitter),
            (&self.approver, GrantName::Approver),
            (&self.worker, GrantName::Worker),
        ];
        for (caller, name) in bindings {
            let principal = caller.as_ref().expect("a secured run has every caller").principal.clone();
            apply(admin, Command::Grant { principal, grant: Grant::of(name) });
        }
        state
    }
}

/// SplitMix64: a fixed, well-mixed sequence, so ids look random (as UUIDs and
/// hashes do) and ordered maps compare them the way they compare real ids.
fn mix(sequence: u64) -> u64 {
    let mut z = sequence.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A request id shaped like the server's (`srv-` and a UUID v4: 40 bytes).
fn request_id(sequence: usize) -> String {
    let (high, low) = (mix(2 * sequence as u64), mix(2 * sequence as u64 + 1));
    format!(
        "srv-{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xfff,
        low >> 52,
        low & 0xffff_ffff_ffff
    )
}

/// An id shaped like the server's generated execution ids (`ex-` and 32 hex digits).
fn unique_id(prefix: &str, sequence: usize) -> String {
    format!("{prefix}-{:016x}{:016x}", mix(!(sequence as u64)), mix(sequence as u64 ^ 0x5555))
}

/// A state with the callers' grants and the benchmark's capability registered.
fn prepared_state(callers: &Callers) -> State {
    let mut state = callers.state();
    let spec = CapabilitySpec {
        id: QUEUE_CAPABILITY.to_string(),
        side_effect: Some(SideEffect::Read),
        risk: Some(Risk::Low),
        ..CapabilitySpec::default()
    };
    let reply = state.apply(&Envelope {
        request_id: None,
        now_ms: START_MS,
        caller: callers.admin.clone(),
        command: Command::RegisterCapability(spec),
    });
    assert!(matches!(reply, Reply::Capability(_)), "registration failed: {reply:?}");
    state
}

/// Runs `count` execution lifecycles on `state`, from `first` on.
fn run_execution_lifecycles(state: &mut State, callers: &Callers, first: usize, count: usize, with_request_ids: bool) {
    let actor = requester();
    let request = |sequence: usize| with_request_ids.then(|| request_id(sequence));
    for index in first..first + count {
        let now_ms = START_MS + index as u64;
        let submit = Envelope {
            request_id: request(3 * index),
            now_ms,
            caller: callers.requester.clone(),
            command: Command::Submit(Submit {
                execution_id: unique_id("ex", index),
                capability_id: QUEUE_CAPABILITY.to_string(),
                input_json: INPUT.to_string(),
                actor: actor.clone(),
                surface: "http".to_string(),
                correlation_id: None,
            }),
        };
        match state.apply(&submit) {
            Reply::Execution { created: true, .. } => {}
            other => panic!("submit failed: {other:?}"),
        }
        let poll = Envelope {
            request_id: request(3 * index + 1),
            now_ms,
            caller: callers.worker.clone(),
            command: Command::Poll {
                worker_id: WORKER.to_string(),
                queues: vec![QUEUE_CAPABILITY.to_string()],
                tasks_max: 1,
            },
        };
        let lease_id = match state.apply(&poll) {
            Reply::Tasks(tasks) if tasks.len() == 1 => tasks[0].lease.lease_id,
            other => panic!("poll failed: {other:?}"),
        };
        let report = Envelope {
            request_id: request(3 * index + 2),
            now_ms: now_ms + 1,
            caller: callers.worker.clone(),
            command: Command::Report {
                lease_id,
                worker_id: WORKER.to_string(),
                outcome: ReportOutcome::Completed { output_json: OUTPUT.to_string() },
            },
        };
        match state.apply(&report) {
            Reply::Reported { retry_scheduled: false, .. } => {}
            other => panic!("report failed: {other:?}"),
        }
    }
}

/// Runs `count` approval lifecycles on `state`.
fn run_approval_lifecycles(state: &mut State, callers: &Callers, count: usize) {
    let (requester, approver) = (requester(), approver());
    for index in 0..count {
        let now_ms = START_MS + index as u64;
        let approval_id = unique_id("apr", index);
        let create = Envelope {
            request_id: Some(request_id(3 * index)),
            now_ms,
            caller: callers.requester.clone(),
            command: Command::CreateApproval(CreateApproval {
                id: approval_id.clone(),
                capability_id: APPROVAL_CAPABILITY.to_string(),
                surface: "mcp".to_string(),
                actor: requester.clone(),
                input_json: INPUT.to_string(),
                input_hash: None,
                reasons: vec!["refund over 1000".to_string()],
                types: vec!["human".to_string()],
                risk: Risk::High,
                side_effect: SideEffect::Write,
                requested_at_ms: None,
                expires_at_ms: None,
                expires_in_ms: None,
                allow_self_approval: false,
                caller_now_ms: None,
            }),
        };
        match state.apply(&create) {
            Reply::Approval { status: ApprovalStatus::Pending, .. } => {}
            other => panic!("create failed: {other:?}"),
        }
        let decide = Envelope {
            request_id: Some(request_id(3 * index + 1)),
            now_ms,
            caller: callers.approver.clone(),
            command: Command::DecideApproval {
                terms_hash: None,
                approval_id: approval_id.clone(),
                status: ApprovalStatus::Approved,
                approver: approver.clone(),
                comment: None,
                caller_now_ms: None,
            },
        };
        match state.apply(&decide) {
            Reply::Approval { status: ApprovalStatus::Approved, .. } => {}
            other => panic!("decide failed: {other:?}"),
        }
        let consume = Envelope {
            request_id: Some(request_id(3 * index + 2)),
            now_ms: now_ms + 1,
            caller: callers.requester.clone(),
            command: Command::ConsumeApproval {
                approval_id,
                execution_id: unique_id("ex", index),
                caller_now_ms: None,
            },
        };
        match state.apply(&consume) {
            Reply::Approval { status: ApprovalStatus::Consumed, .. } => {}
            other => panic!("consume failed: {other:?}"),
        }
    }
}

/// Median, min and max lifecycles per second over the repetitions.
#[derive(Clone, Copy)]
struct Rates {
    median: f64,
    min: f64,
    max: f64,
}

impl Rates {
    fn of(mut rates: Vec<f64>) -> Rates {
        rates.sort_by(f64::total_cmp);
        Rates { median: rates[rates.len() / 2], min: rates[0], max: rates[rates.len() - 1] }
    }
}

/// Time this thread has spent on a CPU, from `/proc/thread-self/schedstat`
/// (Linux): unlike wall-clock time it excludes the time other processes ran.
fn thread_cpu_time() -> Option<Duration> {
    let schedstat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let on_cpu_ns = schedstat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(on_cpu_ns))
}

/// A timed span: wall-clock time and, where the OS reports it, on-CPU time.
struct Span {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Span {
    fn start() -> Span {
        Span { wall: Instant::now(), cpu: thread_cpu_time() }
    }

    fn stop(&self) -> (Duration, Option<Duration>) {
        let cpu = thread_cpu_time().zip(self.cpu).map(|(end, start)| end.saturating_sub(start));
        (self.wall.elapsed(), cpu)
    }
}

/// Lifecycles per second over wall-clock time and over on-CPU time.
struct Measured {
    wall: Rates,
    cpu: Option<Rates>,
}

fn measure(count: usize, mut run: impl FnMut(usize) -> (Duration, Option<Duration>)) -> Measured {
    let spans: Vec<(Duration, Option<Duration>)> = (0..REPETITIONS).map(|_| run(count)).collect();
    let per_second = |elapsed: Duration| count as f64 / elapsed.as_secs_f64();
    let wall = Rates::of(spans.iter().map(|(wall, _)| per_second(*wall)).collect());
    let cpu: Option<Vec<f64>> = spans.iter().map(|(_, cpu)| cpu.map(per_second)).collect();
    Measured { wall, cpu: cpu.map(Rates::of) }
}

fn print_rates(label: &str, measured: &Measured) {
    let Rates { median, min, max } = measured.wall;
    println!("  {label}");
    println!("      wall clock: median {median:>9.0}/s  min {min:>9.0}/s  max {max:>9.0}/s");
    if let Some(Rates { median, min, max }) = measured.cpu {
        println!("      on-CPU:     median {median:>9.0}/s  min {min:>9.0}/s  max {max:>9.0}/s");
    }
}

/// Compacts every audit event but no record.
fn drop_events(state: &mut State) {
    let retention = Retention { records_ms: 10 * 365 * 24 * 60 * 60 * 1000, events_ms: 0 };
    let now_ms = state.clock_ms() + 1;
    let reply = state.apply(&Envelope { request_id: None, now_ms, caller: None, command: Command::Tick { retention } });
    assert!(matches!(reply, Reply::Ticked { .. }), "tick failed: {reply:?}");
}

/// Bytes of snapshot per finalized execution: (with events, without events).
fn bytes_per_execution(callers: &Callers, count: usize) -> (f64, f64) {
    let empty = prepared_state(callers);
    let mut full = prepared_state(callers);
    run_execution_lifecycles(&mut full, callers, 0, count, false);
    assert_eq!(full.execution_count(), count);
    let with_events = (full.snapshot().len() - empty.snapshot().len()) as f64 / count as f64;
    let (mut empty, mut full) = (empty, full);
    drop_events(&mut empty);
    drop_events(&mut full);
    assert_eq!(full.execution_count(), count, "compacting events keeps every execution");
    let without_events = (full.snapshot().len() - empty.snapshot().len()) as f64 / count as f64;
    (with_events, without_events)
}

/// Bytes of snapshot per remembered request id (the dedup table is bounded).
fn bytes_per_dedup_entry(callers: &Callers, count: usize) -> f64 {
    let mut plain = prepared_state(callers);
    run_execution_lifecycles(&mut plain, callers, 0, count, false);
    let mut deduplicated = prepared_state(callers);
    run_execution_lifecycles(&mut deduplicated, callers, 0, count, true);
    (deduplicated.snapshot().len() - plain.snapshot().len()) as f64 / (3 * count) as f64
}

fn verdict(pass: bool) -> &'static str {
    if pass {
        "met"
    } else {
        "MISSED"
    }
}

fn main() {
    let count = std::env::var("GAVEL_BENCH_LIFECYCLES").ok().and_then(|value| value.parse().ok()).unwrap_or(LIFECYCLES);
    let secured = std::env::var("GAVEL_BENCH_SECURED").is_ok_and(|value| value == "1");
    let callers = if secured { Callers::secured() } else { Callers::default() };
    let mode = if secured { "authenticated callers" } else { "no callers (--insecure)" };
    println!("gavel-core lifecycles: {count} lifecycles per repetition, {REPETITIONS} repetitions, one thread, {mode}");
    match std::env::var("GAVEL_BENCH_ONLY").as_deref() {
        Ok("executions") => {
            let mut state = prepared_state(&callers);
            run_execution_lifecycles(&mut state, &callers, 0, count, true);
            return;
        }
        Ok("approvals") => {
            run_approval_lifecycles(&mut callers.state(), &callers, count);
            return;
        }
        _ => {}
    }

    let executions = measure(count, |count| {
        let mut state = prepared_state(&callers);
        let span = Span::start();
        run_execution_lifecycles(&mut state, &callers, 0, count, true);
        let elapsed = span.stop();
        assert_eq!(state.execution_count(), count);
        elapsed
    });
    print_rates("execution lifecycles (submit -> poll -> report ok), lifecycles per second:", &executions);

    let approvals = measure(count, |count| {
        let mut state = callers.state();
        let span = Span::start();
        run_approval_lifecycles(&mut state, &callers, count);
        span.stop()
    });
    print_rates("approval lifecycles (create -> decide -> consume), lifecycles per second:", &approvals);

    let (with_events, without_events) = bytes_per_execution(&callers, SIZE_EXECUTIONS);
    println!(
        "  state per finalized execution ({SIZE_EXECUTIONS} executions):    {with_events:.0} bytes with its audit events, \
         {without_events:.0} bytes without"
    );
    let dedup_entry = bytes_per_dedup_entry(&callers, SIZE_EXECUTIONS / 10);
    println!(
        "  dedup table: {dedup_entry:.0} bytes per remembered request, bounded at {DEDUP_ENTRIES_MAX} entries \
         ({:.1} MB at most)",
        dedup_entry * DEDUP_ENTRIES_MAX as f64 / 1e6
    );

    let throughput_met =
        executions.wall.median >= TARGET_LIFECYCLES_PER_S && approvals.wall.median >= TARGET_LIFECYCLES_PER_S;
    let size_met = with_events <= TARGET_BYTES_PER_EXECUTION;
    println!(
        "  targets: >= {TARGET_LIFECYCLES_PER_S:.0} lifecycles/s (wall-clock median) {}; \
         <= {TARGET_BYTES_PER_EXECUTION:.0} bytes per finalized execution {}",
        verdict(throughput_met),
        verdict(size_met)
    );
    let cpu_median = |measured: &Measured| measured.cpu.map_or(-1.0, |rates| rates.median);
    println!(
        "BENCH lifecycles=gavel-core lifecycles_per_run={count} repetitions={REPETITIONS} \
         execution_per_s={:.0} execution_min_per_s={:.0} execution_max_per_s={:.0} execution_cpu_per_s={:.0} \
         approval_per_s={:.0} approval_min_per_s={:.0} approval_max_per_s={:.0} approval_cpu_per_s={:.0} \
         bytes_per_execution={with_events:.0} bytes_per_execution_without_events={without_events:.0} \
         bytes_per_dedup_entry={dedup_entry:.0} secured={secured} targets_met={}",
        executions.wall.median,
        executions.wall.min,
        executions.wall.max,
        cpu_median(&executions),
        approvals.wall.median,
        approvals.wall.min,
        approvals.wall.max,
        cpu_median(&approvals),
        throughput_met && size_met
    );
}
