//! A member's answers to peer requests: chunk records stored, read and deleted, index
//! listings, heartbeats and forwarded agent operations handed to the agent.

use std::sync::atomic::Ordering;

use crate::carrier::peer::{self, Request, Response};
use crate::member::store::ChunkStore;
use crate::node::{lock, Node};

/// Test-only (honoured with `--debug-commands`): a member waits this many ms before it applies
/// each delta of the whole layout, so that tests can race repairs with deltas in flight.
pub const DELTA_DELAY_ENV: &str = "INEC_TEST_DELTA_DELAY_MS";

/// [`answer_chunk_or_listing`] in one step, a listing's answer made with the store held (for
/// peers played in tests).
#[cfg(test)]
pub(crate) fn answer_chunk(store: &mut ChunkStore, req: Request) -> Response {
    match answer_chunk_or_listing(store, req) {
        Ok(res) => res,
        Err(listing) => listing_response(listing),
    }
}

/// A member's answer to a chunk request (`Put`, `Get`, `Delete`, `Touch`, `Flip`, ...) from
/// its store; any other request is a `Nack`. A `List` gives its listing as copied
/// ([`ChunkStore::listing`]): the caller makes the answer from it once it has let the store go.
///
/// A request of a leader's term (`Request::Fenced`) is refused when the store has seen a newer
/// term of the stripe; so is one without a token once the store has seen any term.
pub(crate) fn answer_chunk_or_listing(
    store: &mut ChunkStore,
    req: Request,
) -> Result<Response, crate::member::store::Listing> {
    let (token, req) = match req {
        Request::Fenced { token, req } => (token, *req),
        req => (0, req),
    };
    if let Some(stripe) = req.stripe() {
        if let Err(seen) = store.admit(stripe, token) {
            // A delta of an older term still changes the parity page: the home's page has
            // changed already, and a parity page must follow its data pages whoever wrote
            // them. Only the value's location record is refused.
            if let Request::Delta {
                page_stripe,
                position,
                page,
                data,
                seq,
                offset,
                delta,
                ..
            } = &req
            {
                let _ = store.apply_page_delta(
                    (*page_stripe, *position, *page),
                    *data,
                    *seq,
                    *offset,
                    delta,
                );
            }
            return Ok(Response::Nack(peer::fenced_out(stripe, token, seen)));
        }
    }
    if let Request::List { stripe } = req {
        return Err(store.listing(stripe));
    }
    Ok(match req {
        Request::Put {
            stripe,
            watermark,
            record,
        } => match store.put(stripe, record, watermark) {
            Ok(_) => Response::Ack,
            Err(e) => Response::Nack(e.to_string()),
        },
        Request::Get {
            stripe,
            position,
            key,
            version,
        } => Response::Record(
            store
                .get(stripe, position, &key, version)
                .map(<[u8]>::to_vec),
        ),
        Request::Delete {
            stripe,
            key,
            version,
        } => {
            store.delete(stripe, &key, version);
            Response::Ack
        }
        Request::Touch {
            stripe,
            key,
            version,
            exptime,
        } => {
            store.touch(stripe, &key, version, exptime);
            Response::Ack
        }
        Request::Flip {
            stripe,
            position,
            key,
            bit,
        } => {
            if store.flip_bit(stripe, position, &key, bit) {
                Response::Ack
            } else {
                Response::Nack("no such record or bit".into())
            }
        }
        Request::Delta {
            stripe,
            watermark,
            record,
            page_stripe,
            position,
            page,
            data,
            seq,
            committed,
            commits,
            offset,
            delta,
        } => {
            for (t, position, page, data, committed) in commits {
                store.commit_kept((t, position, page), data, committed);
            }
            match store.apply_delta(
                stripe,
                watermark,
                record,
                (page_stripe, position, page),
                data,
                (seq, committed),
                offset,
                &delta,
            ) {
                Ok(()) => Response::Ack,
                Err(e) => Response::Nack(e),
            }
        }
        Request::Range {
            page_stripe,
            position,
            page,
            offset,
            len,
            ..
        } => match store.range((page_stripe, position, page), offset, len) {
            Ok((seqs, bytes)) => Response::Range { seqs, bytes },
            Err(e) => Response::Nack(e),
        },
        Request::Pages {
            page_stripe,
            position,
            ..
        } => Response::Range {
            seqs: vec![store.pages_of(page_stripe, position) as u64],
            bytes: Vec::new(),
        },
        Request::Realign {
            stripe,
            page_stripe,
            position,
            page,
            data,
            from,
            to,
            offset,
            bytes,
        } => match store.realign_parity(
            stripe,
            (page_stripe, position, page),
            data,
            from,
            to,
            offset,
            &bytes,
        ) {
            Ok(true) => Response::Ack,
            Ok(false) => Response::Nack(format!(
                "the page's count for data position {data} is no longer {from}"
            )),
            Err(e) => Response::Nack(e),
        },
        Request::Kept {
            page_stripe,
            position,
            page,
            data,
            above,
        } => Response::Kept(store.kept_deltas((page_stripe, position, page), data, above)),
        Request::Commit(pages) => {
            for (t, position, page, data, committed) in pages {
                store.commit_kept((t, position, page), data, committed);
            }
            Response::Ack
        }
        other => Response::Nack(format!("not a chunk request: {other:?}")),
    })
}

