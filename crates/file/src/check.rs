//! The property the fuzz target `chunk_header` checks, as a plain function so the crate's
//! stable tests drive it with seeded random inputs too.

use crate::chunk_file::{check_record, stripe_crc32c, ChunkHeader, HEADER_BYTES, MAGIC, VERSION};

/// Parses arbitrary bytes as the start of a chunk file, twice: as given, and "resealed" (the
/// magic, version and header length set and the header checksum recomputed, so that random
/// field values reach the field checks). For each accepted header it checks: the header
/// written back is byte for byte the bytes parsed; the stripe layout's sizes do not overflow
/// and are consistent (each stripe's chunk at most `chunk_bytes`, records in order, a file of
/// any length holds at most every stripe); and the record of stripe 0 in the bytes that follow,
/// if there are enough, is checked without panicking and accepted only with the right
/// checksum. Returns how many of the two headers were accepted (so seeded tests can see the
/// inputs reach past the checksum).
pub fn chunk_header_arbitrary(data: &[u8]) -> usize {
    let mut accepted = 0;
    if let Ok(h) = ChunkHeader::parse(data) {
        check_accepted(&h, data);
        accepted += 1;
    }
    let mut resealed = [0u8; HEADER_BYTES];
    let n = data.len().min(HEADER_BYTES);
    resealed[..n].copy_from_slice(&data[..n]);
    resealed[..8].copy_from_slice(&MAGIC);
    resealed[8..10].copy_from_slice(&VERSION.to_le_bytes());
    resealed[10..12].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
    let crc = crc32c::crc32c(&resealed[..HEADER_BYTES - 4]);
    resealed[HEADER_BYTES - 4..].copy_from_slice(&crc.to_le_bytes());
    let mut file = resealed.to_vec();
    file.extend_from_slice(data.get(HEADER_BYTES..).unwrap_or(&[]));
    if let Ok(h) = ChunkHeader::parse(&file) {
        check_accepted(&h, &file);
        accepted += 1;
    }
    accepted
}

fn check_accepted(h: &ChunkHeader, file: &[u8]) {
    assert_eq!(
        h.to_bytes()[..],
        file[..HEADER_BYTES],
        "an accepted header does not write back to the same bytes"
    );
    assert!(h.chunk_index < h.code.n());
    let layout = h.layout();
    let total = layout
        .try_chunk_file_bytes()
        .expect("an accepted header's chunk file size fits a u64");
    let stripes = layout.stripe_count();
    assert_eq!(layout.complete_stripes(total), stripes);
    assert!(layout.complete_stripes(u64::MAX) <= stripes);
    assert!(layout.complete_stripes(file.len() as u64) <= stripes);
    for s in [0, 1, stripes / 2, stripes.saturating_sub(1), stripes] {
        assert!(layout.stripe_chunk_bytes(s) <= h.chunk_bytes);
        if s + 1 < stripes {
            assert!(layout.record_offset(s) < layout.record_offset(s + 1));
        }
    }
    if stripes > 0 {
        let c = layout.stripe_chunk_bytes(0);
        let record = c + 4;
        if let Some(bytes) = file.get(HEADER_BYTES..HEADER_BYTES + record) {
            let stored = u32::from_le_bytes(bytes[c..].try_into().expect("4 bytes"));
            let ok = check_record(h.chunk_index, 0, bytes, c).is_ok();
            assert_eq!(ok, stored == stripe_crc32c(h.chunk_index, 0, &bytes[..c]));
        }
    }
}
