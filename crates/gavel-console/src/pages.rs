//! The routes: sign-in, inbox, approval, execution, history, the live
//! event stream and the built-in assets. Each handler makes its cluster
//! calls with the signed-in person's client.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use futures::Stream;
use gavel_client::{pb, Client, ClientConfig};
use minijinja::{context, Environment, Value};
use serde::Deserialize;
use serde_json::json;

use crate::error::ConsoleError;
use crate::limits::*;
use crate::oidc::{cleared_state_cookie, cookie_state, state_cookie, SignInSealer, SpentSignIns, CALLBACK_PATH};
use crate::session::{cleared_cookie, cookie_session_id, session_cookie, Session, Sessions};
use crate::{security, ConsoleConfig};
use gavel_client::links::{approval_action_url, duration_text, record_url};

struct App {
    config: ConsoleConfig,
    templates: Environment<'static>,
    sessions: Sessions,
    /// Seals pending OpenID Connect sign-ins into their cookies: the
    /// console keeps nothing per `/oidc/start`.
    sign_in_sealer: SignInSealer,
    spent_sign_ins: SpentSignIns,
}

type Shared = State<Arc<App>>;

/// The console's routes behind the security headers.
pub fn router(config: ConsoleConfig) -> std::io::Result<Router> {
    Ok(routes(Arc::new(App {
        config,
        templates: templates().map_err(|error| std::io::Error::other(error.to_string()))?,
        sessions: Sessions::default(),
        sign_in_sealer: SignInSealer::new()?,
        spent_sign_ins: SpentSignIns::default(),
    })))
}

/// The page templates, built into the binary.
fn templates() -> Result<Environment<'static>, minijinja::Error> {
    let mut templates = Environment::new();
    for (name, source) in [
        ("base.html", include_str!("../templates/base.html")),
        ("signin.html", include_str!("../templates/signin.html")),
        ("signed_in.html", include_str!("../templates/signed_in.html")),
        ("inbox.html", include_str!("../templates/inbox.html")),
        ("approval.html", include_str!("../templates/approval.html")),
        ("execution.html", include_str!("../templates/execution.html")),
        ("history.html", include_str!("../templates/history.html")),
        ("error.html", include_str!("../templates/error.html")),
    ] {
        templates.add_template(name, source)?;
    }
    Ok(templates)
}

fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/inbox") }))
        .route("/signin", get(signin_page).post(signin))
        .route("/signout", post(signout))
        .route("/oidc/start", get(oidc_start))
        .route(CALLBACK_PATH, get(oidc_callback))
        .route("/inbox", get(inbox))
        .route("/{kind}/{id}", get(record_page))
        .route("/approvals", get(approval_by_query).post(approval_action_by_query))
        .route("/executions", get(execution_by_query))
        .route("/approvals/{id}/decide", post(decide))
        .route("/approvals/{id}/withdraw", post(withdraw))
        .route("/history", get(history))
        .route("/events", get(events))
        .route("/favicon.ico", get(|| async { axum::http::StatusCode::NO_CONTENT }))
        .route("/assets/console.css", get(|| asset("text/css", include_str!("../assets/console.css"))))
        .route("/assets/console.js", get(|| asset("text/javascript", include_str!("../assets/console.js"))))
        .layer(DefaultBodyLimit::max(FORM_BODY_MAX_BYTES))
        .layer(axum::middleware::from_fn(security::return_after_sign_in))
        .layer(axum::middleware::from_fn(security::headers))
        .with_state(app)
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| i64::try_from(elapsed.as_millis()).unwrap_or(0))
}

impl App {
    fn render(&self, name: &str, live_only: bool, ctx: Value) -> Result<Response, ConsoleError> {
        let template = self.templates.get_template(name).map_err(|error| ConsoleError::Render(error.to_string()))?;
        let html = if live_only {
            let mut captured =
                template.render_captured(ctx).map_err(|error| ConsoleError::Render(error.to_string()))?;
            captured
                .with_state_mut(|state| state.render_block("live"))
                .map_err(|error| ConsoleError::Render(error.to_string()))?
        } else {
            template.render(ctx).map_err(|error| ConsoleError::Render(error.to_string()))?
        };
        Ok(Html(html).into_response())
    }

    fn session(&self, headers: &HeaderMap) -> Result<Arc<Session>, ConsoleError> {
        let cookies = headers.get(header::COOKIE).and_then(|value| value.to_str().ok()).unwrap_or("");
        cookie_session_id(cookies).and_then(|id| self.sessions.get(id)).ok_or(ConsoleError::SignedOut)
    }

    /// The page that explains a refusal, with its code; a signed-out person
    /// is sent to the sign-in page instead (which returns them to the page
    /// they asked for: [`security::return_after_sign_in`]).
    fn refusal(&self, error: ConsoleError, session: Option<&Session>) -> Response {
        if matches!(error, ConsoleError::SignedOut) {
            let mut response = Redirect::to("/signin").into_response();
            response.extensions_mut().insert(security::SignInFirst);
            return response;
        }
        let status = error.status();
        let page = self.render(
            "error.html",
            false,
            context! { me => session.map(me_view), code => error.code(), message => error.message() },
        );
        match page {
            Ok(mut response) => {
                *response.status_mut() = status;
                response
            }
            Err(_) => (status, format!("{}: {}", error.code(), error.message())).into_response(),
        }
    }
}

fn me_view(session: &Session) -> Value {
    context! { principal => session.principal, csrf => session.csrf, development => session.development }
}

#[derive(Deserialize)]
struct LiveQuery {
    live: Option<String>,
    page: Option<usize>,
    status: Option<String>,
    capability: Option<String>,
    page_token: Option<String>,
    /// A record id given in the query (an id made only of dots, which a
    /// browser would not keep as a path segment: `paths`).
    id: Option<String>,
    /// With `id`, on a POST to `/approvals`: `decide` or `withdraw`.
    action: Option<String>,
}

impl LiveQuery {
    fn live_only(&self) -> bool {
        self.live.is_some()
    }
}

/// Where to go after signing in: `?next=` of the sign-in page and of
/// `/oidc/start`, a field of the development sign-in's form.
#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// The page to return to after signing in: `next` when it is a page of
/// this console ([`security::return_path`]), else the inbox.
fn return_to(next: Option<&str>) -> &str {
    next.and_then(security::return_path).unwrap_or(security::HOME_PATH)
}

async fn signin_page(State(app): Shared, Query(query): Query<NextQuery>) -> Response {
    let personas = app.config.dev_sign_in.as_ref().map(|dev| dev.personas.clone());
    let oidc = app.config.oidc.is_some();
    let next = Some(return_to(query.next.as_deref())).filter(|next| *next != security::HOME_PATH);
    // Percent-encoded for the link's query: letters, digits and `%-._~` only.
    let next_encoded = next.map(gavel_oidc::http::form_encode);
    let ctx = context! { personas => personas, oidc => oidc, next => next, next_encoded => next_encoded };
    app.render("signin.html", false, ctx).unwrap_or_else(|error| app.refusal(error, None))
}

#[derive(Deserialize)]
struct SignInForm {
    principal: String,
    next: Option<String>,
}

async fn signin(State(app): Shared, headers: HeaderMap, Form(form): Form<SignInForm>) -> Response {
    match sign_in(&app, &headers, form).await {
        Ok(response) => response,
        Err(error) => app.refusal(error, None),
    }
}

async fn sign_in(app: &App, headers: &HeaderMap, form: SignInForm) -> Result<Response, ConsoleError> {
    // A sign-in is state-changing too: from another origin it could sign a
    // person in as someone else (login CSRF).
    security::check_origin(headers, &app.config.origin)?;
    let dev = app.config.dev_sign_in.as_ref().ok_or(ConsoleError::NoDevSignIn)?;
    let principal = form.principal.trim();
    if principal.is_empty() || principal.len() > PRINCIPAL_MAX_BYTES || !principal.contains(':') {
        return Err(ConsoleError::BadInput(format!(
            "a principal is written kind:id (for example user:bob-finance), at most {PRINCIPAL_MAX_BYTES} bytes"
        )));
    }
    let token = (dev.mint)(principal, SESSION_TTL).map_err(ConsoleError::BadInput)?;
    let (cookie, _) = app.start_session(token, true, SESSION_TTL, None).await?;
    let page = return_to(form.next.as_deref());
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to(page)).into_response())
}

