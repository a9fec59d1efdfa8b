//! The ACME protocol (RFC 8555): the directory, nonces, signed requests, the account and
//! the objects of an order.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::ari::RenewalInfo;
use crate::challenge::ChallengeKind;
use crate::error::{Error, Identifier, Problem};
use crate::http::{Https, Method, Response, Timeouts, TrustRoots};
use crate::jws::{b64, AccountKey};

/// How to reach an ACME server.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The directory URL, e.g. `https://acme-v02.api.letsencrypt.org/directory`.
    pub directory_url: String,
    /// Which roots its HTTPS certificate must chain to.
    pub roots: TrustRoots,
    /// Connection and request timeouts.
    pub timeouts: Timeouts,
    /// How long an order may take, from newOrder to the certificate, before
    /// [`Error::Timeout`].
    pub order_deadline: Duration,
}

impl ClientConfig {
    /// A server trusted through the system's roots, with the default timeouts and an order
    /// deadline of two minutes.
    pub fn new(directory_url: impl Into<String>) -> ClientConfig {
        ClientConfig {
            directory_url: directory_url.into(),
            roots: TrustRoots::system(),
            timeouts: Timeouts::default(),
            order_deadline: Duration::from_secs(120),
        }
    }
}

/// The server's directory (RFC 8555 section 7.1.1).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Directory {
    /// Where fresh nonces come from.
    pub new_nonce: String,
    /// Where accounts are made or found.
    pub new_account: String,
    /// Where orders start.
    pub new_order: String,
    /// Where certificates are revoked.
    pub revoke_cert: String,
    /// Where an account's key is changed.
    #[serde(default)]
    pub key_change: Option<String>,
    /// ACME Renewal Information (RFC 9773), if the server has it.
    #[serde(default)]
    pub renewal_info: Option<String>,
    /// What the server says of itself.
    #[serde(default)]
    pub meta: DirectoryMeta,
}

/// The directory's `meta` object.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectoryMeta {
    /// The terms of service an account agrees to.
    #[serde(default)]
    pub terms_of_service: Option<String>,
    /// The CA's web site.
    #[serde(default)]
    pub website: Option<String>,
    /// Whether newAccount needs an external account binding (not supported here).
    #[serde(default)]
    pub external_account_required: bool,
    /// The certificate profiles the server offers, by name (with a description).
    #[serde(default)]
    pub profiles: std::collections::BTreeMap<String, String>,
}

struct Wire {
    https: Https,
    nonces: Vec<String>,
}

/// A connection to an ACME server: its directory, and the requests it takes, one at a time
/// (the client can be shared between threads; they take turns).
pub struct Client {
    directory_url: String,
    directory: Directory,
    order_deadline: Duration,
    wire: Mutex<Wire>,
    bad_nonce_retries: AtomicU64,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("directory_url", &self.directory_url)
            .finish_non_exhaustive()
    }
}

/// Nonces kept from responses: more than a few means the server hands out more than are
/// used, and old ones go stale anyway.
const MAX_NONCES: usize = 8;

impl Client {
    /// Connects and reads the directory.
    pub fn new(config: ClientConfig) -> Result<Client, Error> {
        let mut https = Https::new(&config.roots, config.timeouts)?;
        let response = https.request(Method::Get, &config.directory_url, None)?;
        if !response.is_success() {
            return Err(problem_of(&response));
        }
        let directory: Directory = parse_json(&response, "directory")?;
        let mut nonces = Vec::new();
        if let Some(nonce) = response.nonce() {
            nonces.push(nonce.to_string());
        }
        Ok(Client {
            directory_url: config.directory_url,
            directory,
            order_deadline: config.order_deadline,
            wire: Mutex::new(Wire { https, nonces }),
            bad_nonce_retries: AtomicU64::new(0),
        })
    }

    /// The server's directory.
    pub fn directory(&self) -> &Directory {
        &self.directory
    }

    /// The directory URL this client was made for.
    pub fn directory_url(&self) -> &str {
        &self.directory_url
    }

