//! The fields of the Basic scheme (RFC 7617): the credentials of an `Authorization` field,
//! and the challenge of a `WWW-Authenticate` field.

use std::fmt;

use base64::engine::general_purpose;
use base64::Engine as _;

/// The longest `Authorization` value [`parse_basic`] reads, in bytes. Longer ones are not
/// Basic credentials anyone types (4 KiB of base64 are 3 KiB of user and password); refusing
/// them keeps a request from making this decode and hash large inputs.
pub const MAX_AUTHORIZATION_LEN: usize = 4096;

/// Decodes RFC 4648's standard alphabet (RFC 7617 section 2), with the padding either
/// whole or left out: RFC 7617 asks for RFC 4648 base64, which pads, but the header's token68
/// syntax (RFC 9110 section 11.2) allows the padding to be left out, as Apache and nginx
/// accept, and what it decodes to is the same. Padding cut short, and bits left over in the
/// last character that are not zero, are refused, so that one string decodes from one
/// encoding only.
fn decode_base64(token: &[u8]) -> Option<Vec<u8>> {
    let engine = if token.ends_with(b"=") {
        &general_purpose::STANDARD
    } else {
        &general_purpose::STANDARD_NO_PAD
    };
    engine.decode(token).ok()
}

/// A user-id and password from an `Authorization: Basic` field.
///
/// Both are the bytes the client sent, compared as they are: the challenge announces UTF-8
/// (RFC 7617 section 2.1), but no charset is checked or normalisation applied, since the
/// htpasswd file holds whatever bytes its author's terminal gave `htpasswd`, and bytes that
/// are not UTF-8 simply match no entry made from UTF-8.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    decoded: Vec<u8>,
    colon: usize,
}

impl Credentials {
    /// The user-id: the bytes before the first `:` (so it contains none). May be empty,
    /// which RFC 7617's grammar allows and no htpasswd entry matches.
    pub fn user(&self) -> &[u8] {
        &self.decoded[..self.colon]
    }

    /// The password: everything after the first `:`, further colons included. May be empty.
    pub fn password(&self) -> &[u8] {
        &self.decoded[self.colon + 1..]
    }
}

impl fmt::Debug for Credentials {
    // The password must not reach a log through a debug print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user().escape_ascii().to_string())
            .finish_non_exhaustive()
    }
}

/// Reads the value of an `Authorization` field as Basic credentials (RFC 7617 section 2).
///
/// `None` for anything else: another scheme, a value longer than [`MAX_AUTHORIZATION_LEN`],
/// base64 that is not RFC 4648's standard alphabet, decoded bytes without a `:`, or a
/// user-id or password with a control character (RFC 7617 forbids them, and a user-id is
/// written to the access log). The scheme's name is matched without regard to case (RFC 9110
/// section 11.1), and is followed by one space or more (`1*SP`, RFC 9110 section 11.4);
/// whitespace around the whole value is not part of it (RFC 9110 section 5.5).
pub fn parse_basic(value: &[u8]) -> Option<Credentials> {
    if value.len() > MAX_AUTHORIZATION_LEN {
        return None;
    }
    let value = trim_ows(value);
    let (scheme, rest) = value.split_at_checked(5)?;
    if !scheme.eq_ignore_ascii_case(b"Basic") || rest.first() != Some(&b' ') {
        return None;
    }
    let token = rest.trim_ascii_start();
    // A token with a space inside, or auth-params after it, is not base64 and fails below.
    let decoded = decode_base64(token)?;
    if decoded.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return None;
    }
    let colon = decoded.iter().position(|&b| b == b':')?;
    Some(Credentials { decoded, colon })
}

/// Space and horizontal tab, the OWS of RFC 9110 section 5.6.3.
fn trim_ows(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

/// The name of the field that carries a [`Challenge`] in a 401 response.
pub const CHALLENGE_FIELD: &str = "WWW-Authenticate";

/// The value of the `WWW-Authenticate` field of a 401 response for one realm:
/// `Basic realm="…", charset="UTF-8"` (RFC 7617 section 2).
///
/// Made once from the configuration, so that an impossible realm is refused when the
/// configuration is read, never when a response is written. `charset="UTF-8"` is sent
/// because it is the only value RFC 7617 defines, and it asks browsers to send a non-ASCII
/// password as UTF-8 rather than some legacy charset of their choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    value: String,
}

impl Challenge {
    /// The challenge for `realm`, written as a quoted-string with `"` and `\` escaped
    /// (RFC 9110 section 5.6.4).
    ///
    /// A realm with a control character other than horizontal tab is refused: CR and LF would
    /// end the field (a header injection), and the others cannot appear in a quoted-string.
    /// Bytes above ASCII are kept (quoted-string's obs-text); the realm is shown to users
    /// as is.
    pub fn new(realm: &str) -> Result<Challenge, RealmError> {
        if let Some((offset, byte)) = realm
            .bytes()
            .enumerate()
            .find(|&(_, b)| (b < 0x20 && b != b'\t') || b == 0x7f)
        {
            return Err(RealmError { byte, offset });
        }
        let mut value = String::with_capacity(realm.len() + 32);
        value.push_str("Basic realm=\"");
        for c in realm.chars() {
            if c == '"' || c == '\\' {
                value.push('\\');
            }
            value.push(c);
        }
        value.push_str("\", charset=\"UTF-8\"");
        Ok(Challenge { value })
    }

    /// The field value, ready to be written.
    pub fn value(&self) -> &str {
        &self.value
    }
}

