//! Access by client address, in the manner of nginx's `allow` and `deny`: a list of rules,
//! each allowing or denying a source (a CIDR prefix, `all`, or `unix:`), read in order.
//!
//! Decisions, and why:
//! - The first rule that matches decides, as in nginx; when none matches the list's
//!   default decides, [`Verdict::Allow`] unless configured otherwise, which is nginx's
//!   behaviour (a list meant to shut everyone else out ends with `deny all`).
//! - A bare address is a /32 (IPv4) or a /128 (IPv6). `all` matches every client, `unix:`
//!   every client on a Unix-domain socket (which has no address).
//! - An IPv4-mapped IPv6 client (`::ffff:10.0.0.1`, how a dual-stack socket shows an IPv4
//!   peer) is an IPv4 client: it matches IPv4 rules, not IPv6 ones, as in nginx. For the
//!   same reason a rule written in the mapped form with a prefix of /96 or longer
//!   (`::ffff:10.0.0.0/104`) is read as the IPv4 rule it denotes (`10.0.0.0/8`). IPv6
//!   rules that merely contain the mapped range (`::/0`) match IPv6 clients only.
//! - A prefix with bits set beyond its length (`10.0.0.1/8`) is accepted as nginx accepts
//!   it, as the network it lies in (`10.0.0.0/8`), and the parser hands back a
//!   [`HostBits`] warning for the configuration's loader to print: refusing would break
//!   configurations nginx takes, and staying silent would hide a likely typo.
//! - Everything else is refused with an error saying what is wrong: brackets, zone
//!   indices, signs or spaces in the prefix, a prefix longer than the address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What a rule, or the list's default, decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Let the request in.
    Allow,
    /// Refuse it (the server answers 403).
    Deny,
}

/// Which clients a rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Every client (`all`).
    All,
    /// Clients on a Unix-domain socket (`unix:`).
    Unix,
    /// An IPv4 network: the address with its host bits clear, and the prefix length.
    V4(Ipv4Addr, u8),
    /// An IPv6 network: the address with its host bits clear, and the prefix length.
    V6(Ipv6Addr, u8),
}

/// A warning from [`Source::parse`]: the address had bits set beyond the prefix, and the
/// network it lies in is what the rule uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBits {
    /// The text as written.
    pub written: String,
    /// The network used.
    pub network: Source,
}

impl fmt::Display for HostBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "low address bits of {} are meaningless: read as {}",
            self.written, self.network
        )
    }
}

/// Why a source could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessError {
    /// Nothing was given.
    Empty,
    /// An IPv6 address in brackets, as in a URL.
    Brackets,
    /// An IPv6 address with a zone index (`%eth0`), which a rule cannot use.
    Zone,
    /// Not an IPv4 address (the text before any `/`, without `:`).
    BadIpv4(String),
    /// Not an IPv6 address (the text before any `/`, with `:`).
    BadIpv6(String),
    /// The prefix length is not a decimal number.
    BadPrefix(String),
    /// The prefix length exceeds the address's bits.
    PrefixTooLong {
        /// The length given.
        prefix: u32,
        /// 32 or 128.
        max: u8,
    },
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AccessError::Empty => {
                f.write_str("empty source: give an address, a CIDR prefix, `all` or `unix:`")
            }
            AccessError::Brackets => f.write_str("write an IPv6 address without brackets"),
            AccessError::Zone => f.write_str("a zone index (`%...`) cannot be used in a rule"),
            AccessError::BadIpv4(text) => write!(
                f,
                "`{text}` is not an IPv4 address (four decimal numbers 0-255 without leading \
                 zeros)"
            ),
            AccessError::BadIpv6(text) => write!(f, "`{text}` is not an IPv6 address"),
            AccessError::BadPrefix(text) => {
                write!(f, "prefix length `{text}` is not a decimal number")
            }
            AccessError::PrefixTooLong { prefix, max } => write!(
                f,
                "prefix length {prefix} is longer than the address ({max} bits)"
            ),
        }
    }
}

