//! The approver's desk's notifications: a process that follows the cluster
//! as one principal (`WatchEvents`, `ListApprovals`, `GetApproval` through
//! the SDK, `gavel-client`) and posts each new pending approval that
//! principal may read to webhooks: Slack-compatible JSON, or a generic JSON
//! signed with HMAC-SHA256 ([`webhook`]). Each post links to the approval in
//! the console.
//!
//! It holds no power: it reads what its principal's grant shows it (an
//! `approver`, scoped or not, or an `auditor`) and calls no RPC of its own.
//!
//! Delivery (docs/notifications.md): new approvals are queued per
//! requesting principal and taken off the queues round-robin
//! ([`queue::FairQueues`]), so one principal's backlog delays another's
//! first post by about one post per principal with approvals waiting.
//! Several approvals are posted at once ([`limits::APPROVALS_IN_FLIGHT_MAX`]),
//! each webhook at its own pace ([`pace::Pace`]: a token bucket, and a bound
//! on its requests outstanding); an approval is taken off the queues only
//! when every webhook has a token for it. A post retries with backoff
//! ([`limits`]).
//!
//! The state file ([`state`]) holds the trail cursor up to which every
//! event was handled, the posts in flight and the webhooks each was sent
//! to. After a restart the notifier reads the trail again from the cursor
//! and posts no approval twice, except the posts in flight at the crash,
//! sent again with the same delivery id and `Gavel-Redelivery: 1` to the
//! webhooks they may have reached (docs/decisions.md).
//!
//! One task owns the state ([`Notifier::run`]): it reads the trail, fills
//! the queues, takes approvals off them and writes the state file; each
//! approval's post is a task of its own that reports back to it. Logs and
//! error messages show a webhook only as [`webhook::redacted_url`].
//!
//! Depends on `gavel-client` (never on openraft, sled, the server or the
//! core). Key types: [`Notifier`], [`NotifierConfig`], [`state::NotifyState`],
//! [`webhook::Webhook`], [`queue::FairQueues`], [`pace::Pace`].

pub mod error;
pub mod limits;
pub mod pace;
pub mod queue;
pub mod state;
pub mod webhook;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use gavel_client::{pb, Client};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

pub use error::NotifyError;
use limits::{
    APPROVALS_IN_FLIGHT_MAX, CURSOR_SAVE_EVENTS_MAX, GENERIC_POSTS_PER_SECOND, LISTED_APPROVALS_MAX,
    LIST_PAGE_APPROVALS, POSTS_PER_SECOND_MAX, POSTS_PER_SECOND_MIN, QUEUED_APPROVALS_MAX, RECONNECT_PAUSE,
    SLACK_POSTS_PER_SECOND, WEBHOOKS_MAX,
};
use pace::Pace;
use queue::FairQueues;
pub use state::APPROVAL_REQUESTED;
use state::{NotifyState, PostSource, StateStore};
use webhook::{actor_name, approval_link, Outcome, Poster, Webhook, WebhookKind};

/// The notifier's settings.
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    /// Where posts go, in order; at least one, at most [`WEBHOOKS_MAX`].
    pub webhooks: Vec<Webhook>,
    /// The console's URL; each post links to `<console>/approvals/<id>`.
    pub console_url: String,
    /// The directory of the state file.
    pub state_dir: PathBuf,
    /// Certificates (PEM) trusted for `https` webhooks besides the web
    /// PKI's roots: a private receiver's CA.
    pub webhook_ca_pem: Option<String>,
    /// Posts per second to each Slack webhook URL ([`SLACK_POSTS_PER_SECOND`] by default).
    pub slack_posts_per_second: f64,
    /// Posts per second to each generic webhook URL ([`GENERIC_POSTS_PER_SECOND`] by default).
    pub generic_posts_per_second: f64,
}

impl NotifierConfig {
    /// Settings with the default rates.
    pub fn new(webhooks: Vec<Webhook>, console_url: String, state_dir: PathBuf) -> NotifierConfig {
        NotifierConfig {
            webhooks,
            console_url,
            state_dir,
            webhook_ca_pem: None,
            slack_posts_per_second: SLACK_POSTS_PER_SECOND,
            generic_posts_per_second: GENERIC_POSTS_PER_SECOND,
        }
    }

