//! The redirect: the client is sent to the backend's own address, answered at once.

/// The status a redirect hand-over answers with: 307 keeps the method and the body, so a
/// POST sent on is a POST there.
pub const STATUS: u16 = 307;

/// Where the client goes: the backend's public URL with the request target as sent.
pub fn location(public_url: Option<&str>, target: &str) -> String {
    crate::redirect_location(public_url.unwrap_or(""), target)
}
