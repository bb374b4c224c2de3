//! The engine's own control messages ([`crate::channel::Port::Engine`]): what a plan runner
//! asks a host to do with plans, and the host's replies. JSON bodies (see
//! [`crate::channel::encode_json`]); `docs/wire.md` lists them.
//!
//! A plan is installed once per node as a **template** ([`Request::Install`]: that node's
//! vertex parts) and then started any number of times by one small [`Request::Start`] per
//! node, which carries the template id, the mode, the run's tag (the operation id every frame
//! of the run carries) and an opaque application payload (the binary data after the JSON),
//! which the host hands to its [`crate::Application`] to find the run's inputs and place its
//! outputs. Each node answers a `Start` with one [`Reply::Done`] when its part has finished.

use serde::{Deserialize, Serialize};

use crate::engine::Mode;
use crate::transport::NodeId;
use graph::part::VertexPart;

/// A runner's request to a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// The cluster's nodes and addresses; the host connects to every peer with a smaller id.
    Peers {
        peers: Vec<(NodeId, String)>,
    },
    /// Remember this node's vertices of a plan under `template` (replacing an earlier one).
    Install {
        template: u64,
        parts: Vec<VertexPart>,
    },
    /// Forget a template.
    Uninstall {
        template: u64,
    },
    /// Run the installed `template` as operation `op` (the run's tag), with the binary data
    /// after the JSON as the application payload. Answered with `Done` when this node's part
    /// has finished, or failed (the host gives up after `timeout_ms`).
    Start {
        template: u64,
        op: u64,
        mode: Mode,
        timeout_ms: u64,
        /// This run's chunk size when it differs from the template's (the coefficients hold
        /// for any size: the codes are linear byte by byte). A part of one slice keeps one
        /// slice; a sliced part keeps its slice size.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        chunk_bytes: Option<u64>,
        /// Answer `Done` only if the part fails: the run's launcher learns of its success
        /// from the data it receives.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        quiet: bool,
    },
    Ping,
    Shutdown,
}

/// A host's reply to a [`Request`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    Ok,
    /// This node's part of run `op` finished (`error: None`) or failed.
    Done {
        op: u64,
        error: Option<String>,
    },
    Error {
        message: String,
    },
}