    /// Checks the settings: the webhook count, the console URL and the rates.
    pub fn check(&self) -> Result<(), NotifyError> {
        if self.webhooks.is_empty() {
            return Err(NotifyError::Config("at least one --webhook is needed".to_string()));
        }
        if self.webhooks.len() > WEBHOOKS_MAX {
            return Err(NotifyError::Config(format!("{} webhooks given; at most {WEBHOOKS_MAX}", self.webhooks.len())));
        }
        for (flag, rate) in [
            ("--slack-posts-per-second", self.slack_posts_per_second),
            ("--generic-posts-per-second", self.generic_posts_per_second),
        ] {
            if !(POSTS_PER_SECOND_MIN..=POSTS_PER_SECOND_MAX).contains(&rate) {
                return Err(NotifyError::Config(format!(
                    "{flag} is {rate}; it must be between {POSTS_PER_SECOND_MIN:.6} (one an hour) and {POSTS_PER_SECOND_MAX}"
                )));
            }
        }
        webhook::parse_url("--console-url", &self.console_url).map(drop)
    }

    /// One pace per webhook, shared by the webhooks of one URL (they post
    /// to the same receiver).
    fn paces(&self) -> Vec<Arc<Pace>> {
        let mut by_url: HashMap<String, Arc<Pace>> = HashMap::new();
        self.webhooks
            .iter()
            .map(|webhook| {
                let rate = match webhook.kind {
                    WebhookKind::Slack => self.slack_posts_per_second,
                    WebhookKind::Generic => self.generic_posts_per_second,
                };
                by_url.entry(webhook.url()).or_insert_with(|| Arc::new(Pace::new(rate))).clone()
            })
            .collect()
    }
}

/// The approval if it is still pending and readable, else `None` (the
/// cluster answers `NOT_FOUND` for one that is gone or not readable).
async fn pending(client: &Client, approval_id: &str) -> Result<Option<pb::Approval>, NotifyError> {
    let request = pb::GetApprovalRequest { id: approval_id.to_string(), caller_now_ms: None };
    let answer = match client.get_approval(request).await {
        Ok(answer) => answer,
        Err(error) if error.code() == "NOT_FOUND" => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    Ok(answer.approval.filter(|approval| approval.status == pb::ApprovalStatus::Pending as i32))
}

/// Every pending approval in the principal's view, as its id and its
/// requester (the approval's actor, `kind:id`: a listing names no
/// principal), in the listing's order (requested time, then id).
async fn list_pending(client: &Client) -> Result<Vec<(String, String)>, NotifyError> {
    let mut approvals = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_approvals(pb::ListApprovalsRequest {
                status: Some(pb::ApprovalStatus::Pending as i32),
                limit: LIST_PAGE_APPROVALS,
                page_token: page_token.clone(),
                oldest_first: true,
                ..pb::ListApprovalsRequest::default()
            })
            .await?;
        approvals.extend(page.approvals.into_iter().map(|approval| {
            let requester = actor_name(approval.actor.as_ref());
            (approval.id, requester)
        }));
        if approvals.len() > LISTED_APPROVALS_MAX {
            return Err(NotifyError::ListingTooLarge(LISTED_APPROVALS_MAX));
        }
        if page.next_page_token.is_empty() {
            return Ok(approvals);
        }
        page_token = page.next_page_token;
    }
}

/// Whom the approval a trail event created is queued under: the principal
/// whose command created it, or its actor where the cluster names no
/// principal (a node started `--insecure`).
fn event_requester(event: &pb::Event) -> String {
    event
        .principal
        .clone()
        .filter(|principal| !principal.is_empty())
        .unwrap_or_else(|| actor_name(event.actor.as_ref()))
}

/// One approval's post, from the queues to every webhook.
#[derive(Debug, Clone)]
struct Job {
    approval_id: String,
    /// Whose queue it waited in.
    requester: String,
    source: PostSource,
    /// Webhooks that already answered it (a post resumed after a restart).
    done: BTreeSet<usize>,
    /// Webhooks its post goes to marked `Gavel-Redelivery: 1`: those a post
    /// in flight at a crash may have reached.
    marked: BTreeSet<usize>,
    /// Whether every webhook's post is marked (a re-listing's).
    relisted: bool,
}

