//! The stored cursor: what the notifier has acknowledged, written to
//! `<state dir>/notify-state.json` atomically (temporary file, fsync,
//! rename, fsync of the directory), so a SIGKILL at any instant leaves the
//! previous state or the next one, never a torn file.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::NotifyError;
use crate::limits::STATE_FILE_BYTES_MAX;

/// The state file's name inside the state directory.
pub const STATE_FILE: &str = "notify-state.json";

/// The trail event that says an approval was created.
pub const APPROVAL_REQUESTED: &str = "capability.approval_requested";

/// The lock file: a notifier holds an exclusive `flock` on it while it
/// runs, so two notifiers never share a state directory (each would post
/// every approval). The kernel drops the lock when the process dies.
pub const LOCK_FILE: &str = "notify.lock";

/// The format version written; another version is refused, not guessed at.
pub const STATE_VERSION: u32 = 1;

/// Where a post came from, and so what finishing it moves on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PostSource {
    /// The front of the listing (`to_post`): finishing pops it.
    Listing,
    /// A `capability.approval_requested` event: finishing moves the cursor to it.
    Event {
        /// The event's cursor.
        cursor: u64,
    },
}

/// The post in flight: written before its first byte leaves, cleared once
/// every webhook acknowledged (or refused) it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlight {
    /// The approval, which is also the delivery id.
    pub approval_id: String,
    /// Where it came from.
    pub source: PostSource,
    /// The webhooks (by their position on the command line) that already
    /// answered; a redelivery skips them.
    pub done: BTreeSet<usize>,
    /// Whether the post is itself a redelivery (a re-listing after the
    /// cursor fell behind retention cannot know what was posted before).
    pub redelivery: bool,
}

/// Posts counted since the state was created, kept with the cursor so they
/// survive restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Posts a webhook acknowledged with a 2xx.
    pub delivered: u64,
    /// Of those, redeliveries (the post in flight at a crash, or a re-listing).
    pub redelivered: u64,
    /// Posts a webhook refused for good (a 4xx other than 408 and 429).
    pub refused: u64,
    /// Posts given up after the retry limits.
    pub abandoned: u64,
    /// Approvals no longer pending (or no longer readable) when their post came up.
    pub skipped: u64,
    /// Times the cursor had fallen behind retention and the pending approvals were listed again.
    pub relisted: u64,
}

/// Everything the notifier keeps between runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotifyState {
    /// Format version ([`STATE_VERSION`]).
    pub version: u32,
    /// The trail cursor up to which every event was handled: every approval
    /// created at or before it was posted, skipped, or is in `to_post`.
    pub cursor: u64,
    /// Approvals of a listing still to post, in listing order.
    pub to_post: Vec<String>,
    /// Whether the `to_post` approvals are redeliveries (a re-listing).
    pub to_post_redelivery: bool,
    /// Approvals a listing posted whose creation event the trail has not
    /// shown yet: when it does, the event posts nothing.
    pub listed: BTreeSet<String>,
    /// The post in flight, if any.
    pub in_flight: Option<InFlight>,
    /// What happened to the posts so far.
    pub counts: Counts,
}

impl NotifyState {
    /// A fresh state for a first listing of `approval_ids`.
    pub fn listing(approval_ids: Vec<String>, redelivery: bool) -> NotifyState {
        NotifyState {
            version: STATE_VERSION,
            cursor: 0,
            to_post: approval_ids,
            to_post_redelivery: redelivery,
            listed: BTreeSet::new(),
            in_flight: None,
            counts: Counts::default(),
        }
    }

    /// The state after the cursor fell behind retention: a fresh listing of
    /// `approval_ids`, each to be posted as a redelivery, the trail read
    /// again from its start; the counts carry over, `relisted` counts it.
    pub fn relisted(&self, approval_ids: Vec<String>) -> NotifyState {
        let mut state = NotifyState::listing(approval_ids, true);
        state.counts = Counts { relisted: self.counts.relisted + 1, ..self.counts.clone() };
        state
    }

