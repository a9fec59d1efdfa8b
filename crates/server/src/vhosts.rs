//! Virtual hosts: which site answers a request, chosen by its host name.

use std::collections::HashMap;
use std::sync::Arc;

use fastpath_content::Site;

/// Longest host name looked up; longer ones (invalid per DNS) fall to the default host.
const MAX_HOST_LEN: usize = 255;

/// The sites of a server and the names that select them.
pub(crate) struct VirtualHosts {
    sites: Vec<Site>,
    default: usize,
    exact: HashMap<Vec<u8>, usize>,
    /// `(".example.com", site)`, longest suffix first so the most specific wildcard wins.
    wildcards: Vec<(Vec<u8>, usize)>,
    /// Each site's `Strict-Transport-Security` line, for its responses over TLS.
    hsts: Vec<Option<Arc<[u8]>>>,
}

impl VirtualHosts {
    /// `sites[default]` answers when no name matches; `names` pairs a configured name
    /// (lower case, exact or `*.domain`) with its site.
    pub(crate) fn new(sites: Vec<Site>, default: usize, names: Vec<(String, usize)>) -> Self {
        let mut exact = HashMap::new();
        let mut wildcards = Vec::new();
        for (name, site) in names {
            match name.strip_prefix('*') {
                Some(suffix) => wildcards.push((suffix.as_bytes().to_vec(), site)),
                None => {
                    exact.insert(name.into_bytes(), site);
                }
            }
        }
        wildcards.sort_by_key(|(suffix, _)| std::cmp::Reverse(suffix.len()));
        VirtualHosts {
            hsts: vec![None; sites.len()],
            sites,
            default,
            exact,
            wildcards,
        }
    }

    /// Each site's `Strict-Transport-Security` value (`hsts`), by the sites' order.
    pub(crate) fn with_hsts(mut self, values: Vec<Option<String>>) -> Self {
        self.hsts = values
            .into_iter()
            .map(|value| {
                value.map(|v| Arc::from(format!("Strict-Transport-Security: {v}\r\n").as_bytes()))
            })
            .collect();
        self.hsts.resize(self.sites.len(), None);
        self
    }

    /// The `Strict-Transport-Security` line of the site a TLS connection asked for by its
    /// server name (the default site's without one): every request on the connection is
    /// for that name (421 otherwise), so it is looked up once per connection.
    pub(crate) fn hsts(&self, server_name: Option<&str>) -> Option<Arc<[u8]>> {
        let index = server_name
            .and_then(|name| self.lookup(name.as_bytes()))
            .unwrap_or(self.default);
        self.hsts[index].clone()
    }

    /// The site for a Host value (or an absolute target's authority): case-insensitive, port
    /// and a trailing dot ignored.
    /// Reads the change events of sites watched without a thread.
    pub(crate) fn poll_changes(&self) {
        for site in &self.sites {
            site.poll_changes();
        }
    }

    pub(crate) fn select(&self, host: Option<&[u8]>) -> &Site {
        if self.exact.is_empty() && self.wildcards.is_empty() {
            return &self.sites[self.default];
        }
        let index = host.and_then(|h| self.lookup(h)).unwrap_or(self.default);
        &self.sites[index]
    }

    fn lookup(&self, host: &[u8]) -> Option<usize> {
        let name = strip_port(host);
        let name = name.strip_suffix(b".").unwrap_or(name);
        if name.is_empty() || name.len() > MAX_HOST_LEN {
            return None;
        }
        let mut lower = [0u8; MAX_HOST_LEN];
        let lower = &mut lower[..name.len()];
        for (dst, src) in lower.iter_mut().zip(name) {
            *dst = src.to_ascii_lowercase();
        }
        if let Some(&site) = self.exact.get(&lower[..]) {
            return Some(site);
        }
        self.wildcards
            .iter()
            .find(|(suffix, _)| lower.len() > suffix.len() && lower.ends_with(suffix))
            .map(|&(_, site)| site)
    }
}

/// `host` (a `Host` field's value) without its port.
pub(crate) fn host_without_port(host: &str) -> &str {
    // The cut falls before ':' or after ']', both ASCII: on a character boundary.
    &host[..strip_port(host.as_bytes()).len()]
}

/// The name `host` names: without its port and a final dot (not lower-cased).
pub(crate) fn host_name(host: &str) -> &str {
    let name = host_without_port(host);
    name.strip_suffix('.').unwrap_or(name)
}

fn strip_port(host: &[u8]) -> &[u8] {
    if host.first() == Some(&b'[') {
        // An IPv6 literal: the port, if any, follows the bracket.
        return match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(colon) => &host[..colon],
        None => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_and_brackets_are_stripped() {
        assert_eq!(strip_port(b"example.com:8080"), b"example.com");
        assert_eq!(strip_port(b"example.com"), b"example.com");
        assert_eq!(strip_port(b"[::1]:80"), b"[::1]");
    }
}
