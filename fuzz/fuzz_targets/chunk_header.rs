#![no_main]
// The chunk file header parser (and the stripe layout and first record it implies) on
// arbitrary bytes, as given and resealed with a valid header checksum: never panics, every
// accepted header writes back to the same bytes, sizes do not overflow.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = file::check::chunk_header_arbitrary(data);
});
