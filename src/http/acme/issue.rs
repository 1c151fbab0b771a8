//! One certificate order, start to end: the account (kept, or created and
//! kept), a new order, the HTTP-01 challenges answered, the order
//! finalised with a fresh key (ECDSA P-256, by rcgen inside instant-acme)
//! and the chain fetched. Waits between polls are bounded in number and
//! time; each request is bounded by [`super::client`].

use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeType, Identifier, NewAccount,
    NewOrder, Order, OrderStatus,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::client::Ureq;
use super::Challenges;
use crate::config::acme::{Acme as Settings, MAX_DOMAINS};
use crate::state::acme::AcmeFiles;

/// How long an order may take from the challenges on (validation and
/// issuance); Let's Encrypt takes seconds.
const ORDER_DEADLINE: Duration = Duration::from_secs(300);

/// Why no certificate was obtained or served.
#[derive(Debug)]
pub enum IssueError {
    /// The account cannot be read, created or written.
    Account(String),
    /// The ACME server refused or failed a request (its problem document
    /// or the transport error).
    Server(String),
    /// A challenge failed: the CA could not fetch the token (its reason).
    Challenge(String),
    /// The order took longer than [`ORDER_DEADLINE`].
    Timeout,
    /// The certificate came back unusable.
    Certificate(String),
    /// The certificate cannot be written to the state dir.
    Keep(String),
    /// The HTTPS store refused the certificate.
    Install(String),
}

impl fmt::Display for IssueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IssueError::Account(m) => write!(f, "account: {m}"),
            IssueError::Server(m) => write!(f, "ACME server: {m}"),
            IssueError::Challenge(m) => write!(f, "challenge failed: {m}"),
            IssueError::Timeout => write!(
                f,
                "the order was not done within {}s",
                ORDER_DEADLINE.as_secs()
            ),
            IssueError::Certificate(m) => write!(f, "unusable certificate: {m}"),
            IssueError::Keep(m) => write!(f, "cannot keep the certificate: {m}"),
            IssueError::Install(m) => write!(f, "cannot serve the certificate: {m}"),
        }
    }
}

impl std::error::Error for IssueError {}

/// A server error as [`IssueError::Server`].
fn server(e: instant_acme::Error) -> IssueError {
    IssueError::Server(e.to_string())
}

/// A certificate obtained.
pub struct Issued {
    /// The private key, then the full chain (PEM).
    pub pem: String,
    /// `notAfter` of the leaf, Unix seconds.
    pub not_after: i64,
    /// SHA-256 of the leaf (DER), hex.
    pub fingerprint: String,
}

/// `account.json`: the credentials and the directory they belong to.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct KeptAccount {
    directory: String,
    credentials: AccountCredentials,
}

/// Order a certificate for `s.domains`.
///
/// # Errors
/// Any step failed; the message says which and why.
pub fn issue(
    s: &Settings,
    files: &AcmeFiles,
    challenges: &Challenges,
) -> Result<Issued, IssueError> {
    let tls = crate::runs::callback::send::tls_config(&s.extra_roots);
    let http = || Box::new(Ureq::new(std::sync::Arc::clone(&tls), s.timeout));
    pollster::block_on(async {
        let ids: Vec<Identifier> = s.domains.iter().cloned().map(Identifier::Dns).collect();
        let mut reuse = true;
        let mut order = loop {
            let account = account(s, files, http(), reuse).await?;
            match account.new_order(&NewOrder::new(&ids)).await {
                // The CA no longer knows the kept account (its database
                // was reset): a new one, once. Without this every renewal
                // failed the same way until the certificate expired.
                Err(e) if reuse && account_gone(&e) => {
                    log::warn!(
                        "acme: the CA no longer knows the kept account ({e}); registering a new one"
                    );
                    reuse = false;
                }
                r => break r.map_err(server)?,
            }
        };
        let mut tokens = Vec::new();
        let result = answer_and_finish(&mut order, challenges, &mut tokens).await;
        challenges.remove(&tokens);
        result
    })
}