impl Job {
    /// A first post of `approval_id`.
    fn new(approval_id: String, requester: String, source: PostSource, relisted: bool) -> Job {
        Job { approval_id, requester, source, done: BTreeSet::new(), marked: BTreeSet::new(), relisted }
    }
}

/// What a post's task reports to the task that owns the state.
enum Progress {
    /// A request is about to leave for `webhook`; `durable` is answered once
    /// the state file records it.
    Sending { job: u64, webhook: usize, durable: oneshot::Sender<()> },
    /// `webhook` answered the post (or it was given up there).
    Answered { job: u64, webhook: usize, outcome: Outcome, redelivery: bool },
    /// Every webhook answered the post.
    Finished { job: u64 },
    /// The approval was no longer pending (or readable): nothing was posted.
    Skipped { job: u64 },
    /// The cluster refused the principal: the notifier stops.
    Failed { error: NotifyError },
}

/// What every post's task shares.
struct Shared {
    client: Client,
    poster: Poster,
    webhooks: Vec<Webhook>,
    /// Each webhook's pace (the webhooks of one URL share one).
    paces: Vec<Arc<Pace>>,
    console_url: String,
}

/// The approvals on their way: the posts resumed after a restart (they go
/// first), the listing not queued yet, the per-requester queues, and the
/// posts in flight by job number.
#[derive(Default)]
struct Flow {
    resumed: VecDeque<Job>,
    listing: VecDeque<Job>,
    queues: FairQueues<Job>,
    in_flight: HashMap<u64, Job>,
    jobs_started: u64,
}

impl Flow {
    /// Where `state` left off.
    fn of(state: &NotifyState) -> Flow {
        let resumed = state
            .in_flight
            .iter()
            .map(|post| Job {
                approval_id: post.approval_id.clone(),
                requester: post.requester.clone(),
                source: post.source.clone(),
                done: post.done.clone(),
                marked: post.sent.difference(&post.done).copied().collect(),
                relisted: post.redelivery,
            })
            .collect();
        let listing = state
            .listing_to_queue()
            .into_iter()
            .map(|(approval_id, requester)| {
                Job::new(approval_id, requester, PostSource::Listing, state.to_post_redelivery)
            })
            .collect();
        Flow { resumed, listing, ..Flow::default() }
    }

    /// Approvals queued or in flight: what [`QUEUED_APPROVALS_MAX`] bounds.
    fn outstanding(&self) -> usize {
        self.resumed.len() + self.queues.len() + self.in_flight.len()
    }

    /// Whether another approval may be queued.
    fn has_room(&self) -> bool {
        self.outstanding() < QUEUED_APPROVALS_MAX
    }

    /// Moves the listing's approvals into the queues while they have room.
    fn queue_listing(&mut self) {
        while self.has_room() {
            let Some(job) = self.listing.pop_front() else { return };
            let requester = job.requester.clone();
            self.queues.push(&requester, job);
        }
    }

    /// Whether an approval waits to be taken off.
    fn has_waiting(&self) -> bool {
        !self.resumed.is_empty() || !self.queues.is_empty()
    }

    /// The next approval to post, numbered: a resumed post, else the one
    /// whose requester's turn it is.
    fn take(&mut self) -> Option<(u64, Job)> {
        let job = self.resumed.pop_front().or_else(|| self.queues.pop())?;
        self.jobs_started += 1;
        self.in_flight.insert(self.jobs_started, job.clone());
        Some((self.jobs_started, job))
    }
}

/// Waits for a place among the approvals in flight, then for a token of
/// every webhook: the moment the next approval may be taken off the
/// queues. Taking it only then (not earlier, to wait for the tokens in
/// flight) lets an approval queued meanwhile by a principal with nothing
/// else waiting go next.
async fn take_turn(slots: Arc<Semaphore>, shared: Arc<Shared>) -> OwnedSemaphorePermit {
    let slot = slots.acquire_owned().await.expect("the semaphore is never closed");
    for pace in &shared.paces {
        pace.token().await;
    }
    slot
}

