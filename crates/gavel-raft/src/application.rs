//! The replicated application: what the Raft layer applies committed commands to.

/// The replicated application: a deterministic state machine over opaque commands.
///
/// The Raft layer calls these methods from one task at a time and never
/// concurrently with each other, but through `&self`: the implementation keeps
/// its state behind interior mutability (a `Mutex`, for example).
///
/// The application's state is made durable only through snapshots: after a
/// restart the node calls [`Application::restore_at`] with the last snapshot and
/// then re-applies the committed log suffix with [`Application::apply`].
/// `apply` runs on the Raft state-machine task, so it should be fast (no I/O,
/// no waiting).
///
/// Snapshots are files, never whole in memory on the Raft side: a build
/// takes a [`SnapshotSource`] on the state machine's task
/// ([`Application::snapshot_at`]) and writes it to a file on a blocking
/// thread while apply goes on; an install or a restart reads the file back
/// through [`Application::restore_at`].
pub trait Application: Send + Sync + 'static {
    /// Applies one committed command at `log_index` and returns the encoded reply. Must be deterministic.
    fn apply(&self, log_index: u64, command: &[u8]) -> Vec<u8>;
    /// Applies the commands of one log entry, in order, and returns their
    /// replies in order. The default applies them one by one; an application
    /// may override it to take its locks and notify its readers once per entry.
    fn apply_batch(&self, log_index: u64, commands: &[&[u8]]) -> Vec<Vec<u8>> {
        commands.iter().map(|command| self.apply(log_index, command)).collect()
    }
    /// Serializes the whole application state into memory (a backup seed
    /// and the defaults below use it).
    fn snapshot(&self) -> Vec<u8>;
    /// Replaces the whole application state with a snapshot's bytes.
    fn restore(&self, bytes: &[u8]) -> Result<(), String>;

    /// The snapshot the Raft layer builds at `position` (opaque bytes naming
    /// the applied log id and membership), taken on the state machine's
    /// task between two applies. What it returns must stand for the state
    /// at exactly this point, however long its [`SnapshotSource::write_to`]
    /// runs afterwards, on another thread, while later commands apply (a
    /// point-in-time view of the application's own store, for example). An
    /// application that keeps its state in its own store may checkpoint it
    /// there with `position`, durably, before returning, so that
    /// [`Application::resume`] finds it after a restart. The default
    /// serializes the whole state with [`Application::snapshot`].
    fn snapshot_at(&self, position: &[u8]) -> Box<dyn SnapshotSource> {
        let _ = position;
        Box::new(self.snapshot())
    }

    /// Replaces the whole state with the snapshot at `position` (installed
    /// from the leader or read back on start) that `snapshot` reads, `bytes`
    /// long; an application that checkpoints records `position` with the
    /// restored state. The default reads it into memory and calls
    /// [`Application::restore`]; an application with large state decodes it
    /// as it reads.
    fn restore_at(&self, position: &[u8], snapshot: &mut dyn std::io::Read, bytes: u64) -> Result<(), String> {
        let _ = position;
        let mut whole = Vec::with_capacity(usize::try_from(bytes).unwrap_or(0).min(1 << 20));
        snapshot.read_to_end(&mut whole).map_err(|error| format!("cannot read the snapshot: {error}"))?;
        if whole.len() as u64 != bytes {
            return Err(format!("the snapshot holds {} bytes, {bytes} expected", whole.len()));
        }
        self.restore(&whole)
    }

    /// Called once on start, before anything else, with the position of the
    /// stored snapshot (`None`: there is none). The application may load its
    /// state from its own checkpoint: one at exactly that position, or a
    /// later one that `later` accepts (a checkpoint written for a snapshot
    /// that was not stored before the node stopped; the Raft layer accepts
    /// it when its log still holds the entry the checkpoint was taken at,
    /// so what follows can be replayed). Returns the position it loaded;
    /// the Raft layer then neither reads nor restores the stored snapshot.
    /// `None`: it loaded nothing and holds no state (having forgotten
    /// anything its own store held), and the stored snapshot, if any, is
    /// restored. The default loads nothing.
    fn resume(&self, position: Option<&[u8]>, later: &dyn Fn(&[u8]) -> bool) -> Result<Option<Vec<u8>>, String> {
        let _ = (position, later);
        Ok(None)
    }

    /// Whether the application keeps its whole state in a durable store of
    /// its own, checkpointed at log positions ([`Application::checkpoint`],
    /// [`Application::checkpoint_view`]), as etcd keeps its state in bbolt.
    /// Then the Raft layer writes no snapshot file of its own: a snapshot it
    /// builds is a durable checkpoint (its cost is the changes since the
    /// last checkpoint, not the state's size), a snapshot it sends to a
    /// follower is a view of the latest checkpoint, written out only then,
    /// and on start the application resumes from its checkpoint (a store
    /// that lost it stops the node). The default, `false`: snapshots are
    /// files ([`Application::snapshot_at`]).
    fn keeps_own_state(&self) -> bool {
        false
    }

    /// Whether the application wants the changes it holds in memory written
    /// into its store after the entry it just applied (they reached its
    /// bound): [`Application::write_changes`]. Asked after every entry of an
    /// application that [keeps its own state](Application::keeps_own_state);
    /// cheap.
    fn checkpoint_due(&self) -> bool {
        false
    }

    /// Writes the changes held in memory into the application's own store,
    /// without a checkpoint and without waiting for the disk: what it costs
    /// is the changes, not the state (a checkpoint writes the whole hot
    /// state). Until the next [`Application::checkpoint`] the store's
    /// latest checkpoint is stale: [`Application::checkpoint_view`] has none,
    /// and a crash returns the store to its last durable checkpoint. The
    /// Raft layer writes a checkpoint before it needs a view, and when the
    /// state machine closes. Called on the state machine's task between two
    /// entries. The default has no store to write to.
    fn write_changes(&self) -> Result<(), String> {
        Err("this application keeps no store of its own".to_string())
    }

    /// Writes the state as applied so far into the application's own store,
    /// with `position` (opaque bytes naming the applied log id and
    /// membership), in one atomic write; `durable`: returns only once it is
    /// on stable storage (a snapshot the Raft layer builds; the log is then
    /// purged behind it). Called on the state machine's task between two
    /// entries. Returns the store's size in bytes afterwards (reported as
    /// the snapshot's size). The default has no store to write to.
    fn checkpoint(&self, position: &[u8], durable: bool) -> Result<u64, String> {
        let _ = (position, durable);
        Err("this application keeps no store of its own".to_string())
    }

    /// A point-in-time view of the latest checkpoint in the application's
    /// own store: its position and a source that writes the state there in
    /// the format [`Application::restore_at`] reads, however long it runs
    /// while later commands apply. `None`: no checkpoint yet, or changes
    /// were written after it ([`Application::write_changes`]). The default
    /// has none.
    #[allow(clippy::type_complexity)]
    fn checkpoint_view(&self) -> Result<Option<(Vec<u8>, Box<dyn SnapshotSource>)>, String> {
        Ok(None)
    }
}

/// A snapshot taken at one point of the log, written out later
/// ([`Application::snapshot_at`]).
pub trait SnapshotSource: Send + 'static {
    /// Writes the snapshot's bytes to `out`, in order. Called at most once,
    /// on a blocking thread, while the state machine goes on applying.
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()>;
}

/// Bytes already in memory are their own source.
impl SnapshotSource for Vec<u8> {
    fn write_to(self: Box<Self>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        out.write_all(&self)
    }
}
