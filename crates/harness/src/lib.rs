//! The processes inec's commands, benchmarks and tests start and watch: local inec caches
//! ([`cache`]: `inec cache up|down|restart|status`, and [`cache::InecCache`], a cache a
//! program starts, crashes, restarts and watches recover), clusters of engine nodes
//! ([`cluster`]: `inec cluster up|down|status`), network namespaces with rate-limited links
//! ([`netns`]), memcached ([`memcached`]), and the pids of them all ([`process`]); and what a
//! command shows on the terminal while it runs: progress bars ([`progress`]) and the log lines
//! of the libraries ([`logger`]); and what a test does when a tool it needs is missing
//! ([`skip`]).
//!
//! The `inec` executable the nodes run is always passed in (`exe`): the CLI passes its own,
//! a test the one cargo built for it.
#![forbid(unsafe_code)]

pub mod cache;
pub mod cluster;
pub mod etcd;
pub mod logger;
pub mod memcached;
pub mod netns;
pub mod process;
pub mod progress;
pub mod skip;

pub use memcached::{ask, parse_stats, Memcached, MemcachedOptions};
pub use process::{pid_alive, pids_naming, resident_bytes, sigkill};

/// What went wrong starting, stopping or watching a process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A program the harness runs is not installed.
    #[error("{0} is missing (Debian package memcached; scripts/test-all installs it)")]
    Missing(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{what} did not accept connections within {secs} s")]
    NotReady { what: String, secs: u64 },
    /// A command or a process that failed, with what it said.
    #[error("{what} failed: {detail}")]
    Failed { what: String, detail: String },
    /// Settings that cannot work (a bad code, a node that does not exist, a cache already up).
    #[error("{0}")]
    Usage(String),
    /// Anything else, said in full.
    #[error("{0}")]
    Other(String),
    #[error("node {node} (pid {pid}) still runs after SIGKILL")]
    StillRunning { node: usize, pid: u32 },
    /// A test that must fail because `tool` is missing (CI, or `INEC_REQUIRE_TOOLS=1`;
    /// [`skip`]).
    #[error(
        "{test} cannot run: {tool} is missing; it needs {package} (CI or INEC_REQUIRE_TOOLS=1: a \
         missing tool fails the test; scripts/test-all installs what it can)"
    )]
    ToolRequired {
        test: String,
        tool: String,
        package: String,
    },
    #[error("the cache did not recover within {secs} s (last status: {last})")]
    NotRecovered { secs: u64, last: String },
    /// What was being done when `source` happened.
    #[error("{what}")]
    Context {
        what: String,
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    /// `self` as the cause of a failure of `what`.
    pub fn context(self, what: impl Into<String>) -> Error {
        Error::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }

    /// Whether this error or one of its causes says `text`.
    pub fn mentions(&self, text: &str) -> bool {
        let mut e: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(x) = e {
            if x.to_string().contains(text) {
                return true;
            }
            e = x.source();
        }
        false
    }

    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}
