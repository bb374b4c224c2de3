//! The chunk store: the [`Application`] of a plain `inec node`. It keeps chunks in memory by
//! [`ChunkRef`]; a run reads its local chunks from it and leaves its outputs in it, under the
//! chunk references written in the plan parts (the `Start` payload is not used). Its messages
//! ([`Port::App`], JSON bodies): [`StoreRequest`] `store` (the chunk's bytes follow the JSON),
//! `fetch`, `delete`; replies [`StoreReply`]. The runner side is
//! [`PlanRunner::store`](crate::PlanRunner::store) and its neighbours.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::channel::{self, Port, MAX_CONTROL_BINARY_BYTES};
use crate::host::{AppError, Application, HostCtx, RunInfo};
use crate::runner::PlanRunner;
use crate::transport::{NodeId, Payload};
use crate::EngineError;
use graph::part::ChunkRef;

/// A request to a chunk store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StoreRequest {
    /// Keep the binary data as `chunk`.
    Store { chunk: ChunkRef },
    /// Send back a stored chunk.
    Fetch { chunk: ChunkRef },
    /// Forget stored chunks (missing ones are ignored).
    Delete { chunks: Vec<ChunkRef> },
}

/// A chunk store's reply.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StoreReply {
    Ok,
    /// The chunk's bytes follow as binary data.
    Chunk {
        chunk: ChunkRef,
    },
    Error {
        message: String,
    },
}

/// Chunks kept in memory.
#[derive(Debug, Default)]
pub struct ChunkStore {
    chunks: HashMap<ChunkRef, Arc<Vec<u8>>>,
}

impl ChunkStore {
    pub fn get(&self, chunk: ChunkRef) -> Option<&Arc<Vec<u8>>> {
        self.chunks.get(&chunk)
    }

    /// Keeps `bytes` as `chunk`; the buffer it replaces goes back to the pool when nothing
    /// else uses it, so that repeated runs reuse their output buffers.
    pub fn keep(&mut self, ctx: &HostCtx, chunk: ChunkRef, bytes: Arc<Vec<u8>>) {
        if let Some(old) = self.chunks.insert(chunk, bytes) {
            Payload::Shared(old, 0..0).recycle(ctx.pool());
        }
    }

    fn handle(&mut self, ctx: &HostCtx, req: StoreRequest, binary: &[u8]) -> (StoreReply, &[u8]) {
        let node = ctx.node();
        match req {
            StoreRequest::Store { chunk } => {
                let mut v = ctx.pool().take(binary.len());
                v.copy_from_slice(binary);
                self.keep(ctx, chunk, Arc::new(v));
                (StoreReply::Ok, &[])
            }
            StoreRequest::Fetch { chunk } => match self.chunks.get(&chunk) {
                Some(bytes) if bytes.len() > MAX_CONTROL_BINARY_BYTES => {
                    let message = format!(
                        "node {node}: chunk {}/{} has {} bytes, more than one control message \
                         carries ({MAX_CONTROL_BINARY_BYTES})",
                        chunk.stripe,
                        chunk.index,
                        bytes.len()
                    );
                    (StoreReply::Error { message }, &[])
                }
                Some(bytes) => (StoreReply::Chunk { chunk }, bytes.as_slice()),
                None => {
                    let message = format!(
                        "node {node}: chunk {}/{} is not stored here",
                        chunk.stripe, chunk.index
                    );
                    (StoreReply::Error { message }, &[])
                }
            },
            StoreRequest::Delete { chunks } => {
                for c in chunks {
                    if let Some(old) = self.chunks.remove(&c) {
                        Payload::Shared(old, 0..0).recycle(ctx.pool());
                    }
                }
                (StoreReply::Ok, &[])
            }
        }
    }
}

impl Application for ChunkStore {
    fn input(
        &mut self,
        ctx: &HostCtx,
        _run: &RunInfo,
        chunk: ChunkRef,
    ) -> Result<Arc<Vec<u8>>, AppError> {
        self.chunks.get(&chunk).cloned().ok_or_else(|| {
            AppError::new(format!(
                "node {}: chunk {}/{} is not stored here",
                ctx.node(),
                chunk.stripe,
                chunk.index
            ))
        })
    }

