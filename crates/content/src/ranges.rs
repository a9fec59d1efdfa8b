//! Byte-range coalescing and `multipart/byteranges` framing (RFC 9110 §14.6).

use crate::Part;

/// Most parts a multipart reply may have after coalescing; beyond this the
/// Range header is ignored and the whole file sent. Many tiny ranges cost a
/// syscall and a part header each while delivering little: a cheap
/// amplification lever that RFC 9110 §14.2 lets servers refuse.
pub const MAX_MULTIPART_RANGES: usize = 16;

/// Ranges closer than this many bytes are merged: a part header costs about
/// as much (~80 bytes), so sending the gap is no worse and saves a part.
pub const MERGE_GAP: u64 = 80;

/// Sorts inclusive ranges by start and merges overlapping, adjacent and
/// nearby (gap < [`MERGE_GAP`]) ones.
pub(crate) fn coalesce(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (a, b) in ranges {
        match out.last_mut() {
            // Gap = a - (end + 1) bytes; merge when it is under MERGE_GAP.
            Some(last) if a <= last.1.saturating_add(MERGE_GAP) => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// A boundary of fixed length derived from the entity tag (FNV-1a), so the
/// same representation always gets the same framing. RFC 2046 wants it absent
/// from the data; a 64-bit hash makes a collision improbable, not impossible.
pub(crate) fn boundary(etag: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in etag.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("fastpath-{h:016x}")
}

/// Builds the parts of a multipart/byteranges body and its exact length.
pub(crate) fn multipart(
    ranges: &[(u64, u64)],
    size: u64,
    content_type: &str,
    boundary: &str,
) -> (Vec<Part>, u64) {
    let mut parts = Vec::with_capacity(ranges.len() * 2 + 1);
    let mut total = 0u64;
    for &(a, b) in ranges {
        let head = format!(
            "\r\n--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: bytes {a}-{b}/{size}\r\n\r\n"
        );
        let len = b - a + 1;
        total += head.len() as u64 + len;
        parts.push(Part::Bytes(head.into_bytes()));
        parts.push(Part::File { offset: a, len });
    }
    let tail = format!("\r\n--{boundary}--\r\n");
    total += tail.len() as u64;
    parts.push(Part::Bytes(tail.into_bytes()));
    (parts, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalescing() {
        assert_eq!(
            coalesce(vec![(500, 600), (0, 10)]),
            vec![(0, 10), (500, 600)]
        );
        // Overlapping, adjacent, and a 79-byte gap all merge; an 80-byte gap
        // does not.
        assert_eq!(coalesce(vec![(0, 10), (5, 20)]), vec![(0, 20)]);
        assert_eq!(coalesce(vec![(0, 10), (11, 20)]), vec![(0, 20)]);
        assert_eq!(coalesce(vec![(0, 10), (90, 100)]), vec![(0, 100)]);
        assert_eq!(coalesce(vec![(0, 10), (91, 100)]), vec![(0, 10), (91, 100)]);
        assert_eq!(coalesce(vec![(0, 100), (10, 20)]), vec![(0, 100)]);
        assert_eq!(
            coalesce(vec![(u64::MAX - 1, u64::MAX), (0, u64::MAX - 2)]),
            vec![(0, u64::MAX)]
        );
        assert_eq!(coalesce(vec![]), vec![]);
    }

    #[test]
    fn boundary_is_fixed_length_and_stable() {
        assert_eq!(boundary("\"a\"").len(), boundary("\"bbbbbbbbbb\"").len());
        assert_eq!(boundary("\"a\""), boundary("\"a\""));
        assert_ne!(boundary("\"a\""), boundary("\"b\""));
    }
}