/// A `List` answer: headers, and the whole layout's location records whole (a node rebuilding
/// its slab after a restart finds its values in it from them), with the stripe's tombstones.
fn listing_response(listing: crate::member::store::Listing) -> Response {
    let (records, tombstones) = listing.into_parts();
    Response::Headers(records, tombstones)
}

impl Node {
    /// Handles a message from a peer (or from this node to itself).
    /// Answers a peer's request at once when that needs no wait on a key lock or another
    /// node and is short (every chunk operation but a listing, every heartbeat); gives it back
    /// otherwise (an agent operation; a stripe's listing for an index rebuild, which at
    /// 200,000 keys a stripe keeps a loop busy for a second and more on a loaded machine,
    /// long enough for its peers to miss its heartbeat answers and see it down), for a
    /// thread that may wait.
    pub fn handle_peer_now(&self, req: Request) -> Result<Response, Request> {
        match req {
            Request::Agent(_) | Request::List { .. } => Err(req),
            Request::Heartbeat { from } => Ok(self.heartbeat(from as usize)),
            Request::Delta { .. } if !self.delta_delay().is_zero() => Err(req),
            req => Ok(self.handle_peer(req)),
        }
    }

    /// Test-only ([`DELTA_DELAY_ENV`], with `--debug-commands`): how long a member waits
    /// before it applies a delta (on a worker, so its parity pages lag the data pages).
    pub(crate) fn delta_delay(&self) -> std::time::Duration {
        if !self.cfg.debug_commands {
            return std::time::Duration::ZERO;
        }
        static DELAY: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        let ms = *DELAY.get_or_init(|| {
            std::env::var(DELTA_DELAY_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        });
        std::time::Duration::from_millis(ms)
    }

    pub fn handle_peer(&self, req: Request) -> Response {
        match req {
            Request::Heartbeat { from } => self.heartbeat(from as usize),
            Request::Flush { oldest_live_us } => {
                self.oldest_live_us.store(oldest_live_us, Ordering::Relaxed);
                Response::Ack
            }
            Request::Agent(op) => Response::Agent(self.agent(op)),
            req => {
                if matches!(req, Request::Commit(_)) {
                    self.counters
                        .whole_commits_answered
                        .fetch_add(1, Ordering::Relaxed);
                }
                // The store is let go before a listing's records are made.
                let answer = answer_chunk_or_listing(&mut lock(&self.store), req);
                answer.unwrap_or_else(listing_response)
            }
        }
    }

    /// Stores a record that arrived through an engine plan (a write's chunk), as a peer
    /// `Put` would.
    pub fn put_record(
        &self,
        stripe: u32,
        record: Vec<u8>,
        watermark: u64,
    ) -> Result<(), crate::record::RecordError> {
        lock(&self.store).put(stripe, record, watermark).map(|_| ())
    }

    /// Appends the framed reply to a `Get` of (stripe, position, key, version) with fencing
    /// token `token` (0: none) to `out`; nothing, and the newer token seen, when the store
    /// refuses the term (`ChunkStore::admit`).
    pub fn push_record_frame(
        &self,
        out: &mut Vec<u8>,
        token: u64,
        stripe: u32,
        position: u8,
        key: &[u8],
        version: u64,
    ) -> Result<(), u64> {
        let mut store = lock(&self.store);
        store.admit(stripe, token)?;
        peer::push_record_frame(out, store.get(stripe, position, key, version));
        Ok(())
    }

    /// The record this node holds for (stripe, position, key, version).
    pub fn record(&self, stripe: u32, position: u8, key: &[u8], version: u64) -> Option<Vec<u8>> {
        lock(&self.store)
            .get(stripe, position, key, version)
            .map(|r| r.to_vec())
    }

    /// Chunk requests this member refused for an older term (`cluster::coord`).
    pub fn fenced_out(&self) -> u64 {
        lock(&self.store).fenced_out
    }

    /// Bytes of records this node holds.
    pub fn stored_bytes(&self) -> u64 {
        lock(&self.store).bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record;

    fn list(stripe: u32) -> Request {
        Request::List { stripe }
    }

    /// A member refuses a request of an older term of a stripe, and one with no token once it
    /// has seen a term; other stripes are not affected, and a newer term is admitted.
    #[test]
    fn a_member_refuses_an_older_term() {
        let mut store = ChunkStore::new();
        let refused = |r: &Response| matches!(r, Response::Nack(why) if why.contains("fenced out"));
        // No coordinator: no token, nothing refused.
        assert!(!refused(&answer_chunk(&mut store, list(0))));
        assert!(!refused(&answer_chunk(
            &mut store,
            peer::fenced(7, list(0))
        )));
        assert!(refused(&answer_chunk(&mut store, peer::fenced(6, list(0)))));
        assert!(refused(&answer_chunk(&mut store, list(0))));
        assert!(!refused(&answer_chunk(
            &mut store,
            peer::fenced(7, list(0))
        )));
        assert!(!refused(&answer_chunk(
            &mut store,
            peer::fenced(9, list(0))
        )));
        assert!(refused(&answer_chunk(&mut store, peer::fenced(7, list(0)))));
        assert!(!refused(&answer_chunk(&mut store, list(1))));
        assert!(!refused(&answer_chunk(
            &mut store,
            peer::fenced(2, list(1))
        )));
        let Response::Nack(why) = answer_chunk(&mut store, peer::fenced(8, list(0))) else {
            panic!("refused");
        };
        assert_eq!(why, "stripe 0: term 8 is fenced out by term 9");
    }

    /// A delta of an older term is refused as a record (its location is not stored) but still
    /// applied to the parity page, which must follow the home's page whoever wrote it.
    #[test]
    fn a_fenced_out_delta_still_changes_the_parity_page() {
        let mut store = ChunkStore::with_page_bytes(4096);
        store.set_code(codes::Kernel::reference(), "rs:2,1".parse().unwrap());
        let record = record::encode(
            &record::Header {
                kind: record::Kind::Whole,
                chunk_index: 2,
                written_around: false,
                key: b"k".to_vec(),
                version: 5,
                value_bytes: 3,
                flags: 0,
                exptime: 0,
                trail: [0; record::TRAIL],
            },
            &[0; record::WholeAt::BYTES],
        );
        let delta = |seq| Request::Delta {
            stripe: 0,
            watermark: 0,
            record: record.clone(),
            page_stripe: 0,
            position: 2,
            page: 0,
            data: 1,
            seq,
            committed: 0,
            commits: Vec::new(),
            offset: 8,
            delta: vec![0xff; 4].into(),
        };
        assert!(matches!(
            answer_chunk(&mut store, peer::fenced(9, list(0))),
            Response::Headers(..)
        ));
        let r = answer_chunk(&mut store, peer::fenced(3, delta(1)));
        assert!(
            matches!(&r, Response::Nack(why) if why.contains("fenced out")),
            "{r:?}"
        );
        let (seqs, bytes) = store.range((0, 2, 0), 0, 16).unwrap();
        assert_eq!(
            seqs,
            vec![0, 1],
            "the delta of data position 1 applied once"
        );
        assert!(bytes[8..12].iter().all(|&b| b != 0) && bytes[..8].iter().all(|&b| b == 0));
        assert!(
            store.get(0, 2, b"k", 5).is_none(),
            "no location record stored"
        );
        // Admitted: the record is stored too.
        assert_eq!(
            answer_chunk(&mut store, peer::fenced(9, delta(2))),
            Response::Ack
        );
        assert!(store.get(0, 2, b"k", 5).is_some());
    }
}