impl std::error::Error for AccessError {}

impl Source {
    /// Reads `all`, `unix:`, an address or a CIDR prefix; see the module's documentation.
    /// `Ok` carries a [`HostBits`] warning when the address had host bits set.
    pub fn parse(text: &str) -> Result<(Source, Option<HostBits>), AccessError> {
        match text {
            "" => return Err(AccessError::Empty),
            "all" => return Ok((Source::All, None)),
            "unix:" => return Ok((Source::Unix, None)),
            _ => {}
        }
        if text.starts_with('[') {
            return Err(AccessError::Brackets);
        }
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let prefix = match prefix {
            None => None,
            Some(p) if !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u32>().ok()
            }
            Some(p) => return Err(AccessError::BadPrefix(p.to_owned())),
        };
        let (source, exact) = if address.contains(':') {
            if address.contains('%') {
                return Err(AccessError::Zone);
            }
            let addr: Ipv6Addr = address
                .parse()
                .map_err(|_| AccessError::BadIpv6(address.to_owned()))?;
            let prefix = checked(prefix, 128)?;
            match addr.to_ipv4_mapped() {
                Some(v4) if prefix >= 96 => network_v4(v4, prefix - 96),
                _ => network_v6(addr, prefix),
            }
        } else {
            let addr: Ipv4Addr = address
                .parse()
                .map_err(|_| AccessError::BadIpv4(address.to_owned()))?;
            network_v4(addr, checked(prefix, 32)?)
        };
        let warning = (!exact).then(|| HostBits {
            written: text.to_owned(),
            network: source,
        });
        Ok((source, warning))
    }

    /// Whether an IP client is one of this source's. IPv4-mapped IPv6 addresses are
    /// IPv4 clients.
    pub fn contains(&self, client: IpAddr) -> bool {
        let client = canonical(client);
        match (*self, client) {
            (Source::All, _) => true,
            (Source::Unix, _) => false,
            (Source::V4(net, prefix), IpAddr::V4(addr)) => {
                u32::from(addr) & mask32(prefix) == u32::from(net)
            }
            (Source::V6(net, prefix), IpAddr::V6(addr)) => {
                u128::from(addr) & mask128(prefix) == u128::from(net)
            }
            _ => false,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::All => f.write_str("all"),
            Source::Unix => f.write_str("unix:"),
            Source::V4(net, prefix) => write!(f, "{net}/{prefix}"),
            Source::V6(net, prefix) => write!(f, "{net}/{prefix}"),
        }
    }
}

/// The prefix length given, or the whole address when none was.
fn checked(prefix: Option<u32>, max: u8) -> Result<u8, AccessError> {
    match prefix {
        None => Ok(max),
        Some(p) if p <= u32::from(max) => Ok(p as u8),
        Some(p) => Err(AccessError::PrefixTooLong { prefix: p, max }),
    }
}

/// The network `addr/prefix` lies in, and whether `addr` was that network already.
fn network_v4(addr: Ipv4Addr, prefix: u8) -> (Source, bool) {
    let bits = u32::from(addr);
    let net = bits & mask32(prefix);
    (Source::V4(Ipv4Addr::from(net), prefix), net == bits)
}

fn network_v6(addr: Ipv6Addr, prefix: u8) -> (Source, bool) {
    let bits = u128::from(addr);
    let net = bits & mask128(prefix);
    (Source::V6(Ipv6Addr::from(net), prefix), net == bits)
}

fn mask32(prefix: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0)
}

fn mask128(prefix: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it carries.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

/// An ordered list of allow and deny rules with a default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessList {
    rules: Vec<(Verdict, Source)>,
    default: Verdict,
}

impl Default for AccessList {
    /// No rules, and nginx's default: allow.
    fn default() -> Self {
        AccessList::new(Verdict::Allow)
    }
}

impl AccessList {
    /// An empty list deciding `default` for clients no rule matches.
    pub fn new(default: Verdict) -> Self {
        AccessList {
            rules: Vec::new(),
            default,
        }
    }

