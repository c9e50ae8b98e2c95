//! The console's refusals: each has a stable code shown to the person and an
//! HTTP status.

use axum::http::StatusCode;

/// Why the console refused a request before or after calling the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No session cookie, or an unknown or expired session.
    #[error("sign in first (your session is missing or has expired)")]
    SignedOut,
    /// A state-changing form without the session's CSRF token, or with another.
    #[error("the form's CSRF token is missing or wrong; reload the page and try again")]
    CsrfToken,
    /// A state-changing request whose Origin (or Sec-Fetch-Site) is not the console's.
    #[error("the request came from another origin")]
    Origin,
    /// The cluster refused a decision or vote because the approval's terms
    /// (SPEC §13) are not the ones the page showed (`APPROVAL_TERMS_CHANGED`).
    #[error(
        "the terms of this approval changed since the page was loaded (you saw terms hash {shown}, they are now \
         {current}); nothing was decided: read the current terms below and decide on them"
    )]
    TermsChanged {
        /// The terms hash the page displayed (the form's).
        shown: String,
        /// The terms hash the cluster holds now (empty when it could not be read).
        current: String,
    },
    /// A decision or withdrawal form names another approval than the one
    /// its address does: a page of one approval posting to another's.
    #[error(
        "this form is for approval {form:?} but was sent to the address of approval {path:?}; nothing was decided"
    )]
    ApprovalMismatch {
        /// The approval id of the address (decoded).
        path: String,
        /// The approval id the form carries.
        form: String,
    },
    /// A field is malformed or too long.
    #[error("{0}")]
    BadInput(String),
    /// Development sign-in was asked for on a console that has none.
    #[error("this console has no development sign-in")]
    NoDevSignIn,
    /// An OpenID Connect callback with an unknown, used, expired or foreign `state`.
    #[error("this sign-in expired, was already used, or was started in another browser; sign in again")]
    SignInState,
    /// The provider sent the person back with an error (`error=` on the callback).
    #[error("the identity provider did not sign you in: {0}")]
    ProviderRefused(String),
    /// The ID token or the provider was refused.
    #[error("signing in with the identity provider failed: {0}")]
    Oidc(#[from] gavel_oidc::OidcError),
    /// The console's principal claim settings name another principal than the cluster's.
    #[error("the console makes principal {console} from the ID token, but the cluster says {cluster}; give the console the nodes' --oidc-principal-claim and --oidc-principal-prefix")]
    PrincipalDisagrees {
        /// The console's reading.
        console: String,
        /// The cluster's (WhoAmI).
        cluster: String,
    },
    /// OpenID Connect sign-in was asked for on a console that has none.
    #[error("this console has no OpenID Connect sign-in (--oidc-issuer)")]
    NoOidcSignIn,
    /// Too many sessions or live streams.
    #[error("{0}")]
    Busy(String),
    /// The record does not exist or is outside the person's view.
    #[error("not found, or not yours to read")]
    NotFound,
    /// The cluster refused or could not serve the call.
    #[error(transparent)]
    Cluster(#[from] gavel_client::Error),
    /// A template failed to render (a bug).
    #[error("rendering the page failed: {0}")]
    Render(String),
}

impl ConsoleError {
    /// The stable code shown with the message.
    ///
    /// Every code is one of gavel-core's catalogue (`ErrorCode`); this crate
    /// may not depend on gavel-core, so they are literals, which
    /// `crates/gavel-core/tests/error_catalogue.rs` holds to the catalogue.
    pub fn code(&self) -> &str {
        match self {
            ConsoleError::SignedOut => "SESSION_REQUIRED",
            ConsoleError::CsrfToken => "CSRF_TOKEN_INVALID",
            ConsoleError::Origin => "ORIGIN_REFUSED",
            ConsoleError::TermsChanged { .. } => "APPROVAL_TERMS_CHANGED",
            ConsoleError::ApprovalMismatch { .. } => "APPROVAL_ID_MISMATCH",
            ConsoleError::BadInput(_) => "INVALID_ARGUMENT",
            ConsoleError::NoDevSignIn => "DEV_SIGN_IN_DISABLED",
            ConsoleError::NoOidcSignIn => "OIDC_SIGN_IN_DISABLED",
            ConsoleError::SignInState => "OIDC_STATE_INVALID",
            ConsoleError::ProviderRefused(_) => "OIDC_SIGN_IN_REFUSED",
            ConsoleError::Oidc(error) => error.code(),
            ConsoleError::PrincipalDisagrees { .. } => "OIDC_PRINCIPAL_MISMATCH",
            ConsoleError::Busy(_) => "RESOURCE_EXHAUSTED",
            ConsoleError::NotFound => "NOT_FOUND",
            ConsoleError::Cluster(error) => error.code(),
            ConsoleError::Render(_) => "INTERNAL",
        }
    }

    /// What a person reads next to [`ConsoleError::code`]: the message
    /// without the code, which a cluster refusal's text starts with
    /// (`CODE: message`), so a page shows the code once.
    pub fn message(&self) -> String {
        let text = self.to_string();
        let prefix = format!("{}: ", self.code());
        text.strip_prefix(&prefix).map_or_else(|| text.clone(), str::to_string)
    }

    /// The HTTP status the refusal is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ConsoleError::SignedOut => StatusCode::UNAUTHORIZED,
            ConsoleError::CsrfToken | ConsoleError::Origin | ConsoleError::NoDevSignIn | ConsoleError::NoOidcSignIn => {
                StatusCode::FORBIDDEN
            }
            ConsoleError::TermsChanged { .. } => StatusCode::CONFLICT,
            ConsoleError::BadInput(_) | ConsoleError::SignInState | ConsoleError::ApprovalMismatch { .. } => {
                StatusCode::BAD_REQUEST
            }
            ConsoleError::ProviderRefused(_) => StatusCode::UNAUTHORIZED,
            ConsoleError::Oidc(gavel_oidc::OidcError::Provider(_)) => StatusCode::BAD_GATEWAY,
            ConsoleError::Oidc(gavel_oidc::OidcError::Settings(_)) | ConsoleError::PrincipalDisagrees { .. } => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
            ConsoleError::Oidc(_) => StatusCode::UNAUTHORIZED,
            ConsoleError::Busy(_) => StatusCode::TOO_MANY_REQUESTS,
            ConsoleError::NotFound => StatusCode::NOT_FOUND,
            ConsoleError::Render(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ConsoleError::Cluster(gavel_client::Error::Domain { status, .. }) => match status {
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => StatusCode::FORBIDDEN,
                tonic::Code::NotFound => StatusCode::NOT_FOUND,
                tonic::Code::FailedPrecondition | tonic::Code::AlreadyExists => StatusCode::CONFLICT,
                tonic::Code::InvalidArgument | tonic::Code::OutOfRange => StatusCode::BAD_REQUEST,
                tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::BAD_GATEWAY,
            },
            ConsoleError::Cluster(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_refusal_shows_its_code_once() {
        let refused = ConsoleError::Cluster(gavel_client::Error::Domain {
            code: "FAILED_PRECONDITION".to_string(),
            message: "approval a1 is approved".to_string(),
            problems: Vec::new(),
            status: tonic::Code::FailedPrecondition,
            approval: None,
        });
        assert_eq!(refused.code(), "FAILED_PRECONDITION");
        assert_eq!(refused.message(), "approval a1 is approved");
        let own = ConsoleError::NotFound;
        assert_eq!(own.message(), own.to_string());
    }
}