/// Posts one approval to every webhook that has not answered it, all at
/// once, if it is still pending; reports each step to the task that owns
/// the state. Holds `_slot`, its place among the approvals in flight, until
/// it is done; each webhook's token for its first attempt was taken with
/// the slot ([`take_turn`]) and is given back when unused.
async fn post(
    shared: Arc<Shared>,
    job_id: u64,
    job: Job,
    _slot: OwnedSemaphorePermit,
    reports: mpsc::UnboundedSender<Progress>,
) {
    let approval = loop {
        match pending(&shared.client, &job.approval_id).await {
            Ok(approval) => break approval,
            // The SDK already retried for its whole budget; the post waits
            // for the cluster rather than stop the notifier.
            Err(NotifyError::Cluster(error)) if error.code() == "UNAVAILABLE" => {
                tracing::warn!(
                    code = "UNAVAILABLE", %error, approval = %job.approval_id, "cluster unreachable; trying again"
                );
                tokio::time::sleep(RECONNECT_PAUSE).await;
            }
            Err(error) => {
                let _ = reports.send(Progress::Failed { error });
                return;
            }
        }
    };
    let Some(approval) = approval else {
        tracing::info!(approval = %job.approval_id, "no longer pending (or no longer readable): not posted");
        shared.paces.iter().for_each(|pace| pace.give_back());
        let _ = reports.send(Progress::Skipped { job: job_id });
        return;
    };
    let link = approval_link(&shared.console_url, &approval.id);
    let (job, approval, link, reports_to, poster) = (&job, &approval, &link, &reports, &shared.poster);
    let posts = shared.webhooks.iter().zip(&shared.paces).enumerate().map(|(index, (webhook, pace))| async move {
        if job.done.contains(&index) {
            pace.give_back();
            return;
        }
        let redelivery = job.relisted || job.marked.contains(&index);
        // Recorded before the request leaves: a crash from here on leaves
        // the post marked for redelivery to this webhook.
        let (durable, written) = oneshot::channel();
        if reports_to.send(Progress::Sending { job: job_id, webhook: index, durable }).is_err()
            || written.await.is_err()
        {
            return;
        }
        let outcome = poster.deliver_paced(pace, true, webhook, approval, link, redelivery).await;
        log_outcome(webhook, &approval.id, redelivery, &outcome);
        let _ = reports_to.send(Progress::Answered { job: job_id, webhook: index, outcome, redelivery });
    });
    futures::future::join_all(posts).await;
    let _ = reports.send(Progress::Finished { job: job_id });
}

/// One log line per webhook's answer; the webhook as its redacted URL.
fn log_outcome(webhook: &Webhook, approval_id: &str, redelivery: bool, outcome: &Outcome) {
    let (kind, url) = (webhook.kind.name(), webhook.redacted_url());
    match outcome {
        Outcome::Delivered => {
            tracing::info!(webhook = kind, url = %url, approval = %approval_id, redelivery, "posted");
        }
        Outcome::Refused(status) => tracing::error!(
            code = "NOTIFY_POST_REFUSED", webhook = kind, url = %url, approval = %approval_id, status,
            "the webhook refused the post for good; skipped"
        ),
        Outcome::Abandoned(why) => tracing::error!(
            code = "NOTIFY_POST_ABANDONED", webhook = kind, url = %url, approval = %approval_id, why = %why,
            "the post kept failing past its retry limits; skipped"
        ),
    }
}

/// A pending step of the delivery loop, boxed to be held across its turns.
type Waiting<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Follows the cluster and posts pending approvals; see the crate docs.
pub struct Notifier {
    shared: Arc<Shared>,
    store: StateStore,
    state: NotifyState,
}

impl Notifier {
    /// A notifier with `client`'s credentials, its state loaded from (or,
    /// on a first start, created by listing into) the state directory.
    pub async fn start(client: Client, config: NotifierConfig) -> Result<Notifier, NotifyError> {
        config.check()?;
        let poster = Poster::with_roots(config.webhook_ca_pem.as_deref())?;
        let store = StateStore::open(&config.state_dir)?;
        let state = match store.load()? {
            Some(state) => {
                tracing::info!(
                    cursor = state.cursor,
                    to_post = state.to_post.len(),
                    in_flight = state.in_flight.len(),
                    "notifier resumes from its stored cursor"
                );
                state
            }
            None => {
                let approvals = list_pending(&client).await?;
                tracing::info!(pending = approvals.len(), "first start: posting the approvals pending now");
                let state = NotifyState::listing(approvals, false);
                store.save(&state)?;
                state
            }
        };
        let paces = config.paces();
        let shared =
            Arc::new(Shared { client, poster, webhooks: config.webhooks, paces, console_url: config.console_url });
        Ok(Notifier { shared, store, state })
    }

