//! The PROXY protocol header at the front of a connection (v1 and v2): never a panic, and a
//! header found is within the input and the size taken.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((length, _client))) = fastpath_drivers::parse_proxy_header(data) {
        assert!(length > 0 && length <= data.len());
        assert!(length <= fastpath_drivers::PROXY_HEADER_MAX);
        // The bytes after the header are not part of it.
        let mut longer = data[..length].to_vec();
        longer.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(
            fastpath_drivers::parse_proxy_header(&longer).map(|h| h.map(|(n, _)| n)),
            Ok(Some(length))
        );
    }
});
