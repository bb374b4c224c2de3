//! The property the fuzz target `peer_message` checks, as a plain function so the crate's stable
//! tests drive it with seeded random inputs too: every decoder of bytes that come from another
//! node, on arbitrary bytes.

use crate::carrier::peer;
use crate::carrier::plans::RunPayload;
use crate::record;

/// Decodes `data` as a peer request, a peer response, a plan frame, a chunk record and a run
/// payload, and checks: no panic; whatever decodes encodes back to bytes that decode to the same
/// value (so no two nodes can read one message two ways). Returns how many of the five decoders
/// accepted the bytes.
pub fn peer_bytes_arbitrary(data: &[u8]) -> usize {
    let mut accepted = 0;
    if let Some(req) = peer::decode_request(data) {
        let again = peer::encode_request(&req);
        assert_eq!(
            peer::decode_request(&again).as_ref(),
            Some(&req),
            "request round trip"
        );
        accepted += 1;
    }
    if let Some(res) = peer::decode_response(data) {
        let again = peer::encode_response(&res);
        assert_eq!(
            peer::decode_response(&again).as_ref(),
            Some(&res),
            "response round trip"
        );
        accepted += 1;
    }
    if let Some((from, h, payload)) = peer::decode_plan_frame(data) {
        let mut again = Vec::new();
        peer::push_plan_frame(&mut again, from, &h, payload);
        assert_eq!(
            peer::decode_plan_frame(&again[4..]),
            Some((from, h, payload)),
            "plan frame round trip"
        );
        accepted += 1;
    }
    if let Ok((h, body)) = record::parse(data) {
        let again = record::encode(&h, body);
        assert_eq!(
            record::parse(&again).ok(),
            Some((h, body)),
            "record round trip"
        );
        accepted += 1;
    }
    if let Ok(p) = RunPayload::decode(data) {
        let again = p.encode();
        assert_eq!(
            RunPayload::decode(&again).ok(),
            Some(p),
            "run payload round trip"
        );
        accepted += 1;
    }
    accepted
}
