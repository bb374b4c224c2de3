//! Why an encode, decode or verify of chunk files failed.

use std::io;
use std::path::PathBuf;

use crate::chunk_file::ChunkFileError;
use codes::CodeError;

/// An error of this crate. Every variant names what was being done; none leaves a file under a
/// final name (see [`crate::dir`]).
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// A file-system call on a named path failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// Reading the input or writing an output stream failed.
    #[error("{what}: {source}")]
    Stream {
        what: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Format(#[from] ChunkFileError),
    #[error(transparent)]
    Code(#[from] CodeError),
    /// A buffer could not be allocated (the allocation is fallible: no abort).
    #[error("cannot allocate {bytes} bytes for {what}: {reason}")]
    Alloc {
        bytes: usize,
        what: &'static str,
        reason: String,
    },
    /// n · `chunk_bytes` is above [`crate::MAX_STRIPE_BUFFER_BYTES`].
    #[error(
        "chunk size {chunk_bytes} with {n} chunks per stripe ({code}) needs stripe buffers of \
         {bytes} bytes, over the limit of {max} bytes (4 GiB); use a smaller chunk size"
    )]
    StripeBuffersTooLarge {
        chunk_bytes: usize,
        n: usize,
        code: String,
        bytes: u64,
        max: u64,
    },
    #[error("the input shrank while being encoded (expected {expected} bytes, got {got})")]
    InputShrank { expected: u64, got: u64 },
    #[error("the input grew while being encoded (expected {expected} bytes)")]
    InputGrew { expected: u64 },
    #[error("{} is not a regular file", .0.display())]
    NotARegularFile(PathBuf),
    #[error("{} exists and is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("directory {} does not exist", .0.display())]
    NoSuchDirectory(PathBuf),
    /// Encoding into a directory that holds chunk files, without `replace`.
    #[error("{} already holds chunk files ({names})", dir.display())]
    ChunkFilesExist { dir: PathBuf, names: String },
    #[error("no chunk files (chunk-000, chunk-001, …) in {}", .0.display())]
    NoChunkFiles(PathBuf),
    /// Chunk files exist but none has a valid header.
    #[error("no readable chunk file in {}:{details}", dir.display())]
    NoReadableChunkFile { dir: PathBuf, details: String },
    /// The usable chunk files form a pattern the code cannot recover.
    #[error(
        "cannot decode: {unusable} of {n} chunk files of {code} are unusable, a pattern the \
         code cannot recover:{details}"
    )]
    Unrecoverable {
        unusable: usize,
        n: usize,
        code: String,
        details: String,
    },
    /// One stripe has too few good records.
    #[error("cannot decode stripe {stripe} of {stripes}: {source}{details}")]
    StripeUnrecoverable {
        stripe: u64,
        stripes: u64,
        source: Box<CodeError>,
        details: String,
    },
    /// Every record checksum passed but the chunks of a stripe disagree, and no single chunk
    /// explains it.
    #[error(
        "stripe {stripe} of {stripes}: the parity ({parity}) differs from the data although \
         every record checksum passed, and no single chunk explains it (written wrongly, or \
         chunks of different encodes)"
    )]
    StripeInconsistent {
        stripe: u64,
        stripes: u64,
        parity: String,
    },
    /// The decoded bytes do not match the whole-file CRC32C of the headers.
    #[error(
        "decoded data fails the end-to-end check: crc32c {computed:#010x}, the chunk headers \
         record {recorded:#010x}{hint}"
    )]
    ContentMismatch {
        computed: u32,
        recorded: u32,
        hint: String,
    },
}

impl FileError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> FileError {
        let path = path.into();
        move |source| FileError::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn stream(what: &'static str) -> impl FnOnce(io::Error) -> FileError {
        move |source| FileError::Stream { what, source }
    }
}