    /// How many signed requests were sent again after a `badNonce` refusal.
    pub fn bad_nonce_retries(&self) -> u64 {
        self.bad_nonce_retries.load(Ordering::Relaxed)
    }

    fn wire(&self) -> std::sync::MutexGuard<'_, Wire> {
        // A panic while sending leaves nothing half-done in `Wire` worth refusing over.
        self.wire.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An unauthenticated GET (the directory, renewalInfo).
    pub(crate) fn get(&self, url: &str) -> Result<Response, Error> {
        let mut wire = self.wire();
        let response = wire.https.request(Method::Get, url, None)?;
        keep_nonce(&mut wire, &response);
        Ok(response)
    }

    /// A signed POST (RFC 8555 section 6.2) of `payload` (`None`: POST-as-GET), signed by
    /// `key` with `kid` (or its `jwk` when `None`), sent again once with a fresh nonce if
    /// the server says `badNonce` (section 6.5). A response other than 2xx is an error.
    pub(crate) fn post(
        &self,
        url: &str,
        key: &AccountKey,
        kid: Option<&str>,
        payload: Option<&Value>,
    ) -> Result<Response, Error> {
        let mut wire = self.wire();
        let mut retried = false;
        loop {
            let nonce = match wire.nonces.pop() {
                Some(nonce) => nonce,
                None => {
                    let url = &self.directory.new_nonce;
                    let response = wire.https.request(Method::Head, url, None)?;
                    match response.nonce() {
                        Some(nonce) => nonce.to_string(),
                        None if !response.is_success() => return Err(problem_of(&response)),
                        None => return Err(Error::Protocol(format!("{url} gave no Replay-Nonce"))),
                    }
                }
            };
            let body = key.sign(url, &nonce, kid, payload)?;
            let response = wire.https.request(Method::Post, url, Some(&body))?;
            keep_nonce(&mut wire, &response);
            if response.is_success() {
                return Ok(response);
            }
            let error = problem_of(&response);
            let bad_nonce = error.problem().is_some_and(|p| p.is("badNonce"));
            if bad_nonce && !retried {
                retried = true;
                self.bad_nonce_retries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("ACME server refused a nonce; sending {url} again");
                continue;
            }
            return Err(error);
        }
    }

    /// Revokes a certificate (DER) with a request signed by the certificate's own key
    /// (RFC 8555 section 7.6, the `jwk` form), for when the account is lost.
    pub fn revoke_with_certificate_key(
        &self,
        certificate_der: &[u8],
        certificate_key: &AccountKey,
        reason: Option<u8>,
    ) -> Result<(), Error> {
        let payload = revoke_payload(certificate_der, reason);
        self.post(
            &self.directory.revoke_cert,
            certificate_key,
            None,
            Some(&payload),
        )?;
        Ok(())
    }

    /// The window the server suggests for renewing the certificate of ARI identifier
    /// `ari_id` (RFC 9773); `None` when the server has no renewalInfo.
    pub fn renewal_info(&self, ari_id: &str) -> Result<Option<RenewalInfo>, Error> {
        let Some(base) = &self.directory.renewal_info else {
            return Ok(None);
        };
        let url = format!("{}/{ari_id}", base.trim_end_matches('/'));
        let response = self.get(&url)?;
        if !response.is_success() {
            return Err(problem_of(&response));
        }
        RenewalInfo::parse(&response.body, response.retry_after(SystemTime::now())).map(Some)
    }
}

fn keep_nonce(wire: &mut Wire, response: &Response) {
    if let Some(nonce) = response.nonce() {
        if wire.nonces.len() >= MAX_NONCES {
            wire.nonces.remove(0);
        }
        wire.nonces.push(nonce.to_string());
    }
}

fn revoke_payload(certificate_der: &[u8], reason: Option<u8>) -> Value {
    let mut payload = json!({"certificate": b64(certificate_der)});
    if let Some(reason) = reason {
        payload["reason"] = Value::from(reason);
    }
    payload
}

