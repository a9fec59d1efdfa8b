//! What can go wrong, typed: the server logs it and decides when to try again.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

/// The `type` prefix of the problems RFC 8555 defines (section 6.7).
pub const ACME_ERROR_PREFIX: &str = "urn:ietf:params:acme:error:";

/// An RFC 7807 problem document as an ACME server sends it (RFC 8555 section 6.7), kept
/// whole so that what the server said reaches the log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Problem {
    /// The problem's type, e.g. `urn:ietf:params:acme:error:rateLimited`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// What the server says happened, for a person.
    #[serde(default)]
    pub detail: String,
    /// The HTTP status the server gave (the document's `status`, else the response's).
    #[serde(default)]
    pub status: Option<u16>,
    /// The identifier the problem is about (in subproblems).
    #[serde(default)]
    pub identifier: Option<Identifier>,
    /// One problem per identifier when an order or request failed for several (section 6.7.1).
    #[serde(default)]
    pub subproblems: Vec<Problem>,
}

/// An ACME identifier: RFC 8555 section 7.1.3 (`dns` is the only type this client orders).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
pub struct Identifier {
    /// `dns` for a DNS name.
    #[serde(rename = "type")]
    pub kind: String,
    /// The name.
    pub value: String,
}

impl Problem {
    /// Parses a problem document; `None` when `body` is not one (no JSON object).
    pub fn parse(body: &[u8], status: u16) -> Option<Problem> {
        let mut problem: Problem = serde_json::from_slice(body).ok()?;
        if problem.status.is_none() {
            problem.status = Some(status);
        }
        Some(problem)
    }

    /// Whether this is the ACME problem `name` (e.g. `badNonce`), by the short name after
    /// `urn:ietf:params:acme:error:`.
    pub fn is(&self, name: &str) -> bool {
        self.kind
            .strip_prefix(ACME_ERROR_PREFIX)
            .is_some_and(|short| short == name)
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.kind.is_empty() {
            "about:blank"
        } else {
            &self.kind
        };
        write!(f, "{kind}")?;
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        if let Some(id) = &self.identifier {
            write!(f, " ({})", id.value)?;
        }
        for sub in &self.subproblems {
            write!(f, "; {sub}")?;
        }
        Ok(())
    }
}

/// An error of this crate.
#[derive(Debug)]
pub enum Error {
    /// The server could not be reached or the connection failed (refused, reset, timed
    /// out, TLS handshake refused): worth trying again later.
    Io {
        /// What was being done (e.g. `connect to acme.example:443`).
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The server answered something this client cannot read (not HTTP, a body too large,
    /// JSON of the wrong shape, a missing header it needs).
    Protocol(String),
    /// The server refused the request with a problem document (RFC 8555 section 6.7).
    Problem(Box<Problem>),
    /// The server said `rateLimited`: not before `retry_after`, if it said when.
    RateLimited {
        /// The problem document.
        problem: Box<Problem>,
        /// The server's `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// An authorization or the order ended `invalid`: the challenge failed. Holds the
    /// challenge's error when the server gave one.
    Invalid {
        /// What became invalid (an authorization's name or the order's URL).
        what: String,
        /// Why, when the server said.
        problem: Option<Box<Problem>>,
    },
    /// The order did not become ready or valid before the deadline.
    Timeout(String),
    /// The caller asked for something this client does not do (a challenge type the
    /// server did not offer, a wildcard name over http-01).
    Unsupported(String),
    /// A key, certificate or file of the local state could not be read or written.
    Local(String),
}

impl Error {
    /// The problem document the server sent, if this error carries one.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Error::Problem(problem) | Error::RateLimited { problem, .. } => Some(problem),
            Error::Invalid { problem, .. } => problem.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "{context}: {source}"),
            Error::Protocol(what) => write!(f, "ACME protocol: {what}"),
            Error::Problem(problem) => write!(f, "ACME server: {problem}"),
            Error::RateLimited {
                problem,
                retry_after,
            } => {
                write!(f, "ACME server: {problem}")?;
                if let Some(after) = retry_after {
                    write!(f, " (retry after {}s)", after.as_secs())?;
                }
                Ok(())
            }
            Error::Invalid { what, problem } => {
                write!(f, "{what} is invalid")?;
                if let Some(problem) = problem {
                    write!(f, ": {problem}")?;
                }
                Ok(())
            }
            Error::Timeout(what) => write!(f, "timed out: {what}"),
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
            Error::Local(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_document_is_read_whole_with_its_subproblems() {
        let body = br#"{
            "type": "urn:ietf:params:acme:error:malformed",
            "detail": "Some of the identifiers requested were rejected",
            "subproblems": [
                {
                    "type": "urn:ietf:params:acme:error:malformed",
                    "detail": "Invalid underscore in DNS name \"_example.org\"",
                    "identifier": {"type": "dns", "value": "_example.org"}
                },
                {
                    "type": "urn:ietf:params:acme:error:rejectedIdentifier",
                    "detail": "This CA will not issue for \"example.net\"",
                    "identifier": {"type": "dns", "value": "example.net"}
                }
            ]
        }"#;
        let problem = Problem::parse(body, 403).expect("a problem");
        assert!(problem.is("malformed"));
        assert!(!problem.is("badNonce"));
        assert_eq!(problem.status, Some(403));
        assert_eq!(problem.subproblems.len(), 2);
        assert!(problem.subproblems[1].is("rejectedIdentifier"));
        assert_eq!(
            problem.subproblems[1].identifier.as_ref().unwrap().value,
            "example.net"
        );
        let shown = Error::Problem(Box::new(problem)).to_string();
        assert!(
            shown.starts_with("ACME server: urn:ietf:params:acme:error:malformed: Some of"),
            "{shown}"
        );
        assert!(shown.contains("(example.net)"), "{shown}");
    }

    #[test]
    fn the_document_status_wins_and_non_json_is_no_problem() {
        let problem = Problem::parse(
            br#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many","status":429}"#,
            400,
        )
        .unwrap();
        assert_eq!(problem.status, Some(429));
        assert!(problem.is("rateLimited"));
        assert!(Problem::parse(b"<html>busy</html>", 503).is_none());
        let limited = Error::RateLimited {
            problem: Box::new(problem),
            retry_after: Some(Duration::from_secs(30)),
        };
        assert_eq!(
            limited.to_string(),
            "ACME server: urn:ietf:params:acme:error:rateLimited: too many (retry after 30s)"
        );
        assert!(limited.problem().unwrap().is("rateLimited"));
    }
}
