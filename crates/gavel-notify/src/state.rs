//! The stored cursor: what the notifier has acknowledged, written to
//! `<state dir>/notify-state.json` atomically (temporary file, fsync,
//! rename, fsync of the directory), so a SIGKILL at any instant leaves the
//! previous state or the next one, never a torn file.

use std::collections::{BTreeMap, BTreeSet};
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

/// The format version written; version 1 (one post in flight, the listing
/// as a list of ids) is read and converted; another version is refused,
/// not guessed at.
pub const STATE_VERSION: u32 = 2;

/// Where a post came from, and so what finishing it moves on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum PostSource {
    /// An approval of the listing (`to_post`): finishing removes it there.
    Listing,
    /// A `capability.approval_requested` event: finishing lets the cursor
    /// pass it (once every earlier event post finished too).
    Event {
        /// The event's cursor.
        cursor: u64,
    },
}

/// A post in flight: written before its first request leaves for a
/// webhook, cleared once every webhook acknowledged (or refused) it.
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
    /// The webhooks a request of it was sent to (recorded before the
    /// request leaves): of those not in `done`, nobody knows whether they
    /// saw it, so a redelivery marks its post to them.
    #[serde(default)]
    pub sent: BTreeSet<usize>,
    /// Whether the post is itself a redelivery (a re-listing after the
    /// cursor fell behind retention cannot know what was posted before):
    /// then every webhook's post is marked.
    pub redelivery: bool,
    /// Whom it is queued under ([`crate::webhook::requester_key`]).
    #[serde(default)]
    pub requester: String,
}

/// An approval of a listing still to post.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedPost {
    /// Its place in the listing (requested time, then id): its requester's
    /// posts go in this order.
    pub position: u64,
    /// Whom it is queued under: the approval's actor, `kind:id`.
    pub requester: String,
    /// Whether the trail showed its creation while it waited: then, once
    /// posted, it need not be remembered in `listed`.
    pub seen: bool,
}

/// Posts counted since the state was created, kept with the cursor so they
/// survive restarts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Posts a webhook acknowledged with a 2xx.
    pub delivered: u64,
    /// Of those, redeliveries (a post in flight at a crash, or a re-listing).
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

/// How far the trail has been read, in memory only: the last event read
/// and the cursors of the event posts not finished (queued or in flight).
/// The stored cursor is the last event before every one of those.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrailWindow {
    read: u64,
    open: BTreeSet<u64>,
}

impl TrailWindow {
    /// The cursor up to which every event is handled.
    fn handled(&self) -> u64 {
        self.open.first().map_or(self.read, |first| first - 1)
    }
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
    /// Approvals of a listing still to post, by id.
    pub to_post: BTreeMap<String, ListedPost>,
    /// Whether the `to_post` approvals are redeliveries (a re-listing).
    pub to_post_redelivery: bool,
    /// Approvals a listing posted whose creation event the trail has not
    /// shown yet: when it does, the event posts nothing.
    pub listed: BTreeSet<String>,
    /// Approvals of trail events after `cursor` whose post finished, with
    /// their event's cursor: a trail read again from `cursor` (after a
    /// restart) posts them not again. Dropped once the cursor passes them.
    #[serde(default)]
    pub posted: BTreeMap<String, u64>,
    /// The posts in flight (at most [`crate::limits::APPROVALS_IN_FLIGHT_MAX`]).
    pub in_flight: Vec<InFlight>,
    /// What happened to the posts so far.
    pub counts: Counts,
    /// How far the trail has been read; not stored.
    #[serde(skip)]
    window: TrailWindow,
}

/// The state file of version 1, read to be converted.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NotifyStateV1 {
    cursor: u64,
    to_post: Vec<String>,
    to_post_redelivery: bool,
    listed: BTreeSet<String>,
    in_flight: Option<InFlight>,
    counts: Counts,
}

impl From<NotifyStateV1> for NotifyState {
    fn from(old: NotifyStateV1) -> NotifyState {
        let to_post = old
            .to_post
            .into_iter()
            .enumerate()
            .map(|(position, id)| (id, ListedPost { position: position as u64, requester: String::new(), seen: false }))
            .collect();
        // Version 1 posted to the webhooks one after the other, so of a post
        // in flight only the first webhook that had not answered may have
        // seen it.
        let in_flight = old
            .in_flight
            .map(|mut post| {
                let first_pending = (0..).find(|index| !post.done.contains(index)).unwrap_or_default();
                post.sent = BTreeSet::from([first_pending]);
                post
            })
            .into_iter()
            .collect();
        let mut state = NotifyState {
            version: STATE_VERSION,
            cursor: old.cursor,
            to_post,
            to_post_redelivery: old.to_post_redelivery,
            listed: old.listed,
            posted: BTreeMap::new(),
            in_flight,
            counts: old.counts,
            window: TrailWindow::default(),
        };
        state.rewind();
        state
    }
}

