//! The IO half: one OpenID Provider, its discovery document and its JWKS,
//! fetched on first need and again when a token names a `kid` the cached
//! set lacks, at most once per [`JWKS_REFRESH_INTERVAL_MIN`].

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::http::HttpClient;
use crate::limits::{ID_TOKEN_LIFETIME_MAX_DEFAULT, JWKS_REFRESH_INTERVAL_MIN};
use crate::verify::{token_header, verify_with_keys, Identity, KeySet, TokenRules};
use crate::OidcError;

/// Where the provider's signing keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// The `jwks_uri` of the issuer's discovery document.
    Discovery,
    /// A JWKS URL given directly.
    Url(String),
    /// A JWKS file (read again on each refresh, so a rotated file is picked up).
    File(PathBuf),
}

impl JwksSource {
    /// `--oidc-jwks`: an `http(s)://` URL or a file path; absent is discovery.
    pub fn from_flag(value: Option<&str>) -> JwksSource {
        match value {
            None => JwksSource::Discovery,
            Some(url) if url.starts_with("https://") || url.starts_with("http://") => JwksSource::Url(url.to_string()),
            Some(path) => JwksSource::File(PathBuf::from(path)),
        }
    }
}

/// How to reach and trust one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSettings {
    /// What a token must say and how the principal is made.
    pub rules: TokenRules,
    /// Where the keys come from.
    pub jwks: JwksSource,
    /// PEM CAs to trust for the provider's https; the system's without.
    pub ca_file: Option<PathBuf>,
}

/// The parts of the provider's `/.well-known/openid-configuration` Gavel uses.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Discovery {
    /// Must equal the configured issuer (OpenID Connect Discovery §4.3).
    pub issuer: String,
    /// Where the browser is sent to sign in.
    pub authorization_endpoint: String,
    /// Where the console exchanges the code.
    pub token_endpoint: String,
    /// The provider's signing keys.
    pub jwks_uri: String,
}

#[derive(Default)]
struct Cache {
    discovery: Option<Discovery>,
    keys: Arc<KeySet>,
    /// When the keys were last fetched, or a fetch last failed.
    fetched_at: Option<Instant>,
    /// Why the last fetch failed, until one succeeds: what a token that
    /// needs a fetch is told while the next one is not yet allowed.
    failure: Option<OidcError>,
}

/// One provider: verifies its ID tokens, fetching what it needs lazily, so
/// a node starts even while the provider is down (tokens are refused with
/// `OIDC_PROVIDER_UNAVAILABLE` until it answers).
pub struct Provider {
    settings: ProviderSettings,
    /// The longest lifetime (`exp − iat`) a token may have.
    lifetime_max: Duration,
    http: HttpClient,
    cache: RwLock<Cache>,
    // Held across a fetch: one refresh at a time, the rest wait for it.
    refreshing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Provider")
            .field("settings", &self.settings)
            .field("lifetime_max", &self.lifetime_max)
            .finish_non_exhaustive()
    }
}

/// Whether a JWKS fetch may happen at `now` after the last one at `last`.
pub fn refresh_allowed(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|last| now.saturating_duration_since(last) >= JWKS_REFRESH_INTERVAL_MIN)
}

impl Provider {
    /// A provider for `settings`, whose tokens may live at most
    /// [`ID_TOKEN_LIFETIME_MAX_DEFAULT`]; checks the URLs and the CA file,
    /// fetches nothing yet.
    pub fn new(settings: ProviderSettings) -> Result<Provider, OidcError> {
        crate::http::Target::parse(&settings.rules.issuer)?;
        if let JwksSource::Url(url) = &settings.jwks {
            crate::http::Target::parse(url)?;
        }
        if settings.rules.principal_claim.is_empty() {
            return Err(OidcError::Settings("the principal claim is empty".to_string()));
        }
        let http = HttpClient::new(settings.ca_file.as_deref())?;
        Ok(Provider {
            settings,
            lifetime_max: ID_TOKEN_LIFETIME_MAX_DEFAULT,
            http,
            cache: RwLock::new(Cache::default()),
            refreshing: tokio::sync::Mutex::new(()),
        })
    }

    /// This provider with tokens living at most `lifetime_max` (`exp − iat`):
    /// a node passes its `--token-lifetime-max`, the bound its own tokens get.
    pub fn with_lifetime_max(self, lifetime_max: Duration) -> Provider {
        Provider { lifetime_max, ..self }
    }

