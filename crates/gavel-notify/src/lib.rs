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
//! Delivery: a post retries with backoff ([`limits`]); the state file
//! ([`state`]) holds the trail cursor up to which every post was
//! acknowledged and the post in flight. After a restart the notifier
//! resumes from the cursor and posts no approval twice, except the post in
//! flight at the crash, sent again with the same delivery id and
//! `Gavel-Redelivery: 1` (docs/decisions.md).
//!
//! Depends on `gavel-client` (never on openraft, sled, the server or the
//! core). Key types: [`Notifier`], [`NotifierConfig`], [`state::NotifyState`],
//! [`webhook::Webhook`].

pub mod error;
pub mod limits;
pub mod state;
pub mod webhook;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;

use gavel_client::{pb, Client};

pub use error::NotifyError;
use limits::{CURSOR_SAVE_EVENTS_MAX, LISTED_APPROVALS_MAX, LIST_PAGE_APPROVALS, RECONNECT_PAUSE, WEBHOOKS_MAX};
pub use state::APPROVAL_REQUESTED;
use state::{InFlight, NotifyState, PostSource, StateStore};
use webhook::{approval_link, Outcome, Poster, Webhook};

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
}

impl NotifierConfig {
    /// Checks the settings: the webhook count and the console URL.
    pub fn check(&self) -> Result<(), NotifyError> {
        if self.webhooks.is_empty() {
            return Err(NotifyError::Config("at least one --webhook is needed".to_string()));
        }
        if self.webhooks.len() > WEBHOOKS_MAX {
            return Err(NotifyError::Config(format!("{} webhooks given; at most {WEBHOOKS_MAX}", self.webhooks.len())));
        }
        webhook::parse_url("--console-url", &self.console_url).map(drop)
    }
}

/// The approval if it is still pending and readable, else `None`.
async fn pending(client: &Client, approval_id: &str) -> Result<Option<pb::Approval>, NotifyError> {
    let answer =
        client.get_approval(pb::GetApprovalRequest { id: approval_id.to_string(), caller_now_ms: None }).await?;
    Ok(answer.approval.filter(|approval| approval.status == pb::ApprovalStatus::Pending as i32))
}

/// The ids of every pending approval in the principal's view, in the
/// listing's order (requested time, then id).
async fn list_pending(client: &Client) -> Result<Vec<String>, NotifyError> {
    let mut ids = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_approvals(pb::ListApprovalsRequest {
                status: Some(pb::ApprovalStatus::Pending as i32),
                limit: LIST_PAGE_APPROVALS,
                page_token: page_token.clone(),
                ..pb::ListApprovalsRequest::default()
            })
            .await?;
        ids.extend(page.approvals.into_iter().map(|approval| approval.id));
        if ids.len() > LISTED_APPROVALS_MAX {
            return Err(NotifyError::ListingTooLarge(LISTED_APPROVALS_MAX));
        }
        if page.next_page_token.is_empty() {
            return Ok(ids);
        }
        page_token = page.next_page_token;
    }
}

/// Which posts of one approval carry `Gavel-Redelivery: 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Redelivery {
    /// None: a first post.
    None,
    /// The first webhook that had not answered when the process stopped:
    /// the one the post may have reached.
    Interrupted,
    /// Every webhook: a re-listing cannot tell what was posted before.
    All,
}