/// The error a non-2xx response stands for: its problem document, typed.
pub(crate) fn problem_of(response: &Response) -> Error {
    match Problem::parse(&response.body, response.status) {
        Some(problem) if problem.is("rateLimited") => Error::RateLimited {
            problem: Box::new(problem),
            retry_after: response.retry_after(SystemTime::now()),
        },
        Some(problem) => Error::Problem(Box::new(problem)),
        None => Error::Protocol(format!(
            "{} answered {} without a problem document",
            response.url, response.status
        )),
    }
}

fn parse_json<T: DeserializeOwned>(response: &Response, what: &str) -> Result<T, Error> {
    serde_json::from_slice(&response.body)
        .map_err(|e| Error::Protocol(format!("{what} from {}: {e}", response.url)))
}

/// The status of an order, authorization or challenge (RFC 8555 section 7.1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for the client (a challenge, an order's authorizations).
    Pending,
    /// Being validated or issued.
    Processing,
    /// The order waits to be finalized.
    Ready,
    /// Done.
    Valid,
    /// Failed.
    Invalid,
    /// An authorization the server withdrew.
    Revoked,
    /// An authorization the account gave up.
    Deactivated,
    /// Past its expiry.
    Expired,
    /// A status this client does not know.
    #[serde(other)]
    Unknown,
}

/// An order (RFC 8555 section 7.1.3).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// Where it stands.
    pub status: Status,
    /// The names ordered.
    #[serde(default)]
    pub identifiers: Vec<Identifier>,
    /// One authorization URL per name.
    #[serde(default)]
    pub authorizations: Vec<String>,
    /// Where the CSR goes.
    pub finalize: String,
    /// Where the certificate is, once valid.
    #[serde(default)]
    pub certificate: Option<String>,
    /// Why it failed, if it did.
    #[serde(default)]
    pub error: Option<Problem>,
    /// The ARI identifier of the certificate this order replaces.
    #[serde(default)]
    pub replaces: Option<String>,
    /// The order's URL (its `Location`).
    #[serde(skip)]
    pub url: String,
}

/// An authorization (RFC 8555 section 7.1.4).
#[derive(Debug, Clone, Deserialize)]
pub struct Authorization {
    /// Where it stands.
    pub status: Status,
    /// The name it is for.
    pub identifier: Identifier,
    /// The ways offered to prove control of it.
    #[serde(default)]
    pub challenges: Vec<Challenge>,
    /// Whether it is for a wildcard name.
    #[serde(default)]
    pub wildcard: bool,
}

/// A challenge (RFC 8555 section 7.1.5).
#[derive(Debug, Clone, Deserialize)]
pub struct Challenge {
    /// Its type (`http-01`, `tls-alpn-01`, `dns-01`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// Where to say it is ready.
    pub url: String,
    /// Where it stands.
    pub status: Status,
    /// The token (for the types this client answers).
    #[serde(default)]
    pub token: Option<String>,
    /// Why validation failed, if it did.
    #[serde(default)]
    pub error: Option<Problem>,
}

impl Authorization {
    /// The challenge of `kind`, if offered.
    pub fn challenge(&self, kind: ChallengeKind) -> Option<&Challenge> {
        self.challenges.iter().find(|c| c.kind == kind.as_str())
    }
}

/// An ACME account: its key and URL, and the client it speaks through.
#[derive(Debug)]
pub struct Account {
    client: Client,
    key: AccountKey,
    url: String,
}

#[derive(Deserialize)]
struct AccountJson {
    #[serde(default)]
    contact: Vec<String>,
}

impl Account {
    /// The account whose key is at `key_path` (made and written there, mode 0600, if
    /// missing), created on the server if it is new there (newAccount, RFC 8555 section
    /// 7.3) with `contact` (`mailto:` URLs) and the terms of service agreed to when
    /// `terms_agreed`. An existing account whose contacts differ is updated.
    pub fn open(
        client: Client,
        key_path: &Path,
        contact: &[String],
        terms_agreed: bool,
    ) -> Result<Account, Error> {
        let (key, created) = AccountKey::load_or_create(key_path)?;
        if created {
            tracing::info!("made ACME account key {}", key_path.display());
        }
        Account::with_key(client, key, contact, terms_agreed)
    }

