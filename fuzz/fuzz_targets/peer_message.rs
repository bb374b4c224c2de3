#![no_main]
// Every decoder of bytes another cache node sends (peer requests and responses, chunk records,
// run payloads) on arbitrary bytes: never panics, and what it accepts encodes back to bytes
// that decode to the same value.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = cache::check::peer_bytes_arbitrary(data);
});