/// Follows the cluster and posts pending approvals; see the crate docs.
pub struct Notifier {
    client: Client,
    config: NotifierConfig,
    store: StateStore,
    poster: Poster,
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
                    in_flight = state.in_flight.as_ref().map(|post| post.approval_id.as_str()),
                    "notifier resumes from its stored cursor"
                );
                state
            }
            None => {
                let ids = list_pending(&client).await?;
                tracing::info!(pending = ids.len(), "first start: posting the approvals pending now");
                let state = NotifyState::listing(ids, false);
                store.save(&state)?;
                state
            }
        };
        Ok(Notifier { client, config, store, poster, state })
    }

    /// What the notifier has stored so far.
    pub fn state(&self) -> &NotifyState {
        &self.state
    }

    /// Runs until `shutdown` resolves (the cursor is then saved), or until
    /// the cluster refuses the principal or the state file cannot be
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
            let outcome = match self.post_and_watch().await {
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

    /// Finishes the post in flight, posts the rest of the listing, then
    /// follows the trail; returns only with an error.
    async fn post_and_watch(&mut self) -> Result<(), NotifyError> {
        if let Some(in_flight) = self.state.in_flight.clone() {
            // The post in flight when the process stopped: nobody knows
            // whether the webhook it was at saw it, so it goes again,
            // marked there (and everywhere, when the post was a re-listing's).
            let marks = if in_flight.redelivery { Redelivery::All } else { Redelivery::Interrupted };
            self.post(in_flight.approval_id, in_flight.source, in_flight.done, marks).await?;
        }
        while let Some(approval_id) = self.state.to_post.first().cloned() {
            let marks = if self.state.to_post_redelivery { Redelivery::All } else { Redelivery::None };
            self.post(approval_id, PostSource::Listing, BTreeSet::new(), marks).await?;
        }
        self.watch().await
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
        let ids = list_pending(&self.client).await?;
        self.state = self.state.relisted(ids);
        self.store.save(&self.state)
    }

    /// Follows the trail from the cursor; returns only with an error.
    async fn watch(&mut self) -> Result<(), NotifyError> {
        let mut events = self.client.watch_events(self.state.cursor, None);
        let mut unsaved = 0u64;
        while let Some(event) = events.recv().await {
            let event = event?;
            let cursor = event.cursor;
            match self.state.on_event(&event.r#type, event.approval_id, cursor) {
                Some(approval_id) => {
                    self.post(approval_id, PostSource::Event { cursor }, BTreeSet::new(), Redelivery::None).await?;
                    unsaved = 0;
                }
                None => {
                    unsaved += 1;
                    if unsaved >= CURSOR_SAVE_EVENTS_MAX {
                        self.store.save(&self.state)?;
                        unsaved = 0;
                    }
                }
            }
        }
        Err(NotifyError::Cluster(gavel_client::Error::Unavailable("the audit stream ended".to_string())))
    }

    /// Posts one approval to every webhook not in `done`, if it is still
    /// pending, marked as `marks` says; records it in flight first and
    /// finished last.
    async fn post(
        &mut self,
        approval_id: String,
        source: PostSource,
        mut done: BTreeSet<usize>,
        marks: Redelivery,
    ) -> Result<(), NotifyError> {
        let Some(approval) = pending(&self.client, &approval_id).await? else {
            tracing::info!(approval = %approval_id, "no longer pending (or no longer readable): not posted");
            self.state.counts.skipped += 1;
            self.state.in_flight = None;
            match source {
                PostSource::Listing => self.state.skip_listed_front(),
                PostSource::Event { cursor } => self.state.cursor = self.state.cursor.max(cursor),
            }
            return self.store.save(&self.state);
        };
        let link = approval_link(&self.config.console_url, &approval.id);
        let relisted = marks == Redelivery::All;
        self.state.in_flight =
            Some(InFlight { approval_id: approval_id.clone(), source, done: done.clone(), redelivery: relisted });
        self.store.save(&self.state)?;
        // Webhooks are posted to in order, so of an interrupted post only the
        // first webhook that had not answered may have seen it.
        let mut first_pending = true;
        for (index, webhook) in self.config.webhooks.iter().enumerate() {
            if done.contains(&index) {
                continue;
            }
            let redelivery = match marks {
                Redelivery::None => false,
                Redelivery::Interrupted => first_pending,
                Redelivery::All => true,
            };
            first_pending = false;
            let outcome = self.poster.deliver(webhook, &approval, &link, redelivery).await;
            let counts = &mut self.state.counts;
            match &outcome {
                Outcome::Delivered => {
                    counts.delivered += 1;
                    counts.redelivered += u64::from(redelivery);
                    tracing::info!(webhook = webhook.kind.name(), host = %webhook.host(), approval = %approval_id, redelivery, "posted");
                }
                Outcome::Refused(status) => {
                    counts.refused += 1;
                    tracing::error!(
                        code = "NOTIFY_POST_REFUSED", webhook = webhook.kind.name(), host = %webhook.host(),
                        approval = %approval_id, status, "the webhook refused the post for good; skipped"
                    );
                }
                Outcome::Abandoned(why) => {
                    counts.abandoned += 1;
                    tracing::error!(
                        code = "NOTIFY_POST_ABANDONED", webhook = webhook.kind.name(), host = %webhook.host(),
                        approval = %approval_id, why = %why, "the post kept failing past its retry limits; skipped"
                    );
                }
            }
            done.insert(index);
            if let Some(in_flight) = &mut self.state.in_flight {
                in_flight.done = done.clone();
            }
            self.store.save(&self.state)?;
        }
        self.state.finish_in_flight();
        self.store.save(&self.state)
    }
}
