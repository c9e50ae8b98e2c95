//! What waiting readers cost an apply: WAITERS tasks each wait for their
//! own execution to finish, as `WaitExecution` does, while entries that
//! change other executions are applied one per millisecond. Woken by every
//! apply (`ReadPort::watch`, how `WaitExecution` waited before) each waiter
//! re-reads its execution after every entry; woken only by the entries that
//! name its execution (`ReadPort::watch_execution`) none of them does.
//!
//! `cargo run --release -p gavel-store --example wake_cost -- [WAITERS] [ENTRIES] [RUNS]`
//!
//! Defaults: 1,000 waiters, 2,000 entries, 3 runs of each way, alternating.
//! Per run it prints the process's CPU time per applied entry (all
//! threads, from `/proc/self/stat`) and the waiters' wake-ups per entry;
//! then each way's median and spread (lowest–highest).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gavel_core::{Actor, ActorKind, CapabilitySpec, Command, Envelope, Risk, SideEffect, State, Submit};
use gavel_raft::Application;
use gavel_store::app::CoreApp;
use gavel_store::reads::ReadPort;
use tokio::time::Instant;

/// Applies `command` at `log_index`.
fn apply(app: &CoreApp, log_index: u64, command: Command) {
    let envelope = Envelope { request_id: None, now_ms: 1_000 + log_index, caller: None, command };
    app.apply(log_index, &CoreApp::encode_command(&envelope));
}

fn submit(execution_id: String) -> Command {
    Command::Submit(Submit {
        execution_id,
        capability_id: "tool".to_string(),
        input_json: r#"{"order":"o-1","amount":100}"#.to_string(),
        actor: Actor::new("agent", ActorKind::User),
        surface: "bench".to_string(),
        correlation_id: None,
    })
}

/// User plus system CPU time of this process so far, in seconds.
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat.rsplit_once(')').expect("a stat line").1.split_whitespace().collect();
    let ticks = |index: usize| fields[index].parse::<f64>().expect("a tick count");
    // utime and stime are the 14th and 15th fields; `fields` starts at the 3rd.
    (ticks(11) + ticks(12)) / 100.0
}

/// One run: CPU seconds per entry and wake-ups per entry.
fn run(waiters: usize, entries: u64, keyed: bool) -> (f64, f64) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let app = CoreApp::new();
    let capability = CapabilitySpec {
        id: "tool".to_string(),
        side_effect: Some(SideEffect::Read),
        risk: Some(Risk::Low),
        ..Default::default()
    };
    apply(&app, 1, Command::RegisterCapability(capability));
    let mut index = 1;
    for waiter in 0..waiters {
        index += 1;
        apply(&app, index, submit(format!("waited-{waiter}")));
    }
    let port = ReadPort::new(app.clone());
    let wakes = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(3_600);
    let tasks: Vec<_> = (0..waiters)
        .map(|waiter| {
            let (port, wakes) = (port.clone(), wakes.clone());
            let execution_id = format!("waited-{waiter}");
            let is_final =
                move |state: &State| state.execution(&execution_id).is_some_and(|execution| execution.state.is_final());
            runtime.spawn(async move {
                if keyed {
                    let mut watch = port.watch_execution(&format!("waited-{waiter}"));
                    while !watch.read(&is_final) {
                        watch.next_change(deadline).await;
                        wakes.fetch_add(1, Ordering::Relaxed);
                    }
                } else {
                    let mut watch = port.watch();
                    while !watch.read(&is_final) {
                        watch.next_apply(Some(deadline)).await;
                        wakes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // Every waiter registered and asleep.
    std::thread::sleep(Duration::from_millis(300));
    wakes.store(0, Ordering::Relaxed);
    let cpu_before = cpu_s();
    for entry in 0..entries {
        index += 1;
        apply(&app, index, submit(format!("other-{entry}")));
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(100));
    let cpu = cpu_s() - cpu_before;
    let woken = wakes.load(Ordering::Relaxed);
    for task in tasks {
        task.abort();
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    (cpu / entries as f64, woken as f64 / entries as f64)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut number = |default: u64| args.next().map_or(default, |arg| arg.parse().expect("a number"));
    let (waiters, entries, runs) = (number(1_000) as usize, number(2_000), number(3));
    println!("{waiters} waiters, {entries} entries applied one per ms, {runs} runs of each way");
    let mut results: [(&str, Vec<f64>); 2] = [("every apply", Vec::new()), ("its own execution's", Vec::new())];
    for round in 1..=runs {
        for (way, (label, cpu)) in results.iter_mut().enumerate() {
            let (cpu_per_entry, wakes_per_entry) = run(waiters, entries, way == 1);
            println!(
                "run {round}, woken by {label:<20} CPU per entry {:>8.1} µs, wake-ups per entry {wakes_per_entry:>7.1}",
                cpu_per_entry * 1e6
            );
            cpu.push(cpu_per_entry * 1e6);
        }
    }
    for (label, mut cpu) in results {
        cpu.sort_by(f64::total_cmp);
        println!(
            "woken by {label:<20} CPU per entry: median {:.1} µs ({:.1}–{:.1})",
            cpu[cpu.len() / 2],
            cpu[0],
            cpu[cpu.len() - 1]
        );
    }
}
