//! ACME Renewal Information (RFC 9773): a certificate's ARI identifier, the window the CA
//! suggests for renewing it, and what a certificate says about itself (names, lifetime).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use x509_parser::extensions::{GeneralName, ParsedExtension};

use crate::error::Error;
use crate::jws::b64;

/// What this client reads in a certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// The DNS names of the subject alternative name extension.
    pub names: Vec<String>,
    /// notBefore.
    pub not_before: SystemTime,
    /// notAfter.
    pub not_after: SystemTime,
    /// The ARI identifier, when the certificate has an authority key identifier.
    pub ari_id: Option<String>,
    /// The serial number, in hexadecimal (as CAs and `openssl x509 -serial` show it).
    pub serial: String,
}

fn unix(secs: i64) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// Reads a DER certificate's names, validity and ARI identifier.
pub fn certificate_facts(der: &[u8]) -> Result<CertificateFacts, Error> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| Error::Local(format!("unreadable certificate: {e}")))?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            if let GeneralName::DNSName(dns) = name {
                names.push(dns.to_string());
            }
        }
    }
    let aki = cert
        .extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => aki.key_identifier.as_ref(),
            _ => None,
        });
    let ari_id = aki.map(|aki| certificate_id(aki.0, cert.tbs_certificate.raw_serial()));
    Ok(CertificateFacts {
        names,
        not_before: unix(cert.validity().not_before.timestamp()),
        not_after: unix(cert.validity().not_after.timestamp()),
        ari_id,
        serial: cert
            .tbs_certificate
            .raw_serial()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    })
}

/// The ARI certificate identifier (RFC 9773 section 4.1): base64url of the authority key
/// identifier's keyIdentifier, a dot, base64url of the serial number's DER content octets
/// (with the leading zero a positive number may need).
pub fn certificate_id(key_identifier: &[u8], serial_der: &[u8]) -> String {
    format!("{}.{}", b64(key_identifier), b64(serial_der))
}

/// The renewal window a CA suggests (RFC 9773 section 4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalInfo {
    /// Renew no earlier than this.
    pub start: SystemTime,
    /// And before this.
    pub end: SystemTime,
    /// A page that says why the window is where it is, if the CA gave one.
    pub explanation_url: Option<String>,
    /// When to ask again (the response's `Retry-After`).
    pub retry_after: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RenewalInfoJson {
    suggested_window: WindowJson,
    #[serde(default, rename = "explanationURL")]
    explanation_url: Option<String>,
}

#[derive(Deserialize)]
struct WindowJson {
    start: String,
    end: String,
}

impl RenewalInfo {
    /// Parses a renewalInfo response body.
    pub fn parse(body: &[u8], retry_after: Option<Duration>) -> Result<RenewalInfo, Error> {
        let json: RenewalInfoJson = serde_json::from_slice(body)
            .map_err(|e| Error::Protocol(format!("renewalInfo: {e}")))?;
        let time = |text: &str| {
            parse_rfc3339(text)
                .ok_or_else(|| Error::Protocol(format!("renewalInfo: bad timestamp {text:?}")))
        };
        let (start, end) = (
            time(&json.suggested_window.start)?,
            time(&json.suggested_window.end)?,
        );
        // A window that ends before it starts is invalid (RFC 9773 section 4.2).
        if end <= start {
            return Err(Error::Protocol(
                "renewalInfo: the window ends before it starts".into(),
            ));
        }
        Ok(RenewalInfo {
            start,
            end,
            explanation_url: json.explanation_url,
            retry_after,
        })
    }

    /// The stored form: two Unix times in seconds.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let secs = |t: SystemTime| {
            t.duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0)
        };
        serde_json::json!({"start": secs(self.start), "end": secs(self.end)})
    }

    pub(crate) fn from_json(value: &serde_json::Value) -> Option<RenewalInfo> {
        Some(RenewalInfo {
            start: unix(value.get("start")?.as_i64()?),
            end: unix(value.get("end")?.as_i64()?),
            explanation_url: None,
            retry_after: None,
        })
    }
}