/// A realm that cannot be sent: it holds a control character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealmError {
    /// The character.
    pub byte: u8,
    /// Its offset in the realm, in bytes.
    pub offset: usize,
}

impl fmt::Display for RealmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the realm holds a control character ({:#04x} at byte {}), which a header field \
             cannot carry",
            self.byte, self.offset
        )
    }
}

impl std::error::Error for RealmError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(value: &str) -> Option<(String, String)> {
        parse_basic(value.as_bytes()).map(|c| {
            (
                String::from_utf8(c.user().to_vec()).unwrap(),
                String::from_utf8(c.password().to_vec()).unwrap(),
            )
        })
    }

    fn pair(user: &str, password: &str) -> Option<(String, String)> {
        Some((user.to_owned(), password.to_owned()))
    }

    #[test]
    fn basic_credentials_are_read() {
        // "Aladdin:open sesame", RFC 7617's example.
        assert_eq!(
            parse("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="),
            pair("Aladdin", "open sesame")
        );
        // The scheme in any case, several spaces, OWS around.
        assert_eq!(
            parse(" bAsIc   QWxhZGRpbjpvcGVuIHNlc2FtZQ==\t"),
            pair("Aladdin", "open sesame")
        );
        // Padding left out.
        assert_eq!(
            parse("Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ"),
            pair("Aladdin", "open sesame")
        );
        // "a:b:c": the password keeps its colons.
        assert_eq!(parse("Basic YTpiOmM="), pair("a", "b:c"));
        // "a:" and ":b": empty password, empty user-id.
        assert_eq!(parse("Basic YTo="), pair("a", ""));
        assert_eq!(parse("Basic OmI="), pair("", "b"));
        // "test:123£" in UTF-8, RFC 7617 section 2.1's example.
        assert_eq!(parse("Basic dGVzdDoxMjPCow=="), pair("test", "123£"));
    }

    #[test]
    fn other_values_are_not_basic_credentials() {
        let refused = [
            "",
            "Basic",
            "Basic ",
            "Basic    ",
            "BasicQWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            "Basic\tQWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            "Bearer QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            "Digest username=\"Aladdin\"",
            "Basics QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
            // "Aladdin" alone: no colon.
            "Basic QWxhZGRpbg==",
            // Not base64, the URL-safe alphabet, a space inside, wrong padding, a parameter.
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=!",
            "Basic P_8-OmI=",
            "Basic QWxhZGRp bjpvcGVuIHNlc2FtZQ==",
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=",
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ===",
            "Basic realm=\"x\"",
            // Bits left over in the last character ("YTo=" is "a:", "YTp=" the same with
            // a stray bit).
            "Basic YTp=",
            // "a\r\n:b" and "a:b\0": control characters.
            "Basic YQ0KOmI=",
            "Basic YTpiAA==",
        ];
        for value in refused {
            assert_eq!(parse(value), None, "{value:?}");
        }
    }

    #[test]
    fn overlong_values_are_refused() {
        let user_pass = format!("u:{}", "p".repeat(3000));
        let value = format!("Basic {}", general_purpose::STANDARD.encode(&user_pass));
        assert!(value.len() <= MAX_AUTHORIZATION_LEN);
        assert!(parse_basic(value.as_bytes()).is_some());
        let user_pass = format!("u:{}", "p".repeat(3100));
        let value = format!("Basic {}", general_purpose::STANDARD.encode(&user_pass));
        assert!(value.len() > MAX_AUTHORIZATION_LEN);
        assert!(parse_basic(value.as_bytes()).is_none());
    }

    #[test]
    fn bytes_that_are_not_utf8_are_kept_as_they_are() {
        // "caf\xe9:pw", Latin-1.
        let credentials = parse_basic(b"Basic Y2Fm6Tpwdw==").unwrap();
        assert_eq!(credentials.user(), b"caf\xe9");
        assert_eq!(credentials.password(), b"pw");
    }

    #[test]
    fn debug_hides_the_password() {
        let credentials = parse_basic(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==").unwrap();
        let shown = format!("{credentials:?}");
        assert!(
            shown.contains("Aladdin") && !shown.contains("sesame"),
            "{shown}"
        );
    }

    #[test]
    fn the_challenge_quotes_the_realm() {
        assert_eq!(
            Challenge::new("Staff only").unwrap().value(),
            "Basic realm=\"Staff only\", charset=\"UTF-8\""
        );
        assert_eq!(
            Challenge::new(r#"say "hi" \ bye"#).unwrap().value(),
            r#"Basic realm="say \"hi\" \\ bye", charset="UTF-8""#
        );
        assert_eq!(
            Challenge::new("Zürich\tstaff").unwrap().value(),
            "Basic realm=\"Zürich\tstaff\", charset=\"UTF-8\""
        );
        assert_eq!(
            Challenge::new("").unwrap().value(),
            "Basic realm=\"\", charset=\"UTF-8\""
        );
    }

    #[test]
    fn a_realm_with_control_characters_is_refused() {
        assert_eq!(
            Challenge::new("a\r\nSet-Cookie: x=y"),
            Err(RealmError {
                byte: b'\r',
                offset: 1
            })
        );
        assert_eq!(
            Challenge::new("line\n").unwrap_err().to_string(),
            "the realm holds a control character (0x0a at byte 4), which a header field \
             cannot carry"
        );
        assert!(Challenge::new("nul\0").is_err());
        assert!(Challenge::new("del\x7f").is_err());
    }
}
