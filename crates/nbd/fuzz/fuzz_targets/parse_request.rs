//! The pure parsers on arbitrary bytes: request header (28 bytes), option header (16 bytes),
//! GO/INFO payload (the rest). A parsed request must re-encode to the same bytes, and
//! `check_request` must only accept requests that lie inside the export.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nbd::protocol::{
    check_request, encode_request, parse_info_request, parse_option_header, parse_request,
    Command, RequestLimits, BLOCK_SIZE_MAX_BYTES,
};

fuzz_target!(|data: &[u8]| {
    if let Some(header) = data.get(..28) {
        let bytes: [u8; 28] = header.try_into().expect("28 bytes");
        if let Ok(request) = parse_request(&bytes) {
            assert_eq!(encode_request(&request), bytes);
            let size = data
                .get(28..36)
                .map_or(1 << 30, |s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
            let ranged = !matches!(request.command, Command::Flush | Command::Disc);
            if check_request(&request, &RequestLimits::aligned(size)).is_ok() && ranged {
                let end = request.offset.checked_add(u64::from(request.length));
                assert!(end.is_some_and(|e| e <= size));
                assert!(request.length > 0 && request.length <= BLOCK_SIZE_MAX_BYTES);
            }
        }
    }
    if let Some(header) = data.get(..16) {
        let _ = parse_option_header(header.try_into().expect("16 bytes"));
    }
    let _ = parse_info_request(data);
});
