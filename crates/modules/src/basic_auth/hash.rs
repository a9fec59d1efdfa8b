//! The password hashes an htpasswd entry may hold: read and checked once when the file is
//! loaded, so that verifying a password cannot fail on the hash's format later.

use std::fmt;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha1::Sha1;
use subtle::ConstantTimeEq;

/// The hash schemes an entry may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// bcrypt (`$2y$`, `$2a$` or `$2b$`), what `htpasswd -B` writes.
    Bcrypt,
    /// `{SHA}`: the base64 of the password's unsalted SHA-1 (`htpasswd -s`). Weak, and read
    /// only because old files hold it.
    Sha1,
    /// Apache's MD5 scheme `$apr1$` (`htpasswd -m`, and its default).
    Apr1,
}

impl Scheme {
    /// Whether a check costs more than the verifier's cache lookup (an HMAC-SHA-256), and so
    /// is worth caching: bcrypt's rounds and apr1's thousand MD5s are, one SHA-1 is not.
    pub fn is_slow(self) -> bool {
        matches!(self, Scheme::Bcrypt | Scheme::Apr1)
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scheme::Bcrypt => "bcrypt",
            Scheme::Sha1 => "{SHA}",
            Scheme::Apr1 => "$apr1$",
        })
    }
}

/// Why an entry's hash field was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HashError {
    /// A supported scheme's prefix, but not what that scheme writes after it.
    Malformed(Scheme, &'static str),
    /// A bcrypt cost outside what `htpasswd -C` makes.
    BcryptCost(u32),
    /// A scheme recognised by its form, and not supported (the text names it).
    Unsupported(&'static str),
}

/// The lowest and highest bcrypt costs accepted: those `htpasswd -C` makes. The cost doubles
/// the work at each step; past 17 one check takes seconds on one core, time an event loop
/// cannot give, so such an entry is refused when the file is read rather than stalling the
/// first request that names it.
pub(crate) const BCRYPT_COSTS: std::ops::RangeInclusive<u32> = 4..=17;

/// An entry's hash, in the form that is cheapest to check.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum Hash {
    /// The whole `$2y$…` string, as the bcrypt crate's `verify` takes it.
    Bcrypt(String),
    /// The SHA-1 digest itself, decoded once.
    Sha1([u8; 20]),
    /// The salt (at most 8 bytes) and the 22 characters of the encoded digest.
    Apr1 { salt: Vec<u8>, encoded: [u8; 22] },
}

impl fmt::Debug for Hash {
    // The hash is what an offline guesser wants: print its scheme only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hash({})", self.scheme())
    }
}

impl Hash {
    /// Reads an entry's hash field (everything after the user's `:`).
    pub(crate) fn parse(field: &[u8]) -> Result<Hash, HashError> {
        if let Some(rest) = strip_bcrypt_prefix(field) {
            return parse_bcrypt(field, rest);
        }
        if let Some(rest) = field.strip_prefix(b"{SHA}") {
            return parse_sha1(rest);
        }
        if let Some(rest) = field.strip_prefix(APR1_MAGIC) {
            return parse_apr1(rest);
        }
        Err(HashError::Unsupported(name_unsupported(field)))
    }

    /// The scheme of this hash.
    pub(crate) fn scheme(&self) -> Scheme {
        match self {
            Hash::Bcrypt(_) => Scheme::Bcrypt,
            Hash::Sha1(_) => Scheme::Sha1,
            Hash::Apr1 { .. } => Scheme::Apr1,
        }
    }

    /// Whether `password` hashes to this. The final comparison takes the same time wherever
    /// the digests differ (bcrypt's own comparison uses `subtle` as well).
    pub(crate) fn matches(&self, password: &[u8]) -> bool {
        match self {
            // The hash was parsed by the same crate at load time, so an error here cannot be
            // a format error; whatever it is, it is not a match. bcrypt uses the first 72
            // bytes of a password, as Apache's htpasswd does when it makes the hash.
            Hash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            Hash::Sha1(digest) => {
                let computed: [u8; 20] = Sha1::digest(password).into();
                computed.ct_eq(digest).into()
            }
            Hash::Apr1 { salt, encoded } => apr1(password, salt).ct_eq(encoded).into(),
        }
    }
}