impl NotifyState {
    /// A fresh state for a first listing of `approvals` (id and requester,
    /// in listing order).
    pub fn listing(approvals: Vec<(String, String)>, redelivery: bool) -> NotifyState {
        let to_post = approvals
            .into_iter()
            .enumerate()
            .map(|(position, (id, requester))| (id, ListedPost { position: position as u64, requester, seen: false }))
            .collect();
        NotifyState {
            version: STATE_VERSION,
            cursor: 0,
            to_post,
            to_post_redelivery: redelivery,
            listed: BTreeSet::new(),
            posted: BTreeMap::new(),
            in_flight: Vec::new(),
            counts: Counts::default(),
            window: TrailWindow::default(),
        }
    }

    /// The state after the cursor fell behind retention: a fresh listing of
    /// `approvals`, each to be posted as a redelivery, the trail read
    /// again from its start; the counts carry over, `relisted` counts it.
    pub fn relisted(&self, approvals: Vec<(String, String)>) -> NotifyState {
        let mut state = NotifyState::listing(approvals, true);
        state.counts = Counts { relisted: self.counts.relisted + 1, ..self.counts.clone() };
        state
    }

    /// Reads the trail again from the stored cursor: the events after it
    /// are read anew; those of the posts in flight stay open until they finish.
    pub fn rewind(&mut self) {
        let open = self
            .in_flight
            .iter()
            .filter_map(|post| match post.source {
                PostSource::Event { cursor } => Some(cursor),
                PostSource::Listing => None,
            })
            .collect();
        self.window = TrailWindow { read: self.cursor, open };
    }

    /// The last trail event read: a stream that broke resumes after it.
    pub fn read_position(&self) -> u64 {
        self.window.read
    }

    /// The listing's approvals not in flight, in listing order, with their requesters.
    pub fn listing_to_queue(&self) -> Vec<(String, String)> {
        let mut listed: Vec<(&String, &ListedPost)> =
            self.to_post.iter().filter(|(id, _)| !self.in_flight.iter().any(|post| &post.approval_id == *id)).collect();
        listed.sort_by_key(|(_, post)| post.position);
        listed.into_iter().map(|(id, post)| (id.clone(), post.requester.clone())).collect()
    }

    /// What a trail event at `cursor` asks for: the approval to post (the
    /// cursor passes it once its post finishes), or nothing, and the
    /// cursor may pass it now. Only the creation of an approval asks for a
    /// post, and only of one not posted (or being posted) already: by the
    /// listing (it leaves `listed` then), or before a restart (`posted`,
    /// `in_flight`). An event read before is passed over.
    pub fn on_event(&mut self, event_type: &str, approval_id: Option<String>, cursor: u64) -> Option<String> {
        if cursor <= self.window.read {
            return None;
        }
        self.window.read = cursor;
        let created = approval_id.filter(|_| event_type == APPROVAL_REQUESTED);
        let to_post = created.filter(|approval_id| self.unposted(approval_id));
        if to_post.is_some() {
            self.window.open.insert(cursor);
        }
        self.settle_cursor();
        to_post
    }

    /// Whether the creation of `approval_id`, just read in the trail, still
    /// needs a post.
    fn unposted(&mut self, approval_id: &str) -> bool {
        if self.listed.remove(approval_id) {
            return false;
        }
        if let Some(listed) = self.to_post.get_mut(approval_id) {
            listed.seen = true;
            return false;
        }
        !self.posted.contains_key(approval_id) && !self.in_flight.iter().any(|post| post.approval_id == approval_id)
    }

    /// The cursor moves to the last event before every open one, and what
    /// `posted` kept for events it passed is dropped.
    fn settle_cursor(&mut self) {
        let handled = self.window.handled();
        if handled > self.cursor {
            self.cursor = handled;
            let cursor = self.cursor;
            self.posted.retain(|_, event| *event > cursor);
        }
    }

    /// A request of the post of `approval_id` is about to leave for
    /// `webhook`: the post is in flight (recorded with where it came from),
    /// and that webhook may see it from now on.
    pub fn sending(
        &mut self,
        approval_id: &str,
        source: &PostSource,
        requester: &str,
        redelivery: bool,
        webhook: usize,
    ) {
        let index = match self.in_flight.iter().position(|post| post.approval_id == approval_id) {
            Some(index) => index,
            None => {
                self.in_flight.push(InFlight {
                    approval_id: approval_id.to_string(),
                    source: source.clone(),
                    done: BTreeSet::new(),
                    sent: BTreeSet::new(),
                    redelivery,
                    requester: requester.to_string(),
                });
                self.in_flight.len() - 1
            }
        };
        self.in_flight[index].sent.insert(webhook);
    }