impl App {
    /// Starts a session whose calls carry `token`, living `lifetime` (at
    /// most [`SESSION_TTL`]); returns its cookie and principal. The cluster
    /// says who the token is (WhoAmI); when the console read a principal
    /// from the token itself, the two must agree.
    async fn start_session(
        &self,
        token: String,
        development: bool,
        lifetime: std::time::Duration,
        expected_principal: Option<&str>,
    ) -> Result<(String, String), ConsoleError> {
        let config = ClientConfig { tls: self.config.tls.clone(), token: Some(token), ..ClientConfig::default() };
        let client = Client::with_config(&self.config.endpoints, config)?;
        let me = client.who_am_i(pb::WhoAmIRequest::default()).await?;
        if let Some(expected) = expected_principal.filter(|expected| *expected != me.principal) {
            return Err(ConsoleError::PrincipalDisagrees { console: expected.to_string(), cluster: me.principal });
        }
        let lifetime = lifetime.min(SESSION_TTL);
        let principal = me.principal.clone();
        let session = Session {
            principal: me.principal,
            client,
            csrf: crate::session::random_token(),
            development,
            expires_at: std::time::Instant::now() + lifetime,
            cursor: Default::default(),
            streams: Default::default(),
        };
        let id = self.sessions.insert(session)?;
        Ok((session_cookie(&id, self.config.secure_cookies(), lifetime), principal))
    }
}

/// `/oidc/start`: a new pending sign-in, sealed into this browser's cookie
/// (the console keeps nothing), and the browser sent to the provider's
/// authorization endpoint. A GET (a link), since the CSP's `form-action
/// 'self'` would stop a form from being redirected off-site; it changes no
/// session, and the callback is bound to this browser by the cookie.
async fn oidc_start(State(app): Shared, Query(query): Query<NextQuery>) -> Response {
    let started = async {
        let oidc = app.config.oidc.as_ref().ok_or(ConsoleError::NoOidcSignIn)?;
        let discovery = oidc.provider.discovery().await?;
        let redirect_uri = format!("{}{CALLBACK_PATH}", app.config.origin);
        let return_to = return_to(query.next.as_deref());
        let now = gavel_oidc::unix_seconds();
        Ok::<_, ConsoleError>(app.sign_in_sealer.start(
            &discovery.authorization_endpoint,
            &oidc.client_id,
            &redirect_uri,
            return_to,
            now,
        ))
    };
    match started.await {
        Ok(start) => {
            let cookie = state_cookie(&start.cookie, app.config.secure_cookies());
            ([(header::SET_COOKIE, cookie)], Redirect::to(&start.location)).into_response()
        }
        Err(error) => app.refusal(error, None),
    }
}

#[derive(Deserialize)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `/oidc/callback`: the provider's answer. The state must be that of this
/// browser's sealed pending sign-in, unexpired and not spent; the code is
/// exchanged with the PKCE verifier; the ID token must verify, with the
/// nonce; the sign-in is then spent (once), and the cluster says who it
/// is. The session ends no later than the ID token; the person lands on
/// the page they started from.
async fn oidc_callback(State(app): Shared, headers: HeaderMap, Query(query): Query<CallbackQuery>) -> Response {
    let secure = app.config.secure_cookies();
    let signed_in = async {
        let oidc = app.config.oidc.as_ref().ok_or(ConsoleError::NoOidcSignIn)?;
        let cookies = headers.get(header::COOKIE).and_then(|value| value.to_str().ok()).unwrap_or("");
        let state = query.state.as_deref().ok_or(ConsoleError::SignInState)?;
        let now = gavel_oidc::unix_seconds();
        let pending = app.sign_in_sealer.finish(state, cookie_state(cookies), &app.spent_sign_ins, now)?;
        if let Some(error) = &query.error {
            let description = query.error_description.as_deref().unwrap_or("");
            return Err(ConsoleError::ProviderRefused(format!("{error} {description}").trim().to_string()));
        }
        let code = query.code.as_deref().ok_or_else(|| ConsoleError::ProviderRefused("no code".to_string()))?;
        let redirect_uri = format!("{}{CALLBACK_PATH}", app.config.origin);
        let (id_token, identity) =
            crate::oidc::redeem(oidc, code, &pending.verifier, &pending.nonce, &redirect_uri).await?;
        if !app.spent_sign_ins.spend(&pending, now) {
            return Err(ConsoleError::SignInState);
        }
        let seconds_left = identity.expires_at.saturating_sub(gavel_oidc::unix_seconds());
        let lifetime = std::time::Duration::from_secs(seconds_left);
        let (cookie, principal) = app.start_session(id_token, false, lifetime, Some(&identity.principal)).await?;
        let next = return_to(Some(&pending.return_to)).to_string();
        Ok::<_, ConsoleError>((cookie, principal, lifetime.min(SESSION_TTL), next))
    };
    match signed_in.await {
        Ok((cookie, principal, lifetime, next)) => {
            let minutes = lifetime.as_secs() / 60;
            let ctx = context! { principal => principal, minutes => minutes, next => next };
            match app.render("signed_in.html", false, ctx) {
                Ok(page) => {
                    let cookies = [(header::SET_COOKIE, cookie), (header::SET_COOKIE, cleared_state_cookie(secure))];
                    (axum::response::AppendHeaders(cookies), page).into_response()
                }
                Err(error) => app.refusal(error, None),
            }
        }
        Err(error) => {
            let mut page = app.refusal(error, None);
            if let Ok(value) = cleared_state_cookie(secure).parse() {
                page.headers_mut().append(header::SET_COOKIE, value);
            }
            page
        }
    }
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: Option<String>,
}

async fn signout(State(app): Shared, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    let session = match app.session(&headers) {
        Ok(session) => session,
        Err(error) => return app.refusal(error, None),
    };
    let checked = security::check_origin(&headers, &app.config.origin)
        .and_then(|()| security::check_csrf(form.csrf.as_deref(), &session.csrf));
    if let Err(error) = checked {
        return app.refusal(error, Some(&session));
    }
    let cookies = headers.get(header::COOKIE).and_then(|value| value.to_str().ok()).unwrap_or("");
    if let Some(id) = cookie_session_id(cookies) {
        app.sessions.remove(id);
    }
    ([(header::SET_COOKIE, cleared_cookie(app.config.secure_cookies()))], Redirect::to("/signin")).into_response()
}

/// Runs a page handler with the session, turning refusals into pages.
async fn with_session<F, Fut>(app: Arc<App>, headers: HeaderMap, page: F) -> Response
where
    F: FnOnce(Arc<App>, Arc<Session>) -> Fut,
    Fut: std::future::Future<Output = Result<Response, ConsoleError>>,
{
    let session = match app.session(&headers) {
        Ok(session) => session,
        Err(error) => return app.refusal(error, None),
    };
    match page(app.clone(), session.clone()).await {
        Ok(response) => response,
        Err(error) => app.refusal(error, Some(&session)),
    }
}

async fn inbox(State(app): Shared, headers: HeaderMap, Query(query): Query<LiveQuery>) -> Response {
    with_session(app, headers, |app, session| async move {
        let page = query.page.unwrap_or(0);
        // This page's rows and one more, which says whether an older page exists.
        let wanted = (page + 1).saturating_mul(PAGE_SIZE).saturating_add(1);
        let mut request = pb::ListApprovalsRequest {
            status: Some(pb::ApprovalStatus::Pending as i32),
            limit: LIST_PAGE_LIMIT,
            newest_first: true,
            ..pb::ListApprovalsRequest::default()
        };
        let (mut decidable, mut read) = (Vec::new(), 0usize);
        let (mut complete, mut truncated) = (false, false);
        loop {
            let listed = session.client.list_approvals(request.clone()).await?;
            read += listed.approvals.len();
            // The inbox is what the person may decide: not their own requests.
            decidable.extend(listed.approvals.into_iter().filter(|approval| refusal_reason(approval).is_none()));
            if listed.next_page_token.is_empty() {
                complete = true;
                break;
            }
            if decidable.len() >= wanted {
                break;
            }
            if read >= INBOX_SCAN_MAX {
                truncated = true;
                break;
            }
            request.page_token = listed.next_page_token;
        }
        let rows: Vec<Value> =
            decidable.iter().skip(page.saturating_mul(PAGE_SIZE)).take(PAGE_SIZE).map(approval_view).collect();
        let more = decidable.len() > (page + 1).saturating_mul(PAGE_SIZE);
        let total = complete.then_some(decidable.len());
        app.render(
            "inbox.html",
            query.live_only(),
            context! {
                me => me_view(&session), rows => rows, total => total, page => page,
                previous => page.checked_sub(1), next => more.then_some(page + 1), truncated => truncated,
                scan_max => INBOX_SCAN_MAX,
            },
        )
    })
    .await
}