fn strip_bcrypt_prefix(field: &[u8]) -> Option<&[u8]> {
    [b"$2y$", b"$2a$", b"$2b$"]
        .iter()
        .find_map(|prefix| field.strip_prefix(&prefix[..]))
}

/// `rest` is what follows `$2y$`: two digits of cost, `$`, 22 characters of salt and 31 of
/// digest in bcrypt's base64.
fn parse_bcrypt(field: &[u8], rest: &[u8]) -> Result<Hash, HashError> {
    const FORM: &str = "expected a two-digit cost, '$' and 53 characters of salt and digest";
    // Digits are checked here because the crate parses the cost with `str::parse`, which
    // would take "+5" too.
    if rest.len() != 56 || !rest[..2].iter().all(u8::is_ascii_digit) || rest[2] != b'$' {
        return Err(HashError::Malformed(Scheme::Bcrypt, FORM));
    }
    let Ok(text) = std::str::from_utf8(field) else {
        return Err(HashError::Malformed(Scheme::Bcrypt, FORM));
    };
    let parts: bcrypt::HashParts = text
        .parse()
        .map_err(|_| HashError::Malformed(Scheme::Bcrypt, FORM))?;
    if !BCRYPT_COSTS.contains(&parts.get_cost()) {
        return Err(HashError::BcryptCost(parts.get_cost()));
    }
    Ok(Hash::Bcrypt(text.to_owned()))
}

fn parse_sha1(rest: &[u8]) -> Result<Hash, HashError> {
    // htpasswd writes canonical padded base64; anything else was not made by it.
    let digest = base64::engine::general_purpose::STANDARD
        .decode(rest)
        .ok()
        .and_then(|bytes| <[u8; 20]>::try_from(bytes).ok())
        .ok_or(HashError::Malformed(
            Scheme::Sha1,
            "expected the base64 of a 20-byte SHA-1 digest (28 characters)",
        ))?;
    Ok(Hash::Sha1(digest))
}

const APR1_MAGIC: &[u8] = b"$apr1$";

/// `rest` is what follows `$apr1$`: a salt of at most 8 characters, `$`, and 22 characters.
fn parse_apr1(rest: &[u8]) -> Result<Hash, HashError> {
    const FORM: &str = "expected a salt of at most 8 characters, '$' and 22 characters of digest";
    let dollar = rest
        .iter()
        .position(|&b| b == b'$')
        .ok_or(HashError::Malformed(Scheme::Apr1, FORM))?;
    let (salt, digest) = (&rest[..dollar], &rest[dollar + 1..]);
    // Apache hashes with the first 8 characters of a longer salt and then compares the whole
    // string, so an entry with a longer one can never match: refused as the mistake it is.
    if salt.len() > 8 {
        return Err(HashError::Malformed(Scheme::Apr1, FORM));
    }
    let encoded: [u8; 22] = digest
        .try_into()
        .ok()
        .filter(|d: &[u8; 22]| d.iter().all(|b| ITOA64.contains(b)))
        .ok_or(HashError::Malformed(Scheme::Apr1, FORM))?;
    Ok(Hash::Apr1 {
        salt: salt.to_vec(),
        encoded,
    })
}

/// Names the scheme of a hash field that is none of the supported ones, for the error.
fn name_unsupported(field: &[u8]) -> &'static str {
    const NAMED: [(&[u8], &str); 8] = [
        (b"$1$", "MD5-crypt ($1$)"),
        (b"$5$", "SHA-256-crypt ($5$, htpasswd -2)"),
        (b"$6$", "SHA-512-crypt ($6$, htpasswd -5)"),
        (b"$2x$", "bcrypt $2x$ (hashes from a crypt_blowfish bug)"),
        (b"$y$", "yescrypt ($y$)"),
        (b"$argon2", "Argon2"),
        (b"{SSHA}", "salted SHA-1 ({SSHA})"),
        (b"{SHA256}", "{SHA256}"),
    ];
    if let Some((_, name)) = NAMED.iter().find(|(prefix, _)| field.starts_with(prefix)) {
        return name;
    }
    if field.len() == 13 && field.iter().all(|b| ITOA64.contains(b)) {
        return "crypt(3) DES (htpasswd -d; it uses only the first 8 characters of a password)";
    }
    if field.starts_with(b"$") || field.starts_with(b"{") {
        return "an unknown scheme";
    }
    "none: plaintext passwords are not accepted"
}

