//! The nemesis: injects faults on a seeded schedule and heals each one.
//!
//! The schedule fires every configured fault at least twice (the coverage
//! checker's minimum) in a seeded order, then random ones until the run's
//! time is up. Each fault is held for 2–4 s, followed by 2–3 s of calm.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::history::{FaultKind, Phase};
use crate::net::Net;
use crate::recorder::Recorder;
use crate::rng::Rng;

/// How long one fault is held, at least and at most (ms).
const HOLD_MS: (u64, u64) = (2_000, 4_000);
/// Calm between two faults, at least and at most (ms).
const CALM_MS: (u64, u64) = (2_000, 3_000);
/// How long the cluster is left dead when every node is killed.
const ALL_DEAD_MS: u64 = 1_000;
/// Probability of dropping a packet between nodes during `PacketLoss`.
const PACKET_LOSS: f64 = 0.2;

/// The order in which faults fire: each configured fault twice, shuffled,
/// then random picks, `count` in all.
pub fn schedule(faults: &[FaultKind], count: usize, seed: u64) -> Vec<FaultKind> {
    if faults.is_empty() {
        return Vec::new();
    }
    let mut rng = Rng::new(seed).fork(7);
    let mut order: Vec<FaultKind> = faults.iter().chain(faults.iter()).copied().collect();
    rng.shuffle(&mut order);
    while order.len() < count {
        order.push(*rng.pick(faults));
    }
    order
}

/// Injects and heals faults.
pub struct Nemesis {
    /// The node processes.
    pub cluster: Arc<Cluster>,
    /// The network, when the run has namespaces.
    pub net: Option<Arc<Net>>,
    /// The history.
    pub recorder: Arc<Recorder>,
    /// Workers stall past their deadline while this is set.
    pub stall: Arc<AtomicBool>,
    /// The schedule's own random choices (targets, hold and calm times).
    pub rng: Rng,
}

/// What an injected fault must undo.
enum Undo {
    Restart(Vec<u64>),
    Resume(u64),
    Heal,
    Unstall,
    Nothing,
}

impl Nemesis {
    /// Runs faults in `order` until `deadline` or `stop`; returns how many started.
    pub async fn run(&mut self, order: &[FaultKind], deadline: Instant, stop: &CancellationToken) -> usize {
        let mut started = 0;
        for fault in order {
            let calm = Duration::from_millis(self.rng.between(CALM_MS.0, CALM_MS.1));
            if Instant::now() + calm >= deadline || stop.is_cancelled() {
                break;
            }
            tokio::time::sleep(calm).await;
            let hold = Duration::from_millis(self.rng.between(HOLD_MS.0, HOLD_MS.1));
            let (undo, nodes) = self.inject(*fault).await;
            started += 1;
            tokio::select! {
                _ = tokio::time::sleep(hold) => {}
                _ = stop.cancelled() => {}
            }
            self.heal(*fault, undo, nodes).await;
        }
        started
    }

    async fn leader_and_followers(&self) -> (Option<u64>, Vec<u64>) {
        let leader = self.cluster.leader().await;
        let followers = self.cluster.ids().into_iter().filter(|id| Some(*id) != leader).collect();
        (leader, followers)
    }