    /// What the notifier has stored so far.
    pub fn state(&self) -> &NotifyState {
        &self.state
    }

    /// Runs until `shutdown` resolves (the cursor is then saved; posts in
    /// flight stay recorded and are redelivered at the next start), or
    /// until the cluster refuses the principal or the state file cannot be
    /// written (an error: the process exits and its supervisor starts it
    /// again, from the stored cursor). While no node answers, it waits and
    /// tries again every [`RECONNECT_PAUSE`].
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<NotifyState, NotifyError> {
        tokio::pin!(shutdown);
        tokio::select! {
            outcome = self.follow() => outcome.map(|()| self.state.clone()),
            () = &mut shutdown => {
                self.store.save(&self.state)?;
                Ok(self.state)
            }
        }
    }

    async fn follow(&mut self) -> Result<(), NotifyError> {
        loop {
            let outcome = match self.deliver().await {
                Err(NotifyError::Cluster(error)) if error.code() == "OUT_OF_RANGE" => self.relist(&error).await,
                other => other,
            };
            match outcome {
                Ok(()) => {}
                // The SDK already retried for its whole budget; the
                // notifier keeps waiting for the cluster rather than exit.
                Err(NotifyError::Cluster(error)) if error.code() == "UNAVAILABLE" => {
                    tracing::warn!(code = "UNAVAILABLE", %error, "cluster unreachable; trying again");
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The stored cursor is not in the trail: retention dropped the events
    /// after it, or it is ahead of the trail (a cluster restored from an
    /// older backup, a state directory moved to another cluster). The
    /// pending approvals are listed again and each is posted as a
    /// redelivery (it may have been posted before). Never a silent skip.
    async fn relist(&mut self, error: &gavel_client::Error) -> Result<(), NotifyError> {
        tracing::error!(
            code = "NOTIFY_CURSOR_DROPPED", cursor = self.state.cursor, %error,
            "the stored cursor is not in the trail (dropped by retention, or ahead of it); listing the \
             pending approvals again and posting each as a redelivery"
        );
        let approvals = list_pending(&self.shared.client).await?;
        self.state = self.state.relisted(approvals);
        self.store.save(&self.state)
    }

    /// Posts the approvals resumed and listed in the state, follows the
    /// trail from the cursor and posts what it asks for, fairly across
    /// requesters and at each webhook's pace; returns only with an error
    /// (the trail refused the cursor, the principal was refused, the state
    /// file could not be written). The posts in flight then stop here and
    /// stay recorded in the state, to be resumed.
    async fn deliver(&mut self) -> Result<(), NotifyError> {
        self.state.rewind();
        let mut flow = Flow::of(&self.state);
        let (reports, mut progress) = mpsc::unbounded_channel();
        let slots = Arc::new(Semaphore::new(APPROVALS_IN_FLIGHT_MAX));
        let mut tasks = tokio::task::JoinSet::new();
        let mut events = Some(self.shared.client.watch_events(self.state.read_position(), None));
        let mut reconnect: Option<Pin<Box<tokio::time::Sleep>>> = None;
        let mut turn: Option<Waiting<OwnedSemaphorePermit>> = None;
        let mut unsaved_events = 0u64;
        let mut full = false;
        loop {
            flow.queue_listing();
            if turn.is_none() && flow.has_waiting() {
                turn = Some(Box::pin(take_turn(slots.clone(), self.shared.clone())));
            }
            let room = flow.has_room();
            if room == full {
                full = !room;
                if full {
                    tracing::warn!(
                        code = "NOTIFY_QUEUE_FULL",
                        queued = flow.outstanding(),
                        "the queues hold {QUEUED_APPROVALS_MAX} approvals: no further events are read until they \
                         drain (none is dropped: the events wait in the trail)"
                    );
                } else {
                    tracing::info!(queued = flow.outstanding(), "the queues have room again: reading events");
                }
            }
            tokio::select! {
                Some(report) = progress.recv() => {
                    // Every report that is there is taken in, then the state
                    // is written once for all of them.
                    let mut durable = Vec::new();
                    let mut next = Some(report);
                    while let Some(report) = next {
                        durable.extend(self.on_progress(&mut flow, report)?);
                        next = progress.try_recv().ok();
                    }
                    self.store.save(&self.state)?;
                    unsaved_events = 0;
                    for written in durable {
                        let _ = written.send(());
                    }
                }
                Some(joined) = tasks.join_next() => {
                    if let Err(error) = joined {
                        if error.is_panic() {
                            std::panic::resume_unwind(error.into_panic());
                        }
                    }
                }
                slot = async { turn.as_mut().expect("guarded by is_some").await }, if turn.is_some() => {
                    turn = None;
                    match flow.take() {
                        Some((job_id, job)) => {
                            tasks.spawn(post(self.shared.clone(), job_id, job, slot, reports.clone()));
                        }
                        None => self.shared.paces.iter().for_each(|pace| pace.give_back()),
                    }
                }
                event = async { events.as_mut().expect("guarded by is_some").recv().await },
                    if room && events.is_some() =>
                {
                    match event {
                        Some(Ok(event)) => {
                            let requester = event_requester(&event);
                            let cursor = event.cursor;
                            match self.state.on_event(&event.r#type, event.approval_id, cursor) {
                                Some(approval_id) => {
                                    let source = PostSource::Event { cursor };
                                    let job = Job::new(approval_id, requester.clone(), source, false);
                                    flow.queues.push(&requester, job);
                                }
                                None => {
                                    unsaved_events += 1;
                                    if unsaved_events >= CURSOR_SAVE_EVENTS_MAX {
                                        self.store.save(&self.state)?;
                                        unsaved_events = 0;
                                    }
                                }
                            }
                        }
                        Some(Err(error)) if error.code() != "UNAVAILABLE" => return Err(error.into()),
                        ended => {
                            // The SDK already retried for its whole budget; the
                            // trail is followed again after a pause, from the
                            // last event read, while the posts go on.
                            let error = match ended {
                                Some(Err(error)) => error,
                                _ => gavel_client::Error::Unavailable("the audit stream ended".to_string()),
                            };
                            tracing::warn!(code = "UNAVAILABLE", %error, "cluster unreachable; trying again");
                            events = None;
                            reconnect = Some(Box::pin(tokio::time::sleep(RECONNECT_PAUSE)));
                        }
                    }
                }
                () = async { reconnect.as_mut().expect("guarded by is_some").await }, if reconnect.is_some() => {
                    reconnect = None;
                    events = Some(self.shared.client.watch_events(self.state.read_position(), None));
                }
            }
        }
    }

    /// Takes in one report of a post's task; a request about to leave
    /// returns the sender to answer once the state is written.
    fn on_progress(&mut self, flow: &mut Flow, report: Progress) -> Result<Option<oneshot::Sender<()>>, NotifyError> {
        match report {
            Progress::Failed { error } => return Err(error),
            Progress::Sending { job, webhook, durable } => {
                if let Some(job) = flow.in_flight.get(&job) {
                    self.state.sending(&job.approval_id, &job.source, &job.requester, job.relisted, webhook);
                }
                return Ok(Some(durable));
            }
            Progress::Answered { job, webhook, outcome, redelivery } => {
                if let Some(job) = flow.in_flight.get(&job) {
                    self.state.answered(&job.approval_id, webhook);
                }
                let counts = &mut self.state.counts;
                match outcome {
                    Outcome::Delivered => {
                        counts.delivered += 1;
                        counts.redelivered += u64::from(redelivery);
                    }
                    Outcome::Refused(_) => counts.refused += 1,
                    Outcome::Abandoned(_) => counts.abandoned += 1,
                }
            }
            Progress::Finished { job } => {
                if let Some(job) = flow.in_flight.remove(&job) {
                    self.state.finish(&job.approval_id, &job.source);
                }
            }
            Progress::Skipped { job } => {
                if let Some(job) = flow.in_flight.remove(&job) {
                    self.state.skip(&job.approval_id, &job.source);
                    self.state.counts.skipped += 1;
                }
            }
        }
        Ok(None)
    }
}