/// The alphabet of crypt(3)'s base64, which apr1 uses (not RFC 4648's).
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's `$apr1$` hash of `password` with `salt`, encoded (the 22 characters after the
/// salt's `$`).
///
/// Written here on the `md-5` crate: the algorithm is FreeBSD's MD5-crypt with the magic
/// string `$apr1$` in place of `$1$`, which no maintained crate offers (`pwhash` has `$1$`
/// only, and `htpasswd-verify` depends on the unmaintained `rust-crypto`). It follows
/// `apr_md5_encode` in APR's `crypto/apr_md5.c`; the tests hold vectors from
/// `openssl passwd -apr1` and `htpasswd -m`.
pub(crate) fn apr1(password: &[u8], salt: &[u8]) -> [u8; 22] {
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(APR1_MAGIC);
    ctx.update(salt);

    let alternate = Md5::new()
        .chain_update(password)
        .chain_update(salt)
        .chain_update(password)
        .finalize();
    for chunk in password.chunks(16) {
        ctx.update(&alternate[..chunk.len()]);
    }
    // One step per bit of the length: a zero byte for a one bit, the first byte of the
    // password for a zero bit (the C code's zeroed buffer and `pw[0]`).
    let mut n = password.len();
    while n > 0 {
        if n & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        n >>= 1;
    }
    let mut digest: [u8; 16] = ctx.finalize().into();

    for round in 0..1000 {
        let mut ctx = Md5::new();
        if round & 1 == 1 {
            ctx.update(password);
        } else {
            ctx.update(digest);
        }
        if round % 3 != 0 {
            ctx.update(salt);
        }
        if round % 7 != 0 {
            ctx.update(password);
        }
        if round & 1 == 1 {
            ctx.update(digest);
        } else {
            ctx.update(password);
        }
        digest = ctx.finalize().into();
    }

    let mut out = [0u8; 22];
    let groups = [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)];
    for (i, (a, b, c)) in groups.into_iter().enumerate() {
        let word =
            (u32::from(digest[a]) << 16) | (u32::from(digest[b]) << 8) | u32::from(digest[c]);
        to64(&mut out[i * 4..i * 4 + 4], word);
    }
    to64(&mut out[20..22], u32::from(digest[11]));
    out
}