    async fn blocking<T: Send + 'static>(&self, work: impl FnOnce(&Cluster) -> T + Send + 'static) -> Option<T> {
        let cluster = self.cluster.clone();
        tokio::task::spawn_blocking(move || work(&cluster)).await.ok()
    }

    /// Starts one fault and records it; returns what healing must undo and the nodes hit.
    async fn inject(&mut self, fault: FaultKind) -> (Undo, Vec<u64>) {
        let (leader, followers) = self.leader_and_followers().await;
        let follower = if followers.is_empty() { None } else { Some(*self.rng.pick(&followers)) };
        let any = *self.rng.pick(&self.cluster.ids());
        let (nodes, result, undo): (Vec<u64>, Result<String, String>, Undo) = match fault {
            FaultKind::KillLeader | FaultKind::KillFollower => {
                let target = if fault == FaultKind::KillLeader { leader } else { follower };
                match target {
                    Some(id) => {
                        let killed = self.blocking(move |cluster| cluster.kill(id)).await;
                        let result = match killed {
                            Some(Ok(_)) => Ok(format!("SIGKILL node {id} (leader was {leader:?})")),
                            Some(Err(error)) => Err(error.to_string()),
                            None => Err("kill task failed".to_string()),
                        };
                        (vec![id], result, Undo::Restart(vec![id]))
                    }
                    None => (Vec::new(), Err("no leader known: nothing to aim at".to_string()), Undo::Nothing),
                }
            }
            FaultKind::KillAll => {
                let ids = self.cluster.ids();
                let targets = ids.clone();
                let killed = self
                    .blocking(move |cluster| {
                        targets.iter().map(|id| cluster.kill(*id).map(|_| ())).collect::<Result<Vec<_>, _>>()
                    })
                    .await;
                let result = match killed {
                    Some(Ok(_)) => Ok(format!("SIGKILL nodes {ids:?}")),
                    Some(Err(error)) => Err(error.to_string()),
                    None => Err("kill task failed".to_string()),
                };
                (ids.clone(), result, Undo::Restart(ids))
            }
            FaultKind::Pause => {
                let target = leader.unwrap_or(any);
                let paused = self.blocking(move |cluster| cluster.pause(target)).await;
                let result = match paused {
                    Some(Ok(())) => Ok(format!("SIGSTOP node {target} (leader was {leader:?})")),
                    Some(Err(error)) => Err(error.to_string()),
                    None => Err("pause task failed".to_string()),
                };
                (vec![target], result, Undo::Resume(target))
            }
            FaultKind::PartitionLeader
            | FaultKind::PartitionFollower
            | FaultKind::PartitionBridge
            | FaultKind::PartitionOneWay
            | FaultKind::PacketLoss => match &self.net {
                None => (Vec::new(), Err("no network namespaces in this run".to_string()), Undo::Nothing),
                Some(net) => {
                    let ids = self.cluster.ids();
                    let (nodes, rules) = match fault {
                        FaultKind::PartitionLeader | FaultKind::PartitionFollower => {
                            let target = if fault == FaultKind::PartitionLeader {
                                leader.unwrap_or(any)
                            } else {
                                follower.unwrap_or(any)
                            };
                            let rest: Vec<u64> = ids.iter().copied().filter(|id| *id != target).collect();
                            (vec![target], net.partition(&[vec![target], rest]))
                        }
                        FaultKind::PartitionBridge => {
                            // Cut two nodes apart; the third (the bridge) sees both.
                            let mut pair = ids.clone();
                            self.rng.shuffle(&mut pair);
                            (vec![pair[0], pair[1]], net.bridge(pair[0], pair[1]))
                        }
                        FaultKind::PartitionOneWay => {
                            let from = leader.unwrap_or(any);
                            let to = follower.unwrap_or(any);
                            (vec![from, to], net.cut_one_way(from, to))
                        }
                        _ => (ids.clone(), net.packet_loss(PACKET_LOSS)),
                    };
                    let result = rules.map(|rules| rules.join("; ")).map_err(|error| error.to_string());
                    (nodes, result, Undo::Heal)
                }
            },
            FaultKind::WorkerStall => {
                self.stall.store(true, Ordering::Relaxed);
                (Vec::new(), Ok("workers stall past their lease deadline, then report".to_string()), Undo::Unstall)
            }
        };
        let injected = result.is_ok();
        let detail = result.unwrap_or_else(|error| format!("NOT INJECTED: {error}"));
        tracing::info!(?fault, ?nodes, injected, %detail, "fault start");
        self.recorder.nemesis(fault, Phase::Start, nodes.clone(), injected, detail);
        (undo, nodes)
    }

    /// Heals one fault and records it (with the nodes its start named).
    async fn heal(&mut self, fault: FaultKind, undo: Undo, hit: Vec<u64>) {
        let detail = match undo {
            Undo::Restart(ids) => {
                if ids.len() > 1 {
                    tokio::time::sleep(Duration::from_millis(ALL_DEAD_MS)).await;
                }
                let restarted = self
                    .blocking(move |cluster| {
                        ids.iter()
                            .map(|id| cluster.restart(*id).map(|_| ()).map_err(|e| e.to_string()))
                            .collect::<Vec<_>>()
                    })
                    .await;
                format!("restarted on the same data: {restarted:?}")
            }
            Undo::Resume(id) => {
                let resumed = self.blocking(move |cluster| cluster.resume(id).map_err(|e| e.to_string())).await;
                format!("SIGCONT: {resumed:?}")
            }
            Undo::Heal => match &self.net {
                Some(net) => format!("healed: {:?}", net.heal().map(|rules| rules.len()).map_err(|e| e.to_string())),
                None => "nothing to heal".to_string(),
            },
            Undo::Unstall => {
                self.stall.store(false, Ordering::Relaxed);
                "workers behave again".to_string()
            }
            Undo::Nothing => "nothing was injected".to_string(),
        };
        tracing::info!(?fault, %detail, "fault stop");
        self.recorder.nemesis(fault, Phase::Stop, hit, true, detail);
    }

    /// Undoes everything that may still be in effect: network rules, paused
    /// and dead nodes, worker stalls. Used at the end of a run and after an error.
    pub async fn heal_all(&self) {
        self.stall.store(false, Ordering::Relaxed);
        if let Some(net) = &self.net {
            if let Err(error) = net.heal() {
                tracing::warn!(%error, "healing the network failed");
            }
        }
        let _ = self
            .blocking(|cluster| {
                for id in cluster.ids() {
                    if cluster.is_paused(id) {
                        let _ = cluster.resume(id);
                    }
                    if !cluster.is_running(id) {
                        let _ = cluster.restart(id);
                    }
                }
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_fires_every_fault_twice_first_and_depends_only_on_the_seed() {
        let faults = [FaultKind::KillLeader, FaultKind::PartitionBridge, FaultKind::WorkerStall];
        let order = schedule(&faults, 10, 42);
        assert_eq!(order.len(), 10);
        for fault in faults {
            assert!(order[..6].iter().filter(|f| **f == fault).count() == 2, "{fault:?} twice in the first round");
        }
        assert_eq!(order, schedule(&faults, 10, 42));
        assert_ne!(schedule(&faults, 10, 42), schedule(&faults, 10, 43));
    }
}
