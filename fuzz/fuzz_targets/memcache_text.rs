#![no_main]
// The memcached text protocol parser on arbitrary bytes: never panics, never consumes more
// than it was given, round-trips every command it accepts, and does not depend on how the bytes
// are split into reads.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = proto::check::parse_arbitrary(data);
});