/// An RFC 3339 timestamp (`2025-01-02T03:04:05.678Z`, `…+01:00`), to the second.
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (h, m) = rest[1..].split_once(':')?;
            if h.len() != 2 || m.len() != 2 {
                return None;
            }
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    Some(unix(
        days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset,
    ))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyIdMethod, KeyPair,
        SerialNumber, PKCS_ECDSA_P256_SHA256,
    };

    /// RFC 9773 section 4.1's example: keyIdentifier 69:88:5B:6B:87:46:40:41:E1:B3:7B:84:
    /// 7B:A0:AE:2C:DE:01:C8:D4 and serial 0x0087654321.
    const AKI: [u8; 20] = [
        0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0, 0xAE,
        0x2C, 0xDE, 0x01, 0xC8, 0xD4,
    ];
    const EXAMPLE_ID: &str = "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE";

    #[test]
    fn the_rfc_9773_example_identifier() {
        assert_eq!(
            certificate_id(&AKI, &[0x00, 0x87, 0x65, 0x43, 0x21]),
            EXAMPLE_ID
        );
    }

    #[test]
    fn the_identifier_is_read_from_a_certificate() {
        // A CA whose key identifier and a leaf whose serial are the RFC's example.
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_identifier_method = KeyIdMethod::PreSpecified(AKI.to_vec());
        let ca_key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let ca = CertifiedIssuer::self_signed(ca, ca_key).unwrap();
        let mut leaf =
            CertificateParams::new(vec!["a.example".into(), "b.example".into()]).unwrap();
        leaf.serial_number = Some(SerialNumber::from_slice(&[0x87, 0x65, 0x43, 0x21]));
        leaf.use_authority_key_identifier_extension = true;
        leaf.not_before = rcgen::date_time_ymd(2025, 1, 1);
        leaf.not_after = rcgen::date_time_ymd(2025, 3, 1);
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let cert = leaf.signed_by(&key, &ca).unwrap();
        let facts = certificate_facts(cert.der()).unwrap();
        assert_eq!(facts.ari_id.as_deref(), Some(EXAMPLE_ID));
        assert_eq!(facts.names, vec!["a.example", "b.example"]);
        assert_eq!(
            facts.not_before,
            parse_rfc3339("2025-01-01T00:00:00Z").unwrap()
        );
        assert_eq!(
            facts.not_after,
            parse_rfc3339("2025-03-01T00:00:00Z").unwrap()
        );
    }

    #[test]
    fn rfc3339_timestamps() {
        let t = |s| parse_rfc3339(s).map(|t| t.duration_since(UNIX_EPOCH).unwrap().as_secs());
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(t("2025-01-02T03:04:05Z"), Some(1_735_787_045));
        assert_eq!(t("2025-01-02T03:04:05.999Z"), Some(1_735_787_045));
        assert_eq!(t("2025-01-02T04:04:05+01:00"), Some(1_735_787_045));
        assert_eq!(t("2025-01-02T02:34:05-00:30"), Some(1_735_787_045));
        assert_eq!(t("2024-02-29T00:00:00Z"), Some(1_709_164_800));
        for bad in [
            "2025-01-02",
            "2025-13-02T03:04:05Z",
            "2025-01-02T03:04:05",
            "x",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_renewal_info_body_is_read_and_a_backward_window_refused() {
        let body = br#"{"suggestedWindow":{"start":"2025-01-02T04:27:01.123Z","end":"2025-01-03T04:27:01Z"},"explanationURL":"https://ca.example/why"}"#;
        let info = RenewalInfo::parse(body, Some(Duration::from_secs(21600))).unwrap();
        assert_eq!(info.start, parse_rfc3339("2025-01-02T04:27:01Z").unwrap());
        assert_eq!(info.end, parse_rfc3339("2025-01-03T04:27:01Z").unwrap());
        assert_eq!(
            info.explanation_url.as_deref(),
            Some("https://ca.example/why")
        );
        assert_eq!(
            RenewalInfo::from_json(&info.to_json()).unwrap().start,
            info.start
        );
        let backward =
            br#"{"suggestedWindow":{"start":"2025-01-03T00:00:00Z","end":"2025-01-02T00:00:00Z"}}"#;
        assert!(RenewalInfo::parse(backward, None).is_err());
        assert!(RenewalInfo::parse(b"{}", None).is_err());
    }
}