/// Why the person may not decide this approval, or `None` when they may:
/// the cluster's answer (`Approval.controls`, judged by the core's own
/// rules of a decision); the console holds no rule of its own. An approval
/// read without controls (the reply of a write) is not offered.
fn refusal_reason(approval: &pb::Approval) -> Option<String> {
    match &approval.controls {
        Some(controls) if controls.may_decide => None,
        Some(controls) => Some(format!("{} ({})", controls.refusal, controls.refusal_code)),
        None => Some("Reload the page to see what you may do with it.".to_string()),
    }
}

fn status_name(status: i32) -> String {
    pb::ApprovalStatus::try_from(status)
        .map(|status| status.as_str_name().trim_start_matches("APPROVAL_STATUS_").to_lowercase())
        .unwrap_or_else(|_| "unknown".to_string())
}

fn enum_name(name: &str, prefix: &str) -> String {
    name.trim_start_matches(prefix).to_lowercase()
}

/// `kind:id`, as every surface writes an actor ([`gavel_client::actor_text`]); `-` when absent.
fn actor_text(actor: Option<&pb::Actor>) -> String {
    actor.map_or_else(|| "-".to_string(), gavel_client::actor_text)
}

/// How far an expiry at `expires_at_ms` is from `now_ms`, roughly, as a
/// person says it: `in 9 min`, `in 2 h 5 min`, `in 3 days`, `expired`.
fn expiry_from(expires_at_ms: i64, now_ms: i64) -> String {
    let minutes = (expires_at_ms - now_ms).div_euclid(60_000);
    match minutes {
        ..=-1 => "expired".to_string(),
        0 => "in less than a minute".to_string(),
        1..=59 => format!("in {minutes} min"),
        60..=2879 => format!("in {} h {} min", minutes / 60, minutes % 60),
        _ => format!("in {} days", minutes / 1440),
    }
}

fn approval_view(approval: &pb::Approval) -> Value {
    let pretty = serde_json::from_str::<serde_json::Value>(&approval.input_json)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| approval.input_json.clone());
    let on_behalf_of = approval.actor.as_ref().and_then(|actor| actor.display_name.clone());
    let execution_id = approval.consumed_by_execution_id.clone().or_else(|| approval.execution_id.clone());
    let (input_fields, input_more) = crate::summary::input_fields(&approval.input_json);
    let (requested_at, requested_at_rfc3339) = crate::summary::utc_times(approval.requested_at_ms);
    // Without JavaScript the expiry reads as a UTC time and how far off it
    // was when the page was made; the script counts it down instead.
    let (expires_at, expires_at_rfc3339) = crate::summary::utc_times(approval.expires_at_ms);
    context! {
        id => approval.id,
        id_short => crate::summary::short_id(&approval.id),
        requested_at => requested_at,
        requested_at_rfc3339 => requested_at_rfc3339,
        input_fields => input_fields,
        input_more => input_more,
        url => record_url("approvals", &approval.id),
        decide_url => approval_action_url(&approval.id, "decide"),
        withdraw_url => approval_action_url(&approval.id, "withdraw"),
        terms_hash => approval.terms_hash,
        terms => terms_view(approval),
        capability => approval.capability_id,
        capability_version => approval.capability_version,
        requester => actor_text(approval.actor.as_ref()),
        on_behalf_of => on_behalf_of,
        surface => approval.surface,
        risk => pb::Risk::try_from(approval.risk).map_or("?".to_string(), |risk| enum_name(risk.as_str_name(), "RISK_")),
        side_effect => pb::SideEffect::try_from(approval.side_effect)
            .map_or("?".to_string(), |effect| enum_name(effect.as_str_name(), "SIDE_EFFECT_")),
        reasons => approval.reasons,
        types => approval.types,
        status => status_name(approval.status),
        requested_at_ms => approval.requested_at_ms,
        expires_at_ms => approval.expires_at_ms,
        expires_at => expires_at,
        expires_at_rfc3339 => expires_at_rfc3339,
        expires_in => expiry_from(approval.expires_at_ms, now_ms()),
        input_pretty => pretty,
        input_hash => approval.input_hash,
        execution_url => execution_id.as_deref().map(|id| record_url("executions", id)),
        execution_id => execution_id,
        decision => approval.decision.as_ref().map(|decision| context! {
            approver => actor_text(decision.approver.as_ref()),
            comment => decision.comment,
            status => status_name(decision.status),
        }),
        quorum => approval.quorum.as_ref().map(quorum_view),
    }
}

/// Whether the signed-in person has a vote on this pending governed
/// approval that they may withdraw (the cluster still decides).
/// Whether the person has a vote on this pending approval to withdraw, as
/// the cluster answered (`Approval.controls`).
fn may_withdraw(approval: &pb::Approval) -> bool {
    approval.controls.as_ref().is_some_and(|controls| controls.may_withdraw)
}

/// The terms of a decision (SPEC §13) as the page shows them, read from
/// the cluster's canonical terms (`terms_json`), with what the approval
/// itself says where an older cluster sent none: whether it is standing
/// (its uses, window and each bound JSON pointer with its value, and the
/// uses spent so far) or one use; the capability as registered; the
/// requester; the governing policy.
fn terms_view(approval: &pb::Approval) -> Value {
    use serde_json::Value as Json;
    let terms: Json = serde_json::from_str(&approval.terms_json).unwrap_or(Json::Null);
    let uses = &terms["uses"];
    let standing = approval.standing.as_ref();
    let spec = standing.and_then(|standing| standing.terms.as_ref());
    let is_standing = uses.get("windowMs").is_some() || standing.is_some();
    let uses_max = uses["max"].as_u64().or(spec.map(|spec| u64::from(spec.uses_max))).unwrap_or(1);
    let window_ms = uses["windowMs"].as_u64().or(spec.map(|spec| spec.window_ms)).unwrap_or(0);
    let bound: Vec<Value> = match uses["bound"].as_array() {
        Some(bound) => bound
            .iter()
            .map(|entry| {
                context! {
                    pointer => entry["pointer"].as_str().unwrap_or_default(),
                    value => entry["value"].to_string(),
                }
            })
            .collect(),
        None => {
            let input: Json = serde_json::from_str(&approval.input_json).unwrap_or(Json::Null);
            spec.map(|spec| spec.bound_pointers.as_slice())
                .unwrap_or_default()
                .iter()
                .map(|pointer| {
                    let value = input.pointer(pointer).cloned().unwrap_or(Json::Null);
                    context! { pointer => pointer, value => value.to_string() }
                })
                .collect()
        }
    };
    let used_by: Vec<Value> = standing
        .map(|standing| standing.used_by.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|id| context! { id => id, url => record_url("executions", id) })
        .collect();
    let spent = u64::try_from(used_by.len()).unwrap_or(u64::MAX);
    let capability = &terms["capability"];
    let registered = capability["registered"].as_bool();
    let policy = &terms["policy"];
    let policy = policy.is_object().then(|| {
        let factors: Vec<Value> = policy["factors"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|factor| context! { name => factor["name"].as_str().unwrap_or_default(), k => factor["k"].as_u64() })
            .collect();
        context! {
            name => policy["name"].as_str().unwrap_or_default(), version => policy["version"].as_u64(),
            factors => factors, deny_threshold => policy["denyThreshold"].as_u64(),
        }
    });
    let subject = &terms["requester"]["subject"];
    context! {
        standing => is_standing,
        uses_max => uses_max,
        window_ms => window_ms,
        window => duration_text(window_ms),
        bound => bound,
        used_by => used_by,
        spent => spent,
        left => uses_max.saturating_sub(spent),
        capability => context! {
            id => capability["id"].as_str().unwrap_or(&approval.capability_id),
            registered => registered,
            version => capability["version"].as_u64(),
            side_effect => capability["sideEffect"].as_str(),
            risk => capability["risk"].as_str(),
            idempotent => capability["idempotent"].as_bool(),
        },
        principal => terms["requester"]["principal"].as_str(),
        subject => subject.is_object().then(|| context! {
            kind => subject["kind"].as_str().unwrap_or_default(),
            id => subject["id"].as_str().unwrap_or_default(),
            display_name => subject["displayName"].as_str(),
        }),
        policy => policy,
        hash => approval.terms_hash,
        hash_short => approval.terms_hash.get(..12).unwrap_or(&approval.terms_hash),
        json => approval.terms_json,
    }
}

