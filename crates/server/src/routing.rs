//! Which answer a request gets, decided before anything is written: a hand-over to a
//! backend (the routes run before any file is looked at, the fallback after the static
//! lookup found nothing), a static reply, or an error status.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use fastpath_content::{ContentCache, Reply, StaticRequest};
use fastpath_handover::{HandoverMethod, RouteRequest, Routes};
use fastpath_http::{
    is_registered_method, normalize_path, parse_target, Method, Noted, Request, Target,
};

use crate::access_log::Peer;
use crate::metrics::WorkerMetrics;
use crate::module::Exchange;
use crate::modules::WorkerModules;
use crate::vhosts::VirtualHosts;

/// What a request gets.
pub(crate) enum Route {
    Static(Reply),
    MethodNotAllowed,
    Error(u16),
    /// To a backend (its index), by a hand-over method.
    Handover(usize, HandoverMethod),
    /// The metrics exposition (on the metrics listener only).
    Metrics,
    /// The health check (`health_check`): `200 ok`.
    Health,
    /// The same URL over HTTPS on this port (a listener with `redirect_to_https`).
    ToHttps(u16),
    /// A module's answer.
    Module(Box<crate::module::Response>),
}

/// One worker's router: the sites, the hand-over rules, the worker's handle on the
/// process's cache of files, and a reused buffer for the decoded path.
pub(crate) struct Router {
    hosts: Arc<VirtualHosts>,
    routes: Arc<Routes>,
    cache: ContentCache,
    /// The worker whose metrics carry the cache's memory, entries and evictions.
    reporter: Arc<AtomicUsize>,
    path: Vec<u8>,
}

impl Router {
    /// The `Strict-Transport-Security` line for a TLS connection to `server_name`.
    pub(crate) fn hsts(&self, server_name: Option<&str>) -> Option<std::sync::Arc<[u8]>> {
        self.hosts.hsts(server_name)
    }

    pub(crate) fn new(
        hosts: Arc<VirtualHosts>,
        routes: Arc<Routes>,
        (cache, reporter): (ContentCache, Arc<AtomicUsize>),
    ) -> Self {
        Router {
            hosts,
            routes,
            cache,
            reporter,
            path: Vec::with_capacity(256),
        }
    }

    /// Publishes this worker's hits and misses in the content cache, and the shared
    /// cache's evictions, memory and entries on the series of one worker of the process
    /// (the first to tick), so that sums over workers are the process's figures. Every
    /// worker publishes those for it: the one that carries them may be idle and not
    /// ticking (a pool thread). A private cache's figures are its worker's own.
    pub(crate) fn publish_cache(&self, metrics: &WorkerMetrics) {
        let me = metrics.worker();
        let reporter = if self.cache.is_private() {
            me
        } else {
            match self
                .reporter
                .compare_exchange(usize::MAX, me, Relaxed, Relaxed)
            {
                Ok(_) => me,
                Err(current) => current,
            }
        };
        let stats = self.cache.stats();
        metrics.content_cache(stats.hits, stats.misses);
        metrics.content_cache_of(
            reporter,
            stats.evictions,
            self.cache.memory(),
            self.cache.len(),
        );
    }

    /// The content cache's hits and misses, for tests.
    #[cfg(test)]
    pub(crate) fn cache_stats(&self) -> fastpath_content::CacheStats {
        self.cache.stats()
    }

    /// Takes in what changed on disk since the last call (once a tick).
    pub(crate) fn poll_changes(&self) {
        self.hosts.poll_changes();
    }

    /// Decides what a request gets: a static reply, or an error status.
    #[inline]
    pub(crate) fn route(&mut self, request: &Request<'_>) -> Route {
        match self.locate(request) {
            Ok(located) => self.route_located(request, located),
            Err(refused) => refused.into(),
        }
    }

