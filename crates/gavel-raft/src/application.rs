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
    /// Applies the commands of one log entry, in order, and returns their
    /// replies in order. The default applies them one by one; an application
    /// may override it to take its locks and notify its readers once per entry.
    fn apply_batch(&self, log_index: u64, commands: &[&[u8]]) -> Vec<Vec<u8>> {
        commands.iter().map(|command| self.apply(log_index, command)).collect()
    }
    /// Serializes the whole application state (called when building a snapshot).
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole application state with a snapshot's bytes.
    fn restore(&self, bytes: &[u8]) -> Result<(), String>;

    /// [`Application::snapshot`] for the snapshot the Raft layer builds at
    /// `position` (opaque bytes naming the applied log id and membership).
    /// An application that keeps its state in its own store may checkpoint
    /// it there with `position`, durably, before returning, so that
    /// [`Application::resume`] finds it after a restart. The default ignores
    /// `position`.
    fn snapshot_at(&self, position: &[u8]) -> Vec<u8> {
        let _ = position;
        self.snapshot()
    }

    /// [`Application::restore`] of a snapshot at `position` (installed from
    /// the leader or read back on start); an application that checkpoints
    /// records `position` with the restored state. The default ignores it.
    fn restore_at(&self, position: &[u8], bytes: &[u8]) -> Result<(), String> {
        let _ = position;
        self.restore(bytes)
    }

    /// Called once on start, before anything else, with the position of the
    /// stored snapshot (`None`: there is none and the application starts
    /// empty, having forgotten anything its own store held). Returns whether
    /// the application loaded the state at exactly that position from its
    /// own checkpoint; the Raft layer then neither reads nor restores the
    /// stored snapshot. The default loads nothing.
    fn resume(&self, position: Option<&[u8]>) -> Result<bool, String> {
        let _ = position;
        Ok(false)
    }
}