    /// What a trail event at `cursor` asks for: the approval to post (the
    /// cursor then moves when its post finishes), or nothing, and the
    /// cursor moves past the event now. An approval the listing posted is
    /// not posted again when the trail shows its creation; it leaves
    /// `listed` then.
    pub fn on_event(&mut self, event_type: &str, approval_id: Option<String>, cursor: u64) -> Option<String> {
        let created = approval_id.filter(|_| event_type == APPROVAL_REQUESTED);
        let to_post = created.filter(|approval_id| !self.listed.remove(approval_id));
        if to_post.is_none() {
            self.cursor = self.cursor.max(cursor);
        }
        to_post
    }

    /// Marks the post in flight finished: the listing moves on, or the
    /// cursor moves to its event.
    pub fn finish_in_flight(&mut self) {
        let Some(in_flight) = self.in_flight.take() else { return };
        match in_flight.source {
            PostSource::Listing => {
                if self.to_post.first() == Some(&in_flight.approval_id) {
                    self.to_post.remove(0);
                }
                self.listed.insert(in_flight.approval_id);
            }
            PostSource::Event { cursor } => self.cursor = self.cursor.max(cursor),
        }
    }

    /// The front of the listing was not posted (no longer pending): it moves on.
    pub fn skip_listed_front(&mut self) {
        if !self.to_post.is_empty() {
            self.to_post.remove(0);
        }
    }
}