/// The quorum progress of an approval a policy governs (docs/policies.md):
/// each factor's votes against its k, denials, and who voted.
fn quorum_view(quorum: &pb::Quorum) -> Value {
    context! {
        policy => quorum.policy,
        version => quorum.policy_version,
        factors => quorum.factors.iter().map(|factor| context! {
            name => factor.name, k => factor.k, counted => factor.counted,
        }).collect::<Vec<_>>(),
        denials => quorum.denials,
        deny_threshold => quorum.deny_threshold,
        votes => quorum.votes.iter().map(|vote| context! {
            principal => vote.principal,
            vote => if vote.approve { "approve" } else { "deny" },
            factor => vote.factor,
        }).collect::<Vec<_>>(),
    }
}

/// `/approvals/{id}` and `/executions/{id}`: the id is one path segment,
/// percent-decoded here (`gavel_client::links`).
async fn record_page(
    State(app): Shared,
    headers: HeaderMap,
    Path((kind, id)): Path<(String, String)>,
    Query(query): Query<LiveQuery>,
) -> Response {
    let live = query.live_only();
    with_session(app, headers, |app, session| async move { record(&app, &session, &kind, &id, live).await }).await
}

/// `/approvals?id=` and `/executions?id=`: a record whose id a browser
/// would not keep as a path segment (`gavel_client::links`).
async fn approval_by_query(State(app): Shared, headers: HeaderMap, Query(query): Query<LiveQuery>) -> Response {
    record_by_query(app, headers, "approvals", query).await
}

async fn execution_by_query(State(app): Shared, headers: HeaderMap, Query(query): Query<LiveQuery>) -> Response {
    record_by_query(app, headers, "executions", query).await
}

async fn record_by_query(app: Arc<App>, headers: HeaderMap, kind: &'static str, query: LiveQuery) -> Response {
    let live = query.live_only();
    with_session(app, headers, |app, session| async move {
        let id = query.id.ok_or(ConsoleError::NotFound)?;
        record(&app, &session, kind, &id, live).await
    })
    .await
}

async fn record(app: &App, session: &Session, kind: &str, id: &str, live: bool) -> Result<Response, ConsoleError> {
    match kind {
        "approvals" => render_approval(app, session, id, live, None).await,
        "executions" => {
            let execution = execution_view(session, id).await?;
            let ctx = context! { me => me_view(session), execution => execution };
            app.render("execution.html", live, ctx)
        }
        _ => Err(ConsoleError::NotFound),
    }
}

async fn render_approval(
    app: &App,
    session: &Session,
    id: &str,
    live_only: bool,
    refused: Option<&ConsoleError>,
) -> Result<Response, ConsoleError> {
    let request = pb::GetApprovalRequest { id: id.to_string(), ..pb::GetApprovalRequest::default() };
    // No such approval, or one outside the signed-in person's view: NOT_FOUND.
    let approval = match session.client.get_approval(request).await {
        Ok(answer) => answer.approval.ok_or(ConsoleError::NotFound)?,
        Err(error) if error.code() == "NOT_FOUND" => return Err(ConsoleError::NotFound),
        Err(error) => return Err(error.into()),
    };
    let capability = session
        .client
        .get_capability(pb::GetCapabilityRequest {
            id: approval.capability_id.clone(),
            version: approval.capability_version.filter(|version| *version > 0),
        })
        .await
        .ok()
        .and_then(|response| response.capability)
        .and_then(|capability| capability.spec)
        .map(|spec| {
            let spec = serde_json::to_value(SpecView::from(&spec)).unwrap_or_default();
            Value::from_serialize(spec)
        });
    let execution = match approval.consumed_by_execution_id.clone().or_else(|| approval.execution_id.clone()) {
        Some(execution_id) => execution_view(session, &execution_id).await?,
        None => None,
    };
    let reason = refusal_reason(&approval);
    let mut response = app.render(
        "approval.html",
        live_only,
        context! {
            me => me_view(session), approval => approval_view(&approval), capability => capability,
            may_decide => reason.is_none(), reason => reason, execution => execution,
            may_withdraw => may_withdraw(&approval),
            refused => refused.map(|error| context! { code => error.code(), message => error.message() }),
            comment_max => COMMENT_MAX_BYTES,
        },
    )?;
    if let Some(error) = refused {
        *response.status_mut() = error.status();
    }
    Ok(response)
}

/// The capability's side effect, idempotency and retry policy, for display.
#[derive(serde::Serialize)]
struct SpecView {
    side_effect: String,
    idempotent: String,
    retry: String,
    queue: String,
}

impl From<&pb::CapabilitySpec> for SpecView {
    fn from(spec: &pb::CapabilitySpec) -> Self {
        SpecView {
            side_effect: pb::SideEffect::try_from(spec.side_effect)
                .map_or("?".to_string(), |effect| enum_name(effect.as_str_name(), "SIDE_EFFECT_")),
            idempotent: if spec.idempotent { "yes: a retry repeats the effect safely" } else { "no" }.to_string(),
            retry: spec.retry.as_ref().map_or_else(
                || "no retry".to_string(),
                |retry| {
                    let backoff =
                        retry.backoff_ms.map_or_else(String::new, |backoff| format!(", {backoff} ms backoff"));
                    format!("up to {} more attempt(s){backoff}", retry.max_attempts)
                },
            ),
            queue: spec.queue.clone().unwrap_or_else(|| spec.id.clone()),
        }
    }
}

async fn execution_view(session: &Session, execution_id: &str) -> Result<Option<Value>, ConsoleError> {
    let request = pb::GetExecutionRequest { execution_id: execution_id.to_string() };
    let execution = match session.client.get_execution(request).await {
        Ok(response) => response.execution,
        Err(error) if error.is_access_refused() || error.code() == "NOT_FOUND" => None,
        Err(error) => return Err(error.into()),
    };
    let Some(execution) = execution else {
        return Ok(Some(
            context! { id => execution_id, url => record_url("executions", execution_id), exists => false },
        ));
    };
    let events = session
        .client
        .list_execution_events(pb::ListExecutionEventsRequest {
            execution_id: execution_id.to_string(),
            after_cursor: 0,
            limit: EXECUTION_EVENTS_MAX,
        })
        .await
        .map(|response| response.events)
        .unwrap_or_default();
    let events: Vec<Value> = events
        .iter()
        .map(|event| {
            context! {
                cursor => event.cursor, kind => event.r#type, at_ms => event.timestamp_ms,
                actor => actor_text(event.actor.as_ref()), attempt => event.attempt, worker => event.worker_id,
                code => event.code,
            }
        })
        .collect();
    let state = pb::ExecutionState::try_from(execution.state)
        .map_or("?".to_string(), |state| enum_name(state.as_str_name(), "EXECUTION_STATE_"));
    let result = execution.result.as_ref().and_then(|result| result.outcome.as_ref()).map(result_text);
    let lease = execution.current_lease.as_ref().map(|lease| {
        format!("attempt {} held by worker {} (lease {})", lease.attempt, lease.worker_id, lease.lease_id)
    });
    Ok(Some(context! {
        url => record_url("executions", &execution.execution_id),
        id => execution.execution_id, exists => true, state => state, attempts => execution.attempts,
        capability => execution.capability_id, lease => lease, result => result, events => events,
        requester => actor_text(execution.actor.as_ref()), approver => actor_text(execution.approver.as_ref()),
    }))
}

