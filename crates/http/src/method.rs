//! The request methods fastpath accepts: those of the IANA HTTP Method Registry (RFC 9110
//! §16.1), which is where a method a backend could mean is registered. Methods are
//! case-sensitive (RFC 9110 §9.1), so `get` is not `GET`: it is an unknown method.

/// A request method as the server acts on it: the ones it treats apart by name, and the
/// others (registered or not: [`is_registered_method`] tells).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// GET.
    Get,
    /// HEAD.
    Head,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// DELETE.
    Delete,
    /// OPTIONS.
    Options,
    /// PATCH.
    Patch,
    /// CONNECT.
    Connect,
    /// TRACE.
    Trace,
    /// Any other token (`PROPFIND`, or one no registry knows).
    Other,
}

impl Method {
    /// The method a request line's token names (case-sensitive, RFC 9110 §9.1).
    pub fn of(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            "CONNECT" => Method::Connect,
            "TRACE" => Method::Trace,
            _ => Method::Other,
        }
    }

    /// Whether a request with this method may be sent again without changing its effect
    /// (RFC 9110 §9.2.2).
    pub fn is_idempotent(self) -> bool {
        matches!(
            self,
            Method::Get
                | Method::Head
                | Method::Put
                | Method::Delete
                | Method::Options
                | Method::Trace
        )
    }
}

/// Whether `method` is registered, and so may be answered or handed to a backend; anything
/// else gets 501 Not Implemented. `PRI` is left out: it only ever starts an HTTP/2 preface.
pub fn is_registered_method(method: &str) -> bool {
    matches!(
        method,
        "GET"
            | "HEAD"
            | "POST"
            | "PUT"
            | "DELETE"
            | "CONNECT"
            | "OPTIONS"
            | "TRACE"
            | "PATCH"
            | "QUERY"
            | "ACL"
            | "BASELINE-CONTROL"
            | "BIND"
            | "CHECKIN"
            | "CHECKOUT"
            | "COPY"
            | "LABEL"
            | "LINK"
            | "LOCK"
            | "MERGE"
            | "MKACTIVITY"
            | "MKCALENDAR"
            | "MKCOL"
            | "MKREDIRECTREF"
            | "MKWORKSPACE"
            | "MOVE"
            | "ORDERPATCH"
            | "PROPFIND"
            | "PROPPATCH"
            | "REBIND"
            | "REPORT"
            | "SEARCH"
            | "UNBIND"
            | "UNCHECKOUT"
            | "UNLINK"
            | "UNLOCK"
            | "UPDATE"
            | "UPDATEREDIRECTREF"
            | "VERSION-CONTROL"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_read_by_their_exact_names() {
        assert_eq!(Method::of("GET"), Method::Get);
        assert_eq!(Method::of("get"), Method::Other);
        assert_eq!(Method::of("PROPFIND"), Method::Other);
        assert!(Method::of("PUT").is_idempotent());
        assert!(!Method::of("POST").is_idempotent());
    }

    #[test]
    fn methods_are_case_sensitive_and_registered() {
        for m in [
            "GET",
            "HEAD",
            "POST",
            "PROPFIND",
            "VERSION-CONTROL",
            "QUERY",
        ] {
            assert!(is_registered_method(m), "{m}");
        }
        for m in ["get", "Get", "helloPOST", "PRI", "", "GET "] {
            assert!(!is_registered_method(m), "{m:?}");
        }
    }
}
