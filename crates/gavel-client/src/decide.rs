//! Deciding an approval on the terms a person was shown (SPEC §13).
//!
//! An approval's terms (`Approval.terms_json`) are everything a person must
//! see to decide it; the cluster alone computes their hash
//! (`Approval.terms_hash`). Every decision and vote these helpers send names
//! a terms hash, and the cluster refuses it with `APPROVAL_TERMS_CHANGED`
//! when the approval's terms no longer hash to it: a "yes" binds exactly
//! what was shown, never another approval or changed terms.
//!
//! - [`Client::decide_with_terms`] and [`Client::vote_with_terms`] send the
//!   hash the caller was shown (by the console, the notifier, or its own
//!   rendering of [`Client::approval_terms`]). Use them whenever a person
//!   decides.
//! - [`Client::decide`] reads the approval and decides it on the terms it
//!   read: for an automated approver that judges exactly the record it
//!   reads, nothing shown to a person in between.

use gavel_proto::v1 as pb;

use crate::{Client, Error};

/// Who decides and why, for the decide and vote helpers.
#[derive(Debug, Clone, Default)]
pub struct DecideOptions {
    /// The approver (or voter). By default the authenticated caller; a
    /// cluster started `--insecure` authenticates nobody and needs one.
    /// Naming another than the caller needs `delegate-decide` (decisions)
    /// and is refused for votes.
    pub approver: Option<pb::Actor>,
    /// Free-text justification recorded with the decision.
    pub comment: Option<String>,
}

impl Client {
    /// Reads approval `id` for a decision: its `terms_json` is what to show
    /// the person who decides, and `terms_hash` what to send with the
    /// decision. `NOT_FOUND` when there is no such approval (or the caller
    /// may not read it).
    pub async fn approval_terms(&self, id: &str) -> Result<pb::Approval, Error> {
        let answer = self.get_approval(pb::GetApprovalRequest { id: id.to_string(), caller_now_ms: None }).await?;
        answer.approval.ok_or_else(|| not_found(id))
    }

    /// Approves or rejects approval `id` on the terms whose hash
    /// (`Approval.terms_hash`) the person deciding was shown. Refused with
    /// `APPROVAL_TERMS_CHANGED` when the approval's terms no longer hash to
    /// `terms_hash`; on a governed approval this is one vote.
    pub async fn decide_with_terms(
        &self,
        id: &str,
        status: pb::ApprovalStatus,
        terms_hash: &str,
        options: DecideOptions,
    ) -> Result<pb::Approval, Error> {
        let request = pb::DecideApprovalRequest {
            id: id.to_string(),
            status: status as i32,
            approver: options.approver,
            comment: options.comment,
            terms_hash: Some(terms_hash.to_string()),
            ..pb::DecideApprovalRequest::default()
        };
        let answer = self.decide_approval(request).await?;
        answer.approval.ok_or_else(|| missing_approval(id))
    }

    /// Reads approval `id` and approves or rejects it on the terms just
    /// read, naming their hash (see [`Client::decide_with_terms`] when a
    /// person was shown the terms earlier).
    pub async fn decide(
        &self,
        id: &str,
        status: pb::ApprovalStatus,
        options: DecideOptions,
    ) -> Result<pb::Approval, Error> {
        let approval = self.approval_terms(id).await?;
        let terms_hash = approval.terms_hash;
        if terms_hash.is_empty() {
            // A cluster that computes no terms (older than SPEC §13) has
            // nothing to bind the decision to; decide as before.
            let request = pb::DecideApprovalRequest {
                id: id.to_string(),
                status: status as i32,
                approver: options.approver,
                comment: options.comment,
                ..pb::DecideApprovalRequest::default()
            };
            let answer = self.decide_approval(request).await?;
            return answer.approval.ok_or_else(|| missing_approval(id));
        }
        self.decide_with_terms(id, status, &terms_hash, options).await
    }

    /// Casts one vote on governed approval `id`, bound to the input hash and
    /// terms hash the voter was shown (both from the same read of the
    /// approval). Refused with `APPROVAL_TERMS_CHANGED` when its terms no
    /// longer hash to `terms_hash`.
    pub async fn vote_with_terms(
        &self,
        id: &str,
        approve: bool,
        input_hash: &str,
        terms_hash: &str,
        options: DecideOptions,
    ) -> Result<pb::Approval, Error> {
        let request = pb::CastVoteRequest {
            approval_id: id.to_string(),
            approve,
            input_hash: input_hash.to_string(),
            approver: options.approver,
            comment: options.comment,
            terms_hash: Some(terms_hash.to_string()),
            ..pb::CastVoteRequest::default()
        };
        let answer = self.cast_vote(request).await?;
        answer.approval.ok_or_else(|| missing_approval(id))
    }
}

fn not_found(id: &str) -> Error {
    Error::Domain {
        code: "NOT_FOUND".to_string(),
        message: format!("approval {id} was not found"),
        problems: Vec::new(),
        status: tonic::Code::NotFound,
        approval: None,
    }
}

/// A reply without its approval: the cluster always sends one, so this is a
/// broken server, reported rather than unwrapped.
fn missing_approval(id: &str) -> Error {
    Error::Domain {
        code: "INTERNAL".to_string(),
        message: format!("the cluster answered the decision on approval {id} without the approval"),
        problems: Vec::new(),
        status: tonic::Code::Internal,
        approval: None,
    }
}
