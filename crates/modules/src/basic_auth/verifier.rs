//! Password checks with a cache of the ones that succeeded, since a bcrypt check costs
//! milliseconds and a browser sends the same credentials with every request.

use std::io;
use std::num::NonZeroUsize;

use hmac::{Hmac, KeyInit, Mac};
use lru::LruCache;
use sha2::Sha256;

use super::htpasswd::{Error, Htpasswd};

/// A cache size that holds the users of a busy site's htpasswd file several times over (a
/// user may be logged in with more than one password only while the file changes).
pub const DEFAULT_CACHE_ENTRIES: usize = 1024;

/// A cache entry: the HMAC-SHA-256 of a user and password that matched.
type Tag = [u8; 32];

/// Checks passwords against an [`Htpasswd`], remembering the last `capacity` user and
/// password pairs that matched so that their next check costs an HMAC instead of a bcrypt.
///
/// Only bcrypt and `$apr1$` checks are cached ([`Scheme::is_slow`](super::Scheme::is_slow)):
/// a `{SHA}` check costs less than the cache lookup.
///
/// # Why the cache is safe
///
/// * **It holds no password.** An entry is the HMAC-SHA-256 of the user and password under
///   a 256-bit key drawn from the operating system for each verifier and never written
///   anywhere. The tags say nothing of a password to whoever reads them without the key. (With
///   the process's memory, key included, one could test guesses against a cached tag at HMAC
///   speed rather than bcrypt's; but that memory also holds the requests themselves, passwords
///   in base64 included.)
/// * **A wrong password cannot fill it.** Only checks that succeeded are stored, so failed
///   guesses neither add entries nor evict the entries of real users; only someone who knows
///   a user's password can add an entry, and only for that password.
/// * **A wrong password cannot hit it.** A hit needs the HMAC of the offered pair to equal
///   one of a pair that matched: a collision of HMAC-SHA-256 under an unknown key.
/// * **A changed file empties it.** An entry is valid for the file's
///   [`generation`](Htpasswd::generation) it was verified under: when a reload brings other
///   entries, a removed user or changed password is not let in by the cache.
///
/// One verifier belongs to one thread: [`verify`](Verifier::verify) takes `&mut self`, so that
/// a worker's checks take no lock; each worker keeps its own (and pays for a user's first
/// check once per worker).
pub struct Verifier {
    htpasswd: Htpasswd,
    /// Keyed once; each tag is computed on a clone of this state, so the raw key is not kept.
    mac: Hmac<Sha256>,
    cache: Option<LruCache<Tag, ()>>,
    /// The generation of the file the cached entries were verified under.
    generation: u64,
    stats: VerifierStats,
}

/// What a [`Verifier`] did, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VerifierStats {
    /// Checks answered from the cache.
    pub cache_hits: u64,
    /// Checks that ran an entry's hash function (bcrypt, apr1 or SHA-1): the cost the cache
    /// saves. A check of an unknown user runs none and counts in neither.
    pub hash_checks: u64,
}