    /// The longest lifetime (`exp − iat`) a token of this provider may have.
    pub fn lifetime_max(&self) -> Duration {
        self.lifetime_max
    }

    /// The rules tokens are checked by.
    pub fn rules(&self) -> &TokenRules {
        &self.settings.rules
    }

    /// The HTTP client the provider is reached with (the console's token exchange uses it).
    pub fn http(&self) -> &HttpClient {
        &self.http
    }

    /// The discovery document, fetched once and kept.
    pub async fn discovery(&self) -> Result<Discovery, OidcError> {
        if let Some(discovery) = self.read_cache().discovery.clone() {
            return Ok(discovery);
        }
        let url = format!("{}/.well-known/openid-configuration", self.settings.rules.issuer.trim_end_matches('/'));
        let body = self.http.get(&url).await?;
        let discovery: Discovery = serde_json::from_slice(&body)
            .map_err(|error| OidcError::Provider(format!("{url} is not a discovery document: {error}")))?;
        if discovery.issuer != self.settings.rules.issuer {
            return Err(OidcError::Provider(format!(
                "the discovery document names issuer {:?}, not the configured {:?}",
                discovery.issuer, self.settings.rules.issuer
            )));
        }
        for endpoint in [&discovery.authorization_endpoint, &discovery.token_endpoint, &discovery.jwks_uri] {
            crate::http::Target::parse(endpoint)?;
        }
        self.write_cache().discovery = Some(discovery.clone());
        Ok(discovery)
    }

    /// Verifies an ID token at `now` (seconds since the Unix epoch),
    /// refreshing the keys once when its `kid` is unknown (rate-limited).
    pub async fn verify(&self, token: &str, now: u64, expected_nonce: Option<&str>) -> Result<Identity, OidcError> {
        let header = token_header(token)?;
        let keys = self.read_cache().keys.clone();
        let known = match &header.kid {
            Some(kid) => keys.has_kid(kid),
            None => !keys.is_empty(),
        };
        let keys = if known { keys } else { self.refresh(header.kid.as_deref()).await? };
        verify_with_keys(&keys, token, &self.settings.rules, self.lifetime_max, now, expected_nonce)
    }

    /// Fetches the JWKS again unless the last fetch was too recent (or
    /// another caller's refresh already brought the `kid`).
    async fn refresh(&self, kid: Option<&str>) -> Result<Arc<KeySet>, OidcError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let (keys, fetched_at, failure) = {
            let cache = self.read_cache();
            (cache.keys.clone(), cache.fetched_at, cache.failure.clone())
        };
        let satisfied = kid.map_or(!keys.is_empty(), |kid| keys.has_kid(kid));
        if satisfied {
            return Ok(keys);
        }
        if !refresh_allowed(fetched_at, Instant::now()) {
            return match failure {
                Some(failure) => Err(failure),
                None => Ok(keys),
            };
        }
        match self.fetch_key_set().await {
            Ok(keys) => {
                let keys = Arc::new(keys);
                let mut cache = self.write_cache();
                cache.keys = keys.clone();
                cache.fetched_at = Some(Instant::now());
                cache.failure = None;
                Ok(keys)
            }
            Err(failure) => {
                // A failed fetch counts against the rate too: a provider
                // that is down is not asked again on every token, and no
                // call waits out another timeout before the interval ends.
                let mut cache = self.write_cache();
                cache.fetched_at = Some(Instant::now());
                cache.failure = Some(failure.clone());
                Err(failure)
            }
        }
    }

    /// The provider's current key set, from its source.
    async fn fetch_key_set(&self) -> Result<KeySet, OidcError> {
        let body: bytes::Bytes = match &self.settings.jwks {
            JwksSource::File(path) => tokio::fs::read(path)
                .await
                .map_err(|error| OidcError::Provider(format!("reading {}: {error}", path.display())))?
                .into(),
            JwksSource::Url(url) => self.http.get(url).await?,
            JwksSource::Discovery => {
                let url = self.discovery().await?.jwks_uri;
                self.http.get(&url).await?
            }
        };
        KeySet::from_jwks(&body)
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, Cache> {
        self.cache.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_cache(&self) -> std::sync::RwLockWriteGuard<'_, Cache> {
        self.cache.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
