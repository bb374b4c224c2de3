#![no_main]
// The engine's frame header parser on arbitrary bytes: never panics, every accepted header
// re-encodes to the same bytes within the payload limit, every refusal names the field at fault.
// The input is checked as given and also XORed onto a valid header (so that the short inputs a
// bounded run starts with already reach every field).
use engine::wire::{check_header_bytes, Header, Kind, HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = check_header_bytes(data);
    let mut b = Header::new(Kind::Data, 1, 2, 3, 4096)
        .expect("a valid header")
        .encode();
    for (x, d) in b.iter_mut().zip(data) {
        *x ^= d;
    }
    let mut v = b.to_vec();
    v.extend_from_slice(data.get(HEADER_BYTES..).unwrap_or(&[]));
    let _ = check_header_bytes(&v);
});
