//! Files as erasure-coded chunk files: what `inec encode`, `inec decode` and `inec verify` do,
//! as a library over `Read`/`Write`.
//!
//! The byte format is [`chunk_file`] (specified in `docs/chunk-format.md`), pure and without
//! I/O; the rest of this crate is the I/O around it:
//!
//! - [`encode::encode_stream`]: a byte stream of known length to n chunk streams;
//! - [`ChunkSet`]: the chunk files of one encoded file as found (the header most files agree
//!   on, which chunk each file holds, which are missing or unusable and why);
//! - [`decode::decode_stream`]: a chunk set back to the bytes, rebuilding what is missing or
//!   damaged, checked end to end against the whole-file CRC32C;
//! - [`verify::verify`]: every record read, the data decoded without being written, the parity
//!   compared with the data, and the one inconsistent chunk named when there is one;
//! - [`ChunkDir`] and [`AtomicFile`]: chunk directories and outputs on disk, written under
//!   temporary names and renamed into place only when complete.
//!
//! Every loop works stripe by stripe with buffers of at most n · `chunk_bytes` (at most
//! [`MAX_STRIPE_BUFFER_BYTES`], allocated fallibly), so memory does not grow with the file.
#![forbid(unsafe_code)]

mod buf;
pub mod check;
pub mod chunk_file;
pub mod decode;
pub mod dir;
pub mod encode;
mod error;
mod set;
mod stripe;
pub mod verify;

pub use decode::{decode_stream, DecodeMode, DecodeReport};
pub use dir::{AtomicFile, ChunkDir, EncodeOutcome};
pub use encode::{check_params, encode_stream, EncodeSummary};
pub use error::FileError;
pub use set::{name_list, Candidate, ChunkSet, Damage, Source};
pub use verify::{verify, ChunkState, Status, VerifyReport};

/// Most memory the stripe buffers of an encode may take: n · `chunk_bytes` (4 GiB).
pub const MAX_STRIPE_BUFFER_BYTES: u64 = 4 << 30;
