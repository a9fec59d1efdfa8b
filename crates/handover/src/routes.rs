//! Which requests are handed over: `[[route]]` rules, tried in order.

use super::HandoverMethod;

/// One `[[route]]`: a backend, a method, and conditions that must all hold.
///
/// A condition left at its default (`None`, empty, `false`) is not checked, so
/// [`RouteRule::default`] matches every request; the configuration refuses such
/// a rule unless it says `prefix = "/"` or `fallback = true`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RouteRule {
    /// Index of the backend in the configuration's list of backends.
    pub backend: usize,
    /// How the request is handed over.
    pub method: HandoverMethod,
    /// The decoded, normalised path starts with this (`"/app/"` matches
    /// `/app/x`). A prefix ending in `/` also matches the path without that
    /// slash (`/app`), the directory itself. Plain byte comparison otherwise:
    /// `"/app"` matches `/apple` too.
    pub prefix: Option<String>,
    /// The last path segment's extension is one of these (without the dot,
    /// compared ignoring ASCII case). The extension is what follows the last
    /// `.` of the last segment, unless that `.` starts the segment: `/.php` is
    /// a file called `.php` with no extension, as for `Path::extension`.
    pub extensions: Vec<String>,
    /// The method is neither GET nor HEAD, the only ones the static path
    /// serves.
    pub unsafe_methods: bool,
    /// The request target has a query string (even an empty one, `/x?`).
    pub query: bool,
    /// Only for requests whose static lookup found nothing (404), like
    /// nginx's `try_files`; such a rule is never used by [`Routes::classify`].
    pub fallback: bool,
    /// Only for requests naming one of these hosts (lower case, exact or
    /// `*.domain` for any subdomain, as in `[[host]]` names); empty for all.
    pub hosts: Vec<String>,
}

/// What a route looks at in a request.
#[derive(Debug, Clone, Copy)]
pub struct RouteRequest<'a> {
    /// The method, exactly as sent (methods are case-sensitive).
    pub method: &'a str,
    /// The decoded, normalised path (as given to the static lookup).
    pub path: &'a [u8],
    /// The query string without the `?`, if the target had a `?`.
    pub query: Option<&'a str>,
    /// The host name the request named (the absolute-form authority or the
    /// `Host` field, as used to choose the virtual host); ASCII case, a port
    /// and a trailing dot are ignored. `None` when the request named none.
    pub host: Option<&'a str>,
}

/// The route rules of a server, in configuration order.
///
/// Matching allocates nothing and looks at each rule at most once: there are
/// few rules, and a linear pass over them costs less than any index would.
#[derive(Debug, Clone, Default)]
pub struct Routes {
    rules: Vec<RouteRule>,
    /// The rules `classify` looks at, so requests that are not handed over
    /// (the common case) skip the fallback rules without testing them.
    early: Vec<usize>,
    late: Vec<usize>,
}

impl Routes {
    /// The rules, tried in this order. Extensions and host names are lower-cased
    /// here so matching can compare one side only.
    pub fn new(mut rules: Vec<RouteRule>) -> Routes {
        for rule in &mut rules {
            for ext in &mut rule.extensions {
                ext.make_ascii_lowercase();
            }
            for host in &mut rule.hosts {
                host.make_ascii_lowercase();
            }
        }
        let (late, early) = (0..rules.len()).partition(|&i| rules[i].fallback);
        Routes { rules, early, late }
    }

    /// True when there are no rules: every request is served statically.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// All rules, in order.
    pub fn rules(&self) -> &[RouteRule] {
        &self.rules
    }

    /// The first non-fallback rule matching the request, to be asked before any
    /// file is looked at: `None` means serve statically.
    pub fn classify(&self, req: &RouteRequest<'_>) -> Option<&RouteRule> {
        self.first(&self.early, req)
    }

    /// The first fallback rule matching a request whose static lookup found
    /// nothing (404): `None` means answer the 404.
    pub fn fallback(&self, req: &RouteRequest<'_>) -> Option<&RouteRule> {
        self.first(&self.late, req)
    }

