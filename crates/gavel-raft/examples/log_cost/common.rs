//! What the measurement examples share: a trivial application and a
//! started single-node cluster.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gavel_raft::{Application, NodeConfig, RaftNode, RaftTimings};

/// Counts applied commands; its snapshot is the count.
#[derive(Default)]
pub struct Counter {
    applied: Mutex<u64>,
}

impl Application for Counter {
    fn apply(&self, _log_index: u64, _command: &[u8]) -> Vec<u8> {
        let mut applied = self.applied.lock().expect("lock");
        *applied += 1;
        applied.to_be_bytes().to_vec()
    }
    fn snapshot(&self) -> Vec<u8> {
        self.applied.lock().expect("lock").to_be_bytes().to_vec()
    }
    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        let bytes: [u8; 8] = bytes.try_into().map_err(|_| "bad snapshot".to_string())?;
        *self.applied.lock().expect("lock") = u64::from_be_bytes(bytes);
        Ok(())
    }
}

/// Starts node 1 alone on `dir`, initializes it and waits until it leads.
pub async fn single_node(dir: &Path) -> RaftNode {
    let node = RaftNode::start(
        NodeConfig {
            node_id: 1,
            addr: "127.0.0.1:1".into(),
            data_dir: dir.to_path_buf(),
            timings: RaftTimings::default(),
            #[cfg(feature = "mutants")]
            planted: Default::default(),
            peer_tls: None,
        },
        Arc::new(Counter::default()),
    )
    .await
    .expect("start node");
    node.initialize([(1, "127.0.0.1:1".to_string())].into()).await.expect("initialize");
    node.wait_for_leader(Duration::from_secs(10)).await.expect("leader");
    node
}

/// The `q` quantile (0 to 1, nearest rank) of sorted `samples`, in µs.
pub fn micros_at(samples: &[Duration], q: f64) -> f64 {
    samples[((samples.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6
}