    /// `webhook` answered the post of `approval_id` (or it was given up there).
    pub fn answered(&mut self, approval_id: &str, webhook: usize) {
        if let Some(post) = self.in_flight.iter_mut().find(|post| post.approval_id == approval_id) {
            post.done.insert(webhook);
        }
    }

    /// Every webhook answered the post of `approval_id`: it leaves the
    /// posts in flight; a listed one leaves the listing (and is remembered
    /// in `listed` until the trail shows its creation), an event's is
    /// remembered in `posted` until the cursor passes it.
    pub fn finish(&mut self, approval_id: &str, source: &PostSource) {
        self.in_flight.retain(|post| post.approval_id != approval_id);
        match source {
            PostSource::Listing => {
                if self.to_post.remove(approval_id).is_some_and(|listed| !listed.seen) {
                    self.listed.insert(approval_id.to_string());
                }
            }
            PostSource::Event { cursor } => {
                self.window.open.remove(cursor);
                self.posted.insert(approval_id.to_string(), *cursor);
                self.settle_cursor();
            }
        }
    }

    /// The approval was no longer pending when its post came up: nothing
    /// was posted, and the listing or the cursor moves on.
    pub fn skip(&mut self, approval_id: &str, source: &PostSource) {
        self.in_flight.retain(|post| post.approval_id != approval_id);
        match source {
            PostSource::Listing => {
                self.to_post.remove(approval_id);
            }
            PostSource::Event { cursor } => {
                self.window.open.remove(cursor);
                self.settle_cursor();
            }
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
        let corrupt =
            |error: serde_json::Error| NotifyError::StateCorrupt { path: path.clone(), reason: error.to_string() };
        let value: serde_json::Value = serde_json::from_reader(std::io::BufReader::new(file)).map_err(corrupt)?;
        let mut state = match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(1) => NotifyState::from(NotifyStateV1::deserialize(value).map_err(corrupt)?),
            Some(version) if version == u64::from(STATE_VERSION) => NotifyState::deserialize(value).map_err(corrupt)?,
            version => {
                let version = version.map_or_else(|| "none".to_string(), |version| version.to_string());
                return Err(NotifyError::StateCorrupt {
                    path,
                    reason: format!("format version {version}, this notifier reads versions 1 and {STATE_VERSION}"),
                });
            }
        };
        state.rewind();
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

    fn approvals(ids: &[&str]) -> Vec<(String, String)> {
        ids.iter().map(|id| (id.to_string(), "user:alice".to_string())).collect()
    }

    fn event(cursor: u64) -> PostSource {
        PostSource::Event { cursor }
    }

    #[test]
    fn a_saved_state_reads_back_and_a_first_start_reads_none() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = StateStore::open(dir.path()).expect("open");
        assert_eq!(store.load().expect("load"), None);
        let mut state = NotifyState::listing(approvals(&["a", "b"]), false);
        state.sending("a", &PostSource::Listing, "user:alice", false, 1);
        state.answered("a", 1);
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
    fn a_version_1_state_file_reads_back_with_its_one_post_in_flight_marked_where_it_was() {
        let dir = tempfile::tempdir().expect("temporary directory");
        let store = StateStore::open(dir.path()).expect("open");
        let old = serde_json::json!({
            "version": 1, "cursor": 41, "toPost": ["x", "y"], "toPostRedelivery": false, "listed": ["w"],
            "inFlight": { "approvalId": "x", "source": { "kind": "listing" }, "done": [0], "redelivery": false },
            "counts": { "delivered": 3, "redelivered": 0, "refused": 0, "abandoned": 0, "skipped": 1, "relisted": 0 },
        });
        std::fs::write(store.path(), old.to_string()).expect("write");
        let state = store.load().expect("load").expect("a state");
        assert_eq!((state.version, state.cursor, state.read_position()), (STATE_VERSION, 41, 41));
        assert_eq!(state.to_post.keys().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!((state.to_post["x"].position, state.to_post["y"].position), (0, 1));
        assert_eq!(state.in_flight.len(), 1);
        // Version 1 posted to the webhooks in order: webhook 0 had answered,
        // so only webhook 1 may have seen it.
        assert_eq!(state.in_flight[0].sent, BTreeSet::from([1]));
        assert_eq!(state.listing_to_queue(), [("y".to_string(), String::new())]);
        assert_eq!((state.counts.delivered, state.listed.len()), (3, 1));
    }

    #[test]
    fn a_relisting_posts_everything_pending_as_redeliveries_from_the_trail_start_keeping_the_counts() {
        let mut state = NotifyState::listing(approvals(&["old"]), false);
        state.cursor = 900;
        state.listed.insert("seen".into());
        state.posted.insert("done".into(), 950);
        state.counts.delivered = 7;
        let relisted = state.relisted(approvals(&["a", "b"]));
        assert_eq!(relisted.listing_to_queue(), approvals(&["a", "b"]));
        assert!(relisted.to_post_redelivery);
        assert_eq!((relisted.cursor, relisted.listed.len(), relisted.posted.len()), (0, 0, 0));
        assert!(relisted.in_flight.is_empty());
        assert_eq!((relisted.counts.delivered, relisted.counts.relisted), (7, 1));
    }

    #[test]
    fn only_the_creation_of_an_approval_not_listed_asks_for_a_post() {
        let mut state = NotifyState::listing(Vec::new(), false);
        state.listed.insert("listed".into());
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("new".into()), 3), Some("new".to_string()));
        assert_eq!(state.cursor, 2, "the cursor stops before the event until its post finishes");
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("listed".into()), 4), None);
        assert!(state.listed.is_empty(), "a listed approval leaves the set once its creation is seen");
        assert_eq!(state.on_event("capability.approved", Some("new".into()), 5), None);
        assert_eq!(state.on_event("capability.requested", None, 6), None);
        assert_eq!(state.cursor, 2);
        state.finish("new", &event(3));
        assert_eq!(state.cursor, 6);
        assert!(state.posted.is_empty(), "nothing is kept for events the cursor passed");
        // An event read before (a resumed stream repeating one) is passed over.
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("again".into()), 6), None);
    }

    #[test]
    fn the_cursor_waits_for_the_oldest_open_post_and_a_restart_posts_only_what_did_not_finish() {
        let mut state = NotifyState::listing(Vec::new(), false);
        for (cursor, id) in [(10, "a1"), (11, "a2"), (12, "b1"), (13, "a3")] {
            assert_eq!(state.on_event(APPROVAL_REQUESTED, Some(id.into()), cursor).as_deref(), Some(id));
        }
        // Served out of trail order (b1 before a2): the cursor stays before a1.
        state.sending("b1", &event(12), "user:bob", false, 0);
        state.answered("b1", 0);
        state.finish("b1", &event(12));
        state.sending("a1", &event(10), "user:alice", false, 0);
        assert_eq!(state.cursor, 9);
        assert_eq!(state.posted, BTreeMap::from([("b1".to_string(), 12)]));
        // A crash now: the trail is read again from cursor 9.
        let mut restarted: NotifyState =
            serde_json::from_slice(&serde_json::to_vec(&state).expect("encode")).expect("decode");
        restarted.rewind();
        assert_eq!(restarted.read_position(), 9);
        let again: Vec<Option<String>> = [(10, "a1"), (11, "a2"), (12, "b1"), (13, "a3")]
            .into_iter()
            .map(|(cursor, id)| restarted.on_event(APPROVAL_REQUESTED, Some(id.into()), cursor))
            .collect();
        assert_eq!(again, [None, Some("a2".to_string()), None, Some("a3".to_string())], "a1 is in flight, b1 posted");
        restarted.finish("a1", &event(10));
        restarted.skip("a2", &event(11));
        assert_eq!(restarted.cursor, 12, "b1 was posted, a3 is still open");
        assert!(restarted.posted.is_empty());
        restarted.finish("a3", &event(13));
        assert_eq!((restarted.cursor, restarted.in_flight.len()), (13, 0));
    }

    #[test]
    fn a_listed_post_leaves_the_listing_when_finished_and_is_remembered_only_until_its_creation_is_seen() {
        let mut state = NotifyState::listing(approvals(&["a", "b", "c"]), false);
        // The trail shows b's creation while b waits: b is not posted again,
        // and once posted it need not be remembered.
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("b".into()), 1), None);
        state.sending("a", &PostSource::Listing, "user:alice", false, 0);
        assert_eq!(state.listing_to_queue(), approvals(&["b", "c"]), "a is in flight");
        state.finish("a", &PostSource::Listing);
        state.finish("b", &PostSource::Listing);
        state.skip("c", &PostSource::Listing);
        assert!(state.to_post.is_empty());
        assert_eq!(state.listed, BTreeSet::from(["a".to_string()]));
        assert_eq!(state.on_event(APPROVAL_REQUESTED, Some("a".into()), 2), None);
        assert!(state.listed.is_empty());
        assert_eq!(state.cursor, 2);
    }

    #[test]
    fn posts_in_flight_record_where_they_were_sent_and_who_answered() {
        let mut state = NotifyState::listing(Vec::new(), false);
        state.on_event(APPROVAL_REQUESTED, Some("a".into()), 5);
        state.sending("a", &event(5), "user:alice", false, 0);
        state.sending("a", &event(5), "user:alice", false, 2);
        state.answered("a", 2);
        let post = &state.in_flight[0];
        assert_eq!((post.sent.clone(), post.done.clone()), (BTreeSet::from([0, 2]), BTreeSet::from([2])));
        assert_eq!((post.requester.as_str(), post.source.clone()), ("user:alice", event(5)));
    }
}