    /// Reads where a request is for: its host, its path decoded and normalised (kept in
    /// the router, [`Router::path`]) and its query; the answer at once when the target
    /// cannot be routed.
    #[inline]
    pub(crate) fn locate<'r>(&mut self, request: &Request<'r>) -> Result<Located<'r>, Unroutable> {
        let target = match parse_target(request.target) {
            Ok(target) => target,
            Err(e) => return Err(Unroutable::Status(e.status)),
        };
        let (authority, raw_path, query) = match target {
            Target::Origin { path, query } => (None, path, query),
            Target::Absolute {
                authority,
                path,
                query,
                ..
            } => (Some(authority), path, query),
            Target::Authority(_) | Target::Asterisk => {
                return Err(match request.method {
                    "CONNECT" | "OPTIONS" => Unroutable::MethodNotAllowed,
                    _ => Unroutable::Status(400),
                })
            }
        };
        if let Err(e) = normalize_path(raw_path, &mut self.path) {
            return Err(Unroutable::Status(e.status()));
        }
        // An absolute-form target's authority wins over Host (RFC 9112 §3.2.2).
        let host = authority.or(request.host);
        Ok(Located {
            host,
            raw_path,
            query,
            compress: None,
        })
    }

    /// The file at `path` of the site for `host`, as the page of an error `status`: its
    /// content and type, without the validators of a file (the response is about the
    /// error, not the file); `None` when it is not a file that can be read.
    pub(crate) fn error_page(
        &mut self,
        host: Option<&str>,
        path: &[u8],
        status: u16,
        head: bool,
    ) -> Option<Reply> {
        let site = self.hosts.select(host.map(str::as_bytes));
        let mut reply = site.serve_cached(
            &mut self.cache,
            &StaticRequest {
                head,
                path,
                raw_path: "",
                ..StaticRequest::default()
            },
        );
        if reply.status != 200 {
            return None;
        }
        reply.status = status;
        // Written as a 200's are (the head encoder leaves an error's type out, its pages
        // being its own), the validators left out.
        let mut fields = Vec::with_capacity(96);
        fastpath_http::Fields {
            meta: fastpath_http::Metadata {
                content_type: reply.content_type.as_deref(),
                ..fastpath_http::Metadata::default()
            },
            extra: b"",
            content_length: Some(reply.content_length),
        }
        .write(200, &mut fields);
        reply.fields = Some(Arc::from(fields));
        reply.etag = None;
        reply.last_modified = None;
        reply.accept_ranges = false;
        reply.vary_accept_encoding = false;
        Some(reply)
    }

    /// The decoded path of the request [`Router::locate`] read last; a module's rewrite
    /// replaces it ([`Router::set_path`]).
    pub(crate) fn path(&self) -> &[u8] {
        &self.path
    }

    /// Routes the next request by `path` (decoded and normalised) instead.
    pub(crate) fn set_path(&mut self, path: &[u8]) {
        self.path.clear();
        self.path.extend_from_slice(path);
    }

    /// What a located request gets, by the path the router holds.
    #[inline]
    pub(crate) fn route_located(&mut self, request: &Request<'_>, located: Located<'_>) -> Route {
        let Located {
            host,
            raw_path,
            query,
            compress,
        } = located;
        let mut host_name = [0u8; 256];
        let route_request = RouteRequest {
            method: request.method,
            path: &self.path,
            query,
            host: host.and_then(|h| lower_host_name(h, &mut host_name)),
        };
        // A method nobody registered (a typo, `get`, an attack probe) is refused here for
        // every route alike: backends never see what the static path would not take.
        if !is_registered_method(request.method) {
            return Route::Error(501);
        }
        if !self.routes.is_empty() {
            if let Some(rule) = self.routes.classify(&route_request) {
                return Route::Handover(rule.backend, rule.method);
            }
        }
        match request.kind {
            Method::Get | Method::Head => {}
            Method::Other => return self.fallback_or(&route_request, Route::Error(501)),
            _ => return self.fallback_or(&route_request, Route::MethodNotAllowed),
        }
        let site = self.hosts.select(host.map(str::as_bytes));
        // The index file a directory's path resolves to, when it had to be found here.
        let mut candidate = Vec::new();
        let mut index_found = false;
        if self.path.ends_with(b"/") && !self.routes.is_empty() {
            // A directory's index file that a route claims (index.php, say) goes to the
            // backend, as the request it stands for: never served as static source.
            candidate.reserve(self.path.len() + 16);
            for name in &site.options().index {
                candidate.clear();
                candidate.extend_from_slice(&self.path);
                candidate.extend_from_slice(name.as_bytes());
                let claimed = self.routes.classify(&RouteRequest {
                    path: &candidate,
                    ..route_request
                });
                let index = site.serve_cached(
                    &mut self.cache,
                    &StaticRequest {
                        head: true,
                        path: &candidate,
                        raw_path,
                        ..StaticRequest::default()
                    },
                );
                if index.status == 200 {
                    if let Some(rule) = claimed {
                        return Route::Handover(rule.backend, rule.method);
                    }
                    // Served as found: the directory is not resolved to it again.
                    index_found = true;
                    break;
                }
            }
        }
        let path = if index_found { &candidate } else { &self.path };
        let reply = site.serve_cached(
            &mut self.cache,
            &StaticRequest {
                head: request.kind == Method::Head,
                path,
                raw_path,
                query,
                if_match: request.noted(Noted::IfMatch),
                if_none_match: request.noted(Noted::IfNoneMatch),
                if_modified_since: request.noted(Noted::IfModifiedSince),
                if_unmodified_since: request.noted(Noted::IfUnmodifiedSince),
                if_range: request.noted(Noted::IfRange),
                range: request.noted(Noted::Range),
                accept_encoding: request.noted(Noted::AcceptEncoding),
                compress,
            },
        );
        if reply.status == 404 {
            return self.fallback_or(&route_request, Route::Static(reply));
        }
        Route::Static(reply)
    }

    /// The fallback hand-over for a request nothing static answers, else `otherwise`.
    fn fallback_or(&self, request: &RouteRequest<'_>, otherwise: Route) -> Route {
        match self.routes.fallback(request) {
            Some(rule) => Route::Handover(rule.backend, rule.method),
            None => otherwise,
        }
    }
}