    /// Appends a rule allowing `source` (as [`Source::parse`] reads it).
    pub fn allow(&mut self, source: &str) -> Result<Option<HostBits>, AccessError> {
        self.parse_and_push(Verdict::Allow, source)
    }

    /// Appends a rule denying `source` (as [`Source::parse`] reads it).
    pub fn deny(&mut self, source: &str) -> Result<Option<HostBits>, AccessError> {
        self.parse_and_push(Verdict::Deny, source)
    }

    fn parse_and_push(
        &mut self,
        verdict: Verdict,
        source: &str,
    ) -> Result<Option<HostBits>, AccessError> {
        let (source, warning) = Source::parse(source)?;
        self.push(verdict, source);
        Ok(warning)
    }

    /// Appends a rule.
    pub fn push(&mut self, verdict: Verdict, source: Source) {
        self.rules.push((verdict, source));
    }

    /// The rules in order.
    pub fn rules(&self) -> &[(Verdict, Source)] {
        &self.rules
    }

    /// What the list decides for a client at `addr`.
    pub fn check(&self, addr: IpAddr) -> Verdict {
        self.rules
            .iter()
            .find(|(_, source)| source.contains(addr))
            .map_or(self.default, |(verdict, _)| *verdict)
    }

    /// What the list decides for a client on a Unix-domain socket: the first `unix:` or
    /// `all` rule, else the default.
    pub fn check_unix(&self) -> Verdict {
        self.rules
            .iter()
            .find(|(_, source)| matches!(source, Source::All | Source::Unix))
            .map_or(self.default, |(verdict, _)| *verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Verdict::{Allow, Deny};

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn ip6(text: &str) -> Ipv6Addr {
        text.parse().unwrap()
    }

    fn list(rules: &[(Verdict, &str)], default: Verdict) -> AccessList {
        let mut list = AccessList::new(default);
        for (verdict, source) in rules {
            let warning = match verdict {
                Verdict::Allow => list.allow(source),
                Verdict::Deny => list.deny(source),
            }
            .unwrap();
            assert_eq!(warning, None, "{source}");
        }
        list
    }

    #[test]
    fn first_match_wins() {
        let l = list(
            &[
                (Deny, "192.168.1.1"),
                (Allow, "192.168.1.0/24"),
                (Allow, "2001:db8::/32"),
                (Deny, "all"),
            ],
            Allow,
        );
        assert_eq!(l.check(ip("192.168.1.1")), Deny);
        assert_eq!(l.check(ip("192.168.1.2")), Allow);
        assert_eq!(l.check(ip("192.168.2.1")), Deny);
        assert_eq!(l.check(ip("2001:db8:ffff::1")), Allow);
        assert_eq!(l.check(ip("2001:db9::1")), Deny);
        // The same rules in the other order: the broad allow comes first and wins.
        let l = list(
            &[
                (Allow, "192.168.1.0/24"),
                (Deny, "192.168.1.1"),
                (Deny, "all"),
            ],
            Allow,
        );
        assert_eq!(l.check(ip("192.168.1.1")), Allow);
    }

    #[test]
    fn default_when_nothing_matches() {
        let l = list(&[(Deny, "10.0.0.0/8")], Allow);
        assert_eq!(l.check(ip("11.0.0.1")), Allow);
        assert_eq!(l.check(ip("::1")), Allow);
        let l = list(&[(Allow, "10.0.0.0/8")], Deny);
        assert_eq!(l.check(ip("11.0.0.1")), Deny);
        assert_eq!(l.check(ip("10.255.255.255")), Allow);
        assert_eq!(AccessList::default().check(ip("1.2.3.4")), Allow);
        assert_eq!(AccessList::new(Deny).check(ip("1.2.3.4")), Deny);
    }

    #[test]
    fn prefix_edges() {
        let zero4 = list(&[(Deny, "0.0.0.0/0")], Allow);
        assert_eq!(zero4.check(ip("255.255.255.255")), Deny);
        assert_eq!(zero4.check(ip("0.0.0.0")), Deny);
        // /0 of one family says nothing about the other.
        assert_eq!(zero4.check(ip("::1")), Allow);
        let zero6 = list(&[(Deny, "::/0")], Allow);
        assert_eq!(zero6.check(ip("ffff::1")), Deny);
        assert_eq!(zero6.check(ip("1.2.3.4")), Allow);

        let host4 = list(&[(Deny, "10.1.2.3/32")], Allow);
        assert_eq!(host4.check(ip("10.1.2.3")), Deny);
        assert_eq!(host4.check(ip("10.1.2.2")), Allow);
        assert_eq!(host4.check(ip("10.1.2.4")), Allow);
        let host6 = list(&[(Deny, "2001:db8::1/128")], Allow);
        assert_eq!(host6.check(ip("2001:db8::1")), Deny);
        assert_eq!(host6.check(ip("2001:db8::2")), Allow);
        assert_eq!(host6.check(ip("2001:db8::")), Allow);

        // Just inside and just outside odd prefixes.
        let odd4 = list(&[(Deny, "172.16.0.0/12")], Allow);
        assert_eq!(odd4.check(ip("172.31.255.255")), Deny);
        assert_eq!(odd4.check(ip("172.32.0.0")), Allow);
        assert_eq!(odd4.check(ip("172.15.255.255")), Allow);
        let odd6 = list(&[(Deny, "fe80::/10")], Allow);
        assert_eq!(odd6.check(ip("febf:ffff::1")), Deny);
        assert_eq!(odd6.check(ip("fec0::1")), Allow);
        let one = list(&[(Deny, "128.0.0.0/1")], Allow);
        assert_eq!(one.check(ip("128.0.0.0")), Deny);
        assert_eq!(one.check(ip("127.255.255.255")), Allow);
    }

    #[test]
    fn bare_addresses_are_single_hosts() {
        assert_eq!(
            Source::parse("10.0.0.1"),
            Ok((Source::V4(Ipv4Addr::new(10, 0, 0, 1), 32), None))
        );
        assert_eq!(
            Source::parse("2001:db8::1"),
            Ok((Source::V6(ip6("2001:db8::1"), 128), None))
        );
    }

    #[test]
    fn mapped_addresses_are_ipv4() {
        let l = list(
            &[(Deny, "10.0.0.0/8"), (Allow, "::/0"), (Deny, "all")],
            Allow,
        );
        assert_eq!(l.check(ip("::ffff:10.0.0.1")), Deny);
        assert_eq!(l.check(ip("10.0.0.1")), Deny);
        // A mapped client outside the IPv4 rule is not an IPv6 client for `::/0`.
        assert_eq!(l.check(ip("::ffff:11.0.0.1")), Deny);
        assert_eq!(l.check(ip("2001:db8::1")), Allow);

        // Rules written in the mapped form are IPv4 rules.
        assert_eq!(
            Source::parse("::ffff:10.0.0.0/104"),
            Ok((Source::V4(Ipv4Addr::new(10, 0, 0, 0), 8), None))
        );
        assert_eq!(
            Source::parse("::ffff:192.0.2.7"),
            Ok((Source::V4(Ipv4Addr::new(192, 0, 2, 7), 32), None))
        );
        assert_eq!(
            Source::parse("::ffff:0:0/96"),
            Ok((Source::V4(Ipv4Addr::UNSPECIFIED, 0), None))
        );
        let mapped_rule = list(&[(Deny, "::ffff:10.0.0.0/104")], Allow);
        assert_eq!(mapped_rule.check(ip("10.1.2.3")), Deny);
        assert_eq!(mapped_rule.check(ip("::ffff:10.1.2.3")), Deny);
        assert_eq!(mapped_rule.check(ip("11.1.2.3")), Allow);
        // Shorter than /96 it is an IPv6 rule, and mapped clients are not its.
        assert_eq!(
            Source::parse("::ffff:0:0/95").unwrap().0,
            Source::V6(ip6("::fffe:0:0"), 95)
        );
        assert_eq!(
            list(&[(Deny, "::/80")], Allow).check(ip("::ffff:1.2.3.4")),
            Allow
        );
        // IPv4-compatible addresses (`::a.b.c.d`, deprecated) are plain IPv6.
        let compat = list(&[(Deny, "10.0.0.1")], Allow);
        assert_eq!(compat.check(ip("::10.0.0.1")), Allow);
    }

    #[test]
    fn host_bits_are_masked_with_a_warning() {
        let (source, warning) = Source::parse("10.1.2.3/8").unwrap();
        assert_eq!(source, Source::V4(Ipv4Addr::new(10, 0, 0, 0), 8));
        let warning = warning.unwrap();
        assert_eq!(
            warning.to_string(),
            "low address bits of 10.1.2.3/8 are meaningless: read as 10.0.0.0/8"
        );
        let (source, warning) = Source::parse("2001:db8::1/32").unwrap();
        assert_eq!(source, Source::V6(ip6("2001:db8::"), 32));
        assert_eq!(warning.unwrap().network, source);
        let mut l = AccessList::new(Allow);
        assert!(l.deny("192.168.1.77/24").unwrap().is_some());
        assert_eq!(l.check(ip("192.168.1.1")), Deny);
        assert_eq!(l.check(ip("192.168.2.1")), Allow);
        assert_eq!(
            Source::parse("0.0.0.1/0").unwrap().0.to_string(),
            "0.0.0.0/0"
        );
    }

    #[test]
    fn unix_clients() {
        let l = list(&[(Allow, "unix:"), (Deny, "all")], Allow);
        assert_eq!(l.check_unix(), Allow);
        assert_eq!(l.check(ip("127.0.0.1")), Deny);
        let l = list(&[(Deny, "127.0.0.1"), (Deny, "all")], Allow);
        assert_eq!(l.check_unix(), Deny);
        let l = list(&[(Deny, "127.0.0.1")], Allow);
        assert_eq!(l.check_unix(), Allow);
    }

    #[test]
    fn parse_errors() {
        let err = |text: &str| Source::parse(text).unwrap_err();
        assert_eq!(err(""), AccessError::Empty);
        assert_eq!(err("[::1]"), AccessError::Brackets);
        assert_eq!(err("fe80::1%eth0"), AccessError::Zone);
        assert_eq!(err("10.0.0"), AccessError::BadIpv4("10.0.0".into()));
        assert_eq!(err("10.0.0.256"), AccessError::BadIpv4("10.0.0.256".into()));
        assert_eq!(err("010.0.0.1"), AccessError::BadIpv4("010.0.0.1".into()));
        assert_eq!(err("ALL"), AccessError::BadIpv4("ALL".into()));
        assert_eq!(err(" 10.0.0.1"), AccessError::BadIpv4(" 10.0.0.1".into()));
        assert_eq!(
            err("2001:db8::g"),
            AccessError::BadIpv6("2001:db8::g".into())
        );
        assert_eq!(err("10.0.0.0/"), AccessError::BadPrefix("".into()));
        assert_eq!(err("10.0.0.0/+8"), AccessError::BadPrefix("+8".into()));
        assert_eq!(err("10.0.0.0/8/8"), AccessError::BadPrefix("8/8".into()));
        assert_eq!(err("10.0.0.0/1000"), AccessError::BadPrefix("1000".into()));
        assert_eq!(
            err("10.0.0.0/33"),
            AccessError::PrefixTooLong {
                prefix: 33,
                max: 32
            }
        );
        assert_eq!(
            err("::/129"),
            AccessError::PrefixTooLong {
                prefix: 129,
                max: 128
            }
        );
        assert_eq!(
            err("10.0.0.0/33").to_string(),
            "prefix length 33 is longer than the address (32 bits)"
        );
        assert_eq!(
            list(&[(Deny, "10.0.0.0/08")], Allow).rules(),
            &[(Deny, Source::V4(Ipv4Addr::new(10, 0, 0, 0), 8))]
        );
    }
}