    fn first(&self, which: &[usize], req: &RouteRequest<'_>) -> Option<&RouteRule> {
        which
            .iter()
            .map(|&i| &self.rules[i])
            .find(|rule| rule.matches(req))
    }
}

impl RouteRule {
    /// Whether every condition of this rule holds for `req`, `fallback` aside
    /// (that one says when the rule is asked, not what it matches).
    pub fn matches(&self, req: &RouteRequest<'_>) -> bool {
        if self.unsafe_methods && matches!(req.method, "GET" | "HEAD") {
            return false;
        }
        if self.query && req.query.is_none() {
            return false;
        }
        if let Some(prefix) = &self.prefix {
            if !prefix_matches(prefix.as_bytes(), req.path) {
                return false;
            }
        }
        if !self.extensions.is_empty() {
            let Some(ext) = extension(req.path) else {
                return false;
            };
            if !self
                .extensions
                .iter()
                .any(|e| e.as_bytes().eq_ignore_ascii_case(ext))
            {
                return false;
            }
        }
        if !self.hosts.is_empty() {
            let Some(host) = req.host.map(host_name) else {
                return false;
            };
            if !self.hosts.iter().any(|h| host_matches(h, host)) {
                return false;
            }
        }
        true
    }
}

fn prefix_matches(prefix: &[u8], path: &[u8]) -> bool {
    if path.starts_with(prefix) {
        return true;
    }
    // "/app/" also covers "/app", which the backend usually redirects to "/app/".
    match prefix.strip_suffix(b"/") {
        Some(dir) if !dir.is_empty() => path == dir,
        _ => false,
    }
}

/// The extension of the last segment of `path`: after its last `.`, unless that
/// `.` is the segment's first byte. `None` when there is no such `.`, or when the
/// path ends in `/` (a directory has no extension).
fn extension(path: &[u8]) -> Option<&[u8]> {
    let segment = match path.iter().rposition(|&b| b == b'/') {
        Some(slash) => &path[slash + 1..],
        None => path,
    };
    match segment.iter().rposition(|&b| b == b'.') {
        Some(0) | None => None,
        Some(dot) => Some(&segment[dot + 1..]),
    }
}

/// `raw` without a port and a trailing dot.
fn host_name(raw: &str) -> &str {
    let name = if raw.starts_with('[') {
        // An IPv6 literal: the port, if any, follows the bracket.
        match raw.find(']') {
            Some(end) => &raw[..=end],
            None => raw,
        }
    } else {
        match raw.rfind(':') {
            Some(colon) => &raw[..colon],
            None => raw,
        }
    };
    name.strip_suffix('.').unwrap_or(name)
}