fn result_text(outcome: &pb::result_envelope::Outcome) -> String {
    use pb::result_envelope::Outcome;
    match outcome {
        Outcome::Completed(completed) => format!("completed: {}", completed.output_json),
        Outcome::Failed(failed) => format!("failed {}: {}", failed.code, failed.message),
        Outcome::Cancelled(cancelled) => format!(
            "cancelled: {}",
            pb::CancelCode::try_from(cancelled.code)
                .map_or("?".to_string(), |code| enum_name(code.as_str_name(), "CANCEL_CODE_"))
        ),
    }
}

/// A decision or withdrawal form: the approval it is for and the terms
/// hash the page showed travel in its body, next to the address.
#[derive(Deserialize)]
struct ApprovalForm {
    csrf: Option<String>,
    approval_id: Option<String>,
    terms_hash: Option<String>,
    decision: Option<String>,
    comment: Option<String>,
}

async fn decide(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ApprovalForm>,
) -> Response {
    with_session(
        app,
        headers.clone(),
        |app, session| async move { decide_as(&app, &session, &headers, id, form).await },
    )
    .await
}

async fn withdraw(
    State(app): Shared,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ApprovalForm>,
) -> Response {
    with_session(
        app,
        headers.clone(),
        |app, session| async move { withdraw_as(&app, &session, &headers, id, form).await },
    )
    .await
}

/// `POST /approvals?id=…&action=decide|withdraw`: the forms of an approval
/// whose id a browser would not keep as a path segment (`gavel_client::links`).
async fn approval_action_by_query(
    State(app): Shared,
    headers: HeaderMap,
    Query(query): Query<LiveQuery>,
    Form(form): Form<ApprovalForm>,
) -> Response {
    with_session(app, headers.clone(), |app, session| async move {
        let id = query.id.ok_or(ConsoleError::NotFound)?;
        match query.action.as_deref() {
            Some("decide") => decide_as(&app, &session, &headers, id, form).await,
            Some("withdraw") => withdraw_as(&app, &session, &headers, id, form).await,
            _ => Err(ConsoleError::NotFound),
        }
    })
    .await
}

/// The checks every approval form passes before any call: origin, CSRF
/// token, and the approval id of its body equal to the address's (a page
/// of one approval cannot post to another's address).
fn check_approval_form(
    app: &App,
    session: &Session,
    headers: &HeaderMap,
    id: &str,
    form: &ApprovalForm,
) -> Result<(), ConsoleError> {
    security::check_origin(headers, &app.config.origin)?;
    security::check_csrf(form.csrf.as_deref(), &session.csrf)?;
    match form.approval_id.as_deref() {
        Some(named) if named == id => Ok(()),
        named => Err(ConsoleError::ApprovalMismatch { path: id.to_string(), form: named.unwrap_or("").to_string() }),
    }
}

/// One DecideApproval (a vote on a governed approval), bound to the terms
/// hash the page showed: the cluster refuses it (`APPROVAL_TERMS_CHANGED`)
/// when the approval's terms are not those, and the page then shows the
/// current terms with the refusal.
async fn decide_as(
    app: &App,
    session: &Session,
    headers: &HeaderMap,
    id: String,
    form: ApprovalForm,
) -> Result<Response, ConsoleError> {
    check_approval_form(app, session, headers, &id, &form)?;
    let status = match form.decision.as_deref() {
        Some("approve") => pb::ApprovalStatus::Approved,
        Some("reject") => pb::ApprovalStatus::Rejected,
        _ => return Err(ConsoleError::BadInput("decision must be approve or reject".to_string())),
    };
    let shown = form.terms_hash.unwrap_or_default();
    if shown.len() != 64 || !shown.bytes().all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(ConsoleError::BadInput(
            "the form carries no terms hash (64 lower-case hex digits): reload the approval's page".to_string(),
        ));
    }
    let comment = form.comment.map(|comment| comment.trim().to_string()).filter(|comment| !comment.is_empty());
    if comment.as_ref().is_some_and(|comment| comment.len() > COMMENT_MAX_BYTES) {
        return Err(ConsoleError::BadInput(format!("a comment is at most {COMMENT_MAX_BYTES} bytes")));
    }
    let request = pb::DecideApprovalRequest {
        id: id.clone(),
        status: status as i32,
        comment,
        terms_hash: Some(shown.clone()),
        ..pb::DecideApprovalRequest::default()
    };
    match session.client.decide_approval(request).await {
        Ok(_) => Ok(Redirect::to(&record_url("approvals", &id)).into_response()),
        Err(error @ gavel_client::Error::Domain { .. }) => {
            let refused = if error.code() == "APPROVAL_TERMS_CHANGED" {
                let request = pb::GetApprovalRequest { id: id.clone(), ..pb::GetApprovalRequest::default() };
                let current = match session.client.get_approval(request).await {
                    Ok(answer) => answer.approval.map(|approval| approval.terms_hash),
                    Err(error) if error.code() == "NOT_FOUND" => None,
                    Err(error) => return Err(error.into()),
                };
                ConsoleError::TermsChanged { shown, current: current.unwrap_or_default() }
            } else {
                ConsoleError::Cluster(error)
            };
            render_approval(app, session, &id, false, Some(&refused)).await
        }
        Err(error) => Err(error.into()),
    }
}

/// One WithdrawVote: the signed-in person's own vote leaves a pending
/// governed approval.
async fn withdraw_as(
    app: &App,
    session: &Session,
    headers: &HeaderMap,
    id: String,
    form: ApprovalForm,
) -> Result<Response, ConsoleError> {
    check_approval_form(app, session, headers, &id, &form)?;
    let request = pb::WithdrawVoteRequest { approval_id: id.clone(), ..pb::WithdrawVoteRequest::default() };
    match session.client.withdraw_vote(request).await {
        Ok(_) => Ok(Redirect::to(&record_url("approvals", &id)).into_response()),
        Err(error @ gavel_client::Error::Domain { .. }) => {
            render_approval(app, session, &id, false, Some(&ConsoleError::Cluster(error))).await
        }
        Err(error) => Err(error.into()),
    }
}

async fn history(State(app): Shared, headers: HeaderMap, Query(query): Query<LiveQuery>) -> Response {
    with_session(app, headers, |app, session| async move {
        let status = match query.status.as_deref().filter(|status| !status.is_empty()) {
            None => None,
            Some(name) => Some(
                pb::ApprovalStatus::from_str_name(&format!("APPROVAL_STATUS_{}", name.to_uppercase()))
                    .ok_or_else(|| ConsoleError::BadInput(format!("unknown status {name:?}")))? as i32,
            ),
        };
        let capability = query.capability.clone().filter(|capability| !capability.is_empty());
        let request = pb::ListApprovalsRequest {
            status,
            capability_id: capability.clone(),
            limit: u32::try_from(PAGE_SIZE).unwrap_or(25),
            page_token: query.page_token.clone().unwrap_or_default(),
            ..pb::ListApprovalsRequest::default()
        };
        let page = session.client.list_approvals(request).await?;
        let rows: Vec<Value> = page.approvals.iter().map(approval_view).collect();
        app.render(
            "history.html",
            query.live_only(),
            context! {
                me => me_view(&session), rows => rows, next_page_token => page.next_page_token,
                status => query.status.clone().unwrap_or_default(), capability => capability.unwrap_or_default(),
                statuses => ["approved", "rejected", "consumed", "expired", "cancelled", "pending"],
            },
        )
    })
    .await
}

/// Server-sent events: a `change` event (type and ids, no payload) for each
/// event the person's WatchEvents delivers; the page then re-reads its
/// live region with the person's own calls.
async fn events(State(app): Shared, headers: HeaderMap) -> Response {
    let session = match app.session(&headers) {
        Ok(session) => session,
        Err(error) => return (error.status(), error.code().to_string()).into_response(),
    };
    if session.streams.fetch_add(1, Ordering::SeqCst) >= STREAMS_PER_SESSION_MAX {
        session.streams.fetch_sub(1, Ordering::SeqCst);
        let error = ConsoleError::Busy(format!("at most {STREAMS_PER_SESSION_MAX} live streams per session"));
        return (error.status(), error.code().to_string()).into_response();
    }
    Sse::new(change_stream(session)).keep_alive(KeepAlive::new().interval(STREAM_KEEP_ALIVE)).into_response()
}

