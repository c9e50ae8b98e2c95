//! Leader-side time. The leader proposes a `Tick` when the core's next
//! deadline (lease expiry, heartbeat loss, backoff end, retention) has passed;
//! no replica decides expiry from its own clock. A new leader reads the same
//! replicated deadlines, so it picks up every pending one.

use std::sync::Arc;
use std::time::Duration;

use gavel_core::{Command, Reply, State};
use tokio::sync::watch;

use crate::node::Node;

/// Longest sleep between checks, so a leader whose clock jumps still ticks.
const IDLE_CHECK: Duration = Duration::from_millis(1000);
/// Pause after a failed tick proposal (e.g. during an election).
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Runs until `shutdown` becomes true.
pub async fn run(node: Arc<Node>, mut shutdown: watch::Receiver<bool>) {
    let mut applied = node.reads.watch();
    let mut status = node.raft.subscribe_status();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let next = applied.read(State::next_deadline_ms);
        let wait = if !node.raft.status().is_leader() {
            IDLE_CHECK
        } else {
            let now_ms = node.wall_clock_ms();
            match next {
                Some(deadline) if deadline <= now_ms => {
                    node.metrics.observe_tick_lag(Duration::from_millis(now_ms - deadline));
                    let tick = Command::Tick { retention: node.settings.retention };
                    match node.call::<Reply>(None, "", tick).await {
                        Ok(_) => continue,
                        Err(_) => RETRY_PAUSE,
                    }
                }
                Some(deadline) => Duration::from_millis(deadline - now_ms).min(IDLE_CHECK),
                None => IDLE_CHECK,
            }
        };
        // A closed channel (Raft stopped) must not end the wait at once,
        // or the loop spins (found by gavel-sim after a simulated power cut).
        tokio::select! {
            _ = applied.next_apply(Some(tokio::time::Instant::now() + wait)) => {}
            _ = crate::node::changed_or_never(&mut status) => {}
            _ = shutdown.changed() => {}
        }
    }
}