/// What the modules decided of a request besides its route.
#[derive(Default)]
pub(crate) struct ModuleNotes {
    /// The user a module authenticated it as, for the access log.
    pub(crate) user: Option<String>,
    /// The pages its errors are answered with.
    pub(crate) error_pages: Option<std::sync::Arc<crate::module::ErrorPages>>,
    /// The rules its response head goes through.
    pub(crate) head_edit: Option<std::sync::Arc<dyn fastpath_http::HeadEdit>>,
    /// How its response may be compressed on the fly.
    pub(crate) compress: Option<std::sync::Arc<fastpath_modules::compress::Policy>>,
}

/// What a request gets when the configuration has modules: the modules in its scope
/// first (they may answer it, or change its path), then the routes, by the path they left;
/// and what else they decided.
pub(crate) fn route_by_modules(
    router: &mut Router,
    modules: &mut WorkerModules,
    request: &Request<'_>,
    peer: Peer,
    https: bool,
    metrics: Option<&crate::metrics::Metrics>,
) -> (Route, ModuleNotes) {
    let located = match router.locate(request) {
        Ok(located) => located,
        Err(refused) => return (refused.into(), ModuleNotes::default()),
    };
    let mut host_name = [0u8; 256];
    let host = located
        .host
        .and_then(|h| lower_host_name(h, &mut host_name));
    let hosts = router.hosts.clone();
    let mut exchange = Exchange {
        request,
        client: peer.client_ip(),
        https,
        path: router.path().to_vec(),
        query: located.query.map(str::to_owned),
        host: located.host,
        changed: false,
        rewritten: false,
        user: None,
        site: hosts.select(located.host.map(str::as_bytes)),
        compress: None,
        error_pages: None,
        metrics,
        head_edit: None,
    };
    let answered = modules.run(&mut exchange, host);
    let compress = exchange.compress.take();
    let notes = ModuleNotes {
        user: exchange.user.take(),
        error_pages: exchange.error_pages.take(),
        head_edit: exchange.head_edit.take(),
        compress: compress.clone(),
    };
    if let Some(response) = answered {
        return (Route::Module(Box::new(response)), notes);
    }
    if !exchange.rewritten {
        let located = Located {
            compress: compress.as_deref(),
            ..located
        };
        return (router.route_located(request, located), notes);
    }
    router.set_path(&exchange.path);
    let raw_path = encode_path(&exchange.path);
    let query = exchange.query.take();
    let located = Located {
        host: located.host,
        raw_path: &raw_path,
        query: query.as_deref(),
        compress: compress.as_deref(),
    };
    (router.route_located(request, located), notes)
}

/// A decoded path written as a target's path again: what would be read as something
/// else (`%`, `?`, `#`), and bytes outside visible ASCII, percent-encoded.
fn encode_path(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for &b in path {
        if b <= b' ' || b >= 0x7f || matches!(b, b'%' | b'?' | b'#') {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Why a request's target cannot be routed.
pub(crate) enum Unroutable {
    /// An error status (400 for a bad target or path).
    Status(u16),
    /// CONNECT or OPTIONS with a target for them, which the server does not serve.
    MethodNotAllowed,
}

impl From<Unroutable> for Route {
    fn from(refused: Unroutable) -> Route {
        match refused {
            Unroutable::Status(status) => Route::Error(status),
            Unroutable::MethodNotAllowed => Route::MethodNotAllowed,
        }
    }
}

/// Where a request is for, as [`Router::locate`] read it.
pub(crate) struct Located<'r> {
    /// The absolute target's authority, else `Host`.
    pub(crate) host: Option<&'r str>,
    /// The path as sent (a rewritten one re-encoded), for the Location of a directory's
    /// redirect.
    pub(crate) raw_path: &'r str,
    pub(crate) query: Option<&'r str>,
    /// How static files may be compressed on the fly, as a module said.
    pub(crate) compress: Option<&'r fastpath_modules::compress::Policy>,
}

/// The host name a route condition is compared with: lower case, without the port.
pub(crate) fn lower_host_name<'b>(host: &str, buf: &'b mut [u8; 256]) -> Option<&'b str> {
    let name = crate::vhosts::host_name(host);
    if name.is_empty() || name.len() > buf.len() {
        return None;
    }
    let out = &mut buf[..name.len()];
    for (dst, src) in out.iter_mut().zip(name.bytes()) {
        *dst = src.to_ascii_lowercase();
    }
    std::str::from_utf8(out).ok()
}