/// crypt(3)'s base64: six bits at a time, least significant first.
fn to64(out: &mut [u8], mut word: u32) {
    for byte in out {
        *byte = ITOA64[(word & 0x3f) as usize];
        word >>= 6;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors made once with `openssl passwd -apr1 -salt SALT PASSWORD` (and `htpasswd -m`
    /// for the random salt), so that these tests need neither tool.
    const APR1_VECTORS: [(&str, &str, &str); 5] = [
        ("correct horse", "Xy7/.aZ9", "g2D40oCutz/lmW0n9x5er1"),
        ("pw", "ab", "RieuZkC7MNZo71UI4mVva0"),
        ("", "Xy7/.aZ9", "okK0dajf/l4V95JmHfIDQ/"),
        (
            "this password is longer than sixteen bytes, for the loops",
            "Q1w2E3r4",
            "78iOajl1M8lFB2PlFB9TX0",
        ),
        ("naïve pässword", "qVxqWV7S", "SLiC4AgR3MmUdViKJVgH31"),
    ];

    #[test]
    fn apr1_matches_known_vectors() {
        for (password, salt, encoded) in APR1_VECTORS {
            assert_eq!(
                &apr1(password.as_bytes(), salt.as_bytes()),
                encoded.as_bytes(),
                "{password:?} with salt {salt}"
            );
        }
    }

    #[test]
    fn each_scheme_verifies_right_and_refuses_wrong() {
        let cases: [(&str, &str, Scheme); 7] = [
            (
                "$2y$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2",
                "correct horse",
                Scheme::Bcrypt,
            ),
            (
                "$2a$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2",
                "correct horse",
                Scheme::Bcrypt,
            ),
            (
                "$2b$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2",
                "correct horse",
                Scheme::Bcrypt,
            ),
            (
                "$2y$04$0123456789abcdefghijkeN.BqYUu0Toqj21e6XaEc2u00/cCH3RW",
                "pass:word",
                Scheme::Bcrypt,
            ),
            (
                "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A=",
                "correct horse",
                Scheme::Sha1,
            ),
            (
                "$apr1$Xy7/.aZ9$g2D40oCutz/lmW0n9x5er1",
                "correct horse",
                Scheme::Apr1,
            ),
            ("$apr1$Xy7/.aZ9$okK0dajf/l4V95JmHfIDQ/", "", Scheme::Apr1),
        ];
        for (field, password, scheme) in cases {
            let hash = Hash::parse(field.as_bytes()).unwrap();
            assert_eq!(hash.scheme(), scheme);
            assert!(hash.matches(password.as_bytes()), "{field}");
            assert!(!hash.matches(b"wrong"), "{field}");
            assert!(!hash.matches(format!("{password}x").as_bytes()), "{field}");
        }
    }

    #[test]
    fn bcrypt_uses_the_first_72_bytes_as_htpasswd_does() {
        // From the bcrypt crate's tests: 100 'x's, made by another implementation.
        let hash =
            Hash::parse(b"$2a$05$......................YgIDy4hFBdVlc/6LHnD9mX488r9cLd2").unwrap();
        assert!(hash.matches(&[b'x'; 100]));
        assert!(hash.matches(&[b'x'; 72]));
        assert!(!hash.matches(&[b'x'; 71]));
    }

    #[test]
    fn malformed_hashes_of_supported_schemes_are_refused() {
        let malformed = [
            "$2y$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy",
            "$2y$5$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2",
            "$2y$+5$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2",
            "$2y$05$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy!",
            "{SHA}L55TUjtiq8FBorTWAZ0jy6g129A",
            "{SHA}L55TUjtiq8FBorTWAZ0jy6g1",
            "{SHA}",
            "$apr1$Xy7/.aZ9",
            "$apr1$Xy7/.aZ9$g2D40oCutz/lmW0n9x5er",
            "$apr1$Xy7/.aZ9$g2D40oCutz/lmW0n9x5er1=",
            "$apr1$toolongsalt$g2D40oCutz/lmW0n9x5er1",
        ];
        for field in malformed {
            assert!(
                matches!(Hash::parse(field.as_bytes()), Err(HashError::Malformed(..))),
                "{field}"
            );
        }
    }

    #[test]
    fn bcrypt_costs_beyond_htpasswd_are_refused() {
        let hash = |cost: u32| {
            format!("$2y${cost:02}$abcdefghijklmnopqrstuuHNbAKRhpaujgo33bRWs.NLUTJO3lOy2")
        };
        assert_eq!(
            Hash::parse(hash(18).as_bytes()),
            Err(HashError::BcryptCost(18))
        );
        assert_eq!(
            Hash::parse(hash(3).as_bytes()),
            Err(HashError::BcryptCost(3))
        );
        assert!(Hash::parse(hash(17).as_bytes()).is_ok());
    }

    #[test]
    fn other_schemes_are_named_and_refused() {
        let named = [
            ("e0FpaKTKuBWJY", "crypt(3) DES"),
            ("plain text", "plaintext"),
            ("secret", "plaintext"),
            ("$1$abc$def", "MD5-crypt"),
            (
                "$5$vhHLHpqynsveWFUV$3xydVQwkYWUaajiYdlV8JHFRG163vS.S6JzWeEIafND",
                "SHA-256-crypt",
            ),
            ("$6$salt$hash", "SHA-512-crypt"),
            ("{SSHA}abc", "{SSHA}"),
            ("$9$whatever", "unknown"),
        ];
        for (field, name) in named {
            match Hash::parse(field.as_bytes()) {
                Err(HashError::Unsupported(text)) => assert!(text.contains(name), "{field}"),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
