//! `basic_auth_users`: HTTP basic auth against bcrypt hashes, the way exporter-toolkit does it.
//!
//! bcrypt is slow on purpose (tens of milliseconds a check), and Prometheus sends the same
//! credentials every scrape, so results are cached. The cache key is the user, the hash *and*
//! the password: keyed by user alone, a wrong password would pass once the right one had been
//! seen (CVE-2022-46146 in exporter-toolkit). The key is a SHA-256 of the three, so no password
//! is kept in memory. An unknown user is checked against a dummy hash, so the time an answer
//! takes does not tell which users exist.

use super::{problem, Problem};
use crate::lock::Locked;
use base64::Engine;
use hyper::header::HeaderValue;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

/// Cached results kept at most; the cache is emptied when full (a flood of wrong passwords
/// then costs bcrypt checks again, not memory).
const CACHE_ENTRIES: usize = 1024;

/// bcrypt checks run at once; more wait. Each takes a core for tens of milliseconds: without
/// a bound, a burst of wrong passwords would starve the scrapes.
const CONCURRENT_CHECKS: usize = 2;

pub struct BasicAuth {
    users: HashMap<String, String>,
    cache: Mutex<HashMap<[u8; 32], bool>>,
    checks: Arc<tokio::sync::Semaphore>,
}

/// The hash unknown users are checked against, made once at the cost exporter-toolkit's
/// documentation uses, so checking it takes as long as checking a real user's.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| {
        bcrypt::hash("pipeline-pulse: no such user", 10).expect("bcrypt hashes a constant")
    })
}

impl BasicAuth {
    pub(super) fn new(users: &BTreeMap<String, String>) -> Result<BasicAuth, Problem> {
        for (user, hash) in users {
            let key = format!("basic_auth_users.{user}");
            if user.contains(':') {
                return Err(problem(key, "a user name cannot contain ':'"));
            }
            hash.parse::<bcrypt::HashParts>().map_err(|e| {
                problem(
                    key,
                    format!(
                        "not a bcrypt hash ({e}); make one with `htpasswd -nBC 10 \"\" | tr -d ':'`"
                    ),
                )
            })?;
        }
        Ok(BasicAuth {
            users: users.clone().into_iter().collect(),
            cache: Mutex::new(HashMap::new()),
            checks: Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CHECKS)),
        })
    }

    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// Whether an `Authorization` header names a user and their password.
    pub async fn allows(&self, header: Option<&HeaderValue>) -> bool {
        let Some((user, password)) = header.and_then(credentials) else {
            return false;
        };
        let (known, hash) = match self.users.get(&user) {
            Some(hash) => (true, hash.clone()),
            None => (false, dummy_hash().to_owned()),
        };
        let key = cache_key(&user, &hash, &password);
        let cached = self.lock().get(&key).copied();
        let matches = match cached {
            Some(matches) => matches,
            None => {
                let Ok(_permit) = self.checks.acquire().await else {
                    return false;
                };
                let checked = tokio::task::spawn_blocking(move || {
                    bcrypt::verify(password, &hash).unwrap_or(false)
                })
                .await
                .unwrap_or(false);
                let mut cache = self.lock();
                if cache.len() >= CACHE_ENTRIES {
                    cache.clear();
                }
                cache.insert(key, checked);
                checked
            }
        };
        known && matches
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], bool>> {
        self.cache.locked()
    }
}

/// `Basic base64(user:password)`, as RFC 7617 writes it.
fn credentials(header: &HeaderValue) -> Option<(String, String)> {
    let text = header.to_str().ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

fn cache_key(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    // Lengths first, so no two different triples write the same bytes.
    for part in [user, hash, password] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let mut key = [0u8; 32];
    key.copy_from_slice(ctx.finish().as_ref());
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    fn auth() -> BasicAuth {
        let hash = bcrypt::hash("right", 4).unwrap();
        BasicAuth::new(&[("alice".to_owned(), hash)].into()).unwrap()
    }

    #[tokio::test]
    async fn the_right_password_passes_and_a_wrong_one_never_does() {
        let auth = auth();
        assert!(auth.allows(Some(&basic("alice", "right"))).await);
        // Cached now: the cache must not let a wrong password through on the user's name.
        assert!(auth.allows(Some(&basic("alice", "right"))).await);
        assert!(!auth.allows(Some(&basic("alice", "wrong"))).await);
        assert!(!auth.allows(Some(&basic("alice", ""))).await);
        assert!(!auth.allows(Some(&basic("bob", "right"))).await);
        assert!(!auth.allows(None).await);
        assert!(
            !auth
                .allows(Some(&HeaderValue::from_static("Bearer abc")))
                .await
        );
        assert!(
            !auth
                .allows(Some(&HeaderValue::from_static("Basic !!!")))
                .await
        );
        assert_eq!(auth.lock().len(), 4);
    }

    #[test]
    fn the_cache_key_covers_user_hash_and_password() {
        let k = cache_key("alice", "h", "p");
        assert_ne!(k, cache_key("alice", "h", "q"));
        assert_ne!(k, cache_key("alic", "eh", "p"));
        assert_ne!(k, cache_key("alice", "g", "p"));
        assert_eq!(k, cache_key("alice", "h", "p"));
    }

    #[test]
    fn a_bad_hash_names_the_user() {
        let err = BasicAuth::new(&[("alice".to_owned(), "plaintext".to_owned())].into())
            .err()
            .unwrap();
        assert_eq!(err.0, "basic_auth_users.alice");
        assert!(credentials(&basic("a", "b:c")) == Some(("a".into(), "b:c".into())));
    }
}
