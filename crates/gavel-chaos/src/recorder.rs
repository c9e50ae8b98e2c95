//! Writes the history as the run goes: every invoke, completion and fault.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::history::{Complete, Entry, FaultKind, HistoryWriter, Invoke, NemesisEvent, Op, OpResult, Outcome, Phase};

/// The run's history (a file, or memory) plus the clock every entry is
/// stamped with.
pub struct Recorder {
    writer: Mutex<Sink>,
    clock: Clock,
    next_op: AtomicU64,
    next_process: AtomicU64,
}

/// Where the entries go.
enum Sink {
    File(HistoryWriter),
    Memory(Vec<Entry>),
}

/// What the entries' `time_ms` measure.
enum Clock {
    /// The monotonic OS clock since the run started.
    Os(Instant),
    /// A simulator's clock, in milliseconds since its run started.
    Injected(fn() -> f64),
}

impl Recorder {
    /// Creates the history file.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        Ok(Recorder {
            writer: Mutex::new(Sink::File(HistoryWriter::create(path)?)),
            clock: Clock::Os(Instant::now()),
            next_op: AtomicU64::new(1),
            next_process: AtomicU64::new(1),
        })
    }

    /// A history kept in memory ([`Recorder::entries`]) and stamped with
    /// `clock_ms` (a simulator's simulated milliseconds since its run began).
    pub fn in_memory(clock_ms: fn() -> f64) -> Recorder {
        Recorder {
            writer: Mutex::new(Sink::Memory(Vec::new())),
            clock: Clock::Injected(clock_ms),
            next_op: AtomicU64::new(1),
            next_process: AtomicU64::new(1),
        }
    }

    /// The entries of an in-memory history so far (none for a file's).
    pub fn entries(&self) -> Vec<Entry> {
        match &*self.writer.lock().expect("history writer lock poisoned") {
            Sink::Memory(entries) => entries.clone(),
            Sink::File(_) => Vec::new(),
        }
    }

    /// Milliseconds since the run started.
    pub fn now_ms(&self) -> f64 {
        match &self.clock {
            Clock::Os(start) => start.elapsed().as_secs_f64() * 1000.0,
            Clock::Injected(clock_ms) => clock_ms(),
        }
    }

    /// A fresh process id: one per concurrent actor, so a process never has
    /// two operations open at once.
    pub fn process(&self) -> u64 {
        self.next_process.fetch_add(1, Ordering::Relaxed)
    }

    /// Writes one entry. A history that cannot be written makes the run
    /// meaningless, so a write failure ends the process.
    pub fn write(&self, entry: &Entry) {
        let mut writer = self.writer.lock().expect("history writer lock poisoned");
        let writer = match &mut *writer {
            Sink::File(writer) => writer,
            Sink::Memory(entries) => {
                entries.push(entry.clone());
                return;
            }
        };
        if let Err(error) = writer.write(entry) {
            eprintln!("gavel-lab chaos: cannot write the history: {error}");
            std::process::exit(crate::run::EXIT_HARNESS_CRASH);
        }
    }

    /// Records that `process` sent `op` to `node`; returns the op id for [`Recorder::complete`].
    pub fn invoke(&self, process: u64, node: u64, op: Op) -> u64 {
        let op_id = self.next_op.fetch_add(1, Ordering::Relaxed);
        self.write(&Entry::Invoke(Invoke { op_id, time_ms: self.now_ms(), process, node, op }));
        op_id
    }

    /// Records the outcome of an invoked operation.
    pub fn complete(
        &self,
        op_id: u64,
        process: u64,
        outcome: Outcome,
        result: Option<OpResult>,
        error: Option<String>,
    ) {
        self.write(&Entry::Complete(Complete { op_id, time_ms: self.now_ms(), process, outcome, result, error }));
    }

    /// Records a fault starting or stopping.
    pub fn nemesis(&self, fault: FaultKind, phase: Phase, nodes: Vec<u64>, injected: bool, detail: String) {
        self.write(&Entry::Nemesis(NemesisEvent { time_ms: self.now_ms(), fault, phase, nodes, injected, detail }));
    }
}