impl Verifier {
    /// A verifier for `htpasswd` that remembers up to `capacity` verified pairs (0: none).
    ///
    /// Fails only if the operating system gives no random bytes for the cache's key.
    pub fn new(htpasswd: Htpasswd, capacity: usize) -> io::Result<Verifier> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(io::Error::other)?;
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key)
            .expect("HMAC takes a key of any length");
        key.fill(0);
        let generation = htpasswd.generation();
        Ok(Verifier {
            htpasswd,
            mac,
            cache: NonZeroUsize::new(capacity).map(LruCache::new),
            generation,
            stats: VerifierStats::default(),
        })
    }

    /// Whether `password` is `user`'s.
    pub fn verify(&mut self, user: &[u8], password: &[u8]) -> bool {
        self.follow_generation();
        let Some(hash) = self.htpasswd.entry(user) else {
            return false;
        };
        let cache = match &mut self.cache {
            Some(cache) if hash.scheme().is_slow() => cache,
            _ => {
                self.stats.hash_checks += 1;
                return hash.matches(password);
            }
        };
        let tag = tag(&self.mac, user, password);
        if cache.get(&tag).is_some() {
            self.stats.cache_hits += 1;
            return true;
        }
        self.stats.hash_checks += 1;
        let matched = hash.matches(password);
        if matched {
            cache.put(tag, ());
        }
        matched
    }

    /// [`Htpasswd::reload_if_changed`] on the file, emptying the cache when the entries
    /// change.
    pub fn reload_if_changed(&mut self) -> Result<bool, Error> {
        let result = self.htpasswd.reload_if_changed();
        self.follow_generation();
        result
    }

    /// [`Htpasswd::reload`] on the file, emptying the cache when the entries change.
    pub fn reload(&mut self) -> Result<bool, Error> {
        let result = self.htpasswd.reload();
        self.follow_generation();
        result
    }

    /// The file checked against.
    pub fn htpasswd(&self) -> &Htpasswd {
        &self.htpasswd
    }

    /// How many pairs the cache holds.
    pub fn cached(&self) -> usize {
        self.cache.as_ref().map_or(0, LruCache::len)
    }

    /// What this verifier did so far.
    pub fn stats(&self) -> VerifierStats {
        self.stats
    }

    fn follow_generation(&mut self) {
        if self.generation != self.htpasswd.generation() {
            self.generation = self.htpasswd.generation();
            if let Some(cache) = &mut self.cache {
                cache.clear();
            }
        }
    }
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("htpasswd", &self.htpasswd)
            .field("cached", &self.cached())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The user's length comes first so that no two (user, password) pairs give the same input
