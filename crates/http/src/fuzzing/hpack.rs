//! Checks for HPACK: any block decodes under small limits without a panic
//! and within those limits, and what decodes comes back the same when it is
//! encoded again and decoded by a fresh pair.

use super::hash;
use crate::h2::{
    encode_without_table, DecodeLimits, Decoder, Encoder, Field, HpackError, Representation,
};

/// The decoder's table size: small, so that eviction and size updates past
/// it are reached.
pub const HPACK_TABLE_SIZE: usize = 256;

/// Small limits, so that inputs reach them.
pub const HPACK_LIMITS: DecodeLimits = DecodeLimits {
    max_header_list_size: 1024,
    max_fields: 32,
};

type Fields = Vec<(Vec<u8>, Vec<u8>, Representation)>;

fn decode(
    decoder: &mut Decoder,
    block: &[u8],
    limits: &DecodeLimits,
) -> (Fields, Result<(), HpackError>) {
    let mut fields = Vec::new();
    let result = decoder.decode(block, limits, |name, value, how| {
        fields.push((name.to_vec(), value.to_vec(), how))
    });
    (fields, result)
}

/// Decodes the input as one block, then as two blocks (cut at a derived
/// point) through one decoder, so that the second sees the table the first
/// left; whatever decodes is round-tripped.
pub fn hpack_decode(data: &[u8]) {
    let mut decoder = Decoder::new(HPACK_TABLE_SIZE);
    let (fields, result) = decode(&mut decoder, data, &HPACK_LIMITS);
    check_decoded(&fields, &decoder);
    match result {
        Ok(()) => check_round_trip(&[fields]),
        // The compression context is lost: the decoder refuses from then on.
        Err(e) if e.is_connection_error() => {
            assert_eq!(decode(&mut decoder, &[0x82], &HPACK_LIMITS).1, Err(e));
        }
        // Over a limit, the block was still read to its end: the decoder
        // goes on.
        Err(_) => assert_eq!(decode(&mut decoder, &[0x82], &HPACK_LIMITS).1, Ok(())),
    }

    let cut = (hash(data) % (data.len() as u64 + 1)) as usize;
    let mut decoder = Decoder::new(HPACK_TABLE_SIZE);
    let mut blocks = Vec::new();
    for block in [&data[..cut], &data[cut..]] {
        let (fields, result) = decode(&mut decoder, block, &HPACK_LIMITS);
        check_decoded(&fields, &decoder);
        if result.is_err() {
            break;
        }
        blocks.push(fields);
    }
    check_round_trip(&blocks);
}

/// What a block emitted is within the limits, even when it was refused, and
/// the table's size is what its entries add up to and within its bound.
fn check_decoded(fields: &Fields, decoder: &Decoder) {
    assert!(
        fields.len() <= HPACK_LIMITS.max_fields,
        "{} fields",
        fields.len()
    );
    let list: usize = fields.iter().map(|(n, v, _)| 32 + n.len() + v.len()).sum();
    assert!(
        list <= HPACK_LIMITS.max_header_list_size,
        "header list of {list}"
    );
    let table: usize = decoder
        .dynamic_table()
        .map(|(n, v)| 32 + n.len() + v.len())
        .sum();
    assert_eq!(table, decoder.dynamic_table_size());
    assert!(table <= HPACK_TABLE_SIZE, "table of {table}");
}

/// Encodes the decoded blocks again, alternately with a fresh encoder's
/// table and without one, and decodes them with a fresh decoder: the same
/// fields come back, those sent never-indexed still never-indexed, and the
/// two tables agree.
fn check_round_trip(blocks: &[Fields]) {
    let mut encoder = Encoder::new();
    let mut decoder = Decoder::new(4096);
    let unlimited = DecodeLimits {
        max_header_list_size: usize::MAX,
        max_fields: usize::MAX,
    };
    for (i, fields) in blocks.iter().enumerate() {
        let list: Vec<Field<'_>> = fields
            .iter()
            .map(|(name, value, how)| Field {
                name,
                value,
                never_indexed: how.is_never_indexed(),
            })
            .collect();
        let mut block = Vec::new();
        if i % 2 == 1 {
            encoder.begin_block(&mut block);
            encode_without_table(list.iter().copied(), &mut block);
        } else {
            encoder.encode(list.iter().copied(), &mut block);
        }
        let (again, result) = decode(&mut decoder, &block, &unlimited);
        assert_eq!(result, Ok(()), "re-encoded block {i} refused: {block:02x?}");
        assert_eq!(again.len(), fields.len(), "block {i}");
        for ((name, value, how), (name2, value2, how2)) in fields.iter().zip(&again) {
            assert_eq!((name, value), (name2, value2), "block {i}");
            assert!(
                !how.is_never_indexed() || how2.is_never_indexed(),
                "block {i}: {name:?} lost never-indexed"
            );
        }
        assert!(
            encoder.dynamic_table().eq(decoder.dynamic_table()),
            "block {i}: the tables differ"
        );
    }
}
