//! The bridge between the Raft layer's opaque commands and `gavel-core`.
//!
//! Log entries carry a bincode-encoded [`Envelope`]; replies travel back as a
//! bincode-encoded [`Reply`]. Readers share the same [`State`] behind a mutex
//! and are woken through a watch channel each time a command is applied, so
//! long-polls never sleep in loops. The planted bug the node runs with (chaos
//! harness only) is set on every [`State`] the application creates or
//! restores, since it is configuration, not replicated state.

use std::sync::{Arc, Mutex, MutexGuard};

use gavel_core::mutants::Mutant;
use gavel_core::{DomainError, Envelope, Reply, State};
use tokio::sync::watch;

/// The replicated application: the core state machine plus change notification.
pub struct CoreApp {
    state: Mutex<State>,
    /// The planted bug, set again on every restored state.
    planted_bug: Option<Mutant>,
    applied: watch::Sender<u64>,
    /// The state hash at an applied index: hashing serializes the whole state,
    /// so status calls reuse it until the next apply.
    hash_cache: Mutex<Option<(u64, String)>>,
}

impl CoreApp {
    /// An empty application whose state machine runs with `planted_bug`
    /// (`None` outside the chaos harness; it acts only in a `mutants` build).
    pub fn new(planted_bug: Option<Mutant>) -> Arc<CoreApp> {
        let (applied, _) = watch::channel(0);
        let mut state = State::new();
        state.set_planted_bug(planted_bug);
        Arc::new(CoreApp { state: Mutex::new(state), planted_bug, applied, hash_cache: Mutex::new(None) })
    }

    /// Locks the state for a read. Hold it briefly: apply waits on it.
    pub fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock means apply hit a broken invariant;
        // the process is already crashing, so poisoning is not recoverable.
        self.state.lock().expect("state lock poisoned by a failed invariant")
    }

    /// A receiver that changes each time a command is applied (its value is the log index).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// The state hash, recomputed only after something was applied.
    pub fn state_hash(&self) -> String {
        let index = *self.applied.borrow();
        let mut cache = self.hash_cache.lock().expect("hash cache lock poisoned");
        if let Some((cached_index, hash)) = cache.as_ref() {
            if *cached_index == index {
                return hash.clone();
            }
        }
        let hash = self.state().state_hash();
        *cache = Some((index, hash.clone()));
        hash
    }

    /// Encodes a command for the log.
    pub fn encode_command(envelope: &Envelope) -> Vec<u8> {
        bincode::serialize(envelope).expect("envelopes serialize: plain data")
    }

    /// Decodes a reply from the log.
    pub fn decode_reply(bytes: &[u8]) -> Reply {
        bincode::deserialize(bytes).unwrap_or_else(|error| {
            Reply::Error(DomainError::invalid(format!("undecodable reply from the state machine: {error}")))
        })
    }
}

/// Applies one encoded command to the locked state and encodes its reply.
fn apply_one(state: &mut State, command: &[u8]) -> Vec<u8> {
    let reply = match bincode::deserialize::<Envelope>(command) {
        Ok(envelope) => state.apply(&envelope),
        // Only nodes of this cluster propose; an undecodable entry comes from an
        // incompatible version. Every replica answers it alike and changes nothing.
        Err(error) => Reply::Error(DomainError::invalid(format!("undecodable command: {error}"))),
    };
    bincode::serialize(&reply).expect("replies serialize: plain data")
}

impl gavel_raft::Application for CoreApp {
    fn apply(&self, log_index: u64, command: &[u8]) -> Vec<u8> {
        let reply = apply_one(&mut self.state(), command);
        self.applied.send_replace(log_index);
        reply
    }

    /// One lock and one wake-up of the long-polls per log entry: readers see
    /// the whole entry applied or none of it.
    fn apply_batch(&self, log_index: u64, commands: &[&[u8]]) -> Vec<Vec<u8>> {
        let replies = {
            let mut state = self.state();
            commands.iter().map(|command| apply_one(&mut state, command)).collect()
        };
        self.applied.send_replace(log_index);
        replies
    }

    fn snapshot(&self) -> Vec<u8> {
        self.state().snapshot()
    }

    fn restore(&self, bytes: &[u8]) -> Result<(), String> {
        let mut restored = State::restore(bytes).map_err(|error| error.to_string())?;
        restored.set_planted_bug(self.planted_bug);
        *self.state() = restored;
        *self.hash_cache.lock().expect("hash cache lock poisoned") = None;
        self.applied.send_modify(|_| {});
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gavel_raft::Application;

    use super::*;

    #[test]
    fn the_planted_bug_is_set_on_the_new_state_and_again_on_every_restored_one() {
        let app = CoreApp::new(Some(Mutant::NoFencing));
        assert_eq!(app.state().planted_bug(), Some(Mutant::NoFencing));
        let snapshot = gavel_raft::Application::snapshot(&*app);
        app.restore(&snapshot).expect("a snapshot of this state machine restores");
        assert_eq!(app.state().planted_bug(), Some(Mutant::NoFencing));
        assert_eq!(CoreApp::new(None).state().planted_bug(), None);
    }
}
