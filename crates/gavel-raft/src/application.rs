//! The replicated application: what the Raft layer applies committed commands to.

/// The replicated application: a deterministic state machine over opaque commands.
///
/// The Raft layer calls these methods from one task at a time and never
/// concurrently with each other, but through `&self`: the implementation keeps
/// its state behind interior mutability (a `Mutex`, for example).
///
/// The application's state is made durable only through snapshots: after a
/// restart the node calls [`Application::restore`] with the last snapshot and
/// then re-applies the committed log suffix with [`Application::apply`].
/// `apply` runs on the Raft state-machine task, so it should be fast (no I/O,
/// no waiting).
pub trait Application: Send + Sync + 'static {
    /// Applies one committed command at `log_index` and returns the encoded reply. Must be deterministic.
    fn apply(&self, log_index: u64, command: &[u8]) -> Vec<u8>;
    /// Serializes the whole application state (called when building a snapshot).
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole application state with a snapshot's bytes.
    fn restore(&self, bytes: &[u8]) -> Result<(), String>;
}