/// Releases a session's stream slot when the stream is dropped.
struct StreamSlot(Arc<Session>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::SeqCst);
    }
}

fn change_stream(session: Arc<Session>) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    let after = session.cursor.load(Ordering::SeqCst);
    let opened_ms = now_ms() - i64::try_from(STREAM_REPLAY_WINDOW.as_millis()).unwrap_or(0);
    let receiver = session.client.watch_events(after, None);
    let slot = StreamSlot(session);
    futures::stream::unfold((receiver, slot), move |(mut receiver, slot)| async move {
        loop {
            let event = receiver.recv().await?.ok()?;
            slot.0.cursor.fetch_max(event.cursor, Ordering::SeqCst);
            if after == 0 && event.timestamp_ms < opened_ms {
                continue;
            }
            let data = json!({
                "type": event.r#type, "approvalId": event.approval_id, "executionId": event.execution_id,
            });
            let sse = SseEvent::default().event("change").data(data.to_string());
            return Some((Ok(sse), (receiver, slot)));
        }
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;

    const ORIGIN: &str = "http://127.0.0.1:7500";

    /// A console whose cluster is unreachable: every refusal below must come
    /// from the console itself, before any call.
    fn console(dev: bool) -> Router {
        let dev_sign_in = dev.then(|| crate::DevSignIn {
            personas: vec!["user:carol".to_string()],
            mint: Arc::new(|principal: &str, _| Err(format!("no key for {principal} in this test"))),
        });
        let config = ConsoleConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            tls: None,
            origin: ORIGIN.into(),
            dev_sign_in,
            oidc: None,
        };
        router(config).expect("the templates parse")
    }

    async fn send(router: Router, request: Request<Body>) -> (StatusCode, HeaderMap, String) {
        let response = router.oneshot(request).await.expect("an answer");
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.expect("the body").to_bytes();
        (parts.status, parts.headers, String::from_utf8_lossy(&bytes).into_owned())
    }

    fn get(path: &str) -> Request<Body> {
        Request::get(path).body(Body::empty()).expect("a request")
    }

    fn form_post(path: &str, origin: Option<&str>, body: &str) -> Request<Body> {
        let mut request = Request::post(path).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        request.body(Body::from(body.to_string())).expect("a request")
    }

    #[tokio::test]
    async fn every_answer_carries_the_security_headers() {
        let (status, headers, body) = send(console(true), get("/signin")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("Development sign-in"), "{body}");
        assert_eq!(headers[header::CONTENT_SECURITY_POLICY], security::CONTENT_SECURITY_POLICY);
        assert_eq!(headers[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
        let (status, headers, _) = send(console(true), get("/assets/console.js")).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[header::CONTENT_TYPE], "text/javascript");
        assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }

    #[tokio::test]
    async fn pages_without_a_session_send_the_person_to_sign_in_and_back() {
        for (path, location) in [
            ("/inbox", "/signin"),
            ("/inbox?live=1", "/signin"),
            ("/history", "/signin?next=%2Fhistory"),
            ("/approvals/apr_1", "/signin?next=%2Fapprovals%2Fapr_1"),
            ("/approvals/apr_1?live=1", "/signin"),
            ("/approvals?id=..", "/signin?next=%2Fapprovals%3Fid%3D.."),
            ("/executions/ex_1", "/signin?next=%2Fexecutions%2Fex_1"),
        ] {
            let (status, headers, _) = send(console(true), get(path)).await;
            assert_eq!(status, StatusCode::SEE_OTHER, "{path}");
            assert_eq!(headers[header::LOCATION], location, "{path}");
        }
        // The sign-in page carries the page on, in the development form and
        // in the OpenID Connect link; a foreign one it drops.
        let (status, _, page) = send(console(true), get("/signin?next=%2Fapprovals%2Fapr_1")).await;
        assert_eq!(status, StatusCode::OK);
        // (The template engine escapes `/` in a value, as `&#x2f;`.)
        assert!(page.contains(r#"<input type="hidden" name="next" value="&#x2f;approvals&#x2f;apr_1">"#), "{page}");
        let (_, _, page) = send(oidc_console(), get("/signin?next=%2Fapprovals%2Fapr_1")).await;
        assert!(page.contains(r#"href="/oidc/start?next=%2Fapprovals%2Fapr_1""#), "{page}");
        for foreign in ["%2F%2Fevil.example%2Fx", "https%3A%2F%2Fevil.example", "%2F%5Cevil.example"] {
            let (_, _, page) = send(oidc_console(), get(&format!("/signin?next={foreign}"))).await;
            assert!(page.contains(r#"href="/oidc/start""#) && !page.contains("evil"), "{page}");
            let (_, _, page) = send(console(true), get(&format!("/signin?next={foreign}"))).await;
            assert!(!page.contains("name=\"next\"") && !page.contains("evil"), "{page}");
        }
        let forged = form_post("/approvals/apr_1/decide", Some(ORIGIN), "decision=approve");
        let (status, headers, _) = send(console(true), forged).await;
        assert_eq!(
            (status, &headers[header::LOCATION]),
            (StatusCode::SEE_OTHER, &header::HeaderValue::from_static("/signin"))
        );
        let (status, _, _) = send(console(true), get("/events")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }

    #[tokio::test]
    async fn a_sign_in_from_another_origin_or_without_one_is_refused() {
        for origin in [Some("http://evil.example"), Some("null"), None] {
            let (status, _, body) = send(console(true), form_post("/signin", origin, "principal=user:carol")).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{origin:?}");
            assert!(body.contains("ORIGIN_REFUSED"), "{body}");
        }
    }

    #[tokio::test]
    async fn a_bad_sign_in_is_refused_with_its_code() {
        let (status, _, body) = send(console(false), form_post("/signin", Some(ORIGIN), "principal=user:carol")).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(body.contains("DEV_SIGN_IN_DISABLED"), "{body}");
        let long = format!("principal=user:{}", "a".repeat(PRINCIPAL_MAX_BYTES));
        for body in ["principal=", "principal=carol", long.as_str()] {
            let (status, _, page) = send(console(true), form_post("/signin", Some(ORIGIN), body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
            assert!(page.contains("INVALID_ARGUMENT"), "{page}");
        }
        // The minter's refusal is shown, not a panic.
        let (status, _, page) = send(console(true), form_post("/signin", Some(ORIGIN), "principal=user:carol")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(page.contains("no key for user:carol"), "{page}");
    }

    #[tokio::test]
    async fn an_oversized_form_is_refused() {
        let body = format!("principal={}", "a".repeat(FORM_BODY_MAX_BYTES + 1));
        let (status, _, _) = send(console(true), form_post("/signin", Some(ORIGIN), &body)).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    /// A console signing in with a provider that is not there (port 1 of
    /// loopback): whatever it refuses below, it refuses without it.
    fn oidc_console() -> Router {
        let settings = gavel_oidc::ProviderSettings {
            rules: gavel_oidc::TokenRules {
                issuer: "http://127.0.0.1:1".to_string(),
                audience: "gavel-console".to_string(),
                principal_claim: "email".to_string(),
                principal_prefix: "user:".to_string(),
                clock_skew_seconds: 30,
            },
            jwks: gavel_oidc::JwksSource::Discovery,
            ca_file: None,
        };
        let provider = Arc::new(gavel_oidc::Provider::new(settings).expect("provider settings"));
        let oidc = crate::OidcSignIn { provider, client_id: "gavel-console".to_string(), client_secret: None };
        let config = ConsoleConfig {
            endpoints: vec!["127.0.0.1:1".into()],
            tls: None,
            origin: ORIGIN.into(),
            dev_sign_in: None,
            oidc: Some(oidc),
        };
        router(config).expect("the templates parse")
    }

    #[tokio::test]
    async fn openid_sign_in_refuses_a_foreign_or_unknown_state_and_says_when_it_is_off() {
        let (status, _, page) = send(oidc_console(), get("/signin")).await;
        assert_eq!(status, StatusCode::OK);
        assert!(page.contains("href=\"/oidc/start\"") && !page.contains("Development sign-in"), "{page}");
        let (status, _, page) = send(console(false), get("/oidc/start")).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert!(page.contains("OIDC_SIGN_IN_DISABLED"), "{page}");
        // No sign-in cookie (another browser), or one this console did not seal.
        let mut with_cookie = get("/oidc/callback?code=c&state=s1");
        with_cookie.headers_mut().insert(header::COOKIE, "gavel_oidc_state=s1".parse().expect("a header"));
        for request in [get("/oidc/callback?code=c&state=s1"), with_cookie, get("/oidc/callback?code=c")] {
            let (status, headers, page) = send(oidc_console(), request).await;
            assert_eq!(status, StatusCode::BAD_REQUEST);
            assert!(page.contains("OIDC_STATE_INVALID"), "{page}");
            let cleared = headers.get(header::SET_COOKIE).expect("the state cookie is cleared");
            assert!(cleared.to_str().expect("text").starts_with("gavel_oidc_state=;"), "{cleared:?}");
        }
        // The provider is down: a clear code, no redirect.
        let (status, _, page) = send(oidc_console(), get("/oidc/start")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY);
        assert!(page.contains("OIDC_PROVIDER_UNAVAILABLE"), "{page}");
    }

    #[test]
    fn a_governed_approval_shows_each_factors_progress() {
        let approval = pb::Approval {
            quorum: Some(pb::Quorum {
                policy: "refunds".into(),
                policy_version: 2,
                factors: vec![pb::FactorProgress { name: "finance".into(), k: 1, counted: 1 }],
                deny_threshold: 1,
                votes: vec![pb::Vote { principal: "user:fin".into(), approve: true, ..pb::Vote::default() }],
                ..pb::Quorum::default()
            }),
            ..pb::Approval::default()
        };
        let view = approval_view(&approval);
        let quorum = view.get_attr("quorum").expect("a quorum");
        assert_eq!(quorum.get_attr("policy").expect("policy").as_str(), Some("refunds"));
        let factor = quorum.get_attr("factors").expect("factors").get_item_by_index(0).expect("one factor");
        assert_eq!(factor.get_attr("counted").expect("counted").to_string(), "1");
        assert!(approval_view(&pb::Approval::default()).get_attr("quorum").expect("an attribute").is_none());
        let mut templates = Environment::new();
        templates.add_template("base.html", include_str!("../templates/base.html")).expect("base parses");
        templates.add_template("approval.html", include_str!("../templates/approval.html")).expect("page parses");
        let page = templates
            .get_template("approval.html")
            .expect("the page")
            .render(context! { approval => view })
            .expect("renders");
        assert!(page.contains("finance 1/1") && page.contains("user:fin: approve"), "{page}");
    }

    #[test]
    fn the_decision_controls_are_the_clusters_answer() {
        let mut approval = pb::Approval { status: pb::ApprovalStatus::Pending as i32, ..pb::Approval::default() };
        assert!(refusal_reason(&approval).is_some(), "no answer from the cluster: not offered");
        approval.controls = Some(pb::DecisionControls { may_decide: true, ..pb::DecisionControls::default() });
        assert_eq!(refusal_reason(&approval), None);
        assert!(!may_withdraw(&approval));
        approval.controls = Some(pb::DecisionControls {
            may_decide: false,
            may_withdraw: true,
            refusal_code: "VOTE_DUPLICATE".into(),
            refusal: "you already voted".into(),
        });
        assert_eq!(refusal_reason(&approval).as_deref(), Some("you already voted (VOTE_DUPLICATE)"));
        assert!(may_withdraw(&approval));
    }

    const TARGET: &str = "hv-e9814d";
    const DECOY: &str = "z/../../approvals/hv-e9814d";
    const DECOY_ENCODED: &str = "z%2F..%2F..%2Fapprovals%2Fhv-e9814d";

    /// Every `href` and `action` of a rendered page, HTML entities decoded
    /// as a browser decodes them.
    fn addresses_of(page: &str) -> Vec<String> {
        let mut found = Vec::new();
        for attribute in ["href=\"", "action=\""] {
            for piece in page.split(attribute).skip(1) {
                let value = piece.split('"').next().unwrap_or_default();
                found.push(value.replace("&#x2f;", "/").replace("&amp;", "&").replace("&#x27;", "'"));
            }
        }
        found
    }

    fn render(name: &str, ctx: Value) -> String {
        templates().expect("templates parse").get_template(name).expect("a template").render(ctx).expect("renders")
    }

    /// A standing approval as the cluster answers it: 100 uses within 7
    /// days, bound only at `/order_id`, one use spent.
    fn standing_approval(id: &str) -> pb::Approval {
        let input = r#"{"amount_cents":1,"order_id":"o-9"}"#;
        let terms = serde_json::json!({
            "approvalId": id,
            "capability": { "id": "orders.refund", "registered": true, "version": 1, "sideEffect": "write",
                            "risk": "high", "idempotent": false },
            "requester": { "principal": "user:alice", "subject": { "kind": "user", "id": "alice" } },
            "input": serde_json::from_str::<serde_json::Value>(input).expect("json"),
            "inputHash": "ab".repeat(32),
            "uses": { "max": 100, "windowMs": 604_800_000u64, "bound": [{ "pointer": "/order_id", "value": "o-9" }] },
            "policy": null,
            "expiresAtMs": 1,
        });
        pb::Approval {
            id: id.into(),
            capability_id: "orders.refund".into(),
            status: pb::ApprovalStatus::Pending as i32,
            input_json: input.into(),
            input_hash: "ab".repeat(32),
            terms_json: terms.to_string(),
            terms_hash: "cd".repeat(32),
            standing: Some(pb::StandingProgress {
                terms: Some(pb::StandingTerms {
                    uses_max: 100,
                    window_ms: 604_800_000,
                    bound_pointers: vec!["/order_id".into()],
                }),
                used_by: vec!["ex/../1".into()],
            }),
            quorum: Some(pb::Quorum { policy: "refunds".into(), ..pb::Quorum::default() }),
            ..pb::Approval::default()
        }
    }

    #[test]
    fn a_decoy_id_links_and_posts_only_to_its_own_encoded_address() {
        let mut approval = standing_approval(DECOY);
        approval.execution_id = Some("ex/../../approvals/x".into());
        let me = context! { principal => "user:carol", csrf => "t", development => true };
        let view = approval_view(&approval);
        let execution = context! { id => "ex/../../approvals/x", url => record_url("executions", "ex/../../approvals/x"), exists => false };
        let page = render(
            "approval.html",
            context! { me => me, approval => view, may_decide => true, may_withdraw => true, execution => execution },
        );
        let addresses = addresses_of(&page);
        assert!(addresses.contains(&format!("/approvals/{DECOY_ENCODED}/decide")), "{addresses:?}");
        assert!(addresses.contains(&format!("/approvals/{DECOY_ENCODED}/withdraw")), "{addresses:?}");
        assert!(addresses.contains(&"/executions/ex%2F..%2F..%2Fapprovals%2Fx".to_string()), "{addresses:?}");
        assert!(addresses.contains(&"/executions/ex%2F..%2F1".to_string()), "{addresses:?}");
        for address in &addresses {
            assert!(!address.contains("/..") && !address.contains(&format!("/{TARGET}")), "{address}");
        }
        // The form names its approval and the terms it shows, in its body.
        assert!(
            page.contains("name=\"approval_id\" value=\"z&#x2f;..&#x2f;..&#x2f;approvals&#x2f;hv-e9814d\""),
            "{page}"
        );
        assert!(page.contains(&format!("name=\"terms_hash\" value=\"{}\"", "cd".repeat(32))), "{page}");
        for (name, rows) in
            [("inbox.html", vec![approval_view(&approval)]), ("history.html", vec![approval_view(&approval)])]
        {
            let page = render(name, context! { me => me_view_for_test(), rows => rows, total => 1 });
            let addresses = addresses_of(&page);
            assert!(addresses.contains(&format!("/approvals/{DECOY_ENCODED}")), "{name}: {addresses:?}");
            assert!(addresses.iter().all(|address| !address.contains("/..")), "{name}: {addresses:?}");
        }
    }

    fn me_view_for_test() -> Value {
        context! { principal => "user:carol", csrf => "t", development => true }
    }

    #[test]
    fn a_standing_approvals_terms_come_before_its_buttons_and_the_inbox_marks_it() {
        let view = approval_view(&standing_approval("apr-standing"));
        let page = render(
            "approval.html",
            context! { me => me_view_for_test(), approval => view.clone(), may_decide => true, may_withdraw => false },
        );
        let buttons = page.find("id=\"decide\"").expect("the decision form");
        for shown in [
            "Standing approval",
            "up to <strong>100 times</strong> within <strong>7 days</strong>",
            "<code>&#x2f;order_id</code> = <code>&quot;o-9&quot;</code>",
            "1 spent, 99 left, of 100",
            "side effect <strong>write</strong>, risk <strong>high</strong>, idempotent no",
            "id=\"terms-hash\" title=\"cdcd",
        ] {
            let at = page.find(shown).unwrap_or_else(|| panic!("{shown} is not on the page: {page}"));
            assert!(at < buttons, "{shown} comes after the buttons");
        }
        assert!(!page.contains("One use") && !page.contains("id=\"withdraw\""), "{page}");
        let inbox = render("inbox.html", context! { me => me_view_for_test(), rows => vec![view], total => 1 });
        assert!(inbox.contains("Standing approval: 100 uses within 7 days"), "{inbox}");
        let one_shot = pb::Approval {
            id: "apr-1".into(),
            terms_json: r#"{"uses":{"max":1},"policy":null}"#.into(),
            ..pb::Approval::default()
        };
        let page = render(
            "approval.html",
            context! { me => me_view_for_test(), approval => approval_view(&one_shot), may_decide => true },
        );
        assert!(page.find("One use").expect("one use") < page.find("id=\"decide\"").expect("the form"), "{page}");
        assert!(!page.contains("Standing approval"), "{page}");
    }

    /// A console holding one signed-in session (its cluster unreachable):
    /// the router, the session cookie and its CSRF token.
    fn signed_in_console() -> (Router, String, String) {
        let app = Arc::new(App {
            config: ConsoleConfig {
                endpoints: vec!["127.0.0.1:1".into()],
                tls: None,
                origin: ORIGIN.into(),
                dev_sign_in: None,
                oidc: None,
            },
            templates: templates().expect("templates parse"),
            sessions: Sessions::default(),
            sign_in_sealer: SignInSealer::new().expect("a key"),
            spent_sign_ins: SpentSignIns::default(),
        });
        let csrf = crate::session::random_token();
        let session = Session {
            principal: "user:carol".into(),
            client: Client::new(&["127.0.0.1:1".to_string()]).expect("a client (never called)"),
            csrf: csrf.clone(),
            development: true,
            expires_at: std::time::Instant::now() + std::time::Duration::from_secs(3600),
            cursor: Default::default(),
            streams: Default::default(),
        };
        let id = app.sessions.insert(session).expect("a session");
        (routes(app), format!("{}={id}", crate::session::COOKIE_NAME), csrf)
    }

    #[tokio::test]
    async fn a_form_naming_another_approval_than_its_address_is_refused_before_any_call() {
        let (router, cookie, csrf) = signed_in_console();
        let hash = "cd".repeat(32);
        let form = |approval_id: &str, terms_hash: &str| {
            format!(
                "csrf={csrf}&approval_id={}&terms_hash={terms_hash}&decision=approve",
                gavel_client::links::percent_encoded(approval_id)
            )
        };
        let with_cookie = |mut request: Request<Body>| {
            request.headers_mut().insert(header::COOKIE, cookie.parse().expect("a header"));
            request
        };
        for (path, body) in [
            // The decoy's form, posted to the target's address.
            (format!("/approvals/{TARGET}/decide"), form(DECOY, &hash)),
            // The target's id in a form posted to the decoy's address.
            (format!("/approvals/{DECOY_ENCODED}/decide"), form(TARGET, &hash)),
            (format!("/approvals/{TARGET}/withdraw"), format!("csrf={csrf}")),
            ("/approvals?id=..&action=decide".to_string(), form(TARGET, &hash)),
        ] {
            let (status, _, page) = send(router.clone(), with_cookie(form_post(&path, Some(ORIGIN), &body))).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {page}");
            assert!(page.contains("APPROVAL_ID_MISMATCH"), "{path}: {page}");
        }
        // The decoy's own address decodes to the decoy's id: its form passes
        // that check (and is refused next for carrying no terms hash).
        for (path, id) in [
            (format!("/approvals/{DECOY_ENCODED}/decide"), DECOY),
            ("/approvals?id=..&action=decide".to_string(), ".."),
        ] {
            let (status, _, page) =
                send(router.clone(), with_cookie(form_post(&path, Some(ORIGIN), &form(id, "")))).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {page}");
            assert!(page.contains("INVALID_ARGUMENT") && page.contains("terms hash"), "{path}: {page}");
        }
    }

    #[test]
    fn inbox_rows_tell_requests_apart_by_id_request_time_and_leading_input_fields() {
        let refund = |id: &str, input: &str| pb::Approval {
            id: id.into(),
            capability_id: "orders.refund".into(),
            input_json: input.into(),
            requested_at_ms: 1_764_770_405_123,
            ..pb::Approval::default()
        };
        let rows = vec![
            approval_view(&refund("apr_refund-1", r#"{"amount_cents":1250,"order_id":"o-1"}"#)),
            approval_view(&refund("apr_refund-2", r#"{"<b>":"<script>x</script>","amount_cents":99}"#)),
        ];
        let inbox = render("inbox.html", context! { me => me_view_for_test(), rows => rows, total => 2 });
        for shown in [
            r#"title="apr_refund-1">apr_refund-1</code>"#,
            r#"<code class="key">amount_cents</code>: <code class="value">1250</code>"#,
            r#"<code class="key">order_id</code>: <code class="value">&quot;o-1&quot;</code>"#,
            r#"datetime="2025-12-03T14:00:05Z">2025-12-03 14:00:05 UTC</time>"#,
            // The template engine escapes what the input says.
            r#"<code class="key">&lt;b&gt;</code>: <code class="value">&quot;&lt;script&gt;x&lt;&#x2f;script&gt;&quot;</code>"#,
        ] {
            assert!(inbox.contains(shown), "{shown} is not in the inbox: {inbox}");
        }
        assert!(!inbox.contains("<script>") && !inbox.contains("<b>"), "{inbox}");
    }

    #[test]
    fn a_refusal_page_shows_the_code_once() {
        let refused = ConsoleError::Cluster(gavel_client::Error::Domain {
            code: "FAILED_PRECONDITION".into(),
            message: "approval a1 is approved".into(),
            problems: Vec::new(),
            status: tonic::Code::FailedPrecondition,
            approval: None,
        });
        let page = render("error.html", context! { code => refused.code(), message => refused.message() });
        assert_eq!(page.matches("FAILED_PRECONDITION").count(), 1, "{page}");
        assert!(page.contains("FAILED_PRECONDITION</code> approval a1 is approved"), "{page}");
    }

    #[test]
    fn status_names_are_short() {
        assert_eq!(status_name(pb::ApprovalStatus::Pending as i32), "pending");
        assert_eq!(status_name(99), "unknown");
    }

    #[test]
    fn without_javascript_an_expiry_reads_as_a_utc_time_and_how_far_off_it_is() {
        assert_eq!(expiry_from(30_000, 0), "in less than a minute");
        assert_eq!(expiry_from(600_000, 0), "in 10 min");
        assert_eq!(expiry_from(7_500_000, 0), "in 2 h 5 min");
        assert_eq!(expiry_from(3 * 86_400_000, 0), "in 3 days");
        assert_eq!(expiry_from(0, 1), "expired");

        let mut approval = standing_approval("apr-expiry");
        approval.expires_at_ms = 1_796_553_833_999;
        let view = approval_view(&approval);
        let inbox = render("inbox.html", context! { me => me_view_for_test(), rows => vec![view.clone()], total => 1 });
        assert!(inbox.contains(r#"datetime="2026-12-06T10:43:53Z">until 2026-12-06 10:43:53 UTC ("#), "{inbox}");
        let me = context! { principal => "user:carol", csrf => "t", development => true };
        let page = render("approval.html", context! { me => me, approval => view, may_decide => false });
        assert!(page.contains(">at 2026-12-06 10:43:53 UTC ("), "{page}");
        for shown in [&inbox, &page] {
            assert!(!shown.contains(">until 1796553833999") && !shown.contains(">at 1796553833999"), "{shown}");
        }
    }
}
