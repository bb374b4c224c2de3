//! Why a benchmark could not run or could not finish.

use std::io;

/// An error of the benchmarks. The binary reports it; nothing here is retried.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file, a process or a pipe failed; `what` says which.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Code(#[from] codes::CodeError),
    #[error(transparent)]
    Kernel(#[from] gf::KernelError),
    #[error(transparent)]
    Engine(#[from] engine::EngineError),
    #[error(transparent)]
    Plan(#[from] graph::PlanError),
    /// The settings (flags) ask for something this run cannot do.
    #[error("{0}")]
    Settings(String),
    /// A library under test, or the Go peer, failed or misbehaved.
    #[error("{library}: {message}")]
    Library { library: String, message: String },
    /// One library's call failed its check (the caller names the library).
    #[error("{0}")]
    Check(String),
    /// Why a library cannot run a cell (the cell is left out for it).
    #[error("{0}")]
    Unsupported(&'static str),
    /// Libraries whose output was wrong (each already reported).
    #[error("{count} verification failure(s)")]
    Verification { count: usize },
    /// The cluster the benchmark runs on (its state, its nodes, what a plan left on them).
    #[error("{0}")]
    Cluster(String),
    /// iperf3, the raw-transport baseline.
    #[error("iperf3: {0}")]
    Iperf(String),
    /// Starting, stopping or watching the processes under test (caches, memcached).
    #[error(transparent)]
    Harness(#[from] harness::Error),
    /// The load generator itself (the servers' failures are counted, not errors).
    #[error(transparent)]
    Load(#[from] load::LoadError),
    /// A run that went to its end but failed what it checks: wrong or missing values, a kill,
    /// a restart or a recovery that did not happen.
    #[error("{0}")]
    Failed(String),
    /// What was being done when `source` happened.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl BenchError {
    /// An I/O error, with what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
        let what = what.into();
        move |source| BenchError::Io { what, source }
    }

    /// A failure of `library`.
    pub fn library(library: impl Into<String>, message: impl Into<String>) -> BenchError {
        BenchError::Library {
            library: library.into(),
            message: message.into(),
        }
    }
}

impl From<io::Error> for BenchError {
    fn from(source: io::Error) -> BenchError {
        BenchError::Io {
            what: "I/O".into(),
            source,
        }
    }
}

/// Says what was being done when an error happened ([`BenchError::Context`]).
pub trait Context<T> {
    fn context(self, what: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.with_context(|| what)
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| BenchError::Context {
            what: what().into(),
            source: Box::new(e),
        })
    }
}

/// A [`BenchError::Settings`] of the formatted message: flags this run cannot take.
macro_rules! settings {
    ($($arg:tt)*) => {
        $crate::BenchError::Settings(format!($($arg)*))
    };
}

/// Returns a [`BenchError::Settings`] of the formatted message.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err(settings!($($arg)*))
    };
}

/// A [`BenchError::Failed`] of the formatted message: the run failed what it checks.
macro_rules! failure {
    ($($arg:tt)*) => {
        $crate::BenchError::Failed(format!($($arg)*))
    };
}

/// `Result` with [`BenchError`].
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
