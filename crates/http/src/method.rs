//! The request methods fastpath accepts: those of the IANA HTTP Method Registry (RFC 9110
//! §16.1), which is where a method a backend could mean is registered. Methods are
//! case-sensitive (RFC 9110 §9.1), so `get` is not `GET`: it is an unknown method.

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