    /// As [`Account::open`], with a key in hand.
    pub fn with_key(
        client: Client,
        key: AccountKey,
        contact: &[String],
        terms_agreed: bool,
    ) -> Result<Account, Error> {
        if client.directory.meta.external_account_required {
            return Err(Error::Unsupported(
                "the ACME server requires an external account binding".into(),
            ));
        }
        let payload = json!({"contact": contact, "termsOfServiceAgreed": terms_agreed});
        let url = client.directory.new_account.clone();
        let response = client.post(&url, &key, None, Some(&payload))?;
        let account_url = response
            .location()
            .ok_or_else(|| Error::Protocol("newAccount gave no Location".into()))?;
        let existing = response.status == 200;
        let account = Account {
            client,
            key,
            url: account_url,
        };
        if existing {
            let known: AccountJson = parse_json(&response, "account")?;
            if known.contact != contact {
                let update = json!({"contact": contact});
                account.post(&account.url, Some(&update))?;
                tracing::info!("updated the contacts of ACME account {}", account.url);
            }
        } else {
            tracing::info!("created ACME account {}", account.url);
        }
        Ok(account)
    }

    /// The account's URL (its `kid`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The account's key.
    pub fn key(&self) -> &AccountKey {
        &self.key
    }

    /// The client it speaks through.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// How long an order may take (from the client's configuration).
    pub fn order_deadline(&self) -> Duration {
        self.client.order_deadline
    }

    fn post(&self, url: &str, payload: Option<&Value>) -> Result<Response, Error> {
        self.client.post(url, &self.key, Some(&self.url), payload)
    }

    /// Starts an order for DNS `names` (newOrder, RFC 8555 section 7.4), naming the
    /// certificate it `replaces` (an ARI identifier, RFC 9773 section 5) and the
    /// certificate `profile` when given.
    pub fn new_order(
        &self,
        names: &[String],
        replaces: Option<&str>,
        profile: Option<&str>,
    ) -> Result<Order, Error> {
        let identifiers: Vec<Value> = names
            .iter()
            .map(|name| json!({"type": "dns", "value": name}))
            .collect();
        let mut payload = json!({"identifiers": identifiers});
        if let Some(replaces) = replaces {
            payload["replaces"] = Value::from(replaces);
        }
        if let Some(profile) = profile {
            payload["profile"] = Value::from(profile);
        }
        let response = self.post(&self.client.directory.new_order, Some(&payload))?;
        let mut order: Order = parse_json(&response, "order")?;
        order.url = response
            .location()
            .ok_or_else(|| Error::Protocol("newOrder gave no Location".into()))?;
        Ok(order)
    }

    /// The order at `url`, as it is now.
    pub fn order(&self, url: &str) -> Result<Order, Error> {
        Ok(self.order_and_wait(url)?.0)
    }

    fn order_and_wait(&self, url: &str) -> Result<(Order, Option<Duration>), Error> {
        let response = self.post(url, None)?;
        let mut order: Order = parse_json(&response, "order")?;
        order.url = url.to_string();
        Ok((order, response.retry_after(SystemTime::now())))
    }

    /// The authorization at `url`, as it is now.
    pub fn authorization(&self, url: &str) -> Result<Authorization, Error> {
        Ok(self.authorization_and_wait(url)?.0)
    }

    fn authorization_and_wait(
        &self,
        url: &str,
    ) -> Result<(Authorization, Option<Duration>), Error> {
        let response = self.post(url, None)?;
        let authz = parse_json(&response, "authorization")?;
        Ok((authz, response.retry_after(SystemTime::now())))
    }

