//! The protocol helpers this crate uses, from the protocol layer.

pub(crate) use fastpath_http::{
    etag_list_matches, parse_accept_encoding, parse_http_date, parse_range, RangeRequest,
};