    fn output(
        &mut self,
        ctx: &HostCtx,
        _run: &RunInfo,
        chunk: ChunkRef,
        bytes: Arc<Vec<u8>>,
    ) -> Result<(), AppError> {
        self.keep(ctx, chunk, bytes);
        Ok(())
    }

    fn message(&mut self, ctx: &HostCtx, from: NodeId, req: u64, body: &[u8]) {
        match channel::decode_json::<StoreRequest>(body) {
            Err(e) => ctx.reply_json(
                from,
                req,
                &StoreReply::Error {
                    message: e.to_string(),
                },
                &[],
            ),
            Ok((request, binary)) => {
                let (reply, data) = self.handle(ctx, request, binary);
                ctx.reply_json(from, req, &reply, data);
            }
        }
    }
}

/// Fails on an error reply of a chunk store.
fn check_store_reply(r: &channel::Reply) -> Result<(), EngineError> {
    match r.json::<StoreReply>()?.0 {
        StoreReply::Error { message } => Err(EngineError::Remote {
            node: r.from,
            message,
        }),
        _ => Ok(()),
    }
}

impl PlanRunner {
    /// Sends chunk-store requests (with their binary data) and waits for every reply.
    pub fn store_requests(
        &mut self,
        reqs: Vec<(NodeId, StoreRequest, Vec<u8>)>,
        timeout: Duration,
    ) -> Result<Vec<(StoreReply, Vec<u8>)>, EngineError> {
        let pool = self.engine().pool().clone();
        let msgs = reqs
            .into_iter()
            .map(|(node, req, bin)| Ok((node, channel::encode_json(Port::App, &req, &bin, &pool)?)))
            .collect::<Result<Vec<_>, EngineError>>()?;
        let replies = self
            .channel()
            .exchange(msgs, timeout, &mut check_store_reply)?;
        replies
            .into_iter()
            .map(|r| {
                let (reply, bin) = r.json::<StoreReply>()?;
                let out = (reply, bin.to_vec());
                r.recycle(&pool);
                Ok(out)
            })
            .collect()
    }

    /// Stores chunks on nodes.
    pub fn store(&mut self, chunks: Vec<(NodeId, ChunkRef, Vec<u8>)>) -> Result<(), EngineError> {
        let reqs = chunks
            .into_iter()
            .map(|(node, chunk, bytes)| (node, StoreRequest::Store { chunk }, bytes))
            .collect();
        self.store_requests(reqs, Duration::from_secs(60))
            .map(|_| ())
    }

    /// Forgets chunks on nodes.
    pub fn delete(&mut self, chunks: Vec<(NodeId, ChunkRef)>) -> Result<(), EngineError> {
        let mut by_node: HashMap<NodeId, Vec<ChunkRef>> = HashMap::new();
        for (n, c) in chunks {
            by_node.entry(n).or_default().push(c);
        }
        let reqs = by_node
            .into_iter()
            .map(|(node, chunks)| (node, StoreRequest::Delete { chunks }, Vec::new()))
            .collect();
        self.store_requests(reqs, Duration::from_secs(10))
            .map(|_| ())
    }

    /// Reads a chunk back.
    pub fn fetch(&mut self, node: NodeId, chunk: ChunkRef) -> Result<Vec<u8>, EngineError> {
        let mut r = self.store_requests(
            vec![(node, StoreRequest::Fetch { chunk }, Vec::new())],
            Duration::from_secs(60),
        )?;
        Ok(r.pop().expect("one reply").1)
    }

    /// Stores the chunks of a stripe with the standard placement of the tests and benchmarks:
    /// chunk i on node i + 1, and the `k` data chunks also on the agent, node 0.
    pub fn store_stripe(
        &mut self,
        stripe: u64,
        chunks: &[Vec<u8>],
        k: usize,
    ) -> Result<(), EngineError> {
        let mut puts = Vec::new();
        for (i, c) in chunks.iter().enumerate() {
            let chunk = ChunkRef {
                stripe,
                index: i as u32,
            };
            puts.push(((i + 1) as NodeId, chunk, c.clone()));
            if i < k {
                puts.push((0, chunk, c.clone()));
            }
        }
        self.store(puts)
    }
}