/// `pattern` is lower case: exact, or `*.domain` for any strict subdomain.
fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => {
            host.len() > suffix.len()
                && host.is_char_boundary(host.len() - suffix.len())
                && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
        }
        None => host.eq_ignore_ascii_case(pattern),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &'static str, target: &'static str) -> RouteRequest<'static> {
        let (path, query) = match target.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (target, None),
        };
        RouteRequest {
            method,
            path: path.as_bytes(),
            query,
            host: None,
        }
    }

    fn get(target: &'static str) -> RouteRequest<'static> {
        req("GET", target)
    }

    fn on(host: &'static str, r: RouteRequest<'static>) -> RouteRequest<'static> {
        RouteRequest {
            host: Some(host),
            ..r
        }
    }

    fn prefix(p: &str) -> RouteRule {
        RouteRule {
            prefix: Some(p.to_owned()),
            ..RouteRule::default()
        }
    }

    fn ext(list: &[&str]) -> RouteRule {
        RouteRule {
            extensions: list.iter().map(|s| s.to_string()).collect(),
            ..RouteRule::default()
        }
    }

    fn one(rule: RouteRule) -> Routes {
        Routes::new(vec![rule])
    }

    fn hit(routes: &Routes, r: RouteRequest<'_>) -> bool {
        routes.classify(&r).is_some()
    }

    #[test]
    fn no_rules_serve_everything_statically() {
        let routes = Routes::new(Vec::new());
        assert!(routes.is_empty());
        assert!(!hit(&routes, get("/x.php")));
        assert!(routes.fallback(&get("/x")).is_none());
    }

    #[test]
    fn prefix_rules() {
        let dir = one(prefix("/app/"));
        let cases = [
            ("/app/", true),
            ("/app/x", true),
            ("/app/x/y.html", true),
            ("/app", true),
            ("/apple", false),
            ("/ap", false),
            ("/", false),
            ("/x/app/", false),
            ("/APP/x", false),
        ];
        for (path, want) in cases {
            assert_eq!(hit(&dir, get(path)), want, "/app/ vs {path}");
        }

        let bare = one(prefix("/app"));
        for (path, want) in [
            ("/app", true),
            ("/app/x", true),
            ("/apple", true),
            ("/ap", false),
        ] {
            assert_eq!(hit(&bare, get(path)), want, "/app vs {path}");
        }

        let root = one(prefix("/"));
        for path in ["/", "/x", "/a/b.php"] {
            assert!(hit(&root, get(path)), "/ vs {path}");
        }
    }

    #[test]
    fn extension_rules() {
        let php = one(ext(&["php", "CGI"]));
        let cases = [
            ("/a.php", true),
            ("/a.PHP", true),
            ("/a.Php", true),
            ("/dir/index.php", true),
            ("/x.cgi", true),
            ("/x.CGI", true),
            ("/a.tar.php", true),
            ("/a.php.bak", false),
            ("/a.php/x", false),
            ("/a.php/", false),
            ("/.php", false),
            ("/dir/.php", false),
            ("/..php", true),
            ("/a.", false),
            ("/aphp", false),
            ("/", false),
            ("/a.phps", false),
            ("/a.ph", false),
        ];
        for (path, want) in cases {
            assert_eq!(hit(&php, get(path)), want, "{path}");
        }
        // Query strings are not part of the path.
        assert!(hit(&php, get("/a.php?x=1.html")));
        assert!(!hit(&php, get("/a.html?x=1.php")));
    }

    #[test]
    fn extension_of_non_utf8_paths() {
        let php = one(ext(&["php"]));
        let r = RouteRequest {
            path: b"/\xff\xfe.php",
            ..get("/")
        };
        assert!(hit(&php, r));
        let r = RouteRequest {
            path: b"/a.\xffphp",
            ..get("/")
        };
        assert!(!hit(&php, r));
    }

    #[test]
    fn method_rules() {
        let unsafe_ = one(RouteRule {
            unsafe_methods: true,
            ..RouteRule::default()
        });
        let cases = [
            ("GET", false),
            ("HEAD", false),
            ("POST", true),
            ("PUT", true),
            ("DELETE", true),
            ("PATCH", true),
            ("OPTIONS", true),
            ("get", true),
        ];
        for (method, want) in cases {
            assert_eq!(hit(&unsafe_, req(method, "/x")), want, "{method}");
        }
    }

    #[test]
    fn query_rules() {
        let query = one(RouteRule {
            query: true,
            ..RouteRule::default()
        });
        assert!(hit(&query, get("/x?a=1")));
        assert!(hit(&query, get("/x?")));
        assert!(!hit(&query, get("/x")));
    }

    #[test]
    fn host_rules() {
        let hosts = one(RouteRule {
            hosts: vec!["app.test".into(), "*.Example.com".into(), "[::1]".into()],
            ..prefix("/")
        });
        let cases = [
            (Some("app.test"), true),
            (Some("APP.test"), true),
            (Some("app.test:8080"), true),
            (Some("app.test."), true),
            (Some("other.test"), false),
            (Some("a.example.com"), true),
            (Some("a.b.example.com:80"), true),
            (Some("example.com"), false),
            (Some("xexample.com"), false),
            (Some("[::1]"), true),
            (Some("[::1]:8080"), true),
            (Some("[::2]"), false),
            (None, false),
        ];
        for (host, want) in cases {
            let r = RouteRequest { host, ..get("/x") };
            assert_eq!(hit(&hosts, r), want, "{host:?}");
        }
        // No hosts listed: every host, and requests naming none.
        let all = one(prefix("/"));
        assert!(hit(&all, get("/x")));
        assert!(hit(&all, on("any.test", get("/x"))));
    }

    #[test]
    fn all_conditions_must_hold() {
        let rule = one(RouteRule {
            prefix: Some("/api/".into()),
            extensions: vec!["json".into()],
            unsafe_methods: true,
            query: true,
            hosts: vec!["api.test".into()],
            ..RouteRule::default()
        });
        let full = on("api.test", req("POST", "/api/v1/x.json?a=1"));
        assert!(hit(&rule, full));
        let misses = [
            on("api.test", req("GET", "/api/v1/x.json?a=1")),
            on("api.test", req("POST", "/v1/x.json?a=1")),
            on("api.test", req("POST", "/api/v1/x.xml?a=1")),
            on("api.test", req("POST", "/api/v1/x.json")),
            on("www.test", req("POST", "/api/v1/x.json?a=1")),
            req("POST", "/api/v1/x.json?a=1"),
        ];
        for r in misses {
            assert!(!hit(&rule, r), "{r:?}");
        }
    }

    #[test]
    fn first_matching_rule_wins() {
        let routes = Routes::new(vec![
            RouteRule {
                backend: 0,
                method: HandoverMethod::Redirect,
                ..prefix("/admin/")
            },
            RouteRule {
                backend: 1,
                ..ext(&["php"])
            },
            RouteRule {
                backend: 2,
                method: HandoverMethod::Bridge,
                ..prefix("/")
            },
        ]);
        let backend = |path| routes.classify(&get(path)).map(|r| (r.backend, r.method));
        assert_eq!(backend("/admin/x.php"), Some((0, HandoverMethod::Redirect)));
        assert_eq!(backend("/x.php"), Some((1, HandoverMethod::Proxy)));
        assert_eq!(backend("/x.html"), Some((2, HandoverMethod::Bridge)));
    }

    #[test]
    fn fallback_rules_only_after_a_miss() {
        let routes = Routes::new(vec![
            RouteRule {
                backend: 0,
                fallback: true,
                ..prefix("/blog/")
            },
            RouteRule {
                backend: 1,
                ..ext(&["php"])
            },
            RouteRule {
                backend: 2,
                fallback: true,
                ..RouteRule::default()
            },
        ]);
        // Before the lookup, only the extension rule applies.
        assert_eq!(routes.classify(&get("/x.php")).map(|r| r.backend), Some(1));
        assert!(routes.classify(&get("/blog/post")).is_none());
        assert!(routes.classify(&get("/missing")).is_none());
        // After a 404, fallback rules in their order.
        let fallback = |path| routes.fallback(&get(path)).map(|r| r.backend);
        assert_eq!(fallback("/blog/post"), Some(0));
        assert_eq!(fallback("/missing"), Some(2));
        assert_eq!(fallback("/x.php"), Some(2));
        assert_eq!(routes.rules().len(), 3);
    }

    #[test]
    fn fallback_respects_its_conditions() {
        let routes = Routes::new(vec![RouteRule {
            fallback: true,
            hosts: vec!["app.test".into()],
            ..ext(&["html"])
        }]);
        assert!(routes.fallback(&on("app.test", get("/a.html"))).is_some());
        assert!(routes.fallback(&on("app.test", get("/a.txt"))).is_none());
        assert!(routes.fallback(&on("www.test", get("/a.html"))).is_none());
    }

    #[test]
    fn a_rule_without_conditions_matches_everything() {
        let any = one(RouteRule::default());
        for r in [get("/"), req("POST", "/x?y"), on("h.test", get("/a.php"))] {
            assert!(hit(&any, r));
        }
    }

    #[test]
    fn extension_parsing() {
        let cases: [(&[u8], Option<&[u8]>); 8] = [
            (b"/a.php", Some(b"php")),
            (b"/a.b.c", Some(b"c")),
            (b"/.php", None),
            (b"/a.", Some(b"")),
            (b"/a.php/", None),
            (b"/a", None),
            (b"a.txt", Some(b"txt")),
            (b"", None),
        ];
        for (path, want) in cases {
            assert_eq!(extension(path), want, "{:?}", String::from_utf8_lossy(path));
        }
    }
}