    /// Tells the server the challenge can be validated (RFC 8555 section 7.5.1).
    pub fn respond(&self, challenge: &Challenge) -> Result<Challenge, Error> {
        let response = self.post(&challenge.url, Some(&json!({})))?;
        parse_json(&response, "challenge")
    }

    /// Polls the authorization at `url` until it is settled (not pending or processing),
    /// honouring `Retry-After`, until `deadline`.
    pub fn poll_authorization(&self, url: &str, deadline: Instant) -> Result<Authorization, Error> {
        let mut backoff = Backoff::new();
        loop {
            let (authz, retry_after) = self.authorization_and_wait(url)?;
            if !matches!(authz.status, Status::Pending | Status::Processing) {
                return Ok(authz);
            }
            backoff.wait(retry_after, deadline, || {
                format!(
                    "authorization for {} still {:?}",
                    authz.identifier.value, authz.status
                )
            })?;
        }
    }

    /// Polls the order at `url` until its status is not one of `waiting`, honouring
    /// `Retry-After`, until `deadline`.
    pub fn poll_order(
        &self,
        url: &str,
        waiting: &[Status],
        deadline: Instant,
    ) -> Result<Order, Error> {
        let mut backoff = Backoff::new();
        loop {
            let (order, retry_after) = self.order_and_wait(url)?;
            if !waiting.contains(&order.status) {
                return Ok(order);
            }
            backoff.wait(retry_after, deadline, || {
                format!("order {url} still {:?}", order.status)
            })?;
        }
    }

    /// Finalizes a ready order with a CSR (DER) (RFC 8555 section 7.4).
    pub fn finalize(&self, order: &Order, csr_der: &[u8]) -> Result<Order, Error> {
        let response = self.post(&order.finalize, Some(&json!({"csr": b64(csr_der)})))?;
        let mut finalized: Order = parse_json(&response, "order")?;
        finalized.url = order.url.clone();
        Ok(finalized)
    }

    /// Downloads a certificate chain, PEM (`application/pem-certificate-chain`), with the
    /// URLs of the alternate chains the server offers (`Link: rel="alternate"`).
    pub fn certificate_chain(&self, url: &str) -> Result<(String, Vec<String>), Error> {
        let response = self.post(url, None)?;
        let pem = String::from_utf8(response.body.clone())
            .map_err(|_| Error::Protocol(format!("certificate at {url} is not PEM text")))?;
        if !pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::Protocol(format!("certificate at {url} is not PEM")));
        }
        Ok((pem, response.links("alternate")))
    }

    /// Revokes a certificate (DER) this account holds, with an RFC 5280 reason code if
    /// given (RFC 8555 section 7.6).
    pub fn revoke(&self, certificate_der: &[u8], reason: Option<u8>) -> Result<(), Error> {
        let payload = revoke_payload(certificate_der, reason);
        self.post(&self.client.directory.revoke_cert, Some(&payload))?;
        Ok(())
    }
}

/// Waits between polls: the server's `Retry-After` when it gives one, else from half a
/// second doubling to eight, never past the deadline.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MOST: Duration = Duration::from_secs(8);
    /// A `Retry-After` longer than this is taken as this: the order has a deadline anyway.
    const LONGEST_ASKED: Duration = Duration::from_secs(60);

    fn new() -> Backoff {
        Backoff { next: Self::FIRST }
    }

    fn wait(
        &mut self,
        retry_after: Option<Duration>,
        deadline: Instant,
        what: impl FnOnce() -> String,
    ) -> Result<(), Error> {
        let wait = match retry_after {
            // A date in the past, or zero: a moment still, not a busy loop.
            Some(asked) => asked.clamp(Duration::from_millis(100), Self::LONGEST_ASKED),
            None => {
                let wait = self.next;
                self.next = (self.next * 2).min(Self::MOST);
                wait
            }
        };
        if Instant::now() + wait > deadline {
            return Err(Error::Timeout(what()));
        }
        thread::sleep(wait);
        Ok(())
    }
}
