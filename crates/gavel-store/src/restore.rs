//! Seeding a new node's data directory from a backup's state, for `gavel
//! backup restore`: the backup file's format and checks stay in the CLI;
//! what the state is and how a node's storage is seeded with it is here, so
//! a restore links the storage, never the gRPC edge.
//!
//! [`seed_data_dir`] checks the state with the application a node runs
//! ([`CoreApp`]): it must restore, and hash to the state hash the backup's
//! header names. Only then does `gavel_raft::seed_from_snapshot` write the
//! data directory (built aside and renamed into place, so a failure leaves
//! nothing there).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use gavel_raft::{seed_from_snapshot, Application, BackupError, BackupPosition};

use crate::app::CoreApp;

/// Why a backup's state did not seed a data directory.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The bytes are not a snapshot this state machine restores.
    #[error("its state: {0}")]
    State(String),
    /// The restored state's hash is not the one the backup names.
    #[error("its state hashes to {found}, the header says {expected}")]
    StateHash {
        /// The hash of the restored state.
        found: String,
        /// The hash the backup's header names.
        expected: String,
    },
    /// The data directory was not seeded (not empty, bad membership, IO).
    #[error(transparent)]
    Seed(#[from] BackupError),
}

/// Seeds `data_dir` for node `node_id` of `members` with `state` (a state
/// machine snapshot, a backup's body) at `position`, once `state` restores
/// and hashes to `state_hash`. Nothing is written when a check fails.
pub async fn seed_data_dir(
    data_dir: &Path,
    node_id: u64,
    members: &BTreeMap<u64, String>,
    position: BackupPosition,
    state: Vec<u8>,
    state_hash: &str,
) -> Result<(), RestoreError> {
    let app = CoreApp::new();
    app.restore(&state).map_err(RestoreError::State)?;
    let found = app.state_hash();
    if found != state_hash {
        return Err(RestoreError::StateHash { found, expected: state_hash.to_string() });
    }
    let application: Arc<dyn Application> = app;
    seed_from_snapshot(data_dir, node_id, members, position, application, state).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use gavel_core::{CapabilitySpec, Command, Envelope, Risk, SideEffect};

    use super::*;

    /// A state with one registered capability, as a snapshot, and its hash.
    fn a_state() -> (Vec<u8>, String) {
        let app = CoreApp::new();
        let capability = CapabilitySpec {
            id: "cap".to_string(),
            side_effect: Some(SideEffect::Read),
            risk: Some(Risk::Low),
            ..Default::default()
        };
        let envelope = Envelope {
            request_id: None,
            now_ms: 1_000,
            caller: None,
            command: Command::RegisterCapability(capability),
        };
        app.apply(1, &CoreApp::encode_command(&envelope));
        (app.snapshot(), app.state_hash())
    }

    fn members() -> BTreeMap<u64, String> {
        (1..=3).map(|id| (id, format!("127.0.0.1:{}", 7400 + id))).collect()
    }

    const POSITION: BackupPosition = BackupPosition { index: 1, term: 1, leader_id: 1 };

    #[tokio::test]
    async fn a_state_that_hashes_as_named_seeds_the_data_dir() {
        let root = tempfile::tempdir().expect("temp dir");
        let data_dir = root.path().join("node-2");
        let (state, hash) = a_state();
        seed_data_dir(&data_dir, 2, &members(), POSITION, state, &hash).await.expect("seeded");
        let entries = std::fs::read_dir(&data_dir).expect("the data dir exists").count();
        assert!(entries > 0, "the Raft storage is written into it");
        // A second restore into it is refused: it is no longer empty.
        let (state, hash) = a_state();
        let again = seed_data_dir(&data_dir, 2, &members(), POSITION, state, &hash).await;
        assert!(matches!(again, Err(RestoreError::Seed(BackupError::DataDirNotEmpty(_)))), "{again:?}");
    }

    #[tokio::test]
    async fn a_state_with_another_hash_or_not_a_snapshot_writes_nothing() {
        let root = tempfile::tempdir().expect("temp dir");
        let data_dir = root.path().join("node-1");
        let (state, hash) = a_state();
        let other = "0".repeat(hash.len());
        let refused = seed_data_dir(&data_dir, 1, &members(), POSITION, state, &other).await;
        match refused {
            Err(RestoreError::StateHash { found, expected }) => assert_eq!((found, expected), (hash, other.clone())),
            unexpected => panic!("expected a state hash refusal, got {unexpected:?}"),
        }
        assert!(!data_dir.exists(), "nothing is written");
        let garbage = vec![0xff; 64];
        let refused = seed_data_dir(&data_dir, 1, &members(), POSITION, garbage, &other).await;
        assert!(matches!(refused, Err(RestoreError::State(_))), "{refused:?}");
        assert!(!data_dir.exists(), "nothing is written");
    }
}