/// Whether `e` says the CA does not know the account (RFC 8555 §7.3.1,
/// `accountDoesNotExist`).
fn account_gone(e: &instant_acme::Error) -> bool {
    matches!(e, instant_acme::Error::Api(p)
        if p.r#type.as_deref() == Some("urn:ietf:params:acme:error:accountDoesNotExist"))
}

/// The kept account of this directory (when `reuse`), or a new one (then
/// kept).
async fn account(
    s: &Settings,
    files: &AcmeFiles,
    http: Box<Ureq>,
    reuse: bool,
) -> Result<Account, IssueError> {
    let kept = files
        .account()
        .map_err(|e| IssueError::Account(e.to_string()))?
        .and_then(|b| serde_json::from_slice::<KeptAccount>(&b).ok())
        .filter(|k| reuse && k.directory == s.directory);
    if let Some(k) = kept {
        return Account::builder_with_http(http)
            .from_credentials(k.credentials)
            .await
            .map_err(server);
    }
    let contact: Vec<&str> = s.contact.iter().map(String::as_str).collect();
    let new = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = Account::builder_with_http(http)
        .create(&new, s.directory.clone(), None)
        .await
        .map_err(server)?;
    let kept = KeptAccount {
        directory: s.directory.clone(),
        credentials,
    };
    let json = serde_json::to_vec_pretty(&kept).map_err(|e| IssueError::Account(e.to_string()))?;
    files
        .save_account(&json)
        .map_err(|e| IssueError::Account(format!("cannot keep it: {e}")))?;
    log::info!("acme: new account {} at {}", account.id(), s.directory);
    Ok(account)
}

/// Answer the order's challenges (their tokens added to `tokens`), wait
/// for it to be ready, finalise it and fetch the chain. A request the CA
/// refuses once a challenge was answered is told by the failed
/// challenge's own error when there is one: the CA may answer the next
/// request with its problem document before the order shows `invalid`
/// (pebble did, on a loaded machine).
async fn answer_and_finish(
    order: &mut Order,
    challenges: &Challenges,
    tokens: &mut Vec<String>,
) -> Result<Issued, IssueError> {
    match answer_and_finish_steps(order, challenges, tokens).await {
        Err(IssueError::Server(m)) if !tokens.is_empty() => match challenge_errors(order).await {
            Some(why) => Err(IssueError::Challenge(why)),
            None => Err(IssueError::Server(m)),
        },
        r => r,
    }
}

/// The steps of [`answer_and_finish`].
async fn answer_and_finish_steps(
    order: &mut Order,
    challenges: &Challenges,
    tokens: &mut Vec<String>,
) -> Result<Issued, IssueError> {
    let mut authzs = order.authorizations();
    while let Some(authz) = authzs.next().await {
        let mut authz = authz.map_err(server)?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => {
                let msg = format!("authorization for {} is {other:?}", authz.identifier());
                return Err(IssueError::Challenge(msg));
            }
        }
        let mut ch = authz
            .challenge(ChallengeType::Http01)
            .ok_or_else(|| IssueError::Server("the CA offers no http-01 challenge".into()))?;
        challenges.insert(
            ch.token.clone(),
            ch.key_authorization().as_str().to_string(),
        );
        tokens.push(ch.token.clone());
        // One authorization per name: a CA asking for more is not
        // followed (each would hold a token in memory).
        if tokens.len() > MAX_DOMAINS {
            let msg = format!("the order has more than {MAX_DOMAINS} authorizations");
            return Err(IssueError::Server(msg));
        }
        ch.set_ready().await.map_err(server)?;
    }
    let deadline = Instant::now() + ORDER_DEADLINE;
    wait_ready(order, deadline).await?;
    let key_pem = order.finalize().await.map_err(server)?;
    let chain = loop {
        if let Some(chain) = order.certificate().await.map_err(server)? {
            break chain;
        }
        pause(deadline)?;
    };
    issued(key_pem, &chain)
}

/// Poll the order until it is ready; an invalid order's reason is the
/// failed challenge's error.
async fn wait_ready(order: &mut Order, deadline: Instant) -> Result<(), IssueError> {
    loop {
        let state = order.refresh().await.map_err(server)?;
        match state.status {
            OrderStatus::Ready | OrderStatus::Valid => return Ok(()),
            OrderStatus::Invalid => return Err(IssueError::Challenge(why_invalid(order).await)),
            OrderStatus::Pending | OrderStatus::Processing => pause(deadline)?,
        }
    }
}

/// The errors of the order's failed challenges, in one line.
async fn why_invalid(order: &mut Order) -> String {
    challenge_errors(order)
        .await
        .unwrap_or_else(|| "the CA marked the order invalid".into())
}

/// The errors of the order's failed challenges, in one line, if any.
async fn challenge_errors(order: &mut Order) -> Option<String> {
    let mut reasons = Vec::new();
    let mut authzs = order.authorizations();
    while let Some(Ok(authz)) = authzs.next().await {
        let name = authz.identifier().to_string();
        for ch in &authz.challenges {
            if let Some(e) = &ch.error {
                reasons.push(format!("{name}: {e}"));
            }
        }
    }
    (!reasons.is_empty()).then(|| reasons.join("; "))
}

/// Wait a little before polling again, or fail past `deadline`.
fn pause(deadline: Instant) -> Result<(), IssueError> {
    if Instant::now() >= deadline {
        return Err(IssueError::Timeout);
    }
    thread::sleep(Duration::from_millis(500));
    Ok(())
}

/// The key and chain as one PEM, with the leaf's `notAfter` and
/// fingerprint.
fn issued(key_pem: String, chain: &str) -> Result<Issued, IssueError> {
    let bad = |m: &str| IssueError::Certificate(m.to_string());
    let leaf = CertificateDer::pem_slice_iter(chain.as_bytes())
        .next()
        .ok_or_else(|| bad("no certificate in the chain"))?
        .map_err(|e| bad(&e.to_string()))?;
    let not_after = crate::http::tls::not_after(&leaf).ok_or_else(|| bad("no notAfter"))?;
    Ok(Issued {
        pem: format!("{}\n{}", key_pem.trim_end(), chain),
        not_after,
        fingerprint: hex::encode(Sha256::digest(&leaf)),
    })
}

/// SHA-256 (hex) of the first certificate of a PEM file.
pub fn leaf_fingerprint(pem: &[u8]) -> Option<String> {
    let leaf = CertificateDer::pem_slice_iter(pem).next()?.ok()?;
    Some(hex::encode(Sha256::digest(&leaf)))
}