/// ("ab", "c" and "a", "bc" would otherwise).
fn tag(mac: &Hmac<Sha256>, user: &[u8], password: &[u8]) -> Tag {
    let mut mac = mac.clone();
    mac.update(&(user.len() as u64).to_le_bytes());
    mac.update(user);
    mac.update(password);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;
    use std::time::Duration;

    const BCRYPT: &str = "$2y$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2";
    /// "pass:word", cost 4.
    const BCRYPT_2: &str = "$2y$04$0123456789abcdefghijkeN.BqYUu0Toqj21e6XaEc2u00/cCH3RW";
    const SHA: &str = "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=";
    const APR1: &str = "$apr1$Xy7/.aZ9$g2D40oCutz/lmW0n9x5er1";
    const PASSWORD: &[u8] = b"correct horse";

    fn file(dir: &tempfile::TempDir, text: &str) -> (PathBuf, Htpasswd) {
        let path = dir.path().join("htpasswd");
        fs::write(&path, text).unwrap();
        let mut htpasswd = Htpasswd::load(&path).unwrap();
        htpasswd.set_racy_window(Duration::ZERO);
        (path, htpasswd)
    }

    fn stats(hash_checks: u64, cache_hits: u64) -> VerifierStats {
        VerifierStats {
            cache_hits,
            hash_checks,
        }
    }

    #[test]
    fn a_second_check_of_a_right_password_runs_no_bcrypt() {
        let dir = tempfile::tempdir().unwrap();
        let (_, htpasswd) = file(&dir, &format!("alice:{BCRYPT}\ncarol:{APR1}\n"));
        let mut verifier = Verifier::new(htpasswd, 16).unwrap();
        assert!(verifier.verify(b"alice", PASSWORD));
        assert_eq!(verifier.stats(), stats(1, 0));
        assert!(verifier.verify(b"alice", PASSWORD));
        assert!(verifier.verify(b"alice", PASSWORD));
        assert_eq!(verifier.stats(), stats(1, 2));
        assert!(verifier.verify(b"carol", PASSWORD));
        assert!(verifier.verify(b"carol", PASSWORD));
        assert_eq!(verifier.stats(), stats(2, 3));
        assert_eq!(verifier.cached(), 2);
    }

    #[test]
    fn a_wrong_password_is_never_cached() {
        let dir = tempfile::tempdir().unwrap();
        let (_, htpasswd) = file(&dir, &format!("alice:{BCRYPT}\n"));
        let mut verifier = Verifier::new(htpasswd, 16).unwrap();
        for _ in 0..3 {
            assert!(!verifier.verify(b"alice", b"wrong"));
        }
        assert_eq!(verifier.stats(), stats(3, 0));
        assert_eq!(verifier.cached(), 0);
        // A right password cached does not let a wrong one or another user through.
        assert!(verifier.verify(b"alice", PASSWORD));
        assert!(!verifier.verify(b"alice", b"wrong"));
        assert!(!verifier.verify(b"alic", b"ecorrect horse"));
        assert!(!verifier.verify(b"bob", PASSWORD));
        assert_eq!(verifier.stats(), stats(5, 0));
        assert_eq!(verifier.cached(), 1);
    }

    #[test]
    fn cheap_schemes_and_a_zero_capacity_are_not_cached() {
        let dir = tempfile::tempdir().unwrap();
        let (_, htpasswd) = file(&dir, &format!("bob:{SHA}\n"));
        let mut verifier = Verifier::new(htpasswd, 16).unwrap();
        assert!(verifier.verify(b"bob", PASSWORD));
        assert!(verifier.verify(b"bob", PASSWORD));
        assert_eq!(verifier.stats(), stats(2, 0));

        let (_, htpasswd) = file(&dir, &format!("alice:{BCRYPT}\n"));
        let mut verifier = Verifier::new(htpasswd, 0).unwrap();
        assert!(verifier.verify(b"alice", PASSWORD));
        assert!(verifier.verify(b"alice", PASSWORD));
        assert_eq!(verifier.stats(), stats(2, 0));
    }

    #[test]
    fn the_least_recently_used_pair_is_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let (_, htpasswd) = file(&dir, &format!("alice:{BCRYPT}\ndave:{BCRYPT_2}\n"));
        let mut verifier = Verifier::new(htpasswd, 1).unwrap();
        assert!(verifier.verify(b"alice", PASSWORD));
        assert!(verifier.verify(b"dave", b"pass:word"));
        assert_eq!(verifier.cached(), 1);
        assert!(verifier.verify(b"dave", b"pass:word"));
        assert!(verifier.verify(b"alice", PASSWORD));
        assert_eq!(verifier.stats(), stats(3, 1));
    }

    #[test]
    fn a_changed_file_empties_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let (path, htpasswd) = file(&dir, &format!("alice:{BCRYPT}\ndave:{BCRYPT_2}\n"));
        let mut verifier = Verifier::new(htpasswd, 16).unwrap();
        assert!(verifier.verify(b"alice", PASSWORD));
        assert!(verifier.verify(b"dave", b"pass:word"));
        assert_eq!(verifier.cached(), 2);

        // alice's password changes, by a rename over the file.
        let next = dir.path().join("htpasswd.new");
        fs::write(&next, format!("alice:{BCRYPT_2}\ndave:{BCRYPT_2}\n")).unwrap();
        fs::rename(&next, &path).unwrap();
        assert!(verifier.reload_if_changed().unwrap());
        assert_eq!(verifier.cached(), 0);
        assert!(!verifier.verify(b"alice", PASSWORD));
        assert!(verifier.verify(b"alice", b"pass:word"));

        // A reload that finds the same entries keeps what is cached.
        let before = verifier.stats();
        assert!(!verifier.reload().unwrap());
        assert!(verifier.verify(b"alice", b"pass:word"));
        assert_eq!(verifier.stats().hash_checks, before.hash_checks);

        // A vanished file keeps the entries, and what is cached of them.
        fs::remove_file(&path).unwrap();
        assert!(verifier.reload_if_changed().is_err());
        assert!(verifier.verify(b"alice", b"pass:word"));
        assert_eq!(verifier.stats().hash_checks, before.hash_checks);
    }

    #[test]
    fn tags_separate_user_from_password() {
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&[7; 32]).unwrap();
        assert_ne!(tag(&mac, b"ab", b"c"), tag(&mac, b"a", b"bc"));
        assert_eq!(tag(&mac, b"a", b"bc"), tag(&mac, b"a", b"bc"));
        let other = <Hmac<Sha256> as KeyInit>::new_from_slice(&[8; 32]).unwrap();
        assert_ne!(tag(&mac, b"a", b"bc"), tag(&other, b"a", b"bc"));
    }
}
