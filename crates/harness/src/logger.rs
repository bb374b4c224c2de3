//! The logger of the `inec` binary. The libraries report what the user should know through the
//! `log` facade and never print; this writes their records to stderr, one line each.
//!
//! Levels: `warn` and `error` by default, `info` with `-v`, `debug` with `-vv`, `trace` with
//! `-vvv`. `RUST_LOG`, when set, takes precedence: a comma-separated list of directives, each a
//! level (`debug`: every target) or `target=level` (`cache::node=debug`: that module and the ones
//! below it; the longest matching target wins); `off` silences. A warning or an error is
//! written as its message alone (the lines the libraries wrote to stderr before they logged);
//! the other levels name their level and target.

use log::{LevelFilter, Log, Metadata, Record};
use std::io::Write;

/// A level for every target below a prefix (`None`: every target).
#[derive(Debug, PartialEq)]
struct Directive {
    target: Option<String>,
    level: LevelFilter,
}

#[derive(Debug)]
struct Stderr {
    directives: Vec<Directive>,
}

impl Stderr {
    /// The level `target` is logged at: the directive with the longest matching target.
    fn level(&self, target: &str) -> LevelFilter {
        self.directives
            .iter()
            .filter(|d| match &d.target {
                None => true,
                Some(t) => is_below(target, t),
            })
            .max_by_key(|d| d.target.as_ref().map_or(0, |t| t.len() + 1))
            .map_or(LevelFilter::Warn, |d| d.level)
    }
}

/// `target` is `prefix` or a module below it.
fn is_below(target: &str, prefix: &str) -> bool {
    target
        .strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata) -> bool {
        metadata.level() <= self.level(metadata.target())
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let line = match record.level() {
            log::Level::Error | log::Level::Warn => format!("{}\n", record.args()),
            level => format!(
                "[{} {}] {}\n",
                level.as_str().to_ascii_lowercase(),
                record.target(),
                record.args()
            ),
        };
        // One write per record, so that the lines of concurrent threads do not interleave; a
        // closed stderr loses the line, as eprintln! would have panicked instead.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The level of `-v` repeated `verbose` times.
fn level_of_verbosity(verbose: u8) -> LevelFilter {
    match verbose {
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    }
}

/// The directives of `RUST_LOG`'s value; a directive that does not parse is left out and
/// named in the second list.
fn parse(spec: &str) -> (Vec<Directive>, Vec<String>) {
    let mut directives = Vec::new();
    let mut bad = Vec::new();
    for d in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let parsed = match d.split_once('=') {
            Some((target, level)) => level.trim().parse().ok().map(|level| Directive {
                target: Some(target.trim().to_string()),
                level,
            }),
            // A bare level, or a bare target (everything of that target).
            None => Some(match d.parse() {
                Ok(level) => Directive {
                    target: None,
                    level,
                },
                Err(_) => Directive {
                    target: Some(d.to_string()),
                    level: LevelFilter::Trace,
                },
            }),
        };
        match parsed {
            Some(directive) => directives.push(directive),
            None => bad.push(d.to_string()),
        }
    }
    (directives, bad)
}

/// The directives of `-v` given `verbose` times and then of `RUST_LOG`'s value `spec`, and the
/// directives of `spec` that do not parse.
fn directives(verbose: u8, spec: Option<&str>) -> (Vec<Directive>, Vec<String>) {
    let mut directives = vec![Directive {
        target: None,
        level: level_of_verbosity(verbose),
    }];
    let (parsed, bad) = parse(spec.unwrap_or(""));
    // A bare level in RUST_LOG replaces the one of -v.
    if parsed.iter().any(|d| d.target.is_none()) {
        directives.clear();
    }
    directives.extend(parsed);
    (directives, bad)
}

/// Installs the logger: the level of `-v` given `verbose` times, then `RUST_LOG`'s directives.
/// Called once, first thing in `main`.
pub fn init(verbose: u8) {
    let spec = std::env::var("RUST_LOG").ok();
    let (directives, bad) = directives(verbose, spec.as_deref());
    let max = directives
        .iter()
        .map(|d| d.level)
        .max()
        .unwrap_or(LevelFilter::Warn);
    // The logger lives as long as the process.
    if log::set_logger(Box::leak(Box::new(Stderr { directives }))).is_ok() {
        log::set_max_level(max);
    }
    for d in bad {
        log::warn!("RUST_LOG: ignored `{d}` (not a level, a target or target=level)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logger(spec: &str, verbose: u8) -> Stderr {
        let (directives, bad) = directives(verbose, Some(spec));
        assert!(bad.is_empty(), "{bad:?}");
        Stderr { directives }
    }

    #[test]
    fn warn_by_default_raised_by_v() {
        assert_eq!(logger("", 0).level("cache::node"), LevelFilter::Warn);
        assert_eq!(logger("", 1).level("cache::node"), LevelFilter::Info);
        assert_eq!(logger("", 2).level("cache::node"), LevelFilter::Debug);
        assert_eq!(logger("", 7).level("cache::node"), LevelFilter::Trace);
    }

    #[test]
    fn rust_log_directives_longest_target_wins() {
        let l = logger("info,cache=debug,cache::node=off", 0);
        assert_eq!(l.level("engine::host"), LevelFilter::Info);
        assert_eq!(l.level("cache::carrier::plans"), LevelFilter::Debug);
        assert_eq!(l.level("cache::node"), LevelFilter::Off);
        assert_eq!(l.level("cache::node::loop"), LevelFilter::Off);
        // A prefix of a name is not its parent.
        assert_eq!(l.level("cachex"), LevelFilter::Info);
        // Without a bare level, -v's stays for the other targets.
        let l = logger("engine", 1);
        assert_eq!(l.level("engine::host"), LevelFilter::Trace);
        assert_eq!(l.level("cache"), LevelFilter::Info);
    }

    #[test]
    fn a_directive_that_does_not_parse_is_named() {
        let (parsed, bad) = parse("warn, engine=loud ,cache=Debug");
        assert_eq!(bad, vec!["engine=loud".to_string()]);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[1].level, LevelFilter::Debug);
    }
}