/// Reads and writes the state file of one state directory, holding its lock.
#[derive(Debug)]
pub struct StateStore {
    dir: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl StateStore {
    /// The store in `dir`, created if missing; refused with
    /// [`NotifyError::StateLocked`] while another notifier holds it.
    pub fn open(dir: &Path) -> Result<StateStore, NotifyError> {
        std::fs::create_dir_all(dir).map_err(|error| NotifyError::state(dir, "creating the state directory", error))?;
        let path = dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|error| NotifyError::state(&path, "opening", error))?;
        let lock =
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
                if errno == nix::errno::Errno::EWOULDBLOCK {
                    NotifyError::StateLocked(dir.to_path_buf())
                } else {
                    NotifyError::state(&path, "locking", std::io::Error::from(errno))
                }
            })?;
        Ok(StateStore { dir: dir.to_path_buf(), _lock: lock })
    }

    /// The state file's path.
    pub fn path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The stored state, or `None` on a first start (no file).
    pub fn load(&self) -> Result<Option<NotifyState>, NotifyError> {
        let path = self.path();
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(NotifyError::state(&path, "opening", error)),
        };
        let length = file.metadata().map_err(|error| NotifyError::state(&path, "reading", error))?.len();
        if length > STATE_FILE_BYTES_MAX {
            return Err(NotifyError::StateCorrupt {
                path,
                reason: format!("{length} bytes, more than the {STATE_FILE_BYTES_MAX} a state file may hold"),
            });
        }
        let state: NotifyState = serde_json::from_reader(std::io::BufReader::new(file))
            .map_err(|error| NotifyError::StateCorrupt { path: path.clone(), reason: error.to_string() })?;
        if state.version != STATE_VERSION {
            return Err(NotifyError::StateCorrupt {
                path,
                reason: format!("format version {}, this notifier reads version {STATE_VERSION}", state.version),
            });
        }
        Ok(Some(state))
    }

    /// Writes `state` durably: a temporary file, fsync, rename over the
    /// state file, fsync of the directory (so the rename itself survives a
    /// power cut).
    pub fn save(&self, state: &NotifyState) -> Result<(), NotifyError> {
        let path = self.path();
        let temporary = self.dir.join(format!("{STATE_FILE}.tmp"));
        let bytes = serde_json::to_vec(state)
            .map_err(|error| NotifyError::StateCorrupt { path: path.clone(), reason: format!("encoding: {error}") })?;
        let mut file =
            std::fs::File::create(&temporary).map_err(|error| NotifyError::state(&temporary, "creating", error))?;
        file.write_all(&bytes).map_err(|error| NotifyError::state(&temporary, "writing", error))?;
        file.sync_all().map_err(|error| NotifyError::state(&temporary, "syncing", error))?;
        drop(file);
        std::fs::rename(&temporary, &path).map_err(|error| NotifyError::state(&path, "renaming into place", error))?;
        let dir = std::fs::File::open(&self.dir).map_err(|error| NotifyError::state(&self.dir, "opening", error))?;
        dir.sync_all().map_err(|error| NotifyError::state(&self.dir, "syncing", error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_state_reads_back_and_a_first_start_reads_none() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = StateStore::open(dir.path()).expect("open");
        assert_eq!(store.load().expect("load"), None);
        let mut state = NotifyState::listing(vec!["a".into(), "b".into()], false);
        state.in_flight = Some(InFlight {
            approval_id: "a".into(),
            source: PostSource::Listing,
            done: [1].into(),
            redelivery: false,
        });
        store.save(&state).expect("save");
        assert_eq!(store.load().expect("load"), Some(state));
        assert!(!dir.path().join(format!("{STATE_FILE}.tmp")).exists());
    }

    #[test]
    fn a_second_notifier_on_the_same_state_directory_is_refused_until_the_first_is_gone() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let first = StateStore::open(dir.path()).expect("open");
        let error = StateStore::open(dir.path()).expect_err("the directory is taken");
        assert_eq!(error.code(), "NOTIFY_STATE_LOCKED");
        drop(first);
        StateStore::open(dir.path()).expect("free again");
    }

    #[test]
    fn a_torn_or_foreign_state_file_is_refused_not_reset() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = StateStore::open(dir.path()).expect("open");
        std::fs::write(store.path(), b"{\"version\":1,\"cur").expect("write");
        assert!(matches!(store.load(), Err(NotifyError::StateCorrupt { .. })));
        let mut state = NotifyState::listing(Vec::new(), false);
        state.version = 7;
        std::fs::write(store.path(), serde_json::to_vec(&state).expect("encode")).expect("write");
        let error = store.load().expect_err("version 7");
        assert_eq!(error.code(), "NOTIFY_STATE_CORRUPT");
    }

    #[test]
    fn a_relisting_posts_everything_pending_as_redeliveries_from_the_trail_start_keeping_the_counts() {
        let mut state = NotifyState::listing(vec!["old".into()], false);
        state.cursor = 900;
        state.listed.insert("seen".into());
        state.counts.delivered = 7;
        let relisted = state.relisted(vec!["a".into(), "b".into()]);
        assert_eq!(relisted.to_post, vec!["a".to_string(), "b".to_string()]);
        assert!(relisted.to_post_redelivery);
        assert_eq!((relisted.cursor, relisted.listed.len(), relisted.in_flight.clone()), (0, 0, None));
        assert_eq!((relisted.counts.delivered, relisted.counts.relisted), (7, 1));
    }

    #[test]
    fn only_the_creation_of_an_approval_not_listed_asks_for_a_post() {
        let mut state = NotifyState::listing(Vec::new(), false);
        state.listed.insert("listed".into());
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("new".into()), 3), Some("new".to_string()));
        assert_eq!(state.cursor, 0, "the cursor waits for the post to finish");
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("listed".into()), 4), None);
        assert!(state.listed.is_empty(), "a listed approval leaves the set once its creation is seen");
        assert_eq!(state.on_event("capability.approved", Some("new".into()), 5), None);
        assert_eq!(state.on_event("capability.requested", None, 6), None);
        assert_eq!(state.cursor, 6);
    }

    #[test]
    fn finishing_a_listed_post_moves_the_listing_and_an_event_post_moves_the_cursor() {
        let mut state = NotifyState::listing(vec!["a".into(), "b".into()], false);
        state.in_flight = Some(InFlight {
            approval_id: "a".into(),
            source: PostSource::Listing,
            done: BTreeSet::new(),
            redelivery: false,
        });
        state.finish_in_flight();
        assert_eq!(state.to_post, vec!["b".to_string()]);
        assert!(state.listed.contains("a"));
        state.cursor = 5;
        state.in_flight = Some(InFlight {
            approval_id: "c".into(),
            source: PostSource::Event { cursor: 9 },
            done: BTreeSet::new(),
            redelivery: false,
        });
        state.finish_in_flight();
        assert_eq!((state.cursor, state.in_flight.clone()), (9, None));
    }
}
